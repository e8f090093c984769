//! Header lines of a head parsed in place — where each name and value lies in the read buffer,
//! and what the gateway makes of the name — and the rewritten lines the fast path sends on. The
//! rules are the hyper path's ([`pipeline::rewrite_request`], [`pipeline::rewrite_response`] and the
//! `jwt` module's identity headers), applied line by line instead of through a `HeaderMap`: no
//! allocation per header on the path every relayed request takes. The tests run both on the same
//! heads and compare.
//!
//! Each name is classified once, when its head is parsed ([`Kind`]); the rules then compare one
//! byte per line. Lines that go on unchanged are copied as they came, runs of neighbouring lines
//! in one copy: the client's spelling of a name is kept (header names are case-insensitive, RFC
//! 9110 §5.1), as nginx and HAProxy keep it.
//!
//! [`pipeline::rewrite_request`]: crate::pipeline::rewrite_request
//! [`pipeline::rewrite_response`]: crate::pipeline::rewrite_response

use std::ops::Range;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use pms_auth::Claims;
use pms_net::serve::ConnInfo;

use crate::headers::{
    self, RequestId, TRACEPARENT, X_FORWARDED_FOR, X_FORWARDED_HOST, X_REQUEST_ID,
};
use crate::jwt::JwtAuth;

/// What a header name is to the gateway. Names it has no rule for are [`Kind::Other`]; so are
/// the identity headers, whose names come from the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Other,
    Host,
    ContentLength,
    Connection,
    TransferEncoding,
    Upgrade,
    /// `Keep-Alive`, `Proxy-Connection`, `TE` and `Trailer`: hop-by-hop and nothing more.
    HopByHop,
    Expect,
    Authorization,
    XForwardedFor,
    XForwardedProto,
    XForwardedHost,
    Via,
    XRequestId,
    Traceparent,
}

impl Kind {
    /// The kind of a header named `name`, in any case.
    pub(super) fn of(name: &[u8]) -> Kind {
        let is = |known: &[u8]| same_name(name, known);
        // The length picks one or two candidates; most names are compared with none.
        match name.len() {
            2 if is(b"te") => Kind::HopByHop,
            3 if is(b"via") => Kind::Via,
            4 if is(b"host") => Kind::Host,
            6 if is(b"expect") => Kind::Expect,
            7 if is(b"upgrade") => Kind::Upgrade,
            7 if is(b"trailer") => Kind::HopByHop,
            10 if is(b"connection") => Kind::Connection,
            10 if is(b"keep-alive") => Kind::HopByHop,
            11 if is(b"traceparent") => Kind::Traceparent,
            12 if is(b"x-request-id") => Kind::XRequestId,
            13 if is(b"authorization") => Kind::Authorization,
            14 if is(b"content-length") => Kind::ContentLength,
            15 if is(b"x-forwarded-for") => Kind::XForwardedFor,
            16 if is(b"proxy-connection") => Kind::HopByHop,
            16 if is(b"x-forwarded-host") => Kind::XForwardedHost,
            17 if is(b"x-forwarded-proto") => Kind::XForwardedProto,
            17 if is(b"transfer-encoding") => Kind::TransferEncoding,
            _ => Kind::Other,
        }
    }

    /// This kind's bit in [`Fields`]' set of kinds.
    fn bit(self) -> u16 {
        1 << self as u16
    }

    /// Hop-by-hop by definition: `Connection` and [`headers::HOP_BY_HOP`].
    fn hop_by_hop(self) -> bool {
        matches!(
            self,
            Kind::Connection | Kind::TransferEncoding | Kind::Upgrade | Kind::HopByHop
        )
    }

    /// Set by the gateway on every request, whatever the client sent (`Host` is the endpoint's).
    fn replaced(self) -> bool {
        matches!(
            self,
            Kind::Host
                | Kind::XForwardedFor
                | Kind::XForwardedProto
                | Kind::XForwardedHost
                | Kind::Via
                | Kind::XRequestId
                | Kind::Traceparent
        )
    }
}

// Every kind has a bit of `Fields::kinds` (`Traceparent` is the last).
const _: () = assert!((Kind::Traceparent as u16) < u16::BITS as u16);

