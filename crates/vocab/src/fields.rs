//! Reading request JSON into typed values, naming the field at fault: [`FieldError`] and one
//! reader per kind of value ([`crate::lenient`] reads the same values for serde body types).
//! Numbers are accepted as JSON numbers or numeric strings (`"15"`, `"0.30"`), as the original
//! services' JSON mapper accepted them; booleans also as their strings; instants as RFC 3339
//! text or epoch milliseconds (spec §3.0). Pure functions: no
//! rule of any one service lives here, only "is this a value of that kind".

use std::borrow::Cow;

use jiff::Timestamp;
use serde_json::{Map, Value};

/// A JSON object body.
pub type Body = Map<String, Value>;

/// A field that is missing, of the wrong type, or breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The JSON field (or path parameter) at fault; a nested one by its path
    /// (`vehicles[0].plate`).
    pub field: Cow<'static, str>,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    /// `field` is wrong because of `message`.
    pub fn new(field: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A required string.
///
/// # Errors
/// When it is missing, null or not a string.
pub fn required_str<'a>(body: &'a Body, field: &'static str) -> Result<&'a str, FieldError> {
    match body.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(FieldError::new(field, "is required")),
        Some(_) => Err(FieldError::new(field, "must be a string")),
    }
}

/// The values of the query parameters `names` (percent-decoded), in the same order; each may
/// be given at most once, and parameters not named are ignored.
///
/// # Errors
/// When one of `names` is given twice.
pub fn query<const N: usize>(
    raw: Option<&str>,
    names: [&'static str; N],
) -> Result<[Option<String>; N], FieldError> {
    let mut values: [Option<String>; N] = std::array::from_fn(|_| None);
    for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if let Some(i) = names.iter().position(|n| *n == key) {
            if values[i].replace(value.into_owned()).is_some() {
                return Err(FieldError::new(names[i], "given more than once"));
            }
        }
    }
    Ok(values)
}

/// A whole number from a query parameter's text (`None` when absent), within `range`.
///
/// # Errors
/// When it is not a whole number, or out of range.
pub fn query_int(
    field: &'static str,
    text: Option<&str>,
    range: std::ops::RangeInclusive<i64>,
) -> Result<Option<i64>, FieldError> {
    let Some(text) = text else { return Ok(None) };
    match text.parse::<i64>() {
        Ok(n) if range.contains(&n) => Ok(Some(n)),
        Ok(_) => Err(FieldError::new(
            field,
            format!("must be {} to {}", range.start(), range.end()),
        )),
        Err(_) => Err(FieldError::new(
            field,
            format!("{text:?} is not a whole number"),
        )),
    }
}

/// A required integer (a JSON number or a numeric string).
///
/// # Errors
/// When it is missing or not a whole number.
pub fn required_int(body: &Body, field: &'static str) -> Result<i64, FieldError> {
    match body.get(field) {
        None | Some(Value::Null) => Err(FieldError::new(field, "is required")),
        Some(v) => integer(v).ok_or_else(|| FieldError::new(field, "must be an integer")),
    }
}

/// An optional integer: `None` when absent or null.
///
/// # Errors
/// When present but not a whole number.
pub fn optional_int(body: &Body, field: &'static str) -> Result<Option<i64>, FieldError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => integer(v)
            .map(Some)
            .ok_or_else(|| FieldError::new(field, "must be an integer")),
    }
}

/// A required boolean (`true`/`false`, or the strings `"true"`/`"false"`).
///
/// # Errors
/// When it is missing or not a boolean.
pub fn required_bool(body: &Body, field: &'static str) -> Result<bool, FieldError> {
    match body.get(field) {
        None | Some(Value::Null) => Err(FieldError::new(field, "is required")),
        Some(v) => boolean(v).ok_or_else(|| FieldError::new(field, NOT_A_BOOLEAN)),
    }
}

/// What is wrong with a value that is not a boolean.
pub const NOT_A_BOOLEAN: &str = "must be true or false";

/// A boolean from `true`/`false` or the strings `"true"`/`"false"`.
pub fn boolean(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s == "true" => Some(true),
        Value::String(s) if s == "false" => Some(false),
        _ => None,
    }
}

/// A required decimal number, as its exact text (`0.30` stays `0.30`), for money and other
/// exact quantities: the caller parses it with its decimal type.
///
/// # Errors
/// When it is missing or not a number.
pub fn required_number_text(body: &Body, field: &'static str) -> Result<String, FieldError> {
    match body.get(field) {
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::String(s)) if s.trim().parse::<f64>().is_ok_and(f64::is_finite) => {
            Ok(s.trim().to_owned())
        }
        None | Some(Value::Null) => Err(FieldError::new(field, "is required")),
        Some(_) => Err(FieldError::new(field, "must be a number")),
    }
}

