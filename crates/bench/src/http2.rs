//! The HTTP/2 hot path: a connection that carries one stream at a time, read and written by the
//! task that sends on it. The request's header block is HPACK-encoded once per run (static-table
//! references and literals that never touch the dynamic table, so it stays valid on every
//! connection); each request copies it behind a frame header with the next stream id. Responses
//! are read frame by frame into one buffer the connection keeps, their header blocks decoded by
//! [`crate::hpack`].
//!
//! The `h2` crate, which the multiplexed open model still uses, keeps a 16 KiB write buffer, an
//! 8 KiB read buffer and a 4 KiB header buffer per connection and runs every connection as its
//! own task: at 10,000 connections that is most of a generator's memory, and each request costs
//! two task wake-ups more. h2load (nghttp2) needs neither, and a generator measured against it
//! cannot either.
//!
//! What the connection does besides its own stream: it answers SETTINGS and PING, gives back
//! flow-control credit in WINDOW_UPDATE frames once half a window is used, honours the server's
//! windows and frame size when sending a body, and on GOAWAY stops opening streams. A request
//! the server did not process (a stream id above GOAWAY's last one, or REFUSED_STREAM) comes back
//! as [`SendError::Unprocessed`], so it can be sent again on a new connection. Protocol errors
//! end the connection (without a GOAWAY of its own: the tool is a client that goes away).

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, Method, StatusCode, Version};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::h1::Io;
use crate::stats::ErrorKind;
use crate::target::{Answer, SendError};

/// The client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Receive window opened per stream: 2 MiB, as hyper's client opens it, so that the server is
/// never held back waiting for window updates.
pub const STREAM_WINDOW: u32 = 2 << 20;
/// Receive window opened for the whole connection: 5 MiB.
pub const CONN_WINDOW: u32 = 5 << 20;
/// Every window's size before SETTINGS or WINDOW_UPDATE change it.
const DEFAULT_WINDOW: u32 = 65_535;
/// Largest frame payload accepted, and the largest sent: the protocol's default, which this
/// client never raises and every server must accept.
const MAX_FRAME: usize = 16_384;
/// Largest response header block accepted (all its CONTINUATION frames together).
const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// Highest stream id a client may open.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;
/// Bytes of a frame's head: length, type, flags, stream.
const FRAME_HEAD: usize = 9;

/// Frame types (RFC 9113 §6).
mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers this client sends or reads.
mod setting {
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
}

/// RST_STREAM codes this client sends or reads.
const NO_ERROR: u32 = 0x0;
const REFUSED_STREAM: u32 = 0x7;

