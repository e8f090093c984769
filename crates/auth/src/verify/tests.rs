use serde_json::json;

use super::*;
use crate::sign::now_secs;
use crate::Signer;

const SECRET: &[u8] = b"test-secret-of-reasonable-length";

fn hs() -> Verifier {
    Verifier::new(VerifierConfig::hs256(SECRET)).unwrap()
}

fn signer() -> Signer {
    Signer::hmac(Algorithm::HS256, SECRET).unwrap()
}

fn b64(s: &str) -> String {
    // base64url without padding, enough for hand-made tokens.
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..=chunk.len() {
            out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test]
async fn issued_token_verifies_with_all_claims() {
    let token = signer().issue("42", "CUSTOMER").unwrap();
    let claims = hs().verify(&token).await.unwrap();
    assert_eq!(claims.text("sub").as_deref(), Some("42"));
    assert_eq!(claims.text("role").as_deref(), Some("CUSTOMER"));
    assert_eq!(claims.text("iss").as_deref(), Some("pms-users"));
    for c in ["exp", "iat", "jti"] {
        assert!(claims.0.contains_key(c), "{c}");
    }
}

#[tokio::test]
async fn alg_none_is_rejected() {
    let claims = format!(
        r#"{{"sub":"1","role":"SUPERVISOR","exp":{}}}"#,
        now_secs() + 600
    );
    let token = format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), b64(&claims));
    assert!(matches!(
        hs().verify(&token).await,
        Err(VerifyError::Malformed(_))
    ));
}

#[tokio::test]
async fn tampered_payload_is_rejected() {
    let token = signer().issue("42", "CUSTOMER").unwrap();
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    let forged = format!(
        r#"{{"sub":"1","role":"SUPERVISOR","exp":{}}}"#,
        now_secs() + 600
    );
    parts[1] = b64(&forged);
    let forged_token = parts.join(".");
    assert_eq!(
        hs().verify(&forged_token).await,
        Err(VerifyError::BadSignature)
    );
}

#[tokio::test]
async fn wrong_secret_is_rejected() {
    let other = Signer::hmac(Algorithm::HS256, b"another-secret").unwrap();
    let token = other.issue("1", "SUPERVISOR").unwrap();
    assert_eq!(hs().verify(&token).await, Err(VerifyError::BadSignature));
}

#[tokio::test]
async fn expiry_honours_leeway_and_is_required() {
    let s = signer();
    let past = now_secs() - 120;
    let expired = s.sign_claims(json!({"sub":"1","exp": past})).unwrap();
    assert_eq!(hs().verify(&expired).await, Err(VerifyError::Expired));

    let just_expired = s
        .sign_claims(json!({"sub":"1","exp": now_secs() - 5}))
        .unwrap();
    assert!(
        hs().verify(&just_expired).await.is_ok(),
        "within 30 s leeway"
    );

    let no_exp = s.sign_claims(json!({"sub":"1"})).unwrap();
    assert_eq!(
        hs().verify(&no_exp).await,
        Err(VerifyError::MissingClaim("exp".into()))
    );
    let lenient = Verifier::new(VerifierConfig {
        require_exp: false,
        ..VerifierConfig::hs256(SECRET)
    })
    .unwrap();
    assert!(lenient.verify(&no_exp).await.is_ok());
}

/// Defect: a token expiring in the year 3000 was accepted. Lifetimes are capped (a day by
/// default): `exp` after now and after `iat`, each within the cap plus the leeway.
#[tokio::test]
async fn token_lifetimes_are_capped() {
    let s = signer();
    let now = now_secs();
    let day = 24 * 3600;
    let year_3000 = s
        .sign_claims(json!({"sub":"1","exp": 32_503_680_000_i64}))
        .unwrap();
    assert_eq!(
        hs().verify(&year_3000).await,
        Err(VerifyError::TooLongLived)
    );
    let a_day = s.sign_claims(json!({"sub":"1","exp": now + day})).unwrap();
    assert!(hs().verify(&a_day).await.is_ok(), "a day is within the cap");
    let over = s
        .sign_claims(json!({"sub":"1","exp": now + day + 120}))
        .unwrap();
    assert_eq!(hs().verify(&over).await, Err(VerifyError::TooLongLived));
    // Issued long ago for a long time, not yet expired: its lifetime is what counts.
    let long_lived = s
        .sign_claims(json!({"sub":"1","iat": now - 3 * day, "exp": now + 600}))
        .unwrap();
    assert_eq!(
        hs().verify(&long_lived).await,
        Err(VerifyError::TooLongLived)
    );
    let uncapped = Verifier::new(VerifierConfig {
        max_lifetime: None,
        ..VerifierConfig::hs256(SECRET)
    })
    .unwrap();
    assert!(uncapped.verify(&year_3000).await.is_ok());
}

#[tokio::test]
async fn nbf_in_the_future_is_rejected() {
    let t = signer()
        .sign_claims(json!({"sub":"1","exp": now_secs()+600, "nbf": now_secs()+300}))
        .unwrap();
    assert_eq!(hs().verify(&t).await, Err(VerifyError::NotYetValid));
}

