//! PARKY coins moved by other services' events. Spent on invoices: the users service's step of
//! the payments saga (see the payments service's `store::invoices`); for each `coins.requested`
//! it takes what the wallet has, up to the amount asked, records a wallet event naming the
//! invoice, and answers with `wallet.coins_debited` — all in one transaction with the consumer's
//! position. The debit is keyed by the invoice (`coin_debits`), so a redelivered request debits
//! nothing more. Earned by visits: each `visit.closed` from the parks service that earned coins
//! credits them with a wallet event naming the visit, keyed by the visit (`coin_awards`), so a
//! redelivered or replayed visit credits nothing more.

use pms_events::conn::EventConn;
use pms_events::{Applied, Event, NewEvent};
use serde::{Deserialize, Serialize};

use super::awards::award_once;
use super::users::lock_users;
use super::{begin, on_conn, retry_transient, Store, StoreError};

/// The consumer name the users service records its positions under.
pub const CONSUMER: &str = "users";

/// `coins.requested` v1 (from payments).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoinsRequested {
    /// The invoice the coins pay for.
    pub invoice_id: i64,
    /// Its visit.
    pub visit_id: i64,
    /// Whose wallet.
    pub customer_id: i64,
    /// Most coins to take (the fee in cents).
    pub max_coins: i64,
}

/// What the users service reads of `visit.closed` v1 (from parks): who earned how many coins in
/// which visit.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VisitEarned {
    /// The visit.
    pub visit_id: i64,
    /// Its park's number, for the wallet event's reason.
    pub park_number: i64,
    /// Whose wallet.
    pub customer_id: i64,
    /// The coins it earned (absent from visits closed before coins were earned).
    #[serde(default)]
    pub coins_earned: i64,
}

/// `wallet.coins_debited` v1.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct CoinsDebited {
    invoice_id: i64,
    visit_id: i64,
    user_id: i64,
    coins: i64,
}

