//! The front office's one way into the system: JSON requests to the gateway, as any client
//! makes them, with the signed-in user's bearer token. No service is called directly.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::Value;
use std::net::IpAddr;

/// Longest wait for the gateway's answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request could not be built (a path or token that does not fit HTTP).
    #[error("building the request: {0}")]
    Request(String),
    /// No answer: connection refused, reset, or the timeout.
    #[error("the gateway did not answer: {0}")]
    Unreachable(String),
}

/// An answer: its status and JSON body (`Null` when it had none or it was not JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Body.
    pub body: Value,
}

impl Reply {
    /// The API's error message (`{"error":{"message"}}`), or the status when it has none.
    pub fn message(&self) -> String {
        self.body["error"]["message"].as_str().map_or_else(
            || format!("the system answered {}", self.status),
            str::to_owned,
        )
    }

    /// The status to answer a refused form with: the API's own 4xx (the person can fix it), or
    /// 502 when the system failed.
    pub fn refused_status(&self) -> StatusCode {
        if self.status.is_client_error() {
            self.status
        } else {
            StatusCode::BAD_GATEWAY
        }
    }

    /// The field the API's error names, if any.
    pub fn field(&self) -> Option<&str> {
        self.body["error"]["field"].as_str()
    }
}

/// Where the gateway names the client, and a forwarder the person it calls for.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The header the gateway's trusted forwarder proves itself with (the gateway's
/// `forwarder::FORWARDER_KEY`).
const FORWARDER_KEY: &str = "x-pms-forwarder-key";

/// A client of one gateway.
#[derive(Debug, Clone)]
pub struct Gateway {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The key the gateway trusts this front office's `X-Forwarded-For` with, if it has one.
    forwarder_key: Option<HeaderValue>,
}

impl Gateway {
    /// A client of the gateway at `base` (`http://127.0.0.1:8080`), which trusts it as its
    /// forwarder when `forwarder_key` is the gateway's `[auth.forwarder]` key.
    ///
    /// # Errors
    /// [`GatewayError::Request`] for a key that cannot be a header value.
    pub fn new(base: &str, forwarder_key: Option<&str>) -> Result<Self, GatewayError> {
        let forwarder_key = forwarder_key
            .map(|k| {
                let mut v = HeaderValue::from_str(k).map_err(|_| {
                    GatewayError::Request("the forwarder key is not header text".into())
                })?;
                v.set_sensitive(true);
                Ok(v)
            })
            .transpose()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            client: Client::builder(hyper_util::rt::TokioExecutor::new()).build_http(),
            forwarder_key,
        })
    }

    /// `method path` with `body` as JSON (none for `Null`) and `token` as the bearer.
    ///
    /// # Errors
    /// [`GatewayError`] when there is no answer at all; any HTTP answer is a [`Reply`].
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Result<Reply, GatewayError> {
        self.call_once(method, path, token, body, None).await
    }

    /// [`Gateway::call`] with an `Idempotency-Key` when `key` is given: the API answers a
    /// request sent again under the same key as it did the first time, and does it once.
    ///
    /// # Errors
    /// As [`Gateway::call`].
    pub async fn call_once(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: &Value,
        key: Option<&str>,
    ) -> Result<Reply, GatewayError> {
        let mut req = self.request(method, path);
        if let Some(t) = token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(k) = key {
            req = req.header(pms_vocab::IDEMPOTENCY_KEY, k);
        }
        self.send(req, body).await
    }

    /// `method path` on an open route (signing in, registering) for the person at `person`: the
    /// gateway, which trusts this front office by its key, counts the request against that
    /// person's rate limit rather than against everyone this front office serves. Without a
    /// key or an address, the front office's own.
    ///
    /// # Errors
    /// As [`Gateway::call`].
    pub async fn call_for(
        &self,
        person: Option<IpAddr>,
        method: Method,
        path: &str,
        body: &Value,
    ) -> Result<Reply, GatewayError> {
        let mut req = self.request(method, path);
        if let (Some(ip), Some(key)) = (person, &self.forwarder_key) {
            req = req
                .header(X_FORWARDED_FOR, ip.to_string())
                .header(FORWARDER_KEY, key.clone());
        }
        self.send(req, body).await
    }

    /// `GET path` as `token`, the answer's body as it came (a CSV export), with its status and
    /// content type.
    ///
    /// # Errors
    /// As [`Gateway::call`].
    pub async fn download(
        &self,
        path: &str,
        token: &str,
    ) -> Result<(StatusCode, Option<HeaderValue>, Bytes), GatewayError> {
        let req = self
            .request(Method::GET, path)
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::new()))
            .map_err(|e| GatewayError::Request(e.to_string()))?;
        let answer = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| GatewayError::Unreachable(e.to_string()))?;
            let (status, kind) = (
                resp.status(),
                resp.headers().get(http::header::CONTENT_TYPE).cloned(),
            );
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| GatewayError::Unreachable(e.to_string()))?
                .to_bytes();
            Ok((status, kind, bytes))
        };
        tokio::time::timeout(TIMEOUT, answer)
            .await
            .map_err(|_| GatewayError::Unreachable(format!("no answer within {TIMEOUT:?}")))?
    }

    fn request(&self, method: Method, path: &str) -> http::request::Builder {
        http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(http::header::ACCEPT, "application/json")
    }

    async fn send(
        &self,
        mut req: http::request::Builder,
        body: &Value,
    ) -> Result<Reply, GatewayError> {
        let payload = if body.is_null() {
            Bytes::new()
        } else {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
            Bytes::from(body.to_string())
        };
        let req = req
            .body(Full::new(payload))
            .map_err(|e| GatewayError::Request(e.to_string()))?;
        let answer = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| GatewayError::Unreachable(e.to_string()))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| GatewayError::Unreachable(e.to_string()))?
                .to_bytes();
            Ok(Reply {
                status,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            })
        };
        tokio::time::timeout(TIMEOUT, answer)
            .await
            .map_err(|_| GatewayError::Unreachable(format!("no answer within {TIMEOUT:?}")))?
    }
}

