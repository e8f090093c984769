//! HTTP clients for tests that speak exactly one protocol and say which one was negotiated.
//!
//! Built on hyper's connection-level API (no pool, no protocol guessing) so a test that asks for
//! HTTP/1.1 over TLS gets exactly that, and one connection is reused for every request sent
//! through the same [`TestClient`].

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// Boxed error for test plumbing.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 cleartext.
    H1c,
    /// HTTP/2 cleartext with prior knowledge.
    H2c,
    /// TLS offering only `http/1.1` in ALPN.
    H1Tls,
    /// TLS offering only `h2` in ALPN.
    H2Tls,
    /// TLS with no ALPN at all (like JMeter's HttpClient4 sampler).
    TlsNoAlpn,
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One connection, one protocol.
pub struct TestClient {
    sender: Sender,
    /// The HTTP version in use on this connection.
    pub version: Version,
    /// The ALPN protocol the server picked, if TLS.
    pub alpn: Option<Vec<u8>>,
}

impl std::fmt::Debug for TestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestClient")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A response with its body collected.
#[derive(Debug)]
pub struct Collected {
    /// Status, headers, version.
    pub head: http::response::Parts,
    /// The whole body.
    pub body: Bytes,
}

impl Collected {
    /// The status code.
    pub fn status(&self) -> http::StatusCode {
        self.head.status
    }
    /// A header as a string, if present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// The body parsed as JSON.
    ///
    /// # Panics
    /// If the body is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.text()))
    }
    /// The body as UTF-8 text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl TestClient {
    /// Connects to `addr` and completes the handshakes for `proto`, trusting the test CA.
    ///
    /// # Errors
    /// On connect, TLS or HTTP handshake failure.
    pub async fn connect(addr: SocketAddr, proto: Proto) -> Result<Self, BoxError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        match proto {
            Proto::H1c => Self::h1(TokioIo::new(tcp), None).await,
            Proto::H2c => Self::h2(TokioIo::new(tcp), None).await,
            Proto::H1Tls | Proto::H2Tls | Proto::TlsNoAlpn => {
                let alpn: &[&[u8]] = match proto {
                    Proto::H1Tls => &[pms_net::ALPN_HTTP11],
                    Proto::H2Tls => &[pms_net::ALPN_H2],
                    _ => &[],
                };
                let cfg = pms_net::tls::client_config(
                    &pms_net::tls::Trust::Only(crate::certs().ca.clone()),
                    alpn,
                )?;
                let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
                let name = rustls::pki_types::ServerName::try_from("localhost")?;
                let tls = connector.connect(name, tcp).await?;
                let negotiated = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                if negotiated.as_deref() == Some(pms_net::ALPN_H2) {
                    Self::h2(TokioIo::new(tls), negotiated).await
                } else {
                    Self::h1(TokioIo::new(tls), negotiated).await
                }
            }
        }
    }

    async fn h1<IO>(io: TokioIo<IO>, alpn: Option<Vec<u8>>) -> Result<Self, BoxError>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = http1::handshake(io).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self {
            sender: Sender::H1(sender),
            version: Version::HTTP_11,
            alpn,
        })
    }

    async fn h2<IO>(io: TokioIo<IO>, alpn: Option<Vec<u8>>) -> Result<Self, BoxError>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self {
            sender: Sender::H2(sender),
            version: Version::HTTP_2,
            alpn,
        })
    }

    /// Sends a request and collects the response body.
    ///
    /// For HTTP/1.1 the request URI should be origin-form (`/path`) and carry a `Host` header;
    /// [`TestClient::request`] builds such requests.
    ///
    /// # Errors
    /// When the connection fails or the body cannot be read.
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Collected, BoxError> {
        let resp: Response<hyper::body::Incoming> = match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let (head, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Collected { head, body })
    }

    /// A request builder with the URI form and `Host` header right for this connection.
    pub fn request(&self, method: &str, path_and_query: &str) -> http::request::Builder {
        let b = Request::builder().method(method).version(self.version);
        match self.version {
            Version::HTTP_2 => b.uri(format!("https://localhost{path_and_query}")),
            _ => b
                .uri(path_and_query)
                .header(http::header::HOST, "localhost"),
        }
    }

    /// Shorthand: send `method path` with `body` and extra headers.
    ///
    /// # Errors
    /// As [`TestClient::send`].
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Collected, BoxError> {
        let mut b = self.request(method, path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(body.into()))?;
        self.send(req).await
    }
}
