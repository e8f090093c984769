use std::time::Duration;

use http::Method;

use super::*;
use crate::transform::XmlLayout;

fn resolve(text: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env: std::collections::HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse(text, "gw.toml")?.resolve("gw.toml", Path::new("."), &|k| env.get(k).cloned())
}

fn problems(text: &str) -> Vec<String> {
    resolve(text, &[])
        .expect_err("config must be rejected")
        .problems
}

const MINIMAL: &str = r#"
[[listeners]]
listen = "127.0.0.1:0"
[[upstreams]]
name = "u"
endpoints = ["http://127.0.0.1:1"]
[[routes]]
match = { path_prefix = "/" }
upstream = "u"
"#;

#[test]
fn minimal_config_gets_defaults() {
    let s = resolve(MINIMAL, &[]).unwrap();
    assert_eq!(s.admin_listen.to_string(), DEFAULT_ADMIN_LISTEN);
    assert_eq!(s.limits.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(s.limits.body_read_timeout, DEFAULT_BODY_READ_TIMEOUT);
    assert_eq!(s.limits.send_timeout, pms_net::serve::DEFAULT_SEND_TIMEOUT);
    assert_eq!(s.limits.idle_timeout, pms_net::serve::DEFAULT_IDLE_TIMEOUT);
    assert_eq!(s.upstreams[0].protocol, UpstreamProtocol::H1);
    assert_eq!(
        s.upstreams[0].request_timeout,
        Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS)
    );
    assert_eq!(
        s.upstreams[0].read_timeout,
        Duration::from_millis(DEFAULT_READ_TIMEOUT_MS)
    );
    assert_eq!(
        s.upstreams[0].fail_timeout,
        Duration::from_millis(DEFAULT_FAIL_TIMEOUT_MS)
    );
    assert_eq!(s.routes[0].name, "/*");
    assert!(!s.routes[0].jwt);
    assert!(s.jwt.is_none());
    assert_eq!(s.io, IoDriver::Auto);
}

