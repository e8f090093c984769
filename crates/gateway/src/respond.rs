//! Every error the gateway answers itself, and how it looks on the wire:
//! `{"error":{"code":"…","message":"…","request_id":"…"}}` with the right status. Other modules
//! return [`GatewayError`]; only this one builds error responses.

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};

use crate::body::ProxyBody;
use crate::headers::X_REQUEST_ID;

/// An error the gateway answers on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// No route takes the request.
    #[error("no route for {method} {path}")]
    NoRoute {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
    },
    /// Routes take the path, but not with this method.
    #[error("{method} is not allowed on {path} (allowed: {allow})")]
    MethodNotAllowed {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
        /// The methods that are, as the `Allow` header lists them.
        allow: String,
    },
    /// The path has dot segments.
    #[error("path {0:?} contains '.' or '..' segments")]
    BadPath(String),
    /// The request head is not valid HTTP/1.1.
    #[error("malformed request: {0}")]
    BadRequest(String),
    /// The request line alone is longer than the header limit.
    #[error("the request line exceeds {limit} bytes")]
    UriTooLong {
        /// `limits.max_header_bytes`.
        limit: usize,
    },
    /// The request head is longer than the header limit.
    #[error("the request head exceeds {limit} bytes")]
    HeadTooLarge {
        /// `limits.max_header_bytes`.
        limit: usize,
    },
    /// No bearer token on a protected route.
    #[error("a bearer token is required")]
    MissingToken,
    /// The token was refused.
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// The token's role may not use the route.
    #[error("role {role:?} may not use this route")]
    Forbidden {
        /// The caller's role.
        role: String,
    },
    /// The body is over the limit.
    #[error("request body exceeds {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The body could not be transformed.
    #[error("{0}")]
    BadBody(String),
    /// The client's body stream failed mid-way.
    #[error("reading the request body failed: {0}")]
    BodyRead(String),
    /// The client did not send its whole body within the time allowed.
    #[error(
        "the request body did not arrive within {after_ms} ms ({})",
        received(*.got, *.expected)
    )]
    SlowBody {
        /// The time allowed.
        after_ms: u128,
        /// Bytes received.
        got: u64,
        /// Bytes announced by `Content-Length`; `None` for a chunked or unsized body.
        expected: Option<u64>,
    },
    /// The client sent nothing of its body for the body read timeout.
    #[error(transparent)]
    BodyStalled(#[from] crate::body::BodyStalled),
    /// The upstream could not be reached or failed.
    #[error("upstream {upstream} unavailable: {reason}")]
    BadGateway {
        /// Upstream name.
        upstream: String,
        /// What happened.
        reason: String,
    },
    /// The upstream did not answer in time.
    #[error("upstream {upstream} did not answer within {after_ms} ms")]
    Timeout {
        /// Upstream name.
        upstream: String,
        /// The timeout.
        after_ms: u128,
    },
    /// The upstream's connections were all busy for the whole queue timeout.
    #[error("upstream {upstream} busy: {reason}")]
    Busy {
        /// Upstream name.
        upstream: String,
        /// What happened.
        reason: String,
    },
    /// A browser's preflight the CORS settings refuse: another origin, method or header.
    #[error("cross-origin request refused: {0}")]
    CorsRefused(String),
    /// A key in `X-PMS-Forwarder-Key` that is not the trusted forwarder's.
    #[error("the X-PMS-Forwarder-Key is not this gateway's forwarder key")]
    ForwarderRefused,
    /// The caller used up the route's rate limit.
    #[error("too many requests; try again in {retry_after_s} s")]
    RateLimited {
        /// Whole seconds until a request will be let through (at least 1).
        retry_after_s: u64,
    },
    /// A dependency of the gateway itself is down (for example the JWKS endpoint).
    #[error("{0}")]
    Unavailable(String),
}

/// "10 of 100 bytes", or "10 bytes" when the length was not announced.
fn received(got: u64, expected: Option<u64>) -> String {
    match expected {
        Some(n) => format!("{got} of {n} bytes"),
        None => format!("{got} bytes"),
    }
}

impl GatewayError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoRoute { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::BadPath(_) | Self::BadRequest(_) | Self::BadBody(_) | Self::BodyRead(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            Self::HeadTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::MissingToken | Self::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } | Self::ForwarderRefused | Self::CorsRefused(_) => {
                StatusCode::FORBIDDEN
            }
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::SlowBody { .. } | Self::BodyStalled(_) => StatusCode::REQUEST_TIMEOUT,
            Self::BadGateway { .. } => StatusCode::BAD_GATEWAY,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Busy { .. } | Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoRoute { .. } => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::BadPath(_) => "bad_path",
            Self::BadRequest(_) => "bad_request",
            Self::UriTooLong { .. } => "uri_too_long",
            Self::HeadTooLarge { .. } => "headers_too_large",
            Self::BadBody(_) => "invalid_body",
            Self::BodyRead(_) => "body_read_failed",
            Self::MissingToken => "missing_token",
            Self::InvalidToken(_) => "invalid_token",
            Self::Forbidden { .. } => "forbidden",
            Self::ForwarderRefused => "forwarder_refused",
            Self::CorsRefused(_) => "cors_refused",
            Self::RateLimited { .. } => "too_many_requests",
            Self::TooLarge { .. } => "payload_too_large",
            Self::SlowBody { .. } | Self::BodyStalled(_) => "request_timeout",
            Self::BadGateway { .. } => "bad_gateway",
            Self::Timeout { .. } => "gateway_timeout",
            Self::Busy { .. } => "upstream_busy",
            Self::Unavailable(_) => "service_unavailable",
        }
    }

    /// What the client is told: the error's text, but for failures of an upstream, which name
    /// the upstream only. Their detail (an endpoint's address, the OS error) tells a client
    /// nothing it can act on and an attacker how the inside is laid out; it goes to the log
    /// (`Display`), found by the request id.
    pub fn client_message(&self) -> String {
        match self {
            Self::BadGateway { upstream, .. } => format!("upstream {upstream} unavailable"),
            Self::Busy { upstream, .. } => {
                format!("upstream {upstream} busy: all its connections stayed busy")
            }
            other => other.to_string(),
        }
    }

    /// The JSON error response, tagged with `request_id`.
    pub fn into_response(self, request_id: &HeaderValue) -> Response<ProxyBody> {
        let body = serde_json::json!({
            "error": {
                "code": self.code(),
                "message": self.client_message(),
                "request_id": request_id.to_str().unwrap_or_default(),
            }
        });
        let bytes = Bytes::from(body.to_string());
        let mut resp = Response::new(
            Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *resp.status_mut() = self.status();
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(X_REQUEST_ID.clone(), request_id.clone());
        match &self {
            Self::MissingToken => {
                h.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"pms\""),
                );
            }
            Self::InvalidToken(_) => {
                h.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"pms\", error=\"invalid_token\""),
                );
            }
            Self::Busy { .. } => {
                h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Self::RateLimited { retry_after_s } => {
                h.insert(RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            Self::MethodNotAllowed { allow, .. } => {
                if let Ok(v) = HeaderValue::from_str(allow) {
                    h.insert(ALLOW, v);
                }
            }
            _ => {}
        }
        resp
    }
}
