//! A park's price table editor. A park manager sees the table as a form (periods of the day,
//! each with its blocks, and the extras: grace minutes, a daily maximum, a minimum charge), with
//! a blank block under each period and a blank period at the end to add one; emptied rows go.
//! "Preview" checks the edited table with the tariff engine itself (the rules the parks service
//! applies when it is saved) and prices a stay with it (an arrival on the park's clock, a length,
//! a vehicle type, and the park's overnight fee when it is on), so a manager sees what a stay
//! would cost before anyone pays it; "Save" checks it the same way, then replaces the table.
//! Nothing reaches the service unless the engine accepted it.

use std::collections::{BTreeSet, HashMap};

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::Form;
use http::{HeaderMap, Method, StatusCode};
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use pms_tariff::{fee, Bill, PriceTable, RowKind, Stay, TableError};
use pms_vocab::VehicleType;
use rust_decimal::Decimal;
use serde_json::{json, Map, Value};

use super::Items;
use super::PARK_STAFF;
use super::{call_as, field, page, park_answers, redirect, staff_form, staff_page, text, Chrome};
use super::{Done, Page, PageError};
use crate::session::{Session, User};
use crate::App;

/// What this page is, for the "not allowed" page.
const WHAT: &str = "the price table";
/// Longest stay a preview prices, in minutes (a week).
const MAX_PREVIEW_MINUTES: i64 = 7 * 24 * 60;

/// One block of a period as the form holds it (text as typed).
#[derive(Debug, Clone, Default)]
pub struct BlockForm {
    minutes: String,
    car: String,
    moto: String,
    /// The field the engine refused (`minutes`, `car`, `moto`).
    invalid: Option<&'static str>,
}

/// One period as the form holds it.
#[derive(Debug, Clone, Default)]
pub struct PeriodForm {
    start: String,
    end: String,
    blocks: Vec<BlockForm>,
    /// The field the engine refused (`start`, `end`, `blocks`).
    invalid: Option<&'static str>,
}

/// The whole table as the form holds it.
#[derive(Debug, Clone, Default)]
pub struct TableForm {
    periods: Vec<PeriodForm>,
    grace: String,
    grace_from_start: bool,
    daily_max: String,
    resets_at: String,
    minimum: String,
    /// The extra the engine refused (its API name).
    invalid: Option<String>,
}

/// The stay a preview prices.
#[derive(Debug, Clone)]
pub struct StayForm {
    /// `AUTOMOBILE` or `MOTORCYCLE`.
    vehicle: String,
    /// Arrival on the park's clock, `YYYY-MM-DDTHH:MM` (a `datetime-local` value).
    arrival: String,
    /// Length of the stay in minutes.
    minutes: String,
}

/// A line of a previewed bill.
#[derive(Debug, Clone)]
pub struct BillLine {
    what: String,
    from: String,
    to: String,
    price: String,
}

/// A previewed bill.
#[derive(Debug, Clone)]
pub struct Preview {
    lines: Vec<BillLine>,
    total: String,
    summary: String,
}

#[derive(Template)]
#[template(path = "prices.html")]
struct PricesPage {
    chrome: Chrome,
    number: i64,
    time_zone: String,
    overnight: Option<Decimal>,
    table: TableForm,
    stay: StayForm,
    preview: Option<Preview>,
    error: Option<String>,
    notice: Option<&'static str>,
}

impl TableForm {
    /// The form of a table as the API's object form gives it, with a blank block under each
    /// period and a blank period at the end.
    fn of_api(v: &Value) -> Self {
        let periods = v["periods"]
            .items()
            .map(|p| PeriodForm {
                start: text(&p["periodStart"]),
                end: text(&p["periodEnd"]),
                blocks: p["thresholds"]
                    .items()
                    .map(|t| BlockForm {
                        minutes: text(&t["thresholdMinutes"]),
                        car: text(&t["costPerMinuteAutomobiles"]),
                        moto: text(&t["costPerMinuteMotorcycles"]),
                        invalid: None,
                    })
                    .collect(),
                invalid: None,
            })
            .collect();
        let mut form = Self {
            periods,
            grace: text(&v["graceMinutes"]),
            grace_from_start: v["graceChargeFromStart"].as_bool().unwrap_or(true),
            daily_max: text(&v["dailyMaximum"]),
            resets_at: text(&v["dailyMaximumResetsAt"]),
            minimum: text(&v["minimumCharge"]),
            invalid: None,
        };
        form.pad();
        form
    }

