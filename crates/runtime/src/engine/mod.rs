//! The engine: the one place that plans a policy over the caches and hands
//! its patches to the patcher. It owns every policy's state (hysteresis
//! values, samples, what was sent), each behind its own lock held from
//! planning to submitting, so two rounds of one policy never interleave;
//! planning runs on the blocking pool, never on an async worker.
//!
//! Its callers use a few named operations and never its internals:
//! - the reconcile: [`Engine::reconcile`] (a round: plan, write, report),
//!   [`Engine::invalid`], [`Engine::forget`];
//! - a scale-in, from the hook or the webhook: [`Engine::scale_in`] (the
//!   workload's minimal correction written ahead of everything, the wait,
//!   the settle, the pods that go; `scale_in.rs`);
//! - the policy page: [`Engine::preview`] (what the next round would plan).
//!
//! `operator` and `hook` both build on the engine; only the operator's run
//! wiring knows both.

pub mod caches;
pub mod catch_up;
mod cleanup;
mod deletions;
pub mod leadership;
pub mod policy_index;
mod round;
pub mod scale_in;
pub mod scale_ins;
mod state;
pub mod trim;
pub mod workload;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Semaphore;

use caches::Caches;
pub use cleanup::CleanupError;
pub use deletions::VictimComparison;
use leadership::Leadership;
use round::PolicyRound;
pub use round::{Conflict, Hold, Release, RoundError, Submission};
pub use scale_in::priced::{PricedScaleIn, Pricing, SharedPrices};
pub use scale_in::{
    PriceOutcome, Priced, ScaleInAnswer, ScaleInCall, ScaleInOutcome, HOLD, SHARED_FOR,
};
pub use scale_ins::{FreshBy, ScaleIns};
pub use state::SignalProblem;
use state::{Policies, PolicyState};
pub use workload::{Managed, NotManaged, WorkloadRef};

use crate::comparator::FeatureGates;
use crate::metrics::Metrics;
use crate::plan::{self, NamedPolicy, PlanOptions, Snapshot};
use crate::policy::DeletionCostPolicy;
use crate::prometheus::PrometheusClient;
use crate::writes::{PatchRequest, PolicyKey, Priority};

/// Where rounds read utilisation.
#[derive(Debug, Clone)]
pub struct SignalSource {
    /// The Prometheus to query (none without `--prometheus-url`).
    pub prometheus: Option<PrometheusClient>,
    /// Per-query timeout.
    pub timeout: Duration,
}

/// Policies whose status is due, each once: bounded by the number of
/// policies, however many scale-ins come before the wiring takes them.
#[derive(Default)]
struct StatusDue {
    keys: std::sync::Mutex<std::collections::BTreeSet<PolicyKey>>,
    noted: tokio::sync::Notify,
}

impl StatusDue {
    fn note(&self, key: PolicyKey) {
        if let Ok(mut k) = self.keys.lock() {
            k.insert(key);
        }
        self.noted.notify_one();
    }
}

/// How many background rounds plan at once: the cores the process may use.
fn planner_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The key of a validated policy.
fn key_of(resolved: &NamedPolicy) -> PolicyKey {
    PolicyKey::new(&resolved.namespace, &resolved.name)
}

/// Writes of a policy that keep failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailures {
    /// How many pods' values failed.
    pub count: usize,
    /// The last of them: pod and error.
    pub last: String,
}

/// What a reconcile round did.
#[derive(Debug)]
pub struct Reconciled {
    /// The plan over the live pods.
    pub plan: plan::Plan,
    /// Pods whose cost of this policy is being removed.
    pub releases: usize,
    /// Older policies that win pods this one selects.
    pub conflicts: Vec<Conflict>,
    /// Why signals are unavailable (writes are held meanwhile).
    pub signals: Option<SignalProblem>,
    /// When signals were last read successfully (RFC 3339).
    pub last_refresh: Option<String>,
    /// Values handed to the patcher by this round.
    pub sent: usize,
    /// Why nothing was sent, when it was held.
    pub held: Option<Hold>,
    /// When pods a scale-in corrected are still left alone: how soon that
    /// ends (the reconcile is due again then, to write what was kept back).
    pub hold_ends_in: Option<Duration>,
    /// Values the patcher refused (its queue is full): the round is due
    /// again soon.
    pub rejected: usize,
    /// The policy's values queued, in flight, or landed but not yet seen
    /// by the pod cache (the round's order still has the old ones, so its
    /// mismatches say `PendingPatch` until the watch catches up).
    pub pending: usize,
    /// The policy's values that failed for good and were not followed by
    /// one that landed (sent again by the next round).
    pub failing: Option<WriteFailures>,
    /// Scale-ins of its workloads made fresh, and by whom.
    pub scale_ins: ScaleIns,
}

