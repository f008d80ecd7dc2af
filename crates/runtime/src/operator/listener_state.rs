//! What the metrics listener's handlers read (`/metrics`, the probes, the
//! policy pages): shared by the listener and the pages it serves.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::sync::WatchHealth;
use crate::engine::Engine;

/// What the listener's handlers read.
pub struct ServerState {
    /// The engine (the pages preview its rounds; `/metrics` reads its metrics).
    pub engine: Arc<Engine>,
    /// Which caches have synced.
    pub health: Arc<WatchHealth>,
    /// This replica's identity, named on the pages.
    pub identity: String,
    /// Policy pages built at once (one: each plans a whole namespace).
    pub pages: Semaphore,
}

impl ServerState {
    /// State for the listener; one page is built at a time.
    pub fn new(engine: Arc<Engine>, health: Arc<WatchHealth>, identity: String) -> Self {
        ServerState {
            engine,
            health,
            identity,
            pages: Semaphore::new(1),
        }
    }
}
