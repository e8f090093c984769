//! `pms device`: the barrier and display programs, and device keys.
//!
//! - `pms device barrier --park N --barrier ID --direction entrance|exit` reads plates, one a
//!   line, from stdin (or `--plates FILE`) and prints the barrier's answer to each as one line of
//!   JSON.
//! - `pms device display --id N` prints the display's text and free spots whenever they change
//!   (a long poll: a change shows as it happens).
//! - `pms device key barrier|display ID` prints a device's key.
//!
//! With `--data-dir` of a `pms up` installation they use its gateway and device secret.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pms_parks::devices::{DeviceKeys, DEVICE_KEY_HEADER};
use pms_parks::model::DeviceType;

use super::service::read_secret;
use super::UsageError;

/// The device secret's file name in a `pms up` data directory.
pub const SECRET_FILE: &str = "device-secret";
/// The file where `pms up` notes its gateway's URL for the device programs.
pub const GATEWAY_FILE: &str = "gateway-url";

/// `pms device …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// A barrier: reads plates from stdin, prints each answer as a line of JSON.
    Barrier(BarrierArgs),
    /// A display: prints its text and free spots whenever they change.
    Display(DisplayArgs),
    /// Prints a device's key (to configure a real device with).
    Key(KeyArgs),
}

/// Where the gateway and the device secret are.
#[derive(Debug, Clone, clap::Args)]
pub struct Installation {
    /// The gateway (cleartext HTTP); default: the one of --data-dir's `pms up`.
    #[arg(long)]
    gateway: Option<String>,
    /// A `pms up` data directory: its gateway and device secret.
    #[arg(long, default_value = "pms-data")]
    data_dir: PathBuf,
    /// The device's key; default: derived from the data directory's device secret.
    #[arg(long, env = "PMS_DEVICE_KEY")]
    key: Option<String>,
}

/// `pms device barrier`.
#[derive(Debug, clap::Args)]
pub struct BarrierArgs {
    /// The park's number.
    #[arg(long)]
    park: i64,
    /// The barrier's id.
    #[arg(long)]
    barrier: i64,
    /// Which way it lets cars through.
    #[arg(long, value_parser = ["entrance", "exit"])]
    direction: String,
    /// Read plates from this file instead of stdin.
    #[arg(long)]
    plates: Option<PathBuf>,
    /// Send this time (RFC 3339) instead of now, to replay recorded plate reads.
    #[arg(long)]
    at: Option<String>,
    #[command(flatten)]
    installation: Installation,
}

/// `pms device display`.
#[derive(Debug, clap::Args)]
pub struct DisplayArgs {
    /// The display's id.
    #[arg(long)]
    id: i64,
    /// Print what it shows now and stop.
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    installation: Installation,
}

/// `pms device key`.
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// `barrier` or `display`.
    #[arg(value_parser = ["barrier", "display"])]
    kind: String,
    /// The device's id.
    id: i64,
    /// A `pms up` data directory holding the device secret.
    #[arg(long, default_value = "pms-data")]
    data_dir: PathBuf,
    /// A file holding the device secret instead.
    #[arg(long)]
    device_secret_file: Option<PathBuf>,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Barrier(a) => barrier(a),
        Command::Display(a) => display(a),
        Command::Key(a) => {
            let path = a
                .device_secret_file
                .unwrap_or_else(|| a.data_dir.join(SECRET_FILE));
            let keys = keys(&path)?;
            let kind = if a.kind == "barrier" {
                DeviceType::Barrier
            } else {
                DeviceType::Display
            };
            println!("{}", keys.key_for(kind, a.id));
            Ok(())
        }
    }
}

fn keys(secret: &Path) -> anyhow::Result<DeviceKeys> {
    let secret = read_secret(secret)?;
    DeviceKeys::new(secret.as_bytes()).map_err(|e| UsageError(e.to_string()).into())
}

