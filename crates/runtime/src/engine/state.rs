//! Each policy's memory across rounds, behind its own lock: one round of a
//! policy at a time (a reconcile, a hook call, a page), held from planning
//! to submitting.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::plan::PreviousValues;
use crate::signals::SignalSamples;
use crate::writes::PolicyKey;

/// One policy's memory across rounds.
#[derive(Debug, Default)]
pub(super) struct PolicyState {
    /// Signal values of the last plan (hysteresis).
    pub previous: PreviousValues,
    /// The last good utilisation samples.
    pub samples: SignalSamples,
    /// When signals were last read (successfully or not).
    pub last_fetch: Option<tokio::time::Instant>,
    /// When signals were last read successfully (RFC 3339).
    pub last_refresh: Option<String>,
    /// Why the last read failed.
    pub signal_problem: Option<SignalProblem>,
    /// Order-mismatch reasons exported for the policy, zeroed ones included.
    pub mismatch_reasons: BTreeSet<String>,
    /// Signal-fetch error kinds exported for the policy.
    pub fetch_error_kinds: BTreeSet<String>,
    /// The pod's resourceVersion as cached when its last value was handed
    /// to the patcher. Only a hint: a value the patcher reports landed is
    /// not sent again while the cache still shows this version (the watch
    /// has not caught up); a value that failed, was dropped or was never
    /// sent is sent again, whatever this says.
    pub submitted: HashMap<String, Option<String>>,
    /// Pods a scale-in corrected, and until when background rounds leave
    /// them alone: a background write landing between the correction and
    /// the ReplicaSet controller's deletions could move the cut.
    pub held: HashMap<String, tokio::time::Instant>,
}

impl PolicyState {
    /// Keeps background rounds off `pods` until `until`.
    pub fn hold<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a String>,
        until: tokio::time::Instant,
    ) {
        let now = tokio::time::Instant::now();
        self.held.retain(|_, t| *t > now);
        for pod in pods {
            self.held.insert(pod.clone(), until);
        }
    }

    /// How soon the first hold still running ends: the round after it
    /// writes what the hold kept back.
    pub fn hold_ends_in(&self) -> Option<std::time::Duration> {
        let now = tokio::time::Instant::now();
        self.held
            .values()
            .filter(|t| **t > now)
            .min()
            .map(|t| *t - now)
    }

    /// Whether background rounds leave `pod` alone now.
    pub fn is_held(&self, pod: &str) -> bool {
        self.held
            .get(pod)
            .is_some_and(|t| *t > tokio::time::Instant::now())
    }
}

/// A policy's state, held for the length of one round.
pub(super) type PolicyGuard = OwnedMutexGuard<PolicyState>;

/// Every policy's state, each behind its own lock.
#[derive(Default)]
pub(super) struct Policies {
    by_key: Mutex<HashMap<PolicyKey, Arc<tokio::sync::Mutex<PolicyState>>>>,
}

impl Policies {
    /// Waits for the policy's state: a running round of the same policy
    /// finishes first.
    pub async fn lock(&self, key: &PolicyKey) -> PolicyGuard {
        let slot = match self.by_key.lock() {
            Ok(mut m) => m.entry(key.clone()).or_default().clone(),
            // a poisoned map still hands out a fresh, private state
            Err(_) => Arc::default(),
        };
        slot.lock_owned().await
    }

    /// Takes the policy's state out, once its running round has finished.
    pub async fn remove(&self, key: &PolicyKey) -> Option<PolicyState> {
        let slot = self.by_key.lock().ok().and_then(|mut m| m.remove(key))?;
        let mut guard = slot.lock().await;
        Some(std::mem::take(&mut *guard))
    }
}

/// Why a policy's signals could not be read (writes are held meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalProblem {
    /// The condition reason (`NoPrometheus`, `BadQuery`, `Unreachable`...).
    pub reason: String,
    /// What failed.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::{advance, Instant};

    /// The reconcile is due again when a scale-in's hold ends: without it the
    /// values the hold kept back waited for the next refresh (seen on the
    /// real server: a policy's costs stale for over a minute after a
    /// scale-in).
    #[tokio::test(start_paused = true)]
    async fn the_first_running_hold_says_when_the_next_round_is_due() {
        let mut state = PolicyState::default();
        assert_eq!(state.hold_ends_in(), None);
        let pods = ["a".to_string(), "b".to_string()];
        state.hold(&pods[..1], Instant::now() + Duration::from_secs(15));
        advance(Duration::from_secs(5)).await;
        state.hold(&pods[1..], Instant::now() + Duration::from_secs(15));
        assert_eq!(state.hold_ends_in(), Some(Duration::from_secs(10)));
        assert!(state.is_held("a") && state.is_held("b"));
        advance(Duration::from_secs(10)).await;
        // a's hold is over; b's ends 5 s later
        assert!(!state.is_held("a"));
        assert_eq!(state.hold_ends_in(), Some(Duration::from_secs(5)));
        advance(Duration::from_secs(5)).await;
        assert_eq!(state.hold_ends_in(), None);
    }
}
