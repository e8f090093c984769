//! Request bodies and their rules (spec §4.3, with the original's holes closed). Each body is a
//! type read by the kit's `JsonBody` (which names a field of the wrong type); each function
//! here is pure: it takes a body as read and returns it as the rules want it, or a
//! [`FieldError`] naming the offending field. Storage-level rules (uniqueness, at most three vehicles, balances)
//! are the store's; HTTP status codes are [`crate::http::error`]'s.
//!
//! Numbers are accepted as JSON numbers or numeric strings (`"123456789"`), as the original
//! service's JSON mapper accepted them; enumerations only by their exact names.

use pms_vocab::fields::integer;
use pms_vocab::lenient;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::{PaymentMethod, UserStatus, Vehicle};

/// Shortest password accepted.
pub const PASSWORD_MIN_CHARS: usize = 11;
/// Longest password accepted (the original capped at 19; this cap only bounds hashing work).
pub const PASSWORD_MAX_CHARS: usize = 128;
/// Longest e-mail address (RFC 5321 path limit).
pub const EMAIL_MAX: usize = 254;
/// Longest first or last name.
pub const NAME_MAX_CHARS: usize = 100;
/// Longest grant reason.
pub const REASON_MAX_CHARS: usize = 500;
/// Most user ids in one PARKY grant.
pub const MAX_GRANT_USERS: usize = 1000;
/// Largest absolute PARKY amount in one grant.
pub const MAX_GRANT_AMOUNT: i64 = 1_000_000;

pub use pms_vocab::FieldError;

fn bad(field: &'static str, message: impl Into<String>) -> FieldError {
    FieldError::new(field, message)
}

/// `POST /users/createUser`. Its `Debug` output never shows the password. Its schema is the
/// JSON body [`new_user`] reads (the vehicle's fields sit beside the user's).
#[derive(Clone, PartialEq, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(
    description = "A registration: the user and their first vehicle, side by side. Numbers may \
        also be sent as numeric strings.",
    example = json!({
    "firstName": "Ana", "lastName": "Silva", "email": "ana@example.com",
    "password": "Parking-2026!", "nif": 123456789,
    "licensePlateNumber": "AA-20-CC", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL",
    "paymentMethod": "CREDIT"
}))
]
pub struct NewUser {
    /// First name, trimmed; not blank, no control characters.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    #[serde(deserialize_with = "lenient::string")]
    pub first_name: String,
    /// Last name, trimmed; not blank, no control characters.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    #[serde(deserialize_with = "lenient::string")]
    pub last_name: String,
    /// E-mail as given (trimmed); uniqueness ignores case.
    #[schema(
        max_length = 254,
        example = "ana@example.com",
        pattern = r"^(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}$"
    )]
    #[serde(deserialize_with = "lenient::string")]
    pub email: String,
    /// Plain-text password: 11 to 128 characters, no spaces, with a lower-case and an upper-case
    /// letter and a symbol; hashed before it goes anywhere.
    // The three "contains" rules are written as the six orders the characters can come in, not
    // as lookaheads: generators such as Schemathesis's can only filter for a lookahead, which
    // made its boundary phase for a registration about 65 s longer on 2 cores.
    #[schema(
        min_length = 11,
        max_length = 128,
        pattern = r"^(?:\S*[a-z]\S*[A-Z]\S*[!-/:-@\[-`{-~]\S*|\S*[a-z]\S*[!-/:-@\[-`{-~]\S*[A-Z]\S*|\S*[A-Z]\S*[a-z]\S*[!-/:-@\[-`{-~]\S*|\S*[A-Z]\S*[!-/:-@\[-`{-~]\S*[a-z]\S*|\S*[!-/:-@\[-`{-~]\S*[a-z]\S*[A-Z]\S*|\S*[!-/:-@\[-`{-~]\S*[A-Z]\S*[a-z]\S*)$"
    )]
    #[serde(deserialize_with = "lenient::string")]
    pub password: String,
    /// Tax number (nine digits).
    #[schema(exclusive_minimum = 100_000_000, exclusive_maximum = 999_999_999)]
    #[serde(deserialize_with = "lenient::integer")]
    pub nif: i64,
    /// The first vehicle.
    #[serde(flatten)]
    pub vehicle: Vehicle,
    /// Payment method (`NOT_DEFINED` when absent).
    #[schema(required = false)]
    #[serde(default = "not_defined", deserialize_with = "method_or_not_defined")]
    pub payment_method: PaymentMethod,
    /// A customer's invitation code (from their wallet), when they invited this one: they earn
    /// coins when this customer's first visit closes.
    #[schema(
        required = false,
        pattern = "^[0-9A-Fa-f]{10}$",
        example = "3F9A0C1B7E"
    )]
    #[serde(default)]
    pub invitation_code: Option<String>,
}

