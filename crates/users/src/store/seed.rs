//! The demo accounts of the published system (spec §6.1), created on first start when the user
//! table is empty. The password is the operator's choice (or a generated one the caller prints
//! once); it is never a constant in the code.

use super::users::Writes;
use super::{begin, on_conn, retry_transient, Store, StoreError};
use crate::model::{EnergySource, PaymentMethod, Role, Vehicle, VehicleType};
use crate::validate::NewUser;

/// One demo account: names, e-mail, role, NIF, vehicles and payment method.
struct Account {
    first: &'static str,
    last: &'static str,
    email: &'static str,
    role: Role,
    nif: i64,
    vehicles: &'static [(&'static str, VehicleType, EnergySource)],
    payment: PaymentMethod,
}

use EnergySource::{Electric, Fuel};
use VehicleType::{Automobile, Motorcycle};

const ACCOUNTS: &[Account] = &[
    Account {
        first: "Paulo",
        last: "Gandra",
        email: "supervisor@isep.ipp.pt",
        role: Role::Supervisor,
        nif: 123_123_123,
        vehicles: &[("AA-20-CC", Automobile, Fuel)],
        payment: PaymentMethod::NotDefined,
    },
    Account {
        first: "Park",
        last: "Manager",
        email: "parkmanager@isep.ipp.pt",
        role: Role::ParkManager,
        nif: 123_123_124,
        vehicles: &[("BB-20-CC", Automobile, Fuel)],
        payment: PaymentMethod::NotDefined,
    },
    Account {
        first: "Customer",
        last: "Manager",
        email: "customermanager@isep.ipp.pt",
        role: Role::CustomerManager,
        nif: 123_123_125,
        vehicles: &[("CC-20-CC", Motorcycle, Fuel)],
        payment: PaymentMethod::NotDefined,
    },
    Account {
        first: "Leo",
        last: "Kim",
        email: "leoKim@isep.ipp.pt",
        role: Role::Customer,
        nif: 501_776_508,
        vehicles: &[("55-ND-41", Automobile, Electric)],
        payment: PaymentMethod::Paypal,
    },
    Account {
        first: "Maya",
        last: "Gupta",
        email: "mayaGupta@isep.ipp.pt",
        role: Role::Customer,
        nif: 506_779_330,
        vehicles: &[
            ("19-SJ-63", Automobile, Fuel),
            ("AH-43-MR", Automobile, Electric),
        ],
        payment: PaymentMethod::Paypal,
    },
    Account {
        first: "Rui",
        last: "Soares",
        email: "ruiSoares@isep.ipp.pt",
        role: Role::Customer,
        nif: 514_884_112,
        vehicles: &[
            ("46-ON-05", Automobile, Fuel),
            ("32-VT-07", Automobile, Fuel),
            ("28-XQ-51", Automobile, Fuel),
        ],
        payment: PaymentMethod::Paypal,
    },
];

/// The demo accounts' e-mail addresses and roles, in id order (for banners and docs).
pub fn demo_accounts() -> impl Iterator<Item = (&'static str, Role)> {
    ACCOUNTS.iter().map(|a| (a.email, a.role))
}

impl Store {
    /// Creates the demo accounts, all with `password_hash`, when there are no users yet.
    /// Returns whether it seeded.
    ///
    /// # Errors
    /// Database failures.
    pub async fn seed_if_empty(&self, password_hash: &str) -> Result<bool, StoreError> {
        retry_transient(|| self.seed_once(password_hash)).await
    }

    /// All accounts in one transaction: a failure leaves the database empty, so the next start
    /// seeds again.
    async fn seed_once(&self, password_hash: &str) -> Result<bool, sqlx::Error> {
        on_conn!(self, |conn| async {
            let mut tx = begin(conn).await?;
            // Replicas starting at once: one seeds, the others wait here, then find it done.
            if self.backend() == pms_service::store::Backend::Postgres {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(pms_service::store::SEED_LOCK_KEY)
                    .execute(&mut *tx)
                    .await?;
            }
            // Writing first takes SQLite's write lock before the emptiness check reads.
            sqlx::query("UPDATE users SET parkies = parkies WHERE id = 0")
                .execute(&mut *tx)
                .await?;
            let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users")
                .fetch_one(&mut *tx)
                .await?;
            if users > 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            for a in ACCOUNTS {
                let new = NewUser {
                    first_name: a.first.into(),
                    last_name: a.last.into(),
                    email: a.email.into(),
                    password: String::new(),
                    nif: a.nif,
                    vehicle: vehicle(&a.vehicles[0]),
                    payment_method: a.payment,
                    invitation_code: None,
                };
                let id = tx.insert_user(&new, password_hash, a.role, None).await?;
                for (seq, v) in (1..).zip(a.vehicles) {
                    tx.insert_vehicle(id, &vehicle(v), seq).await?;
                }
                sqlx::query("UPDATE users SET vehicle_count = $1 WHERE id = $2")
                    .bind(i64::try_from(a.vehicles.len()).unwrap_or(3))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.announce(id, "customer.registered").await?;
            }
            tx.commit().await?;
            Ok(true)
        }
        .await)
    }
}

fn vehicle(&(plate, t, e): &(&str, VehicleType, EnergySource)) -> Vehicle {
    Vehicle {
        license_plate_number: plate.into(),
        vehicle_type: t,
        vehicle_energy_source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate;

    #[test]
    fn demo_data_passes_the_same_rules_as_registrations() {
        for a in ACCOUNTS {
            validate::email(a.email).unwrap();
            assert!(
                !a.vehicles.is_empty() && a.vehicles.len() <= 3,
                "{}",
                a.email
            );
            for (plate, _, _) in a.vehicles {
                assert_eq!(validate::plate(plate).unwrap(), *plate);
            }
        }
        assert_eq!(demo_accounts().count(), 6);
    }
}
