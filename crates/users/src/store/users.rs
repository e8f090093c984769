//! The users service's queries. Each public method is one API operation: one round trip for
//! reads, one transaction for writes (run again when it loses a lock race, see
//! `retry_transient` in the parent module). Rows become model types here; JSON is the HTTP layer's business.

use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::TryStreamExt;
use sqlx::{ColumnIndex, Decode, Row, Type};

use super::pool::Outcome;
use super::{
    begin, classify, db_error, is_check_on, on_conn, repeatable, retry_transient, with_pool,
    Backend, Store, StoreError,
};
use crate::model::{
    EnergySource, ParkyEvent, PaymentMethod, Role, TopParky, UserDto, UserStatus, Vehicle,
    VehicleType, Wallet,
};
use crate::throttle;
use crate::validate::{Grant, NewUser};
use pms_service::audit::{AuditConn, Entry};
use pms_service::idempotency::{self, Earlier, Idempotent};
use pms_vocab::customer::{CustomerDoc, VehicleDoc};

/// The answer to a grant made: `201 true`, as published.
pub const GRANTED: (http::StatusCode, &str) = (http::StatusCode::CREATED, "true");

/// How a grant went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    /// Made now; its answer is [`GRANTED`].
    Now,
    /// Made before under the same idempotency key: that request's answer, nothing changed.
    Before {
        /// Its status.
        status: u16,
        /// Its JSON body.
        body: String,
    },
}

/// Which slice of the user list to return (always in id order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Most users; `None` for all.
    pub limit: Option<i64>,
    /// Users to skip.
    pub offset: i64,
}

impl Page {
    /// Every user.
    pub const ALL: Page = Page {
        limit: None,
        offset: 0,
    };
}

/// What login needs to know about an account.
#[derive(Debug, Clone)]
pub struct LoginRecord {
    /// User id (the token's `sub`).
    pub id: i64,
    /// Stored argon2 PHC string.
    pub password_hash: String,
    /// Role (the token's `role`).
    pub role: Role,
    /// Only `ENABLED` accounts may log in.
    pub status: UserStatus,
    /// Why the account is not enabled, as staff said.
    pub status_reason: Option<String>,
    /// Returned as `name` by login.
    pub first_name: String,
}

/// A login's view of an e-mail address: its account, if any, and its failed logins.
#[derive(Debug, Clone)]
pub struct LoginAttempt {
    /// The account with that address.
    pub account: Option<LoginRecord>,
    /// Failed logins in a row (0 when none are on record).
    pub failures: i64,
    /// When the last one was, ms since the epoch.
    pub last_failure_ms: i64,
    /// Until when further attempts are refused, ms since the epoch (0: not held).
    pub held_until_ms: i64,
}

/// The user columns followed by one vehicle's, for `users u LEFT JOIN vehicles v`.
const USER_COLUMNS: &str = "u.id, u.first_name, u.last_name, u.email, u.nif, u.parkies, u.role, \
     u.payment_method, u.status, v.plate, v.vehicle_type, v.energy_source";

/// Where the vehicle columns start in [`USER_COLUMNS`].
const VEHICLE_AT: usize = 9;

// === impl Store ===

impl Store {
    /// Inserts a user and their first vehicle, returning the user as the API shows it.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] naming the taken e-mail, NIF or plate; database failures.
    pub async fn create_user(
        &self,
        new: &NewUser,
        password_hash: &str,
        role: Role,
    ) -> Result<UserDto, StoreError> {
        let invited_by = match &new.invitation_code {
            None => None,
            Some(code) => Some(self.inviter(code).await?),
        };
        let id =
            retry_transient(|| self.create_user_once(new, password_hash, role, invited_by)).await?;
        Ok(UserDto {
            id,
            first_name: new.first_name.clone(),
            last_name: new.last_name.clone(),
            email: new.email.clone(),
            nif: new.nif,
            parking_history: [],
            total_parkies: 0,
            vehicles: vec![new.vehicle.clone()],
            role,
            payment_method: new.payment_method,
            user_status: UserStatus::Enabled,
        })
    }

    async fn create_user_once(
        &self,
        new: &NewUser,
        password_hash: &str,
        role: Role,
        invited_by: Option<i64>,
    ) -> Result<i64, sqlx::Error> {
        on_conn!(self, |conn| async {
            let mut tx = begin(conn).await?;
            let id = tx.insert_user(new, password_hash, role, invited_by).await?;
            tx.insert_vehicle(id, &new.vehicle, 1).await?;
            tx.announce(id, "customer.registered").await?;
            tx.commit().await?;
            Ok(id)
        }
        .await)
    }

