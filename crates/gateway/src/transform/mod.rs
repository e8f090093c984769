//! Request-body transforms applied by routes. Today one: JSON→XML ([`json_to_xml`]).
//!
//! The proxy decides *when* to transform (route config) and enforces the size limit while reading;
//! this module only converts bytes to bytes.

pub mod json_to_xml;

pub use json_to_xml::{convert, is_xml_name, XmlLayout};
