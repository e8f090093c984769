//! JWT at the edge: good, missing, expired, tampered, `alg=none` and wrongly-keyed tokens, roles,
//! identity headers, and the key sources (secret from env or file, PEM public key, JWKS).

use std::convert::Infallible;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use pms_auth::{Algorithm, Signer};
use pms_net::serve::{NoObserver, ServeConfig};
use pms_testkit::client::{Proto, TestClient};
use pms_testkit::Spawned;
use serde_json::json;

use crate::support::{endpoint, inspector, simple};

const SECRET: &str = "a-test-secret-that-is-long-enough";

fn jwt_section(keys: &str) -> String {
    format!("[auth.jwt]\nalgorithms = [\"HS256\"]\n{keys}\n")
}

fn hs_signer() -> Signer {
    Signer::hmac(Algorithm::HS256, SECRET.as_bytes()).unwrap()
}

async fn protected(roles: &str) -> (crate::support::Gw, Spawned<pms_net::serve::Drain>) {
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        &format!("auth = \"jwt\"\n{roles}"),
        &jwt_section("secret_env = \"TEST_JWT_SECRET\""),
        &[("TEST_JWT_SECRET", SECRET)],
    )
    .await;
    (gw, back)
}

/// `method path` with `Authorization: Bearer <token>` and no body.
async fn call_with_token(
    c: &mut TestClient,
    method: &str,
    path: &str,
    token: &str,
) -> pms_testkit::client::Collected {
    c.call(
        method,
        path,
        &[("authorization", &format!("Bearer {token}"))],
        "",
    )
    .await
    .unwrap()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[tokio::test]
async fn a_valid_token_sets_identity_headers_from_its_claims() {
    let (gw, _back) = protected("").await;
    let token = hs_signer().issue("42", "CUSTOMER").unwrap();
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        let r = c
            .call(
                "GET",
                "/users/getAllUsers",
                &[
                    ("authorization", &format!("Bearer {token}")),
                    ("x-userid", "1"),
                    ("x-userrole", "SUPERVISOR"),
                ],
                "",
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text());
        let h = &r.json()["headers"];
        assert_eq!(
            h["x-userid"],
            json!(["42"]),
            "forged header replaced, not appended"
        );
        assert_eq!(h["x-userrole"], json!(["CUSTOMER"]));
        assert_eq!(
            h["authorization"][0],
            format!("Bearer {token}"),
            "services verify too"
        );
    }
}

#[tokio::test]
async fn missing_and_bad_tokens_get_401_with_a_challenge() {
    let (gw, _back) = protected("").await;
    let s = hs_signer();
    let now = pms_auth::sign::now_secs();
    let expired = s
        .sign_claims(json!({"sub":"1","role":"SUPERVISOR","exp": now - 3600}))
        .unwrap();
    let good = s.issue("1", "SUPERVISOR").unwrap();
    let mut parts: Vec<&str> = good.split('.').collect();
    let forged_payload = b64(&json!({"sub":"1","role":"SUPERVISOR","exp": now + 3600}).to_string());
    parts[1] = &forged_payload;
    let tampered = parts.join(".");
    let none = format!(
        "{}.{}.",
        b64(r#"{"alg":"none","typ":"JWT"}"#),
        b64(&json!({"sub":"1","role":"SUPERVISOR","exp": now + 3600}).to_string())
    );
    let wrong_key = Signer::hmac(Algorithm::HS256, b"not-the-secret")
        .unwrap()
        .issue("1", "SUPERVISOR")
        .unwrap();
    let hs512 = Signer::hmac(Algorithm::HS512, SECRET.as_bytes())
        .unwrap()
        .issue("1", "SUPERVISOR")
        .unwrap();

    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("GET", "/users/getAllUsers", &[], "").await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"pms\""));
    assert_eq!(r.json()["error"]["code"], "missing_token");
    let r = c
        .call("GET", "/x", &[("authorization", "Basic dTpw")], "")
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    for (what, token) in [
        ("expired", expired),
        ("tampered", tampered),
        ("alg none", none),
        ("wrong key", wrong_key),
        ("algorithm not allowed", hs512),
        ("garbage", "x.y.z".to_string()),
    ] {
        let r = call_with_token(&mut c, "GET", "/users/getAllUsers", &token).await;
        assert_eq!(r.status(), 401, "{what}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"pms\", error=\"invalid_token\""),
            "{what}"
        );
        assert_eq!(r.json()["error"]["code"], "invalid_token", "{what}");
    }
}

