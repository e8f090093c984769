//! Header lines of a head parsed in place — where each name and value lies in the read buffer,
//! and what the gateway makes of the name — and the rewritten lines the fast path sends on. The
//! rules are [`headers::rules`](crate::headers::rules), the same that hyper's path applies to a
//! `HeaderMap`; here they run line by line, with no allocation per header on the path every
//! relayed request takes. The fast path's `rules_match` tests run both on the same heads and
//! compare.
//!
//! Each name is classified once, when its head is parsed ([`Kind`]); the rules then compare one
//! byte per line. Lines that go on unchanged are copied as they came, runs of neighbouring lines
//! in one copy: the client's spelling of a name is kept (header names are case-insensitive, RFC
//! 9110 §5.1), as nginx and HAProxy keep it.

use std::ops::Range;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::headers::rules::{Head, Kind, Listed, Out, Rule};

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
pub(crate) struct Fields {
    lines: Vec<Field>,
    /// The kinds among them, one bit each ([`Kind::bit`]): most heads have no `Connection`,
    /// `Via` or `X-Forwarded-For`, and looking for one then scans nothing.
    kinds: u16,
}

impl Fields {
    pub(crate) fn clear(&mut self) {
        self.lines.clear();
        self.kinds = 0;
    }

    /// Records `h`, which httparse found in `buf`, of kind `kind` (see [`Kind::of`]).
    pub(crate) fn push(&mut self, buf: &[u8], h: &httparse::Header<'_>, kind: Kind) {
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
    pub(crate) fn iter<'a>(
        &'a self,
        buf: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.lines
            .iter()
            .map(|f| (&buf[f.name.clone()], &buf[f.value.clone()]))
    }

    /// The first value of a line of `kind`, if the head has one.
    pub(crate) fn first<'a>(&self, buf: &'a [u8], kind: Kind) -> Option<&'a [u8]> {
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
    pub(crate) fn get<'a>(&'a self, buf: &'a [u8], name: &str) -> Option<&'a [u8]> {
        self.iter(buf)
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// The lines as a `HeaderMap`, for hyper. httparse takes the same names (tokens) and values
    /// (no control characters but tab) as the `http` crate, so none is refused here; one that
    /// were would be left out.
    pub(crate) fn to_header_map(&self, buf: &[u8]) -> HeaderMap {
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

/// Where `part`, a slice of `buf` (as httparse gives them), lies in it. Anything else would be a
/// bug: tests stop on it, and a release build gets an empty range rather than a slice out of
/// bounds.
pub(crate) fn within(buf: &[u8], part: &[u8]) -> Range<usize> {
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

/// A head's lines with the buffer they were parsed from, as the rules read them.
struct Lines<'a> {
    fields: &'a Fields,
    buf: &'a [u8],
}

impl Head for Lines<'_> {
    fn first(&self, kind: Kind, _: &HeaderName) -> Option<&[u8]> {
        self.fields.first(self.buf, kind)
    }

    /// Nothing, and no allocation, without a `Connection` line.
    fn listed(&self) -> Listed<'_> {
        if !self.fields.has(Kind::Connection) {
            return Listed::default();
        }
        Listed::new(
            self.fields
                .lines
                .iter()
                .filter(|f| f.kind == Kind::Connection)
                .map(|f| &self.buf[f.value.clone()]),
        )
    }
}

/// Header lines written out: `name: value` and CRLF each.
impl Out for Vec<u8> {
    fn add(&mut self, name: &HeaderName, value: &[u8]) {
        own_line(name.as_str().as_bytes(), value, self);
    }

    fn add_written(&mut self, name: &HeaderName, write: impl FnOnce(&mut Vec<u8>)) {
        self.extend_from_slice(name.as_str().as_bytes());
        self.extend_from_slice(b": ");
        write(self);
        self.extend_from_slice(b"\r\n");
    }
}

/// Writes a head's header lines as `rule` has them go on: the lines it leaves, as they came,
/// then the lines it adds. (`Host` aside, for a request: the caller sends the endpoint's.)
pub(crate) fn write(fields: &Fields, buf: &[u8], rule: &impl Rule, out: &mut Vec<u8>) {
    let lines = Lines { fields, buf };
    let listed = lines.listed();
    let mut kept = Kept::new(buf);
    for f in &fields.lines {
        if !rule.drops(f.kind, &buf[f.name.clone()], &listed) {
            kept.keep(f, out);
        }
    }
    kept.flush(out);
    rule.add(&lines, &listed, out);
}
