//! The policy status, built purely from a plan and what the reconcile saw
//! ([`build`], [`invalid`]), and written with one Event per condition
//! transition ([`write()`]). News (a condition's transition, a new spec, the
//! end of a batch) is written at once; progress alone (pending counts,
//! victims, mismatches) at most every [`PROGRESS_EVERY`] per policy, less
//! often when many policies batch on a small budget ([`due`],
//! [`progress_interval`]). Both the status and its Events go through the operator-wide
//! write budget (the reconcile's client waits for a token of it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};
use tokio::time::Instant;

use crate::engine::{Conflict, FreshBy, ScaleIns, SignalProblem, WriteFailures};
use crate::plan::{CostAction, CostOwner, MismatchReason, Plan, ReplicaSetPlan, Verdict};
use crate::policy::{
    DeletionCostPolicy, DeletionCostPolicyStatus, LastScaleIn, MismatchStatus, PricedScaleIns,
    ReplicaSetVictims, ScaleInsStatus, VictimTie,
};

/// Condition types.
pub const READY: &str = "Ready";
/// Upstream's predicted order equals the intended one.
pub const ORDER_AS_INTENDED: &str = "OrderAsIntended";
/// Every signal could be read.
pub const SIGNALS_AVAILABLE: &str = "SignalsAvailable";
/// Another policy selects some of the same pods and wins them.
pub const CONFLICT: &str = "Conflict";
/// Scale-ins get fresh costs whoever scales in (the scale-in webhook).
pub const SCALE_INS_FRESH: &str = "ScaleInsFresh";

/// Pods listed per ReplicaSet in `status.victims`.
pub const VICTIMS_SHOWN: usize = 5;
/// Pods named per tie in `status.victims[].ties` (a tie can span the whole
/// ReplicaSet).
pub const TIE_PODS_SHOWN: usize = 10;
/// Mismatches listed in `status.mismatches`.
pub const MISMATCHES_SHOWN: usize = 10;

/// What a reconcile observed besides the plan.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Why a signal could not be read.
    pub signals: Option<SignalProblem>,
    /// Policies that win pods this policy also selects.
    pub conflicts: Vec<Conflict>,
    /// Patches submitted but not yet observed.
    pub pending_patches: usize,
    /// Patch submissions refused (queue full).
    pub rejected: usize,
    /// Writes of the policy refused for good or out of attempts, not
    /// followed by one that landed (sent again by the next round).
    pub failing: Option<WriteFailures>,
    /// When signals were last read (RFC 3339).
    pub last_refresh: Option<String>,
    /// `metadata.generation` of the policy.
    pub generation: Option<i64>,
    /// Scale-ins of the policy's workloads made fresh since the operator
    /// started, and by whom.
    pub scale_ins: ScaleIns,
    /// How old costs may be at a scale-in nobody made fresh.
    pub refresh_interval: std::time::Duration,
    /// The policy writes costs only at scale-ins (`writes: OnScaleIn`).
    pub on_scale_in: bool,
    /// Its priced scale-ins' totals (`--prices`), once this term read them
    /// from the status; `None` keeps the status's.
    pub priced: Option<PricedScaleIns>,
}

/// A condition; [`merge_conditions`] sets its transition time.
fn condition(type_: &str, ok: bool, reason: &str, message: String) -> Condition {
    with_status(type_, if ok { "True" } else { "False" }, reason, message)
}

/// A condition whose status may also be `Unknown`.
fn with_status(type_: &str, status: &str, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: UNSET,
        // the policy's `status.observedGeneration` says which spec they describe
        observed_generation: None,
    }
}

/// Placeholder transition time of a condition not merged yet.
const UNSET: Time = Time(Timestamp::UNIX_EPOCH);