/// Whether `name` is `known` (lowercase letters and `-`) in any case. Each arm of
/// [`Kind::of`] compares a known length, so this unrolls into a few word compares;
/// `eq_ignore_ascii_case` went byte by byte.
#[inline(always)]
fn same_name(name: &[u8], known: &[u8]) -> bool {
    name.len() == known.len()
        && name.iter().zip(known).all(|(&b, &k)| {
            if k.is_ascii_lowercase() {
                b | 0x20 == k
            } else {
                b == k
            }
        })
}

/// One header line: where its name and value are in the buffer its head was parsed from.
#[derive(Debug, Clone)]
struct Field {
    name: Range<usize>,
    value: Range<usize>,
    kind: Kind,
    /// Where the line ends, CRLF included, when it can go on as it came: optional whitespace
    /// after the value, then CRLF. `None` for a line ended by a bare LF, which goes on rewritten.
    end: Option<usize>,
}

/// The header lines of the head at the start of a buffer, in order. Each connection keeps one
/// and reuses it, so parsing allocates nothing once it has grown.
#[derive(Debug, Default)]
pub(super) struct Fields {
    lines: Vec<Field>,
    /// The kinds among them, one bit each ([`Kind::bit`]): most heads have no `Connection`,
    /// `Via` or `X-Forwarded-For`, and looking for one then scans nothing.
    kinds: u16,
}

impl Fields {
    pub(super) fn clear(&mut self) {
        self.lines.clear();
        self.kinds = 0;
    }

    /// Records `h`, which httparse found in `buf`, of kind `kind` (see [`Kind::of`]).
    pub(super) fn push(&mut self, buf: &[u8], h: &httparse::Header<'_>, kind: Kind) {
        self.kinds |= kind.bit();
        let value = within(buf, h.value);
        let end = line_end(buf, value.end);
        self.lines.push(Field {
            name: within(buf, h.name.as_bytes()),
            value,
            kind,
            end,
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

    /// The first value of a line of `kind`, if the head has one.
    pub(super) fn first<'a>(&self, buf: &'a [u8], kind: Kind) -> Option<&'a [u8]> {
        if !self.has(kind) {
            return None;
        }
        self.lines
            .iter()
            .find(|f| f.kind == kind)
            .map(|f| &buf[f.value.clone()])
    }

    /// Whether a line is of `kind`.
    fn has(&self, kind: Kind) -> bool {
        self.kinds & kind.bit() != 0
    }

    /// The first value of `name` (any case), if the head has one.
    pub(super) fn get<'a>(&'a self, buf: &'a [u8], name: &str) -> Option<&'a [u8]> {
        self.iter(buf)
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// The names the `Connection` lines list (nothing, and no allocation, without one).
    fn listed<'a>(&'a self, buf: &'a [u8]) -> Listed<'a> {
        if !self.has(Kind::Connection) {
            return Listed(Vec::new());
        }
        let mut names: Vec<&[u8]> = self
            .lines
            .iter()
            .filter(|f| f.kind == Kind::Connection)
            .flat_map(|f| headers::connection_tokens(&buf[f.value.clone()]))
            .collect();
        names.sort_unstable_by(|a, b| cmp_ignoring_case(a, b));
        names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        Listed(names)
    }

    /// The first end-to-end value of `name`, of kind `kind`, as text (what the hyper path reads
    /// after it has removed the hop-by-hop headers).
    fn end_to_end_text<'a>(
        &self,
        buf: &'a [u8],
        listed: &Listed<'_>,
        kind: Kind,
        name: &HeaderName,
    ) -> Option<&'a str> {
        if listed.contains(name.as_str().as_bytes()) {
            return None;
        }
        headers::text(self.first(buf, kind)?)
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

/// Where a header line whose value ends at `value_end` ends, CRLF included: after optional
/// spaces and tabs (httparse leaves them out of the value) and CRLF. `None` when a bare LF ends
/// it instead, or anything else follows.
fn line_end(buf: &[u8], value_end: usize) -> Option<usize> {
    // Nearly every line: CRLF right after the value.
    if buf.get(value_end..value_end + 2) == Some(b"\r\n") {
        return Some(value_end + 2);
    }
    let rest = buf.get(value_end..)?;
    let blank = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(rest.len());
    rest.get(blank..blank + 2)
        .filter(|crlf| *crlf == b"\r\n")
        .map(|_| value_end + blank + 2)
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

/// The lines that go on unchanged, written in order: neighbours in the buffer are gathered and
/// copied in one go, and a line that cannot go as it came is written out afresh.
struct Kept<'a> {
    buf: &'a [u8],
    /// Kept lines not written yet, next to each other in `buf`.
    run: Range<usize>,
}

impl<'a> Kept<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Kept { buf, run: 0..0 }
    }

