//! A back-end that answers every request with a JSON description of what it received: method,
//! path and query, HTTP version, TLS, headers and body length. Tests put it behind the gateway to
//! see exactly what the gateway forwarded.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use pms_net::serve::{self, Drain, NoObserver, ServeConfig};

use crate::Spawned;

/// Starts the inspector on a loopback port; `status` is the status it answers with.
pub async fn spawn(serve_config: ServeConfig, status: StatusCode) -> Spawned<Drain> {
    Spawned::start(move |listener, stop| {
        serve::serve(
            listener,
            serve_config,
            move |conn: serve::ConnInfo| {
                hyper::service::service_fn(move |req: Request<Incoming>| async move {
                    Ok::<_, Infallible>(describe(req, conn.tls, status).await)
                })
            },
            Arc::new(NoObserver),
            stop,
        )
    })
    .await
}

async fn describe(req: Request<Incoming>, tls: bool, status: StatusCode) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut headers = serde_json::Map::new();
    for name in parts.headers.keys() {
        let values: Vec<serde_json::Value> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned().into())
            .collect();
        headers.insert(name.as_str().to_string(), values.into());
    }
    let doc = serde_json::json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "version": format!("{:?}", parts.version),
        "tls": tls,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    let mut resp = Response::new(Full::new(Bytes::from(doc.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    // A hop-by-hop header the gateway must not pass back to the client.
    resp.headers_mut()
        .insert("keep-alive", http::HeaderValue::from_static("timeout=5"));
    resp
}
