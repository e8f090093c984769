//! The PMS front office: server-rendered pages under `/app/` that people sign in to, embedded in
//! the `pms` binary (templates compiled in by askama, the stylesheet by rust-embed). It talks to
//! the services only through the gateway, like any client ([`gateway`]), keeps each browser's
//! bearer token on the server side of an `HttpOnly` session cookie ([`session`]), checks a CSRF
//! token on every form, and sends a strict Content-Security-Policy with every answer (only the
//! embedded scripts may run, `locate.js` and `live.js`; nothing is loaded from elsewhere). [`pages`] holds the
//! screens; [`chart`] and [`map`] draw their pictures as inline SVG.

pub mod chart;
pub mod gateway;
pub mod map;
pub mod metrics;
pub mod pages;
pub mod session;

use std::future::Future;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::service::TowerToHyperService;
use pms_net::serve::{Drain, ServeConfig};
use tokio::net::TcpListener;

use crate::gateway::Gateway;
use crate::session::Sessions;

/// The policy every answer carries: only this site's stylesheet and scripts (no inline script
/// or style), requests and forms to this site only, no frames.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; \
     img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Largest form accepted (a price table of a dozen periods of a dozen blocks is about 12 KiB).
const MAX_FORM: usize = 64 * 1024;

/// What the front office needs.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// The gateway it calls (`http://127.0.0.1:8080`).
    pub gateway: String,
    /// Mark the session cookie `Secure` (browsers still send it to `http://localhost` and
    /// `http://127.0.0.1`, which they treat as secure contexts).
    pub secure_cookies: bool,
    /// The key the gateway trusts this front office with (its `[auth.forwarder]`): with it,
    /// each person's sign-ins and registrations count against their own rate limit at the
    /// gateway; without it, everyone's against the front office's one address.
    pub forwarder_key: Option<String>,
    /// Keep the sessions in the NATS server of this client, shared with every other front
    /// office using it (replicas behind one gateway), instead of in this process.
    pub shared_sessions: Option<async_nats::Client>,
}

/// The front office's shared state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct App(Arc<Inner>);

/// What [`App`] holds.
#[derive(Debug)]
pub struct Inner {
    /// Live sessions.
    pub sessions: Sessions,
    /// The gateway client.
    pub gateway: Gateway,
    /// Whether cookies are `Secure`.
    pub secure_cookies: bool,
    /// `/metrics`.
    pub metrics: metrics::Metrics,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl App {
    /// The front office for `config`. Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// [`GatewayError::Request`](gateway::GatewayError::Request) for a forwarder key that
    /// cannot be sent in a header.
    pub fn new(config: &WebConfig) -> Result<Self, gateway::GatewayError> {
        Ok(Self(Arc::new(Inner {
            sessions: config
                .shared_sessions
                .clone()
                .map_or_else(Sessions::in_memory, Sessions::shared),
            gateway: Gateway::new(&config.gateway, config.forwarder_key.as_deref())?,
            secure_cookies: config.secure_cookies,
            metrics: metrics::Metrics::new(config.shared_sessions.is_none()),
        })))
    }
}

/// The embedded static files.
#[derive(rust_embed::Embed)]
#[folder = "assets/"]
struct Assets;

async fn asset(Path(name): Path<String>) -> Response {
    let Some(file) = Assets::get(&name) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let kind = match name.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        file.data.into_owned(),
    )
        .into_response()
}

