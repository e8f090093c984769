//! A park's price table and its rules: the periods of the day, each with its ordered blocks
//! (APDS calls them rate steps), and the optional extras real tariffs have (grace minutes, a
//! daily maximum, a minimum charge, the overnight fee). A [`PriceTable`] can only be built valid
//! ([`PriceTable::try_new`]): every minute of the day in exactly one period, blocks of at least
//! one minute, no negative price. Pricing a stay is [`crate::fee`]'s; the JSON forms are
//! [`crate::json`]'s.

use rust_decimal::Decimal;

/// Minutes in a day.
pub const MINUTES_PER_DAY: u16 = 24 * 60;
/// Most periods one table may have.
pub const MAX_PERIODS: usize = 48;
/// Most blocks one period may have.
pub const MAX_THRESHOLDS: usize = 100;
/// Longest block, in minutes (a day).
pub const MAX_BLOCK_MINUTES: u32 = 24 * 60;

/// A time of day, minutes after midnight (0..1440), written `H:MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeOfDay(u16);

impl TimeOfDay {
    /// Midnight.
    pub const MIDNIGHT: TimeOfDay = TimeOfDay(0);

    /// `minutes` after midnight, if under a day.
    pub fn from_minutes(minutes: u16) -> Option<Self> {
        (minutes < MINUTES_PER_DAY).then_some(Self(minutes))
    }

    /// `hour:minute`, if a valid time of day (`24:00` is accepted as midnight).
    pub fn from_hm(hour: u16, minute: u16) -> Option<Self> {
        match (hour, minute) {
            (24, 0) => Some(Self(0)),
            (h, m) if h < 24 && m < 60 => Some(Self(h * 60 + m)),
            _ => None,
        }
    }

    /// Parses `H:MM` or `HH:MM` (the original wrote `9:00`, `21:00`; `8:30`).
    pub fn parse(text: &str) -> Option<Self> {
        let (h, m) = text.trim().split_once(':')?;
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(h) || !digits(m) {
            return None;
        }
        Self::from_hm(h.parse().ok()?, m.parse().ok()?)
    }

    /// Minutes after midnight.
    pub fn minutes(self) -> u16 {
        self.0
    }
}

impl std::fmt::Display for TimeOfDay {
    /// `H:MM`, as the original's tables wrote times (`9:00`, `21:00`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{:02}", self.0 / 60, self.0 % 60)
    }
}

/// One block of a period: its length and what it costs per vehicle type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Threshold {
    /// Length of the block in minutes (at least 1). Every started block is charged in full.
    pub minutes: u32,
    /// Price of the block for an automobile (the original's `costPerMinuteAutomobiles`, which
    /// despite its name is charged once per block).
    pub automobile: Decimal,
    /// Price of the block for a motorcycle.
    pub motorcycle: Decimal,
}

/// A period of the day, `[start, end)`, wrapping past midnight when `end <= start`
/// (`21:00–9:00` is `[21:00, 24:00) ∪ [00:00, 9:00)`; `0:00–0:00` is the whole day).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    /// First minute of the period.
    pub start: TimeOfDay,
    /// First minute after it.
    pub end: TimeOfDay,
    /// Blocks in the order they are charged; after the last, the last repeats.
    pub thresholds: Vec<Threshold>,
}

impl Period {
    /// Whether the minute `t` falls in `[start, end)` (wrapping past midnight).
    pub fn contains(&self, t: TimeOfDay) -> bool {
        let (s, e, t) = (self.start.0, self.end.0, t.0);
        if s < e {
            s <= t && t < e
        } else {
            t >= s || t < e
        }
    }

    /// Minutes the period covers in a day.
    pub fn length(&self) -> u16 {
        let (s, e) = (self.start.0, self.end.0);
        if s < e {
            e - s
        } else {
            MINUTES_PER_DAY - s + e
        }
    }
}

/// Grace minutes: a stay this short is free (APDS: grace period).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grace {
    /// A stay of at most this many minutes costs nothing.
    pub minutes: u32,
    /// Once exceeded: `true` charges the stay from its start, `false` from the end of the grace.
    pub charge_from_start: bool,
}

/// A daily maximum: what one charging day of a stay may cost at most (APDS: maximum fee).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DailyMax {
    /// Most charged per charging day.
    pub amount: Decimal,
    /// When a charging day begins, in the park's time zone.
    pub resets_at: TimeOfDay,
}

/// A valid price table (see the module doc for what "valid" means).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceTable {
    periods: Vec<Period>,
    /// Short stays free; `None`: every stay is charged from its first minute.
    pub grace: Option<Grace>,
    /// Cap per charging day; `None`: no cap.
    pub daily_max: Option<DailyMax>,
    /// Least a charged stay costs; `None`: no minimum.
    pub minimum: Option<Decimal>,
    /// Charged once per midnight (park time) the stay spans; `None`: the park has no overnight
    /// fee or has it switched off.
    pub overnight: Option<Decimal>,
}

