//! A scale-in made exact, end to end, behind one call
//! ([`Engine::scale_in`]): signals read now, the minimal correction
//! ([`crate::plan::correction`]) written ahead of every other write, the
//! wait until the pod cache shows it, a settle as long as the cache took,
//! and the pods that will go. The hook and the webhook parse their request,
//! make this one call and map its answer.
//!
//! One scale-in reaches the operator more than once: a Deployment's new
//! scale is followed by the Deployment controller's update of its
//! ReplicaSet, and a hook caller's own scale update follows the hook's
//! answer. Those calls get the first call's answer at once (outcome
//! `shared`): one signal read, one wait, whatever the number of calls.
//!
//! The engine hands each scale-in to `ExactScaleIn`, whose methods are
//! its stages, in this folder: the call and its answer (`call.rs`); join
//! (this file: calls of one scale-in share one answer); read (the workload
//! and its pods, this file; its nodes, `fresh_nodes.rs`; its markers,
//! `fresh_marks.rs`); plan and correct, land and settle (this file, over
//! core `plan::correction`); price (`price.rs`, the totals in `priced.rs`);
//! report (the `ScaleInVictims` Event, `event.rs`).

mod call;
mod event;
pub(super) mod fresh_marks;
pub(super) mod fresh_nodes;
mod price;
pub mod priced;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{timeout_at, Instant};

pub use self::call::{PriceOutcome, Priced, ScaleInAnswer, ScaleInCall, ScaleInOutcome};
use super::round::{Hold, PolicyRound, PricingInput};
use super::state::PolicyGuard;
use super::{key_of, Engine, Managed, ManagingError};
use crate::comparator::is_pod_active;
use crate::owner::deployment_of;
use crate::plan::ScaleInTarget;
use crate::policy::TargetKind;
use crate::writes::{Batch, PatchRequest, PodRef, Priority, WriteOutcome, WriteState};

/// How long a scale-in's answer serves the calls that belong to it (the
/// Deployment controller's ReplicaSet update, a hook caller's own scale
/// update), as long as none of its victims has gone yet.
pub const SHARED_FOR: Duration = Duration::from_secs(30);

/// How long background rounds leave a scale-in's pods alone: a background
/// write landing between the correction and the ReplicaSet controller's
/// deletions could move the cut. The controller acts within a second or
/// two of the answer; the rest is margin for a busy control plane.
pub const HOLD: Duration = Duration::from_secs(15);

/// How long background rounds leave the pods of a scale-in by `by` alone:
/// [`HOLD`], plus the time the controller takes to delete them (its client
/// sends about 20 writes a second; past 500 pods it takes several syncs).
/// Until then a background write lands on a pod about to go, or moves the
/// cut of a later sync: a 700 -> 20 scale-in took 35 s on a real control
/// plane, and the background rewrote 54 of its victims meanwhile.
fn hold_for(by: usize) -> Duration {
    HOLD + priced::OBSERVE_PER_POD.saturating_mul(u32::try_from(by).unwrap_or(u32::MAX))
}

/// The shortest settle after writes: two informers of one watch cache
/// receive an event within milliseconds of each other.
const SETTLE_FLOOR: Duration = Duration::from_millis(20);

/// Time kept at the end of a call's budget to compose its answer.
const ANSWER_MARGIN: Duration = Duration::from_millis(100);

/// How often the pod cache is read while waiting for the writes.
const POLL: Duration = Duration::from_millis(5);

/// The longest a scale-in right behind another waits for the pod cache to
/// show the first one's victims gone (a quarter of what is left of its
/// budget at most).
const PREDECESSOR_WAIT: Duration = Duration::from_secs(2);

/// A scale-in being made exact or just made so, and its answer.
struct Entry {
    from: i32,
    to: i32,
    at: Instant,
    answer: watch::Receiver<Option<Arc<ScaleInAnswer>>>,
}

/// The scale-ins of the last [`SHARED_FOR`], by workload.
#[derive(Default)]
pub(super) struct ScaleInCalls {
    by_workload: Mutex<HashMap<String, Entry>>,
}

