//! Active readiness checks: for each upstream with a `health_check` and more than one endpoint,
//! a task on the caller's runtime asks every endpoint for the check's path once per interval
//! (a GET on a new connection, as the gateway would connect, within the check's timeout) and
//! writes the conclusion into the upstream's [`Verdicts`], which every worker reads when it
//! picks an endpoint. A 2xx is a pass; anything else, or no answer in time, a failure.
//! `unhealthy_after` failures in a row make an endpoint unready, `healthy_after` passes ready
//! again. With one endpoint there is nowhere else to send its requests, and nothing is checked.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::task::JoinHandle;

use crate::config::{HealthCheck, UpstreamProtocol, UpstreamSettings};
use crate::health::Verdicts;
use crate::metrics::Metrics;
use crate::upstream::{chain, client_tls, connector, endpoint_key};

type ProbeClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<bytes::Bytes>,
>;

/// Starts checking `s`'s endpoints into `verdicts` and `metrics` (each one's readiness gauge,
/// and the ejections counter when one turns unready), when it has a `health_check` and more
/// than one endpoint: one task per endpoint, each running until aborted.
///
/// # Errors
/// When the upstream's TLS trust cannot be loaded.
pub(crate) fn spawn(
    s: &UpstreamSettings,
    verdicts: &Arc<Verdicts>,
    metrics: &Metrics,
) -> Result<Vec<JoinHandle<()>>, pms_net::TlsError> {
    let Some(check) = s.health_check.clone().filter(|_| s.endpoints.len() > 1) else {
        return Ok(Vec::new());
    };
    let mut builder = Client::builder(TokioExecutor::new());
    // A new connection each time: a check also proves the endpoint still accepts them.
    builder
        .pool_max_idle_per_host(0)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new());
    if matches!(s.protocol, UpstreamProtocol::H2 | UpstreamProtocol::H2c) {
        builder.http2_only(true);
    }
    let client: ProbeClient = builder.build(connector(s, client_tls(s)?));
    let ejections = metrics.upstream(&s.name).ejections;
    tracing::info!(
        upstream = %s.name,
        path = %check.path,
        interval_ms = check.interval.as_millis(),
        "checking the readiness of the upstream's endpoints"
    );
    Ok(s.endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let name = endpoint_key(e);
            let ready = metrics.endpoint_ready(&s.name, &name);
            ready.set(1);
            let endpoint = Endpoint {
                index: i,
                name,
                uri: target(e, &check),
                ready,
                ejections: ejections.clone(),
            };
            tokio::spawn(watch(
                client.clone(),
                endpoint,
                check.clone(),
                Arc::clone(verdicts),
            ))
        })
        .collect())
}

/// One endpoint to check.
struct Endpoint {
    index: usize,
    /// `scheme://authority`, for the log.
    name: String,
    /// The check's URL on it.
    uri: Option<Uri>,
    /// Its readiness gauge.
    ready: Gauge,
    /// The upstream's ejections.
    ejections: Counter,
}

/// The check's URI on `endpoint`.
fn target(endpoint: &Uri, check: &HealthCheck) -> Option<Uri> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = endpoint.scheme().cloned();
    parts.authority = endpoint.authority().cloned();
    parts.path_and_query = Some(check.path.clone());
    Uri::from_parts(parts).ok()
}

/// Checks `endpoint` once per interval, forever.
async fn watch(
    client: ProbeClient,
    endpoint: Endpoint,
    check: HealthCheck,
    verdicts: Arc<Verdicts>,
) {
    // Passes (positive) or failures (negative) in a row.
    let mut streak = 0i64;
    let mut tick = tokio::time::interval(check.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let outcome = ask(&client, endpoint.uri.as_ref(), check.timeout).await;
        if outcome.is_ok() && streak < 0 {
            // Whatever the verdict: a passive skip from before (a refused connection while it
            // restarted) ends here.
            verdicts.recovered(endpoint.index);
        }
        streak = match (&outcome, streak) {
            (Ok(()), s) if s > 0 => s.saturating_add(1),
            (Ok(()), _) => 1,
            (Err(_), s) if s < 0 => s.saturating_sub(1),
            (Err(_), _) => -1,
        };
        let verdict = match outcome {
            Ok(()) if streak >= i64::from(check.healthy_after) => Some((true, String::new())),
            Err(why) if -streak >= i64::from(check.unhealthy_after) => Some((false, why)),
            _ => None,
        };
        if let Some((ready, why)) = verdict {
            if verdicts.set(endpoint.index, ready, &endpoint.name, &why) {
                endpoint.ready.set(i64::from(ready));
                if !ready {
                    endpoint.ejections.inc();
                }
            }
        }
    }
}

/// One check: `Ok` for a 2xx within `timeout`, else what went wrong.
async fn ask(client: &ProbeClient, uri: Option<&Uri>, timeout: Duration) -> Result<(), String> {
    let uri = uri.ok_or("the endpoint and path make no URL")?;
    let req = Request::get(uri.clone())
        .header(http::header::USER_AGENT, "pms-gateway-health-check")
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(resp)) if resp.status().is_success() => Ok(()),
        Ok(Ok(resp)) => Err(format!("answered {}", resp.status())),
        Ok(Err(e)) => Err(chain(&e)),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}
