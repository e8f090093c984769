//! What a run talks to: a URL, the HTTP version to speak and how to trust its certificate; and one
//! connection to it that sends requests and reports what happened in [`ErrorKind`] terms.
//! Connections speak exactly the asked-for protocol (HTTP/1.1, h2c prior knowledge, or TLS with
//! ALPN offering only that protocol) and say what was negotiated, so a run can check it.
//! HTTP/1.1 goes through the prepared-bytes path in [`crate::h1`]; HTTP/2 through hyper.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
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
    Tls(#[from] pms_net::TlsError),
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
            let cfg = pms_net::tls::client_config(trust, alpn)?;
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
                self.handshake(TokioIo::new(tcp), timing).await
            }
            Some((connector, name)) => {
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
                self.handshake(TokioIo::new(tls), timing).await
            }
        }
    }

    async fn handshake<IO>(&self, io: TokioIo<IO>, timing: ConnectTiming) -> Result<Conn, ErrorKind>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let sender = match self.version {
            HttpVersion::Http1 => Sender::H1(crate::h1::Connection::new(Box::new(io.into_inner()))),
            HttpVersion::Http2 => {
                let (s, conn) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(|_| ErrorKind::Reset)?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                Sender::H2(s)
            }
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
        let out = Outgoing {
            h1_sent: wire.len() as u64,
            h2_sent: head_bytes(&map) + 16 + body.len() as u64,
            wire,
            head_only: method == http::Method::HEAD,
            method: method.clone(),
            uri: self.url.clone(),
            headers: map,
            body,
        };
        out.h2_request()?;
        Ok(out)
    }
}

/// A request prepared for every connection of a run.
#[derive(Debug, Clone)]
pub struct Outgoing {
    wire: Bytes,
    head_only: bool,
    method: http::Method,
    uri: Uri,
    headers: http::HeaderMap,
    body: Bytes,
    h1_sent: u64,
    h2_sent: u64,
}

impl Outgoing {
    fn h2_request(&self) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut req = Request::builder()
            .method(self.method.clone())
            .version(Version::HTTP_2)
            .uri(self.uri.clone())
            .body(Full::new(self.body.clone()))?;
        *req.headers_mut() = self.headers.clone();
        Ok(req)
    }
}

enum Sender {
    H1(crate::h1::Connection),
    H2(http2::SendRequest<Full<Bytes>>),
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
    /// Head and body bytes, the head counted as HTTP/1.1 text (as JMeter counts it).
    pub bytes: u64,
    /// From the call to the response head.
    pub ttfb: std::time::Duration,
}

impl Conn {
    /// Another handle on the same connection, for one more concurrent HTTP/2 stream; `None` for
    /// HTTP/1.1, which has one request at a time per connection.
    pub fn try_clone(&self) -> Option<Conn> {
        match &self.sender {
            Sender::H1(_) => None,
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
            Sender::H2(s) => s.ready().await.is_ok(),
        }
    }

    /// Sends the request and reads the whole response; returns it and the request bytes
    /// (head and body; for HTTP/2 the head counted as HTTP/1.1 text).
    ///
    /// # Errors
    /// [`ErrorKind::Reset`] when the connection fails; the connection is then unusable.
    pub async fn send(&mut self, out: &Outgoing) -> Result<(Answer, u64), ErrorKind> {
        match &mut self.sender {
            Sender::H1(c) => Ok((c.send(&out.wire, out.head_only).await?, out.h1_sent)),
            // Boxed: hyper's HTTP/2 futures are several KB, and an inline one would make every
            // user's task that big, HTTP/1.1 or not (10,000 users: most of the memory).
            Sender::H2(s) => Box::pin(send_h2(s, out)).await,
        }
    }

    /// The connection's opening times, the first time this is called (so that only the first
    /// request on a connection carries them, as JMeter reports connect time).
    pub fn take_timing(&mut self) -> Option<ConnectTiming> {
        self.timing.take()
    }
}

async fn send_h2(
    s: &mut http2::SendRequest<Full<Bytes>>,
    out: &Outgoing,
) -> Result<(Answer, u64), ErrorKind> {
    let began = tokio::time::Instant::now();
    let req = out.h2_request().map_err(|_| ErrorKind::Check)?;
    s.ready().await.map_err(|_| ErrorKind::Reset)?;
    let resp = s.send_request(req).await.map_err(|_| ErrorKind::Reset)?;
    let ttfb = began.elapsed();
    let (head, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|_| ErrorKind::Reset)?
        .to_bytes();
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
