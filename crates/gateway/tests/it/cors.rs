//! Browsers' cross-origin requests with `[cors]`, over HTTP/1.1 (which the fast path hands over)
//! and HTTP/2: an allowed origin's preflight answered by the gateway without a token or an
//! upstream, any other refused with the reason; the answers to an allowed origin's requests
//! readable by it (the gateway's own errors too), the others' not; and without `[cors]`, nothing
//! of it.

use pms_testkit::client::{Proto, TestClient};

use crate::support::{endpoint, inspector, simple};

const SECRET: &str = "a-test-secret-that-is-long-enough";
const APP: &str = "https://app.example.com";

async fn gateway(
    cors: &str,
) -> (
    crate::support::Gw,
    pms_testkit::Spawned<pms_net::serve::Drain>,
) {
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "auth = \"jwt\"",
        &format!(
            "[auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"TEST_JWT_SECRET\"\n\n{cors}"
        ),
        &[("TEST_JWT_SECRET", SECRET)],
    )
    .await;
    (gw, back)
}

fn token() -> String {
    pms_auth::Signer::hmac(pms_auth::Algorithm::HS256, SECRET.as_bytes())
        .unwrap()
        .issue("42", "CUSTOMER")
        .unwrap()
}

#[tokio::test]
async fn an_allowed_origin_is_answered_and_read_and_another_is_not() {
    let (gw, _back) = gateway(&format!(
        "[cors]\nallow_origins = [\"{APP}\"]\nmax_age_s = 60"
    ))
    .await;
    let bearer = format!("Bearer {}", token());
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        // The preflight: no token, no upstream, 204 with what may be sent.
        let asked = [
            ("origin", APP),
            ("access-control-request-method", "PUT"),
            (
                "access-control-request-headers",
                "authorization, content-type",
            ),
        ];
        let r = c.call("OPTIONS", "/users/1", &asked, "").await.unwrap();
        assert_eq!(r.status(), 204, "{proto:?}: {}", r.text());
        assert_eq!(r.header("access-control-allow-origin"), Some(APP));
        assert_eq!(r.header("access-control-max-age"), Some("60"));
        assert_eq!(r.header("vary"), Some("Origin"));
        assert!(r
            .header("access-control-allow-methods")
            .is_some_and(|m| m.contains("PUT")));
        assert!(r
            .header("access-control-allow-headers")
            .is_some_and(|h| h.contains("authorization")));
        assert!(r.header("x-pms-upstream-saw").is_none() && r.text().is_empty());

        // Refused preflights say why, as the gateway's JSON error.
        for (origin, method, headers, why) in [
            ("https://evil.example", "GET", "", "origin"),
            (APP, "TRACE", "", "method"),
            (APP, "GET", "x-secret", "x-secret"),
        ] {
            let asked = [
                ("origin", origin),
                ("access-control-request-method", method),
                ("access-control-request-headers", headers),
            ];
            let r = c.call("OPTIONS", "/users/1", &asked, "").await.unwrap();
            assert_eq!(r.status(), 403, "{proto:?} {origin} {method}: {}", r.text());
            assert_eq!(r.json()["error"]["code"], "cors_refused");
            assert!(r.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(why));
            assert!(r.header("access-control-allow-origin").is_none());
        }

        // The request itself: the upstream's answer readable by the page; the gateway's own 401
        // too (a page must see why); another origin's answer carries nothing.
        let r = c
            .call(
                "GET",
                "/users/1",
                &[("origin", APP), ("authorization", &bearer)],
                "",
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{proto:?}: {}", r.text());
        assert_eq!(r.header("access-control-allow-origin"), Some(APP));
        assert!(r
            .header("access-control-expose-headers")
            .is_some_and(|h| h.contains("x-request-id")));
        let r = c
            .call("GET", "/users/1", &[("origin", APP)], "")
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.header("access-control-allow-origin"), Some(APP));
        let r = c
            .call(
                "GET",
                "/users/1",
                &[
                    ("origin", "https://evil.example"),
                    ("authorization", &bearer),
                ],
                "",
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.header("access-control-allow-origin").is_none(),
            "{proto:?}"
        );
    }
}

#[tokio::test]
async fn without_cors_a_preflight_is_an_ordinary_request() {
    let (gw, _back) = gateway("").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let asked = [("origin", APP), ("access-control-request-method", "PUT")];
    let r = c.call("OPTIONS", "/users/1", &asked, "").await.unwrap();
    assert_eq!(r.status(), 401, "the route wants a token: {}", r.text());
    assert!(r.header("access-control-allow-origin").is_none());
}
