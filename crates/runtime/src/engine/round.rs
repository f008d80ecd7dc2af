//! One round of a policy, in parts: read its signals when due, plan it over
//! the caches (on the blocking pool), and hand its patches to the patcher,
//! level-triggered. [`super::Engine`]'s operations put these together under
//! the policy's lock.
//!
//! Overlaps are resolved here too: when two policies select a pod the older
//! one wins it ([`crate::policy::overlap`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::caches::Caches;
use super::policy_index::ValidPolicy;
use super::state::{PolicyState, SignalProblem};
use super::{key_of, Engine};
use crate::annotations::POLICY_ANNOTATION;
use crate::metrics::PolicyReason;
use crate::plan::{
    self, NamedPolicy, PlanOptions, PreviousValues, ReplicaSetCorrection, ScaleInTarget, Snapshot,
};
use crate::pod::PodRecord;
use crate::policy::{overlap, DeletionCostPolicy, Writes};
use crate::prometheus::SignalFetchError;
use crate::signals::SignalSamples;
use crate::writes::{
    PatchRequest, Patcher, PodRef, PolicyKey, Priority, Rate, SubmitError, WriteState,
};

/// Why a round did not produce a plan.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The planner failed (a bug: it panicked on the blocking pool).
    #[error("planning {policy}: the planner failed: {message}")]
    Planning {
        /// The policy.
        policy: String,
        /// What the blocking pool said.
        message: String,
    },
}

/// A pod that carries this policy's cost although the policy no longer
/// manages it: its cost is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Pod name.
    pub pod: String,
    /// Pod UID.
    pub uid: String,
}

/// An older policy that wins pods this one selects too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The winner, as `namespace/name`.
    pub winner: String,
    /// How many pods it wins.
    pub pods: usize,
}

/// What became of a round's patches.
#[derive(Debug)]
pub enum Submission {
    /// Handed to the patcher.
    Sent {
        /// The outcomes to wait for (the hook does).
        batch: crate::writes::Batch,
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
    #[error("signals unavailable ({}): {}; no cost was written", .0.reason, .0.message)]
    SignalsUnavailable(SignalProblem),
    /// This replica does not hold the Lease.
    #[error("this replica does not lead (the Lease is another replica's)")]
    NotLeader,
    /// The term has begun but its writer is not running yet.
    #[error("the leadership term's writer is starting; retry in a moment")]
    WriterStarting,
}

/// One planning round of a policy: the plan and what surrounds it.
#[derive(Debug, Clone)]
pub(super) struct PolicyRound {
    /// The validated policy.
    pub resolved: NamedPolicy,
    /// The plan over the live pods.
    pub plan: plan::Plan,
    /// Pods carrying this policy's cost that it no longer manages.
    pub releases: Vec<Release>,
    /// Older policies that win shared pods.
    pub conflicts: Vec<Conflict>,
    /// Why signals are unavailable (writes are held meanwhile).
    pub signals: Option<SignalProblem>,
    /// When signals were last read successfully.
    pub last_refresh: Option<String>,
    /// resourceVersion of each pod the round wants to write, as cached.
    pub versions: HashMap<String, Option<String>>,
    /// A scale-in's minimal correction of each ReplicaSet it scales.
    pub corrections: Vec<ReplicaSetCorrection>,
    /// A scale-in's snapshot and options, kept to price it (`--prices`).
    pub pricing: Option<PricingInput>,
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
                .map(|r| PatchRequest::remove(PodRef::new(ns, &r.pod), name).with_uid(&r.uid)),
        );
        reqs
    }
}

/// What a planned round carries back from the blocking pool.
pub(super) struct Planned {
    pub plan: plan::Plan,
    pub releases: Vec<Release>,
    pub versions: HashMap<String, Option<String>>,
    pub conflicts: Vec<Conflict>,
    pub corrections: Vec<ReplicaSetCorrection>,
}

