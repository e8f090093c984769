//! Header lines of a head parsed in place — where each name and value lies in the read buffer —
//! and the rewritten lines the fast path sends on. The rules are the hyper path's
//! ([`proxy::rewrite_request`], [`proxy::rewrite_response`] and the `jwt` module's identity
//! headers), applied line by line instead of through a `HeaderMap`: no allocation per header on
//! the path every relayed request takes. The tests run both on the same heads and compare.
//!
//! [`proxy::rewrite_request`]: crate::proxy::rewrite_request
//! [`proxy::rewrite_response`]: crate::proxy::rewrite_response

use std::ops::Range;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use pms_auth::Claims;
use pms_net::serve::ConnInfo;

use crate::headers::{self, X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO, X_REQUEST_ID};
use crate::jwt::JwtAuth;

/// One header line: where its name and value are in the buffer its head was parsed from.
#[derive(Debug, Clone)]
struct Field {
    name: Range<usize>,
    value: Range<usize>,
}

/// The header lines of the head at the start of a buffer, in order. Each connection keeps one
/// and reuses it, so parsing allocates nothing once it has grown.
#[derive(Debug, Default)]
pub(super) struct Fields {
    lines: Vec<Field>,
    /// Whether one of them is `Connection` (most heads have none).
    connection: bool,
}

impl Fields {
    pub(super) fn clear(&mut self) {
        self.lines.clear();
        self.connection = false;
    }

    /// Records `h`, which httparse found in `buf`.
    pub(super) fn push(&mut self, buf: &[u8], h: &httparse::Header<'_>) {
        self.connection |= h.name.eq_ignore_ascii_case("connection");
        self.lines.push(Field {
            name: within(buf, h.name.as_bytes()),
            value: within(buf, h.value),
        });
    }

    /// The lines as (name, value), in order; `buf` is the buffer they were parsed from.
    pub(super) fn iter<'a>(
        &'a self,
        buf: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.lines
            .iter()
            .map(|f| (&buf[f.name.clone()], &buf[f.value.clone()]))
    }

    /// The first value of `name` (lowercase), if the head has one.
    pub(super) fn get<'a>(&'a self, buf: &'a [u8], name: &str) -> Option<&'a [u8]> {
        self.iter(buf)
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// The names the `Connection` lines list (nothing, and no allocation, without one).
    fn listed<'a>(&'a self, buf: &'a [u8]) -> Listed<'a> {
        if !self.connection {
            return Listed(Vec::new());
        }
        let mut names: Vec<&[u8]> = self
            .iter(buf)
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .flat_map(|(_, v)| headers::connection_tokens(v))
            .collect();
        names.sort_unstable_by(|a, b| cmp_ignoring_case(a, b));
        names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        Listed(names)
    }

    /// The first end-to-end value of `name`, as text (what the hyper path reads after it has
    /// removed the hop-by-hop headers).
    fn end_to_end_text<'a>(
        &'a self,
        buf: &'a [u8],
        listed: &Listed<'_>,
        name: &HeaderName,
    ) -> Option<&'a str> {
        if listed.contains(name.as_str().as_bytes()) {
            return None;
        }
        headers::text(self.get(buf, name.as_str())?)
    }

    /// The lines as a `HeaderMap`, for hyper. httparse takes the same names (tokens) and values
    /// (no control characters but tab) as the `http` crate, so none is refused here; one that
    /// were would be left out.
    pub(super) fn to_header_map(&self, buf: &[u8]) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.lines.len());
        for (name, value) in self.iter(buf) {
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                map.append(name, value);
            }
        }
        map
    }
}

/// The header names a head's `Connection` lines list, sorted ignoring case. Each line's lookup
/// costs a logarithm, so a head of many lines and many listed names costs about as much as
/// sorting them (scanning all names for every line would cost their product).
struct Listed<'a>(Vec<&'a [u8]>);

impl Listed<'_> {
    fn contains(&self, name: &[u8]) -> bool {
        !self.0.is_empty()
            && self
                .0
                .binary_search_by(|t| cmp_ignoring_case(t, name))
                .is_ok()
    }

    /// Whether a line of this name is hop-by-hop: by definition, or listed.
    fn hop_by_hop(&self, name: &[u8]) -> bool {
        headers::is_hop_by_hop(name) || self.contains(name)
    }
}

fn cmp_ignoring_case(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.iter()
        .map(u8::to_ascii_lowercase)
        .cmp(b.iter().map(u8::to_ascii_lowercase))
}

/// Where `part`, a slice of `buf` (as httparse gives them), lies in it. Anything else would be a
/// bug: tests stop on it, and a release build gets an empty range rather than a slice out of
/// bounds.
pub(super) fn within(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize);
    match start {
        Some(start) if start + part.len() <= buf.len() => start..start + part.len(),
        _ => {
            debug_assert!(false, "not a slice of the buffer");
            0..0
        }
    }
}

