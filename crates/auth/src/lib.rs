//! JSON Web Tokens for PMS: issued by the users service, verified by the gateway and by every
//! service again (zero trust: a service reached directly must not trust identity headers).
//!
//! Layout:
//! - [`verify`]: [`Verifier`] — algorithm allow-list, key/algorithm family pinning, `exp`/`nbf`/
//!   `iss`/`aud` checks with leeway, and the typed [`VerifyError`] callers map to 401/503.
//! - [`jwks`]: a JWKS cache fetched over HTTP(S), looked up by `kid`, refreshed periodically and on
//!   an unknown `kid` (rate-limited).
//! - [`sign`]: [`Signer`] — tokens with `sub`, `role`, `exp`, `iat`, `iss`, `jti`.
//!
//! Why `jsonwebtoken` 9: it verifies with `ring`, the one crypto provider the project uses.
//! Why pin the key family ourselves: the classic "algorithm confusion" attack signs an HS256 token
//! with an RSA public key as the HMAC secret; a verifier is built for one key family only and
//! refuses every algorithm outside it before any signature work.

#![deny(missing_docs)]

pub mod jwks;
pub mod sign;
pub mod verify;

pub use jsonwebtoken::Algorithm;
pub use sign::{SignError, Signer};
pub use verify::{Claims, KeySource, Verifier, VerifierConfig, VerifyError};

/// The key families a verifier or signer can be built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// HS256/384/512 with a shared secret.
    Hmac,
    /// RS256/384/512 and PS256/384/512 with an RSA key.
    Rsa,
    /// ES256/384 with an EC key.
    Ec,
    /// EdDSA with an Ed25519 key.
    Ed,
}

/// Which family `alg` belongs to.
pub fn family(alg: Algorithm) -> Family {
    use Algorithm::*;
    match alg {
        HS256 | HS384 | HS512 => Family::Hmac,
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => Family::Rsa,
        ES256 | ES384 => Family::Ec,
        EdDSA => Family::Ed,
    }
}

/// Parses an algorithm name as written in config (`"HS256"`, `"EdDSA"`, …). `none` is never valid.
///
/// # Errors
/// The name when it is not a supported algorithm.
pub fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    if name.eq_ignore_ascii_case("none") {
        return Err("the \"none\" algorithm is never accepted".into());
    }
    name.parse::<Algorithm>().map_err(|_| {
        format!("unknown algorithm {name:?} (expected HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA)")
    })
}
