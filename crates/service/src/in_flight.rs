//! How many requests a service handles at once. Past the bound a request is answered 503 `busy`
//! with `Retry-After: 1` at once, before anything else is done for it, instead of joining the
//! others: when the CPU is what is short, a queue of requests only grows, and every request in it
//! waits until its client gives up. Shedding the excess keeps the answers of the admitted ones
//! as fast as the machine allows and lets callers (and the gateway's clients) retry elsewhere or
//! later. The probes (`/healthz`, `/readyz`) and `/metrics` are never refused: a liveness probe
//! failed under load would restart a pod that is merely busy.
//!
//! A request holds its place until its answer's head is ready; a streamed body (the occupancy
//! feed) does not keep it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use http::StatusCode;
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// Default most requests handled at once by one service: above what the published cells put in
/// flight (one request per client, at most a few hundred clients, most answered in
/// milliseconds), and low enough that the admitted requests of a saturated service wait about a
/// tenth of a second. Measured on 4,500 barriers sending twice a second through `pms up` on two
/// cores: 256 served 3,828 passages a second at p99 125 ms (all answers), 1024 served 3,188 at
/// 537 ms, no bound 2,768 at 1.6 s (docs/benchmarks.md, "Overload").
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// Seconds a refused client is told to wait.
const RETRY_AFTER_S: u64 = 1;

/// Paths that are never refused.
const ALWAYS_ADMITTED: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The bound of one service: its places, and how many requests it has refused.
#[derive(Debug, Clone)]
pub struct InFlight {
    places: Arc<Semaphore>,
    refused: Arc<AtomicU64>,
}

impl InFlight {
    /// A bound of `max` requests at once (at least one).
    pub fn new(max: usize) -> Self {
        Self {
            places: Arc::new(Semaphore::new(max.max(1))),
            refused: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// `router` behind this bound.
    pub fn around(&self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(self.clone(), admit))
    }
}

async fn admit(State(bound): State<InFlight>, req: Request, next: Next) -> Response {
    if ALWAYS_ADMITTED.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let Ok(place) = bound.places.clone().try_acquire_owned() else {
        bound.refused.fetch_add(1, Ordering::Relaxed);
        let id = crate::http::request_id_of(req.headers());
        return busy().render(&id);
    };
    let resp = next.run(req).await;
    drop(place);
    resp
}

/// The answer past the bound.
fn busy() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
        "the service is handling as many requests as it takes at once; try again shortly",
    )
    .with_retry_after(RETRY_AFTER_S)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::routing::get;
    use tower_service::Service;

    use super::*;

    /// A route that waits for a permit of `gate`, so requests stay in flight while the test
    /// looks.
    fn held(gate: Arc<Semaphore>) -> Router {
        Router::new()
            .route(
                "/slow",
                get(move || {
                    let gate = gate.clone();
                    async move {
                        if let Ok(p) = gate.acquire().await {
                            p.forget();
                        }
                        "done"
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
    }

    async fn call(app: &Router, path: &str) -> Response {
        let req = Request::builder()
            .uri(path)
            .header(crate::http::X_REQUEST_ID, "req-7")
            .body(Body::empty())
            .expect("request");
        match app.clone().call(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    }

    async fn until_free(bound: &InFlight, free: usize) {
        while bound.places.available_permits() != free {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn past_the_bound_requests_are_refused_at_once_and_probes_still_answer() {
        let gate = Arc::new(Semaphore::new(0));
        let bound = InFlight::new(2);
        let app = bound.around(held(gate.clone()));
        let first = tokio::spawn({
            let app = app.clone();
            async move { call(&app, "/slow").await }
        });
        let second = tokio::spawn({
            let app = app.clone();
            async move { call(&app, "/slow").await }
        });
        until_free(&bound, 0).await;

        let refused = call(&app, "/slow").await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()["retry-after"], "1");
        let body = http_body_util::BodyExt::collect(refused.into_body())
            .await
            .expect("body")
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["error"]["code"], "busy");
        assert_eq!(v["error"]["request_id"], "req-7");
        assert_eq!(bound.refused(), 1);

        assert_eq!(call(&app, "/healthz").await.status(), StatusCode::OK);

        gate.add_permits(2);
        for admitted in [first, second] {
            assert_eq!(admitted.await.expect("task").status(), StatusCode::OK);
        }
        // The places are free again once the answers are out.
        until_free(&bound, 2).await;
        gate.add_permits(1);
        assert_eq!(call(&app, "/slow").await.status(), StatusCode::OK);
        assert_eq!(bound.refused(), 1);
    }
}
