use serde_json::json;

use super::*;
use crate::model::{EnergySource, PaymentMethod, VehicleType};

/// A body as the kit's `JsonBody` reads it: the field of a wrong type named.
fn read<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, FieldError> {
    pms_service::body::read(&v)
}

fn registration() -> serde_json::Value {
    json!({
        "firstName": "John", "lastName": "Doe", "email": "john.doe@isep.ipp.pt",
        "password": "123PasswordX#", "accountNumber": "1234567890", "nif": 123456789,
        "licensePlateNumber": "AB-12-AA", "vehicleType": "AUTOMOBILE",
        "vehicleEnergySource": "FUEL", "paymentMethod": "NOT_DEFINED"
    })
}

fn field_of(v: serde_json::Value) -> String {
    new_user(v).unwrap_err().field.into_owned()
}

#[test]
fn the_published_registration_is_accepted() {
    let u = new_user(registration()).unwrap();
    assert_eq!(u.nif, 123_456_789);
    assert_eq!(u.vehicle.license_plate_number, "AB-12-AA");
    assert_eq!(u.vehicle.vehicle_type, VehicleType::Automobile);
    assert_eq!(u.vehicle.vehicle_energy_source, EnergySource::Fuel);
    assert_eq!(u.payment_method, PaymentMethod::NotDefined);
    assert!(
        !format!("{u:?}").contains("123PasswordX#"),
        "Debug must not show the password"
    );
    let c = read(json!({"email": "a@b.pt", "password": "123PasswordX#"}))
        .map(credentials)
        .unwrap();
    assert!(!format!("{c:?}").contains("123PasswordX#"));
}

#[test]
fn numeric_strings_and_a_missing_payment_method_are_accepted() {
    let mut v = registration();
    v["nif"] = json!("123456789");
    v.as_object_mut().unwrap().remove("paymentMethod");
    let u = new_user(v).unwrap();
    assert_eq!(u.nif, 123_456_789);
    assert_eq!(u.payment_method, PaymentMethod::NotDefined);
}

#[test]
fn each_bad_field_is_named() {
    let cases: &[(&str, serde_json::Value, &str)] = &[
        ("firstName", json!(""), "firstName"),
        ("lastName", json!(7), "lastName"),
        ("email", json!("not-an-email"), "email"),
        ("email", json!("a@localhost"), "email"),
        ("email", json!("a..b@x.pt"), "email"),
        ("password", json!("short1A#"), "password"),
        ("password", json!("nouppercase#123"), "password"),
        ("password", json!("NOLOWERCASE#123"), "password"),
        ("password", json!("NoSymbolsHere123"), "password"),
        ("password", json!("Has Space#12345"), "password"),
        ("nif", json!(100000000), "nif"),
        ("nif", json!(999999999), "nif"),
        ("nif", json!("12345678x"), "nif"),
        ("nif", json!(true), "nif"),
        ("licensePlateNumber", json!("ABC-123"), "licensePlateNumber"),
        (
            "licensePlateNumber",
            json!("AA-BB-CC"),
            "licensePlateNumber",
        ),
        ("vehicleType", json!("TRUCK"), "vehicleType"),
        ("vehicleEnergySource", json!("fuel"), "vehicleEnergySource"),
        ("paymentMethod", json!("CREDIT_CARD"), "paymentMethod"),
    ];
    for (field, value, expected) in cases {
        let mut v = registration();
        v[*field] = value.clone();
        assert_eq!(field_of(v), *expected, "{field} = {value}");
    }
    let mut v = registration();
    v.as_object_mut().unwrap().remove("email");
    assert_eq!(field_of(v), "email");
}

#[test]
fn password_policy_bounds() {
    assert!(
        password_policy("Abcdefghi_j").is_ok(),
        "11 chars with _ as the symbol"
    );
    assert!(password_policy("Abcdefghi_").is_err(), "10 chars");
    let long = format!("Aa#{}", "x".repeat(PASSWORD_MAX_CHARS - 3));
    assert!(password_policy(&long).is_ok());
    assert!(password_policy(&format!("{long}x")).is_err());
}