    /// The form as posted: fields `p{i}.start`, `p{i}.end`, `p{i}.b{j}.minutes|car|moto` and the
    /// extras. Rows left wholly blank are dropped.
    fn of_post(form: &HashMap<String, String>) -> Self {
        let indices = |prefix: &str| -> BTreeSet<usize> {
            form.keys()
                .filter_map(|k| k.strip_prefix(prefix))
                .filter_map(|rest| rest.split('.').next()?.parse().ok())
                .collect()
        };
        let value = |name: String| field(form, &name).trim().to_owned();
        let periods = indices("p")
            .into_iter()
            .map(|i| PeriodForm {
                start: value(format!("p{i}.start")),
                end: value(format!("p{i}.end")),
                blocks: indices(&format!("p{i}.b"))
                    .into_iter()
                    .map(|j| BlockForm {
                        minutes: value(format!("p{i}.b{j}.minutes")),
                        car: value(format!("p{i}.b{j}.car")),
                        moto: value(format!("p{i}.b{j}.moto")),
                        invalid: None,
                    })
                    .filter(|b| !(b.minutes.is_empty() && b.car.is_empty() && b.moto.is_empty()))
                    .collect(),
                invalid: None,
            })
            .filter(|p| !(p.start.is_empty() && p.end.is_empty() && p.blocks.is_empty()))
            .collect();
        Self {
            periods,
            grace: value("graceMinutes".into()),
            grace_from_start: field(form, "graceChargeFromStart") == "on",
            daily_max: value("dailyMaximum".into()),
            resets_at: value("dailyMaximumResetsAt".into()),
            minimum: value("minimumCharge".into()),
            invalid: None,
        }
    }

    /// Adds the blank rows that let a manager add a block or a period.
    fn pad(&mut self) {
        for p in &mut self.periods {
            p.blocks.push(BlockForm::default());
        }
        self.periods.push(PeriodForm {
            blocks: vec![BlockForm::default()],
            ..PeriodForm::default()
        });
    }

