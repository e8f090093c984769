//! Request heads as they go to an HTTP/1.1 upstream, written straight into bytes: the request
//! line, the endpoint's `Host` (put in, or changed for another endpoint, without rewriting the
//! rest), the header lines. (The `Content-Length` syntax both hops read is `pms_h1`'s.)

use bytes::BufMut;
use http::header::HeaderMap;
use http::Method;

/// Completes a head the fast path's `Head::write_upstream` wrote to the start of `out`: the `Host` line at
/// `at`, and the blank line.
pub(crate) fn insert_host(out: &mut Vec<u8>, at: usize, authority: &str) {
    const NAME: &[u8] = b"host: ";
    let line = NAME.len() + authority.len() + 2;
    let end = out.len();
    // Room for the line, then the header lines after `at` moved up in one copy (`Vec::splice`
    // with a chained iterator moved them byte by byte); the blank line goes last.
    out.resize(end + line, 0);
    out.copy_within(at..end, at + line);
    let (name, rest) = out[at..at + line].split_at_mut(NAME.len());
    name.copy_from_slice(NAME);
    let (value, crlf) = rest.split_at_mut(authority.len());
    value.copy_from_slice(authority.as_bytes());
    crlf.copy_from_slice(b"\r\n");
    out.put_slice(b"\r\n");
}

/// Points a request head written by [`insert_host`] or [`write_head`] (its `Host` line just
/// after the request line) at `authority` instead, to send it to another endpoint.
pub(crate) fn replace_host(out: &mut Vec<u8>, authority: &str) {
    const NAME: &[u8] = b"host: ";
    let Some(line) = out.windows(2).position(|w| w == b"\r\n") else {
        return;
    };
    let start = line + 2 + NAME.len();
    let Some(len) = out
        .get(start..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"\r\n"))
    else {
        return;
    };
    out.splice(start..start + len, authority.bytes());
}

/// A request head as sent upstream: request line, `Host` of the endpoint, then `headers`
/// (already rewritten, without `Host`) in order, and the blank line.
pub(crate) fn write_head(
    method: &Method,
    target: &str,
    authority: &str,
    headers: &HeaderMap,
    out: &mut Vec<u8>,
) {
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\nhost: ");
    out.put_slice(authority.as_bytes());
    out.put_slice(b"\r\n");
    write_headers(headers, out);
    out.put_slice(b"\r\n");
}

/// Header lines, `name: value\r\n` each.
pub(crate) fn write_headers(headers: &HeaderMap, out: &mut Vec<u8>) {
    for (name, value) in headers {
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_line_goes_where_it_is_asked_for() {
        let head = b"GET / HTTP/1.1\r\na: 1\r\nbb: 22\r\n";
        for authority in ["", "h", "127.0.0.1:9000", "[::1]:8443"] {
            for at in [0, 5, 16, head.len()] {
                let mut out = head.to_vec();
                insert_host(&mut out, at, authority);
                let mut expected = head[..at].to_vec();
                expected.extend_from_slice(format!("host: {authority}\r\n").as_bytes());
                expected.extend_from_slice(&head[at..]);
                expected.extend_from_slice(b"\r\n");
                assert_eq!(out, expected, "{authority:?} at {at}");
            }
        }
    }
}
