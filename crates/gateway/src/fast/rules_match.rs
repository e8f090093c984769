//! The fast path rewrites header lines as hyper's path rewrites headers: each head goes
//! through the rules applied to a `HeaderMap` (hyper's path) and applied line by line
//! ([`crate::h1up::fields`]); the header sets that come out must be the same. Request heads as
//! the fast path takes them, response heads as the upstream client parses them.

use http::header::{HeaderMap, HeaderName};
use pms_auth::Claims;
use pms_net::serve::ConnInfo;

use super::request;
use crate::config::JwtSettings;
use crate::h1up::fields::{write, Fields};
use crate::h1up::response;
use crate::headers::rules::{Forward, Kind, Relay, Rule};
use crate::headers::{self, RequestId};
use crate::jwt::JwtAuth;

/// The request's header lines as the fast path writes them, for a head it takes.
fn request_lines(raw: &[u8]) -> String {
    let mut fields = Fields::default();
    let request::Parsed::Take(_) = request::parse(raw, &mut fields) else {
        panic!("the fast path does not take {raw:?}");
    };
    let jwt = jwt();
    let rule = forward(&jwt, b"the-id", None);
    let mut out = Vec::new();
    write(&fields, raw, &rule, &mut out);
    // The last line starts a trace of its own (the request id is not one): checked, and
    // left out of what the tests compare.
    let text = String::from_utf8(out).unwrap();
    let (lines, trace) = text
        .rsplit_once("traceparent: ")
        .expect("a traceparent line");
    let trace = trace.strip_suffix("\r\n").expect("the line ends");
    assert!(
        pms_net::trace::trace_id(trace.as_bytes()).is_some(),
        "{trace}"
    );
    lines.to_owned()
}

/// What the gateway adds after the client's lines, for `CONN` and no forwarding headers.
const ADDED: &str = "x-forwarded-for: 192.0.2.7\r\nx-forwarded-proto: https\r\n\
                     x-forwarded-host: gw\r\nvia: 1.1 pms\r\nx-request-id: the-id\r\n";

#[test]
fn kept_lines_go_on_as_they_came() {
    // Spelling, spaces around the value: byte for byte.
    let raw = b"POST / HTTP/1.1\r\nHost: gw\r\nX-Mixed-CASE:  v  \r\nContent-Length: 0\r\n\
                x-tab:\tt\t\r\nX-Empty:\r\n\r\n";
    assert_eq!(
        request_lines(raw),
        format!("X-Mixed-CASE:  v  \r\nContent-Length: 0\r\nx-tab:\tt\t\r\nX-Empty:\r\n{ADDED}")
    );
    // Lines that go leave a gap; the ones around it still go in order.
    let raw = b"GET / HTTP/1.1\r\nA: 1\r\nKeep-Alive: 5\r\nHost: gw\r\nB: 2\r\n\
                Connection: x-c\r\nx-c: 3\r\nC: 4\r\n\r\n";
    assert_eq!(
        request_lines(raw),
        format!("A: 1\r\nB: 2\r\nC: 4\r\n{ADDED}")
    );
    // A repeated Content-Length goes once, and the lines after it still go.
    let raw = b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\ncontent-length: 1\r\n\
                X-After: a\r\n\r\n";
    assert_eq!(
        request_lines(raw),
        format!("Content-Length: 1\r\nX-After: a\r\n{ADDED}")
    );
}

#[test]
fn lines_ended_by_a_bare_lf_go_on_with_crlf() {
    for raw in [
        &b"GET / HTTP/1.1\nHost: gw\nX-A: 1\nX-B:  2 \n\n"[..],
        b"GET / HTTP/1.1\r\nHost: gw\r\nX-A: 1\nX-B: 2\r\n\n",
        b"GET / HTTP/1.1\r\nHost: gw\r\nX-A: 1\r\nX-B: 2\n\r\n",
    ] {
        let lines = request_lines(raw);
        assert!(lines.starts_with("X-A: 1\r\nX-B: "), "{raw:?}: {lines:?}");
        assert!(
            !lines.replace("\r\n", "").contains('\n'),
            "{raw:?}: {lines:?}"
        );
        assert!(lines.ends_with(ADDED), "{raw:?}: {lines:?}");
    }
}

/// (name, value) pairs, sorted: the order of lines is not part of the comparison.
type Set = Vec<(String, Vec<u8>)>;

fn set_of_map(map: &HeaderMap) -> Set {
    let mut set: Set = map
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    set.sort();
    set
}

fn set_of_lines(lines: &[u8]) -> Set {
    let mut storage = [httparse::EMPTY_HEADER; 64];
    let mut with_end = lines.to_vec();
    with_end.extend_from_slice(b"\r\n");
    let Ok(httparse::Status::Complete((_, parsed))) =
        httparse::parse_headers(&with_end, &mut storage)
    else {
        panic!("not header lines: {:?}", String::from_utf8_lossy(lines));
    };
    let mut set: Set = parsed
        .iter()
        // The fast path keeps the client's spelling; `HeaderMap` keeps lowercase.
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    set.sort();
    set
}

