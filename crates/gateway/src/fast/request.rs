//! Request heads on the fast path: parsed with `httparse`, and taken only when they are plain —
//! HTTP/1.1, a common method, an origin-form target, exactly one `Host`, the body framed by at
//! most one `Content-Length` value. Anything else (chunked or `Expect` bodies, upgrades,
//! HTTP/1.0, the HTTP/2 preface, absolute-form targets) is declined, and hyper serves the
//! connection from that request on. Heads that are not HTTP at all are refused here, so the
//! client gets the gateway's JSON error rather than hyper's empty one.

use std::ops::Range;

use bytes::BufMut;
use http::Method;

use crate::h1up::fields::{self, Fields};
use crate::headers::rules::{Forward, Kind};

/// Most header lines a request may have on the fast path (hyper's default limit is 100; a
/// request with more is declined and hyper takes it).
const MAX_HEADERS: usize = 64;

/// A request head the fast path takes. It describes the buffer it was parsed from, with the
/// header lines in a [`Fields`], until the caller moves past the head.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) method: Method,
    /// Origin-form target, path and query: where it is in the buffer.
    target: Range<usize>,
    /// Where its path ends: at the `?` of the query, or with the target.
    path_end: usize,
    /// Length of the head in bytes, blank line included.
    pub(super) len: usize,
    /// Body length (`Content-Length`, 0 without one).
    pub(super) body: u64,
    /// The client did not ask to close after this request.
    pub(super) keep_alive: bool,
    /// It carries an `Origin` (a browser's request from a page).
    pub(super) origin: bool,
}

impl Head {
    /// The target (path and query) in `buf`, the buffer the head was parsed from: text (httparse
    /// read it as text), left as bytes.
    pub(super) fn target<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.target.clone()]
    }

    /// The path, without the query.
    pub(super) fn path<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.target.start..self.path_end]
    }

    /// Whether sending it twice does no more than sending it once: see
    /// [`health::idempotent`](crate::health::idempotent).
    pub(super) fn idempotent(&self) -> bool {
        crate::health::idempotent(&self.method)
    }

    /// Writes the head as it goes upstream to `out`, but for its `Host` line and the blank line
    /// that ends it: the endpoint is not known yet. The `Host` line goes at the returned index,
    /// just after the request line (see [`insert_host`](crate::h1up::head::insert_host)). `buf` and `fields` are what the head
    /// was parsed from; the header lines are rewritten by `rule` (see [`fields::write`]).
    pub(super) fn write_upstream(
        &self,
        buf: &[u8],
        fields: &Fields,
        rule: &Forward<'_>,
        out: &mut Vec<u8>,
    ) -> usize {
        out.put_slice(self.method.as_str().as_bytes());
        out.put_u8(b' ');
        out.put_slice(&buf[self.target.clone()]);
        out.put_slice(b" HTTP/1.1\r\n");
        let host_at = out.len();
        fields::write(fields, buf, rule, out);
        host_at
    }
}

/// What the start of the buffer holds.
#[derive(Debug)]
pub(super) enum Parsed {
    /// A complete head the fast path takes.
    Take(Head),
    /// Not a complete head yet.
    Partial,
    /// A head for hyper to deal with.
    Decline,
    /// Not a valid request head (hyper would refuse it with 400 too).
    Invalid(String),
}

