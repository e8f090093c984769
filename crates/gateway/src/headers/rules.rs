//! The header rules, written once for both front ends: which of a head's lines go no further,
//! and which lines the gateway adds, for a request on its way upstream ([`Forward`]) and for a
//! response on its way back ([`Relay`]).
//!
//! A rule reads a head through [`Head`] and writes what it adds through [`Out`]. The fast path
//! applies the rules line by line to a head parsed in place (`h1up::fields`), with no allocation
//! per header; hyper's path applies the same rules to a `HeaderMap` ([`Rule::apply`]).
//!
//! - Both ways, hop-by-hop lines go (RFC 9110 §7.6.1): `Connection`, the names it lists, and
//!   the names that are hop-by-hop by definition.
//! - A request also loses what the gateway sets itself, whatever the client sent: `Host` (the
//!   endpoint's is sent), `X-Forwarded-*`, `Via`, `X-Request-Id`, `traceparent`, and the
//!   identity headers (set from verified claims only); the forwarder's key goes no further. `X-Forwarded-For` and `Via` extend the
//!   client's first value when it is text; a client's valid `traceparent` goes on.
//! - A response gets `Via` extended, and the request id unless the upstream sent one.

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, DATE, HOST, TRANSFER_ENCODING, VIA,
};
use http::Version;
use pms_auth::Claims;
use pms_net::serve::ConnInfo;

use super::{
    connection_tokens, text, traceparent, valid_value, via_token, write_forwarded_for, write_via,
    TRACEPARENT, X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO, X_REQUEST_ID,
};

/// What a header name is to the gateway. Names it has no rule for are [`Kind::Other`]; so are
/// the identity headers, whose names come from the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
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
    /// `X-PMS-Forwarder-Key`: the trusted forwarder's proof, for this gateway only.
    ForwarderKey,
    Traceparent,
}

impl Kind {
    /// The kind of a header named `name`, in any case.
    pub(crate) fn of(name: &[u8]) -> Kind {
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
            19 if is(b"x-pms-forwarder-key") => Kind::ForwarderKey,
            _ => Kind::Other,
        }
    }

    /// This kind's bit in a set of kinds held as a `u16`.
    pub(crate) fn bit(self) -> u16 {
        1 << self as u16
    }

    /// Hop-by-hop by definition: `Connection`, `Transfer-Encoding`, `Upgrade`, `Keep-Alive`,
    /// `Proxy-Connection`, `TE` and `Trailer`.
    fn hop_by_hop(self) -> bool {
        matches!(
            self,
            Kind::Connection | Kind::TransferEncoding | Kind::Upgrade | Kind::HopByHop
        )
    }

    /// Set by the gateway on every request, whatever the client sent (`Host` is the endpoint's),
    /// or for the gateway alone (the forwarder's key).
    fn replaced(self) -> bool {
        matches!(
            self,
            Kind::Host
                | Kind::ForwarderKey
                | Kind::XForwardedFor
                | Kind::XForwardedProto
                | Kind::XForwardedHost
                | Kind::Via
                | Kind::XRequestId
                | Kind::Traceparent
        )
    }
}

// Every kind has a bit of a `u16` set (`Traceparent` is the last).
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

/// The header names a head's `Connection` lines list, sorted ignoring case. Each line's lookup
/// costs a logarithm, so a head of many lines and many listed names costs about as much as
/// sorting them (scanning all names for every line would cost their product).
#[derive(Debug, Default)]
pub(crate) struct Listed<'a>(Vec<&'a [u8]>);

impl<'a> Listed<'a> {
    /// The names listed in `values`, the `Connection` values of a head (no allocation for none).
    pub(crate) fn new(values: impl Iterator<Item = &'a [u8]>) -> Self {
        let mut names: Vec<&[u8]> = values.flat_map(connection_tokens).collect();
        names.sort_unstable_by(|a, b| cmp_ignoring_case(a, b));
        names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        Listed(names)
    }

