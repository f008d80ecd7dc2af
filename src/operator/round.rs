//! A policy's planning round, the one thing the reconcile, the hook and the
//! policy pages all call. [`Rounds`] owns what a round needs (the caches, the
//! leadership handle and its patcher, the Prometheus client, the metrics)
//! and every policy's state (hysteresis values, samples, writes handed to
//! the patcher), each behind its own lock, held from planning to
//! submitting, so two rounds of one policy never interleave; the planning
//! itself runs on the blocking pool, never on an async worker.
//!
//! Overlaps are resolved here too: when two policies select a pod the
//! older one wins it ([`wins_over`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio::sync::OwnedMutexGuard;

use super::caches::Caches;
use super::leadership::Leadership;
use super::memory_trim::Churn;
use crate::annotations::POLICY_ANNOTATION;
use crate::apply::{
    Batch, PatchRequest, PodRef, PolicyKey, Priority, Rate, SubmitError, WriteState,
};
use crate::comparator::FeatureGates;
use crate::metrics::{Metrics, PolicyReason};
use crate::plan::{self, NamedPolicy, PlanOptions, PreviousValues, Snapshot};
use crate::pod::PodRecord;
use crate::policy::DeletionCostPolicy;
use crate::prometheus::{PrometheusClient, SignalFetchError};
use crate::signals::SignalSamples;

/// Why a round did not produce a plan.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The planner failed (a bug: it panicked on the blocking pool).
    #[error("planning: {0}")]
    Planning(String),
}

/// Per-policy memory across rounds.
#[derive(Debug, Default)]
pub struct PolicyState {
    previous: PreviousValues,
    samples: SignalSamples,
    last_fetch: Option<tokio::time::Instant>,
    last_refresh: Option<String>,
    signal_error: Option<(String, String)>,
    /// Order-mismatch reasons exported for the policy, zeroed ones included.
    mismatch_reasons: BTreeSet<String>,
    /// Signal-fetch error kinds exported for the policy.
    fetch_error_kinds: BTreeSet<String>,
    /// The pod's resourceVersion as cached when its last value was handed
    /// to the patcher. Only a hint: a value the patcher reports landed is
    /// not sent again while the cache still shows this version (the watch
    /// has not caught up); a value that failed, was dropped or was never
    /// sent is sent again, whatever this says.
    submitted: HashMap<String, Option<String>>,
}

/// What became of a round's patches.
#[derive(Debug)]
pub enum Submission {
    /// Handed to the patcher.
    Sent {
        /// The outcomes to wait for (the hook does).
        batch: Batch,
        /// Values not sent again because they landed a moment ago and the
        /// cache has not shown them yet.
        landed: Vec<PatchRequest>,
    },
    /// Every value the round wants is on its way or landed a moment ago.
    NothingToSend {
        /// As in [`Submission::Sent`].
        landed: Vec<PatchRequest>,
    },
    /// Nothing sent, and why.
    Held(Hold),
}

/// Why a round's patches were not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Hold {
    /// `--dry-run`.
    #[error("the operator runs with --dry-run: nothing was written")]
    DryRun,
    /// A signal could not be read: writing would act on stale data.
    #[error("signals unavailable ({reason}): {message}; no cost was written")]
    SignalsUnavailable {
        /// The condition reason.
        reason: String,
        /// What failed.
        message: String,
    },
    /// This replica does not hold the Lease.
    #[error("this replica does not lead (the Lease is another replica's)")]
    NotLeader,
    /// The term has begun but its writer is not running yet.
    #[error("the leadership term's writer is starting; retry in a moment")]
    WriterStarting,
}

/// A policy's state, held for the length of one round.
pub type PolicyGuard = OwnedMutexGuard<PolicyState>;

/// Where a round reads utilisation.
#[derive(Debug, Clone)]
pub struct SignalSource {
    /// The Prometheus to query (none without `--prometheus-url`).
    pub prometheus: Option<PrometheusClient>,
    /// Per-query timeout.
    pub timeout: Duration,
}

/// What a planning round needs, and every policy's state, each behind its
/// own lock. Built once at start; the reconcile, the hook and the policy
/// pages share it.
pub struct Rounds {
    /// The watched objects a plan reads.
    pub caches: Caches,
    /// Whether this replica leads, and the patcher of its term.
    pub leadership: Leadership,
    /// The operator's metrics (per-policy series are kept here).
    pub metrics: Arc<Metrics>,
    /// Compute and report, write nothing (`--dry-run`).
    pub dry_run: bool,
    /// Whether rounds ran since the heap was last given back.
    pub churn: Churn,
    signals: SignalSource,
    /// The comparator's gates, chosen at start from the cluster's version.
    gates: FeatureGates,
    by_policy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<PolicyState>>>>,
}

