//! The hyper front end: requests hyper's server read (HTTP/2, TLS, and HTTP/1.1 the fast path
//! handed over) taken through the [`pipeline`] — route, admission, header
//! rules — then their bodies transformed or streamed to the upstream, over the HTTP/1.1 upstream
//! pools ([`bridge`]) or hyper's client, and the response streamed back. Every failure becomes a
//! [`GatewayError`] answered by `respond`.

mod bridge;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use http::uri::Authority;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use pms_net::serve::ConnInfo;

use self::bridge::Bridged;
use crate::body::{
    find_source, BodyStalled, Capped, ClientBodyFailed, FromUpstream, ProxyBody, TooLarge,
};
use crate::cors;
use crate::headers;
use crate::headers::rules::{Forward, Relay, Rule};
use crate::pipeline::{self, log_error, Asked, Shared};
use crate::respond::GatewayError;
use crate::spans::RequestSpan;
use crate::transform;
use crate::unread;
use crate::upstream::SendError;

/// The per-connection service.
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: ConnInfo,
}

impl hyper::service::Service<Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let shared = self.shared.clone();
        let conn = self.conn;
        Box::pin(async move { Ok(handle(&shared, conn, req).await) })
    }
}

async fn handle(shared: &Shared, conn: ConnInfo, req: Request<Incoming>) -> Response<ProxyBody> {
    let started = Instant::now();
    let request_id = headers::request_id(req.headers());
    let span = shared.spans.as_ref().map(|spans| {
        let client = req.headers().get(pms_net::trace::TRACEPARENT);
        let path = req.uri().path().as_bytes();
        let start = SystemTime::now();
        spans.open(client.map(HeaderValue::as_bytes), req.method(), path, start)
    });
    // What the access log needs of the request, which `forward` takes.
    let logged = shared.access_log.as_ref().map(|_| {
        let target = match req.uri().path_and_query() {
            Some(pq) => pq.as_str().to_owned(),
            None => req.uri().to_string(),
        };
        (req.method().clone(), target, req.version())
    });
    let checked =
        headers::check_host(req.version(), req.headers()).map_err(GatewayError::BadRequest);
    let (parts, body) = req.into_parts();
    let (version, expect) = (parts.version, parts.headers.get(EXPECT).cloned());
    let cors = shared.cors.as_deref().map_or(cors::Asked::Nothing, |c| {
        c.asked(&parts.method, &parts.headers)
    });
    // The body until `forward` takes it to send: left unread by an answer, it is settled below.
    let mut unread = Some(body);
    let mut route = None;
    // A browser's preflight is the gateway's to answer: no route, no token, no upstream.
    let answered = match &cors {
        cors::Asked::Preflight(_) => Some(Ok(preflight())),
        cors::Asked::Refused(why) => Some(Err(GatewayError::CorsRefused(why.clone()))),
        cors::Asked::Allowed(_) | cors::Asked::Nothing => None,
    };
    let result = match (
        checked,
        answered,
        shared.api_doc(&parts.method, parts.uri.path().as_bytes()),
    ) {
        (Err(err), _, _) => Err(err),
        (Ok(()), Some(answer), _) => answer,
        (Ok(()), None, Some((docs, doc))) => {
            Ok(docs.response(doc, parts.method == Method::HEAD, &request_id))
        }
        (Ok(()), None, None) => match shared.route(&parts.method, parts.uri.path()) {
            Ok(i) => {
                route = Some(i);
                let traceparent = span.as_ref().map(RequestSpan::traceparent);
                let request = Forwarded {
                    conn,
                    request_id: &request_id,
                    traceparent,
                };
                forward(shared, i, request, parts, &mut unread).await
            }
            Err(err) => Err(err),
        },
    };
    let mut resp = match result {
        Ok(resp) => resp,
        Err(err) => {
            log_error(&request_id, &err);
            err.into_response(&request_id)
        }
    };
    if let cors::Asked::Preflight(marks) | cors::Asked::Allowed(marks) = cors {
        mark(&mut resp, marks);
    }
    if let Some(body) = unread {
        let mut asked = http::HeaderMap::new();
        if let Some(expect) = expect {
            asked.insert(EXPECT, expect);
        }
        unread::settle(body, version, &asked, &mut resp).await;
    }
    let status = resp.status().as_u16();
    let asked = logged.as_ref().map(|(method, target, version)| Asked {
        client: conn.peer.ip(),
        method: method.as_str(),
        target,
        protocol: pipeline::protocol(*version),
        request_id: request_id.to_str().unwrap_or("-"),
        started,
    });
    shared.record(route, asked.as_ref(), span, status, started.elapsed());
    resp
}

/// The answer to a browser's preflight, before its CORS headers: 204, nothing else.
fn preflight() -> Response<ProxyBody> {
    let mut resp = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = http::StatusCode::NO_CONTENT;
    resp
}

/// Adds the CORS headers `marks` to an answer: the allowed origin replaces any the upstream
/// set, `Vary: Origin` joins the upstream's.
fn mark(resp: &mut Response<ProxyBody>, marks: http::HeaderMap) {
    let headers = resp.headers_mut();
    let mut last = None;
    for (name, value) in marks {
        let name = match name {
            Some(n) => {
                last = Some(n.clone());
                n
            }
            None => match &last {
                Some(n) => n.clone(),
                None => continue,
            },
        };
        if name == http::header::VARY {
            headers.append(name, value);
        } else {
            headers.insert(name, value);
        }
    }
}

