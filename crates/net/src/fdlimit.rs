//! The process's open-file limit: raising the soft limit to the hard one at start (as HAProxy and
//! Go's runtime do), and splitting what it allows between client and upstream connections, so
//! that accepted clients cannot use up the descriptors their requests need upstream.
//!
//! A proxy that accepts a client it has no upstream socket for answers it with an error; one that
//! leaves the client in the listen backlog only makes it wait. [`split`] turns the first case
//! into the second.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors set aside for everything but client and upstream connections: standard streams,
/// the runtimes' epoll and event descriptors, the admin listener and its clients, files read at
/// start, JWKS fetches.
pub const RESERVE: u64 = 256;

/// What a hard limit of "unlimited" is taken to mean: Linux's default `fs.nr_open`, the highest
/// soft limit an unprivileged process can set.
const UNLIMITED_AS: u64 = 1 << 20;

/// The soft open-file limit now in effect; `None` when there is none.
pub fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Raises the soft open-file limit to the hard one and returns the soft limit in effect after
/// (unchanged when it already was the hard one, or unlimited).
///
/// # Errors
/// When the kernel refuses the new limit.
pub fn raise_to_hard() -> std::io::Result<Option<u64>> {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let Some(current) = current else {
        return Ok(None);
    };
    let target = maximum.unwrap_or(UNLIMITED_AS);
    if target <= current {
        return Ok(Some(current));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum,
        },
    )?;
    Ok(Some(target))
}

/// Client and upstream connections that fit together in an open-file limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Client connections, all listeners together.
    pub clients: u64,
    /// Upstream connections, all upstreams and endpoints together.
    pub upstream: u64,
}

/// Fits `wanted` into `limit` descriptors, `sockets` of which are listening sockets. When it fits
/// as is, it is returned unchanged. When not, upstream connections keep what they asked for up
/// to the larger of half the room and what clients leave free, and clients get the rest (at least
/// one of each).
pub fn split(limit: u64, sockets: u64, wanted: Split) -> Split {
    let room = limit.saturating_sub(RESERVE.saturating_add(sockets));
    if wanted.clients.saturating_add(wanted.upstream) <= room {
        return wanted;
    }
    let upstream = wanted
        .upstream
        .min((room / 2).max(room.saturating_sub(wanted.clients)))
        .max(1);
    let clients = wanted.clients.min(room.saturating_sub(upstream)).max(1);
    Split { clients, upstream }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(clients: u64, upstream: u64) -> Split {
        Split { clients, upstream }
    }

    #[test]
    fn what_fits_is_left_alone() {
        assert_eq!(split(20_000, 4, want(10_000, 4_096)), want(10_000, 4_096));
        assert_eq!(split(RESERVE + 4 + 300, 4, want(200, 100)), want(200, 100));
    }

    #[test]
    fn clients_give_way_to_the_upstream_connections_they_need() {
        // The stress test's case: 30,000 clients wanted, 4,096 upstream, 20,000 files.
        let s = split(20_000, 4, want(30_000, 4_096));
        assert_eq!(s.upstream, 4_096);
        assert_eq!(s.clients, 20_000 - RESERVE - 4 - 4_096);
    }

    #[test]
    fn an_upstream_cap_above_the_limit_takes_half_the_room() {
        let s = split(1_024, 4, want(10_000, 4_096));
        let room = 1_024 - RESERVE - 4;
        assert_eq!(s.upstream, room / 2);
        assert_eq!(s.clients, room - room / 2);
        // Few clients wanted: upstream may take what they leave.
        let s = split(1_024, 4, want(100, 4_096));
        assert_eq!((s.clients, s.upstream), (100, room - 100));
    }

    #[test]
    fn no_room_at_all_still_serves_one_of_each() {
        assert_eq!(split(10, 4, want(10_000, 4_096)), want(1, 1));
    }

    #[test]
    fn raising_never_lowers_the_soft_limit() {
        let before = soft_limit();
        let after = raise_to_hard().unwrap();
        assert_eq!(after, soft_limit());
        if let (Some(b), Some(a)) = (before, after) {
            assert!(a >= b);
        }
    }
}