/// Adds the security headers to every answer; pages are never cached (they hold a CSRF token).
/// Every answer also says how long the front office took to make it (`Server-Timing: app;dur=`
/// in milliseconds, the gateway calls included), which the browser check records per screen.
async fn secure_headers(
    axum::extract::State(app): axum::extract::State<App>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let started = std::time::Instant::now();
    let mut resp = next.run(req).await;
    app.metrics.answered(resp.status().as_u16());
    let took = started.elapsed().as_secs_f64() * 1000.0;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("app;dur={took:.2}")) {
        h.insert("server-timing", v);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// `GET /metrics`: Prometheus text.
async fn metrics(axum::extract::State(app): axum::extract::State<App>) -> Response {
    let body = app.metrics.render(app.sessions.held());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// `GET /`: people who open the site's address land on the front office (the gateway routes
/// `/` here; everything else there is the API).
async fn home() -> Response {
    pages::redirect("/app/")
}

/// The route table.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/", get(home))
        .route("/app", get(pages::start))
        .route("/app/", get(pages::start))
        .route(
            "/app/signin",
            get(pages::auth::signin_form).post(pages::auth::signin),
        )
        .route(
            "/app/register",
            get(pages::auth::register_page).post(pages::auth::register),
        )
        .route("/app/signout", post(pages::auth::signout))
        .route("/app/account", get(pages::customer::account))
        .route("/app/vehicles", post(pages::customer::add_vehicle))
        .route(
            "/app/payment-method",
            post(pages::customer::set_payment_method),
        )
        .route("/app/coins", post(pages::customer::set_coin_flag))
        .route("/app/close-account", post(pages::customer::close_account))
        .route("/app/visits", get(pages::customer::visits))
        .route("/app/users", get(pages::staff::users))
        .route("/app/users/grant", post(pages::staff::grant))
        .route("/app/users/status", post(pages::staff::set_status))
        .route("/app/nearby", get(pages::nearby::nearby))
        .route(
            "/app/parks",
            get(pages::parks::parks).post(pages::parks::create),
        )
        .route("/app/parks/{number}", get(pages::parks::park))
        .route("/app/parks/{number}/spots", post(pages::parks::set_spot))
        .route(
            "/app/parks/{number}/spots/add",
            post(pages::parks::add_spots),
        )
        .route(
            "/app/parks/{number}/spots/retire",
            post(pages::parks::retire_spot),
        )
        .route(
            "/app/parks/{number}/settings",
            post(pages::parks::set_settings),
        )
        .route(
            "/app/parks/{number}/devices/barriers",
            post(pages::devices::add_barrier),
        )
        .route(
            "/app/parks/{number}/devices/displays",
            post(pages::devices::add_display),
        )
        .route(
            "/app/parks/{number}/devices/key",
            post(pages::devices::issue_key),
        )
        .route(
            "/app/parks/{number}/thresholds",
            post(pages::parks::set_thresholds),
        )
        .route(
            "/app/parks/{number}/overnight",
            post(pages::parks::set_overnight),
        )
        .route(
            "/app/parks/{number}/prices",
            get(pages::prices::prices).post(pages::prices::edit),
        )
        .route("/app/parks/{number}/report", get(pages::reports::report))
        .route(
            "/app/parks/{number}/devices",
            get(pages::devices::devices).post(pages::devices::set_state),
        )
        .route("/app/events", get(pages::events::events))
        .route("/app/audit", get(pages::audit::audit))
        .route("/app/audit.csv", get(pages::audit::audit_csv))
        .route("/app/events/retry", post(pages::events::retry))
        .route("/app/live", get(pages::live::live))
        .route("/app/assets/{name}", get(asset))
        .route("/healthz", get(|| async { "ok" }))
        // Nothing to wait for: the front office serves as soon as it listens. A gateway that is
        // away shows on each page as a 502 page, a broker holding shared sessions that is away
        // as a 503 page; every replica would fail alike, so none is taken out for it.
        .route("/readyz", get(|| async { "ready" }))
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such page") })
        .layer(DefaultBodyLimit::max(MAX_FORM))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            secure_headers,
        ))
        .with_state(app)
}

/// Serves the front office on `listener` until `shutdown`, then drains.
pub async fn run(
    listener: TcpListener,
    app: App,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Drain {
    pms_net::serve::serve_cloned(
        listener,
        config,
        TowerToHyperService::new(router(app)),
        shutdown,
    )
    .await
}