/// The CPU-bound part of a round (off the async runtime): overlaps, plan,
/// releases and the resourceVersions of the pods to write, over `snapshot`.
pub(super) fn plan_over(
    snapshot: &Snapshot,
    others: &[ValidPolicy],
    policy: &DeletionCostPolicy,
    resolved: &NamedPolicy,
    memory: (&SignalSamples, &PreviousValues),
    opts: &PlanOptions,
    scale_in: Option<&ScaleInTarget>,
) -> Planned {
    let (samples, previous) = memory;
    let name = &resolved.name;
    let (excluded, conflicts) = overlaps(snapshot, others, policy, resolved);
    let (planned, corrections) = match scale_in {
        Some(target) => plan::plan_scale_in(
            resolved, snapshot, samples, previous, opts, &excluded, target,
        ),
        None => (
            plan::plan_excluding(resolved, snapshot, samples, previous, opts, &excluded),
            Vec::new(),
        ),
    };

    // pods of the namespace carrying our cost that we no longer manage
    let in_ns = |p: &PodRecord| p.identity.namespace.as_deref() == Some(&resolved.namespace);
    let managed: BTreeSet<&str> = planned.pods.iter().map(|p| &*p.name).collect();
    let releases = snapshot
        .pods
        .iter()
        .filter(|p| {
            in_ns(p)
                && p.annotations().get(POLICY_ANNOTATION) == Some(name)
                && !managed.contains(p.name_any().as_str())
                && crate::comparator::is_pod_active(p)
        })
        .map(|p| Release {
            pod: p.name_any(),
            uid: p.uid().unwrap_or_default(),
        })
        .collect::<Vec<_>>();
    let wanted: BTreeSet<&str> = planned
        .patches
        .iter()
        .map(|p| &*p.pod)
        .chain(releases.iter().map(|r| r.pod.as_str()))
        .collect();
    let versions = snapshot
        .pods
        .iter()
        .filter(|p| in_ns(p) && wanted.contains(p.name_any().as_str()))
        .map(|p| (p.name_any(), p.resource_version()))
        .collect();
    Planned {
        plan: planned,
        releases,
        versions,
        conflicts,
        corrections,
    }
}

/// Overlapping policies: the older one keeps the shared pods
/// ([`overlap`]). The pods older policies win from this one, and which
/// policies win them.
pub(super) fn overlaps(
    snapshot: &Snapshot,
    others: &[ValidPolicy],
    policy: &DeletionCostPolicy,
    resolved: &NamedPolicy,
) -> (BTreeSet<String>, Vec<Conflict>) {
    let (ns, name) = (&resolved.namespace, &resolved.name);
    let mine = plan::selected_pods(resolved, snapshot);
    // only the winners' selections are computed: a round runs often
    let winners: Vec<(String, &DeletionCostPolicy, BTreeSet<String>)> = others
        .iter()
        .filter(|o| &o.resolved.namespace == ns && &o.resolved.name != name)
        .filter(|o| overlap::wins_over(&o.policy, policy))
        .map(|o| {
            (
                o.resolved.key(),
                &*o.policy,
                plan::selected_pods(&o.resolved, snapshot),
            )
        })
        .collect();
    let found = overlap::overlaps(
        policy,
        &mine,
        winners.iter().map(|(k, p, s)| (k.clone(), *p, s)),
    );
    let conflicts = found
        .lost_to
        .into_iter()
        .map(|(winner, pods)| Conflict { winner, pods })
        .collect();
    (found.excluded, conflicts)
}

/// Whether the policy reads how many pods each node holds.
fn reads_occupancy(policy: &NamedPolicy) -> bool {
    policy
        .spec
        .signals
        .iter()
        .any(|s| matches!(s, crate::policy::ValidatedSignal::NodeConsolidation(_)))
}

impl Engine {
    /// Options of a live round: the cluster's gates, now, over the pods as
    /// they are (not as if the patches had landed).
    pub(super) fn plan_options(&self, scale_down_by: Option<usize>) -> PlanOptions {
        PlanOptions {
            gates: self.gates,
            now: Some(Timestamp::now().as_nanosecond()),
            scale_down_by,
            assume_patches_applied: false,
            chunks: Default::default(),
        }
    }

    /// A warning when the policy counts pods per node but the caches hold
    /// one namespace's pods only (a namespace-scoped install).
    pub(super) fn partial_occupancy(&self, resolved: &NamedPolicy) -> Option<String> {
        let ns = self.caches.pods_of()?;
        reads_occupancy(resolved).then(|| format!(
            "nodeConsolidation counts only namespace {ns}'s pods on each node: the operator watches that namespace's pods only (installed for one namespace), so a node busy with other namespaces' pods looks emptier than it is"
        ))
    }