    /// The account behind an e-mail address (compared ignoring case), if any, and the address's
    /// failed logins: one round trip.
    ///
    /// # Errors
    /// Database failures.
    pub async fn login_record(&self, email: &str) -> Result<LoginAttempt, StoreError> {
        repeatable!(self, |conn| sqlx::query(
            "SELECT u.id, u.password_hash, u.role, u.status, u.first_name, \
                    f.failures, f.last_failure_ms, f.held_until_ms, u.status_reason \
             FROM (SELECT lower($1) AS email) k \
             LEFT JOIN users u ON lower(u.email) = k.email \
             LEFT JOIN login_failures f ON f.email = k.email",
        )
        .bind(email)
        .fetch_one(conn)
        .await
        .and_then(|r| {
            let account = match r.opt_int(0)? {
                Some(id) => Some(LoginRecord {
                    id,
                    password_hash: r.text(1)?,
                    role: r.name(2, Role::parse)?,
                    status: r.name(3, UserStatus::parse)?,
                    status_reason: r.opt_text(8)?,
                    first_name: r.text(4)?,
                }),
                None => None,
            };
            Ok(LoginAttempt {
                account,
                failures: r.opt_int(5)?.unwrap_or(0),
                last_failure_ms: r.opt_int(6)?.unwrap_or(0),
                held_until_ms: r.opt_int(7)?.unwrap_or(0),
            })
        }))
        .map_err(db_error)
    }