/// `name: value` and CRLF, the name in lowercase as the hyper path sends it.
fn line(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    own_line(name, value, out);
    lowercase(&mut out[at..at + name.len()]);
}

/// `name: value` and CRLF, for a name already in lowercase (one of the gateway's own).
fn own_line(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Makes `name` ASCII lowercase eight bytes at a time, the last eight overlapping the ones
/// before when its length is not a multiple of eight (lowercasing twice changes nothing). Byte
/// by byte, this was a third of the instructions spent writing header lines.
fn lowercase(name: &mut [u8]) {
    let Some(last) = name.len().checked_sub(8) else {
        name.make_ascii_lowercase();
        return;
    };
    for at in (0..last).step_by(8).chain(std::iter::once(last)) {
        if let Some(word) = name.get_mut(at..at + 8) {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(word);
            word.copy_from_slice(&lowercase8(u64::from_le_bytes(bytes)).to_le_bytes());
        }
    }
}

/// The eight bytes of `x` with `A`–`Z` made lowercase and every other byte (non-ASCII ones
/// too) left as it is. Each byte's low seven bits are offset so that their top bit says
/// whether they reached `A` and whether they passed `Z`; no sum carries into the next byte.
fn lowercase8(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOP: u64 = 0x8080_8080_8080_8080;
    let low = x & !TOP;
    let from_a = low + ONES * (0x80 - u64::from(b'A'));
    let past_z = low + ONES * (0x7f - u64::from(b'Z'));
    let upper = from_a & !past_z & !x & TOP;
    // 0x80 >> 2 is 0x20, the case bit.
    x | (upper >> 2)
}

/// What goes into a request's header lines on the way upstream.
pub(super) struct RequestRewrite<'a> {
    pub(super) conn: ConnInfo,
    pub(super) request_id: &'a HeaderValue,
    pub(super) jwt: &'a JwtAuth,
    /// The verified claims, on an authenticated route.
    pub(super) claims: Option<&'a Claims>,
}

/// Request headers the gateway sets itself, whatever the client sent.
const REPLACED: [&str; 6] = [
    "host",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "via",
    "x-request-id",
];

