//! A customer's visits: the completed ones with their duration and price, and how many there
//! are (the open one included, as the original counted).

use pms_service::repeatable;

use super::{instant, Store, StoreError};
use crate::model::HistoryItem;
use crate::rules;

/// Visit id, entry, exit, park, price, invoice, plate, the park's time zone.
type HistoryRow = (
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    String,
    String,
);

impl Store {
    /// Completed visits of `customer_id`, newest first.
    ///
    /// # Errors
    /// Database failures.
    pub async fn history(&self, customer_id: i64) -> Result<Vec<HistoryItem>, StoreError> {
        let rows: Vec<HistoryRow> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT v.id, v.entered_at_ms, v.left_at_ms, v.park_id, v.price, v.invoice_id, v.plate, p.time_zone \
             FROM visits v JOIN parks p ON p.id = v.park_id \
             WHERE v.customer_id = $1 AND v.left_at_ms IS NOT NULL ORDER BY v.id DESC"
        )
        .bind(customer_id)
        .fetch_all(&mut *conn)
        .await
        })?;
        Ok(rows
            .into_iter()
            .map(
                |(id, entered, left, park, price, invoice, plate, time_zone)| {
                    let (entered, left) = (instant(entered), instant(left));
                    let (h, m) = rules::hours_minutes(entered, left);
                    HistoryItem {
                        parking_history_id: id,
                        start_time: entered.to_string(),
                        end_time: left.to_string(),
                        hours_between_entrance_exit: h,
                        minutes_between_entrance_exit: m,
                        park_id: park,
                        customer_id,
                        price: price
                            .and_then(|p| p.parse::<f64>().ok())
                            .and_then(serde_json::Number::from_f64)
                            .map(serde_json::Value::Number),
                        invoice_id: invoice,
                        plate_number: plate,
                        time_zone,
                    }
                },
            )
            .collect())
    }

    /// How many visits `customer_id` has made, the open one included.
    ///
    /// # Errors
    /// Database failures.
    pub async fn history_count(&self, customer_id: i64) -> Result<i64, StoreError> {
        Ok(repeatable!(self, |conn| sqlx::query_scalar(
            "SELECT COUNT(*) FROM visits WHERE customer_id = $1"
        )
        .bind(customer_id)
        .fetch_one(&mut *conn)
        .await)?)
    }

    /// The price and discount of visit `visit_id` once invoiced.
    ///
    /// # Errors
    /// Database failures.
    pub async fn visit_price(&self, visit_id: i64) -> Result<Option<(String, String)>, StoreError> {
        let row: Option<(Option<String>, Option<String>)> =
            repeatable!(self, |conn| sqlx::query_as(
                "SELECT price, discount FROM visits WHERE id = $1"
            )
            .bind(visit_id)
            .fetch_optional(&mut *conn)
            .await)?;
        Ok(row.and_then(|(p, d)| p.zip(d)))
    }
}
