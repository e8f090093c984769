//! Closing a connection the client may still be writing to, after an error answer sent before
//! its request was all read.
//!
//! Closing a socket with unread data makes the kernel reset the connection, and a client that is
//! still sending then gets the reset instead of the answer. So the server shuts down its sending
//! side first (the caller does that) and then reads and drops what comes, briefly and boundedly,
//! as nginx's lingering close does.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Most bytes [`linger`] reads.
pub const LINGER_BYTES: usize = 256 * 1024;
/// Longest [`linger`] waits.
pub const LINGER_TIME: Duration = Duration::from_secs(1);
/// Read size.
const CHUNK: usize = 8 * 1024;

/// Reads and drops what `io` still delivers, until the client closes, a read fails, or
/// [`LINGER_BYTES`] or [`LINGER_TIME`] is reached. `buf` is scratch space (cleared first).
pub async fn linger<IO>(io: &mut IO, buf: &mut BytesMut)
where
    IO: AsyncRead + Unpin,
{
    let mut left = LINGER_BYTES;
    let drain = async {
        while left > 0 {
            buf.clear();
            buf.reserve(CHUNK);
            match io.read_buf(buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}
