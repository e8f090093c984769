//! A request body read into its type: [`JsonBody`], an extractor that reads the JSON object
//! under the service's limits ([`crate::http::json_object`]) and deserializes it into `T`, one
//! declaration per shape (the same type derives the OpenAPI schema). A value that does not fit
//! is a 400 `invalid_field` naming the field by its path, with the message of the field's
//! reader (`pms_vocab::lenient`): what a handler reading the fields one by one answered.

use axum::extract::{FromRequest, Request};
use pms_vocab::fields::FieldError;
use pms_vocab::lenient::REQUIRED;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::chassis::Service;
use crate::error::ApiError;
use crate::http::json_object;

/// A JSON object body deserialized into `T` (put it last among a handler's extractors).
#[derive(Debug, Clone, Copy)]
pub struct JsonBody<T>(pub T);

impl<S: Service, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let object = json_object(&state.shell().limits, &parts.headers, body).await?;
        read(&Value::Object(object))
            .map(JsonBody)
            .map_err(ApiError::from)
    }
}

/// `value` as a `T`, or the first field that does not fit.
///
/// # Errors
/// The field at fault (by its path: `vehicles[0].plate`) and what is wrong with it.
pub fn read<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    deserialize(value)
}

/// What names an error of the body as a whole (or of a field serde keeps no path for: one of a
/// flattened part, `#[serde(flatten)]`, which a caller reads alone to name it).
const BODY: &str = "body";

/// `value` as a `T`, or its first field error (one of the whole body named [`BODY`]).
fn deserialize<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        let within = |name: &str| {
            if path == "." {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            }
        };
        // serde's own words for an absent field, and for a value of a type no reader of ours
        // took (a plain `String` given a number): said as the field readers say them.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            return FieldError::new(within(name), REQUIRED);
        }
        let message = match message.split_once(", expected ") {
            Some(_) if message.starts_with("invalid type: null") => REQUIRED.to_owned(),
            Some((_, expected)) if message.starts_with("invalid type:") => {
                format!("must be {expected}")
            }
            _ => message,
        };
        FieldError::new(if path == "." { BODY.to_owned() } else { path }, message)
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::read;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Visit {
        #[serde(deserialize_with = "pms_vocab::lenient::integer")]
        park_number: i64,
        plate: String,
        vehicles: Vec<Vehicle>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Vehicle {
        #[serde(deserialize_with = "pms_vocab::lenient::string")]
        plate: String,
    }

    fn error(body: serde_json::Value) -> (String, String) {
        let e = read::<Visit>(&body).expect_err("does not fit");
        (e.field.into_owned(), e.message)
    }

    #[test]
    fn the_field_at_fault_is_named_by_its_path_with_the_readers_message() {
        let ok = json!({"parkNumber": "2", "plate": "AA-00-AA", "vehicles": []});
        assert_eq!(read::<Visit>(&ok).expect("fits").park_number, 2);
        for (body, field, message) in [
            (
                json!({"plate": "x", "vehicles": []}),
                "parkNumber",
                "is required",
            ),
            (
                json!({"parkNumber": null, "plate": "x", "vehicles": []}),
                "parkNumber",
                "is required",
            ),
            (
                json!({"parkNumber": "two", "plate": "x", "vehicles": []}),
                "parkNumber",
                "must be an integer",
            ),
            (
                json!({"parkNumber": 1, "plate": 7, "vehicles": []}),
                "plate",
                "must be a string",
            ),
            (
                json!({"parkNumber": 1, "plate": null, "vehicles": []}),
                "plate",
                "is required",
            ),
            (
                json!({"parkNumber": 1, "plate": "x", "vehicles": [{"plate": 3}]}),
                "vehicles[0].plate",
                "must be a string",
            ),
            (
                json!({"parkNumber": 1, "plate": "x", "vehicles": [{}]}),
                "vehicles[0].plate",
                "is required",
            ),
        ] {
            assert_eq!(error(body), (field.to_owned(), message.to_owned()));
        }
    }
}