    fn keep(&mut self, f: &Field, out: &mut Vec<u8>) {
        match f.end {
            Some(end) if !self.run.is_empty() && self.run.end == f.name.start => self.run.end = end,
            Some(end) => {
                self.flush(out);
                self.run = f.name.start..end;
            }
            None => {
                self.flush(out);
                own_line(&self.buf[f.name.clone()], &self.buf[f.value.clone()], out);
            }
        }
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        if let Some(lines) = self.buf.get(self.run.clone()) {
            out.extend_from_slice(lines);
        }
        self.run = 0..0;
    }
}

/// `name: value` and CRLF.
fn own_line(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// What goes into a request's header lines on the way upstream.
pub(super) struct RequestRewrite<'a> {
    pub(super) conn: ConnInfo,
    pub(super) request_id: &'a RequestId,
    pub(super) jwt: &'a JwtAuth,
    /// The verified claims, on an authenticated route.
    pub(super) claims: Option<&'a Claims>,
}

/// Writes the request's header lines as they go upstream, `Host` aside (the caller sends the
/// endpoint's): the client's end-to-end lines, then the identity headers, `X-Forwarded-*`,
/// `Via`, `X-Request-Id` and `traceparent`. As the hyper path: hop-by-hop lines, the client's
/// identity headers and its forwarding headers go; `X-Forwarded-For` and `Via` extend the
/// client's; a header that `Connection` lists goes even when the gateway sets it.
pub(super) fn write_request(
    fields: &Fields,
    buf: &[u8],
    rw: &RequestRewrite<'_>,
    out: &mut Vec<u8>,
) {
    let listed = fields.listed(buf);
    let mut kept = Kept::new(buf);
    for f in &fields.lines {
        let name = &buf[f.name.clone()];
        let gone = f.kind.replaced()
            || f.kind.hop_by_hop()
            || rw
                .jwt
                .identity_headers()
                .any(|h| name.eq_ignore_ascii_case(h.as_str().as_bytes()))
            || listed.contains(name);
        if !gone {
            kept.keep(f, out);
        }
    }
    kept.flush(out);
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
        fields.end_to_end_text(buf, &listed, Kind::XForwardedFor, &X_FORWARDED_FOR),
        rw.conn.peer.ip(),
        out,
    );
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(if rw.conn.tls {
        b"x-forwarded-proto: https\r\n"
    } else {
        b"x-forwarded-proto: http\r\n"
    });
    let host = http::header::HOST.as_str().as_bytes();
    if let Some(host) = fields
        .first(buf, Kind::Host)
        .filter(|_| !listed.contains(host))
    {
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
    let client = fields
        .first(buf, Kind::Traceparent)
        .filter(|_| !listed.contains(TRACEPARENT.as_str().as_bytes()));
    let trace = headers::traceparent(client, rw.request_id.as_bytes());
    own_line(TRACEPARENT.as_str().as_bytes(), trace.as_bytes(), out);
}

