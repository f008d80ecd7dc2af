//! Patcher counters, read by the metrics endpoint at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::kind::WriteKind;

/// Live counters and gauges (atomics; the patcher updates them).
#[derive(Debug, Default)]
pub struct PatcherStats {
    applied: AtomicU64,
    gone: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    coalesced: AtomicU64,
    rejected: AtomicU64,
    abandoned: AtomicU64,
    rate_limit_wait_nanos: AtomicU64,
    /// Per-write waits, counted per bucket of [`WAIT_BUCKETS`] (last: +Inf).
    wait_buckets: [AtomicU64; WAIT_BUCKETS.len() + 1],
    queue_depth: AtomicU64,
    retrying: AtomicU64,
    in_flight: AtomicU64,
    /// Failed attempts, per reason of [`ERROR_REASONS`].
    errors: [AtomicU64; ERROR_REASONS.len()],
    /// Writes sent, of every kind, per [`WriteKind`] and outcome of [`OUTCOMES`].
    writes: [[AtomicU64; OUTCOMES.len()]; WriteKind::ALL.len()],
    /// Writes other than pod patches waiting for their permit.
    permits_waiting: AtomicU64,
    /// Scale-in writes that took a token of the scale-in allowance.
    scale_in_allowance: AtomicU64,
}

/// Why an attempt failed, as the `reason` label of
/// `deletion_cost_patch_errors_total` ([`WriteError::label`](super::WriteError::label)).
pub const ERROR_REASONS: [&str; 8] = [
    "gone",
    "too_many_requests",
    "conflict",
    "server_error",
    "timeout",
    "transport",
    "unauthorized",
    "rejected",
];

/// What became of a write, as the `outcome` label of
/// `deletion_cost_api_writes_total`: `ok`, or the reason it failed
/// ([`ERROR_REASONS`]).
pub const OUTCOMES: [&str; 9] = [
    "ok",
    "gone",
    "too_many_requests",
    "conflict",
    "server_error",
    "timeout",
    "transport",
    "unauthorized",
    "rejected",
];

/// Upper bounds (seconds) of the rate-limit wait histogram.
pub const WAIT_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Writes that landed.
    pub applied: u64,
    /// Writes whose pod was gone (counted as done).
    pub gone: u64,
    /// Writes that failed retryably and were scheduled again.
    pub retried: u64,
    /// Writes refused for good (other 4xx).
    pub failed: u64,
    /// Submissions that replaced a value not yet written.
    pub coalesced: u64,
    /// Submissions refused because the queue was full (backpressure).
    pub rejected: u64,
    /// Values given up at the drain deadline.
    pub abandoned: u64,
    /// Total time ready work was held back by the rate limiters.
    pub rate_limit_wait: Duration,
    /// Writes per wait bucket of [`WAIT_BUCKETS`] (not cumulative; last: +Inf).
    pub wait_buckets: [u64; WAIT_BUCKETS.len() + 1],
    /// Pods queued, in flight or waiting to retry.
    pub queue_depth: u64,
    /// Pods waiting for a retry.
    pub retrying: u64,
    /// Writes in flight.
    pub in_flight: u64,
    /// Failed attempts per reason of [`ERROR_REASONS`] (a 403 that persists
    /// shows as a steady rise of `unauthorized`).
    pub errors: [u64; ERROR_REASONS.len()],
    /// Writes sent, of every kind: per [`WriteKind`] (in the order of
    /// [`WriteKind::ALL`]) and outcome (in the order of [`OUTCOMES`]).
    pub writes: [[u64; OUTCOMES.len()]; WriteKind::ALL.len()],
    /// Writes other than pod patches waiting for their permit.
    pub permits_waiting: u64,
    /// Scale-in writes sent on the scale-in allowance rather than within
    /// the operator-wide limit.
    pub scale_in_allowance: u64,
}

impl StatsSnapshot {
    /// Writes sent to the API server (every attempt counts once).
    pub fn attempts(&self) -> u64 {
        self.applied + self.gone + self.retried + self.failed
    }

