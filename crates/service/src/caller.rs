//! Who is calling: the bearer token, verified by the service itself with the shared `pms-auth`
//! verifier on every protected endpoint. Identity headers (`X-UserId`, `X-UserRole`) are never
//! read: a request that reaches a service directly, past the gateway, proves who it is the same
//! way (spec §9 items 2–4).
//!
//! A handler names who may call it in its signature: a [`Caller`] parameter (any verified
//! caller) or an [`Allowed<R>`] one (a caller with one of the roles `R` lists). Both are axum
//! extractors over any service state that is [`Guarded`]: the service must be ready, then the
//! token must verify, then the role must be one of those allowed, each refusal in the one error
//! format. Rules that need the request's data (a customer's own records) stay in the handler,
//! with [`Caller::require_self`] and [`Caller::require_self_or`].

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use http::header::AUTHORIZATION;
use http::request::Parts;
use http::HeaderMap;
use pms_auth::Verifier;
use pms_vocab::Role;

use crate::error::ApiError;
use crate::ready::Readiness;

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

/// What a service's state gives the caller extractors.
pub trait Guarded: Send + Sync {
    /// What every service holds alike ([`Shell`]): its readiness, its token verifier, its
    /// body limits.
    fn shell(&self) -> &Shell;

    /// Whether the service has started: checked first, so a service still starting answers
    /// 503 before it looks at a token.
    fn readiness(&self) -> &Readiness {
        &self.shell().ready
    }

    /// How the service verifies tokens.
    fn verifier(&self) -> &Verifier {
        &self.shell().verifier
    }
}

/// What every service's state holds alike, for the kit's extractors: whether it has started,
/// how it verifies tokens, how large a body it reads.
#[derive(Debug)]
pub struct Shell {
    /// 503 until the service's start-up (migrations, seeding) is done.
    pub ready: Readiness,
    /// Verifies bearer tokens.
    pub verifier: Verifier,
    /// Request body limits.
    pub limits: crate::http::BodyLimits,
}

impl Shell {
    /// The shell of service `name` (not ready yet), verifying tokens as `verifier` says.
    ///
    /// # Errors
    /// When the verifier's settings are unusable.
    pub fn new(
        name: &'static str,
        verifier: pms_auth::VerifierConfig,
        limits: crate::http::BodyLimits,
    ) -> Result<Self, pms_auth::verify::ConfigError> {
        Ok(Self {
            ready: Readiness::new(name),
            verifier: Verifier::new(verifier)?,
            limits,
        })
    }
}

impl<S: Guarded> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        state.readiness().check()?;
        caller(state.verifier(), &parts.headers).await
    }
}

/// The roles an endpoint admits, named as a type for [`Allowed`].
pub trait Roles: Send + Sync + 'static {
    /// The roles.
    const ALLOWED: &'static [Role];
}

/// Staff: every role but CUSTOMER.
#[derive(Debug)]
pub struct Staff;

impl Roles for Staff {
    const ALLOWED: &'static [Role] = &[Role::CustomerManager, Role::ParkManager, Role::Supervisor];
}

/// Who runs parks: PARK_MANAGER and SUPERVISOR.
#[derive(Debug)]
pub struct ParkManagers;

impl Roles for ParkManagers {
    const ALLOWED: &'static [Role] = &[Role::ParkManager, Role::Supervisor];
}

/// Who looks after customers: CUSTOMER_MANAGER and SUPERVISOR.
#[derive(Debug)]
pub struct CustomerManagers;

impl Roles for CustomerManagers {
    const ALLOWED: &'static [Role] = &[Role::CustomerManager, Role::Supervisor];
}

/// SUPERVISOR alone.
#[derive(Debug)]
pub struct Supervisors;

impl Roles for Supervisors {
    const ALLOWED: &'static [Role] = &[Role::Supervisor];
}

/// A verified caller with one of the roles `R` lists; anyone else gets 403 naming their role.
pub struct Allowed<R>(pub Caller, PhantomData<R>);

impl<R> std::ops::Deref for Allowed<R> {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.0
    }
}

impl<R> std::fmt::Debug for Allowed<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Allowed").field(&self.0).finish()
    }
}

impl<S: Guarded, R: Roles> FromRequestParts<S> for Allowed<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let who = Caller::from_request_parts(parts, state).await?;
        who.require(R::ALLOWED)?;
        Ok(Self(who, PhantomData))
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
