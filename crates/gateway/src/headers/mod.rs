//! Headers on the way through: the names the gateway sets, the values it reads and writes
//! (`Host`, `X-Forwarded-For`, `Via`), request ids and `traceparent`, and in `rules` the one
//! set of rules both front ends apply to what goes upstream and back. It must not decide routing
//! or authentication; identity headers come from the `jwt` module.

use http::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use http::Version;

pub(crate) mod rules;

/// The request id header, read from clients, sent upstream and returned.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// W3C Trace Context's request header.
pub static TRACEPARENT: HeaderName = HeaderName::from_static(pms_net::trace::TRACEPARENT);
/// The client addresses a request came through, the gateway's peer last.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `http` or `https`: how the client reached the gateway.
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// The `Host` the client asked the gateway for.
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Longest client-supplied request id that is kept.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The names a `Connection` value lists, trimmed, as sent. None when the value is not
/// [`text`].
pub fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    text(value)
        .map(str::as_bytes)
        .unwrap_or_default()
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// A header value as text: only when every byte is visible ASCII, space or tab (what
/// `HeaderValue::to_str` accepts), so both proxy paths read the same values.
pub fn text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// Whether a value may be sent as a header value at all (what `HeaderValue::from_bytes`
/// accepts: no control characters but tab).
pub fn valid_value(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b >= b' ' && b != 0x7f))
}

/// Whether `value` is a `Host` a request may carry: `host[:port]` as RFC 3986 spells them (a
/// name, an IPv4 address or a bracketed IPv6 literal), not empty, no user info, nothing else.
/// Upstreams build links from `X-Forwarded-Host`; a space, a slash or an `@` in it is an attack,
/// not a host.
pub fn valid_host(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|&b| HOST_BYTES[usize::from(b)])
}

/// The bytes [`valid_host`] takes, as a table: it runs on every request, and the same test as a
/// chain of comparisons took about 160 instructions for a 15-byte `Host` (callgrind).
const HOST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < table.len() {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
                    | b':'
                    | b'['
                    | b']'
            );
        i += 1;
    }
    table
};

/// Checks the `Host` header of a request hyper's server read (RFC 9112 §3.2): an HTTP/1.1
/// request must have one, and no request may have two or an invalid one. The error says which.
pub fn check_host(version: http::Version, headers: &HeaderMap) -> Result<(), String> {
    let mut hosts = headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if version == http::Version::HTTP_11 => {
            Err("an HTTP/1.1 request needs a Host header".into())
        }
        (None, _) => Ok(()),
        (Some(_), Some(_)) => Err("more than one Host header".into()),
        (Some(host), None) if valid_host(host.as_bytes()) => Ok(()),
        (Some(host), None) => Err(format!(
            "Host {:?} is not a host[:port]",
            String::from_utf8_lossy(host.as_bytes())
        )),
    }
}

/// The `Via` token for a received protocol version (RFC 9110 §7.6.3).
pub fn via_token(version: Version) -> &'static str {
    match version {
        Version::HTTP_2 => "2 pms",
        Version::HTTP_10 => "1.0 pms",
        Version::HTTP_3 => "3 pms",
        _ => "1.1 pms",
    }
}

/// The `Via` value after this hop: the earlier one's text, if any (an empty one is none), then
/// `token`.
pub fn write_via(prev: Option<&str>, token: &str, out: &mut Vec<u8>) {
    if let Some(prev) = prev.filter(|p| !p.trim().is_empty()) {
        out.extend_from_slice(prev.as_bytes());
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(token.as_bytes());
}

/// The `X-Forwarded-For` value after this hop: the client's text, if any (an empty one is
/// none), then the peer.
pub fn write_forwarded_for(prev: Option<&str>, peer: std::net::IpAddr, out: &mut Vec<u8>) {
    if let Some(prev) = prev.filter(|p| !p.trim().is_empty()) {
        out.extend_from_slice(prev.as_bytes());
        out.extend_from_slice(b", ");
    }
    write_ip(peer, out);
}

/// `ip` as text, as its `Display` writes it. IPv4 without the formatting machinery, which
/// took about 700 instructions per proxied request.
fn write_ip(ip: std::net::IpAddr, out: &mut Vec<u8>) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if octet >= 100 {
                    out.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    out.push(b'0' + octet / 10 % 10);
                }
                out.push(b'0' + octet % 10);
            }
        }
        std::net::IpAddr::V6(v6) => {
            use std::io::Write as _;
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{v6}");
        }
    }
}

