//! The trusted forwarder (`[auth.forwarder]`): a client that calls the gateway on behalf of the
//! people using it — the front office signs people in through the gateway's `/users/login` —
//! and names each person's address, so that the per-client rate limits count the person and not
//! the forwarder's one address.
//!
//! A forwarder proves itself with a key only it and the gateway hold, in `X-PMS-Forwarder-Key`,
//! and names the person in the last entry of `X-Forwarded-For`. Any other client's
//! `X-Forwarded-For` counts for nothing (anyone can write one), and a wrong key is refused
//! rather than ignored: a forwarder with a stale key would otherwise put everyone it serves in
//! one bucket again, unnoticed. The key header never goes upstream (see
//! `headers::rules`).
//!
//! Trust by key and not by address: in a cluster the front office's address changes with every
//! pod, and on one host every process shares loopback.

use std::net::IpAddr;

use http::header::{HeaderMap, HeaderName};
use ring::digest::{digest, SHA256};

use crate::headers::X_FORWARDED_FOR;
use crate::respond::GatewayError;

/// The header a forwarder's key comes in.
pub static FORWARDER_KEY: HeaderName = HeaderName::from_static("x-pms-forwarder-key");

/// Shortest key accepted: anything shorter is guessable.
pub const MIN_KEY_LEN: usize = 16;

/// The forwarder's key, kept as its SHA-256: a presented key is hashed and the digests compared,
/// so how long the comparison takes says nothing about the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Forwarder {
    digest: [u8; 32],
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Forwarder(..)")
    }
}

impl Forwarder {
    /// The forwarder holding `key`.
    pub fn new(key: &[u8]) -> Self {
        Self {
            digest: sha256(key),
        }
    }

    fn holds(&self, key: &[u8]) -> bool {
        sha256(key) == self.digest
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

/// Whom a request from `peer` with `headers` counts as: the person a trusted forwarder names,
/// else the peer itself. A forwarder that names nobody counts as itself.
///
/// # Errors
/// 403 `forwarder_refused` for a key that is not `trusted`'s (or any key when there is no
/// forwarder); 400 `bad_request` when a forwarder's last `X-Forwarded-For` entry is not an
/// address.
pub(crate) fn client(
    trusted: Option<&Forwarder>,
    peer: IpAddr,
    headers: &HeaderMap,
) -> Result<IpAddr, GatewayError> {
    let Some(key) = headers.get(&FORWARDER_KEY) else {
        return Ok(peer);
    };
    if !trusted.is_some_and(|f| f.holds(key.as_bytes())) {
        return Err(GatewayError::ForwarderRefused);
    }
    let Some(last) = headers.get_all(&X_FORWARDED_FOR).iter().next_back() else {
        return Ok(peer);
    };
    let named = last
        .to_str()
        .ok()
        .and_then(|v| v.rsplit(',').next())
        .map(str::trim)
        .unwrap_or_default();
    named.parse().map_err(|_| {
        GatewayError::BadRequest(format!(
            "the forwarder's X-Forwarded-For ends in {named:?}, which is not an address"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const KEY: &str = "a-forwarder-key-long-enough";

    fn headers(lines: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in lines {
            h.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        h
    }

    #[test]
    fn only_the_forwarder_names_the_client() {
        let peer: IpAddr = "10.0.0.9".parse().expect("an address");
        let f = Forwarder::new(KEY.as_bytes());
        // Anyone's X-Forwarded-For is their own business: the peer counts.
        let plain = headers(&[(&X_FORWARDED_FOR, "192.0.2.1")]);
        assert_eq!(client(Some(&f), peer, &plain), Ok(peer));
        // The forwarder's last entry counts, from the last line.
        let named = headers(&[
            (&X_FORWARDED_FOR, "198.51.100.7"),
            (&X_FORWARDED_FOR, "203.0.113.1, 2001:db8::5"),
            (&FORWARDER_KEY, KEY),
        ]);
        assert_eq!(
            client(Some(&f), peer, &named),
            Ok("2001:db8::5".parse().expect("an address"))
        );
        // A forwarder naming nobody counts as itself.
        assert_eq!(
            client(Some(&f), peer, &headers(&[(&FORWARDER_KEY, KEY)])),
            Ok(peer)
        );
    }

    #[test]
    fn a_wrong_key_or_a_made_up_address_is_refused() {
        let peer: IpAddr = "10.0.0.9".parse().expect("an address");
        let f = Forwarder::new(KEY.as_bytes());
        let wrong = headers(&[
            (&X_FORWARDED_FOR, "192.0.2.1"),
            (&FORWARDER_KEY, "a-forwarder-key-long-enougH"),
        ]);
        assert_eq!(
            client(Some(&f), peer, &wrong),
            Err(GatewayError::ForwarderRefused)
        );
        let any = headers(&[(&FORWARDER_KEY, KEY)]);
        assert_eq!(
            client(None, peer, &any),
            Err(GatewayError::ForwarderRefused),
            "no forwarder is trusted"
        );
        let garbled = headers(&[(&X_FORWARDED_FOR, "192.0.2.1, me"), (&FORWARDER_KEY, KEY)]);
        assert!(matches!(
            client(Some(&f), peer, &garbled),
            Err(GatewayError::BadRequest(m)) if m.contains("\"me\"")
        ));
    }

    #[test]
    fn the_key_does_not_show_in_debug_output() {
        assert_eq!(
            format!("{:?}", Forwarder::new(KEY.as_bytes())),
            "Forwarder(..)"
        );
    }
}
