//! Binding listening sockets, including several sockets on one port for thread-per-core servers
//! (`SO_REUSEPORT`: the kernel spreads new connections across them).

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Listen backlog for every socket PMS binds.
pub const BACKLOG: i32 = 1024;

/// Binds `count` non-blocking listeners on `addr` with `SO_REUSEPORT` (`count` is at least one).
/// With port 0 the first socket picks the port and the others join it.
///
/// # Errors
/// When a socket cannot be created, configured or bound.
pub fn bind_many(addr: SocketAddr, count: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
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

#[cfg(test)]
mod tests {
    #[test]
    fn several_sockets_share_one_port() {
        let ls = super::bind_many("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let ports: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert_eq!(ports.len(), 3);
        assert!(ports.iter().all(|p| *p == ports[0] && *p != 0), "{ports:?}");
    }
}