/// Status for an invalid policy: `Ready=False`, reason `InvalidSpec`.
pub fn invalid(
    prev: Option<&DeletionCostPolicyStatus>,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> DeletionCostPolicyStatus {
    let mut s = prev.cloned().unwrap_or_default();
    let conds = vec![condition(READY, false, "InvalidSpec", message.to_string())];
    s.conditions = merge_conditions(prev, conds, now);
    s.observed_generation = generation;
    s
}

/// Builds the status of a planned policy.
pub fn build(
    prev: Option<&DeletionCostPolicyStatus>,
    plan: &Plan,
    obs: &Observed,
    now: &Time,
) -> DeletionCostPolicyStatus {
    let karpenter_pods = plan
        .pods
        .iter()
        .filter(|p| p.owner == CostOwner::Karpenter)
        .count();
    let conditions = vec![
        ready_condition(plan, obs, karpenter_pods),
        order_condition(plan),
        signals_condition(obs),
        conflict_condition(obs),
        scale_ins_condition(&obs.scale_ins, obs.refresh_interval, obs.on_scale_in),
    ];
    let managed = plan
        .pods
        .iter()
        .filter(|p| matches!(p.action, CostAction::Patch(_)) || p.owner == CostOwner::Ours)
        .count();
    DeletionCostPolicyStatus {
        conditions: merge_conditions(prev, conditions, now),
        observed_generation: obs.generation,
        managed_pods: u32::try_from(managed).unwrap_or(u32::MAX),
        karpenter_pods: u32::try_from(karpenter_pods).unwrap_or(u32::MAX),
        pending_patches: u32::try_from(obs.pending_patches).unwrap_or(u32::MAX),
        last_refresh: obs
            .last_refresh
            .clone()
            .or_else(|| prev.and_then(|p| p.last_refresh.clone())),
        victims: plan.replica_sets.iter().map(victims).collect(),
        scale_ins: scale_ins_status(&obs.scale_ins),
        mismatches: plan
            .replica_sets
            .iter()
            .flat_map(|r| &r.mismatches)
            .take(MISMATCHES_SHOWN)
            .map(|m| MismatchStatus {
                pod: m.pod.clone(),
                reason: format!("{:?}", m.reason),
            })
            .collect(),
        // totals: never dropped, whatever this replica knows
        priced_scale_ins: obs
            .priced
            .clone()
            .or_else(|| prev.and_then(|p| p.priced_scale_ins.clone())),
    }
}

/// `OrderAsIntended`: whether upstream's order is the policy's, and when not,
/// the mismatches by reason (the commonest names the reason).
fn order_condition(plan: &Plan) -> Condition {
    let mut counts: BTreeMap<MismatchReason, usize> = BTreeMap::new();
    for m in plan.replica_sets.iter().flat_map(|r| &r.mismatches) {
        *counts.entry(m.reason).or_default() += 1;
    }
    let ambiguous = plan
        .replica_sets
        .iter()
        .any(|r| r.verdict == Verdict::Ambiguous);
    if counts.is_empty() && !ambiguous {
        return condition(
            ORDER_AS_INTENDED,
            true,
            "AsIntended",
            "upstream's deletion order matches the policy".into(),
        );
    }
    if counts.is_empty() {
        return condition(
            ORDER_AS_INTENDED,
            false,
            "Ambiguous",
            "upstream's order among some pods depends on informer order".into(),
        );
    }
    let (top, _) = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(r, n)| (*r, *n))
        .unwrap_or((MismatchReason::PendingPatch, 0));
    let summary: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r:?}")).collect();
    condition(
        ORDER_AS_INTENDED,
        false,
        &format!("{top:?}"),
        format!("pods deleted before cheaper ones: {}", summary.join(", ")),
    )
}

/// `SignalsAvailable`: whether the round read every signal.
fn signals_condition(obs: &Observed) -> Condition {
    match &obs.signals {
        None => condition(
            SIGNALS_AVAILABLE,
            true,
            "Available",
            "all signals read".into(),
        ),
        Some(p) => condition(SIGNALS_AVAILABLE, false, &p.reason, p.message.clone()),
    }
}

/// `Ready`: refused or failing writes first, else what the plan selected.
fn ready_condition(plan: &Plan, obs: &Observed, karpenter_pods: usize) -> Condition {
    if obs.rejected > 0 {
        return condition(
            READY,
            false,
            "QueueFull",
            format!(
                "{} patches refused by a full write queue; retrying",
                obs.rejected
            ),
        );
    }
    if let Some(f) = &obs.failing {
        return condition(
            READY,
            false,
            "WritesFailing",
            format!(
                "{} pod write(s) failed after their retries (last: {}); {} patches pending; sending again",
                f.count, f.last, obs.pending_patches
            ),
        );
    }
    let karpenter = if karpenter_pods > 0 {
        format!("; {karpenter_pods} carry Karpenter's costs (left alone)")
    } else {
        String::new()
    };
    let selected = format!(
        "{} pods selected, {} patches pending{karpenter}",
        plan.pods.len(),
        obs.pending_patches
    );
    match &plan.crowded_node_order {
        // written as planned, but some nodes share a cost: said, not hidden
        Some(crowded) => condition(
            READY,
            true,
            "NodeOrderCrowded",
            format!("{selected}; {crowded}"),
        ),
        None => condition(READY, true, "Reconciled", selected),
    }
}

/// `Conflict`: the older policies that win pods this one selects.
fn conflict_condition(obs: &Observed) -> Condition {
    if obs.conflicts.is_empty() {
        return condition(
            CONFLICT,
            false,
            "NoConflict",
            "no other policy selects these pods".into(),
        );
    }
    let list: Vec<String> = obs
        .conflicts
        .iter()
        .map(|c| format!("{} ({} pods)", c.winner, c.pods))
        .collect();
    condition(
        CONFLICT,
        true,
        "OverlappingPolicy",
        format!("older policies win shared pods: {}", list.join(", ")),
    )
}

/// The scale-ins counted, as the status keeps them (none before the first).
fn scale_ins_status(s: &ScaleIns) -> Option<ScaleInsStatus> {
    (s.by_hook > 0 || s.by_webhook > 0 || s.last.is_some()).then(|| ScaleInsStatus {
        by_hook: s.by_hook,
        by_webhook: s.by_webhook,
        last: s.last.as_ref().map(|(at, by, workload)| LastScaleIn {
            at: at.clone(),
            by: by.as_str().into(),
            workload: workload.clone(),
        }),
    })
}

/// What a status kept of the scale-ins, for the engine to count on from.
pub fn scale_ins_from(kept: &ScaleInsStatus) -> ScaleIns {
    ScaleIns {
        by_hook: kept.by_hook,
        by_webhook: kept.by_webhook,
        last: kept
            .last
            .as_ref()
            .and_then(|l| Some((l.at.clone(), FreshBy::parse(&l.by)?, l.workload.clone()))),
    }
}

