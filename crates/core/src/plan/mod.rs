//! The planner: pure. Given a policy, a cluster snapshot, signal samples and
//! `now`, it returns each pod's desired cost and its breakdown, the patches
//! needed, and per ReplicaSet the order upstream will use with the check
//! against the order the policy intends. It never talks to the API.

mod apart;
pub mod blockers;
pub mod check;
pub mod correction;
mod costing;
pub mod marked;
pub mod node_order;
mod on_scale_in;
mod prediction;
pub mod previous;
pub mod prices;
pub mod remove;
pub mod resolve;
pub mod savings;
mod selection;
pub mod snapshot;
pub mod workload;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::owner::controller_of_kind;
use crate::pod::PodRecord;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::comparator::{FeatureGates, GoTime};
use crate::policy::{ValidatedSignal, Writes};
use crate::signals::SignalSamples;
use rayon::prelude::*;
use selection::NsPod;

pub use blockers::{BlockedNode, Blocker};
pub use check::{Mismatch, MismatchReason, Verdict};
pub use correction::{ReplicaSetCorrection, ScaleInTarget};
pub use previous::PreviousValues;
pub use resolve::{default_value, NamedPolicy, ResolveError};
pub use snapshot::Snapshot;

/// Options that do not come from the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanOptions {
    /// Gates of the cluster's controller-manager.
    pub gates: FeatureGates,
    /// `now` for the comparator's log buckets (Unix ns; `None` = zero time).
    pub now: GoTime,
    /// Scale-down to predict victims for, per ReplicaSet.
    pub scale_down_by: Option<usize>,
    /// Predict on the snapshot as if every planned patch had landed (the
    /// offline `plan`), or on the pods as they are (the operator's check).
    pub assume_patches_applied: bool,
    /// The chunks the work is split into ([`Chunks::default`] everywhere but
    /// in tests, which make small plans span several).
    pub chunks: Chunks,
}

/// How many items each chunk of the planner's loops takes: a thread done
/// early takes over chunks of the other. The plan is the same for any sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks {
    /// Snapshot pods scanned per chunk, and selected pods per chunk of the
    /// name sort.
    pub select: usize,
    /// Selected pods costed per chunk.
    pub cost: usize,
}

impl Default for Chunks {
    /// [`SELECT_CHUNK`] and [`COST_CHUNK`].
    fn default() -> Self {
        Chunks {
            select: SELECT_CHUNK,
            cost: COST_CHUNK,
        }
    }
}

/// Snapshot pods scanned per chunk (and selected pods per chunk of the name
/// sort) in production. `tests/golden/main.rs` reads it to check that its
/// large clusters span several chunks.
pub const SELECT_CHUNK: usize = 8192;

/// Selected pods costed per chunk in production: big enough that a chunk's
/// shared strings are few, small enough that a thread done early can take
/// over part of the rest. `tests/golden/main.rs` reads it to check that its
/// large clusters span several chunks.
pub const COST_CHUNK: usize = 4096;

/// Who wrote a pod's current cost.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CostOwner {
    /// No cost annotation.
    None,
    /// This policy.
    Ours,
    /// Someone else (another policy, a person, another tool).
    Foreign(Option<String>),
    /// Karpenter's deletion-cost controller: the pod carries
    /// `karpenter.sh/managed-deletion-cost`, with or without a cost now.
    /// Never overwritten, whatever `respectForeignCosts` says: the two
    /// controllers would fight over the pod.
    Karpenter,
}

/// One signal's contribution to a pod's cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalValue {
    /// Signal kind.
    pub signal: &'static str,
    /// Value fed to the combination (`None` when missing and kept).
    pub value: Option<i64>,
    /// Readable input (class, raw utilisation, pods on node, zone); shared
    /// between the pods that have the same one.
    pub detail: Arc<str>,
    /// The signal had no usable reading for the pod: `value` is `None`
    /// (`keepLastValue`) or stands in for it (`skip`, `useDefault`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// What the plan does with a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "action", content = "detail")]
