//! A streaming JSON→XML converter: serde_json's parser drives a `DeserializeSeed` that writes XML
//! straight into the output buffer as each JSON event arrives. No `Value` tree is built; memory is
//! the input plus the output.
//!
//! Mapping (both layouts):
//! - an object member `k: v` becomes an element named `k` holding `v`;
//! - strings, numbers and booleans become text (numbers as serde_json prints them);
//! - `null` becomes an empty element (`<k/>`);
//! - text is escaped (`&`, `<`, `>`); characters XML 1.0 cannot carry (controls other than tab,
//!   newline and carriage return) become U+FFFD;
//! - member names that are not XML names are made valid deterministically: every character that may
//!   not appear in a name becomes `_`; a name that may not start as it does (digit, `-`, `.`) or that
//!   starts with `xml` in any case gets a leading `_`; the empty name becomes `_`.
//!
//! Layouts differ on arrays and the root:
//! - [`XmlLayout::Generic`]: the document has one root element (configurable, default `root`); an
//!   array under `k` becomes repeated `<k>` elements; an array directly inside an array becomes one
//!   element whose children are `<item>`s.
//! - [`XmlLayout::BallerinaCompat`]: what the published Ballerina reports' converter produced: a
//!   top-level object has no root element (its members are siblings); an array under `k` becomes
//!   one `<k>` wrapping one `<item>` per entry. A top-level value that is not an object is wrapped
//!   in `<root>`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// How arrays and the root are laid out; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XmlLayout {
    /// One root element; arrays as repeated elements.
    Generic {
        /// The root element's name (a valid XML name).
        root: String,
    },
    /// The published Ballerina converter's bytes.
    BallerinaCompat,
}

/// Why a body could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSON at line {line} column {column}: {message}")]
pub struct ConvertError {
    /// 1-based line of the problem.
    pub line: usize,
    /// 1-based column of the problem.
    pub column: usize,
    /// What the parser said.
    pub message: String,
}

/// Converts one JSON document to XML.
///
/// # Errors
/// [`ConvertError`] with the parser's position when the input is not one valid JSON document.
pub fn convert(json: &[u8], layout: &XmlLayout) -> Result<Vec<u8>, ConvertError> {
    let mut out = Vec::with_capacity(json.len() + json.len() / 2 + 16);
    let mut de = serde_json::Deserializer::from_slice(json);
    let seed = match layout {
        XmlLayout::Generic { root } => Elem {
            out: &mut out,
            name: Some(root),
            in_array: true,
            compat: false,
        },
        XmlLayout::BallerinaCompat => Elem {
            out: &mut out,
            name: None,
            in_array: false,
            compat: true,
        },
    };
    seed.deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| {
            let text = e.to_string();
            // serde_json appends " at line L column C"; keep the position as fields instead.
            let message = text
                .rsplit_once(" at line ")
                .map_or(text.as_str(), |(m, _)| m)
                .to_string();
            ConvertError {
                line: e.line(),
                column: e.column(),
                message,
            }
        })?;
    Ok(out)
}

/// True when `name` is a valid XML element name as this converter emits them (no colon).
pub fn is_xml_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(is_name_start)
        && chars.all(is_name_char)
        && !name.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("xml"))
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (!c.is_ascii() && c.is_alphabetic())
}

fn is_name_char(c: char) -> bool {
    is_name_start(c)
        || c.is_ascii_digit()
        || c == '-'
        || c == '.'
        || (!c.is_ascii() && c.is_alphanumeric())
}

/// The XML name for a JSON member name; borrowed when it is already valid.
pub fn xml_name(name: &str) -> Cow<'_, str> {
    if is_xml_name(name) {
        return Cow::Borrowed(name);
    }
    let mut s = String::with_capacity(name.len() + 1);
    let needs_prefix = match name.chars().next() {
        None => true,
        Some(c) => !is_name_start(c) && is_name_char(c),
    } || name.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("xml"));
    if needs_prefix {
        s.push('_');
    }
    s.extend(name.chars().map(|c| if is_name_char(c) { c } else { '_' }));
    if s.is_empty() {
        s.push('_');
    }
    Cow::Owned(s)
}

fn push_text(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let rep: Option<&[u8]> = match c {
            '&' => Some(b"&amp;"),
            '<' => Some(b"&lt;"),
            '>' => Some(b"&gt;"),
            '\t' | '\n' | '\r' => None,
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                Some("\u{FFFD}".as_bytes())
            }
            _ => None,
        };
        if let Some(rep) = rep {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(rep);
            start = i + c.len_utf8();
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

fn open(out: &mut Vec<u8>, name: &str) {
    out.push(b'<');
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
}

fn close(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b"</");
    out.extend_from_slice(name.as_bytes());
    out.push(b'>');
}

/// "Write the next JSON value as an element called `name`".
///
/// `name == None` only at the top of the compat layout: an object there has no wrapper.
/// `in_array`: how an array value is laid out (see the module docs).
struct Elem<'o, 'n> {
    out: &'o mut Vec<u8>,
    name: Option<&'n str>,
    in_array: bool,
    compat: bool,
}

const ITEM: &str = "item";
const ROOT: &str = "root";

impl<'de> DeserializeSeed<'de> for Elem<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Elem<'_, '_> {
    fn scalar(self, text: &str) {
        let name = self.name.unwrap_or(ROOT);
        open(self.out, name);
        push_text(self.out, text);
        close(self.out, name);
    }
}

impl<'de> Visitor<'de> for Elem<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.scalar(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.scalar(v.to_string().as_str());
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.scalar(v.to_string().as_str());
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        let text = serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string());
        self.scalar(&text);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.scalar(v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        let name = self.name.unwrap_or(ROOT);
        self.out.push(b'<');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"/>");
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let name = self.name.unwrap_or(ROOT);
        let (wrap, child) = if self.compat || self.in_array {
            (true, ITEM)
        } else {
            (false, name)
        };
        if wrap {
            open(self.out, name);
        }
        while seq
            .next_element_seed(Elem {
                out: &mut *self.out,
                name: Some(child),
                in_array: wrap || !self.compat,
                compat: self.compat,
            })?
            .is_some()
        {}
        if wrap {
            close(self.out, name);
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if let Some(name) = self.name {
            open(self.out, name);
        }
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let name = xml_name(&key);
            map.next_value_seed(Elem {
                out: &mut *self.out,
                name: Some(&name),
                in_array: false,
                compat: self.compat,
            })?;
        }
        if let Some(name) = self.name {
            close(self.out, name);
        }
        Ok(())
    }
}

/// Reads a member name, borrowing from the input when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests;