impl Rounds {
    /// Options of a live round: the cluster's gates, now, over the pods as
    /// they are (not as if the patches had landed).
    fn plan_options(&self, scale_down_by: Option<usize>) -> PlanOptions {
        PlanOptions {
            gates: self.gates,
            now: Some(Timestamp::now().as_nanosecond()),
            scale_down_by,
            assume_patches_applied: false,
        }
    }

    /// Rounds over `caches`, writing through `leadership`'s patcher.
    pub fn new(
        caches: Caches,
        leadership: Leadership,
        metrics: Arc<Metrics>,
        signals: SignalSource,
        gates: FeatureGates,
        dry_run: bool,
    ) -> Self {
        Rounds {
            caches,
            leadership,
            metrics,
            dry_run,
            churn: Churn::default(),
            signals,
            gates,
            by_policy: Mutex::default(),
        }
    }

    /// Waits for the policy's state: a round of the same policy that is
    /// running (a reconcile, a hook request) finishes first.
    pub async fn lock(&self, policy_key: &str) -> PolicyGuard {
        let slot = match self.by_policy.lock() {
            Ok(mut m) => m.entry(policy_key.to_string()).or_default().clone(),
            // a poisoned map still hands out a fresh, private state
            Err(_) => Arc::default(),
        };
        slot.lock_owned().await
    }

    /// The policy is gone: drops its state and its metric series.
    pub async fn forget(&self, policy_key: &str) {
        let Some(slot) = self
            .by_policy
            .lock()
            .ok()
            .and_then(|mut m| m.remove(policy_key))
        else {
            return;
        };
        let mut guard = slot.lock().await;
        let mut state = std::mem::take(&mut *guard);
        self.remove_series(policy_key, &mut state);
    }

    /// Removes the policy's per-policy metric series (it was deleted or
    /// became invalid), so dashboards do not show a mismatch that no longer
    /// exists.
    pub fn remove_series(&self, policy_key: &str, state: &mut PolicyState) {
        for reason in std::mem::take(&mut state.mismatch_reasons) {
            self.metrics.order_mismatches.remove(&PolicyReason {
                policy: policy_key.to_string(),
                reason,
            });
        }
        for reason in std::mem::take(&mut state.fetch_error_kinds) {
            self.metrics.signal_fetch_errors.remove(&PolicyReason {
                policy: policy_key.to_string(),
                reason,
            });
        }
    }

    /// Exports the plan's order mismatches by reason: sets current reasons,
    /// zeroes the ones that went away; every series ever exported stays
    /// tracked so deleting the policy removes the zeroed ones too. Called
    /// under the policy's lock, so a concurrent forget cannot be undone.
    pub fn export_mismatches(
        &self,
        policy_key: &str,
        state: &mut PolicyState,
        planned: &plan::Plan,
    ) {
        let mut reasons: BTreeMap<String, i64> = BTreeMap::new();
        for m in planned.replica_sets.iter().flat_map(|r| &r.mismatches) {
            *reasons.entry(format!("{:?}", m.reason)).or_default() += 1;
        }
        state.mismatch_reasons.extend(reasons.keys().cloned());
        for reason in &state.mismatch_reasons {
            self.metrics
                .order_mismatches
                .get_or_create(&PolicyReason {
                    policy: policy_key.to_string(),
                    reason: reason.clone(),
                })
                .set(reasons.get(reason).copied().unwrap_or(0));
        }
    }