/// Appends a frame header.
fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends a WINDOW_UPDATE frame.
fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends an HPACK integer with an `n`-bit prefix, the first byte's high bits set to `high`
/// (RFC 7541 §5.1).
fn hpack_int(out: &mut Vec<u8>, high: u8, n: u8, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(high | value as u8);
        return;
    }
    out.push(high | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// Appends an HPACK string literal, without Huffman coding.
fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends a field as a literal that is not indexed, its name from static-table entry `name`
/// (or literal when 0).
fn hpack_literal(out: &mut Vec<u8>, name_index: usize, name: &[u8], value: &[u8]) {
    hpack_int(out, 0, 4, name_index);
    if name_index == 0 {
        hpack_str(out, name);
    }
    hpack_str(out, value);
}

/// The request's header block, encoded once: pseudo-headers from the static table where it has
/// them (RFC 7541 appendix A), the rest as literals that leave the dynamic table alone.
pub fn header_block(
    method: &Method,
    https: bool,
    authority: &str,
    path: &str,
    headers: &HeaderMap,
) -> Bytes {
    let mut out = Vec::with_capacity(64 + authority.len() + path.len());
    match *method {
        Method::GET => out.push(0x80 | 2),
        Method::POST => out.push(0x80 | 3),
        _ => hpack_literal(&mut out, 2, b"", method.as_str().as_bytes()),
    }
    out.push(0x80 | if https { 7 } else { 6 });
    hpack_literal(&mut out, 1, b"", authority.as_bytes());
    if path == "/" {
        out.push(0x80 | 4);
    } else {
        hpack_literal(&mut out, 4, b"", path.as_bytes());
    }
    for (name, value) in headers {
        if connection_specific(name, value) {
            continue;
        }
        hpack_literal(&mut out, 0, name.as_str().as_bytes(), value.as_bytes());
    }
    Bytes::from(out)
}

/// Headers HTTP/2 forbids (RFC 9113 §8.2.2), which HTTP/1.1 habits put in a request: left out,
/// as hyper's client leaves them out, rather than sent for the server to reject.
fn connection_specific(name: &http::HeaderName, value: &http::HeaderValue) -> bool {
    use http::header::{CONNECTION, TE, TRANSFER_ENCODING, UPGRADE};
    *name == CONNECTION
        || *name == TRANSFER_ENCODING
        || *name == UPGRADE
        || name == "keep-alive"
        || name == "proxy-connection"
        || (*name == TE && value != "trailers")
}

/// One HTTP/2 connection, one stream at a time.
pub struct Connection {
    io: Box<dyn Io>,
    /// Bytes read and not yet taken as frames.
    buf: BytesMut,
    /// Control frames (and the preface) waiting to go out with the next write.
    control: Vec<u8>,
    hpack: crate::hpack::Decoder,
    /// The id the next stream gets.
    next_id: u32,
    /// False while a request is in flight (one cut off midway leaves the connection unusable)
    /// and after a failure.
    usable: bool,
    /// GOAWAY received, or stream ids used up: no new streams.
    draining: bool,
    /// The server's SETTINGS_MAX_FRAME_SIZE.
    peer_max_frame: usize,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE.
    peer_initial_window: i64,
    /// What the connection may still send.
    send_window: i64,
    /// What the server may still send on the connection.
    recv_window: i64,
    /// Received DATA not yet given back in a WINDOW_UPDATE.
    unacked: u32,
}

/// A response being received on the connection's one stream.
struct Stream {
    id: u32,
    /// When the request began, for the time to its response head.
    began: Instant,
    /// Body bytes still to send.
    upload: Bytes,
    send_window: i64,
    recv_window: i64,
    unacked: u32,
    status: Option<StatusCode>,
    /// Bytes of this stream's frames received (HEADERS, CONTINUATION, DATA; frame heads,
    /// HPACK blocks, padding and bodies): what came over the wire for the request.
    wire_in: u64,
    /// Bytes of this stream's frames sent.
    wire_out: u64,
    ttfb: std::time::Duration,
    body: Body,
    /// END_STREAM received.
    ended: bool,
}

/// A response body in one piece (most are one DATA frame, kept as it came) or joined from
/// several.
#[derive(Default)]
pub(crate) struct Body {
    first: Bytes,
    joined: Option<BytesMut>,
}

impl Body {
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        match &mut self.joined {
            Some(all) => all.extend_from_slice(&chunk),
            None if self.first.is_empty() => self.first = chunk,
            None => {
                let mut all = BytesMut::with_capacity(self.first.len() + chunk.len());
                all.extend_from_slice(&self.first);
                all.extend_from_slice(&chunk);
                self.joined = Some(all);
            }
        }
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        self.joined.map_or(self.first, BytesMut::freeze)
    }
}

/// A header block whose CONTINUATION frames are still coming.
struct Pending {
    stream: u32,
    block: Vec<u8>,
    end_stream: bool,
}

/// A frame taken from the read buffer.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Bytes,
}

/// The big-endian `u32` a frame payload starts with (callers check the length first).
fn be_u32(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[0], p[1], p[2], p[3]])
}

/// A protocol violation by the server: the connection ends.
fn broken<T>() -> Result<T, SendError> {
    Err(SendError::Failed(ErrorKind::Reset))
}

