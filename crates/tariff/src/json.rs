//! The JSON forms of a price table.
//!
//! - The API's (spec §3.2): an array of `{parkId, periodStart, periodEnd, thresholds:
//!   [{thresholdMinutes, costPerMinuteAutomobiles, costPerMinuteMotorcycles}]}` as the original
//!   read and wrote it (numbers as JSON numbers or numeric strings on the way in, JSON numbers on
//!   the way out), or, to set the extras too, an object `{periods: [...], graceMinutes,
//!   graceChargeFromStart, dailyMaximum, dailyMaximumResetsAt, minimumCharge}`.
//! - The event's ([`TableDoc`]): the same names with money as exact decimal strings, so a table
//!   crosses between services without passing through binary floating point.

use std::str::FromStr;

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::table::{DailyMax, Grace, Period, PriceTable, TableError, Threshold, TimeOfDay};

/// Largest amount a table may hold (per block, cap or fee), in euros.
pub const MAX_AMOUNT: i64 = 1_000_000;
/// Most decimal places an amount may have.
pub const MAX_SCALE: u32 = 4;

/// Parses a table from the API's JSON (the array or the object form).
///
/// # Errors
/// The first thing wrong, with its path (`[1].thresholds[0].thresholdMinutes`).
pub fn parse_api(body: &Value) -> Result<PriceTable, TableError> {
    match body {
        Value::Array(entries) => PriceTable::try_new(periods(entries)?),
        Value::Object(obj) => {
            let entries = match obj.get("periods") {
                Some(Value::Array(a)) => a,
                _ => return Err(TableError::new("periods", "must be an array of periods")),
            };
            let table = PriceTable::try_new(periods(entries)?)?;
            let given = |name: &str| obj.get(name).filter(|v| !v.is_null());
            let charge_from_start = match given("graceChargeFromStart") {
                None => None,
                Some(Value::Bool(b)) => Some(*b),
                Some(_) => {
                    return Err(TableError::new(
                        "graceChargeFromStart",
                        "must be true or false",
                    ))
                }
            };
            let grace = match given("graceMinutes") {
                None if charge_from_start.is_some() => {
                    return Err(TableError::new(
                        "graceChargeFromStart",
                        "applies only with graceMinutes",
                    ))
                }
                None => None,
                Some(v) => Some(Grace {
                    minutes: whole(v, "graceMinutes")?,
                    charge_from_start: charge_from_start.unwrap_or(true),
                }),
            };
            let resets_at = given("dailyMaximumResetsAt")
                .map(|v| time(v, "dailyMaximumResetsAt"))
                .transpose()?;
            let daily_max = match given("dailyMaximum") {
                None if resets_at.is_some() => {
                    return Err(TableError::new(
                        "dailyMaximumResetsAt",
                        "applies only with dailyMaximum",
                    ))
                }
                None => None,
                Some(v) => Some(DailyMax {
                    amount: amount(v, "dailyMaximum")?,
                    resets_at: resets_at.unwrap_or(TimeOfDay::MIDNIGHT),
                }),
            };
            let minimum = match obj.get("minimumCharge") {
                None | Some(Value::Null) => None,
                Some(v) => Some(amount(v, "minimumCharge")?),
            };
            table.with_extras(grace, daily_max, minimum, None)
        }
        _ => Err(TableError::new(
            "body",
            "must be an array of periods or an object with \"periods\"",
        )),
    }
}