/// Which scalers get fresh costs: `True` once the scale-in webhook made a
/// scale-in fresh (it covers every scaler), `False` when only the hook did,
/// `Unknown` before any scale-in. The message says how old costs may be
/// for a scaler nobody covers. A policy that writes only at scale-ins
/// (`writes: OnScaleIn`) and has seen none is `False`: nothing was written.
fn scale_ins_condition(s: &ScaleIns, refresh: std::time::Duration, on_scale_in: bool) -> Condition {
    let last = s.last.as_ref().map_or(String::new(), |(at, by, workload)| {
        format!("; last at {at}, {workload}, by {by}")
    });
    let stale = if on_scale_in {
        "the HPA, KEDA, `kubectl scale` and GitOps syncs, which call nothing first, scale in on whatever costs the pods carry (spec.writes is OnScaleIn: nothing is written in the background)".to_string()
    } else {
        format!(
            "the HPA, KEDA, `kubectl scale` and GitOps syncs, which call nothing first, scale in on costs up to {}s old (refreshInterval)",
            refresh.as_secs()
        )
    };
    if on_scale_in && s.by_webhook == 0 && s.by_hook == 0 {
        return condition(
            SCALE_INS_FRESH,
            false,
            "NoScaleInCallSeen",
            "spec.writes is OnScaleIn but no scale-in call (the scale-in webhook or the pre-scale-down hook) has been seen: no cost is written until one is; install the scale-webhook component, or have the scaler call the hook".into(),
        );
    }
    if s.by_webhook > 0 {
        condition(
            SCALE_INS_FRESH,
            true,
            "ScaleInWebhook",
            format!(
                "the scale-in webhook made the costs fresh for {} scale-in(s) (status.scaleIns), whoever scaled in (the hook for {}){last}",
                s.by_webhook, s.by_hook
            ),
        )
    } else if s.by_hook > 0 {
        condition(
            SCALE_INS_FRESH,
            false,
            "HookCallersOnly",
            format!(
                "the pre-scale-down hook made the costs fresh for {} scale-in(s) (status.scaleIns), but no scale-in webhook call was seen: {stale}; install the scale-webhook component{last}",
                s.by_hook
            ),
        )
    } else {
        with_status(
            SCALE_INS_FRESH,
            "Unknown",
            "NoScaleInSeen",
            format!(
                "no scale-in made fresh yet; unless the scale-webhook component is installed, {stale}"
            ),
        )
    }
}

/// The first pods a ReplicaSet would delete, and the ties among them: where
/// upstream ranks pods equal, the order shown is only one it may use.
fn victims(r: &ReplicaSetPlan) -> ReplicaSetVictims {
    let shown = r.predicted.len().min(VICTIMS_SHOWN);
    let ties = r
        .ties
        .iter()
        .filter(|t| t.start < shown)
        .map(|t| {
            let at_cut = t.end > shown;
            let count = t.end - t.start;
            // only a tie running past the list can be longer than the list
            let message = if at_cut {
                let named = if count > TIE_PODS_SHOWN {
                    format!(" (the first {TIE_PODS_SHOWN} named)")
                } else {
                    String::new()
                };
                format!(
                    "the list of {shown} ends inside a tie of {count} pods{named}: which of them \
                     upstream deletes depends on its informer's list order"
                )
            } else {
                format!(
                    "upstream ranks these {count} pods equal: the order it deletes them in \
                     depends on its informer's list order"
                )
            };
            VictimTie {
                pods: r
                    .predicted
                    .get(t.clone())
                    .unwrap_or_default()
                    .iter()
                    .take(TIE_PODS_SHOWN)
                    .map(|p| p.to_string())
                    .collect(),
                at_cut,
                message,
            }
        })
        .collect();
    ReplicaSetVictims {
        replica_set: r.name.clone(),
        pods: r
            .predicted
            .iter()
            .take(shown)
            .map(|p| p.to_string())
            .collect(),
        ties,
    }
}

/// Keeps `lastTransitionTime` of conditions whose status did not change.
fn merge_conditions(
    prev: Option<&DeletionCostPolicyStatus>,
    new: Vec<Condition>,
    now: &Time,
) -> Vec<Condition> {
    new.into_iter()
        .map(|mut c| {
            let old = prev.and_then(|p| p.conditions.iter().find(|o| o.type_ == c.type_));
            c.last_transition_time = match old {
                Some(o) if o.status == c.status => o.last_transition_time.clone(),
                _ => now.clone(),
            };
            c
        })
        .collect()
}

/// Conditions whose status changed (or appeared): each deserves one Event.
pub fn transitions<'a>(
    prev: Option<&DeletionCostPolicyStatus>,
    new: &'a DeletionCostPolicyStatus,
) -> Vec<&'a Condition> {
    new.conditions
        .iter()
        .filter(|c| {
            let old = prev.and_then(|p| p.conditions.iter().find(|o| o.type_ == c.type_));
            match old {
                Some(o) => o.status != c.status || o.reason != c.reason,
                // first report: only bad news is news (which scalers get
                // fresh costs is information, said by the condition alone)
                None => c.type_ != SCALE_INS_FRESH && (c.status == "True") == (c.type_ == CONFLICT),
            }
        })
        .collect()
}

