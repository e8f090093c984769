//! A park manager's parks. Park managers and supervisors see the parks with their free spots;
//! each park's page lists its spots (who last took one out of service or put it back, and
//! when), with a button to do it, and the park's PARKY thresholds and overnight fee, each with
//! its form. The price table and the usage report have pages of their own ([`super::prices`],
//! [`super::reports`]).

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::Form;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use super::Items;
use super::{
    call_as, field, page, park_answers, problem, redirect, staff_form, staff_page, text, when,
    Chrome, PARK_STAFF,
};
use super::{Done, Page, PageError};
use crate::gateway::Reply;
use crate::session::{Session, User};
use crate::App;

/// What these pages are, for the "not allowed" page.
const WHAT: &str = "managing parks";

/// A park in the parks list.
#[derive(Debug, Clone)]
struct ParkRow {
    number: i64,
    capacity: i64,
    free: i64,
}

#[derive(Template)]
#[template(path = "parks.html")]
struct Parks {
    chrome: Chrome,
    parks: Vec<ParkRow>,
}

/// A spot of a park.
#[derive(Debug, Clone)]
struct SpotRow {
    number: String,
    floor: String,
    kind: String,
    energy: String,
    occupied: bool,
    operational: bool,
    /// `Toni, 2024-07-01 08:30 UTC`, or empty when nobody changed it.
    changed: String,
}

/// The park's settings as its forms show them (what was typed, after a refusal).
#[derive(Debug, Clone, Default)]
struct Settings {
    per_hour: String,
    per_minute: String,
    overnight_fee: String,
    overnight_on: bool,
}

/// Which of the park page's forms a refusal belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Spots,
    Thresholds,
    Overnight,
}

/// A refusal and the form it belongs to.
#[derive(Debug, Clone)]
struct Refusal {
    section: Section,
    message: String,
}

#[derive(Template)]
#[template(path = "park.html")]
struct ParkPage {
    chrome: Chrome,
    number: i64,
    spots: Vec<SpotRow>,
    free: usize,
    settings: Settings,
    notice: Option<&'static str>,
    refusal: Option<Refusal>,
}

impl ParkPage {
    /// The refusal to show in `section`, if it is there.
    fn refused(&self, section: Section) -> Option<&str> {
        self.refusal
            .as_ref()
            .filter(|r| r.section == section)
            .map(|r| r.message.as_str())
    }
}

/// `GET /app/parks`.
pub async fn parks(State(app): State<App>, headers: HeaderMap) -> Page {
    let (s, user) = staff_page(&app, &headers, PARK_STAFF, WHAT).await?;
    let path = "/parks/getAllOccupancies";
    let r = call_as(&app, &s, &user, Method::GET, path, &Value::Null).await?;
    if r.status != StatusCode::OK {
        return Ok(problem(&app, &s, StatusCode::BAD_GATEWAY, r.message()));
    }
    let parks = r
        .body
        .items()
        .map(|p| ParkRow {
            number: p["parkNumber"].as_i64().unwrap_or(0),
            capacity: p["occupancy"].as_i64().unwrap_or(0),
            free: p["currentCapacity"].as_i64().unwrap_or(0),
        })
        .collect();
    let html = Parks {
        chrome: Chrome::of("Parks", &s),
        parks,
    }
    .render();
    Ok(page(&app, StatusCode::OK, html, None))
}

/// Reads park `number`'s spots and settings; `Err` is the page to answer instead.
async fn park_view(
    app: &App,
    s: &Session,
    user: &User,
    number: i64,
) -> Result<(Vec<SpotRow>, Settings), PageError> {
    let paths = [
        format!("/parks/getSpotsByParkNumber/{number}"),
        format!("/parks/getParkyThresholds/{number}"),
        format!("/parks/getOvernightConfig/{number}"),
    ];
    let null = Value::Null;
    let (spots, thresholds, overnight) = tokio::join!(
        call_as(app, s, user, Method::GET, &paths[0], &null),
        call_as(app, s, user, Method::GET, &paths[1], &null),
        call_as(app, s, user, Method::GET, &paths[2], &null),
    );
    let (spots, thresholds, overnight) = (spots?, thresholds?, overnight?);
    park_answers(app, s, number, &[&spots, &thresholds, &overnight])?;
    let rows = spots
        .body
        .items()
        .map(|p| SpotRow {
            number: text(&p["spotNumber"]),
            floor: text(&p["floorLevel"]),
            kind: text(&p["spotVehicleType"]),
            energy: text(&p["spotType"]),
            occupied: p["occupied"].as_bool().unwrap_or(false),
            operational: p["operational"].as_bool().unwrap_or(false),
            changed: match &p["lastChange"] {
                Value::Object(c) => format!(
                    "{}, {}",
                    c.get("by").map(text).unwrap_or_default(),
                    when(&c.get("at").map(text).unwrap_or_default())
                ),
                _ => String::new(),
            },
        })
        .collect();
    let settings = Settings {
        per_hour: text(&thresholds.body["parkiesPerHour"]),
        per_minute: text(&thresholds.body["parkiesPerMinute"]),
        overnight_fee: text(&overnight.body["overnightFee"]),
        overnight_on: overnight.body["enabled"].as_bool().unwrap_or(false),
    };
    Ok((rows, settings))
}

