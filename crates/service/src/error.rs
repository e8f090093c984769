//! Every error a PMS service answers, and its one wire form:
//! `{"error":{"code":"…","message":"…","request_id":"…","field":"…"}}` with the right status
//! (`field` only when one input is at fault). Handlers return [`ApiError`]; the request-id layer
//! ([`crate::http::finish`]) renders it once the request id is known, so no handler builds an
//! error body. A kit store's failures ([`crate::store::StoreError`]) map into it here, once, a
//! service's own refusals answering for themselves ([`crate::store::Refusal::answer`]); a service
//! with a store error of its own maps that itself.

use axum::response::{IntoResponse, Response};
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::StatusCode;

use crate::openapi::{ErrorBody, ErrorDetail};
use crate::store::DbError;
use std::borrow::Cow;

use pms_vocab::fields::FieldError;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable explanation (never secrets, never SQL).
    pub message: String,
    /// The input at fault, if one is.
    pub field: Option<Cow<'static, str>>,
    /// Seconds after which trying again may succeed (`Retry-After`), when that is known.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// An error without a field.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after_s: None,
        }
    }

    /// The same error, saying when to try again (`Retry-After`, in seconds).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// The same error, naming the input at fault.
    pub fn with_field(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// No bearer token (the gateway's code for the same case).
    pub fn missing_token(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "missing_token", message)
    }

    /// A bearer token that does not verify or does not name a user and role.
    pub fn invalid_token(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_token", message)
    }

    /// The caller may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// The body is not JSON, or not the expected shape.
    pub fn bad_body(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", message)
    }

    /// Something named by the request does not exist.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// The database is away: 503, and the details go to the log.
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %detail, "database unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the database is unavailable; try again shortly",
        )
        .with_retry_after(1)
    }

    /// A bug or an unexpected failure: 500, and the details go to the log, not the client.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; it has been logged",
        )
    }

    /// Renders the JSON body with `request_id`.
    pub fn render(&self, request_id: &str) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
                request_id,
                field: self.field.as_deref(),
            },
        };
        // Strings and an option of one: serializing cannot fail.
        let body = serde_json::to_string(&body).unwrap_or_default();
        let mut resp = (self.status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after_s {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        // The same challenges the gateway sends (RFC 6750 §3).
        match self.code {
            "missing_token" => {
                headers.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"pms\""),
                );
            }
            "invalid_token" => {
                headers.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"pms\", error=\"invalid_token\""),
                );
            }
            _ => {}
        }
        resp
    }
}

impl IntoResponse for ApiError {
    /// A placeholder carrying the error; the request-id layer renders it.
    fn into_response(self) -> Response {
        let mut resp = self.status.into_response();
        resp.extensions_mut().insert(self);
        resp
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_field", e.to_string()).with_field(e.field)
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Unavailable(_) => Self::unavailable(e),
            DbError::BadUrl(_) | DbError::Internal(_) => Self::internal(e),
        }
    }
}

impl<R: crate::store::Refusal> From<crate::store::StoreError<R>> for ApiError {
    /// The one mapping of a store's failures to the wire: every handler's `?`.
    fn from(e: crate::store::StoreError<R>) -> Self {
        use crate::store::StoreError;
        match e {
            StoreError::Unavailable(_) | StoreError::Transient(_) => Self::unavailable(e),
            StoreError::NotFound { what, ref id } => {
                Self::not_found(not_found_code(what), format!("{what} {id} not found"))
            }
            StoreError::Refused(r) => r.answer(),
            StoreError::Conflict {
                reason,
                field,
                message,
            } => {
                let error = Self::new(StatusCode::CONFLICT, reason, message);
                match field {
                    Some(f) => error.with_field(f),
                    None => error,
                }
            }
            StoreError::BadUrl(_) | StoreError::Internal(_) => Self::internal(e),
        }
    }
}

/// The code of a 404 for each thing the API names (`park_not_found`, …); `not_found` for others.
fn not_found_code(what: &str) -> &'static str {
    match what {
        "park" => "park_not_found",
        "spot" => "spot_not_found",
        "customer" => "customer_not_found",
        "display" => "display_not_found",
        "barrier" => "barrier_not_found",
        "invoice" => "invoice_not_found",
        "user" => "user_not_found",
        _ => "not_found",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn errors_render_as_one_json_shape() {
        let e = ApiError::from(FieldError::new("plateNumber", "is required"));
        let resp = e.render("req-1");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["error"]["code"], "invalid_field");
        assert_eq!(v["error"]["field"], "plateNumber");
        assert_eq!(v["error"]["request_id"], "req-1");
        assert_eq!(v["error"]["message"], "plateNumber: is required");
    }

    #[test]
    fn an_absent_database_is_503_and_a_bug_500() {
        let away = ApiError::from(DbError::Unavailable("down".into()));
        assert_eq!(away.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            away.retry_after_s,
            Some(1),
            "a client is told when to come back"
        );
        let e = ApiError::from(DbError::Internal("syntax error at SELECT".into()));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.message.contains("SELECT"), "no SQL reaches the client");
    }
}
