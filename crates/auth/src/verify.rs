//! Token verification. Owns the decision "is this token good, and what does it claim"; it does
//! not know about HTTP headers or status codes (the gateway and services map [`VerifyError`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::jwks::Jwks;
use crate::{family, Family};

/// Default clock-skew allowance.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

/// Default longest lifetime of a token: one day. A token whose `exp` lies further ahead (or,
/// with `iat`, further after its issue) is refused, however well signed.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Where verification keys come from.
#[derive(Clone)]
pub enum KeySource {
    /// A shared secret for HS256/384/512.
    Secret(Vec<u8>),
    /// A PEM public key (RSA, EC or Ed25519, matching the configured algorithms).
    PublicKeyPem(Vec<u8>),
    /// A JWKS endpoint; keys are picked by the token's `kid`.
    Jwks(Arc<Jwks>),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Secret(_) => f.write_str("Secret(<redacted>)"),
            Self::PublicKeyPem(_) => f.write_str("PublicKeyPem"),
            Self::Jwks(j) => write!(f, "Jwks({})", j.url()),
        }
    }
}

/// Everything a [`Verifier`] checks.
#[derive(Debug, Clone)]
pub struct VerifierConfig {
    /// Accepted algorithms; all of one key family, matching `keys`.
    pub algorithms: Vec<Algorithm>,
    /// The key material.
    pub keys: KeySource,
    /// Reject tokens without `exp`.
    pub require_exp: bool,
    /// Clock-skew allowance for `exp` and `nbf`.
    pub leeway: Duration,
    /// Longest accepted lifetime: `exp` at most this far after now and after `iat` (plus the
    /// leeway); `None` takes any.
    pub max_lifetime: Option<Duration>,
    /// Accepted issuers; `None` skips the check.
    pub issuers: Option<Vec<String>>,
    /// Accepted audiences; `None` skips the check.
    pub audiences: Option<Vec<String>>,
}

impl VerifierConfig {
    /// HS256 with `secret`, `exp` required, default leeway and lifetime cap: the
    /// PMS-compatible set-up.
    pub fn hs256(secret: impl Into<Vec<u8>>) -> Self {
        Self {
            algorithms: vec![Algorithm::HS256],
            keys: KeySource::Secret(secret.into()),
            require_exp: true,
            leeway: DEFAULT_LEEWAY,
            max_lifetime: Some(DEFAULT_MAX_LIFETIME),
            issuers: None,
            audiences: None,
        }
    }
}

/// Why a verifier could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No algorithms were allowed.
    #[error("at least one algorithm must be allowed")]
    NoAlgorithms,
    /// The allowed algorithms span key families.
    #[error("algorithms {0:?} mix key families; one verifier takes one family")]
    MixedFamilies(Vec<Algorithm>),
    /// The key does not fit the algorithms.
    #[error("{algorithms:?} cannot be verified with {key}")]
    KeyMismatch {
        /// The allowed algorithms.
        algorithms: Vec<Algorithm>,
        /// What kind of key was given.
        key: &'static str,
    },
    /// A secret was empty.
    #[error("the HMAC secret is empty")]
    EmptySecret,
    /// The PEM key could not be parsed.
    #[error("public key: {0}")]
    BadKey(jsonwebtoken::errors::Error),
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Not three base64url parts with a JSON header, or an unsupported `alg` (including `none`).
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The header names an algorithm outside the allow-list.
    #[error("algorithm {0:?} is not accepted")]
    AlgorithmNotAllowed(Algorithm),
    /// The signature does not verify.
    #[error("invalid signature")]
    BadSignature,
    /// `exp` is in the past (beyond leeway).
    #[error("token expired")]
    Expired,
    /// `nbf` is in the future (beyond leeway).
    #[error("token not valid yet")]
    NotYetValid,
    /// `exp` lies further ahead than the longest accepted lifetime.
    #[error("token lives longer than accepted")]
    TooLongLived,
    /// A required claim is missing.
    #[error("missing required claim {0:?}")]
    MissingClaim(String),
    /// `iss` is not an accepted issuer.
    #[error("issuer not accepted")]
    WrongIssuer,
    /// `aud` holds no accepted audience.
    #[error("audience not accepted")]
    WrongAudience,
    /// JWKS mode: the token has no `kid`, or no key with that `kid` exists.
    #[error("no key for kid {0:?}")]
    UnknownKey(Option<String>),
    /// JWKS mode: the key set could not be fetched. Not the client's fault.
    #[error("verification keys unavailable: {0}")]
    KeysUnavailable(String),
}

impl VerifyError {
    /// True when the failure is the server's (keys unavailable), not the token's.
    pub fn is_server_side(&self) -> bool {
        matches!(self, Self::KeysUnavailable(_))
    }
}

/// Verified claims, as the JSON object the token carried.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims(pub Map<String, Value>);

impl Claims {
    /// A claim rendered as header-safe text: strings as they are, numbers and booleans in JSON
    /// form; `None` for missing, null, arrays and objects.
    pub fn text(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// Verifies tokens against one [`VerifierConfig`]. Cheap to share (`Arc`) across tasks.
#[derive(Debug)]
pub struct Verifier {
    algorithms: Vec<Algorithm>,
    keys: Keys,
    /// One validation per allowed algorithm, each accepting only that algorithm, built once so
    /// the request path does not clone one per token.
    validations: Vec<(Algorithm, Validation)>,
    /// The longest lifetime plus the leeway, in seconds.
    max_lifetime_s: Option<f64>,
}

enum Keys {
    Static(DecodingKey),
    Jwks(Arc<Jwks>),
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Static(_) => f.write_str("Static"),
            Self::Jwks(j) => j.fmt(f),
        }
    }
}