/// What is wrong with a table, naming where (`periods[1].thresholds[0].thresholdMinutes`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TableError {
    /// Where in the table, in the JSON's terms.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl TableError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl PriceTable {
    /// A table of `periods` with no extras, if valid: at least one period; every minute of the
    /// day in exactly one period; each period with 1 to [`MAX_THRESHOLDS`] blocks of 1 to
    /// [`MAX_BLOCK_MINUTES`] minutes and non-negative prices.
    ///
    /// # Errors
    /// The first rule broken, naming the period and block.
    pub fn try_new(periods: Vec<Period>) -> Result<Self, TableError> {
        if periods.is_empty() {
            return Err(TableError::new(
                "periods",
                "a price table needs at least one period",
            ));
        }
        if periods.len() > MAX_PERIODS {
            return Err(TableError::new(
                "periods",
                format!("at most {MAX_PERIODS} periods"),
            ));
        }
        for (i, p) in periods.iter().enumerate() {
            if p.thresholds.is_empty() {
                return Err(TableError::new(
                    format!("periods[{i}].thresholds"),
                    "a period needs at least one threshold",
                ));
            }
            if p.thresholds.len() > MAX_THRESHOLDS {
                return Err(TableError::new(
                    format!("periods[{i}].thresholds"),
                    format!("at most {MAX_THRESHOLDS} thresholds"),
                ));
            }
            for (j, t) in p.thresholds.iter().enumerate() {
                let at = |field: &str| format!("periods[{i}].thresholds[{j}].{field}");
                if t.minutes == 0 || t.minutes > MAX_BLOCK_MINUTES {
                    return Err(TableError::new(
                        at("thresholdMinutes"),
                        format!("must be 1 to {MAX_BLOCK_MINUTES} minutes"),
                    ));
                }
                if t.automobile.is_sign_negative() {
                    return Err(TableError::new(
                        at("costPerMinuteAutomobiles"),
                        "must not be negative",
                    ));
                }
                if t.motorcycle.is_sign_negative() {
                    return Err(TableError::new(
                        at("costPerMinuteMotorcycles"),
                        "must not be negative",
                    ));
                }
            }
        }
        coverage(&periods)?;
        Ok(Self {
            periods,
            grace: None,
            daily_max: None,
            minimum: None,
            overnight: None,
        })
    }

    /// The same table with the extras set, if they are sane.
    ///
    /// # Errors
    /// A negative amount, or a daily maximum below the minimum charge.
    pub fn with_extras(
        mut self,
        grace: Option<Grace>,
        daily_max: Option<DailyMax>,
        minimum: Option<Decimal>,
        overnight: Option<Decimal>,
    ) -> Result<Self, TableError> {
        if let Some(g) = grace {
            if g.minutes > MAX_BLOCK_MINUTES {
                return Err(TableError::new(
                    "graceMinutes",
                    format!("at most {MAX_BLOCK_MINUTES} minutes"),
                ));
            }
        }
        for (name, v) in [
            ("dailyMaximum", daily_max.map(|d| d.amount)),
            ("minimumCharge", minimum),
            ("overnightFee", overnight),
        ] {
            if v.is_some_and(|v| v.is_sign_negative()) {
                return Err(TableError::new(name, "must not be negative"));
            }
        }
        if let (Some(d), Some(m)) = (daily_max, minimum) {
            if d.amount < m {
                return Err(TableError::new(
                    "dailyMaximum",
                    "must not be below the minimum charge",
                ));
            }
        }
        self.grace = grace;
        self.daily_max = daily_max;
        self.minimum = minimum;
        self.overnight = overnight;
        Ok(self)
    }

    /// The periods, as given.
    pub fn periods(&self) -> &[Period] {
        &self.periods
    }

    /// The index of the one period containing `t` (a valid table has exactly one).
    pub fn period_at(&self, t: TimeOfDay) -> usize {
        // Valid tables cover every minute, so the fallback is never taken.
        self.periods.iter().position(|p| p.contains(t)).unwrap_or(0)
    }
}

/// Every minute of the day in exactly one period: the periods' lengths add up to a day and no
/// two overlap (then, by counting, they also leave no gap).
fn coverage(periods: &[Period]) -> Result<(), TableError> {
    for (i, a) in periods.iter().enumerate() {
        for (j, b) in periods.iter().enumerate().skip(i + 1) {
            if overlap(a, b) {
                return Err(TableError::new(
                    format!("periods[{j}]"),
                    format!(
                        "{}–{} overlaps periods[{i}] ({}–{})",
                        b.start, b.end, a.start, a.end
                    ),
                ));
            }
        }
    }
    let covered: u32 = periods.iter().map(|p| u32::from(p.length())).sum();
    if covered != u32::from(MINUTES_PER_DAY) {
        let gap = (0..MINUTES_PER_DAY)
            .filter_map(TimeOfDay::from_minutes)
            .find(|t| !periods.iter().any(|p| p.contains(*t)))
            .map_or_else(String::new, |t| format!(" (nothing covers {t})"));
        return Err(TableError::new(
            "periods",
            format!("the periods must cover the whole day{gap}"),
        ));
    }
    Ok(())
}

