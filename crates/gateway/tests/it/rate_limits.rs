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

/// The front office signs everyone in from its one address: with its key, the person it names in
/// `X-Forwarded-For` has a bucket of their own, so one noisy person cannot use up everyone's.
/// Without the key a client's `X-Forwarded-For` changes nothing; a wrong key is refused; the key
/// never reaches the upstream, on the limited route or any other.
#[tokio::test]
async fn a_trusted_forwarder_names_whose_bucket_a_request_draws_from() {
    const KEY: &str = "the-front-offices-own-key";
    let back = inspector().await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        &format!(
            "{}[auth.forwarder]\nkey_env = \"TEST_FORWARDER_KEY\"\n",
            limited_route("{ by = \"client\", per_minute = 1, burst = 2 }", "")
        ),
        &[("TEST_FORWARDER_KEY", KEY)],
    )
    .await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let mut call = async |path: &str, headers: &[(&str, &str)]| {
        let r = c.call("GET", path, headers, "").await.unwrap();
        (r.status().as_u16(), r.json())
    };
    let noisy = [
        ("x-forwarded-for", "192.0.2.66"),
        ("x-pms-forwarder-key", KEY),
    ];
    let (status, seen) = call("/limited/a", &noisy).await;
    assert_eq!(status, 200);
    assert!(
        seen["headers"].get("x-pms-forwarder-key").is_none(),
        "the key stays at the gateway: {seen}"
    );
    assert_eq!(
        seen["headers"]["x-forwarded-for"][0],
        "192.0.2.66, 127.0.0.1"
    );
    assert_eq!(call("/limited/a", &noisy).await.0, 200);
    assert_eq!(
        call("/limited/a", &noisy).await.0,
        429,
        "192.0.2.66's burst is used"
    );
    // Another person through the same forwarder, same connection: their own bucket.
    let quiet = [
        ("x-forwarded-for", "192.0.2.7"),
        ("x-pms-forwarder-key", KEY),
    ];
    assert_eq!(call("/limited/a", &quiet).await.0, 200);
    // Without the key, naming someone else changes nothing: the peer's own bucket, used twice.
    let forged = [("x-forwarded-for", "198.51.100.1")];
    assert_eq!(call("/limited/a", &forged).await.0, 200);
    assert_eq!(call("/limited/a", &forged).await.0, 200);
    assert_eq!(
        call("/limited/a", &[("x-forwarded-for", "198.51.100.2")])
            .await
            .0,
        429
    );
    // A wrong key is refused, not ignored.
    let (status, body) = call(
        "/limited/a",
        &[
            ("x-forwarded-for", "192.0.2.8"),
            ("x-pms-forwarder-key", "guessed-key-0000000"),
        ],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forwarder_refused");
    // Elsewhere the key is only dropped.
    let (status, seen) = call("/other", &[("x-pms-forwarder-key", "anything")]).await;
    assert_eq!(status, 200);
    assert!(
        seen["headers"].get("x-pms-forwarder-key").is_none(),
        "{seen}"
    );
}

/// A forwarder's key must come from exactly one place and be long enough to be a secret.
#[tokio::test]
async fn a_forwarder_key_that_is_missing_or_short_is_a_config_error() {
    use pms_gateway::config::RawConfig;
    let base = "[[listeners]]\nlisten = \"127.0.0.1:0\"\n[[upstreams]]\nname = \"up\"\n\
                endpoints = [\"http://127.0.0.1:1\"]\n[[routes]]\nname = \"r\"\n\
                match = { path_prefix = \"/\" }\nupstream = \"up\"\n[auth.forwarder]\n";
    let problems = |forwarder: &str, env: &[(&str, &str)]| {
        let raw: RawConfig = toml::from_str(&format!("{base}{forwarder}")).unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match raw.resolve("gw.toml", std::path::Path::new("."), &lookup) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    };
    assert!(problems("key_env = \"K\"\n", &[])
        .contains("auth.forwarder.key_env: environment variable K is unset"));
    assert!(problems("key_env = \"K\"\n", &[("K", "short")]).contains("a key needs at least 16"));
    assert!(problems("", &[]).contains("set exactly one of key_env, key_file"));
    assert!(problems("key_file = \"/nonexistent/key\"\n", &[])
        .contains("auth.forwarder.key_file: /nonexistent/key"));
    assert_eq!(
        problems("key_env = \"K\"\n", &[("K", "sixteen-bytes-ok")]),
        ""
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
