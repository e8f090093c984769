//! The users service's vocabulary: the enumerations (spelled exactly as the published API spells
//! them, and stored as the same readable text) and the JSON shapes it sends and receives. No I/O
//! and no validation beyond "is this one of the names" live here (see [`crate::validate`]).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use pms_vocab::names;
pub use pms_vocab::{EnergySource, Role, UserStatus, VehicleType};

names! {
    /// How a customer pays (a label only; nothing is charged against it).
    PaymentMethod {
        /// Credit card.
        Credit => "CREDIT",
        /// Debit card.
        Debit => "DEBIT",
        /// PayPal.
        Paypal => "PAYPAL",
        /// Not chosen yet; a user can never go back to it.
        NotDefined => "NOT_DEFINED",
    }
}

/// A vehicle as the API shows it.
// Also a body's vehicle as read; `crate::validate::vehicle` checks and upper-cases its plate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"licensePlateNumber": "AA-20-CC", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"}))]
pub struct Vehicle {
    /// Portuguese plate, upper case with dashes (`AA-20-CC`); given in any case.
    #[schema(value_type = pms_service::openapi::Plate)]
    #[serde(deserialize_with = "pms_vocab::lenient::string")]
    pub license_plate_number: String,
    /// Kind of vehicle.
    pub vehicle_type: VehicleType,
    /// Energy source.
    pub vehicle_energy_source: EnergySource,
}

/// A user as `getAllUsers` and `createUser` show it (the published `UserDTO`, field for field
/// and in the same order). No password hash, ever.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserDto {
    /// User id.
    pub id: i64,
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
    /// E-mail address as registered.
    pub email: String,
    /// Tax number.
    pub nif: i64,
    /// Always empty: parking history lives in the parks service.
    #[schema(value_type = Vec<Object>, max_items = 0)]
    pub parking_history: [(); 0],
    /// PARKY balance.
    pub total_parkies: i64,
    /// One to three vehicles, in the order they were added.
    pub vehicles: Vec<Vehicle>,
    /// Role.
    pub role: Role,
    /// Payment method.
    pub payment_method: PaymentMethod,
    /// Account status.
    pub user_status: UserStatus,
}

/// One entry of a PARKY wallet.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParkyEvent {
    /// Event id.
    pub event_id: i64,
    /// Coins granted (positive) or deducted (negative).
    pub amount: i64,
    /// Why.
    pub reason: String,
    /// The customer manager who granted them (`null` once that account is gone).
    pub manager_id: Option<i64>,
    /// When, UTC, as `YYYY-MM-DDTHH:MM:SS.ffffff` (the published layout, no zone suffix).
    #[schema(example = "2026-11-28T18:30:00.000000")]
    pub transaction_time: String,
}

/// A PARKY wallet: balance and history.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Wallet {
    /// Whose wallet.
    pub user_id: i64,
    /// Balance.
    pub parkies: i64,
    /// Every grant and deduction, oldest first.
    pub parky_events: Vec<ParkyEvent>,
    /// The customer's invitation code (not in the original): a friend who registers with it
    /// earns this customer coins when the friend's first visit closes. Absent for staff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invitation_code: Option<String>,
}

/// The answer to a login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Session {
    /// A bearer token for the other endpoints (HS256 or RS256/EdDSA as configured), valid for
    /// the configured lifetime.
    pub token: String,
    /// The user's first name.
    pub name: String,
    /// The user's id (PMS: the published answer had only `token` and `name`, and clients decoded
    /// the token to find it).
    pub id: i64,
    /// The user's role.
    pub role: Role,
}

/// A payment method, as `paymentMethod` endpoints send and answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentMethodBody {
    /// The method; a change to `NOT_DEFINED` is refused.
    pub payment_method: PaymentMethod,
}