    /// Counts a failed login for `email` at `now_ms` (a failure more than
    /// [`throttle::FORGET_AFTER`] after the last one starts the count over) and holds the
    /// address as [`throttle::hold_after`] says. Returns the failures in a row and the end of the
    /// hold (0 for none).
    ///
    /// # Errors
    /// Database failures.
    pub async fn login_failed(&self, email: &str, now_ms: i64) -> Result<(i64, i64), StoreError> {
        let forget = i64::try_from(throttle::FORGET_AFTER.as_millis()).unwrap_or(i64::MAX);
        // One transaction: concurrent failures for one address each count, and the hold is the
        // one the count says.
        let (failures, until) = retry_transient(|| async {
            on_conn!(self, |conn| async {
                let mut tx = begin(conn).await?;
                let failures: i64 = sqlx::query_scalar(
                    "INSERT INTO login_failures (email, failures, last_failure_ms) \
                     VALUES (lower($1), 1, $2) \
                     ON CONFLICT (email) DO UPDATE SET \
                         failures = CASE WHEN login_failures.last_failure_ms < $3 THEN 1 \
                                         ELSE login_failures.failures + 1 END, \
                         last_failure_ms = $2 \
                     RETURNING failures",
                )
                .bind(email)
                .bind(now_ms)
                .bind(now_ms.saturating_sub(forget))
                .fetch_one(&mut *tx)
                .await?;
                let hold = throttle::hold_after(u32::try_from(failures).unwrap_or(u32::MAX));
                let until = if hold.is_zero() {
                    0
                } else {
                    now_ms.saturating_add(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX))
                };
                sqlx::query("UPDATE login_failures SET held_until_ms = $2 WHERE email = lower($1)")
                    .bind(email)
                    .bind(until)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok((failures, until))
            }
            .await)
        })
        .await?;
        if failures == 1 {
            // A new address (or one whose count started over): addresses that have not failed
            // for a day go, so that failures spread over many addresses cannot grow the table.
            self.forget_stale_failures(now_ms).await?;
        }
        Ok((failures, until))
    }

    /// Forgets `email`'s failed logins: it logged in.
    ///
    /// # Errors
    /// Database failures.
    pub async fn login_succeeded(&self, email: &str) -> Result<(), StoreError> {
        repeatable!(self, |conn| sqlx::query(
            "DELETE FROM login_failures WHERE email = lower($1)"
        )
        .bind(email)
        .execute(conn)
        .await
        .map(|r| r.rows_affected()))
        .map_err(db_error)?;
        Ok(())
    }

    /// Forgets the failed logins of addresses that have not failed for a day.
    async fn forget_stale_failures(&self, now_ms: i64) -> Result<(), StoreError> {
        let stale = now_ms.saturating_sub(24 * 3600 * 1000);
        repeatable!(self, |conn| sqlx::query(
            "DELETE FROM login_failures WHERE last_failure_ms < $1"
        )
        .bind(stale)
        .execute(conn)
        .await
        .map(|r| r.rows_affected()))
        .map_err(db_error)?;
        Ok(())
    }

    /// Calls `each` with every user of `page`, in id order, vehicles included: one query,
    /// streamed, never the whole list in memory as rows.
    ///
    /// # Errors
    /// Database failures (after `each` may have seen some users).
    pub async fn for_each_user(
        &self,
        page: Page,
        mut each: impl FnMut(UserDto),
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {USER_COLUMNS} FROM \
             (SELECT * FROM users ORDER BY id LIMIT $1 OFFSET $2) u \
             LEFT JOIN vehicles v ON v.user_id = u.id ORDER BY u.id, v.added_seq"
        );
        with_pool!(self, |pool| {
            let mut may_retry = true;
            loop {
                let mut conn = pool.get().await.map_err(db_error)?;
                let reused = conn.reused();
                let mut read_any = false;
                let done: Result<(), StoreError> = async {
                    let mut rows = sqlx::query(&sql)
                        .bind(page.limit.unwrap_or(i64::MAX))
                        .bind(page.offset)
                        .fetch(&mut *conn);
                    let mut current: Option<UserDto> = None;
                    while let Some(row) = rows.try_next().await.map_err(db_error)? {
                        read_any = true;
                        let id = row.int(0).map_err(db_error)?;
                        let user = match &mut current {
                            Some(u) if u.id == id => u,
                            _ => {
                                if let Some(done) = current.take() {
                                    each(done);
                                }
                                current.insert(user_from_row(&row).map_err(db_error)?)
                            }
                        };
                        if let Some(v) = vehicle_from_row(&row, VEHICLE_AT).map_err(db_error)? {
                            user.vehicles.push(v);
                        }
                    }
                    if let Some(done) = current {
                        each(done);
                    }
                    Ok(())
                }
                .await;
                // As `repeatable!`, but only while no row came: `each` must not see a user twice.
                let broken = matches!(&done, Err(e) if e.breaks_connection());
                let done = conn.settle(done);
                if broken && reused && !read_any && std::mem::take(&mut may_retry) {
                    continue;
                }
                return done;
            }
        })
    }

    /// Adds a vehicle to a user (at most three; plates are unique across users).
    ///
    /// # Errors
    /// [`StoreError::UserNotFound`], [`StoreError::TooManyVehicles`], [`StoreError::Conflict`]
    /// for a taken plate; database failures.
    pub async fn add_vehicle(&self, user_id: i64, vehicle: &Vehicle) -> Result<(), StoreError> {
        retry_transient(|| self.add_vehicle_once(user_id, vehicle)).await?
    }

    async fn add_vehicle_once(
        &self,
        user_id: i64,
        vehicle: &Vehicle,
    ) -> Result<Result<(), StoreError>, sqlx::Error> {
        on_conn!(self, |conn| async {
            let mut tx = begin(conn).await?;
            // The checked counter takes the user's row lock first, so two concurrent additions
            // cannot both see room for a third vehicle.
            let seq: Option<i64> = match sqlx::query_scalar(
                "UPDATE users SET vehicle_count = vehicle_count + 1 WHERE id = $1 \
                 RETURNING vehicle_count",
            )
            .bind(user_id)
            .fetch_optional(&mut *tx)
            .await
            {
                Ok(seq) => seq,
                Err(e) if is_check_on(&e, "vehicle_count") => {
                    tx.rollback().await?;
                    return Ok(Err(StoreError::TooManyVehicles));
                }
                Err(e) => return Err(e),
            };
            let Some(seq) = seq else {
                tx.rollback().await?;
                return Ok(Err(StoreError::UserNotFound(user_id)));
            };
            if let Err(e) = tx.insert_vehicle(user_id, vehicle, seq).await {
                return match classify(&e) {
                    conflict @ StoreError::Conflict { .. } => {
                        tx.rollback().await?;
                        Ok(Err(conflict))
                    }
                    _ => Err(e),
                };
            }
            tx.announce(user_id, "customer.changed").await?;
            tx.commit().await?;
            Ok(Ok(()))
        }
        .await)
    }

    /// A user's vehicles in the order they were added; `None` when the user does not exist.
    ///
    /// # Errors
    /// Database failures.
    pub async fn vehicles(&self, user_id: i64) -> Result<Option<Vec<Vehicle>>, StoreError> {
        let vehicles = repeatable!(self, |conn| sqlx::query(
            "SELECT v.plate, v.vehicle_type, v.energy_source FROM users u \
             LEFT JOIN vehicles v ON v.user_id = u.id WHERE u.id = $1 ORDER BY v.added_seq",
        )
        .bind(user_id)
        .fetch_all(conn)
        .await
        .and_then(|rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                if let Some(v) = vehicle_from_row(r, 0)? {
                    out.push(v);
                }
            }
            Ok(Some(out))
        }))
        .map_err(db_error)?;
        Ok(vehicles)
    }

    /// A user's payment method; `None` when the user does not exist.
    ///
    /// # Errors
    /// Database failures.
    pub async fn payment_method(&self, user_id: i64) -> Result<Option<PaymentMethod>, StoreError> {
        repeatable!(self, |conn| sqlx::query(
            "SELECT payment_method FROM users WHERE id = $1"
        )
        .bind(user_id)
        .fetch_optional(conn)
        .await
        .and_then(|row| row
            .map(|r| r.name(0, PaymentMethod::parse))
            .transpose()))
        .map_err(db_error)
    }

    /// Sets a user's payment method.
    ///
    /// # Errors
    /// [`StoreError::UserNotFound`]; database failures.
    pub async fn set_payment_method(
        &self,
        user_id: i64,
        method: PaymentMethod,
    ) -> Result<(), StoreError> {
        self.set_name_column("payment_method", method.as_str(), user_id)
            .await
    }

    /// Blocks a customer's account or enables it again, with why, by staff member `by`: the
    /// status, its reason, who and when, and `customer.changed` (the parks service refuses a
    /// blocked customer's cars at its entrances) in one transaction. Returns whether it changed
    /// (the same status and reason again changes nothing and announces nothing).
    ///
    /// # Errors
    /// [`StoreError::UserNotFound`]; [`StoreError::NotACustomer`] for a staff account;
    /// database failures.
    pub async fn set_status(
        &self,
        user_id: i64,
        status: UserStatus,
        reason: &str,
        by: i64,
    ) -> Result<bool, StoreError> {
        retry_transient(|| async {
            on_conn!(self, |conn| async {
                let mut tx = begin(conn).await?;
                // How it was, for the audit trail (locked on PostgreSQL: SQLite has one writer).
                let lock = if self.backend() == Backend::Postgres {
                    " FOR UPDATE"
                } else {
                    ""
                };
                let before: Option<(String, Option<String>)> = sqlx::query_as(&format!(
                    "SELECT status, status_reason FROM users WHERE id = $1{lock}"
                ))
                .bind(user_id)
                .fetch_optional(&mut *tx)
                .await?;
                // A reason is never empty (the column's CHECK), so '' stands for none (an
                // account never given one): the same status and reason again matches nothing.
                // The row's lock orders two changes at once; the second sees the first's result.
                let changed: Option<i64> = sqlx::query_scalar(
                    "UPDATE users SET status = $1, status_reason = $2, status_changed_by = $3, \
                     status_changed_at_us = $4 \
                     WHERE id = $5 AND role = 'CUSTOMER' \
                     AND NOT (status = $1 AND COALESCE(status_reason, '') = COALESCE($2, '')) \
                     RETURNING id",
                )
                .bind(status.as_str())
                .bind(reason)
                .bind(by)
                .bind(now_micros())
                .bind(user_id)
                .fetch_optional(&mut *tx)
                .await?;
                if changed.is_some() {
                    tx.announce(user_id, "customer.changed").await?;
                    let action = match status {
                        UserStatus::Blocked => "customer.blocked",
                        _ => "customer.enabled",
                    };
                    let (was, why) = before.unwrap_or_default();
                    let entry = Entry::new(by, action, format!("user {user_id}"))
                        .before(&serde_json::json!({"status": was, "reason": why}))
                        .after(&serde_json::json!({"status": status.as_str(), "reason": reason}));
                    tx.audit(&entry).await?;
                    tx.commit().await?;
                    return Ok(Ok(true));
                }
                let role: Option<String> =
                    sqlx::query_scalar("SELECT role FROM users WHERE id = $1")
                        .bind(user_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                tx.rollback().await?;
                Ok(match role {
                    None => Err(StoreError::UserNotFound(user_id)),
                    Some(role) if role != Role::Customer.as_str() => {
                        Err(StoreError::NotACustomer(user_id))
                    }
                    Some(_) => Ok(false),
                })
            }
            .await)
        })
        .await?
    }

    /// `UPDATE users SET {column} = value` for one user, and `customer.changed` with it;
    /// `column` is one of this module's constants, never input.
    async fn set_name_column(
        &self,
        column: &'static str,
        value: &str,
        user_id: i64,
    ) -> Result<(), StoreError> {
        let sql = format!("UPDATE users SET {column} = $1 WHERE id = $2");
        let updated = retry_transient(|| async {
            on_conn!(self, |conn| async {
                let mut tx = begin(conn).await?;
                let n = sqlx::query(&sql)
                    .bind(value)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n == 1 {
                    tx.announce(user_id, "customer.changed").await?;
                }
                tx.commit().await?;
                Ok(n)
            }
            .await)
        })
        .await?;
        if updated == 0 {
            return Err(StoreError::UserNotFound(user_id));
        }
        Ok(())
    }

    /// Grants (or, with a negative amount, deducts) PARKY coins to every listed user and records
    /// one event each, all in one transaction: every user is updated or none is. The balance is
    /// changed in place (`parkies = parkies + amount`), so concurrent grants never lose one
    /// another's update, and the schema's `parkies >= 0` check refuses an overdraft.
    ///
    /// With an idempotency key (`once`), the key is claimed in the same transaction: a grant
    /// the manager sent before under that key is not made again, and its answer is returned
    /// ([`Granted::Before`]).
    ///
    /// # Errors
    /// [`StoreError::UsersNotFound`] listing unknown ids, [`StoreError::InsufficientBalance`],
    /// [`StoreError::IdempotencyKeyReused`]; database failures.
    pub async fn grant(
        &self,
        grant: &Grant,
        manager_id: i64,
        once: Option<&Idempotent>,
    ) -> Result<Granted, StoreError> {
        retry_transient(|| self.grant_once(grant, manager_id, once)).await?
    }

    async fn grant_once(
        &self,
        grant: &Grant,
        manager_id: i64,
        once: Option<&Idempotent>,
    ) -> Result<Result<Granted, StoreError>, sqlx::Error> {
        // Every refusal rolls back explicitly before it returns, so the connection goes back to
        // the pool with no transaction open.
        on_conn!(self, |conn| async {
            let ids = &grant.user_ids;
            let list = placeholders(2, ids.len());
            let mut tx = begin(conn).await?;
            if let Some(once) = once {
                let now = now_micros() / 1000;
                let keep = i64::try_from(idempotency::KEEP.as_millis()).unwrap_or(i64::MAX);
                sqlx::query(idempotency::FORGET)
                    .bind(manager_id)
                    .bind(now - keep)
                    .execute(&mut *tx)
                    .await?;
                let claimed = sqlx::query(idempotency::CLAIM)
                    .bind(manager_id)
                    .bind(&once.key)
                    .bind(&once.fingerprint)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if claimed == 0 {
                    let row: (String, Option<i64>, Option<String>) =
                        sqlx::query_as(idempotency::EARLIER)
                            .bind(manager_id)
                            .bind(&once.key)
                            .fetch_one(&mut *tx)
                            .await?;
                    tx.rollback().await?;
                    return Ok(match Earlier::of(row, &once.fingerprint) {
                        Earlier::Answer { status, body } => Ok(Granted::Before { status, body }),
                        Earlier::OtherRequest => Err(StoreError::IdempotencyKeyReused),
                    });
                }
            }
            lock_users!(self, tx, ids.clone());
            let sql = format!(
                "UPDATE users SET parkies = parkies + $1 WHERE id IN ({list}) \
                 RETURNING id, parkies"
            );
            let mut update = sqlx::query(&sql).bind(grant.amount);
            for id in ids {
                update = update.bind(*id);
            }
            let updated = match update.fetch_all(&mut *tx).await {
                Ok(rows) => rows,
                Err(e) if is_check_on(&e, "parkies") => {
                    tx.rollback().await?;
                    let who = conn.first_overdrawn(grant).await?.unwrap_or_default();
                    return Ok(Err(StoreError::InsufficientBalance(who)));
                }
                Err(e) => return Err(e),
            };
            if updated.len() != ids.len() {
                let mut found = Vec::with_capacity(updated.len());
                for r in &updated {
                    found.push(r.int(0)?);
                }
                tx.rollback().await?;
                let missing = ids
                    .iter()
                    .copied()
                    .filter(|id| !found.contains(id))
                    .collect();
                return Ok(Err(StoreError::UsersNotFound(missing)));
            }
            // One multi-row insert; only the user id differs per row, so $1..$4 are shared.
            let values: Vec<String> = (0..ids.len())
                .map(|i| format!("(${}, $1, $2, $3, $4)", i + 5))
                .collect();
            let sql = format!(
                "INSERT INTO parky_events (user_id, amount, reason, manager_id, created_at_us) \
                 VALUES {}",
                values.join(", ")
            );
            let mut insert = sqlx::query(&sql)
                .bind(grant.amount)
                .bind(&grant.reason)
                .bind(manager_id)
                .bind(now_micros());
            for id in ids {
                insert = insert.bind(*id);
            }
            insert.execute(&mut *tx).await?;
            let action = if grant.amount < 0 {
                "coins.deducted"
            } else {
                "coins.granted"
            };
            for row in &updated {
                let (user, balance) = (row.int(0)?, row.int(1)?);
                let entry = Entry::new(manager_id, action, format!("user {user}"))
                    .before(&serde_json::json!({"parkies": balance - grant.amount}))
                    .after(&serde_json::json!({
                        "parkies": balance, "amount": grant.amount, "reason": grant.reason
                    }));
                tx.audit(&entry).await?;
            }
            if let Some(once) = once {
                sqlx::query(idempotency::ANSWER)
                    .bind(manager_id)
                    .bind(&once.key)
                    .bind(i64::from(GRANTED.0.as_u16()))
                    .bind(GRANTED.1)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(Ok(Granted::Now))
        }
        .await)
    }

    /// A user's wallet: balance and every event, oldest first; `None` when the user does not
    /// exist.
    ///
    /// # Errors
    /// Database failures.
    pub async fn wallet(&self, user_id: i64) -> Result<Option<Wallet>, StoreError> {
        repeatable!(self, |conn| sqlx::query(
            "SELECT u.parkies, e.id, e.amount, e.reason, e.manager_id, e.created_at_us, \
                    u.invitation_code \
             FROM users u LEFT JOIN parky_events e ON e.user_id = u.id \
             WHERE u.id = $1 ORDER BY e.id",
        )
        .bind(user_id)
        .fetch_all(conn)
        .await
        .and_then(|rows| {
            let Some(first) = rows.first() else {
                return Ok(None);
            };
            let mut wallet = Wallet {
                user_id,
                parkies: first.int(0)?,
                parky_events: Vec::with_capacity(rows.len()),
                invitation_code: first.opt_text(6)?,
            };
            for r in &rows {
                let Some(event_id) = r.opt_int(1)? else {
                    continue;
                };
                wallet.parky_events.push(ParkyEvent {
                    event_id,
                    amount: r.int(2)?,
                    reason: r.text(3)?,
                    manager_id: r.opt_int(4)?,
                    transaction_time: format_micros(r.int(5)?),
                });
            }
            Ok(Some(wallet))
        }))
        .map_err(db_error)
    }

    /// The ten customers with the most coins (ties by id).
    ///
    /// # Errors
    /// Database failures.
    pub async fn top10(&self) -> Result<Vec<TopParky>, StoreError> {
        repeatable!(self, |conn| sqlx::query(
            "SELECT first_name, last_name, email, parkies FROM users WHERE role = $1 \
             ORDER BY parkies DESC, id LIMIT 10",
        )
        .bind(Role::Customer.as_str())
        .fetch_all(conn)
        .await
        .and_then(|rows| {
            rows.iter()
                .map(|r| {
                    Ok(TopParky {
                        name: format!("{} {}", r.str(0)?, r.str(1)?),
                        email: r.text(2)?,
                        parkies: r.int(3)?,
                    })
                })
                .collect()
        }))
        .map_err(db_error)
    }

    /// How many users exist.
    ///
    /// # Errors
    /// Database failures.
    pub async fn count_users(&self) -> Result<i64, StoreError> {
        repeatable!(self, |conn| sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM users"
        )
        .fetch_one(conn)
        .await)
        .map_err(db_error)
    }
}

