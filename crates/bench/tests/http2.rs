//! The HTTP/2 hot path (`pms_bench::http2`) against a real HTTP/2 server (the `h2` crate's) that
//! uses the protocol's corners: small flow-control windows, responses bigger than the client's
//! windows, header blocks split over CONTINUATION frames and compressed against a changing HPACK
//! table, trailers, PING, GOAWAY, REFUSED_STREAM, an answer before the whole body was read, and
//! a server that does not speak HTTP/2 at all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use pms_bench::target::{Conn, HttpVersion, Outgoing, SendError, Target};
use pms_net::tls::Trust;

/// One stream's work on a test server.
type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What a test server does with each stream.
type Handler = Arc<dyn Fn(Ctx, Request<RecvStream>, SendResponse<Bytes>) -> Task + Send + Sync>;

/// Where a stream sits on its server.
#[derive(Clone)]
struct Ctx {
    stream: usize,
    /// PING the client once (the first stream of each connection gets it).
    ping: Option<Arc<tokio::sync::Mutex<h2::PingPong>>>,
}

/// Settings of a test server.
#[derive(Clone, Copy, Default)]
struct ServerSettings {
    /// SETTINGS_INITIAL_WINDOW_SIZE: how much of a request body the server takes before the
    /// client must wait for a WINDOW_UPDATE.
    window: Option<u32>,
    /// Answer this many streams on a connection, then close it gracefully (GOAWAY).
    streams_per_connection: Option<usize>,
}

/// An HTTP/2 (h2c) server on a loopback port; returns its address and its connection count.
async fn server(
    settings: ServerSettings,
    handler: Handler,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let handler = handler.clone();
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                if let Some(w) = settings.window {
                    builder.initial_window_size(w);
                }
                let Ok(mut conn) = builder.handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                let ping = conn
                    .ping_pong()
                    .map(|p| Arc::new(tokio::sync::Mutex::new(p)));
                let mut n = 0;
                while let Some(Ok((req, respond))) = conn.accept().await {
                    let ctx = Ctx {
                        stream: n,
                        ping: ping.clone(),
                    };
                    tokio::spawn(handler(ctx, req, respond));
                    n += 1;
                    if settings.streams_per_connection == Some(n) {
                        conn.graceful_shutdown();
                    }
                }
            });
        }
    });
    (addr, connections)
}

/// Reads a whole request body, giving its flow-control credit back.
async fn read_body(body: &mut RecvStream) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        all.extend_from_slice(&chunk);
    }
    all
}

fn target(addr: std::net::SocketAddr) -> Target {
    Target::new(
        &format!("http://{addr}/path?q=1"),
        HttpVersion::Http2,
        &Trust::Nothing,
    )
    .unwrap()
}

fn post(t: &Target, body: Vec<u8>) -> Outgoing {
    t.outgoing(
        &Method::POST,
        &[(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Bytes::from(body),
    )
    .unwrap()
}

async fn connect(t: &Target) -> Conn {
    t.connect().await.unwrap()
}

/// Sends on `conn`, bounded in time.
async fn send(conn: &mut Conn, out: &Outgoing) -> Result<pms_bench::target::Answer, SendError> {
    tokio::time::timeout(Duration::from_secs(10), conn.send(out))
        .await
        .expect("an answer, not a hang")
        .map(|(answer, _)| answer)
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"0123456789abcdef"[i % 16]).collect()
}

/// Echoes the request's method, path, body length and body back.
fn echo() -> Handler {
    Arc::new(|_ctx, req, mut respond| {
        Box::pin(async move {
            let (head, mut body) = req.into_parts();
            let all = read_body(&mut body).await;
            let resp = Response::builder()
                .header("x-method", head.method.as_str())
                .header("x-path", head.uri.path_and_query().unwrap().as_str())
                .header("x-length", all.len())
                .body(())
                .unwrap();
            let mut out = respond.send_response(resp, all.is_empty()).unwrap();
            if !all.is_empty() {
                out.send_data(Bytes::from(all), true).unwrap();
            }
        })
    })
}

#[tokio::test]
async fn request_bodies_wait_for_the_servers_windows() {
    // A 100-byte stream window: a 20 KB body goes out in pieces, each after a WINDOW_UPDATE;
    // a 200 KB body also outgrows the connection's initial 64 KB window.
    let settings = ServerSettings {
        window: Some(100),
        ..ServerSettings::default()
    };
    let (addr, _) = server(settings, echo()).await;
    let t = target(addr);
    let mut conn = connect(&t).await;
    for size in [200_000, 0, 500, 20_000, 700] {
        let sent = bytes(size);
        let answer = send(&mut conn, &post(&t, sent.clone())).await.unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.version, http::Version::HTTP_2);
        assert_eq!(answer.body.as_ref(), sent.as_slice(), "{size} bytes echoed");
    }
    assert!(conn.ready().await, "one connection carried every request");
}