fn periods(entries: &[Value]) -> Result<Vec<Period>, TableError> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let at = |f: &str| format!("[{i}].{f}");
            let Value::Object(e) = e else {
                return Err(TableError::new(format!("[{i}]"), "must be an object"));
            };
            let thresholds = match e.get("thresholds") {
                Some(Value::Array(t)) => t,
                _ => return Err(TableError::new(at("thresholds"), "must be an array")),
            };
            Ok(Period {
                start: time(field(e, "periodStart", &at)?, &at("periodStart"))?,
                end: time(field(e, "periodEnd", &at)?, &at("periodEnd"))?,
                thresholds: thresholds
                    .iter()
                    .enumerate()
                    .map(|(j, t)| {
                        let at = |f: &str| format!("[{i}].thresholds[{j}].{f}");
                        let Value::Object(t) = t else {
                            return Err(TableError::new(
                                format!("[{i}].thresholds[{j}]"),
                                "must be an object",
                            ));
                        };
                        Ok(Threshold {
                            minutes: whole(
                                field(t, "thresholdMinutes", &at)?,
                                &at("thresholdMinutes"),
                            )?,
                            automobile: amount(
                                field(t, "costPerMinuteAutomobiles", &at)?,
                                &at("costPerMinuteAutomobiles"),
                            )?,
                            motorcycle: amount(
                                field(t, "costPerMinuteMotorcycles", &at)?,
                                &at("costPerMinuteMotorcycles"),
                            )?,
                        })
                    })
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

fn field<'a>(
    obj: &'a Map<String, Value>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<&'a Value, TableError> {
    match obj.get(name) {
        None | Some(Value::Null) => Err(TableError::new(at(name), "is required")),
        Some(v) => Ok(v),
    }
}

fn time(v: &Value, path: &str) -> Result<TimeOfDay, TableError> {
    v.as_str()
        .and_then(TimeOfDay::parse)
        .ok_or_else(|| TableError::new(path, "must be a time of day, H:MM"))
}

fn whole(v: &Value, path: &str) -> Result<u32, TableError> {
    pms_vocab::fields::integer(v)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| TableError::new(path, "must be a whole number of minutes"))
}

/// An exact amount from a JSON number or numeric string.
fn amount(v: &Value, path: &str) -> Result<Decimal, TableError> {
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        _ => return Err(TableError::new(path, "must be an amount in euros")),
    };
    let d = Decimal::from_str(&text)
        .or_else(|_| Decimal::from_scientific(&text))
        .map_err(|_| TableError::new(path, "must be an amount in euros"))?;
    if d.abs() > Decimal::from(MAX_AMOUNT) {
        return Err(TableError::new(path, format!("at most {MAX_AMOUNT}")));
    }
    if d.normalize().scale() > MAX_SCALE {
        return Err(TableError::new(
            path,
            format!("at most {MAX_SCALE} decimal places"),
        ));
    }
    Ok(d.normalize())
}

/// An amount as a JSON number (the original's form; the arithmetic never saw a float).
pub fn money(d: Decimal) -> Value {
    d.to_f64()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// The API's array form of `table` for park `park_id` (the extras are not in it; see
/// [`api_extras`]).
pub fn api_entries(table: &PriceTable, park_id: i64) -> Value {
    serde_json::to_value(api_periods(table, park_id)).unwrap_or_default()
}

fn api_periods(table: &PriceTable, park_id: i64) -> Vec<ApiPeriod> {
    table
        .periods()
        .iter()
        .map(|p| ApiPeriod {
            park_id,
            period_start: p.start.to_string(),
            period_end: p.end.to_string(),
            thresholds: p
                .thresholds
                .iter()
                .map(|t| ApiThreshold {
                    threshold_minutes: t.minutes,
                    cost_per_minute_automobiles: money(t.automobile),
                    cost_per_minute_motorcycles: money(t.motorcycle),
                })
                .collect(),
        })
        .collect()
}

/// The extras of `table` as the object form names them (all `null` when off).
pub fn api_extras(table: &PriceTable) -> Value {
    let mut out = serde_json::to_value(api_table(table, 0)).unwrap_or_default();
    if let Value::Object(fields) = &mut out {
        fields.remove("periods");
    }
    out
}

fn api_table(table: &PriceTable, park_id: i64) -> ApiTable {
    ApiTable {
        periods: api_periods(table, park_id),
        grace_minutes: table.grace.map(|g| g.minutes),
        grace_charge_from_start: table.grace.map(|g| g.charge_from_start),
        daily_maximum: table.daily_max.map(|d| money(d.amount)),
        daily_maximum_resets_at: table.daily_max.map(|d| d.resets_at.to_string()),
        minimum_charge: table.minimum.map(money),
        time_zone: None,
    }
}

/// `table` in the API's object form: `{periods, graceMinutes, …}` (what [`parse_api`] reads
/// back to the same table, extras included).
pub fn api_object(table: &PriceTable, park_id: i64) -> Value {
    serde_json::to_value(api_table(table, park_id)).unwrap_or_default()
}

/// A period in the API's form: the array form's element (spec §3.2).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"parkId": 1, "periodStart": "9:00", "periodEnd": "21:00",
    "thresholds": [{"thresholdMinutes": 60, "costPerMinuteAutomobiles": 0.02,
    "costPerMinuteMotorcycles": 0.01}]}))]
