//! What a run talks to: a URL, the HTTP version to speak and how to trust its certificate; and one
//! connection to it that sends requests and reports what happened in [`ErrorKind`] terms.
//! Connections speak exactly the asked-for protocol (HTTP/1.1, h2c prior knowledge, or TLS with
//! ALPN offering only that protocol) and say what was negotiated, so a run can check it.
//! HTTP/1.1 goes through the prepared-bytes path in [`crate::h1`]. HTTP/2 connections that carry
//! one stream at a time (every closed-model user, and the open model with one stream per
//! connection) go through [`crate::http2`], read and written by the task that sends; connections
//! that multiplex several streams go through the `h2` crate, whose connection task the streams
//! share.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode, Uri, Version};
use pms_net::tls::Trust;
use tokio::net::TcpStream;

use crate::stats::{ConnectTiming, ErrorKind};

/// The HTTP version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum HttpVersion {
    /// HTTP/1.1 (over TLS: ALPN `http/1.1`).
    #[serde(rename = "1.1")]
    Http1,
    /// HTTP/2 (cleartext: prior knowledge; over TLS: ALPN `h2`).
    #[serde(rename = "2")]
    Http2,
}

/// Why a target could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The URL is not `http://` or `https://` with a host.
    #[error("bad URL {0:?}: {1}")]
    Url(String, String),
    /// The host did not resolve.
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, String),
    /// TLS client settings.
    #[error("TLS: {0}")]
    Tls(pms_net::TlsError),
}

/// A URL ready to be connected to.
pub struct Target {
    /// The URL as given.
    pub url: Uri,
    /// The resolved address.
    pub addr: SocketAddr,
    /// `Host` header / `:authority`.
    pub authority: String,
    /// Path and query of every request.
    pub path_and_query: String,
    /// Protocol to speak.
    pub version: HttpVersion,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("addr", &self.addr)
            .field("version", &self.version)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Target {
    /// Parses and resolves `url`.
    ///
    /// # Errors
    /// [`TargetError`] for a bad URL, an unresolvable host or TLS settings that do not load.
    pub fn new(url: &str, version: HttpVersion, trust: &Trust) -> Result<Self, TargetError> {
        let bad = |why: &str| TargetError::Url(url.to_owned(), why.to_owned());
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("expected http:// or https://")),
        };
        let host = uri.host().ok_or_else(|| bad("no host"))?.to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let addr = (bare.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| TargetError::Resolve(host.clone(), e.to_string()))?
            .next()
            .ok_or_else(|| TargetError::Resolve(host.clone(), "no address".into()))?;
        let tls = if https {
            let alpn: &[&[u8]] = match version {
                HttpVersion::Http1 => &[pms_net::ALPN_HTTP11],
                HttpVersion::Http2 => &[pms_net::ALPN_H2],
            };
            let cfg = pms_net::tls::client_config(trust, alpn).map_err(TargetError::Tls)?;
            let name = rustls::pki_types::ServerName::try_from(bare.clone())
                .map_err(|e| bad(&e.to_string()))?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(cfg)), name))
        } else {
            None
        };
        let authority = uri
            .authority()
            .map_or_else(|| host.clone(), |a| a.as_str().to_owned());
        let path_and_query = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        Ok(Self {
            url: uri,
            addr,
            authority,
            path_and_query,
            version,
            tls,
        })
    }

    /// Whether the target is a loopback address (on this host).
    pub fn is_loopback(&self) -> bool {
        self.addr.ip().is_loopback()
    }

    /// Opens one connection and completes the TLS and HTTP handshakes.
    ///
    /// # Errors
    /// [`ErrorKind::Connect`], [`ErrorKind::Tls`], or [`ErrorKind::Check`] when the server
    /// negotiated another protocol than asked for.
    pub async fn connect(&self) -> Result<Conn, ErrorKind> {
        self.open(false).await
    }

    /// Like [`Target::connect`], for a connection that several tasks share, one stream each
    /// ([`Conn::try_clone`]); the same as [`Target::connect`] for HTTP/1.1.
    ///
    /// # Errors
    /// As [`Target::connect`].
    pub async fn connect_shared(&self) -> Result<Conn, ErrorKind> {
        self.open(true).await
    }

    async fn open(&self, shared: bool) -> Result<Conn, ErrorKind> {
        let began = tokio::time::Instant::now();
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|_| ErrorKind::Connect)?;
        let _ = tcp.set_nodelay(true);
        let tcp_time = began.elapsed();
        match &self.tls {
            None => {
                let timing = ConnectTiming {
                    tcp: tcp_time,
                    tls: None,
                };
                self.handshake(tcp, timing, shared).await
            }
            // Boxed, as the HTTP/2 handshake of a shared connection below: their futures are
            // kilobytes, and with them inline every cleartext connect would take that much
            // too (10,000 users connecting at once set the run's peak memory).
            Some(tls) => Box::pin(self.open_tls(tls, tcp, began, tcp_time, shared)).await,
        }
    }

    async fn open_tls(
        &self,
        (connector, name): &(
            tokio_rustls::TlsConnector,
            rustls::pki_types::ServerName<'static>,
        ),
        tcp: TcpStream,
        began: tokio::time::Instant,
        tcp_time: std::time::Duration,
        shared: bool,
    ) -> Result<Conn, ErrorKind> {
        let tls = connector
            .connect(name.clone(), tcp)
            .await
            .map_err(|_| ErrorKind::Tls)?;
        let timing = ConnectTiming {
            tcp: tcp_time,
            tls: Some(began.elapsed() - tcp_time),
        };
        let want: &[u8] = match self.version {
            HttpVersion::Http1 => pms_net::ALPN_HTTP11,
            HttpVersion::Http2 => pms_net::ALPN_H2,
        };
        let got = tls.get_ref().1.alpn_protocol();
        // No ALPN at all is fine for HTTP/1.1 (the protocol without negotiation).
        if got != Some(want) && !(got.is_none() && self.version == HttpVersion::Http1) {
            return Err(ErrorKind::Check);
        }
        self.handshake(tls, timing, shared).await
    }

    async fn handshake<IO>(
        &self,
        io: IO,
        timing: ConnectTiming,
        shared: bool,
    ) -> Result<Conn, ErrorKind>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let sender = match self.version {
            HttpVersion::Http1 => Sender::H1(crate::h1::Connection::new(Box::new(io))),
            HttpVersion::Http2 if !shared => {
                Sender::Http2(Box::new(crate::http2::Connection::new(Box::new(io))))
            }
            HttpVersion::Http2 => Sender::H2(Box::pin(shared_h2(io)).await?),
        };
        Ok(Conn {
            sender,
            timing: Some(timing),
        })
    }

    /// The request every connection sends, prepared once: the HTTP/1.1 bytes, and the parts
    /// of the HTTP/2 request.
    ///
    /// # Errors
    /// When the method or a header does not fit HTTP.
    pub fn outgoing(
        &self,
        method: &http::Method,
        headers: &[(http::HeaderName, http::HeaderValue)],
        body: Bytes,
    ) -> Result<Outgoing, http::Error> {
        let wire = crate::h1::request_bytes(
            method,
            &self.path_and_query,
            &self.authority,
            headers,
            &body,
        );
        // Build one HTTP/2 request now, so a bad method or header fails here, not per request.
        let mut map = http::HeaderMap::with_capacity(headers.len() + 1);
        for (k, v) in headers {
            map.append(k.clone(), v.clone());
        }
        if !body.is_empty() {
            map.insert(http::header::CONTENT_LENGTH, body.len().into());
        }
        let h2_block = crate::http2::header_block(
            method,
            self.tls.is_some(),
            &self.authority,
            &self.path_and_query,
            &map,
        );
        let out = Outgoing {
            h2_block,
            h1_sent: wire.len() as u64,
            h2_sent: head_bytes(&map) + 16 + body.len() as u64,
            wire,
            head_only: method == http::Method::HEAD,
            method: method.clone(),
            uri: self.url.clone(),
            headers: map,
            body,
        };
        out.h2_head()?;
        Ok(out)
    }
}

