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
pub use pms_net::serve::Drain;
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

/// Why a service could not be built, as far as the kit's part goes; a service with more to go
/// wrong wraps it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database URL.
    #[error(transparent)]
    Store(#[from] crate::store::DbError),
    /// Token verification settings.
    #[error("token verification: {0}")]
    Verifier(#[from] pms_auth::verify::ConfigError),
}

/// Declares a service to the kit: `$app`, the handle on its state `$inner` that handlers get
/// (cheap to clone, an `Arc`, dereferencing to it), with the kit's views of it ([`Guarded`],
/// [`Service`]); `$app::init_in_background`, which runs the service's own
/// `async fn init(&self)` until it succeeds; and `run`, which serves the routes `routes` builds
/// from the state (the kit's added, see [`router`]) until shutdown.
///
/// `$inner` holds what every service's state does, by these names: `shell` (a
/// [`Shell`](crate::Shell)), `store` (the service's database, with `db()`) and `outbox` (its
/// events' outbox); `event_metrics` names the field with the event gauges `/metrics` shows (a
/// `pms_events::metrics::EventMetrics`).
///
/// ```ignore
/// pms_service::service! {
///     /// The service's shared state. Cheap to clone.
///     pub struct App(Inner);
///     event_metrics: metrics,
///     routes: http::router,
/// }
/// ```
#[macro_export]
macro_rules! service {
    (
        $(#[$meta:meta])*
        $vis:vis struct $app:ident($inner:ty);
        event_metrics: $($metrics:ident).+,
        routes: $routes:path $(,)?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $app(::std::sync::Arc<$inner>);

        impl ::std::ops::Deref for $app {
            type Target = $inner;
            fn deref(&self) -> &$inner {
                &self.0
            }
        }

        impl $crate::Guarded for $app {
            fn shell(&self) -> &$crate::Shell {
                &self.0.shell
            }
        }

        impl $crate::Service for $app {
            fn db(&self) -> &$crate::store::Db {
                self.0.store.db()
            }

            async fn metrics_text(&self) -> String {
                let state = &*self.0;
                state.$($metrics).+.render(&state.outbox, state.store.db()).await
            }
        }

        impl $app {
            /// Runs `init` until it succeeds, backing off up to 5 s between tries.
            pub fn init_in_background(&self) -> ::tokio::task::JoinHandle<()> {
                let app = self.clone();
                $crate::ready::retry_in_background(self.0.shell.ready.service(), move || {
                    let app = app.clone();
                    async move { app.init().await }
                })
            }
        }

        /// Serves the service's API on `listener` until `shutdown`, then drains and closes the
        /// database.
        pub async fn run(
            listener: ::tokio::net::TcpListener,
            app: $app,
            serving: impl Into<$crate::Serving>,
            shutdown: impl ::std::future::Future<Output = ()>,
        ) -> $crate::chassis::Drain {
            let router = $routes(app.clone());
            $crate::chassis::run(listener, app, router, serving, shutdown).await
        }
    };
}