#[test]
fn runtime_io_picks_the_socket_driver() {
    let with = |io: &str| format!("[runtime]\nio = \"{io}\"\n{MINIMAL}");
    assert_eq!(
        resolve(&with("io_uring"), &[]).unwrap().io,
        IoDriver::IoUring
    );
    assert_eq!(resolve(&with("epoll"), &[]).unwrap().io, IoDriver::Epoll);
    assert_eq!(resolve(&with("auto"), &[]).unwrap().io, IoDriver::Auto);
    let p = problems(&with("uring"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains("runtime.io") && p[0].contains("\"uring\""),
        "{p:?}"
    );
}

#[test]
fn unknown_keys_are_errors_with_the_file_and_position() {
    let p = problems(&format!("{MINIMAL}\n[limits]\nmax_conections = 3\n"));
    assert_eq!(p.len(), 1);
    assert!(p[0].starts_with("gw.toml: "), "{p:?}");
    assert!(p[0].contains("max_conections"), "{p:?}");
    assert!(p[0].contains("line"), "{p:?}");
}

#[test]
fn every_problem_is_reported_with_its_key() {
    let p = problems(
        r#"
[admin]
listen = "nowhere"
[limits]
body_read_timeout_ms = 0
send_timeout_ms = 0
idle_timeout_ms = 0
[[listeners]]
listen = "127.0.0.1:99999"
[[upstreams]]
name = "a"
endpoints = ["http://127.0.0.1:1/path", "ftp://x"]
protocol = "h3"
[[upstreams]]
name = "b"
endpoints = ["http://127.0.0.1:2"]
protocol = "h2"
read_timeout_ms = 0
fail_timeout_ms = 0
health_check = { path = "readyz", interval_ms = 0, timeout_ms = 0, unhealthy_after = 0, healthy_after = 0 }
[[routes]]
match = { path = "users" , methods = ["G ET"] }
upstream = "missing"
auth = "magic"
transform = "xml-to-json"
"#,
    );
    let joined = p.join("\n");
    for expected in [
        "gw.toml: admin.listen: \"nowhere\" is not an IP:port",
        "gw.toml: limits.body_read_timeout_ms: must be positive",
        "gw.toml: limits.send_timeout_ms: must be positive",
        "gw.toml: limits.idle_timeout_ms: must be positive",
        "gw.toml: listeners[0].listen:",
        "gw.toml: upstreams[0].protocol: \"h3\" is not a protocol",
        "gw.toml: upstreams[0].endpoints[0]: \"http://127.0.0.1:1/path\" must not carry a path",
        "gw.toml: upstreams[0].endpoints[1]: \"ftp://x\" must be http://host:port",
        "gw.toml: upstreams[1].endpoints[0]: protocol h2 needs an https:// endpoint",
        "gw.toml: upstreams[1].read_timeout_ms: must be positive",
        "gw.toml: upstreams[1].fail_timeout_ms: must be positive",
        "gw.toml: upstreams[1].health_check.path: \"readyz\" is not a path",
        "gw.toml: upstreams[1].health_check.interval_ms: must be positive",
        "gw.toml: upstreams[1].health_check.timeout_ms: must be positive",
        "gw.toml: upstreams[1].health_check.unhealthy_after: must be at least 1",
        "gw.toml: upstreams[1].health_check.healthy_after: must be at least 1",
        "gw.toml: routes[0].match: \"users\" must start with '/'",
        "gw.toml: routes[0].match.methods[0]: \"G ET\" is not a method",
        "gw.toml: routes[0].upstream: no upstream named \"missing\"",
        "gw.toml: routes[0].auth: \"magic\" is not an auth mode",
        "gw.toml: routes[0].transform: \"xml-to-json\" is not a transform",
    ] {
        assert!(
            joined.contains(expected),
            "missing {expected:?} in:\n{joined}"
        );
    }
}

#[test]
fn discovered_upstreams() {
    let with = |upstream: &str| {
        format!(
            "[[listeners]]\nlisten = \"127.0.0.1:0\"\n[[upstreams]]\nname = \"u\"\n{upstream}\n\
             [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"u\"\n"
        )
    };
    let s = resolve(
        &with(r#"discover = { dns = "http://users-pods.pms.svc:8080" }"#),
        &[],
    )
    .unwrap();
    let u = &s.upstreams[0];
    assert!(u.endpoints.is_empty(), "found at run time");
    assert_eq!(
        u.discovery,
        Some(Discovery {
            host: "users-pods.pms.svc".into(),
            port: 8080,
            interval: Duration::from_millis(DEFAULT_DISCOVER_INTERVAL_MS),
            max_endpoints: DEFAULT_DISCOVER_MAX_ENDPOINTS,
        })
    );
    let s = resolve(
        &with(r#"discover = { dns = "http://[::1]", interval_ms = 250, max_endpoints = 3 }"#),
        &[],
    )
    .unwrap();
    let d = s.upstreams[0].discovery.clone().unwrap();
    assert_eq!((d.host.as_str(), d.port), ("::1", 80));
    assert_eq!(
        (d.interval, d.max_endpoints),
        (Duration::from_millis(250), 3)
    );

    for (upstream, expected) in [
        (
            "endpoints = [\"http://a:1\"]\ndiscover = { dns = \"http://b:1\" }",
            "upstreams[0].discover: list endpoints or discover them, not both",
        ),
        (
            "protocol = \"h1\"",
            "upstreams[0].endpoints: list at least one endpoint, or discover them",
        ),
        (
            "discover = { dns = \"https://b:1\" }",
            "upstreams[0].discover.dns: discovery connects to each address",
        ),
        (
            "discover = { dns = \"http://b:1/api\" }",
            "upstreams[0].discover.dns: \"http://b:1/api\" must be http://name:port, with no path",
        ),
        (
            "discover = { dns = \"b:1\" }",
            "upstreams[0].discover.dns: \"b:1\" must be http://name:port",
        ),
        (
            "protocol = \"h2\"\ndiscover = { dns = \"http://b:1\" }",
            "upstreams[0].discover: protocol h2 needs TLS, which discovery does not do",
        ),
        (
            "discover = { dns = \"http://b:1\", interval_ms = 0, max_endpoints = 0 }",
            "upstreams[0].discover.interval_ms: must be positive",
        ),
        (
            "discover = { dns = \"http://b:1\", interval_ms = 0, max_endpoints = 0 }",
            "upstreams[0].discover.max_endpoints: must be at least 1",
        ),
    ] {
        let joined = problems(&with(upstream)).join("\n");
        assert!(
            joined.contains(expected),
            "missing {expected:?} in:\n{joined}"
        );
    }
}

#[test]
fn jwt_problems() {
    let base = MINIMAL.replace("upstream = \"u\"", "upstream = \"u\"\nauth = \"jwt\"");
    let p = problems(&base);
    assert!(
        p.iter()
            .any(|l| l.contains("routes[0].auth: \"jwt\" needs an [auth.jwt] section")),
        "{p:?}"
    );

    let p = problems(&format!(
        "{base}\n[auth.jwt]\nalgorithms = [\"none\"]\nsecret_env = \"S\"\n"
    ));
    let joined = p.join("\n");
    assert!(
        joined.contains("auth.jwt.algorithms[0]: the \"none\" algorithm is never accepted"),
        "{joined}"
    );
    assert!(
        joined.contains("auth.jwt.secret_env: environment variable S is unset or empty"),
        "{joined}"
    );
    assert!(
        !joined.contains("routes[0]"),
        "no cascade onto routes: {joined}"
    );

    let p = problems(&format!(
        "{base}\n[auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"S\"\njwks_url = \"http://x/\"\n"
    ));
    assert!(p.iter().any(|l| l.contains("set exactly one of")), "{p:?}");

    let r = resolve(
        &format!("{base}\n[auth.jwt]\nalgorithms = [\"ES256\"]\nsecret_env = \"S\"\n"),
        &[("S", "secret")],
    );
    let p = r.expect_err("secret for ES256").problems;
    assert!(
        p.iter()
            .any(|l| l.contains("auth.jwt: [ES256] cannot be verified with a shared secret")),
        "{p:?}"
    );

    let s = resolve(
        &format!("{base}\n[auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"S\"\nissuer = \"pms\"\naudience = [\"a\", \"b\"]\n"),
        &[("S", "secret")],
    )
    .unwrap();
    let jwt = s.jwt.unwrap();
    assert_eq!(jwt.verifier.issuers, Some(vec!["pms".to_string()]));
    assert_eq!(
        jwt.verifier.audiences,
        Some(vec!["a".to_string(), "b".to_string()])
    );
    let headers: Vec<(&str, &str)> = jwt
        .claims_to_headers
        .iter()
        .map(|(c, h)| (c.as_str(), h.as_str()))
        .collect();
    assert_eq!(headers, [("role", "x-userrole"), ("sub", "x-userid")]);
}

#[test]
fn tls_files_that_do_not_exist_are_named() {
    let p = problems(&MINIMAL.replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:0\"\ntls = { cert = \"/nonexistent/c.pem\", key = \"/nonexistent/k.pem\" }",
    ));
    assert!(
        p.iter()
            .any(|l| l.contains("listeners[0].tls: /nonexistent/c.pem")),
        "{p:?}"
    );
}

#[test]
fn transform_layouts() {
    let t = MINIMAL.replace(
        "upstream = \"u\"",
        "upstream = \"u\"\ntransform = \"json-to-xml\"\nxml_layout = \"ballerina-compat\"",
    );
    let s = resolve(&t, &[]).unwrap();
    assert_eq!(s.routes[0].json_to_xml, Some(XmlLayout::BallerinaCompat));
    let t = MINIMAL.replace(
        "upstream = \"u\"",
        "upstream = \"u\"\ntransform = \"json-to-xml\"\nxml_root = \"1bad\"",
    );
    assert!(problems(&t)
        .iter()
        .any(|l| l.contains("routes[0].xml_root: \"1bad\" is not a valid XML element name")));
    let t = MINIMAL.replace(
        "upstream = \"u\"",
        "upstream = \"u\"\nxml_layout = \"generic\"",
    );
    assert!(problems(&t).iter().any(|l| l.contains("need transform")));
}

#[test]
fn shipped_configs_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let gw = load(&root.join("gateway.toml"), &|k| match k {
        "PMS_JWT_SECRET" => Some("s3cret".into()),
        "PMS_FORWARDER_KEY" => Some("the-front-office-key".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(gw.routes.len(), 14);
    assert!(gw.jwt.is_some());
    assert!(gw.forwarder.is_some(), "the front office names its people");
    // The front office signs people in itself: its pages pass without a token, and the site's
    // bare address goes there too.
    for name in ["frontOffice", "home"] {
        let front = gw.routes.iter().find(|r| r.name == name).unwrap();
        assert!(!front.jwt, "{name}");
    }
    let login = gw.routes.iter().find(|r| r.name == "login").unwrap();
    assert!(!login.jwt);
    assert_eq!(login.methods, vec![Method::POST]);
    // Both open routes are limited per client.
    for name in ["login", "register"] {
        let route = gw.routes.iter().find(|r| r.name == name).unwrap();
        assert_eq!(
            route.rate_limit.map(|l| l.by),
            Some(LimitBy::Client),
            "{name}"
        );
    }
    let echo = load(&root.join("echo.toml"), &|_| None).unwrap();
    assert_eq!(echo.routes[1].json_to_xml, Some(XmlLayout::BallerinaCompat));
}

#[test]
fn rate_limits() {
    let route = |limit: &str, auth: &str| {
        format!(
            "{MINIMAL}{auth}\nrate_limit = {limit}\n{}",
            if auth.is_empty() {
                ""
            } else {
                "[auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"S\"\n"
            }
        )
    };
    let with = |limit: &str| {
        resolve(&route(limit, ""), &[])
            .unwrap()
            .routes
            .remove(0)
            .rate_limit
            .expect("a limit")
    };
    let l = with("{ by = \"client\", per_second = 4 }");
    assert_eq!(l.by, LimitBy::Client);
    assert_eq!(l.period, Duration::from_millis(250));
    assert_eq!(l.burst.get(), 4, "the burst defaults to the count");
    let l = with("{ by = \"client\", per_minute = 30, burst = 100 }");
    assert_eq!(l.period, Duration::from_secs(2));
    assert_eq!(l.burst.get(), 100);
    let s = resolve(
        &route("{ by = \"subject\", per_minute = 1 }", "auth = \"jwt\""),
        &[("S", "s3cret")],
    )
    .unwrap();
    assert_eq!(s.routes[0].rate_limit.map(|l| l.by), Some(LimitBy::Subject));

    for (limit, expected) in [
        (
            "{ by = \"subject\", per_second = 1 }",
            "routes[0].rate_limit.by: \"subject\" needs auth = \"jwt\"",
        ),
        (
            "{ by = \"ip\", per_second = 1 }",
            "routes[0].rate_limit.by: \"ip\" is not a key",
        ),
        (
            "{ by = \"client\" }",
            "routes[0].rate_limit: set exactly one of per_second, per_minute",
        ),
        (
            "{ by = \"client\", per_second = 1, per_minute = 60 }",
            "routes[0].rate_limit: set exactly one of per_second, per_minute",
        ),
        (
            "{ by = \"client\", per_second = 0 }",
            "routes[0].rate_limit: the rate must be at least 1",
        ),
        (
            "{ by = \"client\", per_second = 1, burst = 0 }",
            "routes[0].rate_limit.burst: must be at least 1",
        ),
        (
            "{ by = \"client\", per_second = 4000000000 }",
            "routes[0].rate_limit: more than one request per nanosecond",
        ),
    ] {
        let p = problems(&route(limit, ""));
        assert_eq!(p.len(), 1, "{limit}: {p:?}");
        assert!(p[0].contains(expected), "{limit}: {p:?}");
    }
}

#[test]
fn cors_settings_are_checked() {
    let with = |cors: &str| format!("{MINIMAL}\n[cors]\n{cors}\n");
    assert!(
        problems(&with("allow_origins = [\"https://app.example.com/\"]"))
            .iter()
            .any(|l| l.contains("cors: allow_origins") && l.contains("not an origin"))
    );
    assert!(problems(&with("allow_origins = []"))
        .iter()
        .any(|l| l.contains("at least one")));
    assert!(problems(&with("allow_origins = [\"*\"]\nsurprise = 1"))
        .iter()
        .any(|l| l.contains("surprise")));
    let ok = resolve(&with("allow_origins = [\"http://localhost:5173\"]"), &[]).expect("valid");
    assert!(ok.cors.is_some());
    assert!(
        resolve(MINIMAL, &[]).expect("valid").cors.is_none(),
        "off by default"
    );
}
