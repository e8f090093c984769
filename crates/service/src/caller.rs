//! Who is calling: the bearer token, verified by the service itself with the shared `pms-auth`
//! verifier on every protected endpoint. Identity headers (`X-UserId`, `X-UserRole`) are never
//! read: a request that reaches a service directly, past the gateway, proves who it is the same
//! way (spec §9 items 2–4).

use http::header::AUTHORIZATION;
use http::HeaderMap;
use pms_auth::Verifier;

use crate::error::ApiError;
use pms_vocab::Role;

/// A verified caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The token's `sub`: a user id.
    pub id: i64,
    /// The token's `role`.
    pub role: Role,
}

impl Caller {
    /// Refuses callers whose role is not in `roles`.
    ///
    /// # Errors
    /// 403 naming the role.
    pub fn require(&self, roles: &[Role]) -> Result<(), ApiError> {
        if roles.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "role {} may not do this",
                self.role
            )))
        }
    }

    /// Only the user themself, and only with one of `roles`.
    ///
    /// # Errors
    /// 403 when the caller is someone else or has another role.
    pub fn require_self(&self, user_id: i64, roles: &[Role]) -> Result<(), ApiError> {
        self.require(roles)?;
        if self.id == user_id {
            Ok(())
        } else {
            Err(ApiError::forbidden("this belongs to another user"))
        }
    }

    /// The user themself (any role), or one of `staff`.
    ///
    /// # Errors
    /// 403 for anyone else.
    pub fn require_self_or(&self, user_id: i64, staff: &[Role]) -> Result<(), ApiError> {
        if self.id == user_id || staff.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::forbidden("this belongs to another user"))
        }
    }
}

/// Verifies the request's bearer token.
///
/// # Errors
/// 401 when the token is missing, malformed, expired or forged, or lacks a numeric `sub` or a
/// known `role`; 503 when verification keys are unavailable.
pub async fn caller(verifier: &Verifier, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let value = headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::missing_token("a bearer token is required"))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::invalid_token("expected 'Authorization: Bearer <token>'"))?;
    let claims = verifier.verify(token).await.map_err(|e| {
        if e.is_server_side() {
            ApiError::new(
                http::StatusCode::SERVICE_UNAVAILABLE,
                "keys_unavailable",
                e.to_string(),
            )
        } else {
            ApiError::invalid_token(format!("invalid token: {e}"))
        }
    })?;
    let id = claims
        .text("sub")
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ApiError::invalid_token("invalid token: sub is not a user id"))?;
    let role = claims
        .text("role")
        .and_then(|r| Role::parse(&r))
        .ok_or_else(|| ApiError::invalid_token("invalid token: unknown role"))?;
    Ok(Caller { id, role })
}
