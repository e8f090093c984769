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
    /// The new park form's values (what was typed, after a refusal).
    typed: NewPark,
    /// Why the new park was refused.
    error: Option<String>,
}

/// The new park form.
#[derive(Debug, Clone)]
struct NewPark {
    name: String,
    address: String,
    latitude: String,
    longitude: String,
    time_zone: String,
    number: String,
}

impl Default for NewPark {
    fn default() -> Self {
        Self {
            name: String::new(),
            address: String::new(),
            latitude: String::new(),
            longitude: String::new(),
            time_zone: "Europe/Lisbon".into(),
            number: String::new(),
        }
    }
}

impl NewPark {
    fn of(form: &HashMap<String, String>) -> Self {
        let typed = |name: &str| field(form, name).trim().to_owned();
        Self {
            name: typed("name"),
            address: typed("address"),
            latitude: typed("latitude"),
            longitude: typed("longitude"),
            time_zone: typed("timeZone"),
            number: typed("parkNumber"),
        }
    }

    /// `createPark`'s body: numbers as numbers when they read as such (else as typed, for the
    /// API to name).
    fn body(&self) -> Value {
        let mut body = json!({
            "name": self.name,
            "address": self.address,
            "latitude": json_number(&self.latitude),
            "longitude": json_number(&self.longitude),
            "timeZone": self.time_zone,
        });
        if !self.number.is_empty() {
            body["parkNumber"] = json_number(&self.number);
        }
        body
    }
}

/// `text` as a JSON number when it reads as one, else as the text (the API names the field).
fn json_number(text: &str) -> Value {
    text.parse::<f64>()
        .ok()
        .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
        .unwrap_or_else(|| Value::String(text.to_owned()))
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
    name: String,
    address: String,
    latitude: String,
    longitude: String,
    time_zone: String,
    entrances_open: bool,
    hours: Hours,
}

/// The opening hours as the settings form edits them: around the clock, or each weekday's
/// spans as text (`07:00-12:00, 14:00-20:00`; empty: closed that day) and the dated exceptions,
/// one a line (`2026-12-25 closed`, `2026-12-24 08:00-13:00`). Every shape the API takes fits.
#[derive(Debug, Clone, Default)]
struct Hours {
    always: bool,
    days: Vec<DaySpans>,
    exceptions: String,
}

/// A weekday's spans in the form.
#[derive(Debug, Clone)]
struct DaySpans {
    key: &'static str,
    label: &'static str,
    spans: String,
}

/// The weekdays, as the API and the form name them.
const WEEKDAYS: [(&str, &str); 7] = [
    ("monday", "Monday"),
    ("tuesday", "Tuesday"),
    ("wednesday", "Wednesday"),
    ("thursday", "Thursday"),
    ("friday", "Friday"),
    ("saturday", "Saturday"),
    ("sunday", "Sunday"),
];

/// What an exception line says for a day the park is closed all day.
const CLOSED: &str = "closed";

/// The API's spans (`[{"from","to"}…]`) as the form writes them.
fn spans_text(spans: &Value) -> String {
    spans
        .items()
        .map(|s| format!("{}-{}", text(&s["from"]), text(&s["to"])))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Spans as typed (`07:00-12:00, 14:00-20:00`, an en dash taken too) as the API's; the times
/// themselves are the API's to judge.
///
/// # Errors
/// A piece that is not two times joined by a dash, said for the person who typed it.
fn typed_spans(typed: &str) -> Result<Value, String> {
    let mut spans = Vec::new();
    for piece in typed.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let times: Vec<&str> = piece.split(['-', '\u{2013}']).map(str::trim).collect();
        match times[..] {
            [from, to] if !from.is_empty() && !to.is_empty() => {
                spans.push(json!({"from": from, "to": to}));
            }
            _ => return Err(format!("\"{piece}\" is not a span such as 07:00-12:00")),
        }
    }
    Ok(Value::Array(spans))
}

impl Hours {
    /// The form's view of the API's `openingHours`.
    fn of(hours: &Value) -> Self {
        let days = WEEKDAYS
            .iter()
            .map(|(key, label)| DaySpans {
                key,
                label,
                spans: spans_text(&hours["weekly"][*key]),
            })
            .collect();
        let exceptions = hours["exceptions"]
            .items()
            .map(|e| {
                let open = spans_text(&e["open"]);
                let open = if open.is_empty() {
                    CLOSED.to_owned()
                } else {
                    open
                };
                format!("{} {open}", text(&e["date"]))
            })
            .collect::<Vec<_>>()
            .join("\n");
        Self {
            always: hours.is_null(),
            days,
            exceptions,
        }
    }

    /// What was typed in the form.
    fn typed(form: &HashMap<String, String>) -> Self {
        let days = WEEKDAYS
            .iter()
            .map(|(key, label)| DaySpans {
                key,
                label,
                spans: field(form, &format!("{key}Hours")).trim().to_owned(),
            })
            .collect();
        Self {
            always: field(form, "alwaysOpen") == "on",
            days,
            exceptions: field(form, "hoursExceptions").trim().to_owned(),
        }
    }