#[tokio::test]
async fn issuer_and_audience_checks() {
    let v = Verifier::new(VerifierConfig {
        issuers: Some(vec!["pms-users".into()]),
        audiences: Some(vec!["pms".into()]),
        ..VerifierConfig::hs256(SECRET)
    })
    .unwrap();
    let s = signer();
    let exp = now_secs() + 600;
    let good = s
        .sign_claims(json!({"sub":"1","exp":exp,"iss":"pms-users","aud":"pms"}))
        .unwrap();
    assert!(v.verify(&good).await.is_ok());
    let bad_iss = s
        .sign_claims(json!({"sub":"1","exp":exp,"iss":"evil","aud":"pms"}))
        .unwrap();
    assert_eq!(v.verify(&bad_iss).await, Err(VerifyError::WrongIssuer));
    let bad_aud = s
        .sign_claims(json!({"sub":"1","exp":exp,"iss":"pms-users","aud":"x"}))
        .unwrap();
    assert_eq!(v.verify(&bad_aud).await, Err(VerifyError::WrongAudience));
}

#[tokio::test]
async fn algorithm_outside_allow_list_is_rejected() {
    let hs512 = Signer::hmac(Algorithm::HS512, SECRET).unwrap();
    let token = hs512.issue("1", "SUPERVISOR").unwrap();
    assert_eq!(
        hs().verify(&token).await,
        Err(VerifyError::AlgorithmNotAllowed(Algorithm::HS512))
    );
}

fn ec_keys() -> (String, String) {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    (kp.serialize_pem(), kp.public_key_pem())
}

#[tokio::test]
async fn es256_and_eddsa_with_public_keys() {
    let (private, public) = ec_keys();
    let s = Signer::from_pem(Algorithm::ES256, private.as_bytes()).unwrap();
    let v = Verifier::new(VerifierConfig {
        algorithms: vec![Algorithm::ES256],
        keys: KeySource::PublicKeyPem(public.into_bytes()),
        ..VerifierConfig::hs256(SECRET)
    })
    .unwrap();
    let token = s.issue("7", "PARK_MANAGER").unwrap();
    assert_eq!(
        v.verify(&token).await.unwrap().text("sub").as_deref(),
        Some("7")
    );

    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let s = Signer::from_pem(Algorithm::EdDSA, kp.serialize_pem().as_bytes()).unwrap();
    let v = Verifier::new(VerifierConfig {
        algorithms: vec![Algorithm::EdDSA],
        keys: KeySource::PublicKeyPem(kp.public_key_pem().into_bytes()),
        ..VerifierConfig::hs256(SECRET)
    })
    .unwrap();
    assert!(v.verify(&s.issue("8", "CUSTOMER").unwrap()).await.is_ok());
}

#[tokio::test]
async fn algorithm_confusion_hs256_signed_with_public_key_is_rejected() {
    let (_, public) = ec_keys();
    let v = Verifier::new(VerifierConfig {
        algorithms: vec![Algorithm::ES256],
        keys: KeySource::PublicKeyPem(public.clone().into_bytes()),
        ..VerifierConfig::hs256(SECRET)
    })
    .unwrap();
    // The attacker knows the public key and uses it as an HMAC secret.
    let forged = Signer::hmac(Algorithm::HS256, public.as_bytes())
        .unwrap()
        .issue("1", "SUPERVISOR")
        .unwrap();
    assert_eq!(
        v.verify(&forged).await,
        Err(VerifyError::AlgorithmNotAllowed(Algorithm::HS256))
    );
}

#[test]
fn config_rejects_mixed_families_and_mismatched_keys() {
    let mixed = VerifierConfig {
        algorithms: vec![Algorithm::HS256, Algorithm::ES256],
        ..VerifierConfig::hs256(SECRET)
    };
    assert!(matches!(
        Verifier::new(mixed),
        Err(ConfigError::MixedFamilies(_))
    ));
    let secret_for_es = VerifierConfig {
        algorithms: vec![Algorithm::ES256],
        ..VerifierConfig::hs256(SECRET)
    };
    assert!(matches!(
        Verifier::new(secret_for_es),
        Err(ConfigError::KeyMismatch { .. })
    ));
    assert!(matches!(
        Verifier::new(VerifierConfig::hs256(Vec::new())),
        Err(ConfigError::EmptySecret)
    ));
    assert!(crate::parse_algorithm("none").is_err());
    assert!(crate::parse_algorithm("NONE").is_err());
    assert_eq!(crate::parse_algorithm("EdDSA"), Ok(Algorithm::EdDSA));
}

#[tokio::test]
async fn garbage_is_malformed() {
    for t in ["", "abc", "a.b", "a.b.c", "....."] {
        assert!(
            matches!(hs().verify(t).await, Err(VerifyError::Malformed(_))),
            "{t:?}"
        );
    }
}
