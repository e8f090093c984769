//! Erasing a person's data from events already written, when their account is closed.
//!
//! Events that carry a thing's state are kept for readers that start later, so their payloads
//! are overwritten at once ([`crate::conn::EventConn::replace_payloads`]). Events that tell of
//! something that happened once are rewritten once every reader of the outbox has them
//! ([`crate::conn::EventConn::erase_when_passed`], in the transaction of the erasure): one still
//! on its way to a reader is left as written, so the reader gets what the change said (an
//! invoice for a stay before the closure carries the tax number the law wants on it). What is
//! asked and not yet done is kept (`outbox_erasures`), and the retention round ([`settle`])
//! finishes it as the readers pass the events.

use pms_service::store::{Db, DbError};
use pms_service::{repeatable, transaction};
use serde_json::{Map, Value};

use crate::conn::EventConn;

/// Most erasures one round settles.
const ROUND: i64 = 1_000;

/// Rewrites the events of the outbox in `db` that erasures asked for and every reader now has,
/// and forgets each erasure none of whose events is still on its way. Returns how many events it
/// rewrote.
///
/// # Errors
/// When the database is unavailable (what was done before stays done).
pub async fn settle(db: &Db) -> Result<u64, DbError> {
    let asked: Vec<(String, String, String)> = repeatable!(db, |conn| {
        sqlx::query_as(
            "SELECT aggregate_type, aggregate_id, fields FROM outbox_erasures \
             ORDER BY asked_at LIMIT $1",
        )
        .bind(ROUND)
        .fetch_all(&mut *conn)
        .await
    })
    .map_err(|e| DbError::of(&e))?;
    let mut total = 0;
    for (kind, id, fields) in asked {
        let fields: Map<String, Value> = serde_json::from_str(&fields).unwrap_or_default();
        let done: Result<u64, sqlx::Error> = transaction!(db, |tx| {
            let (rewritten, pending) = tx.rewrite_passed(&kind, &id, &fields).await?;
            if !pending {
                sqlx::query(
                    "DELETE FROM outbox_erasures WHERE aggregate_type = $1 AND aggregate_id = $2",
                )
                .bind(&kind)
                .bind(&id)
                .execute(&mut *tx)
                .await?;
            }
            Ok::<u64, sqlx::Error>(rewritten)
        });
        total += done.map_err(|e| DbError::of(&e))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::outbox::Outbox;
    use crate::retention::acknowledge;
    use crate::testutil::{pair, produce, Backend};

    /// Every payload of `outbox`, in id order.
    async fn payloads(outbox: &Outbox) -> Vec<(String, String)> {
        let events = outbox.read_after(0, 100).await.expect("read");
        events
            .into_iter()
            .map(|e| {
                (
                    e.aggregate_id,
                    e.payload["name"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn an_erasure_waits_for_every_reader_then_rewrites_and_is_forgotten() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let Some(pair) = pair(backend).await else {
                continue;
            };
            let outbox = Outbox::new("p", pair.producer.clone());
            // Two events about "ana" (ids 1 and 3), one about "rui" (id 2).
            produce(&pair.producer, &["ana".into(), "rui".into(), "ana".into()]).await;
            let fields = json!({"name": "", "absent": 1});
            let fields = fields.as_object().expect("object");
            let ask: Result<u64, sqlx::Error> = transaction!(&pair.producer, |tx| {
                tx.erase_when_passed("thing", "ana", fields).await
            });
            assert_eq!(
                ask.expect("asked"),
                0,
                "{backend:?}: nobody has read anything yet"
            );
            assert_eq!(settle(outbox.db()).await.expect("round"), 0);

            // One reader past the first event, another past all: only the first is rewritten.
            acknowledge(&outbox, "near", 1).await.expect("note");
            acknowledge(&outbox, "far", 3).await.expect("note");
            assert_eq!(settle(outbox.db()).await.expect("round"), 1, "{backend:?}");
            let named = |name: &str| (name.to_owned(), name.to_owned());
            assert_eq!(
                payloads(&outbox).await,
                [("ana".into(), String::new()), named("rui"), named("ana")]
            );
            let pending: Result<i64, sqlx::Error> = repeatable!(&pair.producer, |c| {
                sqlx::query_scalar("SELECT count(*) FROM outbox_erasures")
                    .fetch_one(&mut *c)
                    .await
            });
            assert_eq!(
                pending.expect("count"),
                1,
                "kept while an event is on its way"
            );

            // Once every reader has them all: done, and the erasure forgotten.
            acknowledge(&outbox, "near", 3).await.expect("note");
            assert_eq!(settle(outbox.db()).await.expect("round"), 1, "{backend:?}");
            assert_eq!(
                payloads(&outbox).await,
                [
                    ("ana".into(), String::new()),
                    named("rui"),
                    ("ana".into(), String::new())
                ]
            );
            let pending: Result<i64, sqlx::Error> = repeatable!(&pair.producer, |c| {
                sqlx::query_scalar("SELECT count(*) FROM outbox_erasures")
                    .fetch_one(&mut *c)
                    .await
            });
            assert_eq!(pending.expect("count"), 0, "{backend:?}");
            assert_eq!(settle(outbox.db()).await.expect("round"), 0);
        }
    }

    #[tokio::test]
    async fn a_closure_erases_the_kinds_asked_of_its_customers_set_aside_events() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let Some(pair) = pair(backend).await else {
                continue;
            };
            let event = |id: i64, event_type: &str, payload: Value| crate::Event {
                id,
                prev: id - 1,
                source: "users".into(),
                aggregate_type: "customer".into(),
                aggregate_id: id.to_string(),
                event_type: event_type.into(),
                version: 1,
                payload,
                created_at: "2026-12-06T20:00:00Z".into(),
            };
            let parked = [
                event(
                    1,
                    "customer.registered",
                    json!({"userId": 6, "firstName": "Rui"}),
                ),
                event(
                    2,
                    "visit.closed",
                    json!({"visitId": 4, "customerId": 6, "nif": 514884112}),
                ),
                event(
                    3,
                    "customer.changed",
                    json!({"userId": 7, "firstName": "Ana"}),
                ),
                event(4, "missing", json!({"after": 0})),
            ];
            let erased: Result<u64, sqlx::Error> = transaction!(&pair.consumer, |tx| {
                for e in &parked {
                    tx.park("test", e, "cannot read it").await?;
                }
                tx.erase_parked(6, &["customer.registered", "customer.changed"])
                    .await
            });
            assert_eq!(erased.expect("erased"), 1, "{backend:?}");
            let kept: Result<Vec<(i64, String)>, sqlx::Error> = repeatable!(&pair.consumer, |c| {
                sqlx::query_as("SELECT event_id, payload FROM parked_events ORDER BY event_id")
                    .fetch_all(&mut *c)
                    .await
            });
            let kept: Vec<(i64, Value)> = kept
                .expect("parked")
                .into_iter()
                .map(|(id, p)| (id, serde_json::from_str(&p).expect("json")))
                .collect();
            assert_eq!(kept[0].1["firstName"], "", "{backend:?}: {kept:?}");
            assert_eq!(kept[0].1["userId"], 6);
            assert_eq!(kept[1].1["nif"], 514884112, "a kind not asked stays");
            assert_eq!(kept[2].1["firstName"], "Ana", "another customer's");
            assert_eq!(kept[3].1, parked[3].payload);
        }
    }
}
