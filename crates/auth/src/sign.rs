//! Token issuing, used by the users service at login and by tests. Owns the claim set PMS tokens
//! carry (`sub`, `role`, `exp`, `iat`, `iss`, `jti`); it does not decide who may log in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Map, Value};

use crate::{family, Family};

/// Default token lifetime.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
/// Default `iss` claim.
pub const DEFAULT_ISSUER: &str = "pms-users";

/// Why a signer could not be built or a token not signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The key does not fit the algorithm or did not parse.
    #[error("signing key: {0}")]
    Key(String),
    /// Signing failed.
    #[error("signing failed: {0}")]
    Sign(jsonwebtoken::errors::Error),
}

// The cause is part of the message and not also a `source()`, so a printed error chain names it
// once; `From` by hand, because `#[from]` would make it a source.
impl From<jsonwebtoken::errors::Error> for SignError {
    fn from(e: jsonwebtoken::errors::Error) -> Self {
        Self::Sign(e)
    }
}

/// Signs PMS tokens with one key.
pub struct Signer {
    alg: Algorithm,
    key: EncodingKey,
    kid: Option<String>,
    /// `iss` claim of every token.
    pub issuer: String,
    /// `exp` − `iat` of every token.
    pub lifetime: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("alg", &self.alg)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// An HMAC signer (HS256/384/512).
    ///
    /// # Errors
    /// When `alg` is not an HMAC algorithm or the secret is empty.
    pub fn hmac(alg: Algorithm, secret: &[u8]) -> Result<Self, SignError> {
        if family(alg) != Family::Hmac {
            return Err(SignError::Key(format!("{alg:?} is not an HMAC algorithm")));
        }
        if secret.is_empty() {
            return Err(SignError::Key("empty secret".into()));
        }
        Ok(Self::with_key(alg, EncodingKey::from_secret(secret)))
    }

    /// A signer from a PEM private key of the family `alg` belongs to.
    ///
    /// # Errors
    /// When the PEM does not parse as that kind of key.
    pub fn from_pem(alg: Algorithm, pem: &[u8]) -> Result<Self, SignError> {
        let key = match family(alg) {
            Family::Hmac => return Err(SignError::Key("HMAC takes a secret, not a PEM".into())),
            Family::Rsa => EncodingKey::from_rsa_pem(pem),
            Family::Ec => EncodingKey::from_ec_pem(pem),
            Family::Ed => EncodingKey::from_ed_pem(pem),
        }
        .map_err(|e| SignError::Key(e.to_string()))?;
        Ok(Self::with_key(alg, key))
    }

    fn with_key(alg: Algorithm, key: EncodingKey) -> Self {
        Self {
            alg,
            key,
            kid: None,
            issuer: DEFAULT_ISSUER.into(),
            lifetime: DEFAULT_LIFETIME,
        }
    }

    /// Sets the `kid` header of every token.
    #[must_use]
    pub fn with_kid(mut self, kid: impl Into<String>) -> Self {
        self.kid = Some(kid.into());
        self
    }

    /// Issues a token for `sub` with `role`.
    ///
    /// # Errors
    /// When signing fails.
    pub fn issue(&self, sub: &str, role: &str) -> Result<String, SignError> {
        let now = now_secs();
        let claims = json!({
            "sub": sub,
            "role": role,
            "iat": now,
            "exp": now + self.lifetime.as_secs(),
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
        });
        self.sign_claims(claims)
    }

    /// Signs an arbitrary claim set (tests use it for expired or odd tokens).
    ///
    /// # Errors
    /// When signing fails or `claims` is not an object.
    pub fn sign_claims(&self, claims: Value) -> Result<String, SignError> {
        let map: Map<String, Value> = match claims {
            Value::Object(m) => m,
            _ => return Err(SignError::Key("claims must be a JSON object".into())),
        };
        let mut header = Header::new(self.alg);
        header.kid.clone_from(&self.kid);
        Ok(jsonwebtoken::encode(&header, &map, &self.key)?)
    }
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
