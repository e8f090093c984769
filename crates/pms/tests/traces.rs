//! The real `pms users` exporting its request spans over OTLP/HTTP to a collector on loopback
//! (a receiver that keeps what it is sent), as an operator turns it on: the standard
//! `OTEL_EXPORTER_OTLP_*` variables. The span must be a child of the caller's `traceparent`,
//! carry the service's name and the answer's status, and be out by the time the process exits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
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

#[test]
fn a_service_exports_its_request_spans_as_children_of_the_callers_trace() {
    let (collector, exported) = collector();
    let dir = tempfile::tempdir().expect("a data directory");
    let port = free_port();
    let mut users = Command::new(PMS)
        .args(["users", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--argon2-m-kib", "64", "--argon2-t", "1"])
        .env("PMS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
        .env("PMS_LOG", "warn")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{collector}"),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_TRACES_SAMPLER")
        .stdout(Stdio::null())
        .spawn()
        .expect("pms users starts");
    wait_for_port(port);
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
    // SIGTERM: the service drains, and the exporter sends what it holds before the exit.
    let killed = Command::new("kill")
        .args(["-TERM", &users.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = users.wait().expect("pms users exits");
    assert!(status.success(), "{status}");

    let mut spans = Vec::new();
    while let Ok((path, body)) = exported.recv_timeout(Duration::from_secs(5)) {
        assert_eq!(path, "/v1/traces");
        let doc: serde_json::Value = serde_json::from_slice(&body).expect("OTLP/JSON");
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            let service = attribute(&rs["resource"]["attributes"], "service.name").cloned();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    spans.push((service.clone(), span.clone()));
                }
            }
        }
        if !spans.is_empty() {
            break;
        }
    }
    let (service, span) = spans
        .iter()
        .find(|(_, s)| s["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
        .unwrap_or_else(|| panic!("no span of the caller's trace among {spans:?}"));
    assert_eq!(
        service.as_ref().map(|v| &v["stringValue"]),
        Some(&"pms-users".into())
    );
    assert_eq!(span["parentSpanId"], "00f067aa0ba902b7", "{span}");
    assert_eq!(span["name"], "POST", "{span}");
    assert_eq!(span["kind"], 2, "a server span: {span}");
    let attrs = &span["attributes"];
    assert_eq!(
        attribute(attrs, "url.path").map(|v| &v["stringValue"]),
        Some(&"/users/login".into()),
        "{span}"
    );
    // OTLP/JSON writes 64-bit integers as strings.
    let status = attribute(attrs, "http.response.status_code").expect("the status");
    assert_eq!(status["intValue"], "401", "an integer: {span}");
}
