//! The shell every domain service stands in, written once: the state's view the kit needs
//! ([`Service`]: readiness, token verifier, database, metrics), the route table around a
//! service's own endpoints (`/healthz`, `/readyz`, `/metrics`, the request-id layer and the
//! JSON answers for unknown routes), and serving it until shutdown with the database closed
//! after the drain.
//!
//! A service's `lib.rs` then says only what is its own: its configuration, what its state holds
//! and how it starts (migrations, demo data, event wiring).

use std::future::Future;

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use pms_net::serve::Drain;
use tokio::net::TcpListener;

use crate::caller::Guarded;
use crate::http::{self, Answer};
use crate::store::Db;
use crate::Serving;

/// What the kit needs of a service's shared state beyond [`Guarded`].
pub trait Service: Guarded + Clone + Send + Sync + 'static {
    /// The service's database.
    fn db(&self) -> &Db;

    /// The text `GET /metrics` answers (Prometheus exposition format).
    fn metrics_text(&self) -> impl Future<Output = String> + Send;
}

/// The whole route table: the service's own endpoints (`public`, with `/openapi.json`), the
/// probes and `/metrics`, the request-id layer and the JSON fallbacks, bound to `state`.
pub fn router<S: Service>(public: Router<S>, state: S) -> Router {
    let routes = public
        .route("/healthz", get(http::healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics::<S>))
        .with_state(state);
    http::finish(routes)
}

/// `GET /readyz`: started, and the database answers.
async fn readyz<S: Service>(State(s): State<S>) -> Answer {
    http::readyz(s.readiness(), s.db()).await
}

/// `GET /metrics`.
async fn metrics<S: Service>(State(s): State<S>) -> Response {
    http::metrics_text(s.metrics_text().await)
}

/// Serves `router` on `listener` as `serving` says until `shutdown`, drains, then closes the
/// service's database.
pub async fn run<S: Service>(
    listener: TcpListener,
    state: S,
    router: Router,
    serving: impl Into<Serving>,
    shutdown: impl Future<Output = ()>,
) -> Drain {
    let drain = crate::serve(listener, router, serving.into(), shutdown).await;
    state.db().close().await;
    drain
}
