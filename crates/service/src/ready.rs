//! Readiness: a service serves as soon as it is bound and answers 503 until its schema is
//! migrated (and its demo data seeded); a database that is down at start, or goes away later,
//! never takes the process down, and the service recovers by itself when the database returns.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::StatusCode;

use crate::error::ApiError;

/// Longest wait between two start-up attempts while the database is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Whether a service has finished its start-up work.
#[derive(Debug)]
pub struct Readiness {
    service: &'static str,
    ready: AtomicBool,
}

impl Readiness {
    /// Not ready yet; `service` names it in the 503's message.
    pub fn new(service: &'static str) -> Self {
        Self {
            service,
            ready: AtomicBool::new(false),
        }
    }

    /// 503 until [`Readiness::set`].
    ///
    /// # Errors
    /// While the service is starting.
    pub fn check(&self) -> Result<(), ApiError> {
        if self.is_ready() {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                format!(
                    "the {} service is starting (database not reached yet)",
                    self.service
                ),
            ))
        }
    }

    /// The start-up work is done.
    pub fn set(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether [`Readiness::set`] was called.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The service's name.
    pub fn service(&self) -> &'static str {
        self.service
    }
}

/// Runs `init` until it succeeds, backing off from 250 ms up to 5 s between tries, logging each
/// failure; `service` names the service in the logs.
pub fn retry_in_background<F, Fut, T, E>(
    service: &'static str,
    mut init: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Send,
    E: std::fmt::Display + Send,
{
    tokio::spawn(async move {
        let mut wait = Duration::from_millis(250);
        loop {
            let outcome = init().await.map_err(|e| e.to_string());
            match outcome {
                Ok(_) => {
                    tracing::info!(service, "service ready");
                    return;
                }
                Err(e) => {
                    tracing::warn!(service, error = %e, retry_in = ?wait, "service not ready");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_BACKOFF);
                }
            }
        }
    })
}
