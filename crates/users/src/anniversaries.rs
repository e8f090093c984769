//! The anniversaries' round: at start and then every hour, the customers whose registration
//! day it is (UTC) are credited their anniversary coins ([`crate::store::awards`]). Each award
//! is keyed by customer and year, so rounds that overlap (replicas, a restart) credit it once.

use std::time::Duration;

use pms_events::wiring::Shutdown;
use tokio::task::JoinHandle;

use crate::store::awards::today;
use crate::App;

/// How often the round runs.
pub const EVERY: Duration = Duration::from_secs(3600);

/// Runs the rounds until `stop` holds `true`. A round that fails (the database away) is logged
/// and the next one tries again: a day has 24 of them.
pub fn spawn(app: &App, mut stop: Shutdown) -> JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        loop {
            let coins = app.awards.anniversary;
            match app.store.award_anniversaries(today(), coins).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(customers = n, coins, "anniversary coins credited"),
                Err(e) => tracing::warn!(error = %e, "the anniversaries' round failed"),
            }
            tokio::select! {
                () = tokio::time::sleep(EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}