/// Strips the padding (and, for HEADERS, the priority fields) from a frame's payload.
fn unpad(frame: &Frame, priority: bool) -> Result<Bytes, SendError> {
    let mut p = frame.payload.clone();
    let mut pad = 0;
    if frame.flags & flag::PADDED != 0 {
        if p.is_empty() {
            return broken();
        }
        pad = usize::from(p.get_u8());
    }
    if priority && frame.flags & flag::PRIORITY != 0 {
        if p.len() < 5 {
            return broken();
        }
        p.advance(5);
    }
    if pad > p.len() {
        return broken();
    }
    p.truncate(p.len() - pad);
    Ok(p)
}

impl Connection {
    /// Wraps an established stream; the preface and the client's SETTINGS go out with the
    /// first request.
    pub fn new(io: Box<dyn Io>) -> Self {
        let mut control = Vec::with_capacity(PREFACE.len() + 9 + 12 + 13);
        control.extend_from_slice(PREFACE);
        frame_head(&mut control, 12, kind::SETTINGS, 0, 0);
        control.extend_from_slice(&setting::ENABLE_PUSH.to_be_bytes());
        control.extend_from_slice(&0u32.to_be_bytes());
        control.extend_from_slice(&setting::INITIAL_WINDOW_SIZE.to_be_bytes());
        control.extend_from_slice(&STREAM_WINDOW.to_be_bytes());
        window_update(&mut control, 0, CONN_WINDOW - DEFAULT_WINDOW);
        // The table size this client allows: the protocol's default, which its SETTINGS leave.
        let hpack = crate::hpack::Decoder::new(4096);
        Self {
            io,
            buf: BytesMut::new(),
            control,
            hpack,
            next_id: 1,
            usable: true,
            draining: false,
            peer_max_frame: MAX_FRAME,
            peer_initial_window: i64::from(DEFAULT_WINDOW),
            send_window: i64::from(DEFAULT_WINDOW),
            recv_window: i64::from(CONN_WINDOW),
            unacked: 0,
        }
    }

    /// Whether another request may be sent.
    pub fn is_open(&self) -> bool {
        self.usable && !self.draining
    }

    /// Sends a request (its prepared header block and body) on a new stream and reads the
    /// whole response; returns it and the bytes of the stream's frames sent. Both directions
    /// count what went over the wire for the stream: frame heads, HPACK blocks and bodies
    /// (connection-level frames, such as SETTINGS and WINDOW_UPDATE, belong to no request).
    ///
    /// # Errors
    /// [`SendError::Unprocessed`] when the server refused the stream without processing it;
    /// [`SendError::Failed`] with [`ErrorKind::Reset`] when the connection or the stream
    /// failed. The connection is then no longer open.
    pub async fn send(&mut self, block: &Bytes, body: &Bytes) -> Result<(Answer, u64), SendError> {
        if !self.is_open() {
            return Err(SendError::Unprocessed);
        }
        self.usable = false;
        let answer = self.exchange(block, body).await?;
        self.usable = true;
        Ok(answer)
    }

    async fn exchange(&mut self, block: &Bytes, body: &Bytes) -> Result<(Answer, u64), SendError> {
        let mut st = Stream {
            id: self.next_id,
            began: Instant::now(),
            upload: body.clone(),
            send_window: self.peer_initial_window,
            recv_window: i64::from(STREAM_WINDOW),
            unacked: 0,
            status: None,
            wire_in: 0,
            wire_out: 0,
            ttfb: std::time::Duration::ZERO,
            body: Body::default(),
            ended: false,
        };
        // Frames that came in after the previous response (a GOAWAY, SETTINGS, a PING): dealt
        // with before the new stream counts on them.
        let mut pending = None;
        while let Some(frame) = self.buffered_frame()? {
            self.handle(frame, &mut st, &mut pending)?;
        }
        if self.draining {
            return Err(SendError::Unprocessed);
        }
        self.next_id += 2;
        if self.next_id > MAX_STREAM_ID {
            self.draining = true;
        }
        self.write_request(&mut st, block).await?;
        while !st.ended {
            let frame = self.read_frame().await?;
            self.handle(frame, &mut st, &mut pending)?;
            if !st.upload.is_empty() && !st.ended {
                self.push_data(&mut st);
            }
        }
        if !st.upload.is_empty() {
            // The server answered before taking the whole body: the stream is over for us too.
            frame_head(&mut self.control, 4, kind::RST_STREAM, 0, st.id);
            self.control.extend_from_slice(&NO_ERROR.to_be_bytes());
        }
        if self.unacked >= CONN_WINDOW / 2 {
            self.give_back();
        }
        self.flush_control().await?;
        let status = st.status.ok_or(SendError::Failed(ErrorKind::Reset))?;
        let body = st.body.into_bytes();
        let answer = Answer {
            status,
            version: Version::HTTP_2,
            bytes: st.wire_in,
            body,
            ttfb: st.ttfb,
        };
        Ok((answer, st.wire_out))
    }