pub enum CostAction {
    /// The pod already carries the desired cost.
    Unchanged,
    /// Write this cost.
    Patch(i32),
    /// A cost someone else wrote; left alone (`respectForeignCosts`).
    KeepForeign,
    /// A cost Karpenter manages; always left alone.
    KeepKarpenter,
    /// A signal is missing and `onSignalMissing: keepLastValue`.
    KeepLastValue(String),
    /// The cost the policy wants, which `writes: OnScaleIn` does not write:
    /// nothing in the background, and this scale-in (if any) needs no
    /// write on the pod.
    NotWritten(i32),
}

/// `Unchanged` when the pod already carries `cost` as this policy wrote it,
/// else `Patch(cost)`.
pub(super) fn write_action(
    owner: &CostOwner,
    current_raw: Option<&str>,
    cost: i32,
    buf: &mut String,
) -> CostAction {
    if *owner == CostOwner::Ours && current_raw == Some(costing::decimal(buf, cost)) {
        CostAction::Unchanged
    } else {
        CostAction::Patch(cost)
    }
}

impl std::fmt::Display for CostAction {
    /// `unchanged`, `set 20`, `keep (not ours)`, `keep (Karpenter's)`,
    /// `keep (<why>)`, `not written (OnScaleIn)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CostAction::Unchanged => f.write_str("unchanged"),
            CostAction::Patch(c) => write!(f, "set {c}"),
            CostAction::KeepForeign => f.write_str("keep (not ours)"),
            CostAction::KeepKarpenter => f.write_str("keep (Karpenter's)"),
            CostAction::KeepLastValue(why) => write!(f, "keep ({why})"),
            CostAction::NotWritten(_) => f.write_str("not written (OnScaleIn)"),
        }
    }
}

/// The plan for one selected pod.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlan {
    /// Pod name (shared with its patch and its place in the predicted order).
    pub name: Arc<str>,
    /// Pod UID.
    pub uid: Arc<str>,
    /// `spec.nodeName` (shared by the pods of a node).
    pub node: Arc<str>,
    /// Controlling ReplicaSet, if any.
    pub replica_set: Option<Arc<str>>,
    /// Per-signal breakdown.
    pub signals: Vec<SignalValue>,
    /// Current annotation value as written (shared by the pods that carry it).
    pub current_raw: Option<Arc<str>>,
    /// Current cost as upstream parses it.
    pub current: i32,
    /// Who wrote the current value.
    pub owner: CostOwner,
    /// Cost the policy wants (`None` when it keeps the current one).
    pub desired: Option<i32>,
    /// What happens.
    pub action: CostAction,
    /// Its scale-down marker, when it carries one ([`marked`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marked: Option<marked::Marked>,
}

impl PodPlan {
    /// The cost this pod is meant to carry: desired, else the current one.
    pub fn intended(&self) -> i32 {
        self.desired.unwrap_or(self.current)
    }

    /// The wanted cost as the plan's views show it: `-` when the policy
    /// keeps the current one, and `(marked)` when its marker put the pod
    /// first.
    pub fn wanted_text(&self) -> String {
        let wanted = self
            .desired
            .map_or_else(|| "-".to_string(), |d| d.to_string());
        match self.marked {
            Some(m) if m.costed() => format!("{wanted} (marked)"),
            _ => wanted,
        }
    }
}

/// A cost to write on a pod (sent as a JSON merge patch).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostWrite {
    /// Pod namespace.
    pub namespace: Arc<str>,
    /// Pod name.
    pub pod: Arc<str>,
    /// Pod UID.
    pub uid: Arc<str>,
    /// Cost to write.
    pub cost: i32,
}

