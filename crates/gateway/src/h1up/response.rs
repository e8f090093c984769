//! Response heads from upstreams, parsed in place: status, version, header lines (into
//! [`Fields`]) and how the body is framed, by `pms_h1`'s rules (RFC 9112 §6.3): none (HEAD, 1xx,
//! 204, 304), `Content-Length`, chunked (relayed as it comes, its end found by
//! [`pms_h1::ChunkScanner`]), or until the upstream closes (re-framed as chunked for the client,
//! so its connection can stay open).

use http::StatusCode;
pub(crate) use pms_h1::Framing;
use pms_h1::{Framed, ResponseFraming};

use super::fields::Fields;
use crate::headers::rules::Kind;

/// Most header lines an upstream response may have.
const MAX_HEADERS: usize = 100;

/// A parsed upstream response head; its header lines are in the [`Fields`] it was parsed with.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub(crate) minor: u8,
    /// Bytes of the head, blank line included.
    pub(crate) len: usize,
    pub(crate) framing: Framing,
    /// The connection may carry another request after this response.
    pub(crate) reusable: bool,
}

impl Head {
    /// The protocol the upstream answered in.
    pub(crate) fn version(&self) -> http::Version {
        if self.minor == 0 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        }
    }
}

/// What the start of the buffer holds.
#[derive(Debug)]
pub(crate) enum Parsed {
    Head(Head),
    Partial,
    /// Not a valid HTTP/1.x response head.
    Invalid(String),
}

/// Parses the response head at the start of `buf`, its header lines into `fields`;
/// `head_request` says the request was HEAD (the response then has no body whatever its headers
/// say).
pub(crate) fn parse(buf: &[u8], head_request: bool, fields: &mut Fields) -> Parsed {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut storage);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(e) => return Parsed::Invalid(format!("invalid response head: {e}")),
    };
    let minor = resp.version.unwrap_or(1);
    let Some(status) = resp.code.and_then(|c| StatusCode::from_u16(c).ok()) else {
        return Parsed::Invalid("invalid status code".into());
    };
    fields.clear();
    let mut framing = ResponseFraming::new(minor);
    for h in resp.headers.iter() {
        let kind = Kind::of(h.name.as_bytes());
        match kind {
            Kind::ContentLength => framing.content_length(h.value),
            Kind::TransferEncoding => framing.transfer_encoding(h.value),
            Kind::Connection => framing.connection(h.value),
            _ => {}
        }
        fields.push(buf, h, kind);
    }
    match framing.finish(status.as_u16(), head_request) {
        Ok(Framed { framing, reusable }) => Parsed::Head(Head {
            status,
            minor,
            len,
            framing,
            reusable,
        }),
        Err(bad) => Parsed::Invalid(bad.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str, head_request: bool) -> Head {
        match parse(raw.as_bytes(), head_request, &mut Fields::default()) {
            Parsed::Head(h) => h,
            other => panic!("{raw:?}: {other:?}"),
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n", false);
        assert_eq!((h.framing, h.reusable), (Framing::Length(12), true));
        let h = head(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            false,
        );
        assert_eq!((h.framing, h.reusable), (Framing::Chunked, true));
        let h = head(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
            false,
        );
        assert_eq!(h.framing, Framing::Chunked);
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", false);
        assert_eq!((h.framing, h.reusable), (Framing::UntilClose, false));
        let h = head("HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!((h.framing, h.reusable), (Framing::UntilClose, false));
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n", true);
        assert_eq!(h.framing, Framing::Empty);
        for status in ["204 No Content", "304 Not Modified", "103 Early Hints"] {
            let h = head(
                &format!("HTTP/1.1 {status}\r\ncontent-length: 5\r\n\r\n"),
                false,
            );
            assert_eq!(h.framing, Framing::Empty, "{status}");
        }
        let h = head(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\n",
            false,
        );
        assert!(!h.reusable);
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n", false);
        assert!(!h.reusable);
        let h = head(
            "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n",
            false,
        );
        assert!(h.reusable);
    }

    #[test]
    fn bad_heads_are_errors() {
        for raw in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            "HTTP/2 200\r\n\r\n",
            "garbage\r\n\r\n",
            "HTTP/1.1 200 OK\r\nx-a: a\x7fb\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert!(
                matches!(
                    parse(raw.as_bytes(), false, &mut Fields::default()),
                    Parsed::Invalid(_)
                ),
                "{raw:?}"
            );
        }
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\n", false, &mut Fields::default()),
            Parsed::Partial
        ));
    }
}
