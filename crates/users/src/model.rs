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
