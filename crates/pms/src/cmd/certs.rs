//! `pms certs dev --out DIR`: a local CA and a localhost certificate for trying TLS.

use std::path::PathBuf;

use anyhow::Context;

/// Certificate subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a fresh local CA (ca.pem) and a certificate for localhost, 127.0.0.1 and ::1
    /// (server.pem, server-key.pem). For development only.
    Dev {
        /// Directory to write into (created if missing).
        #[arg(long, default_value = "certs")]
        out: PathBuf,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Dev { out, force } => {
            let key = out.join(pms_net::dev::KEY_FILE);
            if key.exists() && !force {
                return Err(super::UsageError(format!(
                    "{} exists; pass --force to replace it",
                    key.display()
                ))
                .into());
            }
            let certs = pms_net::dev::DevCerts::generate()?;
            certs
                .write_to(&out)
                .with_context(|| format!("writing certificates to {}", out.display()))?;
            println!(
                "wrote {dir}/{ca}, {dir}/{cert}, {dir}/{key} (trust {dir}/{ca} in clients; never commit these)",
                dir = out.display(),
                ca = pms_net::dev::CA_FILE,
                cert = pms_net::dev::CERT_FILE,
                key = pms_net::dev::KEY_FILE,
            );
            Ok(())
        }
    }
}