impl Verifier {
    /// Checks the config (one family, a fitting key) and builds the verifier.
    ///
    /// # Errors
    /// [`ConfigError`] naming what does not fit.
    pub fn new(config: VerifierConfig) -> Result<Self, ConfigError> {
        let algs = config.algorithms.clone();
        let Some(&first) = algs.first() else {
            return Err(ConfigError::NoAlgorithms);
        };
        let fam = family(first);
        if algs.iter().any(|a| family(*a) != fam) {
            return Err(ConfigError::MixedFamilies(algs));
        }
        let mismatch = |key| ConfigError::KeyMismatch {
            algorithms: algs.clone(),
            key,
        };
        let keys = match &config.keys {
            KeySource::Secret(secret) => {
                if fam != Family::Hmac {
                    return Err(mismatch("a shared secret"));
                }
                if secret.is_empty() {
                    return Err(ConfigError::EmptySecret);
                }
                Keys::Static(DecodingKey::from_secret(secret))
            }
            KeySource::PublicKeyPem(pem) => {
                let key = match fam {
                    Family::Hmac => return Err(mismatch("a public key")),
                    Family::Rsa => DecodingKey::from_rsa_pem(pem),
                    Family::Ec => DecodingKey::from_ec_pem(pem),
                    Family::Ed => DecodingKey::from_ed_pem(pem),
                };
                Keys::Static(key.map_err(ConfigError::BadKey)?)
            }
            KeySource::Jwks(jwks) => {
                if fam == Family::Hmac {
                    return Err(mismatch("a JWKS of public keys"));
                }
                Keys::Jwks(jwks.clone())
            }
        };

        let mut validation = Validation::new(first);
        validation.leeway = config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.required_spec_claims = if config.require_exp {
            HashSet::from(["exp".to_string()])
        } else {
            HashSet::new()
        };
        match &config.audiences {
            Some(aud) => validation.set_audience(aud),
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &config.issuers {
            validation.set_issuer(iss);
        }
        let validations = algs
            .iter()
            .map(|&a| {
                let mut v = validation.clone();
                v.algorithms = vec![a];
                (a, v)
            })
            .collect();
        Ok(Self {
            algorithms: algs,
            keys,
            validations,
            max_lifetime_s: config
                .max_lifetime
                .map(|m| (m + config.leeway).as_secs_f64()),
        })
    }

    /// The allowed algorithms.
    pub fn algorithms(&self) -> &[Algorithm] {
        &self.algorithms
    }

    /// Verifies `token` (without the `Bearer ` prefix) and returns its claims.
    ///
    /// # Errors
    /// [`VerifyError`] saying why the token is refused.
    pub async fn verify(&self, token: &str) -> Result<Claims, VerifyError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| VerifyError::Malformed(malformed_reason(&e)))?;
        let Some((_, validation)) = self.validations.iter().find(|(a, _)| *a == header.alg) else {
            return Err(VerifyError::AlgorithmNotAllowed(header.alg));
        };
        let owned;
        let key = match &self.keys {
            Keys::Static(k) => k,
            Keys::Jwks(jwks) => {
                owned = jwks.key_for(header.kid.as_deref(), header.alg).await?;
                &*owned
            }
        };
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, key, validation)
            .map(|data| Claims(data.claims))
            .map_err(|e| map_error(&e))?;
        self.check_lifetime(&claims)?;
        Ok(claims)
    }

    /// Refuses a token whose `exp` lies further than the longest lifetime after now or after
    /// its `iat`.
    fn check_lifetime(&self, claims: &Claims) -> Result<(), VerifyError> {
        let Some(max) = self.max_lifetime_s else {
            return Ok(());
        };
        let Some(exp) = claims.0.get("exp").and_then(Value::as_f64) else {
            return Ok(());
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let iat = claims.0.get("iat").and_then(Value::as_f64);
        if exp - now > max || iat.is_some_and(|iat| exp - iat > max) {
            return Err(VerifyError::TooLongLived);
        }
        Ok(())
    }
}

fn malformed_reason(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::Json(_) => "header is not valid JSON or names an unsupported algorithm".into(),
        ErrorKind::Base64(_) => "not base64url".into(),
        ErrorKind::InvalidToken => "expected three dot-separated parts".into(),
        _ => e.to_string(),
    }
}

fn map_error(e: &jsonwebtoken::errors::Error) -> VerifyError {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidSignature => VerifyError::BadSignature,
        ErrorKind::ExpiredSignature => VerifyError::Expired,
        ErrorKind::ImmatureSignature => VerifyError::NotYetValid,
        ErrorKind::InvalidIssuer => VerifyError::WrongIssuer,
        ErrorKind::InvalidAudience => VerifyError::WrongAudience,
        ErrorKind::MissingRequiredClaim(c) => VerifyError::MissingClaim(c.clone()),
        // Key family does not match the algorithm: the same answer as a bad signature.
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => VerifyError::BadSignature,
        _ => VerifyError::Malformed(e.to_string()),
    }
}

#[cfg(test)]
mod tests;