/// A required instant: RFC 3339 text with a zone offset (`2023-11-26T12:34:56.789Z`) or epoch
/// milliseconds.
///
/// # Errors
/// When it is missing or neither of those.
pub fn required_instant(body: &Body, field: &'static str) -> Result<Timestamp, FieldError> {
    match body.get(field) {
        None | Some(Value::Null) => Err(FieldError::new(field, "is required")),
        Some(v) => instant(v).ok_or_else(|| FieldError::new(field, NOT_AN_INSTANT)),
    }
}

/// What is wrong with a value that is not an instant the API takes.
pub const NOT_AN_INSTANT: &str = "must be an RFC 3339 date-time with an offset \
    (2023-11-26T12:34:56.789Z) or epoch milliseconds, from 1970 up to the year 3000";

/// The earliest instant the API takes: the Unix epoch.
pub const FIRST_INSTANT_MS: i64 = 0;
/// The end of the instants the API takes, itself excluded: 3000-01-01T00:00:00Z. Any working
/// clock reads a time well inside; a stay anywhere in the range can be priced (jiff's own range
/// ends in year 9999, where a day's arithmetic in a park's time zone overflows, so a visit
/// recorded there could never be invoiced).
pub const END_INSTANT_MS: i64 = 32_503_680_000_000;

/// An instant from RFC 3339 text or epoch milliseconds (a whole number, as [`integer`] reads
/// one: `39268.0` is 39,268 ms), from [`FIRST_INSTANT_MS`] up to [`END_INSTANT_MS`]. Text's
/// offset is within a day, as RFC 3339's are (`+23:59` at most; jiff reads up to `±25:59:59`).
pub fn instant(v: &Value) -> Option<Timestamp> {
    let t = match v {
        Value::Number(_) => Timestamp::from_millisecond(integer(v)?).ok()?,
        Value::String(s) => rfc3339(s.trim())?,
        _ => return None,
    };
    (FIRST_INSTANT_MS..END_INSTANT_MS)
        .contains(&t.as_millisecond())
        .then_some(t)
}

/// An instant from RFC 3339 text whose offset is within a day.
fn rfc3339(text: &str) -> Option<Timestamp> {
    use jiff::fmt::temporal::{DateTimeParser, PiecesOffset};
    static PARSER: DateTimeParser = DateTimeParser::new();
    let pieces = PARSER.parse_pieces(text).ok()?;
    if let Some(PiecesOffset::Numeric(offset)) = pieces.offset() {
        if offset.offset().seconds().abs() >= 24 * 3600 {
            return None;
        }
    }
    text.parse::<Timestamp>().ok()
}

/// A positive id from a path segment.
///
/// # Errors
/// When it is not a positive integer.
pub fn id_param(field: &'static str, text: &str) -> Result<i64, FieldError> {
    // A whole number written with a zero fraction (`4.0`) is that id, as in a JSON body
    // ([`integer`]): an OpenAPI link carries a body's id into a path as it was written.
    let whole = match text.split_once('.') {
        Some((digits, zeros)) if !zeros.is_empty() && zeros.bytes().all(|b| b == b'0') => digits,
        _ => text,
    };
    match whole.parse::<i64>().ok() {
        Some(id) if id > 0 => Ok(id),
        _ => Err(FieldError::new(
            field,
            format!("{text:?} is not a positive id"),
        )),
    }
}