/// What a background round's submit stage did.
#[derive(Debug, Default)]
struct BackgroundSubmit {
    /// Values handed to the patcher.
    sent: usize,
    /// Why nothing was sent, when it was held.
    held: Option<Hold>,
    /// Values the patcher refused (its queue is full).
    rejected: usize,
    /// Values that landed but the cache has not shown yet.
    unseen: usize,
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

/// A plan made by [`Engine::preview`], with what it was made from.
pub struct Preview<'a> {
    /// The validated policy.
    pub resolved: &'a NamedPolicy,
    /// The plan over the live pods.
    pub plan: plan::Plan,
    /// The snapshot the plan was made over.
    pub snapshot: &'a Snapshot,
    /// The options it was made with.
    pub opts: &'a PlanOptions,
    /// Older policies that win shared pods.
    pub conflicts: Vec<Conflict>,
    /// Why signals were unavailable at the last round (writes are held).
    pub signals: Option<SignalProblem>,
}

/// What a round needs (the caches, the leadership handle and its patcher,
/// the Prometheus client, the metrics) and every policy's state. Built once
/// at start; the reconcile, the hook and the policy pages share it.
pub struct Engine {
    caches: Caches,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    dry_run: bool,
    signals: SignalSource,
    gates: FeatureGates,
    policies: Policies,
    /// Background rounds planning at once: one per core. A round holds a
    /// view of every cached pod while it plans; fifty policies planning at
    /// once on two cores are no faster than two, and hold fifty views.
    planners: Arc<Semaphore>,
    scale_ins: scale_ins::ScaleInLog,
    /// What prices scale-ins (`--prices`), if anything does.
    pricing: Option<Pricing>,
    /// The priced scale-ins' totals of this leadership term.
    priced: scale_in::priced::Ledger,
    /// Scale-ins of the last moments, so the calls of one share its answer.
    scale_in_calls: scale_in::ScaleInCalls,
    /// Policies whose status has news the next reconcile reports (a
    /// scale-in made fresh); the run wiring turns them into reconciles.
    status_due: Arc<StatusDue>,
}

impl Engine {
    /// An engine over `caches`, writing through `leadership`'s patcher;
    /// with `pricing`, every scale-in is priced.
    pub fn new(
        caches: Caches,
        leadership: Leadership,
        metrics: Arc<Metrics>,
        signals: SignalSource,
        gates: FeatureGates,
        dry_run: bool,
        pricing: Option<Pricing>,
    ) -> Self {
        Engine {
            caches,
            leadership,
            metrics,
            dry_run,
            signals,
            gates,
            policies: Policies::default(),
            planners: Arc::new(Semaphore::new(planner_slots())),
            scale_ins: Default::default(),
            pricing,
            priced: Default::default(),
            scale_in_calls: Default::default(),
            status_due: Default::default(),
        }
    }