/// The `h2` crate's client, with the same windows as the hot path ([`crate::http2`]).
fn h2_settings() -> h2::client::Builder {
    let mut b = h2::client::Builder::new();
    b.initial_window_size(crate::http2::STREAM_WINDOW)
        .initial_connection_window_size(crate::http2::CONN_WINDOW)
        .enable_push(false);
    b
}

/// Opens an `h2` crate connection for several streams, its connection task spawned.
async fn shared_h2<IO>(io: IO) -> Result<h2::client::SendRequest<Bytes>, ErrorKind>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (s, conn) = h2_settings()
        .handshake(io)
        .await
        .map_err(|_| ErrorKind::Reset)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(s)
}

/// A request prepared for every connection of a run.
#[derive(Debug, Clone)]
pub struct Outgoing {
    wire: Bytes,
    /// The HTTP/2 header block for the hot path.
    h2_block: Bytes,
    head_only: bool,
    method: http::Method,
    uri: Uri,
    headers: http::HeaderMap,
    body: Bytes,
    h1_sent: u64,
    h2_sent: u64,
}

impl Outgoing {
    /// The HTTP/2 request's head (the body goes in DATA frames).
    fn h2_head(&self) -> Result<Request<()>, http::Error> {
        let mut req = Request::builder()
            .method(self.method.clone())
            .version(Version::HTTP_2)
            .uri(self.uri.clone())
            .body(())?;
        *req.headers_mut() = self.headers.clone();
        Ok(req)
    }
}

enum Sender {
    H1(crate::h1::Connection),
    /// Boxed: HTTP/1.1 users would otherwise carry its size in every task.
    Http2(Box<crate::http2::Connection>),
    H2(h2::client::SendRequest<Bytes>),
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// It failed, as this kind of error; the connection is unusable.
    Failed(ErrorKind),
    /// The server refused it without processing it (HTTP/2 GOAWAY or REFUSED_STREAM): it may be
    /// sent again on a new connection.
    Unprocessed,
}