impl Installation {
    fn gateway(&self) -> anyhow::Result<String> {
        let url = match &self.gateway {
            Some(g) => g.clone(),
            None => read_secret(&self.data_dir.join(GATEWAY_FILE)).map_err(|e| {
                UsageError(format!(
                    "no --gateway, and no `pms up` in {}: {e:#}",
                    self.data_dir.display()
                ))
            })?,
        };
        if !url.starts_with("http://") {
            return Err(UsageError(format!(
                "--gateway {url:?}: the device programs speak cleartext HTTP (http://…)"
            ))
            .into());
        }
        Ok(url.trim_end_matches('/').to_owned())
    }

    fn key(&self, kind: DeviceType, id: i64) -> anyhow::Result<String> {
        match &self.key {
            Some(k) => Ok(k.clone()),
            None => Ok(keys(&self.data_dir.join(SECRET_FILE))?.key_for(kind, id)),
        }
    }
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// POSTs `body` as JSON with the device key; returns the status and the body.
async fn post(
    client: &HttpClient,
    url: &str,
    key: &str,
    body: &serde_json::Value,
) -> anyhow::Result<(u16, String)> {
    let req = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(DEVICE_KEY_HEADER, key)
        .body(Full::new(Bytes::from(body.to_string())))
        .context("building the request")?;
    let resp = client
        .request(req)
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .context("reading the answer")?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

fn barrier(args: BarrierArgs) -> anyhow::Result<()> {
    let gateway = args.installation.gateway()?;
    let key = args.installation.key(DeviceType::Barrier, args.barrier)?;
    let at = match &args.at {
        Some(t) => Some(
            t.parse::<jiff::Timestamp>()
                .map_err(|e| UsageError(format!("--at {t:?}: {e}")))?,
        ),
        None => None,
    };
    let input: Box<dyn BufRead> = match &args.plates {
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let url = format!("{gateway}/barriers/{}", args.direction);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut failed = false;
    for line in input.lines() {
        let line = line.context("reading plates")?;
        let plate = line.trim();
        if plate.is_empty() {
            continue;
        }
        let body = serde_json::json!({
            "barrierID": args.barrier,
            "parkID": args.park,
            "parkNumber": args.park,
            "plateNumber": plate,
            "date": at.unwrap_or_else(jiff::Timestamp::now).to_string(),
        });
        match rt.block_on(post(&client, &url, &key, &body)) {
            Ok((_, text)) => println!("{}", text.trim()),
            Err(e) => {
                failed = true;
                println!(
                    "{}",
                    serde_json::json!({"success": false, "plateNumber": plate, "message": format!("{e:#}")})
                );
            }
        }
    }
    if failed {
        anyhow::bail!("some plates got no answer from {url}");
    }
    Ok(())
}

fn display(args: DisplayArgs) -> anyhow::Result<()> {
    let gateway = args.installation.gateway()?;
    let key = args.installation.key(DeviceType::Display, args.id)?;
    let url = format!("{gateway}/display/get");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut version: Option<i64> = None;
    let mut shown: Option<(String, i64)> = None;
    loop {
        let mut body = serde_json::json!({ "displayID": args.id });
        if let Some(v) = version {
            body["waitForChangeAfter"] = v.into();
        }
        let (status, text) = rt.block_on(post(&client, &url, &key, &body))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("answer {text:?}"))?;
        if status != 200 {
            anyhow::bail!(
                "display {}: {}",
                args.id,
                v["error"]["message"].as_str().unwrap_or(&text)
            );
        }
        version = v["version"].as_i64();
        let now = (
            v["message"].as_str().unwrap_or_default().to_owned(),
            v["occupancy"].as_i64().unwrap_or(0),
        );
        if shown.as_ref() != Some(&now) {
            println!(
                "{}",
                serde_json::json!({"displayID": args.id, "message": now.0, "occupancy": now.1})
            );
            shown = Some(now);
        }
        if args.once {
            return Ok(());
        }
    }
}
