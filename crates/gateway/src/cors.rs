//! Cross-origin requests from browsers (the Fetch standard's CORS protocol), for front ends
//! served from other origins (`[cors]`, off by default): the gateway answers their preflights
//! itself and marks the answers to an allowed origin's requests as readable by it.
//!
//! What it owns: the allow-list and what the gateway says to it. A preflight (`OPTIONS` with
//! `Origin` and `Access-Control-Request-Method`) from an allowed origin is answered 204 with
//! the methods, the request headers the browser asked for when all are allowed, and how long to
//! keep the answer; from any other origin, or asking for a method or header not allowed, 403
//! `cors_refused` with the reason. A preflight never reaches an upstream and needs no token
//! (browsers send none). Every other answer to a request from an allowed origin — upstream's or
//! the gateway's own, errors included — carries `Access-Control-Allow-Origin` (that origin),
//! `Vary: Origin` and the headers a page may read; an answer to any other origin carries none,
//! so the browser keeps it from the page. No credentials mode: tokens travel in `Authorization`,
//! which a page sends itself.
//!
//! Why at the gateway: one place decides which origins may call the API, for every service
//! behind it, and a preflight costs no upstream round trip.

use http::header::{
    HeaderName, HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, Method};

/// Request headers a page may send unless the config says otherwise.
pub const DEFAULT_ALLOW_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "idempotency-key",
    "x-request-id",
];
/// Response headers a page may read unless the config says otherwise (beyond the CORS-safelisted
/// ones every page reads).
pub const DEFAULT_EXPOSE_HEADERS: &[&str] = &["x-request-id", "retry-after", "location", "allow"];
/// How long a browser keeps a preflight's answer unless the config says otherwise, seconds.
pub const DEFAULT_MAX_AGE_S: u64 = 600;
/// The methods a page may use.
const METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// The gateway's CORS settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// The origins allowed (`https://app.example.com`), or any with `*`.
    origins: Vec<String>,
    any: bool,
    allow_headers: Vec<String>,
    allow_headers_value: HeaderValue,
    expose_value: HeaderValue,
    max_age_value: HeaderValue,
}

/// What is wrong with a `[cors]` setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CorsError(String);

/// What the gateway makes of a request's `Origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// A preflight from an allowed origin: answer it with these headers.
    Preflight(HeaderMap),
    /// A preflight the gateway refuses, with why.
    Refused(String),
    /// Any other request from an allowed origin: its answer gets these headers.
    Allowed(HeaderMap),
    /// No `Origin`, or one not allowed: its answer gets nothing.
    Nothing,
}

impl Cors {
    /// The settings for `origins` (each `scheme://host[:port]`, or `*` alone), `allow_headers`
    /// and `expose_headers` (header names), and `max_age_s`.
    ///
    /// # Errors
    /// [`CorsError`] naming the first origin or header name that is not one.
    pub fn new(
        origins: &[String],
        allow_headers: Option<&[String]>,
        expose_headers: Option<&[String]>,
        max_age_s: Option<u64>,
    ) -> Result<Self, CorsError> {
        if origins.is_empty() {
            return Err(CorsError(
                "allow_origins: name at least one origin (or leave [cors] out)".into(),
            ));
        }
        let any = origins.iter().any(|o| o == "*");
        if any && origins.len() > 1 {
            return Err(CorsError("allow_origins: \"*\" stands alone".into()));
        }
        let mut checked = Vec::with_capacity(origins.len());
        for o in origins.iter().filter(|o| *o != "*") {
            checked.push(origin(o)?);
        }
        let names = |field: &str, given: Option<&[String]>, default: &[&str]| {
            let list: Vec<String> = match given {
                Some(g) => g.iter().map(|h| h.trim().to_ascii_lowercase()).collect(),
                None => default.iter().map(|h| (*h).to_owned()).collect(),
            };
            for h in &list {
                HeaderName::from_bytes(h.as_bytes())
                    .map_err(|_| CorsError(format!("{field}: {h:?} is not a header name")))?;
            }
            Ok::<_, CorsError>(list)
        };
        let allow_headers = names("allow_headers", allow_headers, DEFAULT_ALLOW_HEADERS)?;
        let expose = names("expose_headers", expose_headers, DEFAULT_EXPOSE_HEADERS)?;
        let value = |list: &[String]| {
            HeaderValue::from_str(&list.join(", "))
                .map_err(|_| CorsError("a header list is not a header value".into()))
        };
        Ok(Self {
            origins: checked,
            any,
            allow_headers_value: value(&allow_headers)?,
            allow_headers,
            expose_value: value(&expose)?,
            max_age_value: HeaderValue::from(max_age_s.unwrap_or(DEFAULT_MAX_AGE_S)),
        })
    }

    /// Whether a page of `origin` may call the API.
    fn allows(&self, origin: &[u8]) -> bool {
        self.any
            || self
                .origins
                .iter()
                .any(|o| o.as_bytes().eq_ignore_ascii_case(origin))
    }

