//! The supervisors' audit trail: every staff action the services recorded (`GET
//! /{service}/audit`), newest first, filtered by service, action, subject, staff member and
//! dates, each with what the thing was before and after; and the same entries as a CSV file
//! (`/app/audit.csv`, the service's own export passed through).

use askama::Template;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, Method, StatusCode};
use serde_json::Value;

use super::Items;
use super::{call_as, page, problem, staff_page, text, unreachable, when, Chrome, Page};
use crate::App;

/// Who reads the audit trail.
pub const AUDIT_STAFF: &[&str] = &["SUPERVISOR"];
/// The services that keep one.
const SERVICES: [&str; 2] = ["parks", "users"];
/// Entries a page shows.
const PAGE: usize = 100;

/// The page's filters (its query string).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct AuditQuery {
    #[serde(default)]
    service: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    actor: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    before: String,
}

impl AuditQuery {
    /// The service asked for (`parks` unless another one that keeps a trail is named).
    fn service(&self) -> &'static str {
        SERVICES
            .iter()
            .find(|s| **s == self.service)
            .copied()
            .unwrap_or(SERVICES[0])
    }

    /// The API's query string: the filters given, dates as the start of their day (UTC; `to`
    /// the start of the day after, so the day is included).
    fn api_query(&self, csv: bool) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("action", self.action.trim()),
            ("subject", self.subject.trim()),
            ("actor", self.actor.trim()),
            ("before", self.before.trim()),
        ] {
            if !value.is_empty() {
                q.append_pair(name, value);
            }
        }
        if let Some(from) = day_start(&self.from, 0) {
            q.append_pair("from", &from);
        }
        if let Some(to) = day_start(&self.to, 1) {
            q.append_pair("to", &to);
        }
        q.append_pair("limit", &PAGE.to_string());
        if csv {
            q.append_pair("format", "csv");
        }
        q.finish()
    }

    /// This page's own query string with `before` set to `id` (the next page).
    fn older(&self, id: i64) -> String {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("service", self.service())
            .append_pair("action", &self.action)
            .append_pair("subject", &self.subject)
            .append_pair("actor", &self.actor)
            .append_pair("from", &self.from)
            .append_pair("to", &self.to)
            .append_pair("before", &id.to_string())
            .finish()
    }
}

/// `YYYY-MM-DD` plus `days` as the RFC 3339 instant of its start in UTC; `None` for anything
/// else (an empty filter; a malformed one is left out rather than refused, as a browser's date
/// field cannot send one).
fn day_start(day: &str, days: i64) -> Option<String> {
    let date: jiff::civil::Date = day.trim().parse().ok()?;
    let date = date.checked_add(jiff::Span::new().days(days)).ok()?;
    Some(format!("{date}T00:00:00Z"))
}

/// One entry as the page lists it.
#[derive(Debug, Clone)]
struct Row {
    at: String,
    actor: String,
    action: String,
    subject: String,
    before: String,
    after: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    q: AuditQuery,
    service: &'static str,
    services: [&'static str; 2],
    rows: Vec<Row>,
    error: Option<String>,
    /// The query string of the next (older) page, when there may be one.
    older: Option<String>,
    /// The CSV export's query string.
    csv: String,
}

/// `GET /app/audit`.
pub async fn audit(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Page {
    let (s, user) = staff_page(&app, &headers, AUDIT_STAFF, "the audit trail").await?;
    let service = q.service();
    let path = format!("/{service}/audit?{}", q.api_query(false));
    let r = call_as(&app, &s, &user, Method::GET, &path, &Value::Null).await?;
    let error = (r.status != StatusCode::OK).then(|| r.message());
    let rows: Vec<Row> = r
        .body
        .items()
        .map(|e| Row {
            at: when(&text(&e["at"])),
            actor: format!("user {}", text(&e["actorId"])),
            action: text(&e["action"]),
            subject: text(&e["subject"]),
            before: document(&e["before"]),
            after: document(&e["after"]),
        })
        .collect();
    let last = r.body.items().last().and_then(|e| e["id"].as_i64());
    let older = last.filter(|_| rows.len() == PAGE).map(|id| q.older(id));
    let csv = format!("service={service}&{}", q.api_query(false));
    let status = if error.is_some() {
        r.refused_status()
    } else {
        StatusCode::OK
    };
    let html = AuditPage {
        chrome: Chrome::of("Audit trail", &s),
        q,
        service,
        services: SERVICES,
        rows,
        error,
        older,
        csv,
    }
    .render();
    Ok(page(&app, status, html, None))
}

/// `GET /app/audit.csv`: the entries the filters select, as the service exports them.
pub async fn audit_csv(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Page {
    let (s, user) = staff_page(&app, &headers, AUDIT_STAFF, "the audit trail").await?;
    let service = q.service();
    let path = format!("/{service}/audit?{}", q.api_query(true));
    let (status, kind, body) = match app.gateway.download(&path, &user.token).await {
        Ok(answer) => answer,
        Err(e) => return Ok(unreachable(&app, &s, &e)),
    };
    if status != StatusCode::OK {
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("the system answered {status}"));
        return Ok(problem(&app, &s, StatusCode::BAD_GATEWAY, message));
    }
    let disposition = format!("attachment; filename=\"{service}-audit.csv\"");
    let mut answer: Response = (StatusCode::OK, body).into_response();
    let headers = answer.headers_mut();
    if let Some(kind) = kind {
        headers.insert(header::CONTENT_TYPE, kind);
    }
    if let Ok(v) = http::HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    headers.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    Ok(answer)
}

/// A recorded document, compact, for a table cell (empty when there is none).
fn document(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_become_the_apis_query() {
        let q = AuditQuery {
            service: "users".into(),
            action: "customer.".into(),
            from: "2026-12-01".into(),
            to: "2026-12-31".into(),
            actor: " ".into(),
            ..AuditQuery::default()
        };
        assert_eq!(q.service(), "users");
        assert_eq!(
            q.api_query(true),
            "action=customer.&from=2026-12-01T00%3A00%3A00Z&to=2027-01-01T00%3A00%3A00Z\
             &limit=100&format=csv"
        );
        let other = AuditQuery {
            service: "payments/../x".into(),
            from: "yesterday".into(),
            ..AuditQuery::default()
        };
        assert_eq!(
            other.service(),
            "parks",
            "only a service that keeps a trail"
        );
        assert_eq!(other.api_query(false), "limit=100");
    }
}