    /// `updatePark`'s `openingHours`: `null` around the clock, else the weekdays with spans and
    /// the exceptions.
    ///
    /// # Errors
    /// What cannot be read as spans or an exception, naming the day or the line.
    fn body(&self) -> Result<Value, String> {
        if self.always {
            return Ok(Value::Null);
        }
        let mut weekly = serde_json::Map::new();
        for d in self.days.iter().filter(|d| !d.spans.is_empty()) {
            let spans = typed_spans(&d.spans).map_err(|e| format!("{}: {e}", d.label))?;
            weekly.insert(d.key.to_owned(), spans);
        }
        let mut exceptions = Vec::new();
        for (i, line) in self.exceptions.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let at = |e: String| format!("Exceptions, line {}: {e}", i + 1);
            let (date, open) = line.split_once(char::is_whitespace).ok_or_else(|| {
                at(format!(
                    "\"{line}\" needs a date and its hours, such as 2026-12-25 {CLOSED}"
                ))
            })?;
            let open = open.trim();
            let open = if open.eq_ignore_ascii_case(CLOSED) {
                json!([])
            } else {
                typed_spans(open).map_err(at)?
            };
            exceptions.push(json!({"date": date, "open": open}));
        }
        Ok(json!({ "weekly": weekly, "exceptions": exceptions }))
    }
}

/// Which of the park page's forms a refusal belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Spots,
    Retire,
    NewSpots,
    Thresholds,
    Overnight,
    Settings,
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
    /// The refusal to show in `section`, if it is there (a spot's retirement shows with the
    /// spots).
    fn refused(&self, section: Section) -> Option<&str> {
        let at = |r: &Refusal| match r.section {
            Section::Retire => Section::Spots,
            other => other,
        };
        self.refusal
            .as_ref()
            .filter(|r| at(r) == section)
            .map(|r| r.message.as_str())
    }
}

/// `GET /app/parks`.
pub async fn parks(State(app): State<App>, headers: HeaderMap) -> Page {
    let (s, user) = staff_page(&app, &headers, PARK_STAFF, WHAT).await?;
    parks_page(&app, &s, &user, StatusCode::OK, NewPark::default(), None).await
}

/// `POST /app/parks`: a new park, then its page; a refusal shows beside the form, with what
/// was typed.
pub async fn create(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, PARK_STAFF, WHAT).await?;
    let typed = NewPark::of(&form);
    let r = call_as(&app, &s, &user, Method::POST, "/parks", &typed.body()).await?;
    match r.body["parkNumber"].as_i64() {
        Some(n) if r.status == StatusCode::CREATED => {
            Ok(redirect(&format!("/app/parks/{n}?done=created")))
        }
        _ => {
            let status = r.refused_status();
            parks_page(&app, &s, &user, status, typed, Some(r.message())).await
        }
    }
}

/// The parks list with `status`, and the new park form as `typed`, refused with `error`.
async fn parks_page(
    app: &App,
    s: &Session,
    user: &User,
    status: StatusCode,
    typed: NewPark,
    error: Option<String>,
) -> Page {
    let path = "/parks/getAllOccupancies";
    let r = call_as(app, s, user, Method::GET, path, &Value::Null).await?;
    if r.status != StatusCode::OK {
        return Ok(problem(app, s, StatusCode::BAD_GATEWAY, r.message()));
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
        chrome: Chrome::of("Parks", s),
        parks,
        typed,
        error,
    }
    .render();
    Ok(page(app, status, html, None))
}