#[tokio::test]
async fn roles_are_enforced_with_403() {
    let (gw, _back) = protected(r#"roles = ["SUPERVISOR", "CUSTOMER_MANAGER"]"#).await;
    let s = hs_signer();
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let customer = s.issue("5", "CUSTOMER").unwrap();
    let r = call_with_token(&mut c, "GET", "/userReport/top10Parky", &customer).await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.json()["error"]["code"], "forbidden");
    let boss = s.issue("1", "SUPERVISOR").unwrap();
    let r = call_with_token(&mut c, "GET", "/userReport/top10Parky", &boss).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn secret_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "auth = \"jwt\"",
        &jwt_section(&format!("secret_file = {:?}", path.display().to_string())),
        &[],
    )
    .await;
    let token = hs_signer().issue("9", "PARK_MANAGER").unwrap();
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = call_with_token(&mut c, "GET", "/parks/1", &token).await;
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.json()["headers"]["x-userrole"][0], "PARK_MANAGER");
}

#[tokio::test]
async fn es256_public_key_and_no_algorithm_confusion() {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pub_path = dir.path().join("jwt.pub.pem");
    std::fs::write(&pub_path, kp.public_key_pem()).unwrap();
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "auth = \"jwt\"",
        &format!(
            "[auth.jwt]\nalgorithms = [\"ES256\"]\npublic_key_file = {:?}\n",
            pub_path.display().to_string()
        ),
        &[],
    )
    .await;
    let signer = Signer::from_pem(Algorithm::ES256, kp.serialize_pem().as_bytes()).unwrap();
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let good = signer.issue("3", "CUSTOMER").unwrap();
    let r = call_with_token(&mut c, "GET", "/x", &good).await;
    assert_eq!(r.status(), 200);
    // HS256 "signed" with the public key PEM as the secret.
    let confused = Signer::hmac(Algorithm::HS256, kp.public_key_pem().as_bytes())
        .unwrap()
        .issue("1", "SUPERVISOR")
        .unwrap();
    let r = call_with_token(&mut c, "GET", "/x", &confused).await;
    assert_eq!(r.status(), 401);
}

/// Serves `body` as a JWKS document on a loopback port.
async fn jwks_server(body: String) -> Spawned<pms_net::serve::Drain> {
    let body = Bytes::from(body);
    Spawned::start(move |l, stop| {
        pms_net::serve::serve(
            l,
            ServeConfig::default(),
            move |_| {
                let body = body.clone();
                hyper::service::service_fn(move |_req| {
                    let body = body.clone();
                    async move { Ok::<_, Infallible>(http::Response::new(Full::new(body))) }
                })
            },
            Arc::new(NoObserver),
            stop,
        )
    })
    .await
}

#[tokio::test]
async fn eddsa_keys_from_jwks_by_kid() {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(kp.public_key_raw());
    let jwks = jwks_server(
        json!({"keys":[{"kty":"OKP","crv":"Ed25519","x":x,"kid":"k1","alg":"EdDSA","use":"sig"}]})
            .to_string(),
    )
    .await;
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "auth = \"jwt\"",
        &format!(
            "[auth.jwt]\nalgorithms = [\"EdDSA\"]\njwks_url = \"http://127.0.0.1:{}/.well-known/jwks.json\"\n",
            jwks.addr.port()
        ),
        &[],
    )
    .await;
    let pem = kp.serialize_pem();
    let signer = Signer::from_pem(Algorithm::EdDSA, pem.as_bytes())
        .unwrap()
        .with_kid("k1");
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let token = signer.issue("11", "CUSTOMER").unwrap();
    let r = call_with_token(&mut c, "GET", "/x", &token).await;
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.json()["headers"]["x-userid"][0], "11");

    let unknown = Signer::from_pem(Algorithm::EdDSA, pem.as_bytes())
        .unwrap()
        .with_kid("k2")
        .issue("11", "CUSTOMER")
        .unwrap();
    let r = call_with_token(&mut c, "GET", "/x", &unknown).await;
    assert_eq!(r.status(), 401);
    let no_kid = Signer::from_pem(Algorithm::EdDSA, pem.as_bytes())
        .unwrap()
        .issue("11", "CUSTOMER")
        .unwrap();
    let r = call_with_token(&mut c, "GET", "/x", &no_kid).await;
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn unreachable_jwks_is_503_not_401() {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let back = inspector().await;
    let closed = pms_testkit::listener().await.local_addr().unwrap();
    let gw = simple(
        &endpoint(back.addr),
        "auth = \"jwt\"",
        &format!("[auth.jwt]\nalgorithms = [\"EdDSA\"]\njwks_url = \"http://{closed}/jwks\"\n"),
        &[],
    )
    .await;
    let token = Signer::from_pem(Algorithm::EdDSA, kp.serialize_pem().as_bytes())
        .unwrap()
        .with_kid("k1")
        .issue("1", "CUSTOMER")
        .unwrap();
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = call_with_token(&mut c, "GET", "/x", &token).await;
    assert_eq!(r.status(), 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "service_unavailable");
}
