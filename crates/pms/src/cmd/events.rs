//! `pms events`: looking at and replaying the domain events in a service's database.
//!
//! - `pms events tail --service parks` prints a service's outbox as JSON lines (`--from ID`,
//!   `--follow` to keep printing as events are written).
//! - `pms events replay --service payments --consumer payments --source parks --from ID` sets a
//!   consumer's position back so the events from `ID` on are applied again by the running
//!   service (every handler is idempotent per subject, so a replay converges). In the
//!   distributed mode the running consumer sees its position set back and reads the broker's
//!   stream again from its start, applying the events from `ID` on.
//! - `pms events readers --service parks` lists who reads a service's outbox in place and how
//!   far each got (what the pruner may delete, `pms_events::retention`); `--forget NAME` drops a
//!   reader that went away for good, whose note would otherwise keep every event after it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pms_events::{retention, Outbox};
use pms_service::store::{Db, StoreConfig};

use super::UsageError;

/// `pms events …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Prints a service's outbox as JSON lines.
    Tail(TailArgs),
    /// Makes a consumer apply a producer's events again from an id on.
    Replay(ReplayArgs),
    /// Lists the readers of a service's outbox and how far each got.
    Readers(ReadersArgs),
}

/// Which service's database.
#[derive(Debug, Clone, clap::Args)]
pub struct Database {
    /// The service: users, parks or payments.
    #[arg(long, value_parser = ["users", "parks", "payments"])]
    service: String,
    /// A `pms up` data directory (its SQLite files).
    #[arg(long, default_value = "pms-data")]
    data_dir: PathBuf,
    /// The service's database instead (PostgreSQL: the service's schema is used, except for users).
    #[arg(long, env = "PMS_DATABASE_URL")]
    database_url: Option<String>,
}

impl Database {
    fn open(&self) -> anyhow::Result<(&'static str, Db)> {
        let service: &'static str = match self.service.as_str() {
            "users" => "users",
            "parks" => "parks",
            _ => "payments",
        };
        let config = match &self.database_url {
            Some(url) if service == "users" => StoreConfig::new(url.clone()),
            Some(url) => StoreConfig::new(url.clone()).in_schema(service),
            None => {
                let file = self.data_dir.join(format!("{service}.db"));
                if !file.exists() {
                    return Err(UsageError(format!(
                        "no {} (pass --data-dir or --database-url)",
                        file.display()
                    ))
                    .into());
                }
                StoreConfig::new(format!("sqlite://{}", file.display()))
            }
        };
        Ok((
            service,
            Db::open(&config).map_err(|e| UsageError(e.to_string()))?,
        ))
    }
}

/// `pms events tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    #[command(flatten)]
    database: Database,
    /// Print events after this id (default: all).
    #[arg(long, default_value_t = 0)]
    from: i64,
    /// Keep printing new events as they are written.
    #[arg(long)]
    follow: bool,
}

/// `pms events readers`.
#[derive(Debug, clap::Args)]
pub struct ReadersArgs {
    #[command(flatten)]
    database: Database,
    /// Forget this reader (one that went away for good) instead of listing.
    #[arg(long)]
    forget: Option<String>,
}

/// `pms events replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The consuming service's database.
    #[command(flatten)]
    database: Database,
    /// The consumer's name (the consuming service's: users, parks, payments).
    #[arg(long)]
    consumer: String,
    /// The producer whose events to apply again.
    #[arg(long, value_parser = ["users", "parks", "payments"])]
    source: String,
    /// The first event id to apply again.
    #[arg(long)]
    from: i64,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match command {
            Command::Tail(a) => tail(a).await,
            Command::Replay(a) => replay(a).await,
            Command::Readers(a) => readers(a).await,
        }
    })
}

async fn tail(args: TailArgs) -> anyhow::Result<()> {
    let (service, db) = args.database.open()?;
    let outbox = Outbox::new(service, db);
    let mut after = args.from;
    loop {
        let events = outbox
            .read_after(after, 500)
            .await
            .context("reading the outbox")?;
        for e in &events {
            println!(
                "{}",
                serde_json::json!({
                    "id": e.id, "source": e.source, "type": e.event_type, "version": e.version,
                    "aggregate": format!("{}/{}", e.aggregate_type, e.aggregate_id),
                    "at": e.created_at, "payload": e.payload,
                })
            );
            after = e.id;
        }
        if events.is_empty() {
            if !args.follow {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn readers(args: ReadersArgs) -> anyhow::Result<()> {
    let (service, db) = args.database.open()?;
    let outbox = Outbox::new(service, db);
    if let Some(name) = &args.forget {
        let forgotten = retention::forget(&outbox, name)
            .await
            .context("forgetting the reader")?;
        if !forgotten {
            return Err(UsageError(format!("no reader {name} of the {service} outbox")).into());
        }
        println!("forgot {name}: the {service} outbox no longer keeps events for it");
        return Ok(());
    }
    let head = outbox.head().await.context("reading the outbox")?;
    let pruned = retention::pruned_through(outbox.db())
        .await
        .context("reading how far the outbox was pruned")?;
    for r in retention::readers(&outbox)
        .await
        .context("reading the readers")?
    {
        println!(
            "{}",
            serde_json::json!({
                "reader": r.reader, "through": r.through, "behind": head - r.through,
                "notedAt": r.updated_at,
            })
        );
    }
    println!(
        "{}",
        serde_json::json!({"outbox": service, "head": head, "prunedThrough": pruned})
    );
    Ok(())
}

/// In one database set (`pms up`), where `consumer` reads `source`'s outbox in place: lowers
/// its note there to just before `from`, so the pruner keeps what the replay reads, and says
/// when events from there on were pruned already. Elsewhere (the distributed mode, where the
/// consumer reads the broker) nothing to do.
async fn keep_for_replay(database: &Database, consumer: &str, source: &str, from: i64) {
    let Ok((source, db)) = (Database {
        service: source.to_owned(),
        ..database.clone()
    })
    .open() else {
        return;
    };
    let outbox = Outbox::new(source, db);
    let Ok(readers) = retention::readers(&outbox).await else {
        return;
    };
    if !readers.iter().any(|r| r.reader == consumer) {
        return;
    }
    if let Err(e) = retention::acknowledge(&outbox, consumer, from - 1).await {
        eprintln!("warning: could not keep the {source} events for the replay: {e}");
    }
    if let Ok(pruned) = retention::pruned_through(outbox.db()).await {
        if from <= pruned {
            eprintln!(
                "note: the {source} outbox was pruned through event {pruned}: of the events up to \
                 there only customers and price tables are kept (visits, invoices and coins older \
                 than the retention window are gone), so only those are applied again"
            );
        }
    }
}

async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    keep_for_replay(&args.database, &args.consumer, &args.source, args.from).await;
    let (_, db) = args.database.open()?;
    let before = pms_events::position::position(&db, &args.consumer, &args.source)
        .await
        .context("reading the consumer's position")?;
    pms_events::position::rewind(&db, &args.consumer, &args.source, args.from - 1)
        .await
        .context("setting the consumer's position")?;
    println!(
        "{} will apply the {} service's events from {} on again (its position was {before}); a running service picks this up within a second",
        args.consumer, args.source, args.from
    );
    Ok(())
}
