//! Durations as people write them on a command line: `30s`, `500ms`, `250us`, `2m`, `1h`,
//! `1m30s`.

use std::time::Duration;

/// Parses `text` (units `us`, `ms`, `s`, `m`, `h`; several may follow each other; a bare number is
/// seconds).
///
/// # Errors
/// A message naming what did not parse.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<f64>() {
        return seconds(secs, text);
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: a number needs a unit (ms, s, m, h)"))?;
        if digits == 0 {
            return Err(format!("{text:?}: expected a number before {rest:?}"));
        }
        let value: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?}: bad number {:?}", &rest[..digits]))?;
        rest = &rest[digits..];
        let (unit, factor) = if rest.starts_with("us") {
            ("us", 0.000_001)
        } else if rest.starts_with("ms") {
            ("ms", 0.001)
        } else if rest.starts_with('s') {
            ("s", 1.0)
        } else if rest.starts_with('m') {
            ("m", 60.0)
        } else if rest.starts_with('h') {
            ("h", 3600.0)
        } else {
            return Err(format!(
                "{text:?}: unknown unit in {rest:?} (us, ms, s, m, h)"
            ));
        };
        rest = &rest[unit.len()..];
        total += seconds(value * factor, text)?;
    }
    Ok(total)
}

/// Writes `d` the way [`parse`] reads it, as a person would: `30s`, `500ms`, `1.5s`, `0s`.
pub fn show(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) && d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        let s = format!("{:.6}", d.as_secs_f64());
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

fn seconds(secs: f64, text: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{text:?}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_durations_read_back() {
        for (d, text) in [
            (Duration::from_secs(30), "30s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(show(d), text);
            assert_eq!(parse(text).unwrap(), d);
        }
    }

    #[test]
    fn units_and_combinations() {
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("10").unwrap(), Duration::from_secs(10));
        for bad in ["", "s", "10x", "-1s", "1s2"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