impl Store {
    /// Debits the coins an invoice asks for, once; returns how many were taken.
    ///
    /// # Errors
    /// Database failures.
    pub async fn debit_for_invoice(
        &self,
        r: &CoinsRequested,
        event: &Event,
    ) -> Result<i64, StoreError> {
        retry_transient(|| async {
            on_conn!(self, |conn| async {
                let mut tx = begin(conn).await?;
                let done: Option<i64> = sqlx::query_scalar("SELECT coins FROM coin_debits WHERE invoice_id = $1")
                    .bind(r.invoice_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if let Some(coins) = done {
                    tx.record_position(CONSUMER, Applied::one(event)).await?;
                    tx.commit().await?;
                    return Ok(coins);
                }
                // Takes the user's row lock (PostgreSQL) before reading the balance.
                let balance: Option<i64> = sqlx::query_scalar(
                    "UPDATE users SET parkies = parkies WHERE id = $1 RETURNING parkies",
                )
                .bind(r.customer_id)
                .fetch_optional(&mut *tx)
                .await?;
                // Coins this very visit earned are for the next one: whichever of its two
                // events (the credit from parks, this request from payments) comes first, the
                // invoice is paid from the same coins.
                let earned_here: Option<i64> = sqlx::query_scalar(
                    "SELECT coins FROM coin_awards WHERE award_key = $1",
                )
                .bind(format!("visit:{}", r.visit_id))
                .fetch_optional(&mut *tx)
                .await?;
                let spendable = balance.unwrap_or(0) - earned_here.unwrap_or(0);
                let coins = spendable.min(r.max_coins.max(0)).max(0);
                let now = super::users::now_micros();
                if coins > 0 {
                    sqlx::query("UPDATE users SET parkies = parkies - $1 WHERE id = $2")
                        .bind(coins)
                        .bind(r.customer_id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO parky_events (user_id, amount, reason, manager_id, created_at_us) \
                         VALUES ($1, $2, $3, NULL, $4)",
                    )
                    .bind(r.customer_id)
                    .bind(-coins)
                    .bind(format!("Invoice {}", r.invoice_id))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                if balance.is_some() {
                    sqlx::query(
                        "INSERT INTO coin_debits (invoice_id, user_id, coins, created_at_us) VALUES ($1, $2, $3, $4)",
                    )
                    .bind(r.invoice_id)
                    .bind(r.customer_id)
                    .bind(coins)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                let answer = NewEvent::new(
                    "wallet",
                    r.customer_id,
                    "wallet.coins_debited",
                    1,
                    &CoinsDebited {
                        invoice_id: r.invoice_id,
                        visit_id: r.visit_id,
                        user_id: r.customer_id,
                        coins,
                    },
                )
                .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
                tx.append(&answer).await?;
                tx.record_position(CONSUMER, Applied::one(event)).await?;
                tx.commit().await?;
                Ok(coins)
            }
            .await)
        })
        .await
    }

    /// Credits the coins a visit earned, once (a visit credited before credits nothing more),
    /// and, when this is the first visit to close of a customer another invited, the inviter's
    /// `invitation` coins, once; with the consumer's position. Returns the coins credited by
    /// this call, to the customer and to the inviter. A customer this service does not have is
    /// credited nothing.
    ///
    /// # Errors
    /// Database failures.
    pub async fn credit_for_visit(
        &self,
        v: &VisitEarned,
        invitation: i64,
        event: &Event,
    ) -> Result<(i64, i64), StoreError> {
        let credited = self
            .credit_for_visits(std::slice::from_ref(v), invitation, Applied::one(event))
            .await?;
        Ok(credited.first().copied().unwrap_or_default())
    }

    /// [`Store::credit_for_visit`] for a run of visits, in one transaction that moves the
    /// position past `applied` (the run's events, those of no interest included): one commit
    /// for the run, not one per visit, so the consumer keeps up with the barriers. Every
    /// wallet the run touches (the customers and their inviters) is locked first, in id order,
    /// as every change of several balances locks them. Returns, per visit, the coins credited to
    /// the customer and to the inviter.
    ///
    /// # Errors
    /// Database failures (nothing is credited then).
    pub async fn credit_for_visits(
        &self,
        visits: &[VisitEarned],
        invitation: i64,
        applied: Applied<'_>,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        retry_transient(|| async {
            on_conn!(self, |conn| async {
                let mut tx = begin(conn).await?;
                let mut customers: Vec<i64> = visits.iter().map(|v| v.customer_id).collect();
                customers.sort_unstable();
                customers.dedup();
                // Who invited them (read before the locks, as a grant reads its list).
                let mut inviters = std::collections::HashMap::new();
                if invitation > 0 && !customers.is_empty() {
                    let list = super::users::placeholders(1, customers.len());
                    let sql = format!(
                        "SELECT id, invited_by FROM users WHERE id IN ({list}) \
                         AND invited_by IS NOT NULL"
                    );
                    let mut q = sqlx::query_as::<_, (i64, i64)>(&sql);
                    for id in &customers {
                        q = q.bind(*id);
                    }
                    inviters.extend(q.fetch_all(&mut *tx).await?);
                }
                let mut wallets: Vec<i64> =
                    customers.iter().chain(inviters.values()).copied().collect();
                wallets.sort_unstable();
                wallets.dedup();
                let found = if wallets.is_empty() {
                    Vec::new()
                } else {
                    lock_users!(self, tx, wallets)
                };
                let now = super::users::now_micros();
                let mut credited = Vec::with_capacity(visits.len());
                for v in visits {
                    let mut this = (0, 0);
                    if v.coins_earned > 0 && found.contains(&v.customer_id) {
                        let key = format!("visit:{}", v.visit_id);
                        let reason = format!("Visit {} in park {}", v.visit_id, v.park_number);
                        if award_once!(tx, key, v.customer_id, v.coins_earned, reason, now) {
                            this.0 = v.coins_earned;
                        }
                    }
                    let inviter = inviters.get(&v.customer_id).copied();
                    if let Some(inviter) = inviter.filter(|i| found.contains(i)) {
                        let key = format!("invitation:{}", v.customer_id);
                        let reason = format!(
                            "Invited customer {}, whose first visit closed (visit {})",
                            v.customer_id, v.visit_id
                        );
                        if award_once!(tx, key, inviter, invitation, reason, now) {
                            this.1 = invitation;
                        }
                    }
                    credited.push(this);
                }
                tx.record_position(CONSUMER, applied).await?;
                tx.commit().await?;
                Ok(credited)
            }
            .await)
        })
        .await
    }
}
