//! The published suite's ARRAY payload: `{"size":"<N>B","payload":["…",…]}`, exactly N bytes.
//!
//! Items are 10 characters drawn from the cycling alphabet `0-9A-Za-z` (the cycle continues across
//! items); full items are added while they fit, then one shorter item fills the rest, or the last
//! item is lengthened when less than an empty item's worth of room remains.

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Smallest payload the format allows.
pub const MIN_SIZE: usize = 50;

/// The ARRAY payload of exactly `n` bytes (`n` is raised to [`MIN_SIZE`]).
pub fn array(n: usize) -> Vec<u8> {
    let n = n.max(MIN_SIZE);
    let mut out = format!(r#"{{"size":"{n}B","payload":["#).into_bytes();
    let mut k = 0usize;
    let mut next = |out: &mut Vec<u8>, count: usize| {
        for _ in 0..count {
            out.push(ALPHABET[k % ALPHABET.len()]);
            k += 1;
        }
    };
    let closing = 2; // ]}
                     // First item: quotes plus up to 10 characters.
    let first = (n - out.len() - closing - 2).min(10);
    out.push(b'"');
    next(&mut out, first);
    out.push(b'"');
    loop {
        let remaining = n - out.len() - closing;
        if remaining >= 13 {
            out.extend_from_slice(b",\"");
            next(&mut out, 10);
            out.push(b'"');
        } else if remaining >= 4 {
            out.extend_from_slice(b",\"");
            next(&mut out, remaining - 3);
            out.push(b'"');
        } else {
            // Lengthen the last item by the 0–3 bytes left.
            out.pop();
            next(&mut out, remaining);
            out.push(b'"');
            break;
        }
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifty_bytes_matches_the_published_example() {
        assert_eq!(
            array(50),
            br#"{"size":"50B","payload":["0123456789","ABCDEFGH"]}"#.to_vec()
        );
    }

    #[test]
    fn every_size_is_exact_and_valid_json() {
        for n in (50..2100).chain([10_240, 102_400]) {
            let p = array(n);
            assert_eq!(p.len(), n, "{n}");
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
            assert_eq!(v["size"], format!("{n}B"));
        }
        let v: serde_json::Value = serde_json::from_slice(&array(1024)).unwrap();
        assert_eq!(v["payload"].as_array().unwrap().len(), 77);
    }
}
