//! Per-route rate limits: the burst goes through, the next request gets 429 with `Retry-After`
//! and the JSON error without reaching the upstream, other routes and other callers are not
//! touched, and the refusals are counted in `/metrics`. Limits of an hour per request make every
//! refusal certain, whatever the machine's speed.

use pms_auth::{Algorithm, Signer};
use pms_testkit::client::{Proto, TestClient};

use crate::admin::{scrape, value};
use crate::fast_path::{one_response, read_response};
use crate::support::{endpoint, inspector, simple};

const SECRET: &str = "a-test-secret-that-is-long-enough";

/// A second route, `/limited/`, with `limit` as its rate limit; everything else goes to the
/// unlimited route `all`.
fn limited_route(limit: &str, auth: &str) -> String {
    format!(
        "[[routes]]\nname = \"limited\"\nmatch = {{ path_prefix = \"/limited/\" }}\nupstream = \
         \"up\"\n{auth}\nrate_limit = {limit}\n"
    )
}

#[tokio::test]
async fn a_client_over_its_burst_gets_429_with_retry_after_on_both_protocols() {
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        &limited_route("{ by = \"client\", per_minute = 1, burst = 3 }", ""),
        &[],
    )
    .await;
    // Both protocols draw from the same bucket: one client address.
    let mut h1 = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let mut h2 = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
    for proto in [Proto::H1c, Proto::H2c, Proto::H1c] {
        let c = if proto == Proto::H1c {
            &mut h1
        } else {
            &mut h2
        };
        let r = c.call("GET", "/limited/a", &[], "").await.unwrap();
        assert_eq!(r.status(), 200, "within the burst: {}", r.text());
    }
    for c in [&mut h1, &mut h2] {
        let r = c
            .call("GET", "/limited/a", &[("x-request-id", "over-1")], "")
            .await
            .unwrap();
        assert_eq!(r.status(), 429, "{}", r.text());
        let wait: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("whole seconds");
        assert!(
            (1..=60).contains(&wait),
            "one request a minute comes back: {wait}"
        );
        let body = r.json();
        assert_eq!(body["error"]["code"], "too_many_requests");
        assert_eq!(body["error"]["request_id"], "over-1");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("try again")),
            "{body}"
        );
    }
    // The connection is still good, and another route is not limited.
    for _ in 0..5 {
        let r = h1.call("GET", "/other", &[], "").await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let metrics = scrape(gw.admin).await;
    assert_eq!(
        value(
            &metrics,
            "pms_gateway_rate_limited_total{route=\"limited\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        value(
            &metrics,
            "pms_gateway_requests_total{route=\"limited\",status=\"200\"}"
        ),
        Some(3.0),
        "only the burst went through: {metrics}"
    );
    assert_eq!(
        value(
            &metrics,
            "pms_gateway_upstream_requests_total{upstream=\"up\"}"
        ),
        Some(8.0),
        "3 limited + 5 other requests reached the upstream; the refused ones did not: {metrics}"
    );
}

#[tokio::test]
async fn a_subject_limit_counts_per_token_subject_and_answers_401_before_counting() {
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        &format!(
            "{}[auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"TEST_JWT_SECRET\"\n",
            limited_route(
                "{ by = \"subject\", per_minute = 1, burst = 1 }",
                "auth = \"jwt\""
            )
        ),
        &[("TEST_JWT_SECRET", SECRET)],
    )
    .await;
    let signer = Signer::hmac(Algorithm::HS256, SECRET.as_bytes()).unwrap();
    let bearer = |sub: &str| format!("Bearer {}", signer.issue(sub, "CUSTOMER").unwrap());
    let (ana, rui) = (bearer("ana"), bearer("rui"));
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    // Without a token: 401, however often; nothing is taken from anyone's bucket.
    for _ in 0..3 {
        assert_eq!(me(&mut c, None).await, 401);
    }
    assert_eq!(me(&mut c, Some(&ana)).await, 200);
    assert_eq!(
        me(&mut c, Some(&ana)).await,
        429,
        "ana's one request is used"
    );
    // Same address, another subject: a bucket of its own.
    assert_eq!(me(&mut c, Some(&rui)).await, 200);
    // Another connection, the same subject: the same bucket.
    let mut other = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
    assert_eq!(me(&mut other, Some(&rui)).await, 429);
    let metrics = scrape(gw.admin).await;
    assert_eq!(
        value(
            &metrics,
            "pms_gateway_rate_limited_total{route=\"limited\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
}

/// `GET /limited/me` with `authorization`, if any: the status.
async fn me(c: &mut TestClient, authorization: Option<&str>) -> u16 {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| ("authorization", a))
        .into_iter()
        .collect();
    let r = c.call("GET", "/limited/me", &headers, "").await.unwrap();
    r.status().as_u16()
}

/// Issue 63: a request refused before its body was read (here over its rate limit, its body
/// coming after its head). A small body is read to its end so that a keep-alive client's next
/// request on the same connection is answered; a body too large to read for nothing is
/// answered with `Connection: close`. Before, the connection was closed when the body came, and
/// the client's next request met a broken pipe.
#[tokio::test]
async fn a_refused_request_leaves_its_keep_alive_connection_usable_or_says_it_closes() {
    use tokio::io::AsyncWriteExt;
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        &limited_route("{ by = \"client\", per_minute = 1, burst = 1 }", ""),
        &[],
    )
    .await;
    let post = |len: usize| {
        format!(
            "POST /limited/a HTTP/1.1\r\nhost: x\r\ncontent-type: text/plain\r\n\
             content-length: {len}\r\n\r\n"
        )
    };
    let mut conn = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let first = one_response(&mut conn, &(post(5) + "hello")).await;
    assert!(
        first.starts_with("HTTP/1.1 200"),
        "within the burst: {first}"
    );
    // Over the limit: the head, then the body a moment later.
    conn.write_all(post(5).as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    conn.write_all(b"hello").await.unwrap();
    let refused = read_response(&mut conn).await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert!(
        !refused.to_ascii_lowercase().contains("connection: close"),
        "{refused}"
    );
    // The next request on the same connection.
    let next = one_response(&mut conn, "GET /other HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(next.starts_with("HTTP/1.1 200"), "{next}");
    // Refused with a body of 1 MiB on its way: not read, and the answer says the connection
    // ends.
    conn.write_all(post(1 << 20).as_bytes()).await.unwrap();
    conn.write_all(&[b'x'; 4096]).await.unwrap();
    let big = read_response(&mut conn).await;
    assert!(big.starts_with("HTTP/1.1 429"), "{big}");
    assert!(
        big.to_ascii_lowercase().contains("connection: close"),
        "{big}"
    );
}
