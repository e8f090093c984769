//! A customer as the users service announces them in `customer.registered` and
//! `customer.changed` (version 1) and as parks and payments keep their copies: one declaration of
//! that contract for the side that writes it and the sides that read it.

use serde::{Deserialize, Serialize};

use crate::words::{EnergySource, Role, UserStatus, VehicleType};

/// A customer as they are now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerDoc {
    /// User id.
    pub user_id: i64,
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
    /// E-mail address.
    pub email: String,
    /// Tax number.
    pub nif: i64,
    /// What the account may do.
    pub role: Role,
    /// Whether the account may log in and its cars enter.
    pub user_status: UserStatus,
    /// How the customer pays (the users service's own names).
    pub payment_method: String,
    /// Every vehicle the customer has now.
    pub vehicles: Vec<VehicleDoc>,
}

/// A vehicle of a customer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VehicleDoc {
    /// Plate.
    pub license_plate_number: String,
    /// Vehicle type.
    pub vehicle_type: VehicleType,
    /// Energy source.
    pub vehicle_energy_source: EnergySource,
}

impl CustomerDoc {
    /// What `customer.registered` and `customer.changed` say of a closed account once its
    /// personal data is erased: its id, its role, no name, address, tax number (0) or vehicles,
    /// and `DISABLED`. A reader that applies it keeps nothing of the person.
    pub fn erased(user_id: i64, role: Role) -> Self {
        Self {
            user_id,
            first_name: String::new(),
            last_name: String::new(),
            email: String::new(),
            nif: 0,
            role,
            user_status: UserStatus::Disabled,
            payment_method: "NOT_DEFINED".to_owned(),
            vehicles: Vec::new(),
        }
    }
}

/// `customer.closed` (version 1): the customer closed their account; every copy of their
/// personal data is to be erased (`docs/users.md`, "Closing an account").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerClosedDoc {
    /// User id.
    pub user_id: i64,
    /// When, RFC 3339 UTC.
    pub closed_at: jiff::Timestamp,
}