fn jwt() -> JwtAuth {
    let settings = JwtSettings {
        verifier: pms_auth::VerifierConfig::hs256(b"0123456789abcdef0123456789abcdef".to_vec()),
        claims_to_headers: vec![
            ("sub".into(), HeaderName::from_static("x-userid")),
            ("role".into(), HeaderName::from_static("x-userrole")),
        ],
    };
    JwtAuth::new(Some(&settings)).unwrap()
}

fn claims(pairs: &[(&str, serde_json::Value)]) -> Claims {
    Claims(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

const CONN: ConnInfo = ConnInfo {
    peer: std::net::SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7)),
        40000,
    ),
    local: std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080),
    tls: true,
};

fn forward<'a>(jwt: &'a JwtAuth, request_id: &'a [u8], claims: Option<&'a Claims>) -> Forward<'a> {
    Forward {
        conn: CONN,
        version: http::Version::HTTP_11,
        authority: None,
        request_id,
        identity: jwt.identity(),
        claims,
        traceparent: None,
    }
}

/// The request's header set after each path, `Host` left out (each adds the endpoint's).
fn both_request_paths(raw: &str, claims: Option<&Claims>) -> (Set, Set) {
    let jwt = jwt();
    let buf = raw.as_bytes();
    let mut fields = Fields::default();
    let request::Parsed::Take(_) = request::parse(buf, &mut fields) else {
        panic!("the fast path does not take {raw:?}");
    };
    // Hex, as the gateway's own ids are: both paths start the same trace from it.
    let rule = forward(&jwt, b"4bf92f3577b34da6a3ce929d0e0e4736", claims);

    let mut map = fields.to_header_map(buf);
    rule.apply(&mut map);

    let mut out = Vec::new();
    write(&fields, buf, &rule, &mut out);
    (set_of_map(&map), set_of_lines(&out))
}

#[test]
fn request_lines_are_rewritten_as_the_hyper_path_rewrites_headers() {
    let cases = [
        "GET / HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\n\r\n",
        "POST /a HTTP/1.1\r\nhost: gw\r\ncontent-length: 2\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\nx-empty:\r\nx-forwarded-for:\r\nvia: \r\n\r\n",
        // Hop-by-hop headers, by definition and by Connection, in any case.
        "GET / HTTP/1.1\r\nhost: gw\r\nConnection: keep-alive, X-Secret\r\nconnection: x-other\r\n\
         Keep-Alive: 5\r\nx-secret: 1\r\nX-Other: 2\r\nTE: trailers\r\ntrailer: x\r\n\
         proxy-connection: close\r\nx-keep: yes\r\n\r\n",
        // Forwarding headers from the client: extended or replaced.
        "GET / HTTP/1.1\r\nhost: gw\r\nx-forwarded-for: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n\
         x-forwarded-proto: http\r\nx-forwarded-host: forged\r\nvia: 1.1 edge\r\n\
         x-request-id: abc\r\n\r\n",
        // The same, listed in Connection: they go before the gateway adds its own.
        "GET / HTTP/1.1\r\nhost: gw\r\nconnection: x-forwarded-for, via, host, x-request-id\r\n\
         x-forwarded-for: 10.0.0.1\r\nvia: 1.1 edge\r\nx-request-id: abc\r\n\r\n",
        // Values that are not text are not extended.
        "GET / HTTP/1.1\r\nhost: gw\r\nx-forwarded-for: 10.0.0.1 é\r\nvia: 1.1 é\r\n\r\n",
        // Bare LFs, names in any case.
        "GET / HTTP/1.1\nHost: gw\nX-A: 1\nConnection: X-A\nX-B:  2 \nVIA: 1.0 a\n\n",
        "GET / HTTP/1.1\r\nHOST: gw\r\nX-Forwarded-For: 10.0.0.1\nX-C: 3\r\n\r\n",
        // Forged identity headers.
        "GET / HTTP/1.1\r\nhost: gw\r\nX-UserId: 1\r\nx-userrole: ADMIN\r\nx-userrole: X\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\nconnection: x-userid\r\nx-userid: 1\r\n\r\n",
        // A trace the client started goes on; a bad one, repeated ones or one listed in
        // Connection give way to a new one.
        "GET / HTTP/1.1\r\nhost: gw\r\n\
         traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\ntraceparent: 00-nonsense\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\n\
         traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\
         traceparent: 00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\nconnection: traceparent\r\n\
         traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
        // Many listed names, repeated, in any case; a listed name with no line.
        "GET / HTTP/1.1\r\nhost: gw\r\nconnection: z, B, a, b, x-Gone, A\r\nconnection: c,,x-none\r\n\
         x-gone: 1\r\nB: 2\r\nc: 3\r\nx-stays: 4\r\n\r\n",
    ];
    let verified = claims(&[
        ("sub", serde_json::json!(7)),
        ("role", serde_json::json!("CUSTOMER")),
    ]);
    let bad_value = claims(&[("sub", serde_json::json!("a\nb"))]);
    for raw in cases {
        for c in [None, Some(&verified), Some(&bad_value)] {
            let (hyper, fast) = both_request_paths(raw, c);
            assert_eq!(fast, hyper, "{raw:?} with {:?}", c.map(|c| &c.0));
        }
    }
}