    /// Plans a validated policy over the caches: refreshes signals when due (or
    /// now, with `force_refresh`), resolves overlaps with other policies, and
    /// plans on the blocking pool.
    pub async fn plan_round(
        &self,
        state: &mut PolicyState,
        policy: &DeletionCostPolicy,
        resolved: &NamedPolicy,
        force_refresh: bool,
        scale_down_by: Option<usize>,
    ) -> Result<PolicyRound, RoundError> {
        if force_refresh {
            state.last_fetch = None;
        }
        self.refresh_signals(resolved, state).await;
        self.churn.note();
        let caches = self.caches.clone();
        let others = self.caches.policies();
        let opts = self.plan_options(scale_down_by);
        let (policy, resolved_owned) = (policy.clone(), resolved.clone());
        // moved into the planner and back: the lock keeps everyone else out
        let samples = std::mem::take(&mut state.samples);
        let previous = std::mem::take(&mut state.previous);
        let joined = tokio::task::spawn_blocking(move || {
            let planned = plan_over_caches(
                &caches,
                &others,
                &policy,
                &resolved_owned,
                &samples,
                &previous,
                &opts,
            );
            (planned, samples)
        })
        .await;
        let ((mut planned, releases, versions, conflicts), samples) = match joined {
            Ok(done) => done,
            Err(e) => {
                return Err(RoundError::Planning(format!(
                    "{}: the planner failed: {e}",
                    resolved.key()
                )))
            }
        };
        state.samples = samples;
        // nothing after this reads the plan's values: moved, not copied
        state.previous = std::mem::take(&mut planned.values);
        Ok(PolicyRound {
            resolved: resolved.clone(),
            plan: planned,
            releases,
            conflicts,
            signal_error: state.signal_error.clone(),
            last_refresh: state.last_refresh.clone(),
            versions,
        })
    }

    /// What a policy's next round would plan, without running one: over the
    /// caches, with the samples and hysteresis values of its last round and
    /// overlaps resolved, but no signal refresh, nothing written and the
    /// policy's state left as it was. Waits for a running round of the policy.
    /// `render` turns the plan into the answer on the blocking pool, where the
    /// snapshot it was planned over is still at hand.
    pub async fn preview_round<R: Send + 'static>(
        &self,
        policy: &DeletionCostPolicy,
        resolved: &NamedPolicy,
        scale_down_by: Option<usize>,
        render: impl FnOnce(Preview<'_>) -> R + Send + 'static,
    ) -> Result<R, PreviewError> {
        let state = self.lock(&resolved.key()).await;
        if !resolved.spec.utilization_signals().is_empty() && state.last_fetch.is_none() {
            return Err(PreviewError::NotPlannedYet(resolved.key()));
        }
        self.churn.note();
        let caches = self.caches.clone();
        let others = self.caches.policies();
        let opts = self.plan_options(scale_down_by);
        let (policy, resolved) = (policy.clone(), resolved.clone());
        let key = resolved.key();
        // the guard goes along: no round of this policy changes the samples meanwhile
        tokio::task::spawn_blocking(move || {
            let snapshot = caches.snapshot(&resolved.namespace);
            let (excluded, conflicts) = overlaps(&snapshot, &others, &policy, &resolved);
            let plan = plan::plan_excluding(
                &resolved,
                &snapshot,
                &state.samples,
                &state.previous,
                &opts,
                &excluded,
            );
            render(Preview {
                resolved: &resolved,
                plan,
                snapshot: &snapshot,
                opts: &opts,
                conflicts,
                signal_error: state.signal_error.clone(),
            })
        })
        .await
        .map_err(|e| PreviewError::Planner(key, e.to_string()))
    }

    /// Hands a round's patches to the patcher, level-triggered: every value
    /// the round wants that the cache does not show is sent, unless the
    /// patcher has it on its way already or landed it a moment ago (the
    /// watch has not caught up). A value that failed or was dropped (a term
    /// that ended, a drain) is therefore sent again by the next round.
    /// Urgent rounds (the hook) also re-submit values already queued: they
    /// move ahead of background work and the batch reports their outcome.
    pub fn submit_round(
        &self,
        state: &mut PolicyState,
        round: &PolicyRound,
        priority: Priority,
    ) -> Result<Submission, SubmitError> {
        state
            .submitted
            .retain(|pod, _| round.versions.contains_key(pod));
        if self.dry_run {
            return Ok(Submission::Held(Hold::DryRun));
        }
        if let Some((reason, message)) = &round.signal_error {
            return Ok(Submission::Held(Hold::SignalsUnavailable {
                reason: reason.clone(),
                message: message.clone(),
            }));
        }
        if !self.leadership.is_leader() {
            return Ok(Submission::Held(Hold::NotLeader));
        }
        let Some(patcher) = self.leadership.patcher() else {
            return Ok(Submission::Held(Hold::WriterStarting));
        };
        let (ns, name) = (&round.resolved.namespace, &round.resolved.name);
        let key = PolicyKey::new(ns, name);
        let requests = round.requests();
        // failures of pods the policy no longer wants to write are history
        let wanted: std::collections::HashSet<&PodRef> = requests.iter().map(|r| &r.pod).collect();
        patcher.retain_failed(&key, |pod| wanted.contains(pod));
        let known = patcher.write_states(requests.iter().map(|r| &r.pod));
        let mut send = Vec::new();
        let mut landed = Vec::new();
        for (req, known) in requests.into_iter().zip(known) {
            let seen = round.versions.get(&req.pod.name).cloned().flatten();
            match known {
                Some(WriteState::Pending(p)) if p == req && priority == Priority::Background => {}
                Some(WriteState::Landed(p, _))
                    if p == req && state.submitted.get(&req.pod.name) == Some(&seen) =>
                {
                    landed.push(req)
                }
                _ => send.push((req, seen)),
            }
        }
        if send.is_empty() {
            return Ok(Submission::NothingToSend { landed });
        }
        let rate =
            round.resolved.spec.rate_limit.and_then(|r| {
                Rate::new(&format!("{ns}/{name} spec.rateLimit"), r.qps, r.burst).ok()
            });
        patcher.set_policy_rate(&key, rate);
        let seen: Vec<(String, Option<String>)> = send
            .iter()
            .map(|(r, seen)| (r.pod.name.clone(), seen.clone()))
            .collect();
        let batch = patcher.submit_batch(send.into_iter().map(|(r, _)| r).collect(), priority)?;
        state.submitted.extend(seen);
        Ok(Submission::Sent { batch, landed })
    }

