//! Helpers the `pms` binary's integration tests share: free ports, waiting for a listener, one
//! raw HTTP/1.1 exchange.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A port that was free a moment ago, away from the ports the kernel hands out by itself.
pub fn free_port() -> u16 {
    pms_net::port::free_loopback_port().expect("a free port")
}

/// Waits until something listens on `port` (20 s at most).
pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One HTTP/1.1 exchange on a fresh connection (the request must say `connection: close`).
pub fn exchange(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut s, request.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}
