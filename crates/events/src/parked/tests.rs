//! Set-aside events listed and tried again on both backends, with a handler that cannot read
//! version 9 until it is "upgraded".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pms_service::transaction;

use super::*;
use crate::conn::EventConn;
use crate::consumer::{ApplyError, Consumer, Handler, Outcome};
use crate::event::{Event, NewEvent};
use crate::outbox::Outbox;
use crate::position::Applied;
use crate::testutil::{append_one, names, pair, parked, produce, seen, Backend, Named};

/// Applies `thing.named` idempotently (as the services' handlers do); parks version 9 until
/// `upgraded`.
struct Upgradable {
    db: Db,
    upgraded: AtomicBool,
}

impl Handler for Upgradable {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        let versions: &[i64] = if self.upgraded.load(Ordering::SeqCst) {
            &[1, 9]
        } else {
            &[1]
        };
        let named: Named = event.decode(versions).map_err(ApplyError::Park)?;
        let r: Result<(), sqlx::Error> = transaction!(self.db, |tx| {
            sqlx::query("INSERT INTO seen (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING")
                .bind(event.id)
                .bind(&named.name)
                .execute(&mut *tx)
                .await?;
            tx.record_position("test", Applied::one(event)).await
        });
        r.map_err(|e| ApplyError::Retry(e.to_string()))?;
        Ok(Outcome::Applied)
    }
}

#[tokio::test]
async fn a_set_aside_event_is_listed_and_applied_in_order_once_it_can_be() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..1)).await;
        let future = NewEvent {
            aggregate_type: "thing",
            aggregate_id: "x".into(),
            event_type: "thing.named",
            version: 9,
            payload: r#"{"name":"from the future"}"#.into(),
        };
        let bad = append_one(&pair.producer, &future).await;
        produce(&pair.producer, &names(1..3)).await;
        let handler = Arc::new(Upgradable {
            db: pair.consumer.clone(),
            upgraded: AtomicBool::new(false),
        });
        let c = Consumer {
            name: "test",
            source: Outbox::new("producer", pair.producer.clone()),
            db: pair.consumer.clone(),
            handler: handler.clone(),
        };
        while c.step().await.expect("step") {}
        assert_eq!(seen(&pair.consumer).await.len(), 3, "{backend:?}");
        let listed = list(&pair.consumer, "test").await.expect("list");
        assert_eq!(listed.len(), 1, "{backend:?}: {listed:?}");
        let entry = &listed[0];
        assert_eq!(
            (entry.source.as_str(), entry.event_id, entry.version),
            ("producer", bad, 9)
        );
        assert!(entry.reason.contains("version 9"), "{}", entry.reason);
        assert_eq!(entry.payload["name"], "from the future");
        assert!(list(&pair.consumer, "other")
            .await
            .expect("list")
            .is_empty());

        // Tried again before the consumer can read it: set aside again, nothing else changes.
        assert_eq!(
            retry(&pair.consumer, "test", "producer", bad)
                .await
                .expect("retry"),
            bad - 1
        );
        assert!(
            parked(&pair.consumer).await.is_empty(),
            "forgotten until read again"
        );
        while c.step().await.expect("step") {}
        assert_eq!(parked(&pair.consumer).await.len(), 1, "{backend:?}");
        assert_eq!(
            seen(&pair.consumer).await.len(),
            3,
            "{backend:?}: applied once each"
        );
        assert_eq!(c.position().await.expect("position"), 4);

        // Upgraded: tried again, it is applied, and the later events again without effect.
        handler.upgraded.store(true, Ordering::SeqCst);
        retry(&pair.consumer, "test", "producer", bad)
            .await
            .expect("retry");
        while c.step().await.expect("step") {}
        assert!(parked(&pair.consumer).await.is_empty(), "{backend:?}");
        let seen = seen(&pair.consumer).await;
        assert_eq!(seen.len(), 4, "{backend:?}: {seen:?}");
        assert_eq!(seen[1], (bad, "from the future".to_owned()));
        assert_eq!(c.position().await.expect("position"), 4);

        // Twice, or an event never set aside: not found, and the position stays.
        let again = retry(&pair.consumer, "test", "producer", bad).await;
        assert!(
            matches!(again, Err(RetryError::NotFound { .. })),
            "{again:?}"
        );
        assert_eq!(c.position().await.expect("position"), 4);
    }
}