/// One row of the top-10 PARKY report.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TopParky {
    /// `"First Last"`.
    pub name: String,
    /// E-mail address.
    pub email: String,
    /// Balance.
    pub parkies: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_reject_others() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(*r));
        }
        assert_eq!(PaymentMethod::parse("CREDIT_CARD"), None);
        assert_eq!(PaymentMethod::parse("credit"), None);
        assert_eq!(
            serde_json::to_string(&EnergySource::PlugInHybrid).unwrap(),
            "\"PLUG_IN_HYBRID\""
        );
        assert_eq!(VehicleType::expected(), "AUTOMOBILE, MOTORCYCLE");
    }

    #[test]
    fn user_dto_has_the_published_keys_in_order() {
        let dto = UserDto {
            id: 1,
            first_name: "Paulo".into(),
            last_name: "Gandra".into(),
            email: "supervisor@isep.ipp.pt".into(),
            nif: 123_123_123,
            parking_history: [],
            total_parkies: 0,
            vehicles: vec![Vehicle {
                license_plate_number: "AA-20-CC".into(),
                vehicle_type: VehicleType::Automobile,
                vehicle_energy_source: EnergySource::Fuel,
            }],
            role: Role::Supervisor,
            payment_method: PaymentMethod::NotDefined,
            user_status: UserStatus::Enabled,
        };
        assert_eq!(
            serde_json::to_string(&dto).unwrap(),
            r#"{"id":1,"firstName":"Paulo","lastName":"Gandra","email":"supervisor@isep.ipp.pt","nif":123123123,"parkingHistory":[],"totalParkies":0,"vehicles":[{"licensePlateNumber":"AA-20-CC","vehicleType":"AUTOMOBILE","vehicleEnergySource":"FUEL"}],"role":"SUPERVISOR","paymentMethod":"NOT_DEFINED","userStatus":"ENABLED"}"#
        );
    }
}

/// An account's status as a customer manager set it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusSet {
    /// The account.
    pub user_id: i64,
    /// Its status now.
    pub status: UserStatus,
    /// Why, as given.
    pub reason: String,
    /// Whether this request changed it (`false`: it was so already).
    pub changed: bool,
}

/// `closeAccount`'s body: the account's password, so that a token alone (left on a shared
/// screen, say) cannot close it.
/// Its `Debug` output never shows the password.
#[derive(Clone, Deserialize, ToSchema)]
#[schema(example = json!({"password": "the account's password"}))]
pub struct ClosureRequest {
    /// The account's password.
    #[serde(deserialize_with = "pms_vocab::lenient::string")]
    pub password: String,
}

impl std::fmt::Debug for ClosureRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClosureRequest")
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Something kept of a closed account, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Kept {
    /// What.
    pub what: &'static str,
    /// Why it is kept, and for how long.
    pub why: &'static str,
}

/// What closing an account did: what was erased, what was kept and why (the customer is told).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Closure {
    /// The account closed; the number is never given to another.
    pub user_id: i64,
    /// When, RFC 3339 UTC.
    #[schema(example = "2026-12-06T18:30:00.123456Z")]
    pub closed_at: String,
    /// The PARKY coins the wallet held, which went with it.
    pub coins_forfeited: i64,
    /// What was erased, in this service now and in the parks and payments services' copies as
    /// they read the closure.
    pub erased: Vec<&'static str>,
    /// What was kept, and why.
    pub kept: Vec<Kept>,
}

impl Closure {
    /// What erasure means in PMS, said to the customer whose account `user_id` closed at
    /// `closed_at` with `coins_forfeited` coins.
    pub fn told(user_id: i64, closed_at: String, coins_forfeited: i64) -> Self {
        Self {
            user_id,
            closed_at,
            coins_forfeited,
            erased: vec![
                "Your name, e-mail address, tax number (NIF), password and invitation code.",
                "Your vehicles and their plates, including in the parks' records of your stays.",
                "Your PARKY wallet and its history; the coins in it are forfeited.",
                "The copies of your details that the parks and payments services keep, and the \
                 events that carried them between the services.",
            ],
            kept: vec![
                Kept {
                    what: "Invoices",
                    why: "Tax law requires invoices to be kept as issued, with the tax number and \
                          plate they name, for 10 years. A car of yours still in a park can \
                          leave as usual; its stay is invoiced when it leaves and kept likewise, \
                          and its plate is erased from the park's records a few minutes later.",
                },
                Kept {
                    what: "Your stays, without your plate",
                    why: "A park's occupancy and reports count them; they no longer name you or \
                          your vehicle.",
                },
                Kept {
                    what: "The audit trail's entries about your account",
                    why: "Staff actions stay accountable; the entries name your account's \
                          number, never you.",
                },
            ],
        }
    }
}