#[test]
fn request_ids_are_read_the_same_way() {
    for raw in [
        "GET / HTTP/1.1\r\nhost: gw\r\nx-request-id: abc-1\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\nX-Request-Id: a:b/c+d=\r\nx-request-id: second\r\n\r\n",
    ] {
        let buf = raw.as_bytes();
        let mut fields = Fields::default();
        let request::Parsed::Take(_) = request::parse(buf, &mut fields) else {
            panic!("{raw:?}");
        };
        let map = fields.to_header_map(buf);
        let id = RequestId::from_client(fields.first(buf, Kind::XRequestId));
        assert_eq!(id.to_header_value(), headers::request_id(&map), "{raw:?}");
        assert!(id.to_header_value().is_sensitive());
    }
    // Not acceptable, or absent: a fresh id either way, of the same shape.
    let long = format!(
        "GET / HTTP/1.1\r\nhost: gw\r\nx-request-id: {}\r\n\r\n",
        "a".repeat(129)
    );
    for raw in [
        "GET / HTTP/1.1\r\nhost: gw\r\nx-request-id: a b\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\nx-request-id:\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: gw\r\n\r\n",
        &long,
    ] {
        let buf = raw.as_bytes();
        let mut fields = Fields::default();
        let request::Parsed::Take(_) = request::parse(buf, &mut fields) else {
            panic!("{raw:?}");
        };
        let fast = RequestId::from_client(fields.first(buf, Kind::XRequestId));
        let hyper = headers::request_id(&fields.to_header_map(buf));
        assert_eq!(fast.as_bytes().len(), 32, "{raw:?}");
        assert_eq!(fast.as_bytes()[..16], hyper.as_bytes()[..16], "{raw:?}");
        assert_ne!(fast.as_bytes(), hyper.as_bytes(), "{raw:?}");
    }
}

/// The response's header set after each path.
fn both_response_paths(raw: &str, chunked: bool) -> (Set, Set) {
    let buf = raw.as_bytes();
    let mut fields = Fields::default();
    let response::Parsed::Head(_) = response::parse(buf, false, &mut fields) else {
        panic!("not a response head: {raw:?}");
    };
    let rule = Relay {
        version: http::Version::HTTP_11,
        request_id: b"the-id",
        chunked,
    };

    let mut map = fields.to_header_map(buf);
    rule.apply(&mut map);

    let mut out = Vec::new();
    write(&fields, buf, &rule, &mut out);
    (set_of_map(&map), set_of_lines(&out))
}

#[test]
fn response_lines_are_rewritten_as_the_hyper_path_rewrites_headers() {
    let cases = [
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\n",
        "HTTP/1.1 200 OK\r\nx-empty:\r\nvia:\r\ncontent-length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-request-id: upstream's\r\nVia: 1.0 app\r\n\r\n",
        "HTTP/1.1 200 OK\r\nconnection: x-request-id, x-drop\r\nx-request-id: u\r\nx-drop: 1\r\n\
         keep-alive: 5\r\ncontent-length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\nupgrade: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nvia: 1.1 é\r\nset-cookie: a=1\r\nset-cookie: b=2\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 0\nX-A: 1\nKeep-Alive: 5\nX-B: 2\n\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Request-ID: u\nVIA: 1.0 a\r\n\r\n",
    ];
    for raw in cases {
        for chunked in [false, true] {
            let (hyper, fast) = both_response_paths(raw, chunked);
            assert_eq!(fast, hyper, "{raw:?}, chunked {chunked}");
        }
    }
}

#[test]
fn lines_are_found_where_they_were_parsed() {
    let raw = b"GET /p HTTP/1.1\r\nHost: gw\r\nX-A:  spaced \r\n\r\n";
    let mut fields = Fields::default();
    let request::Parsed::Take(_) = request::parse(raw, &mut fields) else {
        panic!("not taken");
    };
    let lines: Vec<(&[u8], &[u8])> = fields.iter(raw).collect();
    assert_eq!(
        lines,
        [(&b"Host"[..], &b"gw"[..]), (&b"X-A"[..], &b"spaced"[..])]
    );
    assert_eq!(fields.get(raw, "x-a"), Some(&b"spaced"[..]));
    assert_eq!(fields.get(raw, "x-b"), None);
}
