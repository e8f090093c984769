//! How an HTTP/1.1 message's body is framed: the `Content-Length` syntax, and for a response,
//! where its body ends and whether its connection can carry another request (RFC 9112 §6.3 and
//! §9.3), gathered from its header lines one at a time as the reader meets them.

/// A `Content-Length` value: decimal digits only (no sign, no spaces, no list), without
/// overflow.
#[must_use]
pub fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (a `HEAD` request's answer, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// When the server closes the connection.
    UntilClose,
}

/// A response's framing and whether its connection may carry another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed {
    /// Where the body ends.
    pub framing: Framing,
    /// Neither side asked to close, and the body does not end with the connection.
    pub reusable: bool,
}

/// A response whose `Content-Length` is not a length, or whose lengths disagree: where its body
/// ends is unknown, and the connection cannot be read further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLength;

impl std::fmt::Display for BadLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid or conflicting Content-Length")
    }
}

impl std::error::Error for BadLength {}

/// What a response head's header lines say about its framing, fed line by line.
#[derive(Debug, Clone)]
pub struct ResponseFraming {
    /// The first `Content-Length` (`Some(None)` when it was not a length).
    length: Option<Option<u64>>,
    /// Every later `Content-Length` agreed with the first.
    lengths_agree: bool,
    /// Whether the last transfer coding is `chunked`, when there is a `Transfer-Encoding`.
    chunked: Option<bool>,
    close: bool,
    http10: bool,
}

impl ResponseFraming {
    /// Before the first header line of a response in HTTP/1.`minor`.
    #[must_use]
    pub fn new(minor: u8) -> Self {
        Self {
            length: None,
            lengths_agree: true,
            chunked: None,
            // HTTP/1.0 closes unless asked to keep the connection.
            close: minor == 0,
            http10: minor == 0,
        }
    }

    /// A header line, for a reader that has not classified its name itself.
    pub fn line(&mut self, name: &[u8], value: &[u8]) {
        if name.eq_ignore_ascii_case(b"content-length") {
            self.content_length(value);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding(value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            self.connection(value);
        }
    }

    /// A `Content-Length` line's value.
    pub fn content_length(&mut self, value: &[u8]) {
        let n = content_length(value);
        match self.length {
            None => self.length = Some(n),
            Some(first) => self.lengths_agree &= first == n,
        }
    }

    /// A `Transfer-Encoding` line's value: the last coding decides, and a later line continues
    /// the list.
    pub fn transfer_encoding(&mut self, value: &[u8]) {
        let last = value.rsplit(|b| *b == b',').next().unwrap_or_default();
        self.chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    }

    /// A `Connection` line's value: `close`, or in HTTP/1.0 `keep-alive`.
    pub fn connection(&mut self, value: &[u8]) {
        for token in value.split(|b| *b == b',') {
            let token = token.trim_ascii();
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if self.http10 && token.eq_ignore_ascii_case(b"keep-alive") {
                self.close = false;
            }
        }
    }

    /// The framing of a response with `status`, to a `HEAD` request or not.
    ///
    /// # Errors
    /// [`BadLength`] when the body is framed by a `Content-Length` that is not one length.
    pub fn finish(self, status: u16, head_request: bool) -> Result<Framed, BadLength> {
        let no_body =
            head_request || (100..200).contains(&status) || status == 204 || status == 304;
        let framing = if no_body {
            Framing::Empty
        } else if let Some(chunked) = self.chunked {
            // Transfer-Encoding overrides Content-Length; a coding other than chunked last
            // leaves the end to the connection's close.
            if chunked {
                Framing::Chunked
            } else {
                Framing::UntilClose
            }
        } else {
            match (self.length, self.lengths_agree) {
                (None, _) => Framing::UntilClose,
                (Some(Some(n)), true) => Framing::Length(n),
                (Some(_), _) => return Err(BadLength),
            }
        };
        Ok(Framed {
            framing,
            reusable: !self.close && framing != Framing::UntilClose,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The framing of a response with these lines.
    fn framed(
        minor: u8,
        status: u16,
        lines: &[(&str, &str)],
        head: bool,
    ) -> Result<Framed, BadLength> {
        let mut f = ResponseFraming::new(minor);
        for (name, value) in lines {
            f.line(name.as_bytes(), value.as_bytes());
        }
        f.finish(status, head)
    }

    fn ok(framing: Framing, reusable: bool) -> Result<Framed, BadLength> {
        Ok(Framed { framing, reusable })
    }

    #[test]
    fn content_lengths_are_digits_only() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"1234"), Some(1234));
        assert_eq!(content_length(b"007"), Some(7));
        assert_eq!(
            content_length(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b" 1",
            b"1 ",
            b"1,1",
            b"0x10",
            b"99999999999999999999",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cl = ("Content-Length", "12");
        assert_eq!(framed(1, 200, &[cl], false), ok(Framing::Length(12), true));
        let te = ("transfer-encoding", "gzip, chunked");
        assert_eq!(framed(1, 200, &[te], false), ok(Framing::Chunked, true));
        let both = [("transfer-encoding", "chunked"), ("content-length", "3")];
        assert_eq!(framed(1, 200, &both, false), ok(Framing::Chunked, true));
        let gzip = ("transfer-encoding", "gzip");
        assert_eq!(
            framed(1, 200, &[gzip], false),
            ok(Framing::UntilClose, false)
        );
        let split = [
            ("transfer-encoding", "chunked"),
            ("transfer-encoding", "gzip"),
        ];
        assert_eq!(
            framed(1, 200, &split, false),
            ok(Framing::UntilClose, false)
        );
        assert_eq!(framed(1, 200, &[], false), ok(Framing::UntilClose, false));
        assert_eq!(framed(1, 200, &[cl], true), ok(Framing::Empty, true));
        for status in [204, 304, 103, 100] {
            assert_eq!(
                framed(1, status, &[cl], false),
                ok(Framing::Empty, true),
                "{status}"
            );
        }
    }

    #[test]
    fn the_connection_closes_when_either_version_or_header_says_so() {
        let cl = ("content-length", "1");
        let close = ("Connection", "keep-alive, Close");
        assert_eq!(
            framed(1, 200, &[cl, close], false),
            ok(Framing::Length(1), false)
        );
        assert_eq!(framed(0, 200, &[cl], false), ok(Framing::Length(1), false));
        let keep = ("connection", "keep-alive");
        assert_eq!(
            framed(0, 200, &[cl, keep], false),
            ok(Framing::Length(1), true)
        );
        assert_eq!(
            framed(1, 200, &[cl, keep, close], false),
            ok(Framing::Length(1), false)
        );
    }

    #[test]
    fn lengths_that_are_not_one_length_are_errors() {
        for lines in [
            &[("content-length", "1"), ("content-length", "2")][..],
            &[("content-length", "x")],
            &[("content-length", "+5")],
            &[("content-length", "5"), ("content-length", "x")],
        ] {
            assert_eq!(framed(1, 200, lines, false), Err(BadLength), "{lines:?}");
        }
        let twice = [("content-length", "5"), ("content-length", "5")];
        assert_eq!(framed(1, 200, &twice, false), ok(Framing::Length(5), true));
    }
}