/// The writes that registration, vehicle additions, grants and seeding share, on either
/// backend's connection (one body each, compiled for both by `shared_writes!`).
pub(super) trait Writes {
    /// Inserts a user row (counting one vehicle, which the caller inserts next) and returns its
    /// id.
    /// Inserts a user registered today, with an invitation code of their own when a customer,
    /// invited by `invited_by` when given.
    async fn insert_user(
        &mut self,
        new: &NewUser,
        password_hash: &str,
        role: Role,
        invited_by: Option<i64>,
    ) -> Result<i64, sqlx::Error>;

    /// Inserts a vehicle as the user's `seq`-th.
    async fn insert_vehicle(
        &mut self,
        user_id: i64,
        v: &Vehicle,
        seq: i64,
    ) -> Result<(), sqlx::Error>;

    /// After a refused deduction: the first user whose balance cannot cover it.
    async fn first_overdrawn(&mut self, grant: &Grant) -> Result<Option<i64>, sqlx::Error>;

    /// Appends `event_type` (`customer.registered` or `customer.changed`, version 1) with the
    /// user as they are now in this transaction (see `docs/events.md`).
    async fn announce(&mut self, user_id: i64, event_type: &'static str)
        -> Result<(), sqlx::Error>;
}

/// Locks users `ids`' rows in id order on PostgreSQL, on `$tx`; evaluates to the ids that
/// exist. Every change of several balances takes its locks so: the update alone would lock the
/// rows in heap order, which MVCC reshuffles as rows are rewritten, and two changes to the same
/// users could then wait for each other in a cycle. (SQLite has one writer at a time.)
macro_rules! lock_users {
    ($store:ident, $tx:ident, $ids:expr) => {{
        let ids: Vec<i64> = $ids;
        let list = $crate::store::users::placeholders(1, ids.len());
        let lock = if $store.backend() == pms_service::store::Backend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        let sql = format!("SELECT id FROM users WHERE id IN ({list}) ORDER BY id{lock}");
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for id in &ids {
            q = q.bind(*id);
        }
        q.fetch_all(&mut *$tx).await?
    }};
}
pub(crate) use lock_users;

/// Implements [`Writes`] for each connection type given: one body, compiled for each.
macro_rules! shared_writes {
    ($($conn:ty),+) => {$(
        impl Writes for $conn {
            async fn insert_user(
                &mut self,
                new: &NewUser,
                password_hash: &str,
                role: Role,
                invited_by: Option<i64>,
            ) -> Result<i64, sqlx::Error> {
                let code = (role == Role::Customer).then(super::awards::new_invitation_code);
                sqlx::query_scalar(
                    "INSERT INTO users (first_name, last_name, email, nif, password_hash, role, \
                     payment_method, status, parkies, vehicle_count, invitation_code, invited_by, \
                     registered_on) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, 1, $9, $10, $11) RETURNING id",
                )
                .bind(&new.first_name)
                .bind(&new.last_name)
                .bind(&new.email)
                .bind(new.nif)
                .bind(password_hash)
                .bind(role.as_str())
                .bind(new.payment_method.as_str())
                .bind(UserStatus::Enabled.as_str())
                .bind(code)
                .bind(invited_by)
                .bind(super::awards::today().to_string())
                .fetch_one(self)
                .await
            }

            async fn insert_vehicle(
                &mut self,
                user_id: i64,
                v: &Vehicle,
                seq: i64,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO vehicles (plate, user_id, vehicle_type, energy_source, added_seq) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&v.license_plate_number)
                .bind(user_id)
                .bind(v.vehicle_type.as_str())
                .bind(v.vehicle_energy_source.as_str())
                .bind(seq)
                .execute(self)
                .await?;
                Ok(())
            }

            async fn first_overdrawn(
                &mut self,
                grant: &Grant,
            ) -> Result<Option<i64>, sqlx::Error> {
                let list = placeholders(2, grant.user_ids.len());
                let sql = format!(
                    "SELECT id FROM users WHERE id IN ({list}) AND parkies + $1 < 0 \
                     ORDER BY id LIMIT 1"
                );
                let mut q = sqlx::query_scalar(&sql).bind(grant.amount);
                for id in &grant.user_ids {
                    q = q.bind(*id);
                }
                q.fetch_optional(self).await
            }

            async fn announce(
                &mut self,
                user_id: i64,
                event_type: &'static str,
            ) -> Result<(), sqlx::Error> {
                let user: (String, String, String, i64, String, String, String) = sqlx::query_as(
                    "SELECT first_name, last_name, email, nif, role, status, payment_method \
                     FROM users WHERE id = $1",
                )
                .bind(user_id)
                .fetch_one(&mut *self)
                .await?;
                let vehicles: Vec<(String, String, String)> = sqlx::query_as(
                    "SELECT plate, vehicle_type, energy_source FROM vehicles WHERE user_id = $1 \
                     ORDER BY added_seq",
                )
                .bind(user_id)
                .fetch_all(&mut *self)
                .await?;
                let event = customer_event(user_id, event_type, user, vehicles)
                    .map_err(sqlx::Error::Protocol)?;
                pms_events::conn::EventConn::append(self, &event).await?;
                Ok(())
            }
        }
    )+};
}

