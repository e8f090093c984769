//! Response heads from upstreams on the fast path, and how their bodies are framed (RFC 9112
//! §6.3): none (HEAD, 1xx, 204, 304), `Content-Length`, chunked (relayed as it comes, with a
//! scanner that finds the end), or until the upstream closes (re-framed as chunked for the
//! client, so its connection can stay open).

use http::StatusCode;

use super::fields::Fields;
use super::head::content_length;
use crate::headers::rules::Kind;

/// Most header lines an upstream response may have.
const MAX_HEADERS: usize = 100;

/// How the body after the head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

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
    // The first Content-Length, and whether all agree with it.
    let mut length = None;
    let mut lengths_agree = true;
    let mut chunked = None;
    let mut close = minor == 0;
    for h in resp.headers.iter() {
        let kind = Kind::of(h.name.as_bytes());
        match kind {
            Kind::ContentLength => {
                let n = content_length(h.value);
                match length {
                    None => length = Some(n),
                    Some(first) => lengths_agree &= first == n,
                }
            }
            Kind::TransferEncoding => {
                // The last coding decides; a later header line continues the list.
                let last = h.value.rsplit(|b| *b == b',').next().unwrap_or_default();
                chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            Kind::Connection => {
                for t in h.value.split(|b| *b == b',') {
                    let t = t.trim_ascii();
                    if t.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if minor == 0 && t.eq_ignore_ascii_case(b"keep-alive") {
                        close = false;
                    }
                }
            }
            _ => {}
        }
        fields.push(buf, h, kind);
    }
    let no_body = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        Framing::Empty
    } else if let Some(chunked) = chunked {
        // Transfer-Encoding overrides Content-Length (and a response with both is suspect:
        // the length is dropped on the way out).
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(first) = length {
        match (first, lengths_agree) {
            (Some(n), true) => Framing::Length(n),
            _ => return Parsed::Invalid("invalid or conflicting Content-Length".into()),
        }
    } else {
        Framing::UntilClose
    };
    Parsed::Head(Head {
        status,
        minor,
        len,
        framing,
        reusable: !close && framing != Framing::UntilClose,
    })
}

/// Finds where a chunked body ends while it is relayed unchanged: chunk-size lines (with
/// extensions), chunk data, the last chunk and the trailer section.
#[derive(Debug, Default)]
pub(crate) struct ChunkScanner {
    state: State,
    /// Digits of the chunk size being read.
    size: u64,
    digits: u8,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    #[default]
    Size,
    /// After the size: extensions up to CR.
    Extension,
    /// Expecting LF after the size line.
    SizeLf,
    /// Chunk data, this many bytes left.
    Data(u64),
    /// CR after chunk data.
    DataCr,
    /// LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final blank line).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// LF ending a trailer line.
    TrailerLf,
    /// LF ending the final blank line.
    EndLf,
    /// The body is complete.
    Done,
}

impl ChunkScanner {
    /// Consumes `input` up to the end of the body; returns how many bytes belong to it, or an
    /// error for bad framing. `is_done` tells whether the end was reached.
    pub(crate) fn feed(&mut self, input: &[u8]) -> Result<usize, &'static str> {
        self.feed_data(input, |_| {})
    }

    /// As [`feed`](Self::feed), and also reports where chunk data lies in `input`, range by
    /// range in order: decoding for a client that does not get the chunked coding itself.
    pub(crate) fn feed_data(
        &mut self,
        input: &[u8],
        mut data: impl FnMut(std::ops::Range<usize>),
    ) -> Result<usize, &'static str> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                State::Size => match hex(b) {
                    Some(d) => {
                        self.digits += 1;
                        if self.digits > 15 {
                            return Err("chunk size too long");
                        }
                        self.size = self.size * 16 + u64::from(d);
                        State::Size
                    }
                    None if self.digits == 0 => return Err("missing chunk size"),
                    None if b == b'\r' => State::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => State::Extension,
                    None => return Err("invalid chunk size"),
                },
                State::Extension => match b {
                    b'\r' => State::SizeLf,
                    b'\n' => return Err("bare LF in chunk extension"),
                    _ => State::Extension,
                },
                State::SizeLf => {
                    if b != b'\n' {
                        return Err("expected LF after chunk size");
                    }
                    let size = std::mem::take(&mut self.size);
                    self.digits = 0;
                    if size == 0 {
                        State::TrailerStart
                    } else {
                        State::Data(size)
                    }
                }
                State::Data(left) => {
                    let n = left.min((input.len() - i) as u64);
                    // `n` fits in usize: it is at most input.len() - i.
                    data(i..i + n as usize);
                    i += n as usize;
                    self.state = if left == n {
                        State::DataCr
                    } else {
                        State::Data(left - n)
                    };
                    continue;
                }
                State::DataCr if b == b'\r' => State::DataLf,
                State::DataLf if b == b'\n' => State::Size,
                State::DataCr | State::DataLf => return Err("expected CRLF after chunk data"),
                State::TrailerStart => match b {
                    b'\r' => State::EndLf,
                    b'\n' => return Err("bare LF in trailer"),
                    _ => State::Trailer,
                },
                State::Trailer => match b {
                    b'\r' => State::TrailerLf,
                    b'\n' => return Err("bare LF in trailer"),
                    _ => State::Trailer,
                },
                State::TrailerLf if b == b'\n' => State::TrailerStart,
                State::TrailerLf => return Err("expected LF in trailer"),
                State::EndLf if b == b'\n' => {
                    self.state = State::Done;
                    return Ok(i + 1);
                }
                State::EndLf => return Err("expected LF at the end of the body"),
                State::Done => return Ok(i),
            };
            i += 1;
        }
        Ok(i)
    }

    /// Whether the last chunk and trailers have been seen.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
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

    #[test]
    fn the_scanner_finds_the_end_byte_by_byte_and_all_at_once() {
        let body = b"5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nx-t: 1\r\n\r\nNEXT";
        let end = body.len() - 4;
        let mut all = ChunkScanner::default();
        assert_eq!(all.feed(body), Ok(end));
        assert!(all.is_done());
        let mut bytewise = ChunkScanner::default();
        let mut used = 0;
        for b in body.chunks(1) {
            used += bytewise.feed(b).unwrap();
            if bytewise.is_done() {
                break;
            }
        }
        assert_eq!(used, end);
        let mut empty = ChunkScanner::default();
        assert_eq!(empty.feed(b"0\r\n\r\n"), Ok(5));
        assert!(empty.is_done());
    }

    #[test]
    fn the_scanner_rejects_bad_framing() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\nhello",
            b"5\r\nhelloX",
            b"ffffffffffffffff1\r\n",
            b"0\r\nx\n",
            b"0\r\n\rX",
        ] {
            assert!(ChunkScanner::default().feed(bad).is_err(), "{bad:?}");
        }
        let mut partial = ChunkScanner::default();
        assert_eq!(partial.feed(b"5\r\nhel"), Ok(6));
        assert!(!partial.is_done());
    }
}
