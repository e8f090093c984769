//! The chunked transfer coding (RFC 9112 §7.1) scanned byte by byte as it passes: where the
//! body ends (the last chunk and the trailer section), and where chunk data lies for a reader
//! that decodes it. Nothing is buffered: a relay passes the bytes on unchanged, a decoder copies
//! the data ranges out.

/// Finds where a chunked body ends while it is relayed unchanged: chunk-size lines (with
/// extensions), chunk data, the last chunk and the trailer section.
#[derive(Debug, Default)]
pub struct ChunkScanner {
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
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, &'static str> {
        self.feed_data(input, |_| {})
    }

    /// As [`feed`](Self::feed), and also reports where chunk data lies in `input`, range by
    /// range in order: decoding for a client that does not get the chunked coding itself.
    pub fn feed_data(
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
    pub fn is_done(&self) -> bool {
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

    #[test]
    fn data_ranges_decode_the_body_however_it_is_split() {
        let body = b"5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nx-t: 1\r\n\r\n";
        for step in [1, 2, 7, body.len()] {
            let mut scanner = ChunkScanner::default();
            let mut data = Vec::new();
            for piece in body.chunks(step) {
                let n = scanner
                    .feed_data(piece, |r| data.extend_from_slice(&piece[r]))
                    .expect("valid");
                assert_eq!(n, piece.len());
            }
            assert!(scanner.is_done());
            assert_eq!(data, b"hello0123456789", "step {step}");
        }
    }
}
