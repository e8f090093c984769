//! UTC timestamps in RFC 3339 form, for logs and reports (`2026-11-24T21:20:00.123Z`), without
//! a date-time library: the calendar arithmetic is Howard Hinnant's `civil_from_days`.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// Writes `t` to `out` as RFC 3339 UTC, with milliseconds when `millis`. Times before 1970 are
/// written as the epoch.
pub fn write_rfc3339(out: &mut String, t: SystemTime, millis: bool) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rest = secs % 86_400;
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    );
    if millis {
        let _ = write!(out, ".{:03}", since.subsec_millis());
    }
    out.push('Z');
}

/// The proleptic Gregorian date (year, month, day) `days` after 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64, ms: u64, millis: bool) -> String {
        let mut s = String::new();
        let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms);
        write_rfc3339(&mut s, t, millis);
        s
    }

    #[test]
    fn civil_dates_and_times_in_utc() {
        assert_eq!(at(0, 0, false), "1970-01-01T00:00:00Z");
        // `date -u -d @951782400`: the leap day of a year divisible by 400.
        assert_eq!(at(951_782_400, 7, true), "2000-02-29T00:00:00.007Z");
        assert_eq!(at(1_795_392_245, 0, false), "2026-11-23T00:04:05Z");
        assert_eq!(at(1_795_555_200, 123, true), "2026-11-24T21:20:00.123Z");
        assert_eq!(at(4_102_444_799, 999, true), "2099-12-31T23:59:59.999Z");
    }
}