/// Reads park `number`'s spots and settings; `Err` is the page to answer instead.
async fn park_view(
    app: &App,
    s: &Session,
    user: &User,
    number: i64,
) -> Result<(Vec<SpotRow>, Settings), PageError> {
    let paths = [
        format!("/parks/{number}"),
        format!("/parks/getSpotsByParkNumber/{number}"),
    ];
    let null = Value::Null;
    let (park, spots) = tokio::join!(
        call_as(app, s, user, Method::GET, &paths[0], &null),
        call_as(app, s, user, Method::GET, &paths[1], &null),
    );
    let (park, spots) = (park?, spots?);
    park_answers(app, s, number, &[&park, &spots])?;
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
    let park = &park.body;
    let settings = Settings {
        per_hour: text(&park["parkiesPerHour"]),
        per_minute: text(&park["parkiesPerMinute"]),
        overnight_fee: text(&park["overnightFee"]),
        overnight_on: park["overnightEnabled"].as_bool().unwrap_or(false),
        name: text(&park["name"]),
        address: text(&park["address"]),
        latitude: text(&park["latitude"]),
        longitude: text(&park["longitude"]),
        time_zone: text(&park["timeZone"]),
        entrances_open: park["entrancesOpen"].as_bool().unwrap_or(true),
        hours: Hours::of(&park["openingHours"]),
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
    let title = match settings.name.as_str() {
        "" => format!("Park {number}"),
        name => format!("Park {number}: {name}"),
    };
    let html = ParkPage {
        chrome: Chrome::of(&title, s),
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
        Some("created") => {
            Some("Park created: add its spots here, its barriers and displays on their page.")
        }
        Some("settings") => Some("Settings saved."),
        Some("spots") => Some("Spots added, free and in service."),
        Some("spot") => Some("Spot updated."),
        Some("retired") => Some("Spot retired: it is no longer part of the park."),
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
    calls: &[(Method, &str, Value)],
) -> Result<Option<Reply>, PageError> {
    for (method, path, body) in calls {
        let reply = call_as(app, s, user, method.clone(), path, body).await?;
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
    let typed_text = |name: &str| field(&form, name).trim().to_owned();
    let typed = Settings {
        per_hour: typed_text("parkiesPerHour"),
        per_minute: typed_text("parkiesPerMinute"),
        overnight_fee: typed_text("overnightFee"),
        overnight_on: field(&form, "overnightOn") == "on",
        name: typed_text("name"),
        address: typed_text("address"),
        latitude: typed_text("latitude"),
        longitude: typed_text("longitude"),
        time_zone: typed_text("timeZone"),
        entrances_open: field(&form, "entrancesOpen") == "on",
        hours: Hours::typed(&form),
    };
    let park_path = format!("/parks/{number}");
    let thresholds_path = format!("/parks/changeParkyThresholds/{number}");
    let spots_path = format!("/parks/{number}/spots");
    let spot: String =
        form_urlencoded::byte_serialize(field(&form, "spotNumber").trim().as_bytes()).collect();
    let retire_path = format!("/parks/{number}/spots/{spot}");
    let (calls, done): (Vec<(Method, &str, Value)>, _) = match section {
        Section::Spots => (
            vec![(
                Method::PUT,
                "/parks/enableDisableSpot",
                json!({
                    "parkNumber": number,
                    "spotNumber": field(&form, "spotNumber"),
                    "operational": field(&form, "operational") == "true",
                    "managerName": user.name,
                }),
            )],
            "spot",
        ),
        Section::Retire => (
            vec![(Method::DELETE, retire_path.as_str(), Value::Null)],
            "retired",
        ),
        Section::NewSpots => {
            let mut body = json!({
                "floorLevel": typed_text("floorLevel"),
                "spotVehicleType": field(&form, "spotVehicleType"),
                "spotType": field(&form, "spotType"),
                "count": json_number(&typed_text("count")),
            });
            for name in ["prefix", "first"] {
                if !typed_text(name).is_empty() {
                    body[name] = Value::String(typed_text(name));
                }
            }
            (vec![(Method::POST, spots_path.as_str(), body)], "spots")
        }
        Section::Thresholds => (
            vec![(
                Method::PUT,
                thresholds_path.as_str(),
                json!({"parkiesPerHour": typed.per_hour, "parkiesPerMinute": typed.per_minute}),
            )],
            "thresholds",
        ),
        Section::Overnight => (
            vec![
                (
                    Method::PUT,
                    "/parks/changeOvernightFeePrice",
                    json!({"parkNumber": number, "price": typed.overnight_fee}),
                ),
                (
                    Method::PUT,
                    "/parks/enableDisableOvernightFee",
                    json!({"parkNumber": number, "status": typed.overnight_on}),
                ),
            ],
            "overnight",
        ),
        Section::Settings => {
            let mut body = json!({
                "name": typed.name,
                "address": typed.address,
                "latitude": json_number(&typed.latitude),
                "longitude": json_number(&typed.longitude),
                "timeZone": typed.time_zone,
                "entrancesOpen": typed.entrances_open,
            });
            match typed.hours.body() {
                Ok(hours) => body["openingHours"] = hours,
                Err(message) => {
                    // Not sent: what was typed is shown again with what to fix.
                    let refusal = Refusal { section, message };
                    let keep = Some((refusal, Some(typed.clone())));
                    return park_page(&app, &s, &user, number, StatusCode::BAD_REQUEST, None, keep)
                        .await;
                }
            }
            (vec![(Method::PATCH, park_path.as_str(), body)], "settings")
        }
    };
    // The settings forms show what was typed beside their refusal; the others the park as is.
    let keep = matches!(
        section,
        Section::Thresholds | Section::Overnight | Section::Settings
    )
    .then(|| typed.clone());
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

/// `POST /app/parks/{number}/spots/retire`: a free spot retired for good.
pub async fn retire_spot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    settle(app, headers, number, form, Section::Retire).await
}

/// `POST /app/parks/{number}/spots/add`: spots added in bulk.
pub async fn add_spots(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    settle(app, headers, number, form, Section::NewSpots).await
}

/// `POST /app/parks/{number}/settings`: name, address, place, clock, whether it takes new cars,
/// and its opening hours.
pub async fn set_settings(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    settle(app, headers, number, form, Section::Settings).await
}