    /// Whether `name` (any case) is listed.
    pub(crate) fn contains(&self, name: &[u8]) -> bool {
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

/// A head's header lines, as the rules read them.
pub(crate) trait Head {
    /// The first value of the header `name`, whose kind is `kind` (a head finds it by either).
    fn first(&self, kind: Kind, name: &HeaderName) -> Option<&[u8]>;
    /// The names its `Connection` lines list.
    fn listed(&self) -> Listed<'_>;
}

/// Where the lines a rule adds go.
pub(crate) trait Out {
    /// Adds `name: value`.
    fn add(&mut self, name: &HeaderName, value: &[u8]);
    /// Adds `name` with a value known at compile time.
    fn add_static(&mut self, name: &HeaderName, value: &'static str) {
        self.add(name, value.as_bytes());
    }
    /// Adds `name` with the value `write` writes.
    fn add_written(&mut self, name: &HeaderName, write: impl FnOnce(&mut Vec<u8>));
}

/// A set of header rules: which lines of a head go no further, and which lines the gateway adds.
pub(crate) trait Rule {
    /// Whether a line named `name`, of kind `kind`, stays behind; `listed` is what the head's
    /// `Connection` lines list.
    fn drops(&self, kind: Kind, name: &[u8], listed: &Listed<'_>) -> bool;

    /// Writes the lines the gateway adds to `head`.
    fn add(&self, head: &impl Head, listed: &Listed<'_>, out: &mut impl Out);

    /// The rules applied to a `HeaderMap` (hyper's path): every name [`Rule::drops`] picks goes,
    /// all its values, then what [`Rule::add`] writes is appended.
    fn apply(&self, headers: &mut HeaderMap) {
        let mut edit = MapEdit::default();
        {
            let listed = headers.listed();
            edit.gone = headers
                .keys()
                .filter(|name| {
                    let name = name.as_str().as_bytes();
                    self.drops(Kind::of(name), name, &listed)
                })
                .cloned()
                .collect();
            self.add(headers, &listed, &mut edit);
        }
        for name in edit.gone {
            headers.remove(name);
        }
        for (name, value) in edit.added {
            headers.append(name, value);
        }
        // `Date` changes every second. Indexed over HTTP/2, each new value joins the
        // connection's HPACK table, and the encoder compares every response's date with all
        // the earlier ones still there. Sent as a literal, as nginx does, it costs 30 bytes and
        // no search.
        if let Some(date) = headers.get_mut(DATE) {
            date.set_sensitive(true);
        }
    }
}

/// The first value of `name` as text, unless `Connection` lists it: what a rule extends.
fn end_to_end_text<'a>(
    head: &'a impl Head,
    listed: &Listed<'_>,
    kind: Kind,
    name: &HeaderName,
) -> Option<&'a str> {
    if listed.contains(name.as_str().as_bytes()) {
        return None;
    }
    text(head.first(kind, name)?)
}

/// `Via` with this hop's `token` after the head's own.
fn add_via(head: &impl Head, listed: &Listed<'_>, token: &str, out: &mut impl Out) {
    let prev = end_to_end_text(head, listed, Kind::Via, &VIA);
    out.add_written(&VIA, |v| write_via(prev, token, v));
}

/// The rules of a request on its way upstream, and what they need besides its head.
pub(crate) struct Forward<'a> {
    /// The client's connection.
    pub(crate) conn: ConnInfo,
    /// The protocol the client spoke, for `Via`.
    pub(crate) version: Version,
    /// The target's authority, when the request has one (HTTP/2's `:authority`, or an
    /// absolute-form target, whose `Host` RFC 9112 §3.2.2 says to ignore): `X-Forwarded-Host`
    /// takes it before `Host`, without user info.
    pub(crate) authority: Option<&'a str>,
    /// The request id it goes upstream with.
    pub(crate) request_id: &'a [u8],
    /// The identity headers, each with the claim it is set from (`[auth.jwt]
    /// claims_to_headers`).
    pub(crate) identity: &'a [(String, HeaderName)],
    /// The verified claims, on an authenticated route.
    pub(crate) claims: Option<&'a Claims>,
    /// The `traceparent` that names the gateway's own span of the request, when it has one
    /// ([`crate::spans`]): sent instead of the client's or a new one.
    pub(crate) traceparent: Option<&'a [u8]>,
}

impl Rule for Forward<'_> {
    #[inline]
    fn drops(&self, kind: Kind, name: &[u8], listed: &Listed<'_>) -> bool {
        kind.replaced()
            || kind.hop_by_hop()
            || self
                .identity
                .iter()
                .any(|(_, h)| name.eq_ignore_ascii_case(h.as_str().as_bytes()))
            || listed.contains(name)
    }

