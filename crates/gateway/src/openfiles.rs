//! Fitting the configured connection caps (`limits.max_connections` per listener, each upstream's
//! `max_connections` per endpoint) into the process's open-file limit before serving.
//!
//! Without it, a gateway with more clients than the limit leaves room for accepts them and then
//! answers their requests with 502 (`connect failed: Too many open files`); the stress test found
//! that at about 17,000 users under a 20,000 limit. Lowered caps make the extra clients wait in
//! the listen backlog instead, and every accepted request can reach its upstream.

use pms_net::fdlimit::{self, Split};

use crate::config::{Settings, UpstreamSettings};

/// Lowers `settings`' caps so that clients and upstream connections together fit in the soft
/// open-file limit, logging what changed. `sockets` is the number of listening sockets (every
/// worker's, every listener's, the admin one). Nothing changes when the limit is unlimited or the
/// caps already fit.
pub(crate) fn fit(settings: &mut Settings, sockets: usize) {
    let Some(limit) = fdlimit::soft_limit() else {
        return;
    };
    fit_into(settings, limit, sockets);
}

fn fit_into(settings: &mut Settings, limit: u64, sockets: usize) {
    let workers = settings.workers.max(1);
    let listeners = settings.listeners.len().max(1);
    let per_listener = settings.limits.max_connections.max(1);
    let wanted = Split {
        clients: as_u64(per_listener) * as_u64(listeners),
        upstream: settings
            .upstreams
            .iter()
            .map(|u| upstream_files(u, u.max_connections, workers))
            .sum(),
    };
    let got = fdlimit::split(limit, as_u64(sockets), wanted);
    if got == wanted {
        return;
    }
    // One warning for everything lowered: `pms up` and multi-upstream configs would otherwise
    // open with a wall of them.
    let mut lowered = Vec::new();
    if got.clients < wanted.clients {
        let cap = usize::try_from(got.clients / as_u64(listeners))
            .unwrap_or(usize::MAX)
            .max(1);
        lowered.push(format!("limits.max_connections {per_listener} -> {cap}"));
        settings.limits.max_connections = cap;
    }
    if got.upstream < wanted.upstream {
        for u in &mut settings.upstreams {
            // Each upstream keeps its share of what fits, in proportion to what it asked for.
            let share = u128::from(as_u64(u.max_connections)) * u128::from(got.upstream)
                / u128::from(wanted.upstream.max(1));
            let cap = usize::try_from(share).unwrap_or(usize::MAX).max(1);
            if cap < u.max_connections {
                lowered.push(format!(
                    "upstream {} max_connections {} -> {cap}",
                    u.name, u.max_connections
                ));
                u.max_connections = cap;
            }
        }
    }
    if !lowered.is_empty() {
        tracing::warn!(
            open_file_limit = limit,
            "connection caps lowered to fit the open-file limit: {}. Clients beyond a listener's \
             cap wait to be accepted, requests beyond an upstream's cap queue for a connection; \
             raise `ulimit -n` to lift the caps",
            lowered.join(", ")
        );
    }
}

/// Descriptors an upstream may hold: every worker's share of `max_connections` (rounded up, as
/// the pools do) for each endpoint (for a discovered upstream, each it may take).
fn upstream_files(u: &UpstreamSettings, max_connections: usize, workers: usize) -> u64 {
    let endpoints = u
        .discovery
        .as_ref()
        .map_or(u.endpoints.len(), |d| d.max_endpoints);
    as_u64(max_connections.div_ceil(workers) * workers) * as_u64(endpoints)
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(listeners: usize, clients: usize, upstream_caps: &[usize]) -> Settings {
        let mut toml = String::new();
        for i in 0..listeners {
            toml.push_str(&format!(
                "[[listeners]]\nname = \"l{i}\"\nlisten = \"127.0.0.1:0\"\n"
            ));
        }
        toml.push_str(&format!(
            "[runtime]\nworkers = 2\n[limits]\nmax_connections = {clients}\n"
        ));
        for (i, cap) in upstream_caps.iter().enumerate() {
            toml.push_str(&format!(
                "[[upstreams]]\nname = \"u{i}\"\nendpoints = [\"http://127.0.0.1:1\"]\nmax_connections = {cap}\n\
                 [[routes]]\nmatch = {{ path_prefix = \"/u{i}/\" }}\nupstream = \"u{i}\"\n"
            ));
        }
        crate::config::parse(&toml, "gw.toml")
            .and_then(|raw| raw.resolve("gw.toml", std::path::Path::new("."), &|_| None))
            .unwrap_or_else(|e| panic!("{e:?}\n{toml}"))
    }

    #[test]
    fn caps_that_fit_are_kept() {
        let mut s = settings(2, 1_000, &[100]);
        fit_into(&mut s, 20_000, 5);
        assert_eq!(s.limits.max_connections, 1_000);
        assert_eq!(s.upstreams[0].max_connections, 100);
    }

    #[test]
    fn clients_are_lowered_to_leave_the_upstream_connections_their_files() {
        let mut s = settings(1, 30_000, &[4_096]);
        fit_into(&mut s, 20_000, 3);
        assert_eq!(s.upstreams[0].max_connections, 4_096);
        assert_eq!(
            s.limits.max_connections as u64,
            20_000 - fdlimit::RESERVE - 3 - 4_096
        );
    }

    #[test]
    fn upstreams_share_what_fits_in_proportion() {
        let mut s = settings(1, 10_000, &[3_000, 1_000]);
        fit_into(&mut s, 1_024, 3);
        let room = 1_024 - fdlimit::RESERVE - 3;
        let (a, b) = (
            s.upstreams[0].max_connections,
            s.upstreams[1].max_connections,
        );
        // 3,000 to 1,000 asked; shares are rounded down.
        assert!(a.abs_diff(3 * b) <= 3, "{a} and {b}");
        assert!(a < 3_000 && b < 1_000, "{a} and {b}");
        assert!((a + b) as u64 <= room / 2, "{a} + {b} over {room} / 2");
        assert!(s.limits.max_connections as u64 + (a + b) as u64 <= room);
    }
}
