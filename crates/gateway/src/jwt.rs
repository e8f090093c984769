//! Authentication at the edge: pulls the bearer token, has the `auth` crate verify it, enforces a
//! route's roles, and turns verified claims into identity headers. Identity headers a client sent
//! itself are removed on every route, protected or not — upstreams may trust them only because
//! the gateway always sets or clears them.

use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use pms_auth::{Claims, Verifier};

use crate::config::JwtSettings;
use crate::respond::GatewayError;

/// Headers stripped when no `[auth.jwt]` section says otherwise.
pub const DEFAULT_IDENTITY_HEADERS: [&str; 2] = ["x-userid", "x-userrole"];

/// The edge authenticator.
#[derive(Debug)]
pub struct JwtAuth {
    verifier: Option<Arc<Verifier>>,
    claims_to_headers: Vec<(String, HeaderName)>,
}

impl JwtAuth {
    /// Builds it from settings; `None` means no route may use `auth = "jwt"` (config enforces).
    ///
    /// # Errors
    /// When the verifier rejects its config (already checked at load time).
    pub fn new(settings: Option<&JwtSettings>) -> Result<Self, pms_auth::verify::ConfigError> {
        Ok(match settings {
            Some(s) => Self {
                verifier: Some(Arc::new(Verifier::new(s.verifier.clone())?)),
                claims_to_headers: s.claims_to_headers.clone(),
            },
            None => Self {
                verifier: None,
                claims_to_headers: DEFAULT_IDENTITY_HEADERS
                    .iter()
                    .map(|h| (String::new(), HeaderName::from_static(h)))
                    .collect(),
            },
        })
    }

    /// The identity headers, each with the claim it is set from: every one is removed from
    /// client requests (see `headers::rules`).
    pub fn identity(&self) -> &[(String, HeaderName)] {
        &self.claims_to_headers
    }

    /// Verifies the request's bearer token and checks `roles` (empty = any role).
    ///
    /// # Errors
    /// 401-class errors for a missing or bad token, 403 for a role outside `roles`, 503 when the
    /// keys cannot be had.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        roles: &[String],
    ) -> Result<Claims, GatewayError> {
        let authorization = headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
        self.authenticate_with(authorization, roles).await
    }

    /// [`authenticate`](Self::authenticate) given the request's `Authorization` value.
    ///
    /// # Errors
    /// As [`authenticate`](Self::authenticate).
    pub async fn authenticate_with(
        &self,
        authorization: Option<&[u8]>,
        roles: &[String],
    ) -> Result<Claims, GatewayError> {
        let Some(verifier) = &self.verifier else {
            return Err(GatewayError::Unavailable(
                "authentication is not configured".into(),
            ));
        };
        let token = authorization
            .and_then(bearer)
            .ok_or(GatewayError::MissingToken)?;
        let claims = verifier.verify(token).await.map_err(|e| {
            if e.is_server_side() {
                GatewayError::Unavailable(e.to_string())
            } else {
                GatewayError::InvalidToken(e.to_string())
            }
        })?;
        if !roles.is_empty() {
            let role = claims.text("role").unwrap_or_default();
            if !roles.contains(&role) {
                return Err(GatewayError::Forbidden { role });
            }
        }
        Ok(claims)
    }
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive).
fn bearer(value: &[u8]) -> Option<&str> {
    let v = crate::headers::text(value)?;
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(b"Bearer abc.def.ghi"), Some("abc.def.ghi"));
        assert_eq!(bearer(b"bearer   tok "), Some("tok"));
        for bad in [
            &b"Basic abc"[..],
            b"Bearer",
            b"Bearer ",
            b"Bearerabc",
            b"Bearer t\xc3\xa9",
        ] {
            assert_eq!(bearer(bad), None, "{bad:?}");
        }
    }
}
