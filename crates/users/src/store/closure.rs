//! Closing an account at its customer's request: everything this service holds of the person
//! goes in one transaction, and `customer.closed` tells the parks and payments services to erase
//! their copies (`docs/users.md`, "Closing an account").
//!
//! What goes: the user's row (name, e-mail address, tax number, password hash, invitation code)
//! and with it, by the schema's cascades, their vehicles, wallet history and coin debits; their
//! failed logins and idempotency keys; and, in the outbox, the person's data in every
//! `customer.registered` and `customer.changed` about them (events kept for readers that start
//! later: they now say [`CustomerDoc::erased`]). What stays: a `closed_accounts` row (id, when,
//! coins forfeited), so the id is never taken again and the account's fate can be told, and the
//! audit trail's entries, which name the account's number and never the person.

use pms_events::conn::EventConn;
use pms_service::audit::{AuditConn, Entry};
use pms_vocab::customer::{CustomerClosedDoc, CustomerDoc};

use super::users::now_micros;
use super::{begin, on_conn, repeatable, retry_transient, Backend, Store, StoreError};
use crate::model::Role;

/// The events about a customer that carry the person's data, rewritten by a closure.
const STATE_EVENTS: &[&str] = &["customer.registered", "customer.changed"];

/// A closure done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// The account closed.
    pub user_id: i64,
    /// When, µs since the epoch.
    pub closed_at_us: i64,
    /// The coins the wallet held, which went with it.
    pub coins_forfeited: i64,
}

impl Store {
    /// The e-mail address of user `user_id`'s account (a closure confirms the password on it).
    ///
    /// # Errors
    /// [`StoreError::AccountClosed`] for an account closed before; [`StoreError::UserNotFound`]
    /// for an id no account ever had; database failures.
    pub async fn email_of(&self, user_id: i64) -> Result<String, StoreError> {
        let (email, closed): (Option<String>, Option<i64>) = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT (SELECT email FROM users WHERE id = $1), \
                        (SELECT user_id FROM closed_accounts WHERE user_id = $1)",
            )
            .bind(user_id)
            .fetch_one(&mut *conn)
            .await
        })
        .map_err(super::db_error)?;
        match (email, closed) {
            (Some(email), _) => Ok(email),
            (None, Some(_)) => Err(StoreError::AccountClosed(user_id)),
            (None, None) => Err(StoreError::UserNotFound(user_id)),
        }
    }

    /// Closes customer `user_id`'s account (the caller confirmed it is theirs): see the module
    /// documentation for what goes and what stays. All or nothing.
    ///
    /// # Errors
    /// [`StoreError::AccountClosed`] when it was closed already; [`StoreError::UserNotFound`];
    /// [`StoreError::NotACustomer`] for a staff account; database failures.
    pub async fn close_account(&self, user_id: i64) -> Result<Closed, StoreError> {
        retry_transient(|| self.close_account_once(user_id)).await?
    }

    async fn close_account_once(
        &self,
        user_id: i64,
    ) -> Result<Result<Closed, StoreError>, sqlx::Error> {
        // Locked on PostgreSQL, so a grant, a debit or a vehicle added meanwhile is ordered
        // before the closure or finds no account after it (SQLite has one writer).
        let lock = if self.backend() == Backend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        on_conn!(self, |conn| async {
            let mut tx = begin(conn).await?;
            let account: Option<(String, String, i64, i64)> = sqlx::query_as(&format!(
                "SELECT email, role, parkies, vehicle_count FROM users WHERE id = $1{lock}"
            ))
            .bind(user_id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((email, role, coins, vehicles)) = account else {
                let closed: Option<i64> =
                    sqlx::query_scalar("SELECT user_id FROM closed_accounts WHERE user_id = $1")
                        .bind(user_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                tx.rollback().await?;
                return Ok(Err(match closed {
                    Some(_) => StoreError::AccountClosed(user_id),
                    None => StoreError::UserNotFound(user_id),
                }));
            };
            if role != Role::Customer.as_str() {
                tx.rollback().await?;
                return Ok(Err(StoreError::NotACustomer(user_id)));
            }
            let now = now_micros();
            sqlx::query("DELETE FROM login_failures WHERE email = lower($1)")
                .bind(&email)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM idempotency_keys WHERE caller_id = $1")
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
            let erased = serde_json::to_string(&CustomerDoc::erased(user_id, Role::Customer))
                .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            tx.replace_payloads("customer", &user_id.to_string(), STATE_EVENTS, &erased)
                .await?;
            // Stays set aside here (read for the coins they earned, which go with the wallet).
            tx.erase_parked(user_id, &["visit.opened", "visit.closed"])
                .await?;
            // Vehicles, wallet history and coin debits go with the row (ON DELETE CASCADE);
            // customers this one invited keep their accounts (ON DELETE SET NULL).
            sqlx::query("DELETE FROM users WHERE id = $1")
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO closed_accounts (user_id, closed_at_us, coins_forfeited) \
                 VALUES ($1, $2, $3)",
            )
            .bind(user_id)
            .bind(now)
            .bind(coins)
            .execute(&mut *tx)
            .await?;
            let closed_at = jiff::Timestamp::from_microsecond(now)
                .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            let event = pms_events::NewEvent::new(
                "customer",
                user_id,
                "customer.closed",
                1,
                &CustomerClosedDoc { user_id, closed_at },
            )
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            tx.append(&event).await?;
            let entry = Entry::new(user_id, "account.closed", format!("user {user_id}"))
                .before(&serde_json::json!({"parkies": coins, "vehicles": vehicles}))
                .after(&serde_json::json!({"closed": true, "coinsForfeited": coins}));
            tx.audit(&entry).await?;
            tx.commit().await?;
            Ok(Ok(Closed {
                user_id,
                closed_at_us: now,
                coins_forfeited: coins,
            }))
        }
        .await)
    }
}
