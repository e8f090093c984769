//! The operator's view of a park: each barrier (entrance or exit, in service or not) with its
//! displays and the text each shows now, from `GET /parks/devices/{n}`, each with a button that
//! switches it off or on (`PUT /parks/devices/{n}/state`) and one that issues it a new key
//! (`POST /parks/devices/{n}/key`, the key shown once on a page of its own, never cached); forms
//! add barriers and displays. The page follows the park live ([`super::live`]): an entrance,
//! exit or message shows as it happens.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::Form;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use super::Items;
use super::{
    call_as, field, page, park_answers, problem, redirect, staff_form, staff_page, text, when,
    Chrome, Done, Page, PARK_STAFF,
};
use crate::session::{Session, User};
use crate::App;

/// What the pages of this module are, for the "not allowed" page.
const WHAT: &str = "the park's devices";

/// A display as the page lists it.
#[derive(Debug, Clone)]
struct DisplayRow {
    id: i64,
    number: String,
    on: bool,
    message: String,
    since: String,
    /// When it was last heard from, for people; `None`: never.
    heard: Option<String>,
}

/// A barrier with its displays.
#[derive(Debug, Clone)]
struct BarrierRow {
    id: i64,
    number: String,
    entrance: bool,
    on: bool,
    /// How far its clock is off, said for people ("2 min 5 s ahead"), when it is by a second
    /// or more.
    clock: Option<String>,
    /// When it was last heard from, for people; `None`: never.
    heard: Option<String>,
    displays: Vec<DisplayRow>,
}

#[derive(Template)]
#[template(path = "devices.html")]
struct DevicesPage {
    chrome: Chrome,
    notice: Option<&'static str>,
    /// Why an addition was refused.
    error: Option<String>,
    number: i64,
    free: i64,
    barriers: Vec<BarrierRow>,
}

/// `GET /app/parks/{number}/devices`.
pub async fn devices(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Query(query): Query<Done>,
) -> Page {
    let (s, user) = staff_page(&app, &headers, PARK_STAFF, WHAT).await?;
    let notice = match query.done.as_deref() {
        Some("on") => Some("Switched on."),
        Some("off") => Some("Switched off: it does nothing until it is switched on again."),
        Some("barrier") => Some("Barrier added, in service."),
        Some("display") => Some("Display added, in service."),
        _ => None,
    };
    devices_page(&app, &s, &user, number, StatusCode::OK, notice, None).await
}

/// Park `number`'s devices with `status`, a notice, or a refusal.
async fn devices_page(
    app: &App,
    s: &Session,
    user: &User,
    number: i64,
    status: StatusCode,
    notice: Option<&'static str>,
    error: Option<String>,
) -> Page {
    let path = format!("/parks/devices/{number}");
    let r = call_as(app, s, user, Method::GET, &path, &Value::Null).await?;
    park_answers(app, s, number, &[&r])?;
    let barriers = r.body["barriers"]
        .items()
        .map(|b| BarrierRow {
            id: b["barrierId"].as_i64().unwrap_or(0),
            number: text(&b["barrierNumber"]),
            entrance: b["direction"] == "ENTRANCE",
            on: b["state"] == "ACTIVE",
            clock: b["clockOffsetMs"].as_i64().and_then(clock_offset),
            heard: b["lastContactAt"].as_str().map(when),
            displays: b["displays"]
                .items()
                .map(|d| DisplayRow {
                    id: d["displayId"].as_i64().unwrap_or(0),
                    number: text(&d["displayNumber"]),
                    on: d["state"] == "ACTIVE",
                    message: text(&d["message"]),
                    since: when(&text(&d["updatedAt"])),
                    heard: d["lastContactAt"].as_str().map(when),
                })
                .collect(),
        })
        .collect();
    let html = DevicesPage {
        chrome: Chrome::of(&format!("Park {number}: barriers and displays"), s),
        notice,
        error,
        number,
        free: r.body["freeSpots"].as_i64().unwrap_or(0),
        barriers,
    }
    .render();
    Ok(page(app, status, html, None))
}

/// `POST /app/parks/{number}/devices/barriers` `{barrierNumber, direction}`.
pub async fn add_barrier(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let body = json!({
        "barrierNumber": field(&form, "barrierNumber"),
        "direction": field(&form, "direction"),
    });
    add(app, headers, number, form, "barriers", body).await
}

