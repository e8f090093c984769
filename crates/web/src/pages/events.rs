//! The supervisors' page of set-aside events: what each service could not apply (from
//! `GET /{service}/events/parked`), from which service, why and since when, with a button that
//! tries one again once its cause is fixed (`POST …/{source}/{eventId}/retry`). Nothing a
//! consumer sets aside stays where only a metric and a log line would tell.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::Form;
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use super::Items;
use super::{call_as, field, page, redirect, staff_form, staff_page, text, when, Chrome};
use super::{Done, Page};
use crate::App;

/// Who sees and retries set-aside events.
pub const EVENT_STAFF: &[&str] = &["SUPERVISOR"];
/// The services that consume events, each with its own set-aside list.
const CONSUMERS: [&str; 3] = ["payments", "parks", "users"];

/// One set-aside event as the page lists it.
#[derive(Debug, Clone)]
struct EventRow {
    consumer: &'static str,
    source: String,
    id: i64,
    kind: String,
    version: i64,
    reason: String,
    since: String,
}

#[derive(Template)]
#[template(path = "events.html")]
struct EventsPage {
    chrome: Chrome,
    events: Vec<EventRow>,
    /// Services whose list could not be read, with why.
    unread: Vec<(&'static str, String)>,
    notice: Option<String>,
}

/// `GET /app/events`.
pub async fn events(State(app): State<App>, headers: HeaderMap, Query(q): Query<Done>) -> Page {
    let (s, user) = staff_page(&app, &headers, EVENT_STAFF, "set-aside events").await?;
    let mut events = Vec::new();
    let mut unread = Vec::new();
    for consumer in CONSUMERS {
        let path = format!("/{consumer}/events/parked");
        let r = call_as(&app, &s, &user, Method::GET, &path, &Value::Null).await?;
        if r.status != StatusCode::OK {
            unread.push((consumer, r.message()));
            continue;
        }
        events.extend(r.body.items().map(|e| EventRow {
            consumer,
            source: text(&e["source"]),
            id: e["eventId"].as_i64().unwrap_or_default(),
            kind: text(&e["eventType"]),
            version: e["version"].as_i64().unwrap_or_default(),
            reason: text(&e["reason"]),
            since: when(&text(&e["parkedAt"])),
        }));
    }
    let notice = q.done.as_deref().map(|d| match d {
        "retry" => "Tried again: the service applies it and the events after it again, in order. \
                    If it still cannot, it is listed here again with the reason."
            .to_owned(),
        _ => "Done.".to_owned(),
    });
    let html = EventsPage {
        chrome: Chrome::of("Set-aside events", &s),
        events,
        unread,
        notice,
    }
    .render();
    Ok(page(&app, StatusCode::OK, html, None))
}

/// `POST /app/events/retry`: tries one set-aside event again.
pub async fn retry(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, EVENT_STAFF, "trying events again").await?;
    let consumer = field(&form, "consumer");
    let (source, id) = (field(&form, "source"), field(&form, "id"));
    let well_formed = CONSUMERS.contains(&consumer)
        && !source.is_empty()
        && source.bytes().all(|b| b.is_ascii_lowercase())
        && id.parse::<i64>().is_ok_and(|n| n > 0);
    if !well_formed {
        return Ok(super::problem(
            &app,
            &s,
            StatusCode::BAD_REQUEST,
            "That is not an event this page listed.".into(),
        ));
    }
    let path = format!("/{consumer}/events/parked/{source}/{id}/retry");
    let r = call_as(&app, &s, &user, Method::POST, &path, &Value::Null).await?;
    Ok(if r.status.is_success() {
        redirect("/app/events?done=retry")
    } else {
        super::problem(&app, &s, r.refused_status(), r.message())
    })
}