#[tokio::test]
async fn responses_bigger_than_the_clients_windows_arrive_whole() {
    // 6 MB: more than the 2 MiB stream window and the 5 MiB connection window, so the client
    // must give credit back on both while the body arrives, twice in a row on one connection.
    let big: Handler = Arc::new(|_ctx, req, mut respond| {
        Box::pin(async move {
            drop(req);
            let mut out = respond.send_response(Response::new(()), false).unwrap();
            out.send_data(Bytes::from(bytes(6_000_000)), true).unwrap();
        })
    });
    let (addr, _) = server(ServerSettings::default(), big).await;
    let t = target(addr);
    let mut conn = connect(&t).await;
    let get = t.outgoing(&Method::GET, &[], Bytes::new()).unwrap();
    for _ in 0..2 {
        let answer = send(&mut conn, &get).await.unwrap();
        assert_eq!(answer.body.len(), 6_000_000);
        assert_eq!(answer.body.as_ref(), bytes(6_000_000).as_slice());
    }
}

#[tokio::test]
async fn header_blocks_decode_across_continuations_and_a_changing_table() {
    // Each answer carries headers the server's HPACK encoder indexes and then refers back to,
    // one whose value changes every time, and every fourth one a 40 KB header that needs
    // CONTINUATION frames; the request's own headers and path must arrive intact.
    let headers: Handler = Arc::new(|ctx, req, mut respond| {
        Box::pin(async move {
            let path = req.uri().path_and_query().unwrap().as_str().to_owned();
            let auth = req.uri().authority().map(|a| a.as_str().to_owned());
            let mut resp = Response::builder()
                .header("x-path", path)
                .header("x-authority", auth.unwrap_or_default())
                .header("x-stream", ctx.stream)
                .header("x-same", "always the same value");
            if ctx.stream % 4 == 3 {
                resp = resp.header("x-big", "b".repeat(40_000));
            }
            let mut out = respond
                .send_response(resp.body(()).unwrap(), false)
                .unwrap();
            out.send_data(Bytes::from(format!("stream {}", ctx.stream)), true)
                .unwrap();
        })
    });
    let (addr, _) = server(ServerSettings::default(), headers).await;
    let t = target(addr);
    let mut conn = connect(&t).await;
    let get = t
        .outgoing(
            &Method::GET,
            &[(http::header::ACCEPT, HeaderValue::from_static("text/plain"))],
            Bytes::new(),
        )
        .unwrap();
    let mut sizes = Vec::new();
    for n in 0..12 {
        let answer = send(&mut conn, &get).await.unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.body.as_ref(), format!("stream {n}").as_bytes());
        sizes.push(answer.bytes - answer.body.len() as u64);
    }
    // What came over the wire: the first head adds its headers to the server's HPACK table,
    // the next ones refer back to it and are much smaller; the big header (Huffman-coded, in
    // HEADERS and CONTINUATION frames) is counted whole.
    assert!(sizes[1] * 2 < sizes[0], "{sizes:?}");
    assert!(sizes[3] > sizes[1] + 30_000, "{sizes:?}");
    assert!(sizes[4] * 2 < sizes[0], "{sizes:?}");
}

