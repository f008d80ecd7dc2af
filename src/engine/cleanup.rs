//! A deleted policy's cleanup, under its lock like every other round: its
//! queued values dropped, then every cost it wrote removed through the
//! limiter. A removal that landed a moment ago, which the pod cache does not
//! show yet, is not sent again.

use std::time::Duration;

use tokio::time::timeout;

use super::Engine;
use crate::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};
use crate::writes::{
    PatchRequest, PodRef, PolicyKey, Priority, SubmitError, WriteOutcome, WriteState,
};

/// Why a cleanup has to be tried again.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// Some removals did not land (refused, or not within the wait).
    #[error("{policy}: {remaining} cost removal(s) did not land yet")]
    Incomplete {
        /// The policy.
        policy: String,
        /// Removals still to do.
        remaining: usize,
    },
    /// The patcher refused the removals.
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

impl Engine {
    /// Removes every cost `key` wrote, waiting at most `wait` for the
    /// removals; forgets the policy once none is left.
    pub async fn cleanup(&self, key: &PolicyKey, wait: Duration) -> Result<usize, CleanupError> {
        let mut state = self.policies.lock(key).await;
        let incomplete = |remaining| CleanupError::Incomplete {
            policy: key.to_string(),
            remaining,
        };
        let in_flight: Vec<PodRef> = match self.leadership.patcher() {
            Some(p) => p.cancel_policy(key),
            None => Vec::new(),
        };
        let mut ours: Vec<(String, String)> = self
            .caches
            .pods()
            .into_iter()
            .filter(|p| {
                p.identity.namespace.as_deref() == Some(key.namespace.as_str())
                    && p.annotations().get(POLICY_ANNOTATION) == Some(key.name.as_str())
                    && p.annotations().get(POD_DELETION_COST).is_some()
            })
            .map(|p| {
                let name = p.identity.name.as_deref().unwrap_or_default().to_string();
                (name, p.identity.uid.clone().unwrap_or_default())
            })
            .collect();
        // a value in flight may land after the cache was read: removed behind it
        for pod in in_flight {
            if !ours.iter().any(|(n, _)| *n == pod.name) {
                let uid = self
                    .caches
                    .pod(&key.namespace, &pod.name)
                    .and_then(|p| p.identity.uid.clone())
                    .unwrap_or_default();
                ours.push((pod.name, uid));
            }
        }
        let Some(patcher) = self.leadership.patcher() else {
            if ours.is_empty() {
                drop(state);
                self.forget(key).await;
                return Ok(0);
            }
            return Err(incomplete(ours.len()));
        };
        let reqs: Vec<PatchRequest> = ours
            .iter()
            .map(|(pod, uid)| {
                PatchRequest::remove(PodRef::new(&key.namespace, pod), &key.name).with_uid(uid)
            })
            .collect();
        // removals that landed a moment ago: the watch has not caught up
        let known = patcher.write_states(reqs.iter().map(|r| &r.pod));
        let reqs: Vec<PatchRequest> = reqs
            .into_iter()
            .zip(known)
            .filter(|(r, k)| !matches!(k, Some(WriteState::Landed(p, _)) if p == r))
            .map(|(r, _)| r)
            .collect();
        tracing::info!(policy = %key, pods = reqs.len(), "policy deleted: removing its costs");
        state.submitted.clear();
        drop(state);
        if reqs.is_empty() {
            self.forget(key).await;
            return Ok(0);
        }
        let batch = patcher.submit_batch(reqs, Priority::Background)?;
        let Ok(report) = timeout(wait, batch.wait()).await else {
            return Err(incomplete(ours.len()));
        };
        let remaining = report
            .outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, WriteOutcome::Applied | WriteOutcome::Gone))
            .count();
        if remaining > 0 {
            return Err(incomplete(remaining));
        }
        self.forget(key).await;
        Ok(report.outcomes.len())
    }
}
