//! PARKY coins awarded by what happens rather than by a manager: what a visit earned (read from
//! the parks service's `visit.closed`, see [`super::coins`]), a customer's first visit closing
//! for the customer who invited them, and a customer's anniversary. Every award is keyed by
//! what earned it (`visit:12`, `invitation:7`, `anniversary:7:2027`) in `coin_awards`, in the
//! transaction that credits it: an award is credited once however often it is reached (a
//! redelivered event, a replay, two replicas running the anniversaries at once).

use jiff::civil::Date;
use serde::Serialize;

use super::{begin, on_conn, retry_transient, Store, StoreError};

/// The coins awarded for an invitation and an anniversary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Awards {
    /// Coins for the customer who invited another, when the other's first visit closes.
    pub invitation: i64,
    /// Coins on each anniversary of a customer's registration.
    pub anniversary: i64,
}

impl Default for Awards {
    fn default() -> Self {
        Self {
            invitation: 100,
            anniversary: 50,
        }
    }
}

/// A new customer's invitation code: ten hexadecimal digits, upper-case.
pub fn new_invitation_code() -> String {
    crate::password::random_token(5).to_ascii_uppercase()
}

/// Today's date in UTC: the day a registration is dated, and anniversaries are kept, by.
pub fn today() -> Date {
    jiff::Timestamp::now()
        .to_zoned_datetime(jiff::tz::TimeZone::UTC)
        .date()
}

/// Credits `$coins` to user `$user` with the wallet event `$reason`, once for `$key`, on `$tx`
/// (whose transaction holds the user's row lock): evaluates to whether it credited now.
macro_rules! award_once {
    ($tx:ident, $key:expr, $user:expr, $coins:expr, $reason:expr, $now:expr) => {{
        let awarded = sqlx::query(
            "INSERT INTO coin_awards (award_key, user_id, coins, awarded_at_us) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (award_key) DO NOTHING",
        )
        .bind($key)
        .bind($user)
        .bind($coins)
        .bind($now)
        .execute(&mut *$tx)
        .await?
        .rows_affected()
            == 1;
        if awarded {
            sqlx::query("UPDATE users SET parkies = parkies + $1 WHERE id = $2")
                .bind($coins)
                .bind($user)
                .execute(&mut *$tx)
                .await?;
            sqlx::query(
                "INSERT INTO parky_events (user_id, amount, reason, manager_id, created_at_us) \
                 VALUES ($1, $2, $3, NULL, $4)",
            )
            .bind($user)
            .bind($coins)
            .bind($reason)
            .bind($now)
            .execute(&mut *$tx)
            .await?;
        }
        awarded
    }};
}
pub(crate) use award_once;

impl Store {
    /// The customer whose invitation code is `code`.
    ///
    /// # Errors
    /// [`StoreError::UnknownInvitation`] when no customer has it; database failures.
    pub async fn inviter(&self, code: &str) -> Result<i64, StoreError> {
        let found: Option<i64> = pms_service::repeatable!(self, |conn| {
            sqlx::query_scalar(
                "SELECT id FROM users WHERE invitation_code = $1 AND role = 'CUSTOMER'",
            )
            .bind(code)
            .fetch_optional(&mut *conn)
            .await
        })
        .map_err(super::db_error)?;
        found.ok_or_else(|| StoreError::UnknownInvitation(code.to_owned()))
    }

    /// Credits the anniversary coins of every customer registered on `on`'s day and month in an
    /// earlier year (those registered on 29 February, on 28 February in other years), once a
    /// year each; returns how many were credited now.
    ///
    /// # Errors
    /// Database failures (the customers credited before the failure stay credited).
    pub async fn award_anniversaries(&self, on: Date, coins: i64) -> Result<u64, StoreError> {
        if coins <= 0 {
            return Ok(0);
        }
        let mut days = vec![on.strftime("%m-%d").to_string()];
        if on.month() == 2 && on.day() == 28 && !on.in_leap_year() {
            days.push("02-29".into());
        }
        let sql = format!(
            "SELECT id, registered_on FROM users WHERE role = 'CUSTOMER' \
             AND substr(registered_on, 6, 5) IN ({}) AND registered_on < $1 ORDER BY id",
            super::users::placeholders(2, days.len())
        );
        let due: Vec<(i64, String)> = pms_service::repeatable!(self, |conn| {
            let mut q = sqlx::query_as(&sql).bind(on.to_string());
            for d in &days {
                q = q.bind(d);
            }
            q.fetch_all(&mut *conn).await
        })
        .map_err(super::db_error)?;
        let mut credited = 0;
        for (user, registered) in due {
            let years = registered
                .parse::<Date>()
                .map_or(1, |r| i64::from(on.year() - r.year()));
            let key = format!("anniversary:{user}:{}", on.year());
            let reason = format!("{years} year(s) with PMS: happy anniversary");
            let now = super::users::now_micros();
            let done = retry_transient(|| async {
                on_conn!(self, |conn| async {
                    let mut tx = begin(conn).await?;
                    let found = super::users::lock_users!(self, tx, vec![user]);
                    let awarded = !found.is_empty()
                        && award_once!(tx, key.as_str(), user, coins, reason.as_str(), now);
                    tx.commit().await?;
                    Ok(awarded)
                }
                .await)
            })
            .await?;
            credited += u64::from(done);
        }
        Ok(credited)
    }
}

#[cfg(test)]
mod tests;