#[tokio::test]
async fn a_request_counts_the_bytes_of_its_frames() {
    // A 40,000-byte body goes out in DATA frames of at most 16,384 bytes (the server's frame
    // size), each with a 9-byte head; the echo's answer comes back the same way.
    let (addr, _) = server(ServerSettings::default(), echo()).await;
    let t = target(addr);
    let mut conn = connect(&t).await;
    let post = t
        .outgoing(&Method::POST, &[], Bytes::from(bytes(40_000)))
        .unwrap();
    let empty = t.outgoing(&Method::POST, &[], Bytes::new()).unwrap();
    let mut sent = Vec::new();
    for out in [&post, &empty] {
        let (answer, bytes) = tokio::time::timeout(Duration::from_secs(10), conn.send(out))
            .await
            .expect("an answer, not a hang")
            .unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        sent.push(bytes);
    }
    let (with_body, without) = (sent[0], sent[1]);
    // The heads differ by the content-length header alone (its name and value written out),
    // the rest by the whole body and three DATA frame heads.
    let frames = 40_000u64.div_ceil(16_384);
    let extra = with_body - without;
    assert!(
        extra > 40_000 + 9 * frames && extra < 40_000 + 9 * frames + 32,
        "{with_body} against {without}"
    );
}

#[tokio::test]
async fn trailers_end_the_response_and_pings_are_answered_mid_request() {
    let handler: Handler = Arc::new(|ctx, req, mut respond| {
        Box::pin(async move {
            drop(req);
            if let (0, Some(ping)) = (ctx.stream, ctx.ping) {
                // The answer waits for the client's PING ACK: a client that does not read
                // control frames while it waits would never get it.
                let mut ping = ping.lock().await;
                ping.ping(h2::Ping::opaque()).await.unwrap();
            }
            let mut out = respond.send_response(Response::new(()), false).unwrap();
            out.send_data(Bytes::from_static(b"body"), false).unwrap();
            let mut trailers = HeaderMap::new();
            trailers.insert("x-checksum", HeaderValue::from_static("abc"));
            out.send_trailers(trailers).unwrap();
        })
    });
    let (addr, _) = server(ServerSettings::default(), handler).await;
    let t = target(addr);
    let mut conn = connect(&t).await;
    let get = t.outgoing(&Method::GET, &[], Bytes::new()).unwrap();
    for _ in 0..3 {
        let answer = send(&mut conn, &get).await.unwrap();
        assert_eq!(answer.body.as_ref(), b"body");
    }
}

#[tokio::test]
async fn goaway_and_refused_streams_are_unprocessed_not_failed() {
    // One stream per connection, then GOAWAY: the next request on that connection was not
    // processed, and says so.
    let one = ServerSettings {
        streams_per_connection: Some(1),
        ..ServerSettings::default()
    };
    let (addr, connections) = server(one, echo()).await;
    let t = target(addr);
    let out = post(&t, bytes(10));
    let mut conn = connect(&t).await;
    send(&mut conn, &out).await.unwrap();
    // Whether the GOAWAY arrived before the next request went out or after, the answer is the
    // same.
    let again = send(&mut conn, &out).await;
    assert_eq!(again.unwrap_err(), SendError::Unprocessed);
    assert!(!conn.ready().await);
    assert_eq!(connections.load(Ordering::SeqCst), 1);

    // The second stream of each connection is refused.
    let refusing: Handler = Arc::new(|ctx, req, mut respond| {
        Box::pin(async move {
            if ctx.stream == 1 {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
                return;
            }
            drop(req);
            respond.send_response(Response::new(()), true).unwrap();
        })
    });
    let (addr, _) = server(ServerSettings::default(), refusing).await;
    let t = target(addr);
    let get = t.outgoing(&Method::GET, &[], Bytes::new()).unwrap();
    let mut conn = connect(&t).await;
    assert_eq!(send(&mut conn, &get).await.unwrap().status, StatusCode::OK);
    assert_eq!(
        send(&mut conn, &get).await.unwrap_err(),
        SendError::Unprocessed
    );
}

