//! Helpers the `pms` binary's integration tests share: free ports, waiting for a listener, one
//! raw HTTP/1.1 exchange, and the front office's pages as a browser without scripts gets them.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
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
    exchange_from(Ipv4Addr::LOCALHOST, port, request)
}

/// [`exchange`] from the loopback address `source` (any of 127.0.0.0/8): another client, as
/// the gateway sees it.
pub fn exchange_from(source: Ipv4Addr, port: u16, request: &str) -> String {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket
        .connect(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())
        .unwrap();
    let mut s: TcpStream = socket.into();
    std::io::Write::write_all(&mut s, request.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

/// An answer split into its status, headers (lower-case names) and body.
pub struct Page {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Page {
    pub fn parse(raw: &str) -> Self {
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Self {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The session id the answer sets, if it sets one.
    pub fn session(&self) -> Option<String> {
        let cookie = self.header("set-cookie")?;
        let value = cookie.strip_prefix("pms_session=")?.split(';').next()?;
        (!value.is_empty()).then(|| value.to_owned())
    }

    /// The CSRF token of the page's first form.
    pub fn csrf(&self) -> String {
        self.hidden("csrf")
    }

    /// The value of the page's first hidden field `name` (a 64-character token).
    pub fn hidden(&self, name: &str) -> String {
        let field = format!("name=\"{name}\" value=\"");
        let at = self.body.find(&field).expect("a form") + field.len();
        self.body[at..at + 64].to_owned()
    }
}

/// `GET path` on `port`, with session cookie `session`.
pub fn get(port: u16, path: &str, session: Option<&str>) -> Page {
    get_from(Ipv4Addr::LOCALHOST, port, path, session)
}

/// [`get`] from the loopback address `source`.
pub fn get_from(source: Ipv4Addr, port: u16, path: &str, session: Option<&str>) -> Page {
    let cookie = session.map_or(String::new(), |s| format!("cookie: pms_session={s}\r\n"));
    Page::parse(&exchange_from(
        source,
        port,
        &format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{cookie}connection: close\r\n\r\n"),
    ))
}

/// A form posted to `path` on `port`, with session cookie `session`.
pub fn post(port: u16, path: &str, session: Option<&str>, form: &[(&str, &str)]) -> Page {
    post_from(Ipv4Addr::LOCALHOST, port, path, session, form)
}

/// [`post`] from the loopback address `source`.
pub fn post_from(
    source: Ipv4Addr,
    port: u16,
    path: &str,
    session: Option<&str>,
    form: &[(&str, &str)],
) -> Page {
    let cookie = session.map_or(String::new(), |s| format!("cookie: pms_session={s}\r\n"));
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    let body = body.join("&");
    Page::parse(&exchange_from(
        source,
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{cookie}content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    ))
}

/// Form encoding (`application/x-www-form-urlencoded`, UTF-8) of a value.
pub fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                char::from(b).to_string()
            }
            b' ' => "+".into(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// The front office's answer to signing `email` in on `port` with `password`, as a browser
/// does it: the sign-in form, then its post with the form's session and CSRF token.
pub fn try_sign_in(port: u16, email: &str, password: &str) -> Page {
    let signin = get(port, "/app/signin", None);
    assert_eq!(signin.status, 200, "{}", signin.body);
    post(
        port,
        "/app/signin",
        signin.session().as_deref(),
        &[
            ("csrf", &signin.csrf()),
            ("email", email),
            ("password", password),
        ],
    )
}

/// Signs `email` in through the front office on `port` (the sign-in form, then its post);
/// returns the signed-in session's id.
pub fn sign_in(port: u16, email: &str, password: &str) -> String {
    let r = try_sign_in(port, email, password);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/app/account"));
    r.session().expect("signed in")
}