/// Whether two statuses differ in anything but transition times.
pub fn differs(a: Option<&DeletionCostPolicyStatus>, b: &DeletionCostPolicyStatus) -> bool {
    let strip = |s: &DeletionCostPolicyStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = UNSET;
        }
        s
    };
    a.map(strip) != Some(strip(b))
}

/// How often a policy's progress alone (pending counts, victims,
/// mismatches) is written at most. Under 10 s so that, with a reconcile
/// trigger within a second and a turn in the write budget, a reader sees
/// progress at least every 10 s during a batch when the budget affords it
/// (see [`progress_interval`]).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(8);

/// The part of the operator-wide write rate (`--qps`) the progress of all
/// the policies batching at once may take together: the rest is for the pod
/// writes, the news and the Events.
pub const PROGRESS_SHARE: f64 = 0.25;

/// How long a policy counts as batching after its last status said it had
/// patches pending (one whose batch ended says so at once).
const BATCHING_WITHIN: Duration = Duration::from_secs(60);

/// How often each policy's progress is written while `batching` policies
/// are in a batch and the operator writes at `qps` (pure): every
/// [`PROGRESS_EVERY`], or less often when their progress together would
/// take more than [`PROGRESS_SHARE`] of `qps` (20 policies at `--qps 5`:
/// every 16 s).
pub fn progress_interval(batching: usize, qps: f64) -> Duration {
    let budget = qps * PROGRESS_SHARE;
    let fair = if budget > 0.0 {
        Duration::try_from_secs_f64(batching as f64 / budget).unwrap_or(Duration::MAX)
    } else {
        Duration::MAX
    };
    fair.max(PROGRESS_EVERY)
}

/// When a new status is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing but transition times changed: nothing to write.
    Unchanged,
    /// Now: the first status, a condition's transition (status or reason),
    /// a new `observedGeneration`, the end of a batch (no patch pending any
    /// more), or progress whose last write is a progress interval old.
    Now,
    /// Only progress changed, and the policy's last write is recent: write
    /// it after this long (the next reconcile then, at the latest).
    After(Duration),
}

/// When `new` is written over `prev` (pure), given how long ago this
/// policy's status was last written (None: never by this process) and how
/// often its progress may be written (`every`, from [`progress_interval`]).
pub fn due(
    prev: Option<&DeletionCostPolicyStatus>,
    new: &DeletionCostPolicyStatus,
    since_last: Option<Duration>,
    every: Duration,
) -> Due {
    if !differs(prev, new) {
        return Due::Unchanged;
    }
    let Some(old) = prev else {
        return Due::Now;
    };
    let news = !transitions(prev, new).is_empty()
        || old.observed_generation != new.observed_generation
        || (new.pending_patches == 0 && old.pending_patches > 0);
    match since_last {
        _ if news => Due::Now,
        None => Due::Now,
        Some(d) if d >= every => Due::Now,
        Some(d) => Due::After(every - d),
    }
}

/// What [`Cadence`] keeps of a policy's last status write.
#[derive(Debug, Clone, Copy)]
struct LastWrite {
    at: Instant,
    /// Whether it had patches pending.
    batching: bool,
}

/// When each policy's status was last written by this process, and how
/// many policies are batching (for [`due`] and [`progress_interval`]); a
/// new leader starts empty, so its first write goes at once.
#[derive(Debug)]
pub struct Cadence {
    qps: f64,
    last: Mutex<HashMap<String, LastWrite>>,
}

impl Cadence {
    /// A cadence for an operator writing at `qps` (`--qps`).
    pub fn new(qps: f64) -> Self {
        Cadence {
            qps,
            last: Mutex::default(),
        }
    }

    /// How long ago `policy`'s status was last written, and how often its
    /// progress may be written now.
    fn of(&self, policy: &str, now: Instant) -> (Option<Duration>, Duration) {
        let Ok(last) = self.last.lock() else {
            return (None, PROGRESS_EVERY);
        };
        let batching = last
            .values()
            .filter(|w| w.batching && now.saturating_duration_since(w.at) < BATCHING_WITHIN)
            .count();
        let since = last
            .get(policy)
            .map(|w| now.saturating_duration_since(w.at));
        (since, progress_interval(batching, self.qps))
    }

    fn wrote(&self, policy: &str, at: Instant, batching: bool) {
        if let Ok(mut last) = self.last.lock() {
            last.insert(policy.to_owned(), LastWrite { at, batching });
        }
    }

    /// Forgets a deleted policy.
    pub fn forget(&self, policy: &str) {
        if let Ok(mut last) = self.last.lock() {
            last.remove(policy);
        }
    }
}