/// The client's request id if it is acceptable (1–128 characters of `A-Za-z0-9-_.:/+=`),
/// otherwise a fresh one.
///
/// The value is marked sensitive: over HTTP/2 it is sent as a literal that is never indexed.
/// Each id is new, so indexing it only fills the HPACK table, and the encoder then compares every
/// later id with every one still there (with `Date`, see `rules::Relay::apply`, 8 % of the
/// gateway's CPU under h2load before, 3 % after).
pub fn request_id(headers: &HeaderMap) -> HeaderValue {
    let mut id = match headers.get(&X_REQUEST_ID) {
        Some(v) if acceptable_request_id(v.as_bytes()) => v.clone(),
        _ => fresh_request_id(),
    };
    id.set_sensitive(true);
    id
}

/// A request id held inline, for the fast path: the client's `X-Request-Id` value when
/// acceptable, else a fresh one, as [`request_id`] picks them, without the allocation a
/// `HeaderValue` makes (a malloc and a free on every request). Error answers and logs take
/// [`RequestId::to_header_value`].
#[derive(Clone)]
pub struct RequestId {
    len: usize,
    bytes: [u8; MAX_REQUEST_ID_LEN],
}

impl RequestId {
    /// The client's id (its first `X-Request-Id` value, if any) when acceptable, else a new one.
    pub fn from_client(client: Option<&[u8]>) -> Self {
        let mut id = RequestId {
            len: 0,
            bytes: [0; MAX_REQUEST_ID_LEN],
        };
        match client.filter(|v| acceptable_request_id(v)) {
            Some(v) => {
                id.bytes[..v.len()].copy_from_slice(v);
                id.len = v.len();
            }
            None => {
                if let Some(fresh) = id.bytes.first_chunk_mut() {
                    fresh_id(fresh);
                    id.len = FRESH_LEN;
                }
            }
        }
        id
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The id as text (it is ASCII either way).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("-")
    }

    /// As [`request_id`] gives it: a sensitive header value.
    pub fn to_header_value(&self) -> HeaderValue {
        let mut id = HeaderValue::from_bytes(self.as_bytes())
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        id.set_sensitive(true);
        id
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// Length of a fresh id.
const FRESH_LEN: usize = 32;
const _: () = assert!(FRESH_LEN <= MAX_REQUEST_ID_LEN);

/// 1–128 characters of `A-Za-z0-9-_.:/+=`.
fn acceptable_request_id(b: &[u8]) -> bool {
    !b.is_empty()
        && b.len() <= MAX_REQUEST_ID_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.:/+=".contains(c))
}

/// The `traceparent` a request goes upstream with, on either path.
pub enum Traceparent<'a> {
    /// The client's, valid: the trace it started goes on.
    Kept(&'a [u8]),
    /// A new trace, started by the gateway.
    Started([u8; pms_net::trace::LEN]),
}

impl Traceparent<'_> {
    /// The header value.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Traceparent::Kept(v) => v,
            Traceparent::Started(v) => v,
        }
    }
}

/// The client's `traceparent` (its first value) when valid; otherwise a new trace whose id is
/// the request id when that is 32 lowercase hex digits, as the gateway's own ids are (so a
/// request can be found in every log by the id its client got back), or else a fresh one. The
/// parent id is the gateway's hop: different for every request.
pub fn traceparent<'a>(client: Option<&'a [u8]>, request_id: &[u8]) -> Traceparent<'a> {
    if let Some(v) = client.filter(|v| pms_net::trace::trace_id(v).is_some()) {
        return Traceparent::Kept(v);
    }
    let trace = hex_id(request_id).unwrap_or_else(|| {
        let mut fresh = [0; FRESH_LEN];
        fresh_id(&mut fresh);
        hex_id(&fresh).unwrap_or(1)
    });
    // The halves of a fresh id are the process's random prefix and the request's number.
    let parent = ((trace >> 64) as u64 ^ trace as u64).max(1);
    Traceparent::Started(pms_net::trace::write(trace, parent))
}

/// A 32-digit lowercase hex id as a number, when it is one and not zero.
fn hex_id(id: &[u8]) -> Option<u128> {
    if id.len() != 32 || !id.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let text = std::str::from_utf8(id).ok()?;
    u128::from_str_radix(text, 16).ok().filter(|&n| n != 0)
}

/// A fresh id as a header value: see [`fresh_id`].
fn fresh_request_id() -> HeaderValue {
    let mut id = [0; FRESH_LEN];
    fresh_id(&mut id);
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// Writes a new id: 16 hex digits of a per-process random prefix, then 16 of a per-thread
/// sequence whose top 24 bits are the thread's own number. Unique within the process by
/// construction (for the first 2^24 threads that make ids, 2^40 ids each) and across processes by
/// the prefix, with no syscall per request (a v4 UUID would read the OS random source every time)
/// and no counter shared between threads (whose cache line would move between cores on every
/// request).
fn fresh_id(buf: &mut [u8; FRESH_LEN]) {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<[u8; 16]> = OnceLock::new();
    static THREADS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: Cell<u64> = Cell::new(
            (THREADS.fetch_add(1, Ordering::Relaxed) & 0xff_ffff) << 40
        );
    }
    let prefix = PREFIX.get_or_init(|| {
        let mut hex = [0; 16];
        hex_u64(uuid::Uuid::new_v4().as_u64_pair().0, &mut hex);
        hex
    });
    let n = NEXT.with(|next| {
        let n = next.get();
        next.set(n.wrapping_add(1));
        n
    });
    buf[..16].copy_from_slice(prefix);
    hex_u64(n, &mut buf[16..]);
}