/// How a call joins the scale-ins in progress.
enum Joined {
    /// It starts one: send its answer here; `true` when it follows another
    /// scale-in of the workload (whose target is its start).
    First(watch::Sender<Option<Arc<ScaleInAnswer>>>, bool),
    /// It belongs to this one.
    Shared(watch::Receiver<Option<Arc<ScaleInAnswer>>>),
}

impl Engine {
    /// Makes a scale-in exact (see the module docs) and answers by
    /// `call.deadline`; the work goes on past it when it must (writes that
    /// are queued still land). The scale-in's `ScaleInVictims` Event follows
    /// in the background. The engine hands the scale-in to `ExactScaleIn`.
    pub async fn scale_in(self: &Arc<Self>, call: &ScaleInCall) -> Arc<ScaleInAnswer> {
        let scale_in = ExactScaleIn {
            engine: self.clone(),
            call: call.clone(),
        };
        let answer = scale_in.answer().await;
        scale_in.report(answer.clone());
        answer
    }
}

/// One scale-in behind [`Engine::scale_in`], as its stages in order: join
/// ([`ExactScaleIn::join`]), read ([`ExactScaleIn::read_workload`],
/// [`ExactScaleIn::read_fresh`]), plan ([`ExactScaleIn::plan`]), correct
/// ([`ExactScaleIn::correct`]), land ([`ExactScaleIn::land`]), price
/// ([`ExactScaleIn::price`], after the answer) and report ([`ExactScaleIn::report`]).
/// Each stage takes what the one before returned and fails with its own
/// error; [`ExactScaleIn::make_exact`] alone turns a stage's error into the
/// answer.
#[derive(Clone)]
pub(super) struct ExactScaleIn {
    engine: Arc<Engine>,
    call: ScaleInCall,
}

/// What the read stage hands to the plan: the workload's policy and pods,
/// its policy's lock (held until the correction is submitted, so no round
/// writes between the plan and it), and how many replicas go.
struct Read {
    managed: Managed,
    state: PolicyGuard,
    by: usize,
}

/// The read stage's error: the policy's lock was not free within the
/// budget (a round of the policy is running).
#[derive(Debug)]
struct Busy;

/// Why the plan stage stopped.
#[derive(Debug)]
enum PlanError {
    /// Reading the signals and planning did not fit the budget.
    OverBudget,
    /// The planner failed, in words.
    Failed(String),
}

/// The correct stage's output: the correction's writes, handed to the
/// patcher as one batch (none when the costs already put the right pods
/// first).
struct Submitted {
    requests: Vec<PatchRequest>,
    batch: Option<Batch>,
}

