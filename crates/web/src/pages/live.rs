//! Pages that follow the parks live. `GET /app/live?after=V` long-polls the parks service's
//! change counter (`/parks/changes`) with the signed-in user's token and answers
//! `{"version"}`; `live.js`, on a page with `data-live` regions, calls it in a loop and, when the
//! counter moves, fetches the page again and swaps those regions in. No page is pushed: the
//! browser re-reads what it already shows, with the same checks as any page.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use super::{call_as, existing};
use crate::App;

/// Longest wait of one call, ms: below the front office's 10 s gateway timeout.
const WAIT_MS: u32 = 8_000;

/// The live feed's query.
#[derive(Debug, serde::Deserialize)]
pub struct After {
    after: Option<u64>,
}

/// A JSON answer that is never cached.
fn json_answer(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// `GET /app/live[?after=V]`: `{"version"}` once the parks' change counter differs from `V`
/// (or after about 8 s); at once without `after`. 401 without a signed-in session.
pub async fn live(State(app): State<App>, headers: HeaderMap, Query(q): Query<After>) -> Response {
    let Ok(found) = existing(&app, &headers).await else {
        return json_answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": "sessions cannot be reached right now"}),
        );
    };
    let Some((s, user)) = found.and_then(|s| s.user.clone().map(|u| (s, u))) else {
        return json_answer(
            StatusCode::UNAUTHORIZED,
            &json!({"error": "sign in to follow the parks"}),
        );
    };
    let path = match q.after {
        Some(v) => format!("/parks/changes?after={v}&waitMs={WAIT_MS}"),
        None => "/parks/changes".to_owned(),
    };
    match call_as(&app, &s, &user, Method::GET, &path, &Value::Null).await {
        Ok(r) if r.status == StatusCode::OK => {
            json_answer(StatusCode::OK, &json!({"version": r.body["version"]}))
        }
        Ok(r) => json_answer(r.refused_status(), &json!({"error": r.message()})),
        Err(r) => r.into_response(),
    }
}
