//! HPACK decoding (RFC 7541) for the HTTP/2 hot path: response header blocks, with the dynamic
//! table the server's encoder fills, and Huffman-coded strings. The Huffman code is canonical, so
//! it is rebuilt at compile time from the code length of each symbol (appendix B) and decoded by
//! comparing the next bits against the first code of each length: no per-call tables, no hashing.
//! Encoding needs none of this: the hot path's request blocks are built once from static-table
//! references and plain literals ([`crate::http2::header_block`]).

use std::collections::VecDeque;

/// Why a header block could not be decoded (a connection error: the table is out of step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block ends inside a field.
    #[error("header block truncated")]
    Truncated,
    /// An index that is in neither table.
    #[error("header index {0} out of range")]
    Index(usize),
    /// A Huffman string that does not decode (bad padding, or the EOS symbol).
    #[error("invalid Huffman string")]
    Huffman,
    /// A table size update above the size allowed, or after the first field.
    #[error("invalid dynamic table size update")]
    SizeUpdate,
    /// An integer too large to be meant.
    #[error("integer overflow")]
    Overflow,
}

/// The static table (appendix A); index 1 is the first entry.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Huffman code length of each symbol, 0–255 and EOS (256), from appendix B.
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The end-of-string symbol, which may not appear in a string.
const EOS: u16 = 256;
/// Longest code.
const MAX_LEN: usize = 30;
/// Shortest code.
const MIN_LEN: usize = 5;

/// The canonical code in a form to decode with: per length, the first code, how many codes
/// there are, and where their symbols start in `symbols` (sorted by length, then symbol).
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        symbols: [0; 257],
    };
    let mut s = 0;
    while s < 257 {
        c.count[CODE_LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let (mut len, mut code, mut at) = (1, 0u32, 0u16);
    while len <= MAX_LEN {
        code = (code + c.count[len - 1]) << 1;
        c.first[len] = code;
        c.offset[len] = at;
        at += c.count[len] as u16;
        len += 1;
    }
    let mut next = c.offset;
    let mut s = 0;
    while s < 257 {
        let len = CODE_LENGTHS[s] as usize;
        c.symbols[next[len] as usize] = s as u16;
        next[len] += 1;
        s += 1;
    }
    c
}

static CODE: Canonical = canonical();

/// Decodes a Huffman-coded string, appending it to `out`.
fn huffman(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    // `acc` holds the next `bits` bits, left-aligned.
    let (mut acc, mut bits, mut i) = (0u64, 0usize, 0);
    loop {
        while bits <= 56 && i < src.len() {
            acc |= u64::from(src[i]) << (56 - bits);
            bits += 8;
            i += 1;
        }
        let mut len = MIN_LEN;
        let symbol = loop {
            if len > bits || len > MAX_LEN {
                break None;
            }
            let code = (acc >> (64 - len)) as u32;
            let d = code.wrapping_sub(CODE.first[len]);
            if d < CODE.count[len] {
                break Some(CODE.symbols[CODE.offset[len] as usize + d as usize]);
            }
            len += 1;
        };
        match symbol {
            Some(EOS) => return Err(HpackError::Huffman),
            Some(s) => {
                out.push(s as u8);
                acc <<= len;
                bits -= len;
            }
            // The end: at most 7 bits of padding, all ones (the start of EOS).
            None if i == src.len() && bits < 8 => {
                let ones = if bits == 0 {
                    0
                } else {
                    u64::MAX << (64 - bits)
                };
                return if acc == ones {
                    Ok(())
                } else {
                    Err(HpackError::Huffman)
                };
            }
            None => return Err(HpackError::Huffman),
        }
    }
}

/// Reads an integer with an `n`-bit prefix at `src[*at]` (§5.1).
fn integer(src: &[u8], at: &mut usize, n: u8) -> Result<usize, HpackError> {
    let mask = (1usize << n) - 1;
    let first = *src.get(*at).ok_or(HpackError::Truncated)?;
    *at += 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let b = *src.get(*at).ok_or(HpackError::Truncated)?;
        *at += 1;
        if shift > 28 {
            return Err(HpackError::Overflow);
        }
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Reads a string literal (§5.2): raw, borrowed from `src`, or Huffman-decoded into `scratch`.
fn string<'a>(
    src: &'a [u8],
    at: &mut usize,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], HpackError> {
    let huffman_coded = src.get(*at).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(src, at, 7)?;
    let raw = src.get(*at..*at + len).ok_or(HpackError::Truncated)?;
    *at += len;
    if !huffman_coded {
        return Ok(raw);
    }
    scratch.clear();
    huffman(raw, scratch)?;
    Ok(scratch)
}

/// One dynamic table entry: name and value in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }
    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }
    /// The size the table counts (§4.1).
    fn size(&self) -> usize {
        self.bytes.len() + 32
    }
}

/// The decoding side of one connection's HPACK state.
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    /// The table's current limit, as the encoder last set it.
    max: usize,
    /// The most the encoder may set (this side's SETTINGS_HEADER_TABLE_SIZE).
    allowed: usize,
}

