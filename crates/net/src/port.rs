//! A loopback port for another program to listen on, picked ahead of time (the suites and the
//! `pms` binary's tests start `pms up` on ports they chose). A port the kernel hands out for
//! `bind(0)` comes from its ephemeral range, the range every outgoing connection's local port
//! comes from too: picked there and released, it can be taken by anyone's next connection (a
//! database pool's, say) before the program binds it, which then fails with "address in use".
//! So ports are picked below that range, where the kernel never hands one out by itself, and
//! never twice by one process.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

/// Lowest port picked.
const FLOOR: u16 = 10_000;
/// The kernel's ephemeral range when it cannot be read.
const EPHEMERAL_DEFAULT: u16 = 32_768;

/// Ports this process has handed out.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_DEFAULT)
}

/// A port of `127.0.0.1` that was free a moment ago, outside the ephemeral range and not handed
/// out before by this process; when the range leaves no room below it, one from `bind(0)`.
///
/// # Errors
/// When no port can be bound at all.
pub fn free_loopback_port() -> std::io::Result<u16> {
    let top = ephemeral_start();
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let given = given.get_or_insert_with(HashSet::new);
    if top > FLOOR {
        let span = u32::from(top - FLOOR);
        // Where to start: varies between processes, so two suites rarely try the same ports.
        let seed = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
        for step in 0..span {
            let port = FLOOR + u16::try_from((seed.wrapping_add(step)) % span).unwrap_or(0);
            if given.contains(&port) {
                continue;
            }
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                given.insert(port);
                return Ok(port);
            }
        }
    }
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    given.insert(port);
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_bindable_and_never_repeated() {
        let top = ephemeral_start();
        let ports: Vec<u16> = (0..50)
            .map(|_| free_loopback_port().expect("a port"))
            .collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        for p in ports {
            if top > FLOOR {
                assert!((FLOOR..top).contains(&p), "{p}");
            }
            assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok(), "{p}");
        }
    }
}