    /// The policies whose status has news to report, as they come: each
    /// at most once however often it was noted before it was taken (the
    /// run wiring reconciles each).
    pub fn status_due(&self) -> futures::stream::BoxStream<'static, PolicyKey> {
        let due = self.status_due.clone();
        futures::stream::unfold(due, |due| async move {
            loop {
                let next = due.keys.lock().ok().and_then(|mut k| k.pop_first());
                if let Some(key) = next {
                    return Some((key, due));
                }
                due.noted.notified().await;
            }
        })
        .boxed()
    }

    /// The watched objects rounds read.
    pub(crate) fn caches(&self) -> &Caches {
        &self.caches
    }

    /// Whether this replica leads, and the patcher of its term.
    pub(crate) fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Whether this replica holds the lease: the one place the engine, the
    /// reconcile, the hook and the pages ask (writes still wait for the
    /// term's gate, see `Engine::writer_for`).
    pub fn leads(&self) -> bool {
        self.leadership.is_leader()
    }

    /// The operator's metrics.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Compute and report, write nothing (`--dry-run`).
    pub(crate) fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// A policy's round for its reconcile: signals when due, the plan, its
    /// patches sent (background priority), the mismatch gauges, and what the
    /// patcher holds of the policy.
    pub async fn reconcile(
        &self,
        policy: &DeletionCostPolicy,
        resolved: &NamedPolicy,
    ) -> Result<Reconciled, RoundError> {
        let key = key_of(resolved);
        // one round of a policy at a time, its scale-ins included
        let mut state = self.policies.lock(&key).await;
        let round = self
            .plan_round(
                &mut state,
                policy,
                resolved,
                false,
                None,
                Priority::Background,
            )
            .await?;
        let submitted = self.submit_background(&key, &mut state, &round);
        self.export_mismatches(&key, &mut state, &round.plan);
        let hold_ends_in = state.hold_ends_in();
        drop(state);
        Ok(self.reconciled(&key, round, submitted, hold_ends_in))
    }

    /// The submit stage of a background round: what was handed to the
    /// patcher, or why nothing was.
    fn submit_background(
        &self,
        key: &PolicyKey,
        state: &mut PolicyState,
        round: &PolicyRound,
    ) -> BackgroundSubmit {
        let mut out = BackgroundSubmit::default();
        match self.submit_round(state, round) {
            Ok(Submission::Sent { batch, landed }) => {
                out.sent = batch.len();
                out.unseen = landed.len();
            }
            Ok(Submission::NothingToSend { landed }) => out.unseen = landed.len(),
            Ok(Submission::Held(hold)) => out.held = Some(hold),
            Err(e) => {
                tracing::warn!(policy = %key, error = %e, "patches not submitted; retrying soon");
                out.rejected = round.requests().len();
            }
        }
        out
    }

    /// The report stage of a background round: the round, what became of
    /// its writes and where the policy's writes stand, for its status.
    fn reconciled(
        &self,
        key: &PolicyKey,
        round: PolicyRound,
        submitted: BackgroundSubmit,
        hold_ends_in: Option<Duration>,
    ) -> Reconciled {
        let (pending, failing) = self.leadership.patcher().map_or((0, None), |p| {
            let failed = p.failed_for(key);
            let failing = failed.last().map(|(req, e)| WriteFailures {
                count: failed.len(),
                last: format!("{}: {e}", req.pod),
            });
            (p.pending_for(key).len() + submitted.unseen, failing)
        });
        Reconciled {
            releases: round.releases.len(),
            conflicts: round.conflicts,
            signals: round.signals,
            last_refresh: round.last_refresh,
            plan: round.plan,
            sent: submitted.sent,
            held: submitted.held,
            hold_ends_in,
            rejected: submitted.rejected,
            pending,
            failing,
            scale_ins: self.scale_ins.of(key),
        }
    }

    /// Notes that a scale-in of `managed`'s workload got fresh costs from
    /// `by` (the policy's status says which scalers are covered).
    pub(crate) fn note_scale_in(&self, managed: &Managed, by: FreshBy) {
        let key = key_of(&managed.resolved);
        self.scale_ins.note(&key, by, managed.workload.to_string());
        // the status says so at the next reconcile: ask for one, as a
        // round that wrote nothing makes no pod event that would
        self.status_due.note(key);
    }

    /// Takes in the scale-ins a policy's status kept (see
    /// [`scale_ins::ScaleInLog`]): a restart or a new leader counts on.
    pub(crate) fn remember_scale_ins(&self, resolved: &NamedPolicy, kept: &ScaleIns) {
        self.scale_ins.remember(&key_of(resolved), kept);
    }

    /// The policy became invalid: it has no order to report.
    pub async fn invalid(&self, key: &PolicyKey) {
        let mut state = self.policies.lock(key).await;
        self.remove_series(key, &mut state);
    }

    /// The policy is gone: drops its state and its metric series.
    pub async fn forget(&self, key: &PolicyKey) {
        if let Some(mut state) = self.policies.remove(key).await {
            self.remove_series(key, &mut state);
        }
        self.scale_ins.forget(key);
        self.forget_priced(key);
    }

    /// Which policy manages `workload`, and its ReplicaSets and active pods
    /// (worked out on the blocking pool: it selects every policy's pods).
    pub async fn managing(&self, workload: &WorkloadRef) -> Result<Managed, ManagingError> {
        let caches = self.caches.clone();
        let workload = workload.clone();
        tokio::task::spawn_blocking(move || {
            let snapshot = caches.snapshot(&workload.namespace);
            workload::managing(
                &workload,
                &snapshot,
                caches.valid_policies(&workload.namespace),
            )
        })
        .await
        .map_err(|e| ManagingError::Planner(e.to_string()))?
        .map_err(ManagingError::NotManaged)
    }

    /// Whether the pod cache shows what `req` writes (or the pod is gone or
    /// replaced).
    pub(crate) fn cache_shows(&self, req: &PatchRequest) -> bool {
        let Some(p) = self.caches.pod(&req.pod.namespace, &req.pod.name) else {
            return true;
        };
        if req.uid.is_some() && p.identity.uid != req.uid {
            return true;
        }
        p.ours.deletion_cost == req.cost.map(|c| c.to_string())
    }

    /// The active pods of `managed`'s workload as the cache shows them now.
    pub(crate) fn active_pods(&self, managed: &Managed) -> BTreeSet<String> {
        workload::active_pods_of(
            &managed.replica_sets,
            &managed.workload.namespace,
            &self.caches.pods(),
        )
    }

    /// What a policy's next round would plan, without running one: over the
    /// caches, with the samples and hysteresis values of its last round and
    /// overlaps resolved, but no signal refresh, nothing written and the
    /// policy's state left as it was. Waits for a running round of the
    /// policy. `render` turns the plan into the answer on the blocking pool,
    /// where the snapshot it was planned over is still at hand.
    pub async fn preview<R: Send + 'static>(
        &self,
        policy: &DeletionCostPolicy,
        resolved: &NamedPolicy,
        scale_down_by: Option<usize>,
        render: impl FnOnce(Preview<'_>) -> R + Send + 'static,
    ) -> Result<R, PreviewError> {
        let state = self.policies.lock(&key_of(resolved)).await;
        if !resolved.spec.utilization_signals().is_empty() && state.last_fetch.is_none() {
            return Err(PreviewError::NotPlannedYet(resolved.key()));
        }
        let caches = self.caches.clone();
        let others = self.caches.valid_policies(&resolved.namespace);
        let opts = self.plan_options(scale_down_by);
        let (policy, resolved) = (policy.clone(), resolved.clone());
        let key = resolved.key();
        let partial = self.partial_occupancy(&resolved);
        // the guard goes along: no round of this policy changes the samples meanwhile
        tokio::task::spawn_blocking(move || {
            let snapshot = caches.snapshot(&resolved.namespace);
            let (excluded, conflicts) = round::overlaps(&snapshot, &others, &policy, &resolved);
            let mut plan = plan::plan_excluding(
                &resolved,
                &snapshot,
                &state.samples,
                &state.previous,
                &opts,
                &excluded,
            );
            plan.warnings.extend(partial);
            render(Preview {
                resolved: &resolved,
                plan,
                snapshot: &snapshot,
                opts: &opts,
                conflicts,
                signals: state.signal_problem.clone(),
            })
        })
        .await
        .map_err(|e| PreviewError::Planner(key, e.to_string()))
    }
}

/// Why [`Engine::managing`] found no policy.
#[derive(Debug, thiserror::Error)]
pub enum ManagingError {
    /// No valid policy manages the workload.
    #[error(transparent)]
    NotManaged(NotManaged),
    /// The search failed (a bug: it panicked on the blocking pool).
    #[error("finding the workload's policy failed: {0}")]
    Planner(String),
}
