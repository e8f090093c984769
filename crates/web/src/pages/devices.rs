//! The operator's view of a park: each barrier (entrance or exit, in service or not) with its
//! displays and the text each shows now, from `GET /parks/devices/{n}`. The page follows the
//! park live ([`super::live`]): an entrance, exit or message shows as it happens.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use super::{call_as, page, park_answers, staff_page, text, when, Chrome, PARK_STAFF};
use crate::App;

/// A display as the page lists it.
#[derive(Debug, Clone)]
struct DisplayRow {
    number: String,
    on: bool,
    message: String,
    since: String,
}

/// A barrier with its displays.
#[derive(Debug, Clone)]
struct BarrierRow {
    number: String,
    entrance: bool,
    on: bool,
    displays: Vec<DisplayRow>,
}

#[derive(Template)]
#[template(path = "devices.html")]
struct DevicesPage {
    chrome: Chrome,
    number: i64,
    free: i64,
    barriers: Vec<BarrierRow>,
}

/// `GET /app/parks/{number}/devices`.
pub async fn devices(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
) -> Response {
    let (s, user) = match staff_page(&app, &headers, PARK_STAFF, "the park's devices").await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let path = format!("/parks/devices/{number}");
    let r = match call_as(&app, &s, &user, Method::GET, &path, &Value::Null).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Err(r) = park_answers(&app, &s, number, &[&r]) {
        return r;
    }
    let barriers = r.body["barriers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| BarrierRow {
            number: text(&b["barrierNumber"]),
            entrance: b["direction"] == "ENTRANCE",
            on: b["state"] == "ACTIVE",
            displays: b["displays"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| DisplayRow {
                    number: text(&d["displayNumber"]),
                    on: d["state"] == "ACTIVE",
                    message: text(&d["message"]),
                    since: when(&text(&d["updatedAt"])),
                })
                .collect(),
        })
        .collect();
    let html = DevicesPage {
        chrome: Chrome::of(&format!("Park {number}: barriers and displays"), &s),
        number,
        free: r.body["freeSpots"].as_i64().unwrap_or(0),
        barriers,
    }
    .render();
    page(&app, StatusCode::OK, html, None)
}