/// Parses the head at the start of `buf`; its header lines go to `fields`.
pub(super) fn parse(buf: &[u8], fields: &mut Fields) -> Parsed {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut storage);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        // The HTTP/2 preface fails on its version, and hyper allows more headers than the
        // fast path takes.
        Err(httparse::Error::Version | httparse::Error::TooManyHeaders) => return Parsed::Decline,
        Err(e) => return Parsed::Invalid(e.to_string()),
    };
    if req.version != Some(1) {
        return Parsed::Decline;
    }
    let method = match req.method {
        Some("GET") => Method::GET,
        Some("POST") => Method::POST,
        Some("PUT") => Method::PUT,
        Some("DELETE") => Method::DELETE,
        Some("PATCH") => Method::PATCH,
        Some("HEAD") => Method::HEAD,
        Some("OPTIONS") => Method::OPTIONS,
        _ => return Parsed::Decline,
    };
    // What `http::Uri` (the hyper path) accepts, so both paths refuse the same targets; a
    // fragment (which `http::Uri` drops) goes to hyper too.
    let target = match req.path {
        Some(p) if p.starts_with('/') && !p.contains('#') => {
            if !valid_target(p) {
                // The answer quotes it, shortened: the head may be tens of KB.
                let shown: String = p.chars().take(64).collect();
                let more = if shown.len() < p.len() { "…" } else { "" };
                return Parsed::Invalid(format!("invalid request target {shown:?}{more}"));
            }
            p
        }
        _ => return Parsed::Decline,
    };
    let path_end = target.bytes().position(|b| b == b'?');
    let target = fields::within(buf, target.as_bytes());
    let path_end = path_end.map_or(target.end, |at| target.start + at);
    fields.clear();
    let mut body = None;
    let mut hosts = 0;
    let mut keep_alive = true;
    let mut origin = false;
    for h in req.headers.iter() {
        let kind = Kind::of(h.name.as_bytes());
        origin |= h.name.len() == 6 && h.name.eq_ignore_ascii_case("origin");
        match kind {
            Kind::TransferEncoding | Kind::Expect | Kind::Upgrade => return Parsed::Decline,
            Kind::ContentLength => match (pms_h1::content_length(h.value), body) {
                (Some(n), None) => body = Some(n),
                (Some(n), Some(m)) if n == m => continue, // a repeat: forward one
                _ => return Parsed::Decline,
            },
            Kind::Host => {
                // An invalid one: hyper's path says why.
                if !crate::headers::valid_host(h.value) {
                    return Parsed::Decline;
                }
                hosts += 1;
            }
            Kind::Connection
                if h.value
                    .split(|b| *b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close")) =>
            {
                keep_alive = false;
            }
            _ => {}
        }
        fields.push(buf, h, kind);
    }
    if hosts != 1 {
        return Parsed::Decline;
    }
    Parsed::Take(Head {
        method,
        target,
        path_end,
        len,
        body: body.unwrap_or(0),
        keep_alive,
        origin,
    })
}

/// Whether `http::uri::PathAndQuery` — what the hyper path parses targets with — takes
/// `target`. A target of only the characters it takes in both path and query is decided here;
/// anything else is handed to it (it copies the target, so asking it every time costs an
/// allocation per request).
fn valid_target(target: &str) -> bool {
    (target.len() <= 8192 && target.bytes().all(|b| PLAIN[usize::from(b)]))
        || http::uri::PathAndQuery::try_from(target).is_ok()
}