    /// Reads each utilisation signal when its refresh is due; keeps the last good
    /// samples on failure and reports why.
    async fn refresh_signals(&self, policy: &NamedPolicy, state: &mut PolicyState) {
        let util = policy.spec.utilization_signals();
        if util.is_empty() {
            state.signal_error = None;
            return;
        }
        let due = state
            .last_fetch
            .is_none_or(|t| t.elapsed() >= policy.spec.refresh_interval);
        if !due {
            return;
        }
        let Some(prom) = &self.signals.prometheus else {
            state.signal_error = Some((
                "NoPrometheus".into(),
                "the policy has utilization signals but the operator runs without --prometheus-url"
                    .into(),
            ));
            return;
        };
        let labels = policy.spec.selector_labels();
        let mut error = None;
        for (index, u) in util {
            let fetched = prom
                .fetch_signal(u, &policy.namespace, &labels, self.signals.timeout)
                .await;
            match fetched {
                Ok(fetched) => {
                    state.samples.utilization.insert(index, fetched.samples);
                }
                Err(SignalFetchError::Query(e)) => {
                    error = Some((
                        "BadQuery".to_string(),
                        format!("spec.signals[{index}].utilization.prometheus.query: {e}"),
                    ));
                }
                Err(SignalFetchError::Prometheus(e)) => {
                    self.metrics
                        .signal_fetch_errors
                        .get_or_create(&PolicyReason {
                            policy: policy.key(),
                            reason: e.kind().to_string(),
                        })
                        .inc();
                    state.fetch_error_kinds.insert(e.kind().to_string());
                    tracing::warn!(policy = %policy.key(), signal = index, error = %e, "utilization query failed; keeping last values");
                    error = Some((camel_case(e.kind()), format!("spec.signals[{index}]: {e}")));
                }
            }
        }
        state.last_fetch = Some(tokio::time::Instant::now());
        if error.is_none() {
            state.last_refresh = Some(Timestamp::now().to_string());
        }
        state.signal_error = error;
    }
}

/// One planning round of a policy: the plan and what surrounds it.
#[derive(Debug)]
pub struct PolicyRound {
    /// The validated policy.
    pub resolved: NamedPolicy,
    /// The plan over the live pods.
    pub plan: plan::Plan,
    /// Pods (name, uid) carrying this policy's cost that it no longer manages.
    pub releases: Vec<(String, String)>,
    /// Older policies that win shared pods, with counts.
    pub conflicts: Vec<(String, usize)>,
    /// Why signals are unavailable (writes are held meanwhile).
    pub signal_error: Option<(String, String)>,
    /// When signals were last read successfully.
    pub last_refresh: Option<String>,
    /// resourceVersion of each pod the round wants to write, as cached.
    pub versions: HashMap<String, Option<String>>,
}

impl PolicyRound {
    /// The patches this round wants: new costs, then releases.
    pub fn requests(&self) -> Vec<PatchRequest> {
        let (ns, name) = (&self.resolved.namespace, &self.resolved.name);
        let mut reqs: Vec<PatchRequest> = self
            .plan
            .patches
            .iter()
            .map(|p| PatchRequest::set(PodRef::new(ns, &*p.pod), name, p.cost).with_uid(&*p.uid))
            .collect();
        reqs.extend(
            self.releases
                .iter()
                .map(|(pod, uid)| PatchRequest::remove(PodRef::new(ns, pod), name).with_uid(uid)),
        );
        reqs
    }
}