impl Decoder {
    /// A decoder whose table the encoder may grow to `allowed` bytes.
    pub fn new(allowed: usize) -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max: allowed,
            allowed,
        }
    }

    /// Decodes a whole header block, calling `field` with each name and value in order.
    ///
    /// # Errors
    /// [`HpackError`] for a block that does not decode; the table is then out of step with
    /// the encoder's, and the connection has to end.
    pub fn decode(
        &mut self,
        src: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let (mut at, mut fields) = (0, 0);
        let (mut name_buf, mut value_buf) = (Vec::new(), Vec::new());
        while at < src.len() {
            let first = src[at];
            if first & 0x80 != 0 {
                let index = integer(src, &mut at, 7)?;
                let (name, value) = self.get(index)?;
                field(name, value);
            } else if first & 0xe0 == 0x20 {
                let size = integer(src, &mut at, 5)?;
                if fields > 0 || size > self.allowed {
                    return Err(HpackError::SizeUpdate);
                }
                self.max = size;
                self.evict(0);
                continue;
            } else {
                // Literal: with incremental indexing (01), without (0000) or never (0001).
                let indexing = first & 0xc0 == 0x40;
                let index = integer(src, &mut at, if indexing { 6 } else { 4 })?;
                let name: &[u8] = if index == 0 {
                    string(src, &mut at, &mut name_buf)?
                } else {
                    name_buf.clear();
                    name_buf.extend_from_slice(self.get(index)?.0);
                    &name_buf
                };
                let value = string(src, &mut at, &mut value_buf)?;
                field(name, value);
                if indexing {
                    let mut bytes = Vec::with_capacity(name.len() + value.len());
                    bytes.extend_from_slice(name);
                    bytes.extend_from_slice(value);
                    self.insert(Entry {
                        bytes: bytes.into_boxed_slice(),
                        name_len: name.len(),
                    });
                }
            }
            fields += 1;
        }
        Ok(())
    }

    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::Index(0)),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self
                .table
                .get(index - 62)
                .map(|e| (e.name(), e.value()))
                .ok_or(HpackError::Index(index)),
        }
    }

    /// Drops the oldest entries until `room` more bytes fit under the limit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
    }

    fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        // An entry bigger than the whole table empties it and is not added (§4.4).
        self.evict(size);
        if size <= self.max {
            self.size += size;
            self.table.push_front(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decode(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(&hex(block), |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ));
        })
        .unwrap();
        out
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_rfcs_requests_with_huffman_coding_decode() {
        // RFC 7541 C.4: three requests on one connection, the table carrying entries over.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ])
        );
        assert_eq!(d.size, 57);
        assert_eq!(
            decode(&mut d, "8286 84be 5886 a8eb 1064 9cbf"),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ])
        );
        assert_eq!(d.size, 110);
        assert_eq!(
            decode(
                &mut d,
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"
            ),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ])
        );
        assert_eq!(d.size, 164);
    }

    #[test]
    fn the_rfcs_responses_evict_from_a_small_table() {
        // RFC 7541 C.6: responses with Huffman coding into a 256-byte table.
        let mut d = Decoder::new(256);
        assert_eq!(
            decode(
                &mut d,
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3"
            ),
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.size, 222);
        assert_eq!(
            decode(&mut d, "4883 640e ffc1 c0bf"),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        assert_eq!(d.size, 222);
        assert_eq!(
            d.table.len(),
            4,
            "':status: 302' was evicted for ':status: 307'"
        );
    }

    #[test]
    fn bad_blocks_are_errors_not_panics() {
        let mut d = Decoder::new(4096);
        let mut bad = |block: &[u8]| d.decode(block, |_, _| {}).unwrap_err();
        assert_eq!(bad(&[0x80]), HpackError::Index(0));
        assert_eq!(
            bad(&[0xbe]),
            HpackError::Index(62),
            "an empty dynamic table"
        );
        assert_eq!(bad(&[0x41, 0x05, b'a']), HpackError::Truncated);
        assert_eq!(
            bad(&[0x3f, 0xe2, 0x1f]),
            HpackError::SizeUpdate,
            "4097: above 4096"
        );
        assert_eq!(bad(&[0x82, 0x20]), HpackError::SizeUpdate, "after a field");
        assert_eq!(
            bad(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            HpackError::Overflow
        );
        // Padding that is not all ones, and padding longer than 7 bits.
        assert_eq!(bad(&[0x01, 0x81, 0x00]), HpackError::Huffman);
        assert_eq!(bad(&[0x01, 0x82, 0xff, 0xff]), HpackError::Huffman);
    }

    #[test]
    fn every_byte_value_survives_a_huffman_round_trip() {
        // Encode with the canonical code rebuilt independently here, bit by bit.
        let mut codes = [(0u32, 0u8); 257];
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODE_LENGTHS[s], s));
        let (mut code, mut prev) = (0u32, CODE_LENGTHS[order[0]]);
        for (k, &s) in order.iter().enumerate() {
            let len = CODE_LENGTHS[s];
            if k > 0 {
                code = (code + 1) << (len - prev);
            }
            codes[s] = (code, len);
            prev = len;
        }
        assert_eq!(codes[256], ((1 << 30) - 1, 30), "EOS is thirty ones");
        let input: Vec<u8> = (0..=255u8)
            .chain(b"Mon, 23 Nov 2026".iter().copied())
            .collect();
        let (mut bits, mut n, mut out) = (0u64, 0u32, Vec::new());
        for &b in &input {
            let (c, l) = codes[usize::from(b)];
            for i in (0..l).rev() {
                bits = (bits << 1) | u64::from((c >> i) & 1);
                n += 1;
                if n == 8 {
                    out.push(bits as u8);
                    (bits, n) = (0, 0);
                }
            }
        }
        if n > 0 {
            out.push(((bits << (8 - n)) as u8) | (0xff >> n));
        }
        let mut decoded = Vec::new();
        huffman(&out, &mut decoded).unwrap();
        assert_eq!(decoded, input);
    }
}