    /// The API's object form of what was typed (numbers as typed: the API reads numeric
    /// strings, and the engine says which one is not a number).
    fn to_api(&self) -> Value {
        let optional = |s: &str| {
            if s.is_empty() {
                Value::Null
            } else {
                Value::String(s.to_owned())
            }
        };
        let periods: Vec<Value> = self
            .periods
            .iter()
            .map(|p| {
                json!({
                    "periodStart": p.start,
                    "periodEnd": p.end,
                    "thresholds": p.blocks.iter().map(|b| json!({
                        "thresholdMinutes": b.minutes,
                        "costPerMinuteAutomobiles": b.car,
                        "costPerMinuteMotorcycles": b.moto,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut out = Map::new();
        out.insert("periods".into(), periods.into());
        out.insert("graceMinutes".into(), optional(&self.grace));
        if !self.grace.is_empty() {
            out.insert("graceChargeFromStart".into(), self.grace_from_start.into());
        }
        out.insert("dailyMaximum".into(), optional(&self.daily_max));
        if !self.daily_max.is_empty() {
            out.insert("dailyMaximumResetsAt".into(), optional(&self.resets_at));
        }
        out.insert("minimumCharge".into(), optional(&self.minimum));
        Value::Object(out)
    }

    /// Marks the field `e` names and says what is wrong in the form's own words (`Period 2,
    /// block 1, minutes: must be 1 to 1440 minutes`).
    fn refuse(&mut self, e: &TableError) -> String {
        let path = e.path.strip_prefix("periods").unwrap_or(&e.path);
        let index = |s: &str, open: &str| -> Option<usize> {
            s.strip_prefix(open)?.split(']').next()?.parse().ok()
        };
        let Some(i) = index(path, "[") else {
            let name = match e.path.as_str() {
                "graceMinutes" | "graceChargeFromStart" => "Grace minutes",
                "dailyMaximum" | "dailyMaximumResetsAt" => "Daily maximum",
                "minimumCharge" => "Minimum charge",
                _ => "The table",
            };
            if name != "The table" {
                self.invalid = Some(e.path.clone());
            }
            return format!("{name}: {}", e.message);
        };
        let rest = path.split_once(']').map_or("", |(_, r)| r);
        let Some(period) = self.periods.get_mut(i) else {
            return format!("Period {}: {}", i + 1, e.message);
        };
        if let Some(after) = rest.strip_prefix(".thresholds") {
            if let (Some(j), Some(block)) = (
                index(after, "["),
                index(after, "[").and_then(|j| period.blocks.get_mut(j)),
            ) {
                let (field, name) = match after.rsplit('.').next() {
                    Some("thresholdMinutes") => ("minutes", "minutes"),
                    Some("costPerMinuteAutomobiles") => ("car", "car price"),
                    _ => ("moto", "motorcycle price"),
                };
                block.invalid = Some(field);
                return format!("Period {}, block {}, {name}: {}", i + 1, j + 1, e.message);
            }
            period.invalid = Some("blocks");
            return format!("Period {}: {}", i + 1, e.message);
        }
        let (field, name) = if rest.ends_with("periodEnd") {
            ("end", "end")
        } else {
            ("start", "start")
        };
        period.invalid = Some(field);
        format!("Period {}, {name}: {}", i + 1, e.message)
    }
}

impl StayForm {
    /// A 90-minute car stay arriving at the next full hour on the park's clock.
    fn default_in(tz: &TimeZone) -> Self {
        let now = Timestamp::now().to_zoned_datetime(tz.clone()).datetime();
        let arrival = now
            .checked_add(SignedDuration::from_hours(1))
            .ok()
            .and_then(|t| {
                t.with()
                    .minute(0)
                    .second(0)
                    .subsec_nanosecond(0)
                    .build()
                    .ok()
            })
            .unwrap_or(now);
        Self {
            vehicle: "AUTOMOBILE".into(),
            arrival: arrival.strftime("%Y-%m-%dT%H:%M").to_string(),
            minutes: "90".into(),
        }
    }

    fn of_post(form: &HashMap<String, String>) -> Self {
        Self {
            vehicle: field(form, "vehicle").to_owned(),
            arrival: field(form, "arrival").trim().to_owned(),
            minutes: field(form, "minutes").trim().to_owned(),
        }
    }

    /// The stay, or what is wrong with it.
    fn stay(&self, tz: &TimeZone) -> Result<Stay, String> {
        let vehicle = VehicleType::parse(&self.vehicle)
            .ok_or_else(|| "Preview: choose a car or a motorcycle.".to_owned())?;
        let arrival: DateTime = self
            .arrival
            .parse()
            .map_err(|_| "Preview: the arrival must be a date and a time.".to_owned())?;
        let entry = arrival
            .to_zoned_datetime(tz.clone())
            .map_err(|e| format!("Preview: the arrival is not a time on the park's clock ({e})."))?
            .timestamp();
        let minutes: i64 = self
            .minutes
            .parse()
            .ok()
            .filter(|m| (0..=MAX_PREVIEW_MINUTES).contains(m))
            .ok_or_else(|| {
                format!("Preview: the stay must be 0 to {MAX_PREVIEW_MINUTES} minutes.")
            })?;
        let exit = entry
            .checked_add(SignedDuration::from_mins(minutes))
            .map_err(|_| "Preview: the stay ends out of range.".to_owned())?;
        Ok(Stay {
            entry,
            exit,
            vehicle,
        })
    }
}

/// `bill` as the preview lists it, times on the park's clock.
fn preview_of(bill: &Bill, tz: &TimeZone) -> Preview {
    let local = |t: Timestamp| {
        t.to_zoned_datetime(tz.clone())
            .strftime("%a %H:%M")
            .to_string()
    };
    let lines = bill
        .rows
        .iter()
        .map(|r| BillLine {
            what: match r.kind {
                RowKind::Block => format!("Block, period {}", r.period.map_or(0, |p| p + 1)),
                RowKind::Overnight => "Overnight fee".into(),
                RowKind::DailyMaximum => "Daily maximum".into(),
                RowKind::Minimum => "Minimum charge".into(),
            },
            from: local(r.start),
            to: local(r.end),
            price: format!("{:.2} €", r.price),
        })
        .collect();
    let minutes = bill.exit.duration_since(bill.entry).as_mins();
    Preview {
        lines,
        total: format!("{:.2} €", bill.total),
        summary: format!(
            "{} h {:02} min, {} to {}",
            minutes / 60,
            minutes % 60,
            local(bill.entry),
            local(bill.exit)
        ),
    }
}

/// What the page needs from the system: the table in its object form, the park's time zone
/// and its overnight fee when charged. `Err` is the page to answer instead.
async fn current(
    app: &App,
    s: &Session,
    user: &User,
    number: i64,
) -> Result<(Value, TimeZone, String, Option<Decimal>), PageError> {
    let table_path = format!("/parks/getAllPriceTableEntries/{number}?form=object");
    let overnight_path = format!("/parks/getOvernightConfig/{number}");
    let (table, overnight) = tokio::join!(
        call_as(app, s, user, Method::GET, &table_path, &Value::Null),
        call_as(app, s, user, Method::GET, &overnight_path, &Value::Null),
    );
    let (table, overnight) = (table?, overnight?);
    park_answers(app, s, number, &[&table, &overnight])?;
    let zone = table.body["timeZone"].as_str().unwrap_or("UTC").to_owned();
    let tz = TimeZone::get(&zone).unwrap_or(TimeZone::UTC);
    let fee = (overnight.body["enabled"].as_bool() == Some(true))
        .then(|| overnight.body["overnightFee"].as_i64().map(Decimal::from))
        .flatten();
    Ok((table.body, tz, zone, fee))
}

/// `GET /app/parks/{number}/prices`.
pub async fn prices(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Query(query): Query<Done>,
) -> Page {
    let (s, user) = staff_page(&app, &headers, PARK_STAFF, WHAT).await?;
    let (table, tz, zone, overnight) = current(&app, &s, &user, number).await?;
    let html = PricesPage {
        chrome: Chrome::of(&format!("Park {number}: price table"), &s),
        number,
        time_zone: zone,
        overnight,
        table: TableForm::of_api(&table),
        stay: StayForm::default_in(&tz),
        preview: None,
        error: None,
        notice: (query.done.as_deref() == Some("saved")).then_some("Price table saved."),
    }
    .render();
    Ok(page(&app, StatusCode::OK, html, None))
}

/// `POST /app/parks/{number}/prices`: `action=preview` prices the stay with the edited table;
/// `action=save` replaces the table. Either way the engine checks the table first, and a
/// refusal comes back with everything as typed and the wrong field marked.
pub async fn edit(
    State(app): State<App>,
    headers: HeaderMap,
    Path(number): Path<i64>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    let (s, user) = staff_form(&app, &headers, &form, PARK_STAFF, WHAT).await?;
    let (_, tz, zone, overnight) = current(&app, &s, &user, number).await?;
    let mut table = TableForm::of_post(&form);
    let stay = StayForm::of_post(&form);
    let saving = field(&form, "action") == "save";
    let body = table.to_api();
    let checked: Result<PriceTable, String> =
        pms_tariff::json::parse_api(&body).map_err(|e| table.refuse(&e));
    let mut status = StatusCode::OK;
    let mut preview = None;
    let error = match checked {
        Err(message) => {
            status = StatusCode::BAD_REQUEST;
            Some(message)
        }
        Ok(_) if saving => {
            let path = format!("/parks/defineTimePeriods/{number}");
            let r = call_as(&app, &s, &user, Method::PUT, &path, &body).await?;
            if r.status.is_success() {
                return Ok(redirect(&format!("/app/parks/{number}/prices?done=saved")));
            }
            status = r.refused_status();
            Some(r.message())
        }
        Ok(mut valid) => {
            valid.overnight = overnight;
            match stay.stay(&tz) {
                Ok(stay) => match fee::price(&valid, &tz, &stay) {
                    Ok(bill) => {
                        preview = Some(preview_of(&bill, &tz));
                        None
                    }
                    Err(e) => Some(format!("Preview: {e}.")),
                },
                Err(message) => Some(message),
            }
        }
    };
    table.pad();
    let html = PricesPage {
        chrome: Chrome::of(&format!("Park {number}: price table"), &s),
        number,
        time_zone: zone,
        overnight,
        table,
        stay,
        preview,
        error,
        notice: None,
    }
    .render();
    Ok(page(&app, status, html, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_posted_form_drops_blank_rows_and_keeps_the_order_of_its_indices() {
        let form = posted(&[
            ("p0.start", "9:00"),
            ("p0.end", "21:00"),
            ("p0.b0.minutes", "60"),
            ("p0.b0.car", "1.5"),
            ("p0.b0.moto", "1"),
            ("p0.b1.minutes", ""),
            ("p0.b1.car", ""),
            ("p0.b1.moto", ""),
            ("p10.start", "21:00"),
            ("p10.end", "9:00"),
            ("p10.b0.minutes", "30"),
            ("p10.b0.car", "0.5"),
            ("p10.b0.moto", "0.25"),
            ("p2.start", ""),
            ("p2.end", ""),
            ("p2.b0.minutes", ""),
            ("graceMinutes", "10"),
        ]);
        let table = TableForm::of_post(&form);
        assert_eq!(table.periods.len(), 2);
        assert_eq!(table.periods[0].blocks.len(), 1);
        assert_eq!(table.periods[1].start, "21:00", "p10 comes after p0 and p2");
        let parsed = pms_tariff::json::parse_api(&table.to_api()).expect("valid");
        assert_eq!(parsed.periods().len(), 2);
        assert_eq!(parsed.grace.map(|g| g.minutes), Some(10));
    }

    #[test]
    fn a_refusal_names_the_period_and_block_as_the_form_numbers_them() {
        let form = posted(&[
            ("p0.start", "9:00"),
            ("p0.end", "21:00"),
            ("p0.b0.minutes", "60"),
            ("p0.b0.car", "1"),
            ("p0.b0.moto", "1"),
            ("p1.start", "21:00"),
            ("p1.end", "9:00"),
            ("p1.b0.minutes", "0"),
            ("p1.b0.car", "1"),
            ("p1.b0.moto", "1"),
        ]);
        let mut table = TableForm::of_post(&form);
        let e = pms_tariff::json::parse_api(&table.to_api()).expect_err("0 minutes");
        let message = table.refuse(&e);
        assert!(
            message.starts_with("Period 2, block 1, minutes:"),
            "{message}"
        );
        assert_eq!(table.periods[1].blocks[0].invalid, Some("minutes"));
        assert_eq!(table.periods[0].blocks[0].invalid, None);
    }

    #[test]
    fn a_gap_in_the_day_is_refused_for_the_table() {
        let form = posted(&[
            ("p0.start", "9:00"),
            ("p0.end", "21:00"),
            ("p0.b0.minutes", "60"),
            ("p0.b0.car", "1"),
            ("p0.b0.moto", "1"),
        ]);
        let mut table = TableForm::of_post(&form);
        let e = pms_tariff::json::parse_api(&table.to_api()).expect_err("a gap");
        let message = table.refuse(&e);
        assert!(message.contains("cover the whole day"), "{message}");
    }

    #[test]
    fn the_preview_prices_a_stay_on_the_parks_clock() {
        let table = pms_tariff::seed::table();
        let tz = TimeZone::get("Europe/Lisbon").expect("tz");
        let stay = StayForm {
            vehicle: "AUTOMOBILE".into(),
            arrival: "2023-11-26T08:30".into(),
            minutes: "60".into(),
        }
        .stay(&tz)
        .expect("stay");
        let bill = fee::price(&table, &tz, &stay).expect("priced");
        let p = preview_of(&bill, &tz);
        // Spec §5.11 example 1: an hour from 8:30 costs €0.60.
        assert_eq!(p.total, "0.60 €");
        assert!(p.summary.starts_with("1 h 00 min"), "{}", p.summary);
        let bad = StayForm {
            vehicle: "BUS".into(),
            arrival: "2023-11-26T08:30".into(),
            minutes: "60".into(),
        };
        assert!(bad.stay(&tz).is_err());
        let long = StayForm {
            minutes: "99999".into(),
            vehicle: "AUTOMOBILE".into(),
            arrival: "2023-11-26T08:30".into(),
        };
        assert!(long.stay(&tz).is_err());
    }
}
