//! The real `pms users` and `pms gateway` exporting their request spans over OTLP/HTTP to a
//! collector on loopback (a receiver that keeps what it is sent), as an operator turns it on:
//! the standard `OTEL_EXPORTER_OTLP_*` variables. A span must be a child of its caller's
//! `traceparent`, carry its process's name and the answer's status, and be out by the time the
//! process exits; the service's span hangs under the gateway's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;

use common::{exchange, free_port, wait_for_port};

const PMS: &str = env!("CARGO_BIN_EXE_pms");

/// An OTLP/HTTP collector's front: answers every POST 200 and hands its body over.
fn collector() -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a collector port");
    let port = listener.local_addr().expect("its address").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || serve(conn, &tx));
        }
    });
    (port, rx)
}

/// One keep-alive connection to the collector: each request's path and body.
fn serve(conn: TcpStream, tx: &mpsc::Sender<(String, Vec<u8>)>) {
    let mut reader = BufReader::new(conn.try_clone().expect("a second handle"));
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let _ = tx.send((path, body));
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if conn.write_all(ok.as_bytes()).is_err() {
            return;
        }
    }
}

/// The value of attribute `key` among OTLP/JSON `attributes`.
fn attribute<'a>(attributes: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    attributes
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

/// Sets the variables that send `command`'s spans to `collector` as OTLP/JSON, under the
/// process's own name.
fn exporting(command: &mut Command, collector: u16) -> &mut Command {
    command
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{collector}"),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_TRACES_SAMPLER")
        .env("PMS_LOG", "warn")
        .stdout(Stdio::null())
}

/// `pms users` on `port`, its data in `dir`, exporting to `collector`.
fn users(dir: &std::path::Path, port: u16, collector: u16) -> Child {
    let mut users = Command::new(PMS);
    users
        .args(["users", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir)
        .args(["--argon2-m-kib", "64", "--argon2-t", "1"])
        .env("PMS_JWT_SECRET", "0123456789abcdef0123456789abcdef");
    let child = exporting(&mut users, collector)
        .spawn()
        .expect("pms users starts");
    wait_for_port(port);
    child
}

/// Stops `child` with SIGTERM: it drains, and its exporter sends what it holds before the exit.
fn stop(mut child: Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = child.wait().expect("the process exits");
    assert!(status.success(), "{status}");
}

/// Every span the collector got, with its process's `service.name`, until it has `want` of
/// them or nothing more comes for 5 s.
fn exported_spans(
    exported: &mpsc::Receiver<(String, Vec<u8>)>,
    want: usize,
) -> Vec<(String, serde_json::Value)> {
    let mut spans = Vec::new();
    while spans.len() < want {
        let Ok((path, body)) = exported.recv_timeout(Duration::from_secs(5)) else {
            break;
        };
        assert_eq!(path, "/v1/traces");
        let doc: serde_json::Value = serde_json::from_slice(&body).expect("OTLP/JSON");
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            let service = attribute(&rs["resource"]["attributes"], "service.name")
                .and_then(|v| v["stringValue"].as_str())
                .unwrap_or_default()
                .to_owned();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    spans.push((service.clone(), span.clone()));
                }
            }
        }
    }
    spans
}

/// A string attribute of `span`.
fn text<'a>(span: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    attribute(&span["attributes"], key)?["stringValue"].as_str()
}