/// The address of the person a request to the front office came from, as the gateway in front
/// of it wrote it: the last entry of `X-Forwarded-For`. The front office is reached only
/// through the gateway (it listens on loopback or a cluster-internal address), so the last
/// entry is the gateway's; the entries before it are whatever the client claimed.
pub fn person(headers: &HeaderMap) -> Option<IpAddr> {
    headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .next_back()?
        .to_str()
        .ok()?
        .rsplit(',')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The subject and role in a token's claims. The front office got the token from the gateway
/// itself a moment ago, so it reads them without verifying the signature: the services verify
/// every use of it.
pub fn claims(token: &str) -> Option<(i64, String)> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let sub = match &v["sub"] {
        Value::String(s) => s.parse().ok()?,
        Value::Number(n) => n.as_i64()?,
        _ => return None,
    };
    Some((sub, v["role"].as_str()?.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_read_from_the_tokens_payload() {
        use base64::Engine as _;
        let enc =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let token = format!(
            "{}.{}.sig",
            enc(&serde_json::json!({"alg": "HS256"})),
            enc(&serde_json::json!({"sub": "12", "role": "CUSTOMER", "exp": 1}))
        );
        assert_eq!(claims(&token), Some((12, "CUSTOMER".into())));
        assert_eq!(claims("not-a-token"), None);
        assert_eq!(claims("a.e30.c"), None, "no subject");
    }

    #[test]
    fn the_person_is_the_last_address_the_gateway_wrote() {
        let mut h = HeaderMap::new();
        assert_eq!(person(&h), None);
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("10.9.9.9"));
        h.append(
            X_FORWARDED_FOR,
            HeaderValue::from_static("made-up, 192.0.2.4"),
        );
        assert_eq!(person(&h), Some(IpAddr::from([192, 0, 2, 4])));
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("::1 , nonsense"));
        assert_eq!(person(&h), None, "not an address: nobody");
    }

    #[test]
    fn errors_read_as_the_api_says_them() {
        let r = Reply {
            status: StatusCode::CONFLICT,
            body: serde_json::json!({"error": {"code": "already_registered", "message": "e-mail taken", "field": "email"}}),
        };
        assert_eq!(
            (r.message(), r.field()),
            ("e-mail taken".into(), Some("email"))
        );
        let bare = Reply {
            status: StatusCode::BAD_GATEWAY,
            body: Value::Null,
        };
        assert!(bare.message().contains("502"));
    }
}