type Planned = (
    plan::Plan,
    Vec<(String, String)>,
    HashMap<String, Option<String>>,
    Vec<(String, usize)>,
);

/// The CPU-bound part of a round (off the async runtime): snapshot, overlaps,
/// plan, releases and the resourceVersions of the pods to write.
fn plan_over_caches(
    caches: &Caches,
    others: &[Arc<DeletionCostPolicy>],
    policy: &DeletionCostPolicy,
    resolved: &NamedPolicy,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
) -> Planned {
    let name = &resolved.name;
    let snapshot = caches.snapshot(&resolved.namespace);
    let (excluded, conflicts) = overlaps(&snapshot, others, policy, resolved);
    let planned = plan::plan_excluding(resolved, &snapshot, samples, previous, opts, &excluded);

    // pods carrying our cost that we no longer manage
    let managed: BTreeSet<&str> = planned.pods.iter().map(|p| &*p.name).collect();
    let in_ns = |p: &PodRecord| p.metadata.namespace.as_deref() == Some(&resolved.namespace);
    let releases = snapshot
        .pods
        .iter()
        .filter(|p| {
            in_ns(p)
                && p.annotations().get(POLICY_ANNOTATION) == Some(name)
                && !managed.contains(p.name_any().as_str())
                && crate::comparator::is_pod_active(p)
        })
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect::<Vec<_>>();
    let wanted: BTreeSet<&str> = planned
        .patches
        .iter()
        .map(|p| &*p.pod)
        .chain(releases.iter().map(|(n, _)| n.as_str()))
        .collect();
    let versions = snapshot
        .pods
        .iter()
        .filter(|p| in_ns(p) && wanted.contains(p.name_any().as_str()))
        .map(|p| (p.name_any(), p.resource_version()))
        .collect();
    (planned, releases, versions, conflicts)
}

/// Overlapping policies: the older one keeps the shared pods. The pods older
/// policies win from this one, and per such policy how many.
fn overlaps(
    snapshot: &Snapshot,
    others: &[Arc<DeletionCostPolicy>],
    policy: &DeletionCostPolicy,
    resolved: &NamedPolicy,
) -> (BTreeSet<String>, Vec<(String, usize)>) {
    let (ns, name) = (&resolved.namespace, &resolved.name);
    let mine = plan::selected_pods(resolved, snapshot);
    let mut excluded = BTreeSet::new();
    let mut conflicts = Vec::new();
    for other in others {
        if other.namespace().as_deref() != Some(ns.as_str())
            || &other.name_any() == name
            || other.metadata.deletion_timestamp.is_some()
            || !wins_over(other, policy)
        {
            continue;
        }
        let Ok(o) = NamedPolicy::resolve(&other.name_any(), ns, &other.spec) else {
            continue;
        };
        let shared: Vec<String> = plan::selected_pods(&o, snapshot)
            .intersection(&mine)
            .cloned()
            .collect();
        if !shared.is_empty() {
            conflicts.push((o.key(), shared.len()));
            excluded.extend(shared);
        }
    }
    (excluded, conflicts)
}

/// Why a policy's page cannot be planned now.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// The policy reads utilisation but no round has read it yet.
    #[error("{0}: no planning round has read its signals yet")]
    NotPlannedYet(String),
    /// The planner task failed.
    #[error("{0}: the planner failed: {1}")]
    Planner(String, String),
}

/// A plan made by [`Rounds::preview_round`], with what it was made from.
pub struct Preview<'a> {
    /// The validated policy.
    pub resolved: &'a NamedPolicy,
    /// The plan over the live pods.
    pub plan: plan::Plan,
    /// The namespace's snapshot the plan was made over.
    pub snapshot: &'a Snapshot,
    /// The options it was made with.
    pub opts: &'a PlanOptions,
    /// Older policies that win shared pods, with counts.
    pub conflicts: Vec<(String, usize)>,
    /// Why signals were unavailable at the last round (writes are held).
    pub signal_error: Option<(String, String)>,
}

/// `invalid_body` -> `InvalidBody`: condition reasons are CamelCase.
fn camel_case(kind: &str) -> String {
    kind.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Older policy (then smaller name) wins a pod both select.
pub fn wins_over(a: &DeletionCostPolicy, b: &DeletionCostPolicy) -> bool {
    let key = |p: &DeletionCostPolicy| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.name_any(),
        )
    };
    key(a) < key(b)
}