/// What a request forwarded upstream carries besides its head and body.
struct Forwarded<'a> {
    /// The client's connection.
    conn: ConnInfo,
    request_id: &'a HeaderValue,
    /// The `traceparent` naming the gateway's span of it, when it has one.
    traceparent: Option<&'a [u8]>,
}

/// Admits the request on route `route_index` and sends it with its body, which it takes from
/// `unread` once it is admitted; a refusal before that leaves the body there.
async fn forward(
    shared: &Shared,
    route_index: usize,
    request: Forwarded<'_>,
    mut parts: http::request::Parts,
    unread: &mut Option<Incoming>,
) -> Result<Response<ProxyBody>, GatewayError> {
    let Forwarded {
        conn,
        request_id,
        traceparent,
    } = request;
    let route = shared.router.route(route_index);
    let backend = shared.backends.get(route.upstream);
    let upstream = &backend.upstream;

    let client = shared
        .rate_limits
        .client(route_index, conn.peer.ip(), &parts.headers)?;
    let authorization = parts.headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
    let claims = shared.admit(route_index, client, authorization).await?;

    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let rule = Forward {
        conn,
        version: parts.version,
        authority: parts.uri.authority().map(Authority::as_str),
        request_id: request_id.as_bytes(),
        identity: shared.jwt.identity(),
        claims: claims.as_ref(),
        traceparent,
    };
    rule.apply(&mut parts.headers);
    if route.json_to_xml.is_none() && declared.is_some_and(|n| n > shared.max_body_bytes) {
        return Err(GatewayError::TooLarge {
            limit: shared.max_body_bytes,
        });
    }
    let body = unread
        .take()
        .ok_or_else(|| GatewayError::BodyRead("the request body was taken twice".into()))?;
    let (mut parts, body) = if route.json_to_xml.is_none() {
        let sent = bridge::send(shared, route.upstream, parts, body, declared, request_id);
        match sent.await {
            Bridged::Sent(result) => return result,
            Bridged::Declined(parts, body) => (parts, body),
        }
    } else {
        (parts, body)
    };
    parts.uri = upstream
        .target(parts.uri.path_and_query())
        .map_err(|e| shared.upstream_error(upstream, e))?;

    // Set for a body streamed from the client: whether a timeout was the client's.
    let mut progress = None;
    let body: ProxyBody = match &route.json_to_xml {
        Some(layout) => transformed(shared, layout, &mut parts.headers, body, declared).await?,
        None => {
            let capped = Capped::new(body, shared.max_body_bytes, shared.body_read_timeout);
            progress = Some(capped.progress());
            capped.boxed_unsync()
        }
    };

    let resp = match upstream.send(Request::from_parts(parts, body)).await {
        Ok(resp) => resp,
        Err(SendError::Timeout(after)) => match &progress {
            // The upstream waited for the rest of the body, and so did the gateway.
            Some(p) if p.waiting_on_client() => {
                return Err(GatewayError::SlowBody {
                    after_ms: after.as_millis(),
                    got: p.received(),
                    expected: declared,
                })
            }
            _ => return Err(shared.upstream_error(upstream, SendError::Timeout(after))),
        },
        Err(e) => return Err(shared.upstream_error(upstream, e)),
    };
    let (mut head, body) = resp.into_parts();
    let rule = Relay {
        version: head.version,
        request_id: request_id.as_bytes(),
        chunked: false,
    };
    rule.apply(&mut head.headers);
    head.version = http::Version::HTTP_11;
    let body = FromUpstream::new(body, upstream.read_timeout(), upstream.shared_name());
    Ok(Response::from_parts(head, body.boxed_unsync()))
}

/// The request body read whole, at most the transform's limit, and converted from JSON to XML
/// by `layout`; `headers` say so.
async fn transformed(
    shared: &Shared,
    layout: &transform::XmlLayout,
    headers: &mut http::HeaderMap,
    body: Incoming,
    declared: Option<u64>,
) -> Result<ProxyBody, GatewayError> {
    let limit = shared.transform_max_body_bytes as u64;
    if declared.is_some_and(|n| n > limit) {
        return Err(GatewayError::TooLarge { limit });
    }
    let json = Capped::new(body, limit, shared.body_read_timeout)
        .collect()
        .await
        .map_err(|e| read_error(&*e, limit))?;
    let xml = transform::convert(&json.to_bytes(), layout)
        .map_err(|e| GatewayError::BadBody(e.to_string()))?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(xml.len()));
    Ok(Full::new(Bytes::from(xml))
        .map_err(|never| match never {})
        .boxed_unsync())
}

/// Why a request body read whole (for the transform) did not come, as the answer to give.
fn read_error(err: &(dyn std::error::Error + 'static), limit: u64) -> GatewayError {
    if find_source::<TooLarge>(err).is_some() {
        GatewayError::TooLarge { limit }
    } else if let Some(stalled) = find_source::<BodyStalled>(err) {
        GatewayError::BodyStalled(*stalled)
    } else if let Some(failed) = find_source::<ClientBodyFailed>(err) {
        GatewayError::BodyRead(crate::upstream::chain(&*failed.0))
    } else {
        GatewayError::BodyRead(crate::upstream::chain(err))
    }
}
