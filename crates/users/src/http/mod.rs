//! The users service's HTTP face: the route table (the published paths), the request-id layer
//! that also renders every [`ApiError`], and reading JSON bodies under a size limit. Handlers are
//! in [`handlers`]; who may call what is decided there with [`auth`].

pub mod auth;
pub mod error;
pub mod handlers;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post, put};
use axum::Router;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Map, Value};

use self::error::ApiError;
use crate::App;

/// Request/response header carrying the request id (kept from the gateway when valid).
pub const X_REQUEST_ID: &str = "x-request-id";

/// The request id of the request being handled.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The route table.
pub fn router(state: App) -> Router {
    use handlers as h;
    Router::new()
        .route("/users/createUser", post(h::create_user))
        .route("/users/login", post(h::login))
        .route("/users/getAllUsers", get(h::all_users))
        .route("/users/vehicle/{user_id}", put(h::add_vehicle))
        .route("/users/vehicles/{user_id}", get(h::vehicles))
        .route(
            "/users/paymentMethod/{user_id}",
            put(h::set_payment_method).get(h::payment_method),
        )
        .route("/users/parkies", post(h::grant))
        .route("/users/parkies/{user_id}", get(h::wallet))
        .route("/userReport/top10Parky", get(h::top10))
        .route("/healthz", get(h::healthz))
        .route("/readyz", get(h::readyz))
        .fallback(h::no_route)
        .method_not_allowed_fallback(h::wrong_method)
        .layer(axum::middleware::from_fn(request_id))
        .with_state(state)
}

/// Takes the caller's `X-Request-Id` when it is sane (the gateway sends one) or makes one, puts
/// it on the request and the response, and renders an [`ApiError`] a handler returned.
async fn request_id(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if let Some(err) = resp.extensions_mut().remove::<ApiError>() {
        resp = err.render(&id);
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(X_REQUEST_ID, v);
    }
    resp
}

/// Reads a JSON object body within the service's limits: at most `max_body_bytes`, sent
/// within `body_timeout`.
///
/// # Errors
/// 415 for a non-JSON content type, 413 over the size limit, 408 for a body not all there in
/// time, 400 for bytes that are not a JSON object (with the parser's line and column).
pub async fn json_object(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(ct) = headers.get(CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        if !ct.contains("json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("expected application/json, got {ct:?}"),
            ));
        }
    }
    let bytes = read_limited(body, app.max_body_bytes, app.body_timeout).await?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_body("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_body(format!(
            "malformed JSON at line {} column {}: {e}",
            e.line(),
            e.column()
        ))),
    }
}

/// The whole body, at most `limit` bytes, within `timeout`: a client that stops sending it gets a
/// 408 instead of holding the request (and its connection) for good.
async fn read_limited(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, ApiError> {
    let read = http_body_util::Limited::new(body, limit).collect();
    let Ok(read) = tokio::time::timeout(timeout, read).await else {
        return Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {} ms",
                timeout.as_millis()
            ),
        ));
    };
    match read {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body exceeds {limit} bytes"),
        )),
        Err(e) => Err(ApiError::bad_body(format!("reading the body failed: {e}"))),
    }
}