/// `customer.registered` / `customer.changed`, version 1: the user as they are now, from the
/// rows of their account and vehicles (a name the database holds that is not one of the API's
/// is an error, never sent on).
fn customer_event(
    user_id: i64,
    event_type: &'static str,
    (first_name, last_name, email, nif, role, status, payment_method): (
        String,
        String,
        String,
        i64,
        String,
        String,
        String,
    ),
    vehicles: Vec<(String, String, String)>,
) -> Result<pms_events::NewEvent, String> {
    let vehicles = vehicles
        .into_iter()
        .map(|(plate, kind, energy)| {
            Ok(VehicleDoc {
                license_plate_number: plate,
                vehicle_type: known(VehicleType::parse, &kind)?,
                vehicle_energy_source: known(EnergySource::parse, &energy)?,
            })
        })
        .collect::<Result<_, String>>()?;
    let customer = CustomerDoc {
        user_id,
        first_name,
        last_name,
        email,
        nif,
        role: known(Role::parse, &role)?,
        user_status: known(UserStatus::parse, &status)?,
        payment_method,
        vehicles,
    };
    pms_events::NewEvent::new("customer", user_id, event_type, 1, &customer)
        .map_err(|e| e.to_string())
}

/// The value named `text`, or why not.
fn known<T>(parse: fn(&str) -> Option<T>, text: &str) -> Result<T, String> {
    parse(text).ok_or_else(|| format!("{text:?} is not a name the API knows"))
}