    /// Writes the pending control frames, the request's HEADERS (and CONTINUATION) frames and
    /// as much of its body as the windows allow, in one write.
    async fn write_request(&mut self, st: &mut Stream, block: &Bytes) -> Result<(), SendError> {
        self.control.reserve(block.len() + st.upload.len() + 32);
        let end_stream = if st.upload.is_empty() {
            flag::END_STREAM
        } else {
            0
        };
        let mut chunks = block.chunks(MAX_FRAME).peekable();
        let mut first = true;
        loop {
            let chunk = chunks.next().unwrap_or(&[]);
            let last = chunks.peek().is_none();
            let end_headers = if last { flag::END_HEADERS } else { 0 };
            let (kind, flags) = if first {
                (kind::HEADERS, end_stream | end_headers)
            } else {
                (kind::CONTINUATION, end_headers)
            };
            frame_head(&mut self.control, chunk.len(), kind, flags, st.id);
            self.control.extend_from_slice(chunk);
            st.wire_out += (FRAME_HEAD + chunk.len()) as u64;
            first = false;
            if last {
                break;
            }
        }
        self.push_data(st);
        let written = self.flush_control().await;
        // Not kept: the request's copy is as big as its body, and 10,000 idle connections each
        // holding one would cost more than the allocation saves.
        self.control = Vec::new();
        written
    }

    /// Queues DATA frames for as much of the body as both windows and the frame size allow,
    /// to go out with the next write.
    fn push_data(&mut self, st: &mut Stream) {
        while !st.upload.is_empty() {
            let room = st.send_window.min(self.send_window);
            let n = st
                .upload
                .len()
                .min(self.peer_max_frame)
                .min(usize::try_from(room).unwrap_or(0));
            if n == 0 {
                return;
            }
            let flags = if n == st.upload.len() {
                flag::END_STREAM
            } else {
                0
            };
            frame_head(&mut self.control, n, kind::DATA, flags, st.id);
            self.control.extend_from_slice(&st.upload[..n]);
            st.wire_out += (FRAME_HEAD + n) as u64;
            st.upload.advance(n);
            st.send_window -= n as i64;
            self.send_window -= n as i64;
        }
    }

    /// Queues a WINDOW_UPDATE giving back what the connection received.
    fn give_back(&mut self) {
        if self.unacked > 0 {
            window_update(&mut self.control, 0, self.unacked);
            self.recv_window += i64::from(self.unacked);
            self.unacked = 0;
        }
    }

    async fn flush_control(&mut self) -> Result<(), SendError> {
        if self.control.is_empty() {
            return Ok(());
        }
        let written = self.io.write_all(&self.control).await;
        let flushed = self.io.flush().await;
        self.control.clear();
        match (written, flushed) {
            (Ok(()), Ok(())) => Ok(()),
            _ => broken(),
        }
    }