/// Writes a response's header lines as they go to the client: its end-to-end lines, `Via`
/// extended, the request id unless the upstream sent one; with `chunked`, its `Content-Length`
/// replaced by `Transfer-Encoding: chunked` (the fast path re-frames the body).
pub(super) fn write_response(
    fields: &Fields,
    buf: &[u8],
    version: http::Version,
    request_id: &RequestId,
    chunked: bool,
    out: &mut Vec<u8>,
) {
    let listed = fields.listed(buf);
    let mut has_id = false;
    let mut kept = Kept::new(buf);
    for f in &fields.lines {
        if f.kind.hop_by_hop()
            || f.kind == Kind::Via
            || (chunked && f.kind == Kind::ContentLength)
            || listed.contains(&buf[f.name.clone()])
        {
            continue;
        }
        has_id |= f.kind == Kind::XRequestId;
        kept.keep(f, out);
    }
    kept.flush(out);
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
        fields.end_to_end_text(buf, listed, Kind::Via, &http::header::VIA),
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
    use crate::pipeline;

    #[test]
    fn names_are_classified_in_any_case() {
        let known = [
            ("te", Kind::HopByHop),
            ("via", Kind::Via),
            ("host", Kind::Host),
            ("expect", Kind::Expect),
            ("upgrade", Kind::Upgrade),
            ("trailer", Kind::HopByHop),
            ("connection", Kind::Connection),
            ("keep-alive", Kind::HopByHop),
            ("x-request-id", Kind::XRequestId),
            ("authorization", Kind::Authorization),
            ("content-length", Kind::ContentLength),
            ("x-forwarded-for", Kind::XForwardedFor),
            ("proxy-connection", Kind::HopByHop),
            ("x-forwarded-host", Kind::XForwardedHost),
            ("x-forwarded-proto", Kind::XForwardedProto),
            ("transfer-encoding", Kind::TransferEncoding),
        ];
        for (name, kind) in known {
            let upper = name.to_ascii_uppercase();
            let mixed: String = name
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            for spelling in [name, &upper, &mixed] {
                assert_eq!(Kind::of(spelling.as_bytes()), kind, "{spelling}");
            }
            // One byte off, one byte more or less: nothing the gateway knows.
            let mut off = name.as_bytes().to_vec();
            off[0] = b'z';
            for other in [
                &off[..],
                &name.as_bytes()[1..],
                format!("{name}s").as_bytes(),
            ] {
                assert_eq!(Kind::of(other), Kind::Other, "{other:?}");
            }
        }
        // Any byte anywhere: the same answer as comparing ignoring ASCII case.
        for (name, _) in known {
            for at in 0..name.len() {
                for b in 0..=255u8 {
                    let mut other = name.as_bytes().to_vec();
                    other[at] = b;
                    assert_eq!(
                        same_name(&other, name.as_bytes()),
                        other.eq_ignore_ascii_case(name.as_bytes()),
                        "{other:?}"
                    );
                }
            }
        }
        // The hyper path's notion of hop-by-hop is the same.
        for (name, kind) in known {
            assert_eq!(
                kind.hop_by_hop(),
                headers::is_hop_by_hop(name.as_bytes()),
                "{name}"
            );
        }
        for name in headers::HOP_BY_HOP {
            assert!(Kind::of(name.as_bytes()).hop_by_hop(), "{name}");
        }
        assert_eq!(Kind::of(b""), Kind::Other);
        assert_eq!(Kind::of(b"x-userid"), Kind::Other);
    }

    /// The request's header lines as the fast path writes them, for a head it takes.
    fn request_lines(raw: &[u8]) -> String {
        let mut fields = Fields::default();
        let request::Parsed::Take(_) = request::parse(raw, &mut fields) else {
            panic!("the fast path does not take {raw:?}");
        };
        let jwt = jwt();
        let request_id = RequestId::from_client(Some(b"the-id"));
        let rewrite = RequestRewrite {
            conn: CONN,
            request_id: &request_id,
            jwt: &jwt,
            claims: None,
        };
        let mut out = Vec::new();
        write_request(&fields, raw, &rewrite, &mut out);
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
            format!(
                "X-Mixed-CASE:  v  \r\nContent-Length: 0\r\nx-tab:\tt\t\r\nX-Empty:\r\n{ADDED}"
            )
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

    /// The request's header set after each path, `Host` left out (each adds the endpoint's).
    fn both_request_paths(raw: &str, claims: Option<&Claims>) -> (Set, Set) {
        let jwt = jwt();
        let buf = raw.as_bytes();
        let mut fields = Fields::default();
        let request::Parsed::Take(_) = request::parse(buf, &mut fields) else {
            panic!("the fast path does not take {raw:?}");
        };
        // Hex, as the gateway's own ids are: both paths start the same trace from it.
        let request_id = RequestId::from_client(Some(b"4bf92f3577b34da6a3ce929d0e0e4736"));

        let mut map = fields.to_header_map(buf);
        jwt.strip_identity(&mut map);
        if let Some(c) = claims {
            jwt.inject(c, &mut map);
        }
        let id = request_id.to_header_value();
        pipeline::rewrite_request(&mut map, CONN, http::Version::HTTP_11, None, &id);

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
        // Hex, as the gateway's own ids are: both paths start the same trace from it.
        let request_id = RequestId::from_client(Some(b"4bf92f3577b34da6a3ce929d0e0e4736"));

        let mut map = fields.to_header_map(buf);
        pipeline::rewrite_response(
            &mut map,
            http::Version::HTTP_11,
            &request_id.to_header_value(),
        );
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
}