/// Writes the request's header lines as they go upstream, `Host` aside (the caller sends the
/// endpoint's): the client's end-to-end lines, then the identity headers, `X-Forwarded-*`,
/// `Via` and `X-Request-Id`. As the hyper path: hop-by-hop lines, the client's identity headers and
/// its forwarding headers go; `X-Forwarded-For` and `Via` extend the client's; a header that
/// `Connection` lists goes even when the gateway sets it.
pub(super) fn write_request(
    fields: &Fields,
    buf: &[u8],
    rw: &RequestRewrite<'_>,
    out: &mut Vec<u8>,
) {
    let listed = fields.listed(buf);
    for (name, value) in fields.iter(buf) {
        let gone = REPLACED
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
            || rw
                .jwt
                .identity_headers()
                .any(|h| name.eq_ignore_ascii_case(h.as_str().as_bytes()))
            || listed.hop_by_hop(name);
        if !gone {
            line(name, value, out);
        }
    }
    if let Some(claims) = rw.claims {
        for (header, value) in rw.jwt.identity(claims) {
            let name = header.as_str().as_bytes();
            if headers::valid_value(value.as_bytes()) && !listed.contains(name) {
                own_line(name, value.as_bytes(), out);
            }
        }
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    headers::write_forwarded_for(
        fields.end_to_end_text(buf, &listed, &X_FORWARDED_FOR),
        rw.conn.peer.ip(),
        out,
    );
    out.extend_from_slice(b"\r\n");
    let proto: &[u8] = if rw.conn.tls { b"https" } else { b"http" };
    own_line(X_FORWARDED_PROTO.as_str().as_bytes(), proto, out);
    let host = http::header::HOST.as_str().as_bytes();
    if let Some(host) = fields.get(buf, "host").filter(|_| !listed.contains(host)) {
        own_line(X_FORWARDED_HOST.as_str().as_bytes(), host, out);
    }
    via(
        fields,
        buf,
        &listed,
        headers::via_token(http::Version::HTTP_11),
        out,
    );
    own_line(
        X_REQUEST_ID.as_str().as_bytes(),
        rw.request_id.as_bytes(),
        out,
    );
}

/// Writes a response's header lines as they go to the client: its end-to-end lines, `Via`
/// extended, the request id unless the upstream sent one; with `chunked`, its `Content-Length`
/// replaced by `Transfer-Encoding: chunked` (the fast path re-frames the body).
pub(super) fn write_response(
    fields: &Fields,
    buf: &[u8],
    version: http::Version,
    request_id: &HeaderValue,
    chunked: bool,
    out: &mut Vec<u8>,
) {
    let listed = fields.listed(buf);
    let mut has_id = false;
    for (name, value) in fields.iter(buf) {
        if listed.hop_by_hop(name)
            || name.eq_ignore_ascii_case(b"via")
            || (chunked && name.eq_ignore_ascii_case(b"content-length"))
        {
            continue;
        }
        has_id |= name.eq_ignore_ascii_case(X_REQUEST_ID.as_str().as_bytes());
        line(name, value, out);
    }
    via(fields, buf, &listed, headers::via_token(version), out);
    if !has_id {
        own_line(X_REQUEST_ID.as_str().as_bytes(), request_id.as_bytes(), out);
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
}

/// `Via` with this hop's `token` after the earlier ones.
fn via(fields: &Fields, buf: &[u8], listed: &Listed<'_>, token: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"via: ");
    headers::write_via(
        fields.end_to_end_text(buf, listed, &http::header::VIA),
        token,
        out,
    );
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    //! Each head goes through the hyper path's `HeaderMap` rules and through this module's line
    //! rules; the header sets that come out must be the same.

    use super::*;
    use crate::config::JwtSettings;
    use crate::fast::{request, response};
    use crate::proxy;

    #[test]
    fn lowercasing_eight_at_a_time_matches_byte_by_byte() {
        // Every byte value in every lane, next to letters of both cases.
        for b in 0..=255u8 {
            for lane in 0..8 {
                let mut word = *b"aZ@[`{Az";
                word[lane] = b;
                let x = u64::from_le_bytes(word);
                assert_eq!(
                    lowercase8(x).to_le_bytes().to_vec(),
                    word.to_ascii_lowercase(),
                    "{word:?}"
                );
            }
        }
        let names = [
            "",
            "A",
            "Host",
            "ABCDEFG",
            "ABCDEFGH",
            "ABCDEFGHI",
            "Content-Length",
            "X-FORWARDED-FOR-AND-MORE",
            "x-échø-Ä",
        ];
        for name in names {
            let mut bytes = name.as_bytes().to_vec();
            lowercase(&mut bytes);
            assert_eq!(bytes, name.as_bytes().to_ascii_lowercase(), "{name}");
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
            .map(|h| {
                assert_eq!(
                    h.name,
                    h.name.to_ascii_lowercase(),
                    "names go out in lowercase"
                );
                (h.name.to_owned(), h.value.to_vec())
            })
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

    /// The request's header set after each path, `Host` left out (each adds the endpoint's).
    fn both_request_paths(raw: &str, claims: Option<&Claims>) -> (Set, Set) {
        let jwt = jwt();
        let buf = raw.as_bytes();
        let mut fields = Fields::default();
        let request::Parsed::Take(_) = request::parse(buf, &mut fields) else {
            panic!("the fast path does not take {raw:?}");
        };
        let request_id = HeaderValue::from_static("the-id");

        let mut map = fields.to_header_map(buf);
        jwt.strip_identity(&mut map);
        if let Some(c) = claims {
            jwt.inject(c, &mut map);
        }
        proxy::rewrite_request(&mut map, CONN, http::Version::HTTP_11, None, &request_id);

        let mut out = Vec::new();
        let rewrite = RequestRewrite {
            conn: CONN,
            request_id: &request_id,
            jwt: &jwt,
            claims,
        };
        write_request(&fields, buf, &rewrite, &mut out);
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
            // Forged identity headers.
            "GET / HTTP/1.1\r\nhost: gw\r\nX-UserId: 1\r\nx-userrole: ADMIN\r\nx-userrole: X\r\n\r\n",
            "GET / HTTP/1.1\r\nhost: gw\r\nconnection: x-userid\r\nx-userid: 1\r\n\r\n",
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
            assert_eq!(
                headers::request_id_from(fields.get(buf, "x-request-id")),
                headers::request_id(&map),
                "{raw:?}"
            );
        }
    }

    /// The response's header set after each path.
    fn both_response_paths(raw: &str, chunked: bool) -> (Set, Set) {
        let buf = raw.as_bytes();
        let mut fields = Fields::default();
        let response::Parsed::Head(_) = response::parse(buf, false, &mut fields) else {
            panic!("not a response head: {raw:?}");
        };
        let request_id = HeaderValue::from_static("the-id");

        let mut map = fields.to_header_map(buf);
        proxy::rewrite_response(&mut map, http::Version::HTTP_11, &request_id);
        if chunked {
            map.remove(http::header::CONTENT_LENGTH);
            map.insert(
                http::header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
        }

        let mut out = Vec::new();
        write_response(
            &fields,
            buf,
            http::Version::HTTP_11,
            &request_id,
            chunked,
            &mut out,
        );
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
}