impl ExactScaleIn {
    /// The answer by the call's deadline: shared with the scale-in this call
    /// belongs to, or made exact on a task of its own (priced after).
    async fn answer(&self) -> Arc<ScaleInAnswer> {
        if !self.engine.leads() {
            return Arc::new(ScaleInAnswer::bare(ScaleInOutcome::NotLeader));
        }
        let deadline = self.call.deadline;
        let (tx, follows) = match self.join() {
            Joined::Shared(rx) => return shared(rx, deadline).await,
            Joined::First(tx, follows) => (tx, follows),
        };
        let mut rx = tx.subscribe();
        let mut work = self.clone();
        // the work stops a moment early: its over-budget answer, which still
        // names the pods the costs as they stand pick, is ready by the
        // caller's deadline
        work.call.deadline = deadline.checked_sub(ANSWER_MARGIN).unwrap_or(deadline);
        // on its own task: a caller that goes away (the API server gave up)
        // does not leave the writes half done
        tokio::spawn(work.exact_then_priced(tx, follows));
        let got = timeout_at(deadline, rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(a)) => (*a).clone().unwrap_or_else(over_budget),
            _ => over_budget(),
        }
    }

    /// Makes the scale-in exact, sends the answer, then prices what it
    /// deleted: the scale-in does not wait for its price.
    async fn exact_then_priced(self, tx: watch::Sender<Option<Arc<ScaleInAnswer>>>, follows: bool) {
        let (mut answer, pricing) = self.make_exact(follows).await;
        // a call that removes no replica (a hook caller asking about the
        // scale as it is) frees nothing to price
        let scales_in = self.call.to < self.call.from && answer.plan.is_some();
        let priced = pricing.filter(|_| scales_in).map(|input| {
            let (ptx, prx) = watch::channel(None);
            answer.priced = Priced(Some(prx));
            (ptx, input)
        });
        let answer = Arc::new(answer);
        self.after(&answer);
        let _ = tx.send(Some(answer.clone()));
        if let Some((ptx, input)) = priced {
            let _ = ptx.send(Some(self.price(&answer, input).await));
        }
    }

    /// Read, plan, correct, land: the answer, and what to price the
    /// scale-in from (`--prices`). A stage's error is the answer's outcome.
    async fn make_exact(&self, follows: bool) -> (ScaleInAnswer, Option<PricingInput>) {
        let managed = match self.read_workload(follows).await {
            Ok(m) => m,
            Err(ManagingError::NotManaged(e)) => {
                return (
                    ScaleInAnswer::bare(ScaleInOutcome::NoPolicy(e.to_string())),
                    None,
                )
            }
            Err(e) => {
                return (
                    ScaleInAnswer::bare(ScaleInOutcome::PlannerFailed(e.to_string())),
                    None,
                )
            }
        };
        let mut answer = ScaleInAnswer::bare(ScaleInOutcome::Fresh);
        answer.managed = Some(managed.clone());
        let over = |phase| ScaleInOutcome::OverBudget {
            phase,
            missing: 0,
            writes: 0,
        };
        let mut read = match self.read_fresh(managed).await {
            Ok(read) => read,
            Err(Busy) => {
                answer.outcome = over("waiting for the policy's running round");
                return (answer, None);
            }
        };
        let round = match self.plan(&mut read).await {
            Ok(round) => round,
            Err(PlanError::OverBudget) => {
                answer.outcome = over("reading signals and planning");
                return (answer, None);
            }
            Err(PlanError::Failed(e)) => {
                answer.outcome = ScaleInOutcome::PlannerFailed(e);
                return (answer, None);
            }
        };
        answer.victims = round
            .corrections
            .iter()
            .map(|c| (c.replica_set.clone(), c.victims_if(|_| false)))
            .collect();
        answer.corrections = round.corrections.clone();
        answer.plan = Some(Arc::new(round.plan.clone()));
        let pricing = round.pricing.clone();
        match self.correct(read, &round) {
            Ok(submitted) => (self.land(answer, submitted).await, pricing),
            Err(hold) => {
                answer.outcome = ScaleInOutcome::Held(hold);
                (answer, pricing)
            }
        }
    }

    /// Whether the call starts a scale-in or belongs to one in progress.
    fn join(&self) -> Joined {
        let call = &self.call;
        let Ok(mut calls) = self.engine.scale_in_calls.by_workload.lock() else {
            return Joined::First(watch::channel(None).0, false);
        };
        let now = Instant::now();
        calls.retain(|_, e| now.saturating_duration_since(e.at) < SHARED_FOR);
        let key = call.workload.to_string();
        let same = calls
            .get(&key)
            .filter(|e| e.from == call.from && e.to == call.to);
        let followed = || {
            let ns = &call.workload.namespace;
            let rs = self.engine.caches.replica_set(ns, &call.workload.name)?;
            let dep = deployment_of(&rs)?;
            calls.get(&format!("Deployment {ns}/{dep}"))
        };
        let joined = same.or_else(|| {
            (call.follow_up && call.workload.kind == TargetKind::ReplicaSet)
                .then(followed)
                .flatten()
        });
        if let Some(e) = joined.filter(|e| self.victims_still_here(e)) {
            return Joined::Shared(e.answer.clone());
        }
        // a scale-in right behind another: the controller may still be
        // deleting the first one's pods, or the cache not show it yet
        let follows = calls.get(&key).is_some_and(|e| e.to == call.from);
        let (tx, rx) = watch::channel(None);
        calls.insert(
            key,
            Entry {
                from: call.from,
                to: call.to,
                at: now,
                answer: rx,
            },
        );
        Joined::First(tx, follows)
    }

    /// Whether a scale-in has not deleted any of its pods yet: a call after
    /// that is a new scale-in, even with the same numbers.
    fn victims_still_here(&self, e: &Entry) -> bool {
        let Some(answer) = e.answer.borrow().clone() else {
            return true;
        };
        let Some(ns) = answer
            .managed
            .as_ref()
            .map(|m| m.workload.namespace.clone())
        else {
            return true;
        };
        answer.victims.iter().flat_map(|(_, v)| v).all(|pod| {
            self.engine
                .caches
                .pod(&ns, pod)
                .is_some_and(|p| is_pod_active(&*p))
        })
    }

    /// Read, first half: the policy managing the call's workload, with its
    /// pods as the cache shows them once a scale-in right before this one
    /// (`follows`) took effect.
    async fn read_workload(&self, follows: bool) -> Result<Managed, ManagingError> {
        let managed = self.engine.managing(&self.call.workload).await?;
        if follows && self.wait_for_replicas(&managed).await {
            // the pods as the cache shows them now
            if let Ok(m) = self.engine.managing(&self.call.workload).await {
                return Ok(m);
            }
        }
        Ok(managed)
    }

    /// Waits (briefly) until the pod cache shows no more active pods of the
    /// workload than its replicas before this scale-in: the last scale-in's
    /// victims deleted. The controller deletes them within moments of that
    /// scale-in, but the watch can lag the API server by more than the time
    /// between two scale-ins; planned over a cache that still shows one
    /// active, this scale-in would name it again, as the pod to go and the
    /// node it frees. Returns whether it waited.
    async fn wait_for_replicas(&self, managed: &Managed) -> bool {
        let replicas = usize::try_from(self.call.from).unwrap_or(0);
        let ns = &managed.workload.namespace;
        let active = || {
            managed
                .pods
                .iter()
                .filter(|pod| {
                    self.engine
                        .caches
                        .pod(ns, pod)
                        .is_some_and(|p| is_pod_active(&*p))
                })
                .count()
        };
        if active() <= replicas {
            return false;
        }
        let left = self.call.deadline.saturating_duration_since(Instant::now());
        let until = Instant::now() + PREDECESSOR_WAIT.min(left / 4);
        let waited = timeout_at(until, async {
            while active() > replicas {
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        if waited.is_err() {
            tracing::debug!(
                workload = %self.call.workload,
                replicas,
                "more pods than replicas still active in the pod cache (a rollout's surge, or the last scale-in's deletions not seen): planning anyway"
            );
        }
        true
    }

    /// Read, second half: the policy's lock, the hold on the workload's pods,
    /// and the billing classes and markers as they are now, not as the
    /// watches last showed them (under the lock: a round the relabelling
    /// started waits).
    async fn read_fresh(&self, managed: Managed) -> Result<Read, Busy> {
        let key = key_of(&managed.resolved);
        let mut state = timeout_at(self.call.deadline, self.engine.policies.lock(&key))
            .await
            .map_err(|_| Busy)?;
        let by = usize::try_from(self.call.from - self.call.to).unwrap_or(0);
        state.hold(&managed.pods, Instant::now() + hold_for(by));
        tokio::join!(self.read_nodes_now(&managed), self.read_marks_now(&managed));
        Ok(Read { managed, state, by })
    }

    /// The policy's round with fresh signals, and the scale-in's minimal
    /// correction, over what `read` holds.
    async fn plan(&self, read: &mut Read) -> Result<PolicyRound, PlanError> {
        let target = ScaleInTarget {
            replica_sets: read.managed.replica_sets.clone(),
            by: read.by,
            in_flight: self.values_on_their_way(&read.managed),
        };
        let planned = self.engine.plan_round(
            &mut read.state,
            &read.managed.policy,
            &read.managed.resolved,
            true,
            Some(target),
            Priority::Urgent,
        );
        match timeout_at(self.call.deadline, planned).await {
            Err(_) => Err(PlanError::OverBudget),
            Ok(Err(e)) => Err(PlanError::Failed(e.to_string())),
            Ok(Ok(round)) => Ok(round),
        }
    }

    /// Drops the values queued for the workload's pods (the correction
    /// decides what they need) and returns those that may still land: in
    /// flight, or landed but not yet in the cache.
    fn values_on_their_way(&self, managed: &Managed) -> HashMap<String, i32> {
        let Some(patcher) = self.engine.leadership.patcher() else {
            return HashMap::new();
        };
        let ns = &managed.workload.namespace;
        let pods: HashSet<PodRef> = managed.pods.iter().map(|p| PodRef::new(ns, p)).collect();
        let mut out: HashMap<String, i32> = patcher
            .cancel_pods(&pods)
            .into_iter()
            .map(|r| (r.pod.name, r.cost.unwrap_or(0)))
            .collect();
        for (pod, state) in pods.iter().zip(patcher.write_states(pods.iter())) {
            if let Some(WriteState::Landed(req, _)) = state {
                if !self.engine.cache_shows(&req) {
                    out.entry(pod.name.clone()).or_insert(req.cost.unwrap_or(0));
                }
            }
        }
        out
    }

    /// Hands the round's correction to the patcher ahead of everything, then
    /// lets go of the policy's lock (`read` ends here); a hold when no
    /// writer may write.
    fn correct(&self, read: Read, round: &PolicyRound) -> Result<Submitted, Hold> {
        let (ns, policy) = (
            &read.managed.resolved.namespace,
            &read.managed.resolved.name,
        );
        let requests: Vec<PatchRequest> = round
            .corrections
            .iter()
            .flat_map(|c| &c.writes)
            .map(|w| PatchRequest::set(PodRef::new(ns, &*w.pod), policy, w.cost).with_uid(&*w.uid))
            .collect();
        let patcher = self.engine.writer_for(round)?;
        let batch = if requests.is_empty() {
            None
        } else {
            let batch = patcher
                .submit_batch(requests.clone(), Priority::Urgent)
                // the queue is full or stopping: as good as no writer
                .map_err(|_| Hold::WriterStarting)?;
            Some(batch)
        };
        drop(read);
        Ok(Submitted { requests, batch })
    }

    /// The correction landed, shown in the pod cache and settled: the
    /// answer with the pods that go and the outcome.
    async fn land(&self, mut answer: ScaleInAnswer, submitted: Submitted) -> ScaleInAnswer {
        let Submitted { requests, batch } = submitted;
        let deadline = self.call.deadline;
        let ns = answer
            .managed
            .as_ref()
            .map(|m| m.resolved.namespace.clone())
            .unwrap_or_default();
        let ns = ns.as_str();
        answer.writes = requests.len();
        let sent_at = Instant::now();
        let mut landed_at = sent_at;
        let mut shown: Vec<&PatchRequest> = Vec::new();
        if let Some(batch) = batch {
            let Ok(report) = timeout_at(deadline, batch.wait()).await else {
                return self.over_budget(answer, "writing", &requests);
            };
            landed_at = Instant::now();
            for ((pod, outcome), req) in report.outcomes.iter().zip(&requests) {
                match outcome {
                    WriteOutcome::Applied => {
                        answer.landed += 1;
                        shown.push(req);
                    }
                    WriteOutcome::Gone => answer.gone += 1,
                    other => answer.failed.push((pod.name.clone(), format!("{other:?}"))),
                }
            }
        }
        let waited = timeout_at(deadline, async {
            while !shown.iter().all(|r| self.engine.cache_shows(r)) {
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        if waited.is_err() {
            return self.over_budget(answer, "waiting for the pod cache", &requests);
        }
        if answer.writes > 0 {
            answer.observed_after = Some(sent_at.elapsed());
            let left = deadline.saturating_duration_since(Instant::now());
            answer.settled = settle(landed_at.elapsed(), self.call.settle_cap, left);
            tokio::time::sleep(answer.settled).await;
        }
        let all_landed = answer.failed.is_empty();
        answer.victims = answer
            .corrections
            .iter()
            .map(|c| {
                let v = if all_landed {
                    c.after()
                } else {
                    c.victims_if(|w| self.shows(ns, w))
                };
                (c.replica_set.clone(), v)
            })
            .collect();
        answer.outcome = if !answer.failed.is_empty() {
            ScaleInOutcome::WritesFailed {
                failed: answer.failed.len(),
            }
        } else if let Some(u) = answer
            .corrections
            .iter()
            .find_map(|c| c.correction.unreachable)
        {
            ScaleInOutcome::Unreachable(u)
        } else {
            ScaleInOutcome::Fresh
        };
        answer
    }

    /// Over budget: the pods the costs as they stand pick, and how many of
    /// the writes had not shown.
    fn over_budget(
        &self,
        mut answer: ScaleInAnswer,
        phase: &'static str,
        requests: &[PatchRequest],
    ) -> ScaleInAnswer {
        let missing = requests
            .iter()
            .filter(|r| !self.engine.cache_shows(r))
            .count();
        let ns = answer
            .managed
            .as_ref()
            .map(|m| m.workload.namespace.clone())
            .unwrap_or_default();
        answer.victims = answer
            .corrections
            .iter()
            .map(|c| (c.replica_set.clone(), c.victims_if(|w| self.shows(&ns, w))))
            .collect();
        answer.outcome = ScaleInOutcome::OverBudget {
            phase,
            missing,
            writes: requests.len(),
        };
        answer
    }

    /// Whether the pod cache shows a correction's write.
    fn shows(&self, ns: &str, w: &crate::plan::correction::CorrectionWrite) -> bool {
        self.engine
            .caches
            .pod(ns, &w.pod)
            .is_some_and(|p| p.ours.deletion_cost.as_deref() == Some(w.cost.to_string().as_str()))
    }

    /// Counts and notes a finished scale-in.
    fn after(&self, answer: &ScaleInAnswer) {
        self.engine.metrics.scale_in_writes(answer.writes as u64);
        if answer.outcome == ScaleInOutcome::Fresh {
            if let Some(managed) = &answer.managed {
                self.engine.note_scale_in(managed, self.call.caller);
            }
        }
    }
}

/// The answer of a call that belongs to a scale-in already under way: the
/// first call's, marked shared, once it is ready (by `deadline`).
async fn shared(
    mut rx: watch::Receiver<Option<Arc<ScaleInAnswer>>>,
    deadline: Instant,
) -> Arc<ScaleInAnswer> {
    let first = match timeout_at(deadline, rx.wait_for(Option::is_some)).await {
        Ok(Ok(a)) => (*a).clone(),
        _ => None,
    };
    match first {
        Some(first) => Arc::new(ScaleInAnswer {
            shared: true,
            ..(*first).clone()
        }),
        None => Arc::new(ScaleInAnswer::bare(ScaleInOutcome::OverBudget {
            phase: "waiting for the scale-in's first call",
            missing: 0,
            writes: 0,
        })),
    }
}

/// The settle after a scale-in's writes, once the cache showed them `lag`
/// after they landed: the ReplicaSet controller's informer is fed by the
/// same watch cache as ours, so it lags about as much; waiting that long
/// again (at least [`SETTLE_FLOOR`], at most `cap` and what is `left` of
/// the budget) covers one twice as slow.
fn settle(lag: Duration, cap: Duration, left: Duration) -> Duration {
    lag.max(SETTLE_FLOOR).min(cap).min(left)
}

fn over_budget() -> Arc<ScaleInAnswer> {
    Arc::new(ScaleInAnswer::bare(ScaleInOutcome::OverBudget {
        phase: "making the costs fresh",
        missing: 0,
        writes: 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settle_is_the_cache_lag_within_floor_cap_and_budget() {
        let ms = Duration::from_millis;
        let cap = ms(1000);
        assert_eq!(settle(ms(3), cap, ms(5000)), SETTLE_FLOOR);
        assert_eq!(settle(ms(240), cap, ms(5000)), ms(240));
        assert_eq!(settle(ms(4000), cap, ms(5000)), cap);
        assert_eq!(settle(ms(240), cap, ms(100)), ms(100));
        // `--hook-settle-delay 0`: no settle at all
        assert_eq!(settle(ms(240), Duration::ZERO, ms(5000)), Duration::ZERO);
    }
}