shared_writes!(sqlx::PgConnection, sqlx::SqliteConnection);

/// `$first, $first+1, …` for `n` values.
pub(super) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn user_from_row(r: &impl Cols) -> Result<UserDto, sqlx::Error> {
    Ok(UserDto {
        id: r.int(0)?,
        first_name: r.text(1)?,
        last_name: r.text(2)?,
        email: r.text(3)?,
        nif: r.int(4)?,
        parking_history: [],
        total_parkies: r.int(5)?,
        vehicles: Vec::with_capacity(1),
        role: r.name(6, Role::parse)?,
        payment_method: r.name(7, PaymentMethod::parse)?,
        user_status: r.name(8, UserStatus::parse)?,
    })
}

/// The vehicle in columns `at..at+3`, or `None` for a LEFT JOIN's empty side.
fn vehicle_from_row(r: &impl Cols, at: usize) -> Result<Option<Vehicle>, sqlx::Error> {
    let Some(plate) = r.opt_text(at)? else {
        return Ok(None);
    };
    Ok(Some(Vehicle {
        license_plate_number: plate,
        vehicle_type: r.name(at + 1, VehicleType::parse)?,
        vehicle_energy_source: r.name(at + 2, EnergySource::parse)?,
    }))
}

/// Columns by position, read the same way from either backend's rows. Every column is a 64-bit
/// integer or text (see the migrations).
trait Cols {
    /// A non-null integer.
    fn int(&self, i: usize) -> Result<i64, sqlx::Error>;
    /// An integer or null.
    fn opt_int(&self, i: usize) -> Result<Option<i64>, sqlx::Error>;
    /// Non-null text, borrowed from the row.
    fn str(&self, i: usize) -> Result<&str, sqlx::Error>;
    /// Text or null.
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error>;