/// The server-side apply configuration of a status: the whole status, which
/// this manager owns. Empty lists are sent as `[]`, not left out: a status
/// written before the operator used server-side apply has its lists owned
/// by the merge patches that wrote them, so leaving an emptied list out
/// would not clear it; and the stored status keeps the shape it had.
fn apply_body(status: &DeletionCostPolicyStatus) -> serde_json::Value {
    let mut body = serde_json::to_value(status).unwrap_or_default();
    if let Some(obj) = body.as_object_mut() {
        for field in ["conditions", "victims", "mismatches"] {
            obj.entry(field).or_insert_with(|| serde_json::json!([]));
        }
    }
    serde_json::json!({
        "apiVersion": DeletionCostPolicy::api_version(&()),
        "kind": DeletionCostPolicy::kind(&()),
        "status": body,
    })
}

/// Writes the status when it is [`due`] (never with `dry_run`), by
/// server-side apply of the status subresource, and publishes one Event
/// per condition transition. Returns what it did: [`Due::After`] is a
/// progress change held back, for the caller to reconcile again by then.
pub async fn write(
    recorder: &Recorder,
    dry_run: bool,
    cadence: &Cadence,
    api: &Api<DeletionCostPolicy>,
    policy: &DeletionCostPolicy,
    prev: Option<&DeletionCostPolicyStatus>,
    new: DeletionCostPolicyStatus,
) -> Result<Due, kube::Error> {
    if dry_run {
        return Ok(Due::Unchanged);
    }
    let name = policy.name_any();
    let key = format!("{}/{name}", policy.namespace().unwrap_or_default());
    let decided = Instant::now();
    let (since_last, every) = cadence.of(&key, decided);
    match due(prev, &new, since_last, every) {
        Due::Now => {}
        other => return Ok(other),
    }
    api.patch_status(
        &name,
        &PatchParams::apply(crate::MANAGER).force(),
        &Patch::Apply(apply_body(&new)),
    )
    .await?;
    cadence.wrote(&key, decided, new.pending_patches > 0);
    let reference = policy.object_ref(&());
    for c in transitions(prev, &new) {
        let good = (c.status == "True") != (c.type_ == CONFLICT);
        let event = Event {
            type_: if good {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: c.reason.clone(),
            note: Some(
                format!("{}={}: {}", c.type_, c.status, c.message)
                    .chars()
                    .take(1000)
                    .collect(),
            ),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!(policy = %key, error = %e, "publishing event failed");
        }
    }
    Ok(Due::Now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::Rule;
    use crate::plan::{Mismatch, ReplicaSetPlan};

    fn plan_with(mismatches: Vec<Mismatch>) -> Plan {
        Plan {
            policy: "shop/web".into(),
            pods: vec![],
            patches: vec![],
            replica_sets: vec![ReplicaSetPlan {
                name: "web-abc".into(),
                deployment: Some("web".into()),
                predicted: (0..8).map(|i| format!("p{i}").into()).collect(),
                intended_costs: vec![],
                live_costs: vec![],
                victims: vec![],
                verdict: if mismatches.is_empty() {
                    Verdict::AsIntended
                } else {
                    Verdict::NotAsIntended
                },
                mismatches,
                ambiguous: vec![],
                tie_at_cut: false,
                ties: vec![],
                related_pods: 8,
            }],
            values: Default::default(),
            inactive: vec![],
            warnings: vec![],
            blocked_nodes: vec![],
            crowded_node_order: None,
            writes: Default::default(),
            savings: None,
        }
    }

    fn mismatch(reason: MismatchReason) -> Mismatch {
        Mismatch {
            pod: "p0".into(),
            before: "p1".into(),
            reason,
            rule: Rule::Readiness,
        }
    }

    /// A transition time `n` seconds after the epoch.
    fn t(n: i64) -> Time {
        Time(Timestamp::from_second(n).unwrap())
    }

    fn cond<'a>(s: &'a DeletionCostPolicyStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn the_status_says_which_scalers_get_fresh_costs() {
        use crate::engine::FreshBy;
        let plan = plan_with(vec![]);
        let with = |scale_ins: ScaleIns| Observed {
            scale_ins,
            refresh_interval: std::time::Duration::from_secs(300),
            ..Default::default()
        };
        let none = build(None, &plan, &with(ScaleIns::default()), &t(0));
        let c = cond(&none, SCALE_INS_FRESH);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "NoScaleInSeen")
        );
        assert!(c.message.contains("up to 300s old"), "{}", c.message);
        // writing only at scale-ins, none seen: nothing was ever written
        let idle = build(
            None,
            &plan,
            &Observed {
                on_scale_in: true,
                ..with(ScaleIns::default())
            },
            &t(0),
        );
        let c = cond(&idle, SCALE_INS_FRESH);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NoScaleInCallSeen")
        );
        assert!(c.message.contains("no cost is written"), "{}", c.message);
        let last = Some((
            "2026-11-25T10:00:00Z".into(),
            FreshBy::Hook,
            "Deployment shop/web".into(),
        ));
        let hook = build(
            None,
            &plan,
            &with(ScaleIns {
                by_hook: 2,
                by_webhook: 0,
                last: last.clone(),
            }),
            &t(0),
        );
        let c = cond(&hook, SCALE_INS_FRESH);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "HookCallersOnly")
        );
        assert!(
            c.message.contains("install the scale-webhook component"),
            "{}",
            c.message
        );
        assert!(
            c.message
                .contains("Deployment shop/web, by the pre-scale-down hook"),
            "{}",
            c.message
        );
        let webhook = build(
            None,
            &plan,
            &with(ScaleIns {
                by_hook: 2,
                by_webhook: 3,
                last,
            }),
            &t(0),
        );
        let c = cond(&webhook, SCALE_INS_FRESH);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "ScaleInWebhook")
        );
        assert!(c.message.contains("for 3 scale-in(s)"), "{}", c.message);
    }

    #[test]
    fn priced_totals_are_written_and_never_dropped() {
        let plan = plan_with(vec![]);
        let totals = PricedScaleIns {
            priced: 4,
            currency: Some("USD".into()),
            ..Default::default()
        };
        let with = build(
            None,
            &plan,
            &Observed {
                priced: Some(totals.clone()),
                ..Default::default()
            },
            &t(0),
        );
        assert_eq!(with.priced_scale_ins.as_ref(), Some(&totals));
        let json = serde_json::to_value(&with).unwrap();
        assert_eq!(json["pricedScaleIns"]["priced"], 4);
        assert_eq!(json["pricedScaleIns"]["withPolicy"]["hourly"], "0.00");
        // a replica that has not read them (or runs without prices) keeps
        // what the status holds
        let kept = build(Some(&with), &plan, &Observed::default(), &t(1));
        assert_eq!(kept.priced_scale_ins.as_ref(), Some(&totals));
        assert!(!differs(Some(&with), &kept));
        // new totals are progress, at the cadence
        let more = build(
            Some(&with),
            &plan,
            &Observed {
                priced: Some(PricedScaleIns {
                    priced: 5,
                    ..totals
                }),
                ..Default::default()
            },
            &t(2),
        );
        assert_eq!(
            due(
                Some(&with),
                &more,
                Some(Duration::from_secs(1)),
                PROGRESS_EVERY
            ),
            Due::After(PROGRESS_EVERY - Duration::from_secs(1))
        );
        // none ever: no key
        let none = build(None, &plan, &Observed::default(), &t(0));
        assert!(serde_json::to_value(&none)
            .unwrap()
            .get("pricedScaleIns")
            .is_none());
    }

    #[test]
    fn a_crowded_node_order_is_said_in_ready() {
        let mut p = plan_with(vec![]);
        p.crowded_node_order = Some("nodeConsolidation: 700 nodes holding 40 pod(s)".into());
        let s = build(None, &p, &Observed::default(), &t(0));
        let ready = cond(&s, READY);
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason, "NodeOrderCrowded");
        assert!(
            ready.message.ends_with("700 nodes holding 40 pod(s)"),
            "{}",
            ready.message
        );
    }

    #[test]
    fn conditions_reflect_the_plan() {
        let s = build(None, &plan_with(vec![]), &Observed::default(), &t(0));
        assert_eq!(cond(&s, ORDER_AS_INTENDED).status, "True");
        assert_eq!(cond(&s, READY).status, "True");
        assert_eq!(s.victims[0].pods.len(), VICTIMS_SHOWN);
        let bad = build(
            Some(&s),
            &plan_with(vec![
                mismatch(MismatchReason::NotReady),
                mismatch(MismatchReason::NotReady),
            ]),
            &Observed {
                signals: Some(SignalProblem {
                    reason: "Unreachable".into(),
                    message: "connection refused".into(),
                }),
                conflicts: vec![Conflict {
                    winner: "shop/older".into(),
                    pods: 2,
                }],
                ..Default::default()
            },
            &t(1),
        );
        let order = cond(&bad, ORDER_AS_INTENDED);
        assert_eq!(
            (order.status.as_str(), order.reason.as_str()),
            ("False", "NotReady")
        );
        assert_eq!(order.last_transition_time, t(1));
        assert_eq!(cond(&bad, READY).last_transition_time, t(0));
        assert_eq!(cond(&bad, SIGNALS_AVAILABLE).reason, "Unreachable");
        assert_eq!(cond(&bad, CONFLICT).status, "True");
        assert_eq!(bad.mismatches[0].reason, "NotReady");
        let changed: Vec<&str> = transitions(Some(&s), &bad)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(changed, [ORDER_AS_INTENDED, SIGNALS_AVAILABLE, CONFLICT]);
    }

    #[test]
    fn writes_that_keep_failing_make_the_policy_not_ready() {
        let ok = build(None, &plan_with(vec![]), &Observed::default(), &t(0));
        let failing = build(
            Some(&ok),
            &plan_with(vec![]),
            &Observed {
                pending_patches: 3,
                failing: Some(WriteFailures {
                    count: 3,
                    last: "shop/web-2: refused (403): forbidden".into(),
                }),
                ..Default::default()
            },
            &t(1),
        );
        let ready = cond(&failing, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "WritesFailing")
        );
        assert!(
            ready.message.contains("3 pod write(s) failed"),
            "{}",
            ready.message
        );
        assert!(ready.message.contains("refused (403)"), "{}", ready.message);
        assert_eq!(failing.pending_patches, 3);
    }

    /// What the operator plans for 7 Ready pods of one ReplicaSet on one
    /// node, 3 at cost 0 and 4 at cost 100, ready at `ready(i)`.
    fn planned(ready: impl Fn(usize) -> String) -> Plan {
        use k8s_openapi::api::core::v1::Node;
        let pods = (0..7)
            .map(|i| {
                let cost = if i < 3 { "0" } else { "100" };
                serde_json::from_value::<crate::pod::PodRecord>(serde_json::json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "shop",
                        "uid": format!("uid-{i}"), "labels": {"app": "web"},
                        "creationTimestamp": "2026-11-01T00:00:00Z",
                        "annotations": {crate::annotations::POD_DELETION_COST: cost},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "name": "web-abc", "uid": "rs", "controller": true}]},
                    "spec": {"nodeName": "n1", "containers": []},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready",
                        "status": "True", "lastTransitionTime": ready(i)}]},
                }))
                .map(std::sync::Arc::new)
                .unwrap()
            })
            .collect();
        let node: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}})).unwrap();
        let snapshot = crate::plan::Snapshot {
            pods,
            nodes: vec![std::sync::Arc::new(node)],
            replica_sets: vec![],
            deployments: vec![],
            ignored: vec![],
        };
        let spec: crate::policy::DeletionCostPolicySpec = serde_saphyr::from_str(
            "selector: {matchLabels: {app: web}}\n\
             signals:\n- billingClass: {costs: {spot: 0}, default: 100}\n",
        )
        .unwrap();
        let policy = crate::plan::NamedPolicy::validate("web", "shop", &spec).unwrap();
        let opts = crate::plan::PlanOptions {
            gates: Default::default(),
            now: Some(
                "2026-11-22T03:00:00Z"
                    .parse::<k8s_openapi::jiff::Timestamp>()
                    .unwrap()
                    .as_nanosecond(),
            ),
            // as the reconcile plans: live costs, no scale-down given
            scale_down_by: None,
            assume_patches_applied: false,
            chunks: Default::default(),
        };
        crate::plan::plan(
            &policy,
            &snapshot,
            &Default::default(),
            &Default::default(),
            &opts,
        )
    }

    #[test]
    fn karpenters_costs_are_counted_and_named() {
        let mut plan = planned(|_| "2026-11-20T00:00:00Z".into());
        for p in plan.pods.iter_mut().take(2) {
            p.owner = CostOwner::Karpenter;
            p.action = CostAction::KeepKarpenter;
            p.desired = None;
        }
        let s = build(None, &plan, &Observed::default(), &t(0));
        assert_eq!(s.karpenter_pods, 2);
        assert_eq!(s.managed_pods, 0);
        let ready = &cond(&s, READY).message;
        assert!(
            ready.ends_with("; 2 carry Karpenter's costs (left alone)"),
            "{ready}"
        );
        assert_eq!(serde_json::to_value(&s).unwrap()["karpenterPods"], 2);
        // none: no key, no words
        let none = build(
            None,
            &planned(|_| "2026-11-20T00:00:00Z".into()),
            &Observed::default(),
            &t(0),
        );
        assert_eq!(none.karpenter_pods, 0);
        assert!(serde_json::to_value(&none)
            .unwrap()
            .get("karpenterPods")
            .is_none());
        assert!(!cond(&none, READY).message.contains("Karpenter"));
    }

    #[test]
    fn victims_name_the_ties_they_cut_through() {
        // all Ready at the same second: upstream ranks equal costs equal
        let same = planned(|_| "2026-11-20T00:00:00Z".into());
        let s = build(None, &same, &Observed::default(), &t(0));
        let v = &s.victims[0];
        assert_eq!(v.pods, ["p0", "p1", "p2", "p3", "p4"]);
        assert_eq!(v.ties.len(), 2, "{v:?}");
        // inside the list: only the order among them is open
        assert_eq!(v.ties[0].pods, ["p0", "p1", "p2"]);
        assert!(!v.ties[0].at_cut);
        assert!(
            v.ties[0].message.contains("3 pods equal"),
            "{:?}",
            v.ties[0]
        );
        // across the end of the list: p5 or p6 may go instead of p3 or p4
        assert_eq!(v.ties[1].pods, ["p3", "p4", "p5", "p6"]);
        assert!(v.ties[1].at_cut);
        assert!(
            v.ties[1].message.contains("ends inside a tie of 4 pods"),
            "{:?}",
            v.ties[1]
        );
        let yaml = serde_saphyr::to_string(&s).unwrap();
        assert!(yaml.contains("atCut: true"), "{yaml}");

        // distinct ready times: the UID tie-break settles every pair
        let distinct = planned(|i| format!("2026-11-20T00:00:0{i}Z"));
        let s = build(None, &distinct, &Observed::default(), &t(0));
        assert_eq!(s.victims[0].pods.len(), VICTIMS_SHOWN);
        assert!(s.victims[0].ties.is_empty(), "{:?}", s.victims[0]);
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["victims"][0].get("ties").is_none(), "{json}");
    }

    #[test]
    fn a_long_tie_names_its_first_pods() {
        let mut plan = plan_with(vec![]);
        let rs = &mut plan.replica_sets[0];
        rs.predicted = (0..40).map(|i| format!("p{i}").into()).collect();
        rs.ties = vec![std::ops::Range { start: 2, end: 40 }];
        let s = build(None, &plan, &Observed::default(), &t(0));
        let tie = &s.victims[0].ties[0];
        assert_eq!(tie.pods.len(), TIE_PODS_SHOWN);
        assert_eq!(tie.pods[0], "p2");
        assert!(tie.at_cut);
        assert!(
            tie.message
                .starts_with("the list of 5 ends inside a tie of 38 pods (the first 10 named)"),
            "{}",
            tie.message
        );
    }

    #[test]
    fn unchanged_status_is_not_rewritten() {
        let a = build(None, &plan_with(vec![]), &Observed::default(), &t(0));
        let b = build(Some(&a), &plan_with(vec![]), &Observed::default(), &t(5));
        assert!(!differs(Some(&a), &b));
        assert!(transitions(Some(&a), &b).is_empty());
        // first status: only bad news is an event
        assert!(transitions(None, &a).is_empty());
        assert!(differs(None, &a));
    }

    #[test]
    fn progress_is_written_at_a_bounded_cadence_news_at_once() {
        let with_pending = |prev: Option<&DeletionCostPolicyStatus>, n: usize, at: i64| {
            let obs = Observed {
                pending_patches: n,
                ..Default::default()
            };
            build(prev, &plan_with(vec![]), &obs, &t(at))
        };
        let every = PROGRESS_EVERY;
        let first = with_pending(None, 30, 0);
        // the first status goes at once, whenever the last write was
        assert_eq!(due(None, &first, Some(Duration::ZERO), every), Due::Now);
        let progress = with_pending(Some(&first), 20, 1);
        let secs = Duration::from_secs;
        assert_eq!(due(Some(&first), &progress, None, every), Due::Now);
        assert_eq!(
            due(Some(&first), &progress, Some(secs(3)), every),
            Due::After(every - secs(3))
        );
        assert_eq!(due(Some(&first), &progress, Some(every), every), Due::Now);
        assert_eq!(
            due(Some(&first), &progress, Some(secs(9)), secs(16)),
            Due::After(secs(7))
        );
        // nothing but transition times: nothing to write
        assert_eq!(
            due(
                Some(&first),
                &with_pending(Some(&first), 30, 5),
                Some(secs(1)),
                every
            ),
            Due::Unchanged
        );
        // the end of the batch goes at once
        let done = with_pending(Some(&progress), 0, 2);
        assert_eq!(due(Some(&progress), &done, Some(secs(1)), every), Due::Now);
        // a condition's transition goes at once
        let signals_down = build(
            Some(&progress),
            &plan_with(vec![]),
            &Observed {
                pending_patches: 20,
                signals: Some(SignalProblem {
                    reason: "Unreachable".into(),
                    message: "connection refused".into(),
                }),
                ..Default::default()
            },
            &t(3),
        );
        assert_eq!(
            due(Some(&progress), &signals_down, Some(secs(1)), every),
            Due::Now
        );
        // so does a new spec
        let mut new_spec = progress.clone();
        new_spec.observed_generation = Some(2);
        new_spec.pending_patches = 19;
        assert_eq!(
            due(Some(&progress), &new_spec, Some(secs(1)), every),
            Due::Now
        );
    }

    #[test]
    fn many_policies_on_a_small_budget_show_progress_less_often() {
        let secs = Duration::from_secs;
        assert_eq!(progress_interval(1, 5.0), PROGRESS_EVERY);
        assert_eq!(progress_interval(10, 5.0), PROGRESS_EVERY);
        // 20 policies at 5/s: a quarter of the budget is 1.25 statuses a second
        assert_eq!(progress_interval(20, 5.0), secs(16));
        assert_eq!(progress_interval(50, 20.0), secs(10));
        assert_eq!(progress_interval(50, 40.0), PROGRESS_EVERY);
        assert_eq!(progress_interval(0, 0.0), Duration::MAX);
    }

    #[test]
    fn the_cadence_is_kept_per_policy_and_counts_the_batching_ones() {
        let cadence = Cadence::new(5.0);
        let now = Instant::now();
        assert_eq!(cadence.of("shop/web", now), (None, PROGRESS_EVERY));
        for i in 0..20 {
            cadence.wrote(&format!("shop/p{i}"), now, true);
        }
        cadence.wrote("shop/web", now, false);
        let later = now + Duration::from_secs(3);
        assert_eq!(
            cadence.of("shop/web", later),
            (Some(Duration::from_secs(3)), Duration::from_secs(16))
        );
        assert_eq!(cadence.of("shop/other", later).0, None);
        // a batch that ended, or a policy gone, no longer counts
        cadence.wrote("shop/p0", later, false);
        cadence.forget("shop/p1");
        cadence.forget("shop/web");
        let (since, every) = cadence.of("shop/web", later);
        assert_eq!(since, None);
        assert_eq!(
            every,
            PROGRESS_EVERY.max(Duration::from_secs_f64(18.0 / 1.25))
        );
        // nor does one whose last write is long gone (another term's)
        let much_later = now + BATCHING_WITHIN;
        assert_eq!(cadence.of("shop/web", much_later).1, PROGRESS_EVERY);
    }

    #[test]
    fn invalid_spec_status_names_the_field() {
        let s = invalid(None, "spec.selector: must not be empty", Some(3), &t(0));
        let r = cond(&s, READY);
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert!(r.message.contains("spec.selector"));
        assert_eq!(s.observed_generation, Some(3));
    }
}
