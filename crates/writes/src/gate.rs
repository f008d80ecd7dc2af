//! The write gate: whether this replica may write at this instant. The
//! election opens it until the renew deadline of the last renewal the API
//! server recorded; the patcher checks it right before each write, so a
//! leader whose term may have ended (renewals failing, the process paused)
//! stops writing by itself, before another replica can take the Lease.

use tokio::sync::watch;
use tokio::time::Instant;

/// The state of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Writes always allowed (no leader election).
    Open,
    /// Writes allowed before this instant (a term recorded by the server).
    Until(Instant),
    /// No writes (following, or the term ended).
    Closed,
}

impl Gate {
    /// Whether a write may start at `now`.
    pub fn allows(self, now: Instant) -> bool {
        match self {
            Gate::Open => true,
            Gate::Until(t) => now < t,
            Gate::Closed => false,
        }
    }
}

/// A view of the gate (cheap to clone; every clone sees every change).
#[derive(Debug, Clone)]
pub struct WriteGate(watch::Receiver<Gate>);

impl WriteGate {
    /// A gate that is always open.
    pub fn open() -> Self {
        WriteGate(watch::channel(Gate::Open).1)
    }

    /// A gate following `rx`.
    pub fn new(rx: watch::Receiver<Gate>) -> Self {
        WriteGate(rx)
    }

    /// The gate now.
    pub fn get(&self) -> Gate {
        *self.0.borrow()
    }

    /// Whether a write may start now.
    pub fn allows_now(&self) -> bool {
        self.get().allows(Instant::now())
    }

    /// Resolves at the next change (never, once the sender is gone).
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_term_allows_writes_only_before_its_deadline() {
        let now = Instant::now();
        let gate = Gate::Until(now + Duration::from_secs(1));
        assert!(gate.allows(now));
        assert!(!gate.allows(now + Duration::from_secs(1)));
        assert!(Gate::Open.allows(now));
        assert!(!Gate::Closed.allows(now));
    }
}