pub struct ApiPeriod {
    /// The park's id; answers carry it, a table sent in may leave it out (it is not read).
    #[schema(required = false)]
    pub park_id: i64,
    /// Start, on the park's clock; periods cover the day without gaps or overlaps.
    #[schema(value_type = TimeOfDay)]
    pub period_start: String,
    /// End (the next period's start; `24:00` is midnight).
    #[schema(value_type = TimeOfDay)]
    pub period_end: String,
    /// The blocks, in order; the last repeats until the period ends.
    #[schema(min_items = 1, max_items = 100)]
    pub thresholds: Vec<ApiThreshold>,
}

/// One block of an [`ApiPeriod`].
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiThreshold {
    /// The block's length.
    #[schema(minimum = 1, maximum = 1440)]
    pub threshold_minutes: u32,
    /// Euros per minute for automobiles.
    #[schema(value_type = Amount)]
    pub cost_per_minute_automobiles: Value,
    /// Euros per minute for motorcycles (and any other vehicle).
    #[schema(value_type = Amount)]
    pub cost_per_minute_motorcycles: Value,
}

/// A price table in the API's object form: the periods and the extras (`null` when off).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiTable {
    /// The periods of the day.
    #[schema(min_items = 1, max_items = 48)]
    pub periods: Vec<ApiPeriod>,
    /// Minutes free of charge.
    #[schema(required = false)]
    pub grace_minutes: Option<u32>,
    /// Whether a stay longer than the grace pays from its start (default `true`).
    #[schema(required = false)]
    pub grace_charge_from_start: Option<bool>,
    /// Most a charging day costs.
    #[schema(value_type = Option<Amount>, required = false)]
    pub daily_maximum: Option<Value>,
    /// When the charging day starts (default midnight).
    #[schema(value_type = Option<TimeOfDay>, required = false)]
    pub daily_maximum_resets_at: Option<String>,
    /// Least a stay past the grace costs.
    #[schema(value_type = Option<Amount>, required = false)]
    pub minimum_charge: Option<Value>,
    /// The park's time zone, in which the periods are read (answers only; not read back).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, read_only)]
    pub time_zone: Option<String>,
}

/// An amount in euros as the API takes it: a JSON number or a numeric string, at most
/// [`MAX_AMOUNT`] and [`MAX_SCALE`] decimal places (answers are always numbers).
#[derive(Debug, Clone, Copy)]
pub struct Amount;

impl PartialSchema for Amount {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .minimum(Some(-MAX_AMOUNT))
                    .maximum(Some(MAX_AMOUNT)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"^\s*[+-]?[0-9]+(\.[0-9]{1,4})?\s*$")),
            )
            .description(Some(
                "Euros: a number, or a numeric string (at most 4 decimals).",
            ))
            .into()
    }
}

impl ToSchema for Amount {}

impl PartialSchema for TimeOfDay {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(r"^\s*(([01]?[0-9]|2[0-3]):[0-5]?[0-9]|24:0?0)\s*$"))
            .description(Some("A time of day, `H:MM` (`24:00` is midnight)."))
            .examples([json!("9:00")])
            .into()
    }
}

impl ToSchema for TimeOfDay {}

/// A price table as events carry it: exact decimal strings, times as `H:MM`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableDoc {
    /// The periods.
    pub periods: Vec<PeriodDoc>,
    /// Grace minutes, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_minutes: Option<u32>,
    /// Whether a stay past the grace is charged from its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_charge_from_start: Option<bool>,
    /// Daily maximum, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_maximum: Option<String>,
    /// When the charging day starts (`H:MM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_maximum_resets_at: Option<String>,
    /// Minimum charge, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_charge: Option<String>,
    /// Overnight fee per midnight, if the park charges one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overnight_fee: Option<String>,
}

/// One period of a [`TableDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeriodDoc {
    /// `H:MM`.
    pub period_start: String,
    /// `H:MM`.
    pub period_end: String,
    /// The blocks.
    pub thresholds: Vec<ThresholdDoc>,
}

/// One block of a [`PeriodDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdDoc {
    /// Minutes.
    pub threshold_minutes: u32,
    /// Exact decimal text.
    pub cost_per_minute_automobiles: String,
    /// Exact decimal text.
    pub cost_per_minute_motorcycles: String,
}