    /// Writes of `kind` sent so far, whatever their outcome.
    pub fn writes_of(&self, kind: WriteKind) -> u64 {
        self.writes[kind.index()].iter().sum()
    }
}

/// Which counter to bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    Applied,
    Gone,
    Retried,
    Failed,
    Coalesced,
    Rejected,
    Abandoned,
}

impl PatcherStats {
    pub(crate) fn add(&self, which: Count, n: u64) {
        let c = match which {
            Count::Applied => &self.applied,
            Count::Gone => &self.gone,
            Count::Retried => &self.retried,
            Count::Failed => &self.failed,
            Count::Coalesced => &self.coalesced,
            Count::Rejected => &self.rejected,
            Count::Abandoned => &self.abandoned,
        };
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one failed attempt by its reason (unknown labels are not counted).
    pub(crate) fn add_error(&self, label: &str) {
        if let Some(i) = ERROR_REASONS.iter().position(|r| *r == label) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one write sent, by kind and outcome (`ok` or an error label;
    /// unknown labels are not counted).
    pub(crate) fn add_write(&self, kind: WriteKind, outcome: &str) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.writes[kind.index()][i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_scale_in_allowance(&self) {
        self.scale_in_allowance.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_permits_waiting(&self, n: usize) {
        self.permits_waiting.store(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_wait(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.rate_limit_wait_nanos
            .fetch_add(nanos, Ordering::Relaxed);
        let secs = d.as_secs_f64();
        let i = WAIT_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(WAIT_BUCKETS.len());
        self.wait_buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_queue_gauges(&self, depth: usize, retrying: usize) {
        self.queue_depth.store(depth as u64, Ordering::Relaxed);
        self.retrying.store(retrying as u64, Ordering::Relaxed);
    }

    pub(crate) fn set_gauges(&self, depth: usize, retrying: usize, in_flight: usize) {
        self.queue_depth.store(depth as u64, Ordering::Relaxed);
        self.retrying.store(retrying as u64, Ordering::Relaxed);
        self.in_flight.store(in_flight as u64, Ordering::Relaxed);
    }

    /// Read every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            applied: get(&self.applied),
            gone: get(&self.gone),
            retried: get(&self.retried),
            failed: get(&self.failed),
            coalesced: get(&self.coalesced),
            rejected: get(&self.rejected),
            abandoned: get(&self.abandoned),
            rate_limit_wait: Duration::from_nanos(get(&self.rate_limit_wait_nanos)),
            wait_buckets: std::array::from_fn(|i| get(&self.wait_buckets[i])),
            queue_depth: get(&self.queue_depth),
            retrying: get(&self.retrying),
            in_flight: get(&self.in_flight),
            errors: std::array::from_fn(|i| get(&self.errors[i])),
            writes: std::array::from_fn(|k| std::array::from_fn(|o| get(&self.writes[k][o]))),
            permits_waiting: get(&self.permits_waiting),
            scale_in_allowance: get(&self.scale_in_allowance),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_ok_and_every_error_reason() {
        assert_eq!(OUTCOMES[0], "ok");
        assert_eq!(&OUTCOMES[1..], &ERROR_REASONS[..]);
    }

    #[test]
    fn writes_are_counted_by_kind_and_outcome() {
        let stats = PatcherStats::default();
        stats.add_write(WriteKind::Status, "ok");
        stats.add_write(WriteKind::Status, "conflict");
        stats.add_write(WriteKind::Events, "ok");
        stats.add_write(WriteKind::Events, "outside_term");
        let s = stats.snapshot();
        assert_eq!(s.writes_of(WriteKind::Status), 2);
        assert_eq!(s.writes_of(WriteKind::Events), 1);
        assert_eq!(s.writes_of(WriteKind::Pods), 0);
        assert_eq!(s.writes[WriteKind::Status.index()][3], 1);
    }
}
