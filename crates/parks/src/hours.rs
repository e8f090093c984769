//! A park's opening hours: when its entrances take cars, by weekday in the park's own time zone,
//! with dated exceptions (a holiday closed, a late opening). Pure: no I/O.
//!
//! Exits are never refused by them (no car is trapped by a schedule); only entrances are. A
//! park without opening hours is always open. Times are the park's wall-clock time: on the day
//! clocks go forward, an hour that does not exist is simply never reached; on the day they go
//! back, the hour lived twice is open or closed both times alike.

use jiff::civil::{Time, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Most open spans in one day.
pub const MAX_SPANS_PER_DAY: usize = 6;
/// Most dated exceptions.
pub const MAX_EXCEPTIONS: usize = 400;

/// When a park's entrances are open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(example = json!({
    "weekly": {
        "monday": [{"from": "07:00", "to": "22:00"}],
        "saturday": [{"from": "09:00", "to": "13:00"}, {"from": "15:00", "to": "20:00"}]
    },
    "exceptions": [{"date": "2026-12-25", "open": []}]
}))]
pub struct OpeningHours {
    /// Each weekday's open spans; a day left out is closed all day.
    pub weekly: Weekly,
    /// Dates whose spans replace their weekday's (`open: []`: closed all day).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<Exception>,
}

/// Open spans per weekday.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Weekly {
    /// Mondays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monday: Vec<Span>,
    /// Tuesdays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuesday: Vec<Span>,
    /// Wednesdays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wednesday: Vec<Span>,
    /// Thursdays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thursday: Vec<Span>,
    /// Fridays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub friday: Vec<Span>,
    /// Saturdays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub saturday: Vec<Span>,
    /// Sundays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sunday: Vec<Span>,
}

/// One open span of a day, `from` included, `to` not: `HH:MM`, `to` up to `24:00` (a span
/// cannot pass midnight: end it at `24:00` and start the next day at `00:00`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// Opens at.
    #[schema(pattern = "^([01][0-9]|2[0-3]):[0-5][0-9]$", example = "07:00")]
    pub from: String,
    /// Closes at.
    #[schema(pattern = "^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$", example = "22:00")]
    pub to: String,
}

/// A date with its own spans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Exception {
    /// The date (`YYYY-MM-DD`, the park's calendar).
    #[schema(format = Date, example = "2026-12-25")]
    pub date: String,
    /// Its open spans (none: closed all day).
    pub open: Vec<Span>,
}

/// What is wrong with opening hours, naming where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HoursError(String);

impl Weekly {
    fn days(&self) -> [(Weekday, &Vec<Span>); 7] {
        [
            (Weekday::Monday, &self.monday),
            (Weekday::Tuesday, &self.tuesday),
            (Weekday::Wednesday, &self.wednesday),
            (Weekday::Thursday, &self.thursday),
            (Weekday::Friday, &self.friday),
            (Weekday::Saturday, &self.saturday),
            (Weekday::Sunday, &self.sunday),
        ]
    }

    fn on(&self, day: Weekday) -> &[Span] {
        self.days()
            .into_iter()
            .find(|(d, _)| *d == day)
            .map_or(&[][..], |(_, spans)| spans)
    }
}