    /// Plans a validated policy over the caches: refreshes signals when due
    /// (or now, with `force_refresh`), resolves overlaps with other
    /// policies, and plans on the blocking pool. Called under the policy's
    /// lock (`state`). Background rounds wait for a planner slot; urgent
    /// ones (a scale-in waiting on them) do not queue behind them.
    pub(super) async fn plan_round(
        &self,
        state: &mut PolicyState,
        policy: &DeletionCostPolicy,
        resolved: &NamedPolicy,
        force_refresh: bool,
        scale_in: Option<ScaleInTarget>,
        priority: Priority,
    ) -> Result<PolicyRound, RoundError> {
        if force_refresh {
            state.last_fetch = None;
        }
        self.refresh_signals(resolved, state).await;
        let (mut planned, pricing) = self
            .plan_on_pool(state, policy, resolved, scale_in, priority)
            .await?;
        // nothing after this reads the plan's values: moved, not copied
        state.previous = std::mem::take(&mut planned.plan.values);
        planned
            .plan
            .warnings
            .extend(self.partial_occupancy(resolved));
        Ok(PolicyRound {
            resolved: resolved.clone(),
            plan: planned.plan,
            releases: planned.releases,
            conflicts: planned.conflicts,
            signals: state.signal_problem.clone(),
            last_refresh: state.last_refresh.clone(),
            versions: planned.versions,
            corrections: planned.corrections,
            pricing,
        })
    }