    /// The next whole frame in the buffer, if there is one.
    fn buffered_frame(&mut self) -> Result<Option<Frame>, SendError> {
        if self.buf.len() < 9 {
            return Ok(None);
        }
        let len = usize::from(self.buf[0]) << 16
            | usize::from(self.buf[1]) << 8
            | usize::from(self.buf[2]);
        if len > MAX_FRAME {
            return broken();
        }
        if self.buf.len() < 9 + len {
            return Ok(None);
        }
        let (kind, flags) = (self.buf[3], self.buf[4]);
        let stream = u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]])
            & MAX_STREAM_ID;
        let mut payload = self.buf.split_to(9 + len).freeze();
        payload.advance(9);
        Ok(Some(Frame {
            kind,
            flags,
            stream,
            payload,
        }))
    }

    /// The next frame, reading as needed; pending control frames go out before a read waits.
    async fn read_frame(&mut self) -> Result<Frame, SendError> {
        loop {
            if let Some(frame) = self.buffered_frame()? {
                return Ok(frame);
            }
            self.flush_control().await?;
            // Start small (10,000 connections × a big buffer is most of a generator's memory)
            // and grow with the frames: twice the capacity each time the spare room runs low.
            if self.buf.capacity() - self.buf.len() < 512 {
                self.buf.reserve(self.buf.capacity().clamp(1024, 1 << 20));
            }
            match self.io.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return broken(),
                Ok(_) => {}
            }
        }
    }

    /// Deals with one frame from the server.
    fn handle(
        &mut self,
        frame: Frame,
        st: &mut Stream,
        pending: &mut Option<Pending>,
    ) -> Result<(), SendError> {
        if frame.stream == st.id
            && matches!(frame.kind, kind::DATA | kind::HEADERS | kind::CONTINUATION)
        {
            st.wire_in += (FRAME_HEAD + frame.payload.len()) as u64;
        }
        if let Some(p) = pending {
            // Nothing may come between a header block's frames.
            if frame.kind != kind::CONTINUATION || frame.stream != p.stream {
                return broken();
            }
        }
        match frame.kind {
            kind::DATA => self.on_data(&frame, st),
            kind::HEADERS => {
                if frame.stream == 0 {
                    return broken();
                }
                let fragment = unpad(&frame, true)?;
                let p = Pending {
                    stream: frame.stream,
                    block: fragment.to_vec(),
                    end_stream: frame.flags & flag::END_STREAM != 0,
                };
                if frame.flags & flag::END_HEADERS != 0 {
                    self.on_headers(&p, st)
                } else {
                    *pending = Some(p);
                    Ok(())
                }
            }
            kind::CONTINUATION => {
                let Some(mut p) = pending.take() else {
                    return broken();
                };
                p.block.extend_from_slice(&frame.payload);
                if p.block.len() > MAX_HEADER_BLOCK {
                    return broken();
                }
                if frame.flags & flag::END_HEADERS != 0 {
                    self.on_headers(&p, st)
                } else {
                    *pending = Some(p);
                    Ok(())
                }
            }
            kind::RST_STREAM => {
                if frame.stream == 0 || frame.payload.len() != 4 {
                    return broken();
                }
                if frame.stream != st.id || st.ended {
                    return Ok(());
                }
                let code = be_u32(&frame.payload);
                if code == REFUSED_STREAM && st.status.is_none() {
                    Err(SendError::Unprocessed)
                } else {
                    broken()
                }
            }
            kind::SETTINGS => self.on_settings(&frame, st),
            kind::PING => {
                if frame.stream != 0 || frame.payload.len() != 8 {
                    return broken();
                }
                if frame.flags & flag::ACK == 0 {
                    frame_head(&mut self.control, 8, kind::PING, flag::ACK, 0);
                    self.control.extend_from_slice(&frame.payload);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if frame.stream != 0 || frame.payload.len() < 8 {
                    return broken();
                }
                let last = be_u32(&frame.payload) & MAX_STREAM_ID;
                self.draining = true;
                // Before the stream is opened (`st.id` not yet used) or above the last stream
                // the server took: not processed.
                if (st.id >= self.next_id || st.id > last) && st.status.is_none() {
                    return Err(SendError::Unprocessed);
                }
                Ok(())
            }
            kind::WINDOW_UPDATE => {
                if frame.payload.len() != 4 {
                    return broken();
                }
                let increment = be_u32(&frame.payload) & MAX_STREAM_ID;
                if frame.stream == 0 {
                    self.send_window += i64::from(increment);
                } else if frame.stream == st.id {
                    st.send_window += i64::from(increment);
                }
                Ok(())
            }
            // Push was switched off in the SETTINGS this client sent.
            kind::PUSH_PROMISE => broken(),
            // PRIORITY, and frame types this client does not know: ignored, as the protocol
            // asks.
            _ => Ok(()),
        }
    }

    fn on_data(&mut self, frame: &Frame, st: &mut Stream) -> Result<(), SendError> {
        if frame.stream == 0 {
            return broken();
        }
        // Flow control counts the whole payload, padding included, on every stream.
        let len = frame.payload.len();
        self.recv_window -= len as i64;
        self.unacked += len as u32;
        if self.recv_window < 0 {
            return broken();
        }
        if self.unacked >= CONN_WINDOW / 2 {
            self.give_back();
        }
        if frame.stream != st.id {
            return Ok(());
        }
        if st.status.is_none() || st.ended {
            return broken();
        }
        st.recv_window -= len as i64;
        if st.recv_window < 0 {
            return broken();
        }
        st.body.push(unpad(frame, false)?);
        if frame.flags & flag::END_STREAM != 0 {
            st.ended = true;
        } else {
            st.unacked += len as u32;
            if st.unacked >= STREAM_WINDOW / 2 {
                window_update(&mut self.control, st.id, st.unacked);
                st.recv_window += i64::from(st.unacked);
                st.unacked = 0;
            }
        }
        Ok(())
    }

    /// Decodes a whole header block (always: the HPACK table must follow the server's) and, on
    /// the request's stream, takes the status, or the end of the trailers.
    fn on_headers(&mut self, p: &Pending, st: &mut Stream) -> Result<(), SendError> {
        let (mut status, mut bad) = (None, false);
        let decoded = self.hpack.decode(&p.block, |name, value| {
            if name == b":status" {
                status = std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse::<u16>().ok())
                    .and_then(|s| StatusCode::from_u16(s).ok());
                bad |= status.is_none();
            }
        });
        if decoded.is_err() || bad {
            return broken();
        }
        if p.stream != st.id {
            return Ok(());
        }
        if st.status.is_none() {
            let Some(status) = status else {
                return broken();
            };
            if status.is_informational() {
                // An interim response (100 Continue): the real one follows.
                return Ok(());
            }
            st.status = Some(status);
            st.ttfb = st.began.elapsed();
        } else if !p.end_stream {
            // Trailers end the stream; a second head without END_STREAM is not HTTP.
            return broken();
        }
        if p.end_stream {
            st.ended = true;
        }
        Ok(())
    }

    fn on_settings(&mut self, frame: &Frame, st: &mut Stream) -> Result<(), SendError> {
        if frame.stream != 0 || !frame.payload.len().is_multiple_of(6) {
            return broken();
        }
        if frame.flags & flag::ACK != 0 {
            return Ok(());
        }
        for entry in frame.payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                setting::INITIAL_WINDOW_SIZE => {
                    if value > MAX_STREAM_ID {
                        return broken();
                    }
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    st.send_window += delta;
                }
                setting::MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return broken();
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => {}
            }
        }
        frame_head(&mut self.control, 0, kind::SETTINGS, flag::ACK, 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        crate::hpack::Decoder::new(4096)
            .decode(block, |n, v| {
                out.push((
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ));
            })
            .unwrap();
        out
    }

    #[test]
    fn the_request_block_decodes_to_the_request_without_connection_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("connection", "keep-alive".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert("te", "gzip".parse().unwrap());
        headers.insert("x-long", "v".repeat(300).parse().unwrap());
        let block = header_block(&Method::PUT, true, "example.com:8443", "/a?b=c", &headers);
        let want: Vec<(String, String)> = [
            (":method", "PUT"),
            (":scheme", "https"),
            (":authority", "example.com:8443"),
            (":path", "/a?b=c"),
            ("content-type", "application/json"),
            ("x-long", &"v".repeat(300)),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(decoded(&block), want);

        let mut trailers = HeaderMap::new();
        trailers.insert("te", "trailers".parse().unwrap());
        let block = header_block(&Method::GET, false, "h", "/", &trailers);
        assert_eq!(
            decoded(&block),
            [
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", "h"),
                (":path", "/"),
                ("te", "trailers")
            ]
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
        );
    }
}