/// The order check for one ReplicaSet.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetPlan {
    /// ReplicaSet name (`(none)` for pods without one).
    pub name: String,
    /// Its controlling Deployment, if any.
    pub deployment: Option<String>,
    /// Pods in the order upstream deletes them.
    pub predicted: Vec<Arc<str>>,
    /// Intended cost of each pod in `predicted`.
    pub intended_costs: Vec<i32>,
    /// Cost upstream reads for each pod in `predicted`.
    pub live_costs: Vec<i32>,
    /// First `scale_down_by` pods upstream deletes.
    pub victims: Vec<Arc<str>>,
    /// Whether upstream's order matches the intended one.
    pub verdict: Verdict,
    /// Where and why it differs.
    pub mismatches: Vec<Mismatch>,
    /// Pods whose relative order upstream cannot settle (non-transitive comparator).
    pub ambiguous: Vec<Arc<str>>,
    /// The victim cut falls between pods upstream treats as equal.
    pub tie_at_cut: bool,
    /// Runs of pods upstream ranks equal, as position ranges in `predicted`
    /// (two pods or more each): their order is upstream's informer order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ties: Vec<std::ops::Range<usize>>,
    /// Number of related pods used for the colocation rank.
    pub related_pods: usize,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Policy namespace/name.
    pub policy: String,
    /// How the patches are written: `Continuous`, every change in the
    /// background; `OnScaleIn` ([`plan_as_written`] for such a policy), only
    /// what a scale-in by `scale_down_by` needs (its minimal correction).
    pub writes: Writes,
    /// Selected active pods, by name.
    pub pods: Vec<PodPlan>,
    /// Patches needed (only changed values): under `writes: OnScaleIn`,
    /// in a plan of [`plan_as_written`], those of the scale-in only.
    pub patches: Vec<CostWrite>,
    /// Order check per ReplicaSet.
    pub replica_sets: Vec<ReplicaSetPlan>,
    /// Signal values to remember for hysteresis.
    #[serde(skip)]
    pub values: PreviousValues,
    /// Selected pods left out because they are terminating or finished.
    pub inactive: Vec<String>,
    /// Things the user should know (missing nodes, missing ReplicaSets).
    pub warnings: Vec<String>,
    /// The nodes of the selected pods that no autoscaler may remove, and
    /// why, by node name: draining them frees nothing, so consolidation
    /// drains them last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_nodes: Vec<BlockedNode>,
    /// Set when `nodeConsolidation` has more nodes of one pod count than
    /// slots for them, so some nodes share a cost: the warning (also among
    /// `warnings`), which the policy's status repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crowded_node_order: Option<String>,
    /// What the scale-down is worth against upstream's own choice (`plan
    /// --prices`); the planner leaves it empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<savings::Savings>,
}

fn pod_rs(pod: &PodRecord) -> Option<&OwnerReference> {
    controller_of_kind(pod.owner_references(), "ReplicaSet")
}

/// `spec.nodeName`, empty when unassigned.
fn node_of(p: &PodRecord) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Names of the active pods a policy selects in a snapshot.
pub fn selected_pods(policy: &NamedPolicy, snapshot: &Snapshot) -> BTreeSet<String> {
    selected_in_chunks(policy, snapshot, SELECT_CHUNK)
}

/// [`selected_pods`], scanning chunks of `chunk` pods.
fn selected_in_chunks(policy: &NamedPolicy, snapshot: &Snapshot, chunk: usize) -> BTreeSet<String> {
    let ns_rs = namespace_replica_sets(policy, snapshot);
    let selection = selection::select(
        policy,
        &snapshot.pods,
        &snapshot.nodes,
        &ns_rs,
        &BTreeSet::new(),
        false,
        Split {
            parallel: parallel_from(snapshot.pods.len(), 2 * PARALLEL_FROM),
            chunk,
        },
    );
    selection
        .active
        .iter()
        .filter_map(|&i| selection.pods[i as usize].pod.identity.name.clone())
        .collect()
}

/// The ReplicaSets of the policy's namespace.
fn namespace_replica_sets<'a>(policy: &NamedPolicy, snapshot: &'a Snapshot) -> Vec<&'a ReplicaSet> {
    snapshot
        .replica_sets
        .iter()
        .filter(|r| r.metadata.namespace.as_deref().unwrap_or("") == policy.namespace)
        .collect()
}