    /// The plan stage of a round, on the blocking pool (a background round
    /// waits for a planner slot; a scale-in does not): a snapshot of the
    /// namespace from the caches, planned with the policy's samples and
    /// last values, which go back to `state`. A scale-in keeps the snapshot
    /// to be priced over (`--prices`).
    async fn plan_on_pool(
        &self,
        state: &mut PolicyState,
        policy: &DeletionCostPolicy,
        resolved: &NamedPolicy,
        scale_in: Option<ScaleInTarget>,
        priority: Priority,
    ) -> Result<(Planned, Option<PricingInput>), RoundError> {
        let caches: Caches = self.caches.clone();
        let others = self.caches.valid_policies(&resolved.namespace);
        let opts = self.plan_options(scale_in.as_ref().map(|t| t.by));
        let (policy, resolved_owned) = (policy.clone(), resolved.clone());
        let slot = match priority {
            Priority::Background => self.planners.clone().acquire_owned().await.ok(),
            Priority::Urgent => None,
        };
        // moved into the planner and back: the lock keeps everyone else out
        let samples = std::mem::take(&mut state.samples);
        let previous = std::mem::take(&mut state.previous);
        // a scale-in is priced over the snapshot it was planned on
        let keep = scale_in.is_some() && self.pricing.is_some();
        let joined = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let snapshot = Arc::new(caches.snapshot(&resolved_owned.namespace));
            let planned = plan_over(
                &snapshot,
                &others,
                &policy,
                &resolved_owned,
                (&samples, &previous),
                &opts,
                scale_in.as_ref(),
            );
            let pricing = keep.then_some(PricingInput { snapshot, opts });
            (planned, samples, pricing)
        })
        .await;
        let (planned, samples, pricing) = joined.map_err(|e| RoundError::Planning {
            policy: resolved.key(),
            message: e.to_string(),
        })?;
        state.samples = samples;
        Ok((planned, pricing))
    }

    /// The patcher a round's writes go to, or why they are held: a dry run,
    /// signals the round could not read, a follower, a term whose writer is
    /// not up yet.
    pub(super) fn writer_for(&self, round: &PolicyRound) -> Result<Patcher, Hold> {
        if self.dry_run {
            return Err(Hold::DryRun);
        }
        if let Some(problem) = &round.signals {
            return Err(Hold::SignalsUnavailable(problem.clone()));
        }
        if !self.leads() {
            return Err(Hold::NotLeader);
        }
        self.leadership.patcher().ok_or(Hold::WriterStarting)
    }

    /// Hands a round's patches to the patcher, level-triggered: every value
    /// the round wants that the cache does not show is sent, unless the
    /// patcher has it on its way already or landed it a moment ago (the
    /// watch has not caught up). A value that failed or was dropped (a term
    /// that ended, a drain) is therefore sent again by the next round. Pods
    /// a scale-in just corrected are left alone until the controller acted;
    /// under `writes: OnScaleIn` only removals are sent.
    pub(super) fn submit_round(
        &self,
        state: &mut PolicyState,
        round: &PolicyRound,
    ) -> Result<Submission, SubmitError> {
        state
            .submitted
            .retain(|pod, _| round.versions.contains_key(pod));
        let patcher = match self.writer_for(round) {
            Ok(patcher) => patcher,
            Err(hold) => return Ok(Submission::Held(hold)),
        };
        let key = key_of(&round.resolved);
        let on_scale_in = round.resolved.spec.writes == Writes::OnScaleIn;
        let mut requests = round.requests();
        requests.retain(|r| !(state.is_held(&r.pod.name) || on_scale_in && r.cost.is_some()));
        // failures of pods the policy no longer wants to write are history
        let wanted: HashSet<&PodRef> = requests.iter().map(|r| &r.pod).collect();
        patcher.retain_failed(&key, |pod| wanted.contains(pod));
        let known = patcher.write_states(requests.iter().map(|r| &r.pod));
        let mut send = Vec::new();
        let mut landed = Vec::new();
        for (req, known) in requests.into_iter().zip(known) {
            let seen = round.versions.get(&req.pod.name).cloned().flatten();
            match known {
                Some(WriteState::Pending(p)) if p == req => {}
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
        let rate = round
            .resolved
            .spec
            .rate_limit
            .and_then(|r| Rate::new(&format!("{key} spec.rateLimit"), r.qps, r.burst).ok());
        patcher.set_policy_rate(&key, rate);
        let seen: Vec<(String, Option<String>)> = send
            .iter()
            .map(|(r, seen)| (r.pod.name.clone(), seen.clone()))
            .collect();
        let reqs = send.into_iter().map(|(r, _)| r).collect();
        let batch = patcher.submit_batch(reqs, Priority::Background)?;
        state.submitted.extend(seen);
        Ok(Submission::Sent { batch, landed })
    }

    /// Exports the plan's order mismatches by reason: sets current reasons,
    /// zeroes the ones that went away; every series ever exported stays
    /// tracked so deleting the policy removes the zeroed ones too. Called
    /// under the policy's lock, so a concurrent forget cannot be undone.
    pub(super) fn export_mismatches(
        &self,
        key: &PolicyKey,
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
                    policy: key.to_string(),
                    reason: reason.clone(),
                })
                .set(reasons.get(reason).copied().unwrap_or(0));
        }
    }

    /// Removes the policy's per-policy metric series (it was deleted or
    /// became invalid), so dashboards do not show a mismatch that no longer
    /// exists.
    pub(super) fn remove_series(&self, key: &PolicyKey, state: &mut PolicyState) {
        for reason in std::mem::take(&mut state.mismatch_reasons) {
            self.metrics.order_mismatches.remove(&PolicyReason {
                policy: key.to_string(),
                reason,
            });
        }
        for reason in std::mem::take(&mut state.fetch_error_kinds) {
            self.metrics.signal_fetch_errors.remove(&PolicyReason {
                policy: key.to_string(),
                reason,
            });
        }
    }

    /// Reads each utilisation signal when its refresh is due; keeps the last
    /// good samples on failure and says why.
    async fn refresh_signals(&self, policy: &NamedPolicy, state: &mut PolicyState) {
        let util = policy.spec.utilization_signals();
        if util.is_empty() {
            state.signal_problem = None;
            return;
        }
        let due = state
            .last_fetch
            .is_none_or(|t| t.elapsed() >= policy.spec.refresh_interval);
        if !due {
            return;
        }
        let Some(prom) = &self.signals.prometheus else {
            state.signal_problem = Some(SignalProblem {
                reason: "NoPrometheus".into(),
                message:
                    "the policy has utilization signals but the operator runs without --prometheus-url"
                        .into(),
            });
            return;
        };
        let labels = policy.spec.selector_labels();
        let mut problem = None;
        for (index, u) in util {
            let fetched = prom
                .fetch_signal(u, &policy.namespace, &labels, self.signals.timeout)
                .await;
            match fetched {
                Ok(fetched) => {
                    state.samples.utilization.insert(index, fetched.samples);
                }
                Err(SignalFetchError::Query(e)) => {
                    problem = Some(SignalProblem {
                        reason: "BadQuery".to_string(),
                        message: format!("spec.signals[{index}].utilization.prometheus.query: {e}"),
                    });
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
                    problem = Some(SignalProblem {
                        reason: camel_case(e.kind()),
                        message: format!("spec.signals[{index}]: {e}"),
                    });
                }
            }
        }
        state.last_fetch = Some(tokio::time::Instant::now());
        if problem.is_none() {
            state.last_refresh = Some(Timestamp::now().to_string());
        }
        state.signal_problem = problem;
    }
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
/// What a scale-in is priced from: the snapshot its round planned on and
/// the options it planned with.
#[derive(Debug, Clone)]
pub struct PricingInput {
    /// The snapshot of that moment.
    pub snapshot: Arc<Snapshot>,
    /// Its options (the comparator's `now`, the scale-down).
    pub opts: PlanOptions,
}
