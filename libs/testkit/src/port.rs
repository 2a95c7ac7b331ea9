//! Port picking for processes started by tests.

use crate::TestkitError;
use std::net::TcpListener;

/// Returns a TCP port on 127.0.0.1 that was free a moment ago: binds port 0, reads the port the kernel chose,
/// and closes the socket. Another process could take it before the caller binds it; tests accept that small
/// race rather than sharing fixed ports.
pub fn free_port() -> Result<u16, TestkitError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| TestkitError::io("binding 127.0.0.1:0", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| TestkitError::io("reading the bound address", e))?
        .port();
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_is_bindable_and_nonzero() {
        let port = free_port().expect("free port");
        assert_ne!(port, 0);
        TcpListener::bind(("127.0.0.1", port)).expect("port is bindable again");
    }
}
