//! Every error the users service answers, and its wire form:
//! `{"error":{"code":"…","message":"…","request_id":"…","field":"…"}}` with the right status
//! (`field` only when one input is at fault). Handlers return [`ApiError`]; the request-id layer
//! in [`super`] renders it once the request id is known, so no handler builds an error body.

use axum::response::{IntoResponse, Response};
use http::header::{HeaderValue, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::StatusCode;

use crate::store::StoreError;
use crate::validate::FieldError;

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
    pub field: Option<&'static str>,
}

impl ApiError {
    /// An error without a field.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
        }
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

    /// Renders the JSON body with `request_id`.
    pub fn render(&self, request_id: &str) -> Response {
        let mut error = serde_json::json!({
            "code": self.code,
            "message": self.message,
            "request_id": request_id,
        });
        if let Some(field) = self.field {
            error["field"] = field.into();
        }
        let body = serde_json::json!({ "error": error }).to_string();
        let mut resp = (self.status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
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
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_field",
            message: e.to_string(),
            field: Some(e.field),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let (status, code, field) = match &e {
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %e, "database unavailable");
                return Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database_unavailable",
                    "the database is unavailable; try again shortly",
                );
            }
            StoreError::Conflict { field } => {
                (StatusCode::CONFLICT, "already_registered", Some(*field))
            }
            StoreError::UserNotFound(_) | StoreError::UsersNotFound(_) => {
                (StatusCode::NOT_FOUND, "user_not_found", None)
            }
            StoreError::TooManyVehicles => (
                StatusCode::BAD_REQUEST,
                "too_many_vehicles",
                Some("vehicles"),
            ),
            StoreError::InsufficientBalance(_) => {
                (StatusCode::CONFLICT, "insufficient_balance", Some("amount"))
            }
            StoreError::BadUrl(_) | StoreError::Internal(_) => {
                tracing::error!(error = %e, "internal store error");
                return Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; it has been logged",
                );
            }
        };
        Self {
            status,
            code,
            message: e.to_string(),
            field,
        }
    }
}
