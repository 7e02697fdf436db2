//! `ClientLimit`: at most `server.max_connections_per_client` open connections per client
//! address, counted as connections open and close. One client cannot take every descriptor
//! (slow requests, idle keep-alives) and starve the rest; `/healthz` keeps answering. The
//! total is bounded separately by `server.max_connections` per HTTP worker. Behind a
//! reverse proxy every client shares the proxy's address: enforce the limit there instead.

use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd as _;
use std::sync::{Arc, Mutex};

use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use tracing::debug;

type OpenByClient = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Counts connections per client address; cheap to clone (clones share the counts).
#[derive(Clone)]
pub struct ClientLimit {
    max: usize,
    open: OpenByClient,
}

/// One admitted connection, released when the connection (and its data) is dropped.
struct Admitted {
    client: IpAddr,
    open: OpenByClient,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

impl ClientLimit {
    pub fn new(max: usize) -> Self {
        ClientLimit { max: max.max(1), open: Arc::default() }
    }

    /// `HttpServer::on_connect`: admits the connection, or shuts its socket at once so the
    /// server's first read ends it (no request is parsed, nothing is answered).
    pub fn on_connect(&self, connection: &dyn Any, data: &mut Extensions) {
        let Some(stream) = connection.downcast_ref::<TcpStream>() else { return };
        let Ok(peer) = stream.peer_addr() else { return };
        let client = peer.ip().to_canonical();
        let admitted = {
            let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let count = open.entry(client).or_insert(0);
            let admitted = *count < self.max;
            *count += usize::from(admitted);
            admitted
        };
        match admitted {
            true => {
                data.insert(Admitted { client, open: self.open.clone() });
            }
            false => {
                debug!(%client, max = self.max, "connection refused: too many from this client");
                // SAFETY: shutdown(2) on a descriptor the stream owns and keeps open; it
                // only ends the connection's traffic, the stream still closes it.
                unsafe {
                    libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR);
                }
            }
        }
    }
}
