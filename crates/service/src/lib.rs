//! The PMS service kit: what every domain service (users, parks, payments) shares, so that a
//! service is handlers, rules and SQL on top of it.
//!
//! Layout:
//! - [`chassis`]: the shell of every service: the state's view the kit needs ([`Service`]),
//!   the probes and `/metrics` around its own routes, served until shutdown.
//! - [`audit`]: the audit trail: staff actions recorded in their transaction, read by supervisors.
//! - [`body`]: a request body read into its type ([`body::JsonBody`]), naming the field at fault.
//! - [`mod@caller`]: who is calling, from the bearer token, verified here; extractors that say
//!   it in a handler's signature.
//! - [`error`]: [`ApiError`], the one JSON error format.
//! - [`http`]: the request-id layer, JSON bodies under limits, JSON answers, health endpoints.
//! - [`idempotency`]: `Idempotency-Key` for requests that move money: the first answer again.
//! - [`in_flight`]: the bound on requests handled at once, past which a request gets 503 `busy`.
//! - [`openapi`]: what every service's OpenAPI document shares (error body, bearer scheme, the
//!   kit's own error answers on every operation).
//! - [`ready`]: readiness while the database is away, and start-up retried in the background.
//! - [`store`]: the database handle ([`store::Db`]): pool, migrations, failure classes, retries.
//! - [`telemetry`]: request spans exported over OTLP, when the environment asks for it.
//! - [`serve`]: a service's router on a listener, behind its [`in_flight`] bound, until
//!   shutdown, then drained ([`Serving`] says how).
//!
//! How a service stands on it (parks, payments and users all do so):
//! - its `lib.rs` declares its configuration, what its state holds beyond the [`Shell`], and
//!   `pms_service::service!` (the state's handle, the kit's views of it, `run`, and
//!   `init_in_background` around the service's own `init`: migrations, demo data);
//! - a handler says who may call it and what it reads in its signature ([`Caller`],
//!   `Allowed<ParkManagers>`, [`body::JsonBody`]`<T>` with `T` the one declaration of the body's
//!   shape and its OpenAPI schema), calls the store with `?` (a store error is an [`ApiError`]
//!   by one conversion) and answers with [`http::json`];
//! - the store's SQL runs in [`transaction!`] / [`repeatable!`] on either backend;
//! - its consumers of other services' events are listed once (`pms_events::wiring`).
//!
//! A new endpoint is then its handler (registered with `routes!`), its rule and its SQL.
//!
//! Why services verify tokens themselves: the original trusted `X-UserId`/`X-UserRole` headers,
//! so anyone who reached a service past the gateway could be anyone (spec §9 item 2). Every
//! protected endpoint verifies the bearer token with the same `pms-auth` code the gateway uses.
//!
//! Why one kit and not a copy per service: the pool, the error format and the readiness rules
//! are each one decision; three copies would drift.

#![deny(missing_docs)]

pub mod audit;
pub mod body;
pub mod caller;
pub mod chassis;
pub mod error;
pub mod http;
pub mod idempotency;
pub mod in_flight;
pub mod openapi;
pub mod ready;
pub mod store;
pub mod telemetry;

pub use crate::caller::{
    caller, Allowed, Caller, CustomerManagers, Guarded, ParkManagers, Roles, Shell, Staff,
    Supervisors,
};
pub use crate::chassis::{Service, StartError};
pub use crate::error::ApiError;
pub use crate::ready::Readiness;

use std::future::Future;

use hyper_util::service::TowerToHyperService;
use pms_net::serve::{Drain, ServeConfig};
use tokio::net::TcpListener;

/// How a service is served: its connections, and how many requests it handles at once.
#[derive(Debug, Clone)]
pub struct Serving {
    /// Listening: TLS, protocols, connection limits and timeouts.
    pub net: ServeConfig,
    /// Most requests handled at once; past it, 503 `busy` at once (see [`in_flight`]).
    pub max_in_flight: usize,
}

impl Default for Serving {
    fn default() -> Self {
        ServeConfig::default().into()
    }
}

impl From<ServeConfig> for Serving {
    fn from(net: ServeConfig) -> Self {
        Self {
            net,
            max_in_flight: in_flight::DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// Serves `router` (HTTP/1.1 and h2c, or TLS per `serving`) on `listener`, at most
/// `serving.max_in_flight` requests at once, until `shutdown`, then drains the connections.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    serving: Serving,
    shutdown: impl Future<Output = ()>,
) -> Drain {
    let router = in_flight::InFlight::new(serving.max_in_flight).around(router);
    pms_net::serve::serve_cloned(
        listener,
        serving.net,
        TowerToHyperService::new(router),
        shutdown,
    )
    .await
}