/// Minutes since midnight of `HH:MM` (`24:00` when `end`).
fn minutes(text: &str, end: bool) -> Option<u16> {
    if end && text == "24:00" {
        return Some(24 * 60);
    }
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// The spans as minute ranges, checked: each well formed and not empty, in order, apart.
fn ranges(spans: &[Span], at: &str) -> Result<Vec<(u16, u16)>, HoursError> {
    if spans.len() > MAX_SPANS_PER_DAY {
        return Err(HoursError(format!(
            "{at}: at most {MAX_SPANS_PER_DAY} spans a day"
        )));
    }
    let mut out: Vec<(u16, u16)> = Vec::with_capacity(spans.len());
    for (i, span) in spans.iter().enumerate() {
        let bad = |what: &str| HoursError(format!("{at}[{i}]: {what}"));
        let from = minutes(&span.from, false).ok_or_else(|| bad("`from` must be HH:MM"))?;
        let to = minutes(&span.to, true).ok_or_else(|| bad("`to` must be HH:MM or 24:00"))?;
        if from >= to {
            return Err(bad("`from` must be before `to`"));
        }
        if out.last().is_some_and(|&(_, end)| from < end) {
            return Err(bad("spans must be in order and must not overlap"));
        }
        out.push((from, to));
    }
    Ok(out)
}

impl OpeningHours {
    /// Checks every span and date.
    ///
    /// # Errors
    /// [`HoursError`] naming the first fault (`weekly.monday[1]: …`, `exceptions[0].date: …`).
    pub fn validate(&self) -> Result<(), HoursError> {
        for (day, spans) in self.weekly.days() {
            ranges(spans, &format!("weekly.{}", day_name(day)))?;
        }
        if self.exceptions.len() > MAX_EXCEPTIONS {
            return Err(HoursError(format!("exceptions: at most {MAX_EXCEPTIONS}")));
        }
        let mut dates = Vec::with_capacity(self.exceptions.len());
        for (i, e) in self.exceptions.iter().enumerate() {
            let date: jiff::civil::Date = e.date.parse().map_err(|_| {
                HoursError(format!("exceptions[{i}].date: must be a date, YYYY-MM-DD"))
            })?;
            if dates.contains(&date) {
                return Err(HoursError(format!(
                    "exceptions[{i}].date: {date} is given twice"
                )));
            }
            dates.push(date);
            ranges(&e.open, &format!("exceptions[{i}].open"))?;
        }
        Ok(())
    }

    /// Whether the entrances are open at `at`, on the wall clock of `zone`. Hours that do not
    /// validate open nothing (they are validated before they are stored).
    pub fn open_at(&self, at: Timestamp, zone: &TimeZone) -> bool {
        let local = at.to_zoned_datetime(zone.clone());
        let (date, time) = (local.date(), local.time());
        let spans = self
            .exceptions
            .iter()
            .find(|e| e.date.parse::<jiff::civil::Date>().ok() == Some(date))
            .map_or_else(|| self.weekly.on(date.weekday()), |e| &e.open[..]);
        let now = minute_of(time);
        ranges(spans, "")
            .map(|r| r.iter().any(|&(from, to)| from <= now && now < to))
            .unwrap_or(false)
    }
}

fn minute_of(time: Time) -> u16 {
    u16::try_from(time.hour()).unwrap_or(0) * 60 + u16::try_from(time.minute()).unwrap_or(0)
}

fn day_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "monday",
        Weekday::Tuesday => "tuesday",
        Weekday::Wednesday => "wednesday",
        Weekday::Thursday => "thursday",
        Weekday::Friday => "friday",
        Weekday::Saturday => "saturday",
        Weekday::Sunday => "sunday",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(from: &str, to: &str) -> Span {
        Span {
            from: from.into(),
            to: to.into(),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("instant")
    }

    fn weekdays_seven_to_ten() -> OpeningHours {
        let day = vec![span("07:00", "22:00")];
        OpeningHours {
            weekly: Weekly {
                monday: day.clone(),
                tuesday: day.clone(),
                wednesday: day.clone(),
                thursday: day.clone(),
                friday: day,
                saturday: vec![span("09:00", "13:00"), span("15:00", "24:00")],
                sunday: vec![],
            },
            exceptions: vec![Exception {
                date: "2026-12-25".into(),
                open: vec![],
            }],
        }
    }

    #[test]
    fn open_by_the_parks_wall_clock() {
        let hours = weekdays_seven_to_ten();
        hours.validate().expect("valid");
        let lisbon = TimeZone::get("Europe/Lisbon").expect("zone");
        let tokyo = TimeZone::get("Asia/Tokyo").expect("zone");
        // Thursday 2026-12-03 in Lisbon (UTC+0 in winter).
        assert!(
            hours.open_at(at("2026-12-03T07:00:00Z"), &lisbon),
            "opens at 07:00"
        );
        assert!(!hours.open_at(at("2026-12-03T06:59:59Z"), &lisbon));
        assert!(
            !hours.open_at(at("2026-12-03T22:00:00Z"), &lisbon),
            "closes at 22:00"
        );
        // The same instant is 16:00 in Tokyo: open there too; 23:30 UTC is 08:30 Friday there.
        assert!(hours.open_at(at("2026-12-03T23:30:00Z"), &tokyo));
        assert!(!hours.open_at(at("2026-12-03T23:30:00Z"), &lisbon));
        // Saturday's two spans and its open end at midnight; Sunday closed all day.
        assert!(hours.open_at(at("2026-12-05T12:59:00Z"), &lisbon));
        assert!(!hours.open_at(at("2026-12-05T14:00:00Z"), &lisbon));
        assert!(hours.open_at(at("2026-12-05T23:59:00Z"), &lisbon));
        assert!(!hours.open_at(at("2026-12-06T12:00:00Z"), &lisbon));
        // Christmas is a Friday, closed by its exception.
        assert!(!hours.open_at(at("2026-12-25T12:00:00Z"), &lisbon));
        // Summer time: 07:00 in Lisbon is 06:00 UTC.
        assert!(hours.open_at(at("2026-07-02T06:00:00Z"), &lisbon));
    }

    #[test]
    fn bad_hours_are_named() {
        type Spoil = fn(&mut OpeningHours);
        let cases: [(Spoil, &str); 7] = [
            (
                |h| h.weekly.monday = vec![span("7:00", "22:00")],
                "weekly.monday[0]",
            ),
            (
                |h| h.weekly.monday = vec![span("07:00", "24:01")],
                "weekly.monday[0]",
            ),
            (
                |h| h.weekly.monday = vec![span("24:00", "24:00")],
                "weekly.monday[0]",
            ),
            (
                |h| h.weekly.sunday = vec![span("10:00", "09:00")],
                "weekly.sunday[0]",
            ),
            (
                |h| h.weekly.friday = vec![span("07:00", "12:00"), span("11:00", "13:00")],
                "weekly.friday[1]",
            ),
            (
                |h| h.exceptions[0].date = "2026-02-30".into(),
                "exceptions[0].date",
            ),
            (
                |h| h.exceptions.push(h.exceptions[0].clone()),
                "exceptions[1].date",
            ),
        ];
        for (spoil, at) in cases {
            let mut hours = weekdays_seven_to_ten();
            spoil(&mut hours);
            let e = hours.validate().expect_err(at);
            assert!(e.to_string().starts_with(at), "{e} (expected {at})");
        }
    }

    #[test]
    fn the_document_reads_back_as_written() {
        let text = r#"{"weekly":{"monday":[{"from":"07:00","to":"22:00"}]},"exceptions":[{"date":"2026-12-25","open":[]}]}"#;
        let hours: OpeningHours = serde_json::from_str(text).expect("parse");
        assert_eq!(serde_json::to_string(&hours).expect("json"), text);
        assert!(serde_json::from_str::<OpeningHours>(r#"{"weekly":{"mon":[]}}"#).is_err());
    }
}