    /// Non-null text, owned.
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        self.str(i).map(str::to_owned)
    }

    /// A column holding one of an enum's names (`ENABLED`, `PAYPAL`, …).
    fn name<T>(&self, i: usize, parse: fn(&str) -> Option<T>) -> Result<T, sqlx::Error> {
        let text = self.str(i)?;
        parse(text).ok_or_else(|| sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: format!("unknown value {text:?}").into(),
        })
    }
}

impl<R> Cols for R
where
    R: Row,
    usize: ColumnIndex<R>,
    i64: Type<R::Database> + for<'r> Decode<'r, R::Database>,
    String: Type<R::Database> + for<'r> Decode<'r, R::Database>,
    for<'r> &'r str: Type<R::Database> + Decode<'r, R::Database>,
{
    fn int(&self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }

    fn opt_int(&self, i: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(i)
    }

    fn str(&self, i: usize) -> Result<&str, sqlx::Error> {
        self.try_get(i)
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(i)
    }
}

pub(super) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Microseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.ffffff` (UTC, no zone suffix: the
/// published wallet layout).
pub fn format_micros(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(role: &str) -> (String, String, String, i64, String, String, String) {
        let text = |t: &str| t.to_owned();
        (
            text("Ana"),
            text("Lima"),
            text("ana@example.pt"),
            123_456_789,
            text(role),
            text("ENABLED"),
            text("PAYPAL"),
        )
    }

    #[test]
    fn the_customer_event_carries_the_published_names() {
        let vehicles = vec![("AA-00-01".into(), "AUTOMOBILE".into(), "ELECTRIC".into())];
        let event =
            customer_event(7, "customer.changed", row("CUSTOMER"), vehicles).expect("event");
        let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("json");
        assert_eq!(
            payload,
            serde_json::json!({
                "userId": 7, "firstName": "Ana", "lastName": "Lima", "email": "ana@example.pt",
                "nif": 123_456_789, "role": "CUSTOMER", "userStatus": "ENABLED",
                "paymentMethod": "PAYPAL",
                "vehicles": [{"licensePlateNumber": "AA-00-01", "vehicleType": "AUTOMOBILE",
                              "vehicleEnergySource": "ELECTRIC"}]
            })
        );
        // What parks and payments read back is what was written.
        let read: CustomerDoc = serde_json::from_value(payload).expect("read");
        assert_eq!(
            read.vehicles[0].vehicle_energy_source,
            EnergySource::Electric
        );
    }

    #[test]
    fn a_name_the_api_does_not_know_is_not_announced() {
        let e = customer_event(7, "customer.changed", row("ADMIN"), vec![]).expect_err("ADMIN");
        assert!(e.contains("\"ADMIN\""), "{e}");
        let vehicles = vec![("AA-00-01".into(), "BUS".into(), "FUEL".into())];
        let e = customer_event(7, "customer.changed", row("CUSTOMER"), vehicles).expect_err("BUS");
        assert!(e.contains("\"BUS\""), "{e}");
    }

    #[test]
    fn timestamps_use_the_published_layout() {
        assert_eq!(format_micros(0), "1970-01-01T00:00:00.000000");
        // 2023-11-28T21:15:04.422718Z, the spec's example event.
        assert_eq!(
            format_micros(1_701_206_104_422_718),
            "2023-11-28T21:15:04.422718"
        );
        assert_eq!(
            format_micros(951_782_400_000_000),
            "2000-02-29T00:00:00.000000"
        );
    }

    #[test]
    fn placeholders_number_from_the_first() {
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
        assert_eq!(placeholders(1, 1), "$1");
    }
}