    /// In this order: the identity headers, `X-Forwarded-For`, `-Proto`, `-Host`, `Via`,
    /// `X-Request-Id` and `traceparent`. A header that `Connection` lists is not added from the
    /// client's value (nor an identity header at all). `Host` is not added: the upstream client
    /// sends the endpoint's.
    fn add(&self, head: &impl Head, listed: &Listed<'_>, out: &mut impl Out) {
        if let Some(claims) = self.claims {
            // Claims that are absent or not scalar set nothing.
            for (claim, header) in self.identity {
                let Some(value) = claims.text(claim) else {
                    continue;
                };
                if valid_value(value.as_bytes()) && !listed.contains(header.as_str().as_bytes()) {
                    out.add(header, value.as_bytes());
                }
            }
        }
        let forwarded = end_to_end_text(head, listed, Kind::XForwardedFor, &X_FORWARDED_FOR);
        out.add_written(&X_FORWARDED_FOR, |v| {
            write_forwarded_for(forwarded, self.conn.peer.ip(), v);
        });
        out.add_static(
            &X_FORWARDED_PROTO,
            if self.conn.tls { "https" } else { "http" },
        );
        let host = match self.authority {
            Some(authority) => authority.rsplit('@').next().map(str::as_bytes),
            None => head
                .first(Kind::Host, &HOST)
                .filter(|_| !listed.contains(HOST.as_str().as_bytes())),
        };
        if let Some(host) = host {
            out.add(&X_FORWARDED_HOST, host);
        }
        add_via(head, listed, via_token(self.version), out);
        out.add(&X_REQUEST_ID, self.request_id);
        if let Some(own) = self.traceparent {
            out.add(&TRACEPARENT, own);
            return;
        }
        let client = head
            .first(Kind::Traceparent, &TRACEPARENT)
            .filter(|_| !listed.contains(TRACEPARENT.as_str().as_bytes()));
        out.add(
            &TRACEPARENT,
            traceparent(client, self.request_id).as_bytes(),
        );
    }
}

/// The rules of a response on its way to the client, and what they need besides its head.
pub(crate) struct Relay<'a> {
    /// The protocol the upstream answered in, for `Via`.
    pub(crate) version: Version,
    /// The request's id, sent back unless the upstream sent one.
    pub(crate) request_id: &'a [u8],
    /// Whether the body goes on re-framed as chunked (the fast path's choice): its
    /// `Content-Length` goes and `Transfer-Encoding: chunked` comes.
    pub(crate) chunked: bool,
}

impl Rule for Relay<'_> {
    #[inline]
    fn drops(&self, kind: Kind, name: &[u8], listed: &Listed<'_>) -> bool {
        kind.hop_by_hop()
            || kind == Kind::Via
            || (self.chunked && kind == Kind::ContentLength)
            || listed.contains(name)
    }

    /// `Via`, the request id unless an end-to-end one is there, and `Transfer-Encoding: chunked`
    /// when re-framed.
    fn add(&self, head: &impl Head, listed: &Listed<'_>, out: &mut impl Out) {
        add_via(head, listed, via_token(self.version), out);
        let has_id = head.first(Kind::XRequestId, &X_REQUEST_ID).is_some()
            && !listed.contains(X_REQUEST_ID.as_str().as_bytes());
        if !has_id {
            out.add(&X_REQUEST_ID, self.request_id);
        }
        if self.chunked {
            out.add_static(&TRANSFER_ENCODING, "chunked");
        }
    }
}

impl Head for HeaderMap {
    fn first(&self, _: Kind, name: &HeaderName) -> Option<&[u8]> {
        self.get(name).map(HeaderValue::as_bytes)
    }

    fn listed(&self) -> Listed<'_> {
        Listed::new(self.get_all(CONNECTION).iter().map(HeaderValue::as_bytes))
    }
}

/// A rule's changes to a `HeaderMap`, gathered while the map is read and made after.
#[derive(Default)]
struct MapEdit {
    gone: Vec<HeaderName>,
    added: Vec<(HeaderName, HeaderValue)>,
}

impl MapEdit {
    fn push(
        &mut self,
        name: &HeaderName,
        value: Result<HeaderValue, http::header::InvalidHeaderValue>,
    ) {
        // Ids are new with every request: over HTTP/2 they go as literals that are never
        // indexed (see `RequestId`).
        if let Ok(mut value) = value {
            if name == X_REQUEST_ID {
                value.set_sensitive(true);
            }
            self.added.push((name.clone(), value));
        }
    }
}