fn hex_u64(mut v: u64, out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for slot in out.iter_mut().rev() {
        *slot = HEX[(v & 0xf) as usize];
        v >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_names_addresses_and_ports_only() {
        for ok in [
            "gw",
            "gw:8080",
            "a.b-c_d~e",
            "192.0.2.1:80",
            "[::1]",
            "[::1]:8443",
            "x%41y",
        ] {
            assert!(valid_host(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "user@gw",
            "gw/x",
            "gw?q",
            "gw#f",
            "gw\t",
            "é.example",
            "a\"b",
        ] {
            assert!(!valid_host(bad.as_bytes()), "{bad:?}");
        }
        let mut h = HeaderMap::new();
        assert!(check_host(http::Version::HTTP_11, &h).is_err());
        assert!(check_host(http::Version::HTTP_10, &h).is_ok());
        assert!(check_host(http::Version::HTTP_2, &h).is_ok());
        h.append(HOST, HeaderValue::from_static("gw"));
        assert!(check_host(http::Version::HTTP_11, &h).is_ok());
        h.append(HOST, HeaderValue::from_static("gw"));
        assert!(check_host(http::Version::HTTP_2, &h).is_err());
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let mut addrs: Vec<IpAddr> = Vec::new();
        for v in 0..=255u8 {
            for at in 0..4 {
                let mut octets = [1, 20, 255, 0];
                octets[at] = v;
                addrs.push(Ipv4Addr::from(octets).into());
            }
        }
        addrs.extend([
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv4Addr::new(192, 0, 2, 33).to_ipv6_mapped()),
            "2001:db8::8a2e:370:7334".parse().unwrap(),
        ]);
        for ip in addrs {
            let mut out = b"x, ".to_vec();
            write_ip(ip, &mut out);
            assert_eq!(out, format!("x, {ip}").into_bytes(), "{ip}");
        }
    }

    #[test]
    fn request_ids_are_kept_only_when_sane() {
        let mut h = HeaderMap::new();
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("abc-123"));
        assert_eq!(request_id(&h), "abc-123");
        for bad in ["", "has space", "<script>", &"x".repeat(129)] {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(bad) {
                h.insert(X_REQUEST_ID.clone(), v);
            }
            let id = request_id(&h);
            assert_eq!(id.len(), 32, "{bad:?} replaced by a fresh id");
        }
        let (a, b) = (request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
        assert_ne!(a, b, "fresh ids differ");
        assert_eq!(
            a.as_bytes()[..16],
            b.as_bytes()[..16],
            "same process prefix"
        );
    }

    #[test]
    fn inline_ids_keep_what_header_value_ids_keep() {
        let longest = [b'a'; MAX_REQUEST_ID_LEN];
        for kept in [&b"x"[..], b"a-b_c.d:e/f+g=", &longest] {
            let id = RequestId::from_client(Some(kept));
            assert_eq!(id.as_bytes(), kept);
            let mut h = HeaderMap::new();
            h.insert(&X_REQUEST_ID, HeaderValue::from_bytes(kept).unwrap());
            assert_eq!(id.to_header_value(), request_id(&h));
        }
        let too_long = [b'a'; MAX_REQUEST_ID_LEN + 1];
        for replaced in [
            None,
            Some(&b""[..]),
            Some(b"a b"),
            Some(b"\xc3\xa9"),
            Some(&too_long),
        ] {
            let id = RequestId::from_client(replaced);
            assert_eq!(id.as_bytes().len(), 32, "{replaced:?}");
            assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()), "{id:?}");
        }
    }

    #[test]
    fn fresh_ids_are_unique_across_threads() {
        let ids = |n| move || (0..n).map(|_| fresh_request_id()).collect::<Vec<_>>();
        let threads: Vec<_> = (0..4).map(|_| std::thread::spawn(ids(500))).collect();
        let mut all = ids(500)();
        for t in threads {
            all.extend(t.join().expect("thread"));
        }
        assert!(all.iter().all(|id| id.len() == 32
            && id
                .as_bytes()
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))));
        let count = all.len();
        all.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        all.dedup();
        assert_eq!(all.len(), count, "no id made twice");
    }
}
