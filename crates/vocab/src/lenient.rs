//! The API's leniency as serde readers, for request body types
//! (`#[serde(deserialize_with = "pms_vocab::lenient::integer")]`): numbers as JSON numbers or
//! numeric strings, booleans as `true`/`false` or their strings, instants as RFC 3339 text or
//! epoch milliseconds — what [`crate::fields`]'s readers accept, with the same messages. A null
//! is "is required" for a required field and absent for an optional one (`#[serde(default)]`).
//! The service kit's body extractor names the field each message is about.

use serde::de::Error;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::fields;

/// Reads the field's JSON value; null is "is required".
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Err(D::Error::custom(REQUIRED)),
        v => Ok(v),
    }
}

/// The message of a missing or null required field.
pub const REQUIRED: &str = "is required";

/// A required string.
///
/// # Errors
/// When it is null or not a string.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match present(d)? {
        Value::String(s) => Ok(s),
        _ => Err(D::Error::custom("must be a string")),
    }
}

/// A required integer: a JSON number or a numeric string ([`fields::integer`]).
///
/// # Errors
/// When it is null or not a whole number.
pub fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    fields::integer(&present(d)?).ok_or_else(|| D::Error::custom("must be an integer"))
}

/// An optional integer (give the field `#[serde(default)]` too): absent or null is `None`,
/// else as [`integer`].
///
/// # Errors
/// When it is given and not a whole number.
pub fn optional_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => fields::integer(&v)
            .map(Some)
            .ok_or_else(|| D::Error::custom("must be an integer")),
    }
}

/// A required boolean: `true`/`false` or the strings `"true"`/`"false"`.
///
/// # Errors
/// When it is null or not one of those.
pub fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    fields::boolean(&present(d)?).ok_or_else(|| D::Error::custom(fields::NOT_A_BOOLEAN))
}

/// A required instant: RFC 3339 text with an offset or epoch milliseconds ([`fields::instant`]).
///
/// # Errors
/// When it is null or neither of those, within the API's range.
pub fn instant<'de, D: Deserializer<'de>>(d: D) -> Result<jiff::Timestamp, D::Error> {
    fields::instant(&present(d)?).ok_or_else(|| D::Error::custom(fields::NOT_AN_INSTANT))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Shape {
        #[serde(deserialize_with = "super::integer")]
        n: i64,
        #[serde(deserialize_with = "super::boolean")]
        on: bool,
        #[serde(deserialize_with = "super::string")]
        name: String,
    }

    fn read(v: serde_json::Value) -> Result<Shape, String> {
        Shape::deserialize(v).map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_and_booleans_as_the_original_read_them() {
        let expected = Shape {
            n: 15,
            on: true,
            name: "x".into(),
        };
        assert_eq!(
            read(json!({"n": 15, "on": true, "name": "x"})),
            Ok(expected)
        );
        let shape = read(json!({"n": "15", "on": "false", "name": "x", "other": 1}));
        assert_eq!(shape.map(|s| (s.n, s.on)), Ok((15, false)));
        assert_eq!(
            read(json!({"n": 30.0, "on": true, "name": "x"})).map(|s| s.n),
            Ok(30)
        );
    }

    #[test]
    fn an_optional_integer_is_absent_null_or_an_integer() {
        #[derive(Debug, Deserialize)]
        struct Maybe {
            #[serde(default, deserialize_with = "super::optional_integer")]
            n: Option<i64>,
        }
        let read = |v: serde_json::Value| {
            Maybe::deserialize(v)
                .map(|m| m.n)
                .map_err(|e| e.to_string())
        };
        assert_eq!(read(json!({})), Ok(None));
        assert_eq!(read(json!({"n": null})), Ok(None));
        assert_eq!(read(json!({"n": "7"})), Ok(Some(7)));
        assert_eq!(read(json!({"n": 7})), Ok(Some(7)));
        assert_eq!(
            read(json!({"n": "seven"})),
            Err("must be an integer".to_owned())
        );
        assert_eq!(
            read(json!({"n": 7.5})),
            Err("must be an integer".to_owned())
        );
    }

    #[test]
    fn instants_as_text_or_milliseconds_within_the_apis_range() {
        #[derive(Debug, Deserialize)]
        struct At {
            #[serde(deserialize_with = "super::instant")]
            at: jiff::Timestamp,
        }
        let read = |v: serde_json::Value| {
            At::deserialize(v)
                .map(|a| a.at.as_millisecond())
                .map_err(|e| e.to_string())
        };
        assert_eq!(read(json!({"at": "1970-01-01T00:00:01Z"})), Ok(1000));
        assert_eq!(read(json!({"at": 1000})), Ok(1000));
        for bad in [json!("yesterday"), json!(-1), json!("3001-01-01T00:00:00Z")] {
            assert_eq!(
                read(json!({ "at": bad })),
                Err(crate::fields::NOT_AN_INSTANT.to_owned())
            );
        }
        assert_eq!(read(json!({"at": null})), Err(super::REQUIRED.to_owned()));
    }

    #[test]
    fn each_wrong_value_has_the_fields_readers_message() {
        for (body, message) in [
            (
                json!({"n": 1.5, "on": true, "name": "x"}),
                "must be an integer",
            ),
            (json!({"n": null, "on": true, "name": "x"}), "is required"),
            (
                json!({"n": 1, "on": "yes", "name": "x"}),
                "must be true or false",
            ),
            (json!({"n": 1, "on": true, "name": 5}), "must be a string"),
        ] {
            assert_eq!(read(body).err().as_deref(), Some(message));
        }
    }
}