impl From<&PriceTable> for TableDoc {
    fn from(t: &PriceTable) -> Self {
        Self {
            periods: t
                .periods()
                .iter()
                .map(|p| PeriodDoc {
                    period_start: p.start.to_string(),
                    period_end: p.end.to_string(),
                    thresholds: p
                        .thresholds
                        .iter()
                        .map(|t| ThresholdDoc {
                            threshold_minutes: t.minutes,
                            cost_per_minute_automobiles: t.automobile.to_string(),
                            cost_per_minute_motorcycles: t.motorcycle.to_string(),
                        })
                        .collect(),
                })
                .collect(),
            grace_minutes: t.grace.map(|g| g.minutes),
            grace_charge_from_start: t.grace.map(|g| g.charge_from_start),
            daily_maximum: t.daily_max.map(|d| d.amount.to_string()),
            daily_maximum_resets_at: t.daily_max.map(|d| d.resets_at.to_string()),
            minimum_charge: t.minimum.map(|m| m.to_string()),
            overnight_fee: t.overnight.map(|o| o.to_string()),
        }
    }
}

impl TableDoc {
    /// The table it describes, validated again (a document from elsewhere is not trusted).
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn to_table(&self) -> Result<PriceTable, TableError> {
        let dec = |s: &str, path: &str| amount(&Value::String(s.to_owned()), path);
        let periods = self
            .periods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let at = |f: &str| format!("periods[{i}].{f}");
                Ok(Period {
                    start: time(&Value::String(p.period_start.clone()), &at("periodStart"))?,
                    end: time(&Value::String(p.period_end.clone()), &at("periodEnd"))?,
                    thresholds: p
                        .thresholds
                        .iter()
                        .map(|t| {
                            Ok(Threshold {
                                minutes: t.threshold_minutes,
                                automobile: dec(&t.cost_per_minute_automobiles, &at("thresholds"))?,
                                motorcycle: dec(&t.cost_per_minute_motorcycles, &at("thresholds"))?,
                            })
                        })
                        .collect::<Result<_, TableError>>()?,
                })
            })
            .collect::<Result<Vec<_>, TableError>>()?;
        let grace = self.grace_minutes.map(|minutes| Grace {
            minutes,
            charge_from_start: self.grace_charge_from_start.unwrap_or(true),
        });
        let daily_max = match &self.daily_maximum {
            Some(a) => Some(DailyMax {
                amount: dec(a, "dailyMaximum")?,
                resets_at: match &self.daily_maximum_resets_at {
                    Some(t) => time(&Value::String(t.clone()), "dailyMaximumResetsAt")?,
                    None => TimeOfDay::MIDNIGHT,
                },
            }),
            None => None,
        };
        let minimum = match &self.minimum_charge {
            Some(m) => Some(dec(m, "minimumCharge")?),
            None => None,
        };
        let overnight = match &self.overnight_fee {
            Some(o) => Some(dec(o, "overnightFee")?),
            None => None,
        };
        PriceTable::try_new(periods)?.with_extras(grace, daily_max, minimum, overnight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_postman_table_parses_with_string_prices() {
        let body = json!([
            {"parkId": 2, "periodStart": "08:30", "periodEnd": "09:30",
             "thresholds": [{"thresholdMinutes": 15, "costPerMinuteAutomobiles": "0.30", "costPerMinuteMotorcycles": "0.30"}]},
            {"periodStart": "09:30", "periodEnd": "8:30",
             "thresholds": [{"thresholdMinutes": "30", "costPerMinuteAutomobiles": 0.3, "costPerMinuteMotorcycles": 0.3}]},
        ]);
        let t = parse_api(&body).expect("valid");
        assert_eq!(t.periods().len(), 2);
        assert_eq!(t.periods()[0].thresholds[0].automobile, Decimal::new(3, 1));
        let out = api_entries(&t, 2);
        assert_eq!(out[0]["periodStart"], "8:30");
        assert_eq!(out[1]["thresholds"][0]["thresholdMinutes"], 30);
        assert_eq!(out[1]["thresholds"][0]["costPerMinuteAutomobiles"], 0.3);
    }

    #[test]
    fn an_extra_s_settings_are_checked_and_need_the_extra() {
        let periods = json!([{"periodStart": "0:00", "periodEnd": "24:00",
            "thresholds": [{"thresholdMinutes": 60, "costPerMinuteAutomobiles": 0.02,
            "costPerMinuteMotorcycles": 0.01}]}]);
        for (extra, path) in [
            (
                json!({"dailyMaximumResetsAt": "6:00"}),
                "dailyMaximumResetsAt",
            ),
            (
                json!({"dailyMaximum": 20, "dailyMaximumResetsAt": "AAA"}),
                "dailyMaximumResetsAt",
            ),
            (
                json!({"graceChargeFromStart": false}),
                "graceChargeFromStart",
            ),
            (
                json!({"graceMinutes": 10, "graceChargeFromStart": "no"}),
                "graceChargeFromStart",
            ),
        ] {
            let mut body = extra.clone();
            body["periods"] = periods.clone();
            assert_eq!(parse_api(&body).unwrap_err().path, path, "{extra}");
        }
        let mut body = json!({"dailyMaximum": 20, "dailyMaximumResetsAt": "6:00",
            "graceMinutes": 10, "graceChargeFromStart": false});
        body["periods"] = periods;
        let table = parse_api(&body).expect("valid");
        assert_eq!(
            parse_api(&api_object(&table, 1)).expect("round trip"),
            table
        );
    }

    #[test]
    fn bad_tables_name_the_place() {
        let cases = [
            (json!("x"), "body"),
            (
                json!([{"periodStart": "9:00", "periodEnd": "21:00"}]),
                "[0].thresholds",
            ),
            (
                json!([{"periodStart": "25:00", "periodEnd": "21:00", "thresholds": []}]),
                "[0].periodStart",
            ),
            (
                json!([{"periodStart": "0:00", "periodEnd": "0:00", "thresholds": [{"thresholdMinutes": 15, "costPerMinuteAutomobiles": "x", "costPerMinuteMotorcycles": 1}]}]),
                "[0].thresholds[0].costPerMinuteAutomobiles",
            ),
            (
                json!([{"periodStart": "0:00", "periodEnd": "0:00", "thresholds": [{"thresholdMinutes": -5, "costPerMinuteAutomobiles": 1, "costPerMinuteMotorcycles": 1}]}]),
                "[0].thresholds[0].thresholdMinutes",
            ),
            (
                json!([{"periodStart": "0:00", "periodEnd": "0:00", "thresholds": [{"thresholdMinutes": 5, "costPerMinuteAutomobiles": 0.00001, "costPerMinuteMotorcycles": 1}]}]),
                "[0].thresholds[0].costPerMinuteAutomobiles",
            ),
            (
                json!({"periods": [{"periodStart": "0:00", "periodEnd": "0:00", "thresholds": [{"thresholdMinutes": 5, "costPerMinuteAutomobiles": 1, "costPerMinuteMotorcycles": 1}]}], "minimumCharge": -1}),
                "minimumCharge",
            ),
        ];
        for (body, path) in cases {
            let e = parse_api(&body).expect_err("invalid");
            assert_eq!(e.path, path, "{body}: {e}");
        }
    }

    #[test]
    fn documents_round_trip_exactly() {
        let body = json!({"periods": [
            {"periodStart": "9:00", "periodEnd": "21:00", "thresholds": [{"thresholdMinutes": 15, "costPerMinuteAutomobiles": "0.15", "costPerMinuteMotorcycles": "0.10"}]},
            {"periodStart": "21:00", "periodEnd": "9:00", "thresholds": [{"thresholdMinutes": 60, "costPerMinuteAutomobiles": "1.05", "costPerMinuteMotorcycles": "0.5"}]},
        ], "graceMinutes": 10, "graceChargeFromStart": false, "dailyMaximum": "12.50", "dailyMaximumResetsAt": "6:00", "minimumCharge": 0.5});
        let t = parse_api(&body).expect("valid");
        let doc = TableDoc::from(&t);
        let text = serde_json::to_string(&doc).expect("json");
        assert!(text.contains("\"1.05\""), "{text}");
        let back: TableDoc = serde_json::from_str(&text).expect("parse");
        assert_eq!(back.to_table().expect("valid"), t);
        assert_eq!(api_extras(&t)["dailyMaximumResetsAt"], "6:00");
    }
}
