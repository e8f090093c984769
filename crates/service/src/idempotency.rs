//! Idempotency keys for requests that move money, as the IETF httpapi draft
//! "The Idempotency-Key HTTP Header Field" has them: a client sends `Idempotency-Key: <key>`
//! with a `POST`; the same key with the same body gets the first answer again and changes
//! nothing, the same key with another body is refused (422 `idempotency_key_reused`).
//!
//! What it owns: reading and checking the header, the request's fingerprint (SHA-256 of its
//! JSON, keys sorted), the SQL a service runs in the transaction that does the work (the key is
//! claimed before the work and answered after it, so both commit or neither), and what a
//! claimed key means. A key belongs to its caller and is kept [`KEEP`]; a request refused
//! (nothing done, rolled back) leaves no key, so sending it again runs it again.
//!
//! Two requests with one key at once: the second's claim waits for the first's transaction
//! (the key's primary key) and then finds its answer. A service that takes keys adds the table
//! of `schema_idempotency.sql` (next to this file) to its migrations.

use std::time::Duration;

use crate::ApiError;
use http::{HeaderMap, StatusCode};

/// The request header.
pub const HEADER: &str = pms_vocab::IDEMPOTENCY_KEY;
/// Longest key, in characters.
pub const MAX_KEY_CHARS: usize = 255;
/// How long a key is remembered.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);

/// Claims key `$2` of caller `$1` for a request with fingerprint `$3` at `$4` (ms); affects no
/// row when the caller used the key before.
pub const CLAIM: &str =
    "INSERT INTO idempotency_keys (caller_id, key, fingerprint, created_at_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (caller_id, key) DO NOTHING";
/// The earlier use of key `$2` by caller `$1`: fingerprint, status, body.
pub const EARLIER: &str =
    "SELECT fingerprint, status, body FROM idempotency_keys WHERE caller_id = $1 AND key = $2";
/// Records the answer (`$3` status, `$4` body) to key `$2` of caller `$1`.
pub const ANSWER: &str =
    "UPDATE idempotency_keys SET status = $3, body = $4 WHERE caller_id = $1 AND key = $2";
/// Forgets caller `$1`'s keys claimed before `$2` (ms).
pub const FORGET: &str = "DELETE FROM idempotency_keys WHERE caller_id = $1 AND created_at_ms < $2";

/// A request's idempotency key and fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotent {
    /// The key, as sent.
    pub key: String,
    /// SHA-256 of the request's JSON, hex.
    pub fingerprint: String,
}

/// The request's key, when it sent one, with the fingerprint of `body`.
///
/// # Errors
/// 400 `invalid_idempotency_key` for a key that is empty, longer than [`MAX_KEY_CHARS`], not
/// visible ASCII, or sent twice.
pub fn from_request(
    headers: &HeaderMap,
    body: &impl serde::Serialize,
) -> Result<Option<Idempotent>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_idempotency_key",
            format!("Idempotency-Key {why}"),
        )
    };
    if values.next().is_some() {
        return Err(bad("is sent more than once"));
    }
    let key = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_CHARS)
        .filter(|k| k.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
        .ok_or_else(|| {
            bad(&format!(
                "must be 1 to {MAX_KEY_CHARS} visible ASCII characters"
            ))
        })?;
    Ok(Some(Idempotent {
        key: key.to_owned(),
        fingerprint: fingerprint(body),
    }))
}

/// SHA-256 of `body`'s JSON text, hex. Object keys are sorted (`serde_json`'s map), so the
/// same fields in another order are the same request.
pub fn fingerprint(body: &impl serde::Serialize) -> String {
    // A JSON value or map always serializes.
    let text = serde_json::to_vec(body).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &text);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What an earlier use of a key means for this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Earlier {
    /// The same request: its answer.
    Answer {
        /// Its status.
        status: u16,
        /// Its JSON body.
        body: String,
    },
    /// Another request under the same key.
    OtherRequest,
}

impl Earlier {
    /// What [`EARLIER`]'s row means for a request with `fingerprint`. A row without an answer
    /// (which a committed claim never leaves) reads as another request.
    pub fn of(row: (String, Option<i64>, Option<String>), fingerprint: &str) -> Self {
        match row {
            (f, Some(status), Some(body)) if f == fingerprint => Self::Answer {
                status: u16::try_from(status).unwrap_or(500),
                body,
            },
            _ => Self::OtherRequest,
        }
    }
}

/// 422 for a key used before with another request.
pub fn reused() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
        "this Idempotency-Key was used for another request; send a new key",
    )
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use serde_json::{json, Value};

    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    #[test]
    fn keys_are_read_and_checked() {
        let body = json!({"a": 1});
        assert_eq!(from_request(&HeaderMap::new(), &body).ok(), Some(None));
        let k = from_request(&headers(&["  grant-7 "]), &body)
            .expect("good")
            .expect("a key");
        assert_eq!(k.key, "grant-7");
        for bad in [vec![""], vec!["é"], vec!["a", "b"]] {
            let e = from_request(&headers(&bad), &body).expect_err("bad");
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
        let long = "k".repeat(MAX_KEY_CHARS + 1);
        assert!(from_request(&headers(&[&long]), &body).is_err());
    }

    #[test]
    fn fingerprints_ignore_field_order_only() {
        let a: Value = serde_json::from_str(r#"{"userIds":[1,2],"amount":5}"#).expect("a");
        let b: Value = serde_json::from_str(r#"{"amount":5,"userIds":[1,2]}"#).expect("b");
        let c: Value = serde_json::from_str(r#"{"amount":5,"userIds":[2,1]}"#).expect("c");
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
        assert_eq!(fingerprint(&a).len(), 64);
    }

    #[test]
    fn an_earlier_use_is_an_answer_only_for_the_same_request() {
        let row = |f: &str| (f.to_owned(), Some(201), Some("true".to_owned()));
        assert_eq!(
            Earlier::of(row("x"), "x"),
            Earlier::Answer {
                status: 201,
                body: "true".into()
            }
        );
        assert_eq!(Earlier::of(row("x"), "y"), Earlier::OtherRequest);
        assert_eq!(
            Earlier::of(("x".into(), None, None), "x"),
            Earlier::OtherRequest
        );
    }
}