/// `POST /users/login`. Its `Debug` output never shows the password.
#[derive(Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[schema(
    description = "Login credentials.",
    example = json!({"email": "supervisor@isep.ipp.pt", "password": "the demo password"})
)]
pub struct Credentials {
    /// E-mail.
    #[serde(deserialize_with = "lenient::string")]
    pub email: String,
    /// Plain-text password.
    #[serde(deserialize_with = "lenient::string")]
    pub password: String,
}

impl std::fmt::Debug for NewUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewUser")
            .field("email", &self.email)
            .field("nif", &self.nif)
            .field("vehicle", &self.vehicle)
            .field("password", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("email", &self.email)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `POST /users/parkies`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(
    description = "A grant (or, with a negative amount, a deduction) of PARKY coins to several \
        users at once: all of them or none.",
    example = json!({"userIds": [4, 5], "amount": 10, "reason": "loyalty"})
)]
pub struct Grant {
    /// Recipients (user ids), without duplicates, in the order given.
    #[schema(min_items = 1, max_items = 1000, schema_with = user_ids)]
    #[serde(deserialize_with = "read_user_ids")]
    pub user_ids: Vec<i64>,
    /// Coins per recipient; negative deducts; never zero.
    #[schema(schema_with = grant_amount)]
    #[serde(deserialize_with = "lenient::integer")]
    pub amount: i64,
    /// Why; not blank, no control characters.
    #[schema(schema_with = reason_schema)]
    #[serde(deserialize_with = "lenient::string")]
    pub reason: String,
}

/// The schema of `userIds`: one to [`MAX_GRANT_USERS`] positive ids.
fn user_ids() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Int64,
                )))
                .minimum(Some(1)),
        )
        .min_items(Some(1))
        .max_items(Some(MAX_GRANT_USERS))
        .description(Some(
            "Recipients (user ids), without duplicates, in the order given.",
        ))
        .build()
}

/// The schema of a grant's `amount`: non-zero, at most [`MAX_GRANT_AMOUNT`] either way.
fn grant_amount() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    let range = |min: i64, max: i64| {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(min))
            .maximum(Some(max))
    };
    Schema::OneOf(
        OneOfBuilder::new()
            .item(range(1, MAX_GRANT_AMOUNT))
            .item(range(-MAX_GRANT_AMOUNT, -1))
            .description(Some("Coins per recipient; negative deducts; never zero."))
            .build(),
    )
}

/// Reads and checks a registration (a JSON object): names and e-mail trimmed, the password's
/// policy, the tax number's digits, the plate's shape.
///
/// # Errors
/// The first field that breaks a rule.
pub fn new_user(body: Value) -> Result<NewUser, FieldError> {
    // The vehicle's fields sit beside the user's (`#[serde(flatten)]`), where serde keeps no
    // path to name a bad one by: read alone first, it is named.
    let _: Vehicle = pms_service::body::read(&body)?;
    let new: NewUser = pms_service::body::read(&body)?;
    Ok(NewUser {
        first_name: name(&new.first_name, "firstName")?,
        last_name: name(&new.last_name, "lastName")?,
        email: email(&new.email)?,
        password: {
            password_policy(&new.password)?;
            new.password
        },
        nif: nif(new.nif)?,
        vehicle: vehicle(new.vehicle)?,
        payment_method: new.payment_method,
        invitation_code: new.invitation_code.map(invitation_code).transpose()?,
    })
}

/// An invitation code as given: ten hexadecimal digits, kept upper-case.
///
/// # Errors
/// A [`FieldError`] naming `invitationCode` for anything else.
pub fn invitation_code(code: String) -> Result<String, FieldError> {
    if code.len() == 10 && code.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(code.to_ascii_uppercase())
    } else {
        Err(FieldError::new(
            "invitationCode",
            "must be ten hexadecimal digits, as the inviting customer's wallet shows it",
        ))
    }
}

/// Login credentials as read, the e-mail trimmed. Formats are not checked: a malformed e-mail
/// simply matches nobody.
pub fn credentials(given: Credentials) -> Credentials {
    Credentials {
        email: given.email.trim().to_owned(),
        password: given.password,
    }
}

/// Checks a vehicle read from a body: its plate one of the Portuguese shapes, upper-cased.
///
/// # Errors
/// When the plate has another shape.
pub fn vehicle(given: Vehicle) -> Result<Vehicle, FieldError> {
    Ok(Vehicle {
        license_plate_number: plate(&given.license_plate_number)?,
        ..given
    })
}