#[test]
fn plates_take_the_four_portuguese_shapes() {
    for ok in [
        "AA-20-CC", "55-ND-41", "19-SJ-63", "46-ON-05", "AB-12-34", "12-34-AB",
    ] {
        assert!(plate(ok).is_ok(), "{ok}");
    }
    assert_eq!(plate(" zz-45-xa ").unwrap(), "ZZ-45-XA");
    for bad in [
        "12-34-56",
        "AB-CD-EF",
        "A1-23-45",
        "AB-12-3",
        "AB1234",
        "AB-12-34-56",
        "",
    ] {
        assert!(plate(bad).is_err(), "{bad}");
    }
}

#[test]
fn payment_method_never_goes_back_to_not_defined() {
    assert_eq!(
        read(json!({"paymentMethod": "DEBIT"}))
            .and_then(payment_change)
            .unwrap()
            .payment_method,
        PaymentMethod::Debit
    );
    let e = read(json!({"paymentMethod": "NOT_DEFINED"}))
        .and_then(payment_change)
        .unwrap_err();
    assert_eq!(e.field, "paymentMethod");
    assert!(read(json!({})).and_then(payment_change).is_err());
}

#[test]
fn grants_dedupe_ids_and_bound_amounts() {
    let g = read(
        json!({"userIds": [4, "5", 4], "amount": "50", "reason": " For outstanding contributions "}),
    ).and_then(grant)
    .unwrap();
    assert_eq!(g.user_ids, vec![4, 5]);
    assert_eq!(g.amount, 50);
    assert_eq!(g.reason, "For outstanding contributions");
    assert_eq!(
        read(json!({"userIds": [1], "amount": -10, "reason": "x"}))
            .and_then(grant)
            .unwrap()
            .amount,
        -10,
        "deductions are grants with a negative amount"
    );
    for (body, field) in [
        (json!({"amount": 1, "reason": "x"}), "userIds"),
        (
            json!({"userIds": [], "amount": 1, "reason": "x"}),
            "userIds",
        ),
        (
            json!({"userIds": [1.5], "amount": 1, "reason": "x"}),
            "userIds",
        ),
        (
            json!({"userIds": [-10], "amount": 1, "reason": "x"}),
            "userIds",
        ),
        (
            json!({"userIds": [1], "amount": 0, "reason": "x"}),
            "amount",
        ),
        (
            json!({"userIds": [1], "amount": null, "reason": "x"}),
            "amount",
        ),
        (
            json!({"userIds": [1], "amount": 1, "reason": "  "}),
            "reason",
        ),
        // A NUL reached the database's length check as a 500 (found by fuzzing).
        (
            json!({"userIds": [1], "amount": 1, "reason": "\u{0}loyalty"}),
            "reason",
        ),
        (
            json!({"userIds": [1], "amount": 1, "reason": "line\nbreak"}),
            "reason",
        ),
    ] {
        assert_eq!(
            read(body.clone()).and_then(grant).unwrap_err().field,
            field,
            "{body}"
        );
    }
}

#[test]
fn user_id_params_are_positive_integers() {
    assert_eq!(user_id_param("42").unwrap(), 42);
    // A body's `4.0` is user 4, and an OpenAPI link carries it into the path as written.
    assert_eq!(user_id_param("4.0").unwrap(), 4);
    for bad in ["0", "-1", "x", "", "1.5", "0.0"] {
        assert_eq!(user_id_param(bad).unwrap_err().field, "userId");
    }
}

/// The password pattern the API document states (with its length limits) takes exactly the
/// printable ASCII passwords the policy takes.
#[test]
fn the_documented_password_pattern_is_the_policy() {
    use proptest::prelude::*;
    use utoipa::PartialSchema;
    let schema = serde_json::to_value(NewUser::schema()).expect("schema");
    let pattern = schema["allOf"][1]["properties"]["password"]["pattern"]
        .as_str()
        .expect("a password pattern")
        .to_owned();
    let re = regex::Regex::new(&pattern).expect("a pattern Rust's regex reads");
    let documented =
        |p: &str| (PASSWORD_MIN_CHARS..=PASSWORD_MAX_CHARS).contains(&p.len()) && re.is_match(p);
    for p in [
        "123PasswordX#",
        "short#A1a",
        "nouppercase#123",
        "NoSymbol12345",
        "With Space#1x",
    ] {
        assert_eq!(documented(p), password_policy(p).is_ok(), "{p:?}");
    }
    proptest!(|(p in "[ -~]{8,20}")| {
        prop_assert_eq!(documented(&p), password_policy(&p).is_ok(), "{:?}", p);
    });
}
