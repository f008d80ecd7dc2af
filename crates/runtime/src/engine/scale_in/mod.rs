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
//! The stages, in this folder: the call and its answer (`call.rs`); join
//! (this file: calls of one scale-in share one answer); read (the
//! workload's nodes, `fresh_nodes.rs`; its markers, `fresh_marks.rs`);
//! plan and correct, land and settle (this file, over core
//! `plan::correction`); price (`price.rs`, the totals in `priced.rs`);
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
use self::event::Scaled;
use super::round::{Hold, PricingInput};
use super::{key_of, Engine, Managed, ManagingError};
use crate::comparator::is_pod_active;
use crate::owner::deployment_of;
use crate::plan::ScaleInTarget;
use crate::policy::TargetKind;
use crate::writes::{PatchRequest, PodRef, Priority, WriteOutcome, WriteState};

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
    /// in the background.
    pub async fn scale_in(self: &Arc<Self>, call: &ScaleInCall) -> Arc<ScaleInAnswer> {
        let answer = self.answer_scale_in(call).await;
        self.publish_victims(Scaled::of(call), answer.clone());
        answer
    }

    /// [`Engine::scale_in`] without its Event.
    async fn answer_scale_in(self: &Arc<Self>, call: &ScaleInCall) -> Arc<ScaleInAnswer> {
        if !self.leads() {
            return Arc::new(ScaleInAnswer::bare(ScaleInOutcome::NotLeader));
        }
        let (tx, mut rx, follows) = match self.join_scale_in(call) {
            Joined::Shared(rx) => (None, rx, false),
            Joined::First(tx, follows) => {
                let rx = tx.subscribe();
                (Some(tx), rx, follows)
            }
        };
        let deadline = call.deadline;
        if let Some(tx) = tx {
            let (engine, mut call) = (self.clone(), call.clone());
            // the work stops a moment early: its over-budget answer, which
            // still names the pods the costs as they stand pick, is ready
            // by the caller's deadline
            call.deadline = deadline.checked_sub(ANSWER_MARGIN).unwrap_or(deadline);
            // on its own task: a caller that goes away (the API server gave
            // up) does not leave the writes half done
            tokio::spawn(async move {
                let (mut answer, pricing) = engine.make_exact(&call, follows).await;
                // priced after the answer: the scale-in does not wait for it
                // a call that removes no replica (a hook caller asking
                // about the scale as it is) frees nothing to price
                let scales_in = call.to < call.from && answer.plan.is_some();
                let priced = pricing.filter(|_| scales_in).map(|input| {
                    let (ptx, prx) = watch::channel(None);
                    answer.priced = Priced(Some(prx));
                    (ptx, input)
                });
                let answer = Arc::new(answer);
                engine.after_scale_in(&call, &answer);
                let _ = tx.send(Some(answer.clone()));
                if let Some((ptx, input)) = priced {
                    // priced over the pods seen going: within a tie the
                    // controller may pick others than the ones predicted
                    let outcome = match engine.observe_deletions(&call, &answer).await {
                        None => PriceOutcome::NothingDeleted,
                        Some(gone) => match engine.price(&call, &answer, gone, input).await {
                            Some(p) => PriceOutcome::Priced(p),
                            None => PriceOutcome::Failed,
                        },
                    };
                    let _ = ptx.send(Some(outcome));
                }
            });
            let got = timeout_at(deadline, rx.wait_for(Option::is_some)).await;
            return match got {
                Ok(Ok(a)) => (*a).clone().unwrap_or_else(over_budget),
                _ => over_budget(),
            };
        }
        let got = timeout_at(deadline, rx.wait_for(Option::is_some)).await;
        let first = match got {
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

    /// Whether `call` starts a scale-in or belongs to one in progress.
    fn join_scale_in(&self, call: &ScaleInCall) -> Joined {
        let Ok(mut calls) = self.scale_in_calls.by_workload.lock() else {
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
            let rs = self.caches.replica_set(ns, &call.workload.name)?;
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

    /// Waits (briefly) until the pod cache shows no more active pods of the
    /// workload than its replicas before this scale-in: the last scale-in's
    /// victims deleted. The controller deletes them within moments of that
    /// scale-in, but the watch can lag the API server by more than the time
    /// between two scale-ins; planned over a cache that still shows one
    /// active, this scale-in would name it again, as the pod to go and the
    /// node it frees. Returns whether it waited.
    async fn wait_for_replicas(&self, call: &ScaleInCall, managed: &Managed) -> bool {
        let replicas = usize::try_from(call.from).unwrap_or(0);
        let ns = &managed.workload.namespace;
        let active = || {
            managed
                .pods
                .iter()
                .filter(|pod| self.caches.pod(ns, pod).is_some_and(|p| is_pod_active(&*p)))
                .count()
        };
        if active() <= replicas {
            return false;
        }
        let left = call.deadline.saturating_duration_since(Instant::now());
        let until = Instant::now() + PREDECESSOR_WAIT.min(left / 4);
        let waited = timeout_at(until, async {
            while active() > replicas {
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        if waited.is_err() {
            tracing::debug!(
                workload = %call.workload,
                replicas,
                "more pods than replicas still active in the pod cache (a rollout's surge, or the last scale-in's deletions not seen): planning anyway"
            );
        }
        true
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
            self.caches
                .pod(&ns, pod)
                .is_some_and(|p| is_pod_active(&*p))
        })
    }

    /// Counts and notes a finished scale-in.
    fn after_scale_in(&self, call: &ScaleInCall, answer: &ScaleInAnswer) {
        self.metrics.scale_in_writes(answer.writes as u64);
        if answer.outcome == ScaleInOutcome::Fresh {
            if let Some(managed) = &answer.managed {
                self.note_scale_in(managed, call.caller);
            }
        }
    }

    /// The scale-in's work, and what to price it from (`--prices`);
    /// `follows`: right behind another scale-in of the workload.
    async fn make_exact(
        &self,
        call: &ScaleInCall,
        follows: bool,
    ) -> (ScaleInAnswer, Option<PricingInput>) {
        let mut pricing = None;
        let answer = self.make_exact_keeping(call, follows, &mut pricing).await;
        (answer, pricing)
    }

    /// The scale-in's work: the policy's round with fresh signals and the
    /// correction, the writes, the wait, the settle; the round's snapshot
    /// goes to `pricing`.
    async fn make_exact_keeping(
        &self,
        call: &ScaleInCall,
        follows: bool,
        pricing: &mut Option<PricingInput>,
    ) -> ScaleInAnswer {
        let managed = match self.managed_now(call, follows).await {
            Ok(m) => m,
            Err(answer) => return answer,
        };
        let mut answer = ScaleInAnswer::bare(ScaleInOutcome::Fresh);
        answer.managed = Some(managed.clone());
        let over = |phase, missing| ScaleInOutcome::OverBudget {
            phase,
            missing,
            writes: missing,
        };
        let key = key_of(&managed.resolved);
        let Ok(mut state) = timeout_at(call.deadline, self.policies.lock(&key)).await else {
            answer.outcome = over("waiting for the policy's running round", 0);
            return answer;
        };
        let by = usize::try_from(call.from - call.to).unwrap_or(0);
        state.hold(&managed.pods, Instant::now() + hold_for(by));
        // the billing classes and the markers as they are now, not as the
        // watches last showed them (under the lock: a round the relabelling
        // started waits)
        tokio::join!(
            self.read_nodes_now(&managed, call.deadline),
            self.read_marks_now(&managed, call.deadline)
        );
        let target = ScaleInTarget {
            replica_sets: managed.replica_sets.clone(),
            by,
            in_flight: self.values_on_their_way(&managed),
        };
        let planned = self.plan_round(
            &mut state,
            &managed.policy,
            &managed.resolved,
            true,
            Some(target),
            Priority::Urgent,
        );
        let round = match timeout_at(call.deadline, planned).await {
            Err(_) => {
                answer.outcome = over("reading signals and planning", 0);
                return answer;
            }
            Ok(Err(e)) => {
                answer.outcome = ScaleInOutcome::PlannerFailed(e.to_string());
                return answer;
            }
            Ok(Ok(r)) => r,
        };
        answer.victims = round
            .corrections
            .iter()
            .map(|c| (c.replica_set.clone(), c.victims_if(|_| false)))
            .collect();
        answer.corrections = round.corrections.clone();
        answer.plan = Some(Arc::new(round.plan.clone()));
        pricing.clone_from(&round.pricing);
        let (ns, policy) = (&managed.resolved.namespace, &managed.resolved.name);
        let requests: Vec<PatchRequest> = round
            .corrections
            .iter()
            .flat_map(|c| &c.writes)
            .map(|w| PatchRequest::set(PodRef::new(ns, &*w.pod), policy, w.cost).with_uid(&*w.uid))
            .collect();
        let batch = match self.submit_correction(&round, requests.clone()) {
            Ok(b) => b,
            Err(hold) => {
                answer.outcome = ScaleInOutcome::Held(hold);
                return answer;
            }
        };
        drop(state);
        self.land(call, answer, batch, &requests).await
    }

    /// The policy managing the call's workload, with its pods as the cache
    /// shows them once a scale-in right before this one took effect; the
    /// answer when none manages it.
    async fn managed_now(
        &self,
        call: &ScaleInCall,
        follows: bool,
    ) -> Result<Managed, ScaleInAnswer> {
        let mut managed = match self.managing(&call.workload).await {
            Ok(m) => m,
            Err(ManagingError::NotManaged(e)) => {
                return Err(ScaleInAnswer::bare(ScaleInOutcome::NoPolicy(e.to_string())))
            }
            Err(e) => {
                return Err(ScaleInAnswer::bare(ScaleInOutcome::PlannerFailed(
                    e.to_string(),
                )))
            }
        };
        if follows && self.wait_for_replicas(call, &managed).await {
            // the pods as the cache shows them now
            if let Ok(m) = self.managing(&call.workload).await {
                managed = m;
            }
        }
        Ok(managed)
    }

    /// The correction's `batch` landed, shown in the pod cache and settled:
    /// the answer with the pods that go and the outcome.
    async fn land(
        &self,
        call: &ScaleInCall,
        mut answer: ScaleInAnswer,
        batch: Option<crate::writes::Batch>,
        requests: &[PatchRequest],
    ) -> ScaleInAnswer {
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
            let Ok(report) = timeout_at(call.deadline, batch.wait()).await else {
                return self.over_budget(answer, "writing", requests);
            };
            landed_at = Instant::now();
            for ((pod, outcome), req) in report.outcomes.iter().zip(requests) {
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
        let waited = timeout_at(call.deadline, async {
            while !shown.iter().all(|r| self.cache_shows(r)) {
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        if waited.is_err() {
            return self.over_budget(answer, "waiting for the pod cache", requests);
        }
        if answer.writes > 0 {
            answer.observed_after = Some(sent_at.elapsed());
            let left = call.deadline.saturating_duration_since(Instant::now());
            answer.settled = settle(landed_at.elapsed(), call.settle_cap, left);
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
        let missing = requests.iter().filter(|r| !self.cache_shows(r)).count();
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
        self.caches
            .pod(ns, &w.pod)
            .is_some_and(|p| p.ours.deletion_cost.as_deref() == Some(w.cost.to_string().as_str()))
    }

    /// Drops the values queued for the workload's pods (the correction
    /// decides what they need) and returns those that may still land: in
    /// flight, or landed but not yet in the cache.
    fn values_on_their_way(&self, managed: &Managed) -> HashMap<String, i32> {
        let Some(patcher) = self.leadership.patcher() else {
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
                if !self.cache_shows(&req) {
                    out.entry(pod.name.clone()).or_insert(req.cost.unwrap_or(0));
                }
            }
        }
        out
    }

    /// Hands the correction's writes to the patcher ahead of everything.
    fn submit_correction(
        &self,
        round: &super::round::PolicyRound,
        requests: Vec<PatchRequest>,
    ) -> Result<Option<crate::writes::Batch>, Hold> {
        let patcher = self.writer_for(round)?;
        if requests.is_empty() {
            return Ok(None);
        }
        patcher
            .submit_batch(requests, Priority::Urgent)
            .map(Some)
            // the queue is full or stopping: as good as no writer
            .map_err(|_| Hold::WriterStarting)
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
