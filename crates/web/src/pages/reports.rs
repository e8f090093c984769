//! A park's usage report as pictures: the vehicle mix and the energy mix of every entrance, and
//! the time parked per day, month or year (summed over customers, the latest first), each an
//! SVG bar chart ([`crate::chart`]) with the same numbers in a table beside it.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use super::Items;
use super::Page;
use super::{call_as, page, park_answers, problem, staff_page, Chrome, PARK_STAFF};
use crate::chart::Chart;
use crate::App;

/// Most buckets the parking-time chart shows.
const BUCKETS: usize = 31;

#[derive(Template)]
#[template(path = "report.html")]
struct ReportPage {
    chrome: Chrome,
    number: i64,
    total: i64,
    period: &'static str,
    vehicles: Chart,
    energy: Chart,
    time: Chart,
}

/// The page's query: `period` is `day`, `month` (the default) or `year`.
#[derive(Debug, serde::Deserialize)]
pub struct ReportQuery {
    period: Option<String>,
}

/// `42.5 %`.
fn percent(v: f64) -> String {
    format!("{:.1} %", v)
}

/// Minutes as `3 h 20 min`.
fn duration(minutes: f64) -> String {
    let m = minutes.max(0.0).round() as i64;
    format!("{} h {:02} min", m / 60, m % 60)
}

/// The vehicle and energy mix of a `percentageOf` answer.
fn mix(v: &Value) -> (Chart, Chart) {
    let share = |name: &str| v[name].as_f64().unwrap_or(0.0);
    let items = |pairs: &[(&str, &str)]| -> Vec<(String, f64, String)> {
        pairs
            .iter()
            .map(|(label, name)| ((*label).to_owned(), share(name), percent(share(name))))
            .collect()
    };
    (
        Chart::bars(
            "Vehicles that entered, by type",
            items(&[
                ("Cars", "percentageCar"),
                ("Motorcycles", "percentageMotorcycle"),
            ]),
            Some(100.0),
        ),
        Chart::bars(
            "Vehicles that entered, by energy",
            items(&[
                ("Fuel", "percentageFuel"),
                ("LPG", "percentageGPL"),
                ("Electric", "percentageElectric"),
                ("Plug-in hybrid", "percentagePlugInHybrid"),
            ]),
            Some(100.0),
        ),
    )
}

/// The minutes of a `parkingTime` answer summed per day, month or year, the latest
/// [`BUCKETS`] first.
fn time_chart(rows: &Value, period: &str) -> Chart {
    let mut sums: BTreeMap<(i64, i64, i64), f64> = BTreeMap::new();
    for r in rows.items() {
        let key = (
            r["year"].as_i64().unwrap_or(0),
            r["month"].as_i64().unwrap_or(0),
            r["day"].as_i64().unwrap_or(0),
        );
        *sums.entry(key).or_default() += r["timePeriod"].as_f64().unwrap_or(0.0);
    }
    let items = sums
        .into_iter()
        .rev()
        .take(BUCKETS)
        .map(|((year, month, day), minutes)| {
            // Months come 0-based, as the original published them.
            let label = match period {
                "day" => format!("{year}-{:02}-{day:02}", month + 1),
                "month" => format!("{year}-{:02}", month + 1),
                _ => year.to_string(),
            };
            (label, minutes, duration(minutes))
        })
        .collect();
    Chart::bars(&format!("Time parked per {period}"), items, None)
}

/// `GET /app/parks/{number}/report[?period=day|month|year]`.
pub async fn report(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Query(query): Query<ReportQuery>,
) -> Page {
    let (s, user) = staff_page(&app, &headers, PARK_STAFF, "the usage report").await?;
    let period = match query.period.as_deref() {
        Some("day") => "day",
        Some("year") => "year",
        None | Some("month") => "month",
        Some(_) => {
            return Ok(problem(
                &app,
                &s,
                StatusCode::BAD_REQUEST,
                "The report is per day, month or year.".into(),
            ))
        }
    };
    let mix_path = format!("/parkReport/percentageOf/{number}");
    let time_path = format!("/parkReport/parkingTime/{number}/{period}");
    let (shares, time) = tokio::join!(
        call_as(&app, &s, &user, Method::GET, &mix_path, &Value::Null),
        call_as(&app, &s, &user, Method::GET, &time_path, &Value::Null),
    );
    let (shares, time) = (shares?, time?);
    park_answers(&app, &s, number, &[&shares, &time])?;
    let (vehicles, energy) = mix(&shares.body);
    let html = ReportPage {
        chrome: Chrome::of(&format!("Park {number}: usage"), &s),
        number,
        total: shares.body["totalVehicles"].as_i64().unwrap_or(0),
        period,
        vehicles,
        energy,
        time: time_chart(&time.body, period),
    }
    .render();
    Ok(page(&app, StatusCode::OK, html, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parking_time_is_summed_over_customers_latest_first() {
        let rows = json!([
            {"customerId": 1, "timePeriod": 30.0, "year": 2024, "month": 6, "day": 1},
            {"customerId": 2, "timePeriod": 45.0, "year": 2024, "month": 6, "day": 1},
            {"customerId": 1, "timePeriod": 600.0, "year": 2024, "month": 6, "day": 2},
        ]);
        let c = time_chart(&rows, "day");
        assert_eq!(c.bars.len(), 2);
        assert_eq!(
            c.bars[0].label, "2024-07-02",
            "months are 0-based on the wire"
        );
        assert_eq!(c.bars[0].text, "10 h 00 min");
        assert_eq!(c.bars[1].text, "1 h 15 min");
        assert_eq!(time_chart(&rows, "month").bars[0].label, "2024-07");
    }

    #[test]
    fn the_mix_reads_the_published_names() {
        let (v, e) = mix(&json!({"percentageCar": 75.0, "percentageMotorcycle": 25.0,
            "percentageFuel": 50.0, "percentageGPL": 0.0, "percentageElectric": 25.0,
            "percentagePlugInHybrid": 25.0, "totalVehicles": 4}));
        assert_eq!(v.bars[0].text, "75.0 %");
        assert_eq!(e.bars.len(), 4);
        assert_eq!(e.bars[1].label, "LPG");
    }
}