#[test]
fn a_service_exports_its_request_spans_as_children_of_the_callers_trace() {
    let (collector, exported) = collector();
    let dir = tempfile::tempdir().expect("a data directory");
    let port = free_port();
    let users = users(dir.path(), port, collector);
    let body = r#"{"email":"nobody@isep.ipp.pt","password":"Wrong#Password1"}"#;
    let resp = exchange(
        port,
        &format!(
            "POST /users/login HTTP/1.1\r\nhost: x\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(resp.starts_with("HTTP/1.1 401"), "{resp}");
    stop(users);

    let spans = exported_spans(&exported, 1);
    let (service, span) = spans
        .iter()
        .find(|(_, s)| s["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
        .unwrap_or_else(|| panic!("no span of the caller's trace among {spans:?}"));
    assert_eq!(service, "pms-users");
    assert_eq!(span["parentSpanId"], "00f067aa0ba902b7", "{span}");
    assert_eq!(span["name"], "POST", "{span}");
    assert_eq!(span["kind"], 2, "a server span: {span}");
    assert_eq!(text(span, "url.path"), Some("/users/login"), "{span}");
    // OTLP/JSON writes 64-bit integers as strings.
    let status = attribute(&span["attributes"], "http.response.status_code").expect("the status");
    assert_eq!(status["intValue"], "401", "an integer: {span}");
}

#[test]
fn the_gateway_exports_its_own_span_and_the_service_hangs_under_it() {
    let (collector, exported) = collector();
    let dir = tempfile::tempdir().expect("a data directory");
    let users_port = free_port();
    let users = users(dir.path(), users_port, collector);
    let (port, admin) = (free_port(), free_port());
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[admin]
listen = "127.0.0.1:{admin}"

[[listeners]]
name = "public"
listen = "127.0.0.1:{port}"

[[upstreams]]
name = "users-service"
endpoints = ["http://127.0.0.1:{users_port}"]

[[routes]]
name = "users"
match = {{ path_prefix = "/users" }}
upstream = "users-service"
"#
        ),
    )
    .expect("the gateway's config");
    let mut gateway = Command::new(PMS);
    gateway.arg("gateway").arg("--config").arg(&config);
    let gateway = exporting(&mut gateway, collector)
        .spawn()
        .expect("pms gateway starts");
    wait_for_port(port);

    // One with the client's trace, over the HTTP/1.1 fast path; one without, chunked, which
    // the fast path hands to hyper's front end.
    let body = r#"{"email":"nobody@isep.ipp.pt","password":"Wrong#Password1"}"#;
    let client_trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let resp = exchange(
        port,
        &format!(
            "POST /users/login HTTP/1.1\r\nhost: x\r\ntraceparent: {client_trace}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(resp.starts_with("HTTP/1.1 401"), "{resp}");
    let resp = exchange(
        port,
        &format!(
            "POST /users/login HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\
             content-type: application/json\r\nconnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        ),
    );
    assert!(resp.starts_with("HTTP/1.1 401"), "{resp}");
    stop(gateway);
    stop(users);

    let spans = exported_spans(&exported, 4);
    let of = |service: &str| -> Vec<&serde_json::Value> {
        spans
            .iter()
            .filter(|(s, _)| s == service)
            .map(|(_, span)| span)
            .collect()
    };
    let (gateway_spans, users_spans) = (of("pms-gateway"), of("pms-users"));
    assert_eq!(gateway_spans.len(), 2, "{spans:?}");
    assert_eq!(users_spans.len(), 2, "{spans:?}");
    for gw in &gateway_spans {
        assert_eq!(gw["name"], "POST", "{gw}");
        assert_eq!(gw["kind"], 2, "a server span: {gw}");
        assert_eq!(text(gw, "url.path"), Some("/users/login"), "{gw}");
        assert_eq!(text(gw, "pms.route"), Some("users"), "{gw}");
        assert_eq!(text(gw, "pms.upstream"), Some("users-service"), "{gw}");
        let status = attribute(&gw["attributes"], "http.response.status_code").expect("status");
        assert_eq!(status["intValue"], "401", "{gw}");
        // The service's span of the same request is the gateway span's child.
        let child = users_spans
            .iter()
            .find(|u| u["traceId"] == gw["traceId"])
            .unwrap_or_else(|| panic!("no service span in the trace of {gw}: {users_spans:?}"));
        assert_eq!(child["parentSpanId"], gw["spanId"], "{child}");
    }
    // The client's trace goes on under the client's span; the other starts at the gateway.
    let (with, without): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = gateway_spans
        .iter()
        .partition(|gw| gw["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(with.len(), 1, "{gateway_spans:?}");
    assert_eq!(with[0]["parentSpanId"], "00f067aa0ba902b7", "{}", with[0]);
    assert_eq!(
        without[0]["parentSpanId"].as_str().unwrap_or_default(),
        "",
        "a root: {}",
        without[0]
    );
}