/// `a()` and `b()`: side by side on the thread pool when `parallel` (where
/// a thread that is done helps with the other's parallel loops), else one
/// after the other. The results are the same either way.
fn both<A: Send, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if parallel {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

/// `f` over each item of `items` (with its index), results in order: on the
/// thread pool when `parallel`, else on the calling thread.
fn map_in_order<T: Sync, R: Send>(
    parallel: bool,
    items: &[T],
    f: impl Fn(usize, &T) -> R + Sync + Send,
) -> Vec<R> {
    if parallel {
        items.par_iter().enumerate().map(|(i, x)| f(i, x)).collect()
    } else {
        items.iter().enumerate().map(|(i, x)| f(i, x)).collect()
    }
}

/// How a loop over many items is split: in chunks of `chunk` items, on the
/// thread pool when `parallel`, else on the calling thread.
#[derive(Debug, Clone, Copy)]
struct Split {
    parallel: bool,
    chunk: usize,
}

/// `f` over `items` in chunks of `size`, results in chunk order: on the
/// thread pool when `parallel`, else on the calling thread.
fn map_chunks<'t, T: Sync, R: Send>(
    parallel: bool,
    items: &'t [T],
    size: usize,
    f: impl Fn(&'t [T]) -> R + Sync + Send,
) -> Vec<R> {
    if parallel {
        items.par_chunks(size).map(f).collect()
    } else {
        items.chunks(size).map(f).collect()
    }
}

/// From this many pods in the namespace, costing and keying run side by side
/// on the thread pool, each over chunks the other thread can take over; from
/// twice as many in the snapshot, so do the scan and the name sort. Small
/// plans stay on the calling thread. Both paths run the same functions over
/// the same chunks, so plans do not depend on it. `tests/golden/main.rs`
/// reads it to check that its clusters cross it.
pub const PARALLEL_FROM: usize = 1000;

/// Whether work over `pods` pods goes to the thread pool: from `from` pods,
/// unless a test forced one path (`FORCE_PARALLEL`, in test builds only).
fn parallel_from(pods: usize, from: usize) -> bool {
    #[cfg(test)]
    if let Some(forced) = FORCE_PARALLEL.with(std::cell::Cell::get) {
        return forced;
    }
    pods >= from
}

#[cfg(test)]
thread_local! {
    /// Tests: `Some(parallel)` makes every plan on this thread take that
    /// path whatever its size, so both can be compared on the same input.
    static FORCE_PARALLEL: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Plans one policy over a snapshot.
pub fn plan(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
) -> Plan {
    plan_excluding(policy, snapshot, samples, previous, opts, &BTreeSet::new())
}

/// Plans one policy, leaving out pods another policy has won (`excluded`):
/// they are neither costed nor patched, but still ordered with their
/// ReplicaSet. The patches are every cost the policy wants changed, whatever
/// its `spec.writes` (the operator sends them as that says);
/// [`plan_as_written`] shows what the policy itself writes.
pub fn plan_excluding(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
) -> Plan {
    plan_for(
        policy,
        snapshot,
        samples,
        previous,
        opts,
        excluded,
        None,
        Writes::Continuous,
    )
    .0
}

/// [`plan_excluding`] as the policy writes: under `writes: Continuous` the
/// same plan; under `OnScaleIn` nothing is written in the background, so
/// the pods keep the costs they carry ([`CostAction::NotWritten`]), and with
/// `opts.scale_down_by` N each ReplicaSet's minimal correction for a
/// scale-in by N is what is patched, and the order is predicted with it.
pub fn plan_as_written(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
) -> Plan {
    plan_for(
        policy,
        snapshot,
        samples,
        previous,
        opts,
        excluded,
        None,
        policy.spec.writes,
    )
    .0
}

/// [`plan_excluding`] for a scale-in: also the minimal correction of each
/// ReplicaSet it scales ([`correction`]), over the live costs.
pub fn plan_scale_in(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
    target: &ScaleInTarget,
) -> (Plan, Vec<ReplicaSetCorrection>) {
    plan_for(
        policy,
        snapshot,
        samples,
        previous,
        opts,
        excluded,
        Some(target),
        Writes::Continuous,
    )
}

/// The plan and the corrections of `scale_in`; `written` says which
/// patches the plan holds: every change (`Continuous`), or only what a
/// scale-in by `opts.scale_down_by` writes (`OnScaleIn`).
#[allow(clippy::too_many_arguments)]
fn plan_for(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
    scale_in: Option<&ScaleInTarget>,
    written: Writes,
) -> (Plan, Vec<ReplicaSetCorrection>) {
    let ns = policy.namespace.as_str();
    let mut warnings = Vec::new();
    let ns_rs = namespace_replica_sets(policy, snapshot);
    // only a consolidation signal reads how busy each node is
    let count_nodes = policy
        .spec
        .signals
        .iter()
        .any(|s| matches!(s, ValidatedSignal::NodeConsolidation(_)));
    let mut selection = selection::select(
        policy,
        &snapshot.pods,
        &snapshot.nodes,
        &ns_rs,
        excluded,
        count_nodes,
        Split {
            parallel: parallel_from(snapshot.pods.len(), 2 * PARALLEL_FROM),
            chunk: opts.chunks.select,
        },
    );
    let by_name = std::mem::take(&mut selection.active);
    let inactive = std::mem::take(&mut selection.inactive);
    let pods: Vec<&NsPod> = by_name
        .iter()
        .map(|&i| &selection.pods[i as usize])
        .collect();
    let blocked_nodes = blocked_nodes_of(&pods, &selection.nodes.blocked);

    // Costing the pods and keying their ReplicaSets for the comparator are
    // independent: on a large namespace they run side by side.
    let parallel = parallel_from(selection.pods.len(), PARALLEL_FROM);
    let ((keyed, rs_warnings), (costed, cost_warnings)) = both(
        parallel,
        || prediction::key_replica_sets(&by_name, &selection, &ns_rs, opts.now, parallel),
        || {
            costing::cost_pods(
                policy,
                &pods,
                &selection,
                &snapshot.nodes,
                samples,
                previous,
                Split {
                    parallel,
                    chunk: opts.chunks.cost,
                },
            )
        },
    );
    let crowded_node_order = costed.crowded.clone();
    warnings.extend(cost_warnings);
    warnings.extend(rs_warnings);
    let mut costed = costed;
    let on_scale_in = written == Writes::OnScaleIn;
    let own_target;
    let scale_in = match (on_scale_in, opts.scale_down_by) {
        (true, Some(by)) => {
            own_target = on_scale_in::target(&ns_rs, by);
            Some(&own_target)
        }
        (true, None) => None,
        (false, _) => scale_in,
    };
    if on_scale_in {
        on_scale_in::nothing_in_the_background(&mut costed.plans, &mut costed.patches);
    }
    let (replica_sets, corrections) =
        prediction::check_replica_sets(keyed, &costed.plans, opts, scale_in, on_scale_in);
    if on_scale_in {
        warnings.extend(on_scale_in::written_at_the_scale_in(
            &policy.namespace,
            &corrections,
            &mut costed.plans,
            &mut costed.patches,
        ));
    }
    warnings.extend(apart::warnings(
        policy,
        &pods,
        &selection.nodes,
        &snapshot.nodes,
        &replica_sets,
        opts.scale_down_by,
    ));
    let plan = Plan {
        policy: format!("{ns}/{}", policy.name),
        writes: written,
        pods: costed.plans,
        patches: costed.patches,
        replica_sets,
        values: costed.values,
        inactive,
        warnings,
        blocked_nodes,
        crowded_node_order,
        savings: None,
    };
    (plan, corrections)
}

/// The blocked nodes `pods` run on, by name.
fn blocked_nodes_of(
    pods: &[&NsPod],
    blocked: &foldhash::HashMap<u32, BlockedNode>,
) -> Vec<BlockedNode> {
    if blocked.is_empty() {
        return Vec::new();
    }
    let slots: BTreeSet<u32> = pods
        .iter()
        .map(|p| p.node)
        .filter(|s| blocked.contains_key(s))
        .collect();
    let mut out: Vec<BlockedNode> = slots.iter().map(|s| blocked[s].clone()).collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

#[cfg(test)]
mod tests;