/// `POST /app/parks/{number}/devices/displays` `{displayNumber, barrierID}`.
pub async fn add_display(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let body = json!({
        "displayNumber": field(&form, "displayNumber"),
        "barrierID": field(&form, "barrierID"),
    });
    add(app, headers, number, form, "displays", body).await
}

/// Adds a device of `kind` (`barriers`, `displays`) with `body`; back to the page with a
/// notice, or the refusal said on it.
async fn add(
    app: App,
    headers: HeaderMap,
    number: i64,
    form: HashMap<String, String>,
    kind: &str,
    body: Value,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, PARK_STAFF, WHAT).await?;
    let path = format!("/parks/{number}/{kind}");
    let r = call_as(&app, &s, &user, Method::POST, &path, &body).await?;
    if r.status != StatusCode::CREATED {
        let status = r.refused_status();
        return devices_page(&app, &s, &user, number, status, None, Some(r.message())).await;
    }
    let done = kind.trim_end_matches('s');
    Ok(redirect(&format!(
        "/app/parks/{number}/devices?done={done}"
    )))
}

#[derive(Template)]
#[template(path = "device_key.html")]
struct KeyPage {
    chrome: Chrome,
    number: i64,
    label: &'static str,
    name: String,
    key: String,
    issued: String,
}

/// `POST /app/parks/{number}/devices/key` `{device, deviceID, name}`: a device issued a new key,
/// shown once on a page no browser or proxy keeps.
pub async fn issue_key(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, PARK_STAFF, WHAT).await?;
    let body = json!({"device": field(&form, "device"), "deviceID": field(&form, "deviceID")});
    let path = format!("/parks/devices/{number}/key");
    let r = call_as(&app, &s, &user, Method::POST, &path, &body).await?;
    if r.status != StatusCode::OK {
        return Ok(problem(&app, &s, r.refused_status(), r.message()));
    }
    let label = if r.body["device"] == "DISPLAY" {
        "display"
    } else {
        "barrier"
    };
    let html = KeyPage {
        chrome: Chrome::of("A device's new key", &s),
        number,
        label,
        name: field(&form, "name").to_owned(),
        key: text(&r.body["key"]),
        issued: when(&text(&r.body["issuedAt"])),
    }
    .render();
    let mut answer = page(&app, StatusCode::OK, html, None);
    answer.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    Ok(answer)
}

/// `POST /app/parks/{number}/devices` `{device, deviceID, state}`: a barrier or display
/// switched off or on; back to the page with a notice, or the API's refusal said.
pub async fn set_state(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, PARK_STAFF, WHAT).await?;
    let state = field(&form, "state");
    let body = json!({
        "device": field(&form, "device"),
        "deviceID": field(&form, "deviceID"),
        "state": state,
    });
    let path = format!("/parks/devices/{number}/state");
    let r = call_as(&app, &s, &user, Method::PUT, &path, &body).await?;
    if !r.status.is_success() {
        return Ok(problem(&app, &s, r.refused_status(), r.message()));
    }
    let done = if state == "ACTIVE" { "on" } else { "off" };
    Ok(redirect(&format!(
        "/app/parks/{number}/devices?done={done}"
    )))
}

/// A barrier's clock offset for people, when it is a second or more: "3 s ahead",
/// "2 h 5 min behind".
fn clock_offset(ms: i64) -> Option<String> {
    let secs = ms.unsigned_abs() / 1000;
    if secs == 0 {
        return None;
    }
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let size = match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    };
    Some(format!(
        "{size} {}",
        if ms > 0 { "ahead" } else { "behind" }
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock_offsets_are_said_for_people() {
        use super::clock_offset;
        assert_eq!(clock_offset(999), None);
        assert_eq!(clock_offset(-999), None);
        assert_eq!(clock_offset(3_000).as_deref(), Some("3 s ahead"));
        assert_eq!(clock_offset(-125_000).as_deref(), Some("2 min 5 s behind"));
        assert_eq!(
            clock_offset(-(2 * 3600 + 5 * 60) * 1000).as_deref(),
            Some("2 h 5 min behind")
        );
        assert_eq!(
            clock_offset(30_000_000_000_000).as_deref(),
            Some("347222 d 5 h ahead")
        );
    }
}