impl From<ErrorKind> for SendError {
    fn from(kind: ErrorKind) -> Self {
        Self::Failed(kind)
    }
}

/// One open connection.
pub struct Conn {
    sender: Sender,
    /// How long opening it took; taken by the first request sent on it.
    timing: Option<ConnectTiming>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

/// A response, read to its end.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub status: StatusCode,
    /// HTTP version of the response.
    pub version: Version,
    /// Body.
    pub body: Bytes,
    /// Bytes of the response as it came: over HTTP/1.1 the head and the body; over HTTP/2 the
    /// stream's frames (heads, HPACK blocks, bodies), except on a connection shared by several
    /// streams (the `h2` crate's client), which cannot see its frames and counts the head as
    /// HTTP/1.1 text.
    pub bytes: u64,
    /// From the call to the response head.
    pub ttfb: std::time::Duration,
}

impl Conn {
    /// Another handle on the same connection, for one more concurrent HTTP/2 stream; `None` for
    /// HTTP/1.1, which has one request at a time per connection.
    pub fn try_clone(&self) -> Option<Conn> {
        match &self.sender {
            Sender::H1(_) | Sender::Http2(_) => None,
            Sender::H2(s) => Some(Conn {
                sender: Sender::H2(s.clone()),
                timing: None,
            }),
        }
    }

    /// Waits until the connection can take a request; `false` when the server has closed it
    /// (e.g. after `Connection: close`, or nginx's `keepalive_requests`): nothing was sent, so
    /// the caller reconnects without counting an error.
    pub async fn ready(&mut self) -> bool {
        match &mut self.sender {
            Sender::H1(c) => c.is_open(),
            Sender::Http2(c) => c.is_open(),
            Sender::H2(s) => std::future::poll_fn(|cx| s.poll_ready(cx)).await.is_ok(),
        }
    }

    /// Sends the request and reads the whole response; returns it and the request bytes, counted
    /// as [`Answer::bytes`] counts the response's.
    ///
    /// # Errors
    /// [`SendError::Failed`] with [`ErrorKind::Reset`] when the connection fails: it is then
    /// unusable; [`SendError::Unprocessed`] when an HTTP/2 server refused the stream.
    pub async fn send(&mut self, out: &Outgoing) -> Result<(Answer, u64), SendError> {
        match &mut self.sender {
            Sender::H1(c) => Ok((c.send(&out.wire, out.head_only).await?, out.h1_sent)),
            // Boxed, as below: the HTTP/2 exchange's state would otherwise be part of every
            // HTTP/1.1 user's task (and the allocation is small next to a request).
            Sender::Http2(c) => Box::pin(c.send(&out.h2_block, &out.body)).await,
            // Boxed: an inline HTTP/2 future would make every user's task that much bigger,
            // HTTP/1.1 or not, and there may be 10,000 of them.
            Sender::H2(s) => Box::pin(send_h2(s, out)).await,
        }
    }

    /// The connection's opening times, the first time this is called (so that only the first
    /// request on a connection carries them, as JMeter reports connect time).
    pub fn take_timing(&mut self) -> Option<ConnectTiming> {
        self.timing.take()
    }
}

/// What an `h2` error means for the request: refused streams were not processed.
fn h2_failure(e: &h2::Error) -> SendError {
    if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        SendError::Unprocessed
    } else {
        SendError::Failed(ErrorKind::Reset)
    }
}

async fn send_h2(
    s: &mut h2::client::SendRequest<Bytes>,
    out: &Outgoing,
) -> Result<(Answer, u64), SendError> {
    let began = tokio::time::Instant::now();
    let head = out.h2_head().map_err(|_| ErrorKind::Check)?;
    std::future::poll_fn(|cx| s.poll_ready(cx))
        .await
        .map_err(|e| h2_failure(&e))?;
    let no_body = out.body.is_empty();
    let (response, mut upload) = s.send_request(head, no_body).map_err(|e| h2_failure(&e))?;
    if !no_body {
        // Queued whole; h2 sends it as the peer's window allows.
        upload
            .send_data(out.body.clone(), true)
            .map_err(|e| h2_failure(&e))?;
    }
    let response = response.await.map_err(|e| h2_failure(&e))?;
    let ttfb = began.elapsed();
    let (head, mut recv) = response.into_parts();
    let mut body = crate::http2::Body::default();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(|_| ErrorKind::Reset)?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.push(chunk);
    }
    let body = body.into_bytes();
    let bytes = head_bytes(&head.headers) + 17 + body.len() as u64;
    let answer = Answer {
        status: head.status,
        version: head.version,
        body,
        bytes,
        ttfb,
    };
    Ok((answer, out.h2_sent))
}

/// Bytes of a header block written as HTTP/1.1 text (`name: value\r\n` each, plus the blank line).
pub fn head_bytes(headers: &http::HeaderMap) -> u64 {
    headers
        .iter()
        .map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64)
        .sum::<u64>()
        + 2
}
