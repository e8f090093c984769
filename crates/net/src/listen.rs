//! Binding listening sockets, including several sockets on one port for thread-per-core servers
//! (`SO_REUSEPORT`: the kernel spreads new connections across them).
//!
//! `SO_REUSEPORT` alone would let a second server of the same user join a port that is already
//! listening, and the kernel would then split new connections between two unrelated processes.
//! So a fixed port is first probed with a plain bind, which any listener on it refuses.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Listen backlog for every socket PMS binds.
pub const BACKLOG: i32 = 1024;

/// Binds `count` non-blocking listeners on `addr` with `SO_REUSEPORT` (`count` is at least one).
/// With port 0 the first socket picks the port and the others join it.
///
/// # Errors
/// When a socket cannot be created, configured or bound; `AddrInUse` when anything, another
/// reuse-port group included, already listens on `addr`.
pub fn bind_many(addr: SocketAddr, count: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    if addr.port() != 0 {
        probe(addr)?;
    }
    let mut out = Vec::with_capacity(count.max(1));
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.set_tcp_nodelay(true)?;
        socket.bind(&addr.into())?;
        socket.listen(BACKLOG)?;
        let listener: std::net::TcpListener = socket.into();
        addr = listener.local_addr()?;
        out.push(listener);
    }
    Ok(out)
}

/// Binds a socket on `addr` without `SO_REUSEPORT` and closes it again: the bind fails with
/// `AddrInUse` when something listens there. (`SO_REUSEADDR` keeps connections in `TIME_WAIT`
/// from a previous run out of the way, as for the real sockets.) The probe never listens, so
/// it leaves nothing behind.
fn probe(addr: SocketAddr) -> std::io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn several_sockets_share_one_port() {
        let ls = super::bind_many("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let ports: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert_eq!(ports.len(), 3);
        assert!(ports.iter().all(|p| *p == ports[0] && *p != 0), "{ports:?}");
    }

    #[test]
    fn a_port_in_use_is_refused_not_shared() {
        use std::io::ErrorKind::AddrInUse;

        let first = super::bind_many("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = first[0].local_addr().unwrap();
        let err = super::bind_many(addr, 2).unwrap_err();
        assert_eq!(err.kind(), AddrInUse, "{err}");

        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let err = super::bind_many(plain.local_addr().unwrap(), 1).unwrap_err();
        assert_eq!(err.kind(), AddrInUse, "{err}");

        drop(first);
        let again = super::bind_many(addr, 2).unwrap();
        assert_eq!(again.len(), 2);
    }
}