/// An integer from a JSON number or a numeric string. A number written with a zero fraction
/// (`30.0`) is that integer, as JSON Schema counts it, when it is exactly representable
/// (within ±2^53); `1.5` is not an integer.
pub fn integer(v: &Value) -> Option<i64> {
    /// Largest magnitude below which every integer is an exact `f64`.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            let f = n.as_f64()?;
            // In range, the cast is exact: the check makes it lossless.
            #[allow(clippy::cast_possible_truncation)]
            (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Body {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("test bodies are objects"),
        }
    }

    #[test]
    fn numbers_come_as_numbers_or_numeric_strings() {
        let b =
            body(json!({"a": 15, "b": "15", "c": "x", "d": 1.5, "e": null, "f": 30.0, "g": 1e300}));
        assert_eq!(required_int(&b, "a"), Ok(15));
        assert_eq!(
            required_int(&b, "f"),
            Ok(30),
            "a zero fraction is an integer"
        );
        assert!(
            required_int(&b, "g").is_err(),
            "past 2^53 a float is not exact"
        );
        assert_eq!(required_int(&b, "b"), Ok(15));
        assert_eq!(required_int(&b, "c").unwrap_err().field, "c");
        assert!(required_int(&b, "d").is_err());
        assert_eq!(required_int(&b, "e").unwrap_err().message, "is required");
        assert_eq!(optional_int(&b, "e"), Ok(None));
        assert_eq!(optional_int(&b, "zz"), Ok(None));
        assert!(optional_int(&b, "c").is_err());
    }

    #[test]
    fn query_parameters_are_decoded_and_given_once() {
        let [a, b] = query(Some("a=x%20y&z=1&b=2"), ["a", "b"]).unwrap();
        assert_eq!((a.as_deref(), b.as_deref()), (Some("x y"), Some("2")));
        assert_eq!(query(None, ["a"]).unwrap(), [None]);
        assert_eq!(query(Some("a=1&a=1"), ["a"]).unwrap_err().field, "a");
        assert_eq!(query_int("n", Some("7"), 0..=9), Ok(Some(7)));
        assert_eq!(query_int("n", None, 0..=9), Ok(None));
        assert!(query_int("n", Some("10"), 0..=9).is_err());
        assert!(query_int("n", Some("x"), 0..=9).is_err());
    }

    #[test]
    fn instants_cover_the_documented_range() {
        let (min, max) = (FIRST_INSTANT_MS, END_INSTANT_MS - 1);
        for ms in [min, max, 0] {
            assert!(instant(&json!(ms)).is_some(), "{ms}");
        }
        assert!(instant(&json!(max + 1)).is_none());
        assert!(instant(&json!(min - 1)).is_none());
        // Text too: jiff reads years up to 9999, the API does not (found by fuzzing: a visit
        // recorded in year 9999 could not be priced, so its invoice was never issued).
        assert!(instant(&json!("1970-01-01T00:00:00Z")).is_some());
        assert!(instant(&json!("2999-12-31T23:59:59.999Z")).is_some());
        assert!(instant(&json!("3000-01-01T00:00:00Z")).is_none());
        assert!(instant(&json!("9999-12-31T00:00:00Z")).is_none());
        assert!(instant(&json!("1969-12-31T23:59:59.999Z")).is_none());
        // Offsets stop at ±23:59, as RFC 3339's hours do.
        assert!(instant(&json!("2024-01-10T10:00:00+23:59")).is_some());
        assert!(instant(&json!("2024-01-10T10:00:00-23:59")).is_some());
        assert!(instant(&json!("2024-01-10T10:00:00+24:00")).is_none());
        assert!(instant(&json!("2024-01-10T10:00:00+25:00")).is_none());
        assert!(instant(&json!("2024-01-10T10:00:00-25:59")).is_none());
    }

    #[test]
    fn decimals_keep_their_text() {
        let b = body(json!({"a": 0.30, "b": "0.30", "c": "NaN", "d": true}));
        assert_eq!(required_number_text(&b, "a").as_deref(), Ok("0.3"));
        assert_eq!(required_number_text(&b, "b").as_deref(), Ok("0.30"));
        assert!(required_number_text(&b, "c").is_err());
        assert!(required_number_text(&b, "d").is_err());
    }

    #[test]
    fn instants_are_rfc3339_or_epoch_millis() {
        let b = body(json!({
            "z": "2023-11-26T12:34:56.789Z",
            "o": "2023-11-26T13:34:56.789+01:00",
            "m": 1_701_002_096_789_i64,
            // JSON Schema counts a zero fraction as an integer; found by fuzzing.
            "m.0": 1_701_002_096_789.0_f64,
            "m.5": 1_701_002_096_789.5_f64,
            "local": "2023-11-26T12:34:56",
            "junk": "yesterday",
        }));
        let z = required_instant(&b, "z").expect("Z");
        assert_eq!(required_instant(&b, "o"), Ok(z));
        assert_eq!(required_instant(&b, "m"), Ok(z));
        assert_eq!(required_instant(&b, "m.0"), Ok(z));
        assert!(required_instant(&b, "m.5").is_err());
        assert_eq!(required_instant(&b, "local").unwrap_err().field, "local");
        assert!(required_instant(&b, "junk").is_err());
        assert!(required_instant(&b, "absent").is_err());
    }

    #[test]
    fn booleans_and_ids() {
        let b = body(json!({"t": true, "s": "false", "n": 1}));
        assert_eq!(required_bool(&b, "t"), Ok(true));
        assert_eq!(required_bool(&b, "s"), Ok(false));
        assert!(required_bool(&b, "n").is_err());
        assert_eq!(id_param("parkId", "3"), Ok(3));
        assert!(id_param("parkId", "0").is_err());
        assert!(id_param("parkId", "-1").is_err());
        assert!(id_param("parkId", "1e3").is_err());
        assert_eq!(id_param("parkId", "4.0"), Ok(4), "as a body's 4.0");
        for bad in ["4.5", "4.", ".0", "4.0x"] {
            assert!(id_param("parkId", bad).is_err(), "{bad}");
        }
    }
}