impl Out for MapEdit {
    fn add(&mut self, name: &HeaderName, value: &[u8]) {
        self.push(name, HeaderValue::from_bytes(value));
    }

    fn add_static(&mut self, name: &HeaderName, value: &'static str) {
        self.push(name, Ok(HeaderValue::from_static(value)));
    }

    fn add_written(&mut self, name: &HeaderName, write: impl FnOnce(&mut Vec<u8>)) {
        let mut value = Vec::with_capacity(64);
        write(&mut value);
        self.push(name, HeaderValue::from_bytes(&value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("x-pms-forwarder-key", Kind::ForwarderKey),
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
        // RFC 9110 §7.6.1's list, and `Connection` itself.
        let hop_by_hop: Vec<&str> = known
            .iter()
            .filter(|(_, kind)| kind.hop_by_hop())
            .map(|(name, _)| *name)
            .collect();
        assert_eq!(
            hop_by_hop,
            [
                "te",
                "upgrade",
                "trailer",
                "connection",
                "keep-alive",
                "proxy-connection",
                "transfer-encoding"
            ]
        );
        assert_eq!(Kind::of(b""), Kind::Other);
        assert_eq!(Kind::of(b"x-userid"), Kind::Other);
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    /// The names left, sorted (removing a name moves others in a `HeaderMap`).
    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    const RELAY: Relay<'static> = Relay {
        version: Version::HTTP_11,
        request_id: b"the-id",
        chunked: false,
    };

    fn forward(tls: bool, authority: Option<&str>) -> Forward<'_> {
        Forward {
            conn: ConnInfo {
                peer: "127.0.0.1:40000".parse().unwrap(),
                local: "127.0.0.1:8080".parse().unwrap(),
                tls,
            },
            version: Version::HTTP_2,
            authority,
            request_id: b"the-id",
            identity: &[],
            claims: None,
            traceparent: None,
        }
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("x-other", "2"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-connection", "close"),
            ("trailer", "x"),
            ("content-type", "application/json"),
            ("x-keep", "yes"),
        ]);
        RELAY.apply(&mut h);
        assert_eq!(names(&h), ["content-type", "via", "x-keep", "x-request-id"]);
    }

    #[test]
    fn forwarded_headers_extend_or_replace_the_clients() {
        let mut h = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-proto", "https"),
            ("host", "gw.example:8080"),
            ("via", "1.1 edge"),
            ("x-request-id", "forged"),
            ("x-pms-forwarder-key", "for the gateway alone"),
        ]);
        forward(false, None).apply(&mut h);
        assert!(!h.contains_key("x-pms-forwarder-key"));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "gw.example:8080");
        assert_eq!(h["via"], "1.1 edge, 2 pms");
        assert_eq!(h["x-request-id"], "the-id");
        assert!(h["x-request-id"].is_sensitive());
        assert!(!h.contains_key(HOST), "the upstream client sets its own");

        // The target's authority comes before `Host`, without user info.
        let mut h = map(&[("x-forwarded-host", "forged"), ("host", "other")]);
        forward(true, Some("user@localhost:8443")).apply(&mut h);
        assert_eq!(h["x-forwarded-for"], "127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "localhost:8443");
    }

    #[test]
    fn empty_forwarding_values_are_none() {
        let mut h = map(&[("x-forwarded-for", ""), ("via", " ")]);
        forward(false, None).apply(&mut h);
        assert_eq!(h["x-forwarded-for"], "127.0.0.1");
        assert_eq!(h["via"], "2 pms");
        assert!(
            !h.contains_key(&X_FORWARDED_HOST),
            "no host, none forwarded"
        );
    }

    #[test]
    fn a_response_keeps_the_upstreams_request_id() {
        let mut h = map(&[("x-request-id", "upstream's"), ("date", "today")]);
        RELAY.apply(&mut h);
        assert_eq!(h["x-request-id"], "upstream's");
        assert!(h["date"].is_sensitive());
        let mut h = map(&[("connection", "x-request-id"), ("x-request-id", "u")]);
        RELAY.apply(&mut h);
        assert_eq!(
            h["x-request-id"], "the-id",
            "a hop-by-hop id is not the answer's"
        );
    }
}