/// A payment method a body must give (`null` is "is required").
fn required_method<'de, D: Deserializer<'de>>(d: D) -> Result<PaymentMethod, D::Error> {
    Option::<PaymentMethod>::deserialize(d)?
        .ok_or_else(|| serde::de::Error::custom(pms_vocab::lenient::REQUIRED))
}

/// A registration's payment method: absent or null is `NOT_DEFINED`.
fn method_or_not_defined<'de, D: Deserializer<'de>>(d: D) -> Result<PaymentMethod, D::Error> {
    Ok(Option::<PaymentMethod>::deserialize(d)?.unwrap_or(PaymentMethod::NotDefined))
}

fn not_defined() -> PaymentMethod {
    PaymentMethod::NotDefined
}

/// `PUT /users/paymentMethod/{userId}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(
    description = "A new payment method.",
    example = json!({"paymentMethod": "PAYPAL"})
)]
pub struct PaymentChange {
    /// The method; never `NOT_DEFINED` (a user cannot go back to it).
    #[schema(schema_with = chosen_method)]
    #[serde(deserialize_with = "required_method")]
    pub payment_method: PaymentMethod,
}

/// The schema of a chosen payment method: any but `NOT_DEFINED`.
fn chosen_method() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(
            PaymentMethod::ALL
                .iter()
                .filter(|m| **m != PaymentMethod::NotDefined)
                .map(|m| m.as_str()),
        ))
        .description(Some("The method; a user cannot go back to NOT_DEFINED."))
        .build()
}

/// Checks a payment-method change; `NOT_DEFINED` is refused (a user cannot go back to it).
///
/// # Errors
/// When it is `NOT_DEFINED`.
pub fn payment_change(change: PaymentChange) -> Result<PaymentChange, FieldError> {
    if change.payment_method == PaymentMethod::NotDefined {
        return Err(bad(
            "paymentMethod",
            "cannot be changed back to NOT_DEFINED",
        ));
    }
    Ok(change)
}

/// A grant's recipients as given: an array of whole numbers (numeric strings too).
fn read_user_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Null => Err(D::Error::custom(pms_vocab::lenient::REQUIRED)),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                integer(item).ok_or_else(|| D::Error::custom("every item must be a user id"))
            })
            .collect(),
        _ => Err(D::Error::custom("must be an array of user ids")),
    }
}

/// Checks a PARKY grant read from its body: one to [`MAX_GRANT_USERS`] positive ids (kept once
/// each, in the order given), a non-zero amount within bounds, a printable reason (trimmed).
///
/// # Errors
/// The first field that breaks a rule.
pub fn grant(given: Grant) -> Result<Grant, FieldError> {
    if given.user_ids.is_empty() {
        return Err(bad("userIds", "must name at least one user"));
    }
    if given.user_ids.len() > MAX_GRANT_USERS {
        return Err(bad(
            "userIds",
            format!("at most {MAX_GRANT_USERS} users per grant"),
        ));
    }
    let mut user_ids = Vec::with_capacity(given.user_ids.len());
    for id in given.user_ids {
        if id <= 0 {
            return Err(bad("userIds", "user ids are positive"));
        }
        if !user_ids.contains(&id) {
            user_ids.push(id);
        }
    }
    let amount = given.amount;
    if amount == 0 || amount.abs() > MAX_GRANT_AMOUNT {
        return Err(bad(
            "amount",
            format!("must be non-zero and at most {MAX_GRANT_AMOUNT} either way"),
        ));
    }
    Ok(Grant {
        user_ids,
        amount,
        reason: reason(&given.reason)?,
    })
}

/// A customer's account blocked or unblocked.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(
    description = "A customer's account blocked (with why) or enabled again.",
    example = json!({"status": "BLOCKED", "reason": "Three unpaid visits"})
)]
pub struct StatusChange {
    /// `BLOCKED`: the customer cannot sign in (they are told why) and their cars cannot enter
    /// a park, though a car inside can always leave; `ENABLED`: as before.
    #[schema(schema_with = settable_status)]
    pub status: UserStatus,
    /// Why, for the customer (who is told when blocked) and the record; not blank, no control
    /// characters.
    #[schema(schema_with = reason_schema)]
    #[serde(deserialize_with = "lenient::string")]
    pub reason: String,
}

/// The schema of a status a customer manager sets: `ENABLED` or `BLOCKED`.
fn settable_status() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([
            UserStatus::Enabled.as_str(),
            UserStatus::Blocked.as_str(),
        ]))
        .build()
}

