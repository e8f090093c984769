//! W3C Trace Context's `traceparent` header (<https://www.w3.org/TR/trace-context/>): reading
//! the trace id a request carries, and writing one for a request that starts a trace. The
//! gateway passes the trace on, so that one request can be followed through the gateway's and
//! every service's logs, and by a tracing system the services export their spans to.

/// The header's name.
pub const TRACEPARENT: &str = "traceparent";

/// Length of a version-00 value: `00-` 32 hex `-` 16 hex `-` 2 hex.
pub const LEN: usize = 55;

/// The trace id (32 lowercase hex digits) of a `traceparent` value, when the value is valid:
/// version 00 exactly as the specification draws it, or a later version that starts the same
/// way (its extra fields after a `-` are ignored, as the specification asks); not version `ff`;
/// neither id all zeros.
pub fn trace_id(value: &[u8]) -> Option<&str> {
    let head = value.get(..LEN)?;
    let version = &head[..2];
    let well_formed = hex(version)
        && version != b"ff"
        && head[2] == b'-'
        && hex(&head[3..35])
        && head[35] == b'-'
        && hex(&head[36..52])
        && head[52] == b'-'
        && hex(&head[53..55]);
    let fits = if version == b"00" {
        value.len() == LEN
    } else {
        value.get(LEN).is_none_or(|&b| b == b'-')
    };
    let nonzero = |ids: &[u8]| ids.iter().any(|&b| b != b'0');
    if !(well_formed && fits && nonzero(&head[3..35]) && nonzero(&head[36..52])) {
        return None;
    }
    std::str::from_utf8(&head[3..35]).ok()
}

/// What a valid `traceparent` value names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// The trace.
    pub trace_id: u128,
    /// The sender's span, the parent of the receiver's.
    pub span_id: u64,
    /// Trace flags; bit 0: sampled.
    pub flags: u8,
}

/// The parent a `traceparent` value names, when the value is valid (see [`trace_id`]).
pub fn parent(value: &[u8]) -> Option<Parent> {
    let trace = trace_id(value)?;
    // Valid: ASCII hex digits where these are read.
    let text = std::str::from_utf8(value.get(..LEN)?).ok()?;
    Some(Parent {
        trace_id: u128::from_str_radix(trace, 16).ok()?,
        span_id: u64::from_str_radix(&text[36..52], 16).ok()?,
        flags: u8::from_str_radix(&text[53..55], 16).ok()?,
    })
}

/// The remote parent a `traceparent` value names, as an OpenTelemetry context for a span of the
/// receiver's; `None` when the value is not a valid one.
pub fn remote_parent(value: &[u8]) -> Option<opentelemetry::Context> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId};
    let parent = parent(value)?;
    let context = SpanContext::new(
        TraceId::from(parent.trace_id),
        SpanId::from(parent.span_id),
        TraceFlags::new(parent.flags),
        true,
        opentelemetry::trace::TraceState::default(),
    );
    Some(opentelemetry::Context::new().with_remote_span_context(context))
}

/// A version-00 value for trace `trace_id` with parent `parent_id` (the span of whoever sends
/// it), flags `01`: sampled. The gateway starts a trace for every request that comes without
/// one, and the services record their spans of it when an OTLP exporter is configured (their
/// `OTEL_TRACES_SAMPLER` decides how many).
pub fn write(trace_id: u128, parent_id: u64) -> [u8; LEN] {
    write_flags(trace_id, parent_id, 1)
}

/// [`write()`] with `flags` as they are.
pub fn write_flags(trace_id: u128, parent_id: u64, flags: u8) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[..3].copy_from_slice(b"00-");
    put_hex(&mut out[3..35], trace_id);
    out[35] = b'-';
    put_hex(&mut out[36..52], u128::from(parent_id));
    out[52] = b'-';
    put_hex(&mut out[53..55], u128::from(flags));
    out
}

/// Lowercase hex digits, as the specification requires.
fn hex(b: &[u8]) -> bool {
    b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// `n`'s low `out.len()` hex digits, lowercase.
fn put_hex(out: &mut [u8], mut n: u128) {
    for slot in out.iter_mut().rev() {
        *slot = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_example_is_read() {
        assert_eq!(
            trace_id(EXAMPLE.as_bytes()),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
    }

    #[test]
    fn malformed_values_are_not() {
        for bad in [
            "",
            &EXAMPLE[..54],
            &format!("{EXAMPLE}-extra"), // version 00 has nothing after the flags
            &EXAMPLE.replace("4bf9", "4BF9"),
            &EXAMPLE.replace("00-4bf9", "ff-4bf9"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            &EXAMPLE.replace('-', "_"),
            &EXAMPLE.replace("-01", "-0x"),
        ] {
            assert_eq!(trace_id(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn later_versions_are_read_as_far_as_version_00_goes() {
        let v1 = EXAMPLE.replacen("00", "01", 1);
        assert!(trace_id(v1.as_bytes()).is_some());
        assert!(trace_id(format!("{v1}-more").as_bytes()).is_some());
        assert!(trace_id(format!("{v1}more").as_bytes()).is_none());
    }

    #[test]
    fn a_parent_is_read_with_its_ids_and_flags() {
        assert_eq!(
            parent(EXAMPLE.as_bytes()),
            Some(Parent {
                trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                span_id: 0x00f0_67aa_0ba9_02b7,
                flags: 1,
            })
        );
        let unsampled = write_flags(7, 9, 0);
        assert_eq!(
            parent(&unsampled),
            Some(Parent {
                trace_id: 7,
                span_id: 9,
                flags: 0,
            })
        );
        assert_eq!(
            parent(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(parent(b"garbage"), None);
    }

    #[test]
    fn a_traceparent_becomes_a_remote_parent_with_its_ids_and_flags() {
        use opentelemetry::trace::TraceContextExt as _;
        let cx = remote_parent(EXAMPLE.as_bytes()).expect("valid");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        let not_sampled = remote_parent(&write_flags(7, 9, 0)).expect("valid");
        assert!(!not_sampled.span().span_context().is_sampled());
        assert!(remote_parent(b"garbage").is_none());
    }

    #[test]
    fn written_values_read_back() {
        let v = write(
            0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            0x00f0_67aa_0ba9_02b7,
        );
        assert_eq!(
            std::str::from_utf8(&v).unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(trace_id(&v), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    }
}