/// Whether two periods share a minute: one's start lies inside the other.
fn overlap(a: &Period, b: &Period) -> bool {
    a.contains(b.start) || b.contains(a.start)
}

/// Which of a park's table versions is in force at `at_ms`: the newest one valid from then or
/// earlier, or the oldest when every one starts later (a stay priced before its park's first
/// table began still gets a price). `versions` are (version, valid from in epoch ms); `None` only
/// when there are none.
///
/// Both services apply this rule: the parks service to quote an exit and name the version in
/// `visit.closed` (in SQL, checked against this function by its tests), the payments service to
/// invoice a visit whose event names none.
pub fn version_in_force(versions: impl IntoIterator<Item = (i64, i64)>, at_ms: i64) -> Option<i64> {
    let (mut valid, mut oldest) = (None, None);
    for (version, valid_from_ms) in versions {
        if valid_from_ms <= at_ms && valid.is_none_or(|v| version > v) {
            valid = Some(version);
        }
        if oldest.is_none_or(|v| version < v) {
            oldest = Some(version);
        }
    }
    valid.or(oldest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TimeOfDay {
        TimeOfDay::parse(s).expect("time")
    }

    fn period(s: &str, e: &str) -> Period {
        Period {
            start: t(s),
            end: t(e),
            thresholds: vec![Threshold {
                minutes: 15,
                automobile: Decimal::new(15, 2),
                motorcycle: Decimal::new(15, 2),
            }],
        }
    }

    #[test]
    fn times_of_day_parse_as_the_original_wrote_them() {
        assert_eq!(t("9:00").minutes(), 540);
        assert_eq!(t("09:00").minutes(), 540);
        assert_eq!(t("8:30").minutes(), 510);
        assert_eq!(t("24:00"), TimeOfDay::MIDNIGHT);
        for bad in ["24:01", "9", "9:60", "-1:00", "a:00", "9:000", ""] {
            assert_eq!(TimeOfDay::parse(bad), None, "{bad}");
        }
        assert_eq!(t("9:05").to_string(), "9:05");
    }

    #[test]
    fn a_wrapping_period_covers_both_sides_of_midnight() {
        let night = period("21:00", "9:00");
        for inside in ["21:00", "22:30", "23:59", "0:00", "8:59"] {
            assert!(night.contains(t(inside)), "{inside}");
        }
        for outside in ["9:00", "12:00", "20:59"] {
            assert!(!night.contains(t(outside)), "{outside}");
        }
        assert_eq!(night.length(), 12 * 60);
        assert_eq!(period("0:00", "0:00").length(), MINUTES_PER_DAY);
    }

    #[test]
    fn valid_tables_cover_the_day_exactly_once() {
        assert!(
            PriceTable::try_new(vec![period("9:00", "21:00"), period("21:00", "9:00")]).is_ok()
        );
        assert!(PriceTable::try_new(vec![period("0:00", "0:00")]).is_ok());
        let gap = PriceTable::try_new(vec![period("9:00", "21:00"), period("22:00", "9:00")])
            .unwrap_err();
        assert_eq!(gap.path, "periods");
        assert!(gap.message.contains("21:00"), "{gap}");
        let overlap = PriceTable::try_new(vec![period("9:00", "21:00"), period("20:00", "9:00")])
            .unwrap_err();
        assert_eq!(overlap.path, "periods[1]");
        assert!(PriceTable::try_new(vec![]).is_err());
        let mut bad = period("0:00", "0:00");
        bad.thresholds[0].minutes = 0;
        assert_eq!(
            PriceTable::try_new(vec![bad]).unwrap_err().path,
            "periods[0].thresholds[0].thresholdMinutes"
        );
        let mut neg = period("0:00", "0:00");
        neg.thresholds[0].motorcycle = Decimal::new(-1, 2);
        assert_eq!(
            PriceTable::try_new(vec![neg]).unwrap_err().path,
            "periods[0].thresholds[0].costPerMinuteMotorcycles"
        );
        let mut empty = period("0:00", "0:00");
        empty.thresholds.clear();
        assert_eq!(
            PriceTable::try_new(vec![empty]).unwrap_err().path,
            "periods[0].thresholds"
        );
    }

    #[test]
    fn the_version_in_force_is_the_newest_begun_or_else_the_oldest() {
        // Version 2 began at 100, version 3 at 50 (made later, valid from earlier), 4 at 300.
        let versions = [(1, 0), (2, 100), (3, 50), (4, 300)];
        assert_eq!(version_in_force(versions, 0), Some(1));
        assert_eq!(version_in_force(versions, 60), Some(3));
        assert_eq!(
            version_in_force(versions, 299),
            Some(3),
            "newest by version, not by date"
        );
        assert_eq!(version_in_force(versions, 300), Some(4));
        assert_eq!(
            version_in_force([(5, 10), (6, 20)], 0),
            Some(5),
            "none begun: the oldest"
        );
        assert_eq!(version_in_force([], 0), None);
    }
}