/// Checks a status change: `ENABLED` or `BLOCKED`, and a reason of 1 to [`REASON_MAX_CHARS`]
/// printable characters (trimmed).
///
/// # Errors
/// The field at fault.
pub fn status_change(given: StatusChange) -> Result<StatusChange, FieldError> {
    if given.status == UserStatus::Disabled {
        return Err(bad("status", "must be ENABLED or BLOCKED"));
    }
    Ok(StatusChange {
        status: given.status,
        reason: reason(&given.reason)?,
    })
}

/// A staff member's reason (a grant's, a status change's), trimmed: 1 to [`REASON_MAX_CHARS`]
/// characters, none of them control characters (a NUL once reached the database's length
/// check).
///
/// # Errors
/// Naming `reason`.
fn reason(given: &str) -> Result<String, FieldError> {
    let reason = given.trim();
    let chars = reason.chars().count();
    if chars == 0 || chars > REASON_MAX_CHARS || reason.chars().any(char::is_control) {
        return Err(bad(
            "reason",
            format!("must be 1 to {REASON_MAX_CHARS} printable characters"),
        ));
    }
    Ok(reason.to_owned())
}

/// The schema of a [`reason`]: 1 to [`REASON_MAX_CHARS`] characters, one of them not blank, no
/// control characters.
fn reason_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(REASON_MAX_CHARS))
        .pattern(Some(
            r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$",
        ))
        .description(Some(
            "Why: for the record (and for a blocked customer, who is told); not blank, no \
             control characters.",
        ))
        .build()
}

/// A user id from a path segment ([`pms_vocab::fields::id_param`]: `4.0` is user 4, as in a
/// body).
///
/// # Errors
/// When it is not a positive integer.
pub fn user_id_param(text: &str) -> Result<i64, FieldError> {
    pms_vocab::fields::id_param("userId", text)
}

/// The password policy: 11 to 128 characters, no white space, at least one lower-case letter,
/// one upper-case letter and one symbol (anything not a letter or digit, `_` included).
///
/// # Errors
/// Saying which rule failed (never echoing the password).
pub fn password_policy(password: &str) -> Result<(), FieldError> {
    let chars = password.chars().count();
    if !(PASSWORD_MIN_CHARS..=PASSWORD_MAX_CHARS).contains(&chars) {
        return Err(bad(
            "password",
            format!("must be {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters long"),
        ));
    }
    if password.chars().any(char::is_whitespace) {
        return Err(bad("password", "must not contain spaces"));
    }
    if !password.chars().any(char::is_lowercase) {
        return Err(bad("password", "needs a lower-case letter"));
    }
    if !password.chars().any(char::is_uppercase) {
        return Err(bad("password", "needs an upper-case letter"));
    }
    if password.chars().all(char::is_alphanumeric) {
        return Err(bad("password", "needs a symbol (not a letter or digit)"));
    }
    Ok(())
}

/// E-mail syntax: `local@domain`, a dot-atom local part of at most 64 characters and a domain of
/// at least two DNS labels with an alphabetic top-level label. Returns it trimmed.
///
/// # Errors
/// When it does not look like an address.
pub fn email(text: &str) -> Result<String, FieldError> {
    let text = text.trim();
    let invalid = || bad("email", format!("{text:?} is not a valid e-mail address"));
    if text.len() > EMAIL_MAX {
        return Err(bad("email", format!("longer than {EMAIL_MAX} characters")));
    }
    let (local, domain) = text.rsplit_once('@').ok_or_else(invalid)?;
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+/=?^_`{|}~.-".contains(c));
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        && labels
            .last()
            .is_some_and(|tld| tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic()));
    if local_ok && domain_ok {
        Ok(text.to_owned())
    } else {
        Err(invalid())
    }
}

/// A Portuguese plate (the kit's [`pms_vocab::plate`]), upper-cased.
///
/// # Errors
/// When it has another shape.
pub fn plate(text: &str) -> Result<String, FieldError> {
    pms_vocab::plate(text).map_err(|m| bad("licensePlateNumber", m))
}

fn nif(nif: i64) -> Result<i64, FieldError> {
    if nif > 100_000_000 && nif < 999_999_999 {
        Ok(nif)
    } else {
        Err(bad("nif", "must be a nine-digit tax number"))
    }
}

fn name(given: &str, field: &'static str) -> Result<String, FieldError> {
    let text = given.trim();
    let chars = text.chars().count();
    if chars == 0 || chars > NAME_MAX_CHARS {
        return Err(bad(
            field,
            format!("must be 1 to {NAME_MAX_CHARS} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(bad(field, "must not contain control characters"));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests;