    /// What to do with a request of `method` with `headers`.
    pub fn asked(&self, method: &Method, headers: &HeaderMap) -> Asked {
        let Some(origin) = headers.get(ORIGIN) else {
            return Asked::Nothing;
        };
        let preflight = method == Method::OPTIONS;
        let wanted = headers.get(ACCESS_CONTROL_REQUEST_METHOD);
        if !self.allows(origin.as_bytes()) {
            return match (preflight, wanted) {
                (true, Some(_)) => Asked::Refused(format!(
                    "the origin {} may not call this API",
                    String::from_utf8_lossy(origin.as_bytes())
                )),
                _ => Asked::Nothing,
            };
        }
        let mut out = HeaderMap::new();
        out.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        out.append(VARY, HeaderValue::from_static("Origin"));
        let (true, Some(wanted)) = (preflight, wanted) else {
            out.insert(ACCESS_CONTROL_EXPOSE_HEADERS, self.expose_value.clone());
            return Asked::Allowed(out);
        };
        let method_ok = wanted
            .to_str()
            .ok()
            .and_then(|m| m.parse::<Method>().ok())
            .is_some_and(|m| METHODS.split(", ").any(|allowed| allowed == m.as_str()));
        if !method_ok {
            return Asked::Refused(format!(
                "the method {} is not allowed",
                String::from_utf8_lossy(wanted.as_bytes())
            ));
        }
        let asked_headers: Vec<String> = headers
            .get_all(ACCESS_CONTROL_REQUEST_HEADERS)
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("\u{0}").split(','))
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        if let Some(other) = asked_headers
            .iter()
            .find(|h| !self.allow_headers.iter().any(|a| a == *h))
        {
            return Asked::Refused(format!("the request header {other:?} is not allowed"));
        }
        out.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(METHODS),
        );
        out.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            self.allow_headers_value.clone(),
        );
        out.insert(ACCESS_CONTROL_MAX_AGE, self.max_age_value.clone());
        Asked::Preflight(out)
    }
}

/// `text` when it is a serialized origin: `http` or `https`, a host, an optional port, nothing
/// after (no path, not even `/`); lower-cased.
fn origin(text: &str) -> Result<String, CorsError> {
    let bad = || {
        CorsError(format!(
            "allow_origins: {text:?} is not an origin (scheme://host[:port], no path)"
        ))
    };
    let (scheme, rest) = text.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains(['/', '?', '#', '@'])
    {
        return Err(bad());
    }
    let uri: http::Uri = text.parse().map_err(|_| bad())?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad());
    }
    Ok(text.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cors(origins: &[&str]) -> Cors {
        let origins: Vec<String> = origins.iter().map(|o| (*o).to_owned()).collect();
        Cors::new(&origins, None, None, None).expect("cors")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    #[test]
    fn an_allowed_origins_preflight_is_answered_and_others_refused() {
        let c = cors(&["https://app.example.com", "http://localhost:5173"]);
        let preflight = |origin: &str, method: &str, asked: &str| {
            c.asked(
                &Method::OPTIONS,
                &headers(&[
                    ("origin", origin),
                    ("access-control-request-method", method),
                    ("access-control-request-headers", asked),
                ]),
            )
        };
        let Asked::Preflight(h) = preflight(
            "https://APP.example.com",
            "PUT",
            "Content-Type, authorization",
        ) else {
            panic!("answered")
        };
        assert_eq!(h[ACCESS_CONTROL_ALLOW_ORIGIN], "https://APP.example.com");
        assert_eq!(h[VARY], "Origin");
        assert_eq!(h[ACCESS_CONTROL_MAX_AGE], "600");
        assert!(h[ACCESS_CONTROL_ALLOW_METHODS]
            .to_str()
            .expect("text")
            .contains("PUT"));
        assert!(matches!(
            preflight("https://evil.example", "GET", ""),
            Asked::Refused(_)
        ));
        assert!(matches!(
            preflight("http://localhost:5173", "TRACE", ""),
            Asked::Refused(_)
        ));
        assert!(matches!(
            preflight("http://localhost:5173", "GET", "x-secret"),
            Asked::Refused(m) if m.contains("x-secret")
        ));
    }

    #[test]
    fn requests_from_an_allowed_origin_are_marked_and_others_left_alone() {
        let c = cors(&["https://app.example.com"]);
        let asked = |m: Method, origin: Option<&str>| {
            let h = origin.map_or_else(HeaderMap::new, |o| headers(&[("origin", o)]));
            c.asked(&m, &h)
        };
        let Asked::Allowed(h) = asked(Method::GET, Some("https://app.example.com")) else {
            panic!("allowed")
        };
        assert!(h[ACCESS_CONTROL_EXPOSE_HEADERS]
            .to_str()
            .expect("text")
            .contains("x-request-id"));
        // An OPTIONS without a request method is a plain request, not a preflight.
        assert!(matches!(
            asked(Method::OPTIONS, Some("https://app.example.com")),
            Asked::Allowed(_)
        ));
        assert_eq!(
            asked(Method::GET, Some("https://other.example")),
            Asked::Nothing
        );
        assert_eq!(asked(Method::GET, None), Asked::Nothing);
        let any = cors(&["*"]);
        assert!(matches!(
            any.asked(&Method::GET, &headers(&[("origin", "https://x.example")])),
            Asked::Allowed(_)
        ));
    }

    #[test]
    fn bad_settings_are_named() {
        for (origins, why) in [
            (vec![], "at least one"),
            (vec!["*", "https://a.example"], "stands alone"),
            (vec!["https://a.example/"], "not an origin"),
            (vec!["ftp://a.example"], "not an origin"),
            (vec!["a.example"], "not an origin"),
            (vec!["https://"], "not an origin"),
        ] {
            let origins: Vec<String> = origins.into_iter().map(String::from).collect();
            let e = Cors::new(&origins, None, None, None).expect_err(why);
            assert!(e.to_string().contains(why), "{e}");
        }
        let e =
            Cors::new(&["*".into()], Some(&["bad header".into()]), None, None).expect_err("header");
        assert!(e.to_string().starts_with("allow_headers"), "{e}");
    }
}