#[tokio::test]
async fn a_goaway_below_a_sent_stream_means_it_was_not_processed() {
    // A server that reads the request, then says it took no stream at all (GOAWAY with last
    // stream id 0) and closes: the request was sent, and still not processed.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // The preface, the client's SETTINGS and WINDOW_UPDATE, and the HEADERS frame.
            while !seen.windows(5).any(|w| w == b"/path") {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let settings = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
            let goaway = [0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            let _ = tcp.write_all(&[&settings[..], &goaway[..]].concat()).await;
        }
    });
    let t = target(addr);
    let mut conn = connect(&t).await;
    let get = t.outgoing(&Method::GET, &[], Bytes::new()).unwrap();
    assert_eq!(
        send(&mut conn, &get).await.unwrap_err(),
        SendError::Unprocessed
    );
    assert!(!conn.ready().await);
}

#[tokio::test]
async fn a_closed_run_retries_unprocessed_requests_on_new_connections_without_errors() {
    use pms_bench::closed::{self, ClosedConfig, RequestSpec};
    use pms_bench::collect::{CollectConfig, Collector, StopReason};
    let one = ServerSettings {
        streams_per_connection: Some(3),
        ..ServerSettings::default()
    };
    let (addr, connections) = server(one, echo()).await;
    let t = Arc::new(target(addr));
    let spec = Arc::new(RequestSpec {
        method: Method::POST,
        headers: Vec::new(),
        body: Bytes::from(bytes(100)),
        expect_status: Some(200),
        expect_body: Some("0123".into()),
    });
    let cfg = ClosedConfig {
        users: pms_bench::profile::Profile::constant(2.0),
        duration: Duration::from_secs(5),
        think_time: Duration::ZERO,
        timeout: Duration::from_secs(5),
        grace: Duration::from_secs(5),
        iterations: Some(30),
    };
    let collector = Collector::new(CollectConfig::default()).unwrap();
    closed::run(t, spec, cfg, collector.clone()).await;
    collector.stop_because(StopReason::Completed);
    let out = collector.finish(Duration::from_secs(5)).unwrap();
    let s = out.measured.summary("measured", out.ended);
    assert_eq!(s.samples, 60, "{s:?}");
    assert_eq!(s.errors, 0, "{s:?}");
    // Three streams a connection: each user needed at least ten.
    assert!(connections.load(Ordering::SeqCst) >= 20);
}

#[tokio::test]
async fn an_answer_before_the_whole_body_ends_the_stream_and_keeps_the_connection() {
    // The server answers 413 without reading a body bigger than its window: the client stops
    // sending, resets its half of the stream, and the connection serves the next request.
    let settings = ServerSettings {
        window: Some(1000),
        ..ServerSettings::default()
    };
    let early: Handler = Arc::new(|_ctx, req, mut respond| {
        Box::pin(async move {
            let (_, mut body) = req.into_parts();
            let status = if body.is_end_stream() {
                StatusCode::OK
            } else {
                let first = body.data().await;
                if first.is_some_and(|c| c.is_ok()) {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::OK
                }
            };
            let resp = Response::builder().status(status).body(()).unwrap();
            respond.send_response(resp, true).unwrap();
        })
    });
    let (addr, connections) = server(settings, early).await;
    let t = target(addr);
    let mut conn = connect(&t).await;
    let big = post(&t, bytes(100_000));
    let answer = send(&mut conn, &big).await.unwrap();
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    let get = t.outgoing(&Method::GET, &[], Bytes::new()).unwrap();
    assert_eq!(send(&mut conn, &get).await.unwrap().status, StatusCode::OK);
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_server_that_does_not_speak_http2_is_a_reset_not_a_hang() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = tcp.read(&mut buf).await;
            let _ = tcp
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        }
    });
    let t = target(addr);
    let mut conn = connect(&t).await;
    let get = t.outgoing(&Method::GET, &[], Bytes::new()).unwrap();
    assert_eq!(
        send(&mut conn, &get).await.unwrap_err(),
        SendError::Failed(pms_bench::stats::ErrorKind::Reset)
    );
    assert!(!conn.ready().await);
}