/// Park `number`'s page with `status`; a refusal shows beside its form, with what was typed.
async fn park_page(
    app: &App,
    s: &Session,
    user: &User,
    number: i64,
    status: StatusCode,
    notice: Option<&'static str>,
    refused: Option<(Refusal, Option<Settings>)>,
) -> Page {
    let (spots, mut settings) = park_view(app, s, user, number).await?;
    let refusal = refused.map(|(refusal, typed)| {
        if let Some(typed) = typed {
            settings = typed;
        }
        refusal
    });
    let free = spots
        .iter()
        .filter(|p| p.operational && !p.occupied)
        .count();
    let html = ParkPage {
        chrome: Chrome::of(&format!("Park {number}"), s),
        number,
        spots,
        free,
        settings,
        notice,
        refusal,
    }
    .render();
    Ok(page(app, status, html, None))
}

/// `GET /app/parks/{number}`.
pub async fn park(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Query(query): Query<Done>,
) -> Page {
    let (s, user) = staff_page(&app, &headers, PARK_STAFF, WHAT).await?;
    let notice = match query.done.as_deref() {
        Some("spot") => Some("Spot updated."),
        Some("thresholds") => Some("PARKY thresholds saved."),
        Some("overnight") => Some("Overnight fee saved."),
        _ => None,
    };
    park_page(&app, &s, &user, number, StatusCode::OK, notice, None).await
}

/// Sends the calls of one form in order, stopping at the first refusal; `Ok(None)` when all
/// were accepted, `Ok(Some(refusal))` otherwise.
async fn send_all(
    app: &App,
    s: &Session,
    user: &User,
    calls: &[(&str, Value)],
) -> Result<Option<Reply>, PageError> {
    for (path, body) in calls {
        let reply = call_as(app, s, user, Method::PUT, path, body).await?;
        if !reply.status.is_success() {
            return Ok(Some(reply));
        }
    }
    Ok(None)
}

/// A form of the park page: the calls it makes, where it goes when they succeed, and where a
/// refusal shows (with the values typed, for the settings forms).
async fn settle(
    app: App,
    headers: HeaderMap,
    number: i64,
    form: HashMap<String, String>,
    section: Section,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, PARK_STAFF, WHAT).await?;
    let typed = Settings {
        per_hour: field(&form, "parkiesPerHour").trim().to_owned(),
        per_minute: field(&form, "parkiesPerMinute").trim().to_owned(),
        overnight_fee: field(&form, "overnightFee").trim().to_owned(),
        overnight_on: field(&form, "overnightOn") == "on",
    };
    let thresholds_path = format!("/parks/changeParkyThresholds/{number}");
    let (calls, done, keep): (Vec<(&str, Value)>, _, _) = match section {
        Section::Spots => (
            vec![(
                "/parks/enableDisableSpot",
                json!({
                    "parkNumber": number,
                    "spotNumber": field(&form, "spotNumber"),
                    "operational": field(&form, "operational") == "true",
                    "managerName": user.name,
                }),
            )],
            "spot",
            None,
        ),
        Section::Thresholds => (
            vec![(
                thresholds_path.as_str(),
                json!({"parkiesPerHour": typed.per_hour, "parkiesPerMinute": typed.per_minute}),
            )],
            "thresholds",
            Some(typed.clone()),
        ),
        Section::Overnight => (
            vec![
                (
                    "/parks/changeOvernightFeePrice",
                    json!({"parkNumber": number, "price": typed.overnight_fee}),
                ),
                (
                    "/parks/enableDisableOvernightFee",
                    json!({"parkNumber": number, "status": typed.overnight_on}),
                ),
            ],
            "overnight",
            Some(typed.clone()),
        ),
    };
    let Some(refused) = send_all(&app, &s, &user, &calls).await? else {
        return Ok(redirect(&format!("/app/parks/{number}?done={done}")));
    };
    let refusal = Refusal {
        section,
        message: refused.message(),
    };
    let status = refused.refused_status();
    park_page(&app, &s, &user, number, status, None, Some((refusal, keep))).await
}

/// `POST /app/parks/{number}/spots`: a spot out of service or back, with the manager's name
/// for the audit.
pub async fn set_spot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    settle(app, headers, number, form, Section::Spots).await
}

/// `POST /app/parks/{number}/thresholds`: the PARKY thresholds.
pub async fn set_thresholds(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    settle(app, headers, number, form, Section::Thresholds).await
}

/// `POST /app/parks/{number}/overnight`: the overnight fee (whole euros) and whether it is
/// charged.
pub async fn set_overnight(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    settle(app, headers, number, form, Section::Overnight).await
}
