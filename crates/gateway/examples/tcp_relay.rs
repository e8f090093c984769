//! The ceiling for an HTTP/1.1 proxy on this machine: a TCP relay that parses nothing. Each
//! client connection gets its own upstream connection, and `copy_bidirectional` moves bytes both
//! ways on a two-thread runtime. No routing, no header rules, no limits — a yardstick for
//! `scripts/bench-proxies.sh --ceiling`, not a proxy anyone should run.
//!
//! ```sh
//! cargo run --release --example tcp_relay -- 127.0.0.1:19401 127.0.0.1:18688
//! ```

use std::error::Error;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        return Err("usage: tcp_relay LISTEN_ADDR UPSTREAM_ADDR".into());
    };
    let listen: SocketAddr = listen
        .parse()
        .map_err(|e| format!("LISTEN_ADDR {listen:?}: {e}"))?;
    let upstream: SocketAddr = upstream
        .parse()
        .map_err(|e| format!("UPSTREAM_ADDR {upstream:?}: {e}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()?;
    rt.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("binding {listen}: {e}"))?;
        loop {
            let (mut client, _) = listener.accept().await?;
            tokio::spawn(async move {
                let Ok(mut server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    })
}