/// The bytes `http::uri::PathAndQuery` takes in a path and in a query alike, as a table: one
/// load per byte.
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x3F..=0x5F | 0x61..=0x7A | 0x7C | 0x7E);
        b += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1up::head::{insert_host, replace_host};

    fn take(raw: &str) -> (Head, Fields) {
        let mut fields = Fields::default();
        match super::parse(raw.as_bytes(), &mut fields) {
            Parsed::Take(h) => (h, fields),
            other => panic!("{raw:?}: {other:?}"),
        }
    }

    fn parse(raw: &[u8]) -> Parsed {
        super::parse(raw, &mut Fields::default())
    }

    fn declined(raw: &str) -> bool {
        matches!(parse(raw.as_bytes()), Parsed::Decline)
    }

    #[test]
    fn plain_requests_are_taken() {
        let raw = "POST /a/b?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello";
        let (h, fields) = take(raw);
        let buf = raw.as_bytes();
        assert_eq!(h.method, Method::POST);
        assert_eq!(h.target(buf), b"/a/b?x=1");
        assert_eq!(h.path(buf), b"/a/b");
        for (raw, path) in [
            ("GET /x HTTP/1.1\r\nhost: gw\r\n\r\n", &b"/x"[..]),
            ("GET /a?b?c HTTP/1.1\r\nhost: gw\r\n\r\n", b"/a"),
            ("GET /? HTTP/1.1\r\nhost: gw\r\n\r\n", b"/"),
        ] {
            let (h, _) = take(raw);
            assert_eq!(h.path(raw.as_bytes()), path, "{raw:?}");
        }
        assert_eq!(h.body, 5);
        assert_eq!(
            h.len,
            "POST /a/b?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n".len()
        );
        assert!(h.keep_alive);
        assert_eq!(fields.get(buf, "x-a"), Some(&b"1"[..]));
        assert_eq!(fields.get(buf, "host"), Some(&b"gw"[..]));

        let (h, _) = take("GET / HTTP/1.1\r\nhost: gw\r\nconnection: keep-alive, Close\r\n\r\n");
        assert_eq!(h.body, 0);
        assert!(!h.keep_alive);
        let raw = "GET / HTTP/1.1\r\nhost: gw\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n";
        let (_, fields) = take(raw);
        let lengths = fields
            .iter(raw.as_bytes())
            .filter(|(n, _)| *n == b"content-length");
        assert_eq!(lengths.count(), 1);
    }

    #[test]
    fn incomplete_heads_wait_for_more() {
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nhost: gw\r\n"),
            Parsed::Partial
        ));
        assert!(matches!(parse(b""), Parsed::Partial));
    }

    #[test]
    fn anything_unusual_goes_to_hyper() {
        for raw in [
            "GET / HTTP/1.0\r\nhost: gw\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "CONNECT gw:443 HTTP/1.1\r\nhost: gw\r\n\r\n",
            "TRACE / HTTP/1.1\r\nhost: gw\r\n\r\n",
            "GET http://gw/ HTTP/1.1\r\nhost: gw\r\n\r\n",
            "GET /a#fragment HTTP/1.1\r\nhost: gw\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: gw\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: gw\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: gw\r\ncontent-length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: gw\r\ncontent-length: 3, 3\r\n\r\n",
            "POST / HTTP/1.1\r\nhost: gw\r\nexpect: 100-continue\r\ncontent-length: 3\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: gw\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
        ] {
            assert!(declined(raw), "{raw:?}");
        }
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        assert!(declined(&format!(
            "GET / HTTP/1.1\r\nhost: gw\r\n{many}\r\n"
        )));
    }

    #[test]
    fn heads_that_are_not_http_are_refused_with_the_reason() {
        for (raw, reason) in [
            (
                &b"GET /a<b HTTP/1.1\r\nhost: gw\r\n\r\n"[..],
                "invalid request target \"/a<b\"",
            ),
            (
                b"GET / HTTP/1.1\r\nhost: gw\r\nbad header\r\n\r\n",
                "header name",
            ),
            (
                b"GET / HTTP/1.1\r\nhost: gw\r\nx: a\r\n b\r\n\r\n",
                "header name",
            ),
            (b"G\x01T / HTTP/1.1\r\nhost: gw\r\n\r\n", "token"),
            // No control characters in values (what `HeaderValue` refuses too).
            (
                b"GET / HTTP/1.1\r\nhost: gw\r\nx-a: a\x7fb\r\n\r\n",
                "header value",
            ),
            // A TLS ClientHello on the cleartext port.
            (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "token"),
        ] {
            match parse(raw) {
                Parsed::Invalid(msg) => assert!(msg.contains(reason), "{raw:?}: {msg}"),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
        let long = format!("GET /<{}> HTTP/1.1\r\nhost: gw\r\n\r\n", "a".repeat(5000));
        match parse(long.as_bytes()) {
            Parsed::Invalid(msg) => {
                assert!(msg.ends_with("aaa\"…"), "{msg}");
                assert!(msg.len() < 120, "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_upstream_head_has_the_endpoint_host_first_and_the_lines_in_order() {
        let raw =
            "PUT /x?y HTTP/1.1\r\nHost: client\r\nContent-Length: 0\r\nB: 2\r\nA: 1\r\nB: 3\r\n\
                   traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n";
        let (h, fields) = take(raw);
        let jwt = crate::jwt::JwtAuth::new(None).unwrap();
        let request_id = crate::headers::RequestId::from_client(Some(b"rid"));
        let rule = Forward {
            conn: pms_net::serve::ConnInfo {
                peer: "10.1.2.3:5000".parse().unwrap(),
                local: "127.0.0.1:8080".parse().unwrap(),
                tls: false,
            },
            version: http::Version::HTTP_11,
            authority: None,
            request_id: request_id.as_bytes(),
            identity: jwt.identity(),
            claims: None,
            traceparent: None,
        };
        let mut out = b"left over".to_vec();
        out.clear();
        let at = h.write_upstream(raw.as_bytes(), &fields, &rule, &mut out);
        insert_host(&mut out, at, "127.0.0.1:9000");
        let rest = "\r\nContent-Length: 0\r\nB: 2\r\nA: 1\r\n\
             B: 3\r\nx-forwarded-for: 10.1.2.3\r\nx-forwarded-proto: http\r\n\
             x-forwarded-host: client\r\nvia: 1.1 pms\r\nx-request-id: rid\r\n\
             traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n";
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            format!("PUT /x?y HTTP/1.1\r\nhost: 127.0.0.1:9000{rest}")
        );
        // Sent to another endpoint: only the Host line changes.
        replace_host(&mut out, "users-1.internal:8081");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("PUT /x?y HTTP/1.1\r\nhost: users-1.internal:8081{rest}")
        );
    }

    #[test]
    fn targets_are_judged_as_http_judges_them() {
        let mut chars: Vec<char> = (0u8..0x80).map(char::from).collect();
        chars.extend(['é', '€', '\u{10348}']);
        for c in chars {
            for target in [format!("/a{c}b"), format!("/a?{c}"), format!("/{c}?x={c}")] {
                assert_eq!(
                    valid_target(&target),
                    http::uri::PathAndQuery::try_from(target.as_str()).is_ok(),
                    "{target:?}"
                );
            }
        }
        let long = format!("/{}", "a".repeat(70_000));
        assert!(!valid_target(&long), "over http's length limit");
    }
}
