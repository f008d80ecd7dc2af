//! The planner: pure. Given a policy, a cluster snapshot, signal samples and
//! `now`, it returns each pod's desired cost and its breakdown, the patches
//! needed, and per ReplicaSet the order upstream will use with the check
//! against the order the policy intends. It never talks to the API.

pub mod check;
pub mod previous;
pub mod resolve;
pub mod snapshot;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

// Seeded hashing, several times faster than std's SipHash on short keys such
// as pod and node names; maps here are only looked up, never iterated, so
// their order cannot leak into a plan.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::comparator::{
    is_pod_active, parse_deletion_cost, rank_pods, Comparator, FeatureGates, GoTime, OrderedPods,
    ParsedCost, PodKey, PodsOnNode, POD_DELETION_COST,
};
use crate::policy::validate::{BillingSource, Target};
use crate::policy::{
    BillingPreset, LabelSelector, LabelSelectorRequirement, OnSignalMissing, TargetKind,
    ValidatedSignal,
};
use crate::signals::billing::billing_class;
use crate::signals::utilization::quantize;
use crate::signals::{Sample, SignalSamples};

pub use check::{Mismatch, MismatchReason, Verdict};
pub use previous::PreviousValues;
pub use resolve::{default_value, ResolveError, ResolvedPolicy};
pub use snapshot::Snapshot;

/// Annotation marking a cost as written by a policy (its value: the policy name).
pub const POLICY_ANNOTATION: &str = "deletioncost.dev/policy";

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
}

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
}

/// What the plan does with a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "action", content = "detail")]
pub enum Action {
    /// The pod already carries the desired cost.
    Unchanged,
    /// Write this cost.
    Patch(i32),
    /// A cost someone else wrote; left alone (`respectForeignCosts`).
    KeepForeign,
    /// A signal is missing and `onSignalMissing: keepLastValue`.
    KeepLastValue(String),
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
    /// Current annotation value as written.
    pub current_raw: Option<String>,
    /// Current cost as upstream parses it.
    pub current: i32,
    /// Who wrote the current value.
    pub owner: CostOwner,
    /// Cost the policy wants (`None` when it keeps the current one).
    pub desired: Option<i32>,
    /// What happens.
    pub action: Action,
}

impl PodPlan {
    /// The cost this pod is meant to carry: desired, else the current one.
    pub fn intended(&self) -> i32 {
        self.desired.unwrap_or(self.current)
    }
}

/// A patch to send.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
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
    /// Number of related pods used for the colocation rank.
    pub related_pods: usize,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Policy namespace/name.
    pub policy: String,
    /// Selected active pods, by name.
    pub pods: Vec<PodPlan>,
    /// Patches needed (only changed values).
    pub patches: Vec<Patch>,
    /// Order check per ReplicaSet.
    pub replica_sets: Vec<ReplicaSetPlan>,
    /// Signal values to remember for hysteresis.
    #[serde(skip)]
    pub values: PreviousValues,
    /// Selected pods left out because they are terminating or finished.
    pub inactive: Vec<String>,
    /// Things the user should know (missing nodes, missing ReplicaSets).
    pub warnings: Vec<String>,
}

fn controller_of(refs: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

fn pod_rs(pod: &Pod) -> Option<&OwnerReference> {
    controller_of(pod.metadata.owner_references.as_ref()).filter(|r| r.kind == "ReplicaSet")
}

/// Converts an apps/v1 selector to ours for matching.
fn to_selector(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> LabelSelector {
    LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|r| LabelSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// Which pods of the namespace the policy selects (active or not).
fn selected<'a>(
    policy: &ResolvedPolicy,
    ns_pods: &[&'a Pod],
    replica_sets: &[&ReplicaSet],
) -> Vec<&'a Pod> {
    match &policy.spec.target {
        Target::Selector(sel) => ns_pods
            .iter()
            .copied()
            .filter(|p| sel.matches(p.metadata.labels.as_ref()))
            .collect(),
        Target::Workload(t) if t.kind == TargetKind::ReplicaSet => ns_pods
            .iter()
            .copied()
            .filter(|p| pod_rs(p).is_some_and(|r| r.name == t.name))
            .collect(),
        Target::Workload(t) => {
            let name = &t.name;
            let rs_names: BTreeSet<&str> = replica_sets
                .iter()
                .filter(|rs| {
                    controller_of(rs.metadata.owner_references.as_ref())
                        .is_some_and(|o| o.kind == "Deployment" && &o.name == name)
                })
                .filter_map(|rs| rs.metadata.name.as_deref())
                .collect();
            ns_pods
                .iter()
                .copied()
                .filter(|p| pod_rs(p).is_some_and(|r| rs_names.contains(r.name.as_str())))
                .collect()
        }
    }
}

/// Upstream's related pods for the ReplicaSets controlled by `owner`: every
/// pod in the namespace selected by one of them (deduplicated by UID). The
/// same for every ReplicaSet of that controller, so callers compute it once.
fn related_pods<'a>(
    owner: &OwnerReference,
    replica_sets: &[&ReplicaSet],
    ns_pods: &[&'a Pod],
) -> Vec<&'a Pod> {
    let selectors = sibling_selectors(owner, replica_sets);
    // each pod's labels read once for all siblings
    let mut seen: HashSet<&str> = HashSet::with_capacity(ns_pods.len());
    let mut out = Vec::new();
    for p in ns_pods {
        let labels = p.metadata.labels.as_ref();
        if selectors.iter().any(|s| s.matches(labels)) {
            if !seen.insert(p.metadata.uid.as_deref().unwrap_or("")) {
                // Two pods share a UID (possible in a file): which one counts
                // depends on upstream's sibling-by-sibling order.
                return related_pods_by_sibling(&selectors, ns_pods);
            }
            out.push(*p);
        }
    }
    out
}

/// Selectors of the ReplicaSets controlled by `owner`, in snapshot order;
/// upstream skips a sibling whose selector does not parse.
fn sibling_selectors(owner: &OwnerReference, replica_sets: &[&ReplicaSet]) -> Vec<LabelSelector> {
    replica_sets
        .iter()
        .filter(|r| {
            controller_of(r.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == owner.uid)
        })
        .map(|r| to_selector(&r.spec.selector))
        .filter(|sel| sel.check().is_ok())
        .collect()
}

/// Related pods exactly as upstream lists them: sibling by sibling, each
/// UID kept the first time it is seen.
fn related_pods_by_sibling<'a>(selectors: &[LabelSelector], ns_pods: &[&'a Pod]) -> Vec<&'a Pod> {
    let mut seen: HashSet<&str> = HashSet::with_capacity(ns_pods.len());
    let mut out = Vec::new();
    for sel in selectors {
        for p in ns_pods {
            if sel.matches(p.metadata.labels.as_ref())
                && seen.insert(p.metadata.uid.as_deref().unwrap_or(""))
            {
                out.push(*p);
            }
        }
    }
    out
}

fn creation_ns(p: &Pod) -> i128 {
    p.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_nanosecond())
        .unwrap_or(i128::MIN)
}

/// `args` written into `buf`, which is reused to avoid an allocation per pod.
fn formatted<'b>(buf: &'b mut String, args: std::fmt::Arguments) -> &'b str {
    use std::fmt::Write;
    buf.clear();
    // writing to a String cannot fail
    let _ = buf.write_fmt(args);
    buf
}

/// `n` in decimal, written into `buf`.
fn decimal(buf: &mut String, n: i32) -> &str {
    formatted(buf, format_args!("{n}"))
}

/// `spec.nodeName`, empty when unassigned.
fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Names of the active pods a policy selects in a snapshot.
pub fn selected_pods(policy: &ResolvedPolicy, snapshot: &Snapshot) -> BTreeSet<String> {
    let ns_rs = namespace_replica_sets(policy, snapshot);
    selection(policy, &snapshot.pods, &ns_rs, &BTreeSet::new())
        .active
        .into_iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// The ReplicaSets of the policy's namespace.
fn namespace_replica_sets<'a>(
    policy: &ResolvedPolicy,
    snapshot: &'a Snapshot,
) -> Vec<&'a ReplicaSet> {
    snapshot
        .replica_sets
        .iter()
        .filter(|r| r.metadata.namespace.as_deref().unwrap_or("") == policy.namespace)
        .collect()
}

/// `a()` and `b()`: on two threads when `parallel`, else one after the
/// other. The results are the same either way.
fn both<A: Send, B>(parallel: bool, a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B) -> (A, B) {
    if !parallel {
        return (a(), b());
    }
    std::thread::scope(|s| {
        let other = s.spawn(a);
        let mine = b();
        match other.join() {
            Ok(theirs) => (theirs, mine),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Plans one policy over a snapshot.
pub fn plan(
    policy: &ResolvedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
) -> Plan {
    plan_excluding(policy, snapshot, samples, previous, opts, &BTreeSet::new())
}

/// Plans one policy, leaving out pods another policy has won (`excluded`):
/// they are neither costed nor patched, but still ordered with their ReplicaSet.
pub fn plan_excluding(
    policy: &ResolvedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
) -> Plan {
    let ns = policy.namespace.as_str();
    let mut warnings = Vec::new();
    let ns_rs = namespace_replica_sets(policy, snapshot);
    // the two halves of the snapshot, each on its own thread when large
    let (first, second) = snapshot.pods.split_at(snapshot.pods.len() / 2);
    let (rest, mut whole) = both(
        snapshot.pods.len() >= 2 * PARALLEL_FROM,
        || selection(policy, second, &ns_rs, excluded),
        || selection(policy, first, &ns_rs, excluded),
    );
    whole.append(rest);
    let Selection {
        ns_pods,
        active,
        inactive,
    } = whole;
    let pods = sorted_by_name(active);

    // Costing the pods and keying their ReplicaSets for the comparator are
    // independent: on a large namespace they run side by side.
    let ((keyed, rs_warnings), (costed, cost_warnings)) = both(
        ns_pods.len() >= PARALLEL_FROM,
        || key_replica_sets(&pods, &ns_pods, &ns_rs, opts.now),
        || cost_pods(policy, &pods, snapshot, samples, previous),
    );
    warnings.extend(cost_warnings);
    warnings.extend(rs_warnings);
    let replica_sets = check_replica_sets(policy, keyed, &costed.plans, opts);
    Plan {
        policy: format!("{ns}/{}", policy.name),
        pods: costed.plans,
        patches: costed.patches,
        replica_sets,
        values: costed.values,
        inactive,
        warnings,
    }
}

/// The pods of a policy's namespace, in snapshot order, and which of them it
/// plans for.
struct Selection<'a> {
    /// Every pod of the namespace.
    ns_pods: Vec<&'a Pod>,
    /// Selected active pods, not excluded.
    active: Vec<&'a Pod>,
    /// Names of the selected pods left out as terminating or finished.
    inactive: Vec<String>,
}

impl<'a> Selection<'a> {
    /// Adds the selection over the pods that follow.
    fn append(&mut self, rest: Selection<'a>) {
        self.ns_pods.extend(rest.ns_pods);
        self.active.extend(rest.active);
        self.inactive.extend(rest.inactive);
    }
}

/// The pods of `pods` in the policy's namespace, and those it selects.
fn selection<'a>(
    policy: &ResolvedPolicy,
    pods: &'a [Pod],
    ns_rs: &[&ReplicaSet],
    excluded: &BTreeSet<String>,
) -> Selection<'a> {
    let ns = policy.namespace.as_str();
    let ns_pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or("") == ns)
        .collect();
    let mut active = Vec::new();
    let mut inactive = Vec::new();
    for p in selected(policy, &ns_pods, ns_rs) {
        if excluded.contains(p.metadata.name.as_deref().unwrap_or("")) {
            continue;
        }
        if is_pod_active(p) {
            active.push(p);
        } else if let Some(name) = &p.metadata.name {
            inactive.push(name.clone());
        }
    }
    Selection {
        ns_pods,
        active,
        inactive,
    }
}

/// From this many pods in the namespace, costing and keying run on two
/// threads, and from twice as many in the snapshot, so does selection; small
/// plans stay on the calling thread. Both threads run the same functions as
/// the single-threaded path, so plans do not depend on it.
const PARALLEL_FROM: usize = 1000;

/// Each selected pod's plan, the patches and the values to remember.
struct Costed {
    plans: Vec<PodPlan>,
    patches: Vec<Patch>,
    values: PreviousValues,
}

/// Costs the selected pods (`pods`, sorted by name) with every signal;
/// returns the plans and the warnings the costing raised.
fn cost_pods(
    policy: &ResolvedPolicy,
    pods: &[&Pod],
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
) -> (Costed, Vec<String>) {
    let mut warnings = Vec::new();
    let nodes: HashMap<&str, &Node> = snapshot
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n)))
        .collect();

    let pod_nodes = PodNodes::new(pods, &nodes, &snapshot.pods);
    let missing_nodes: BTreeSet<&str> = pod_nodes
        .names
        .iter()
        .zip(&pod_nodes.node)
        .filter(|(n, node)| !n.is_empty() && node.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !missing_nodes.is_empty() {
        warnings.push(format!(
            "nodes not in the snapshot (their labels read as empty): {}",
            missing_nodes.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }

    let mut signal_values: Vec<Vec<(Option<i64>, Arc<str>)>> = policy
        .spec
        .signals
        .iter()
        .enumerate()
        .map(|(idx, spec)| evaluate_signal(idx, spec, pods, &pod_nodes, samples, previous))
        .collect();

    // pods are sorted by name: collected in order, the values are built in bulk
    let mut kept_values: Vec<(Arc<str>, usize, i64)> = Vec::new();
    let mut plans = Vec::with_capacity(pods.len());
    // strings many pods share, allocated once
    let namespace: Arc<str> = policy.namespace.as_str().into();
    let node_names: Vec<Arc<str>> = pod_nodes.names.iter().map(|n| Arc::from(*n)).collect();
    let mut rs_names: HashMap<&str, Arc<str>> = HashMap::new();
    let mut patches = Vec::new();
    // per-pod scratch buffers, reused
    let mut combined = Vec::with_capacity(policy.spec.signals.len());
    let mut desired_text = String::new();
    for (i, pod) in pods.iter().enumerate() {
        let name: Arc<str> = pod.metadata.name.as_deref().unwrap_or("").into();
        let uid: Arc<str> = pod.metadata.uid.as_deref().unwrap_or("").into();
        let annotations = pod.metadata.annotations.as_ref();
        let current_raw = annotations.and_then(|a| a.get(POD_DELETION_COST)).cloned();
        let current = parse_deletion_cost(current_raw.as_deref().unwrap_or("0")).value;
        let writer = annotations.and_then(|a| a.get(POLICY_ANNOTATION));
        let owner = match (&current_raw, writer) {
            (None, _) => CostOwner::None,
            (Some(_), Some(w)) if *w == policy.name => CostOwner::Ours,
            (Some(_), w) => CostOwner::Foreign(w.cloned()),
        };
        let mut breakdown = Vec::with_capacity(policy.spec.signals.len());
        combined.clear();
        let mut missing: Option<String> = None;
        for (idx, spec) in policy.spec.signals.iter().enumerate() {
            // each value is read once: move its detail out instead of cloning
            let (v, detail) = std::mem::take(&mut signal_values[idx][i]);
            let v = match v {
                Some(v) => Some(v),
                None => match policy.spec.on_signal_missing {
                    OnSignalMissing::KeepLastValue => {
                        missing.get_or_insert_with(|| format!("{}: {detail}", spec.kind_name()));
                        None
                    }
                    OnSignalMissing::Skip => Some(spec.value_range().0),
                    OnSignalMissing::UseDefault => Some(default_value(spec)),
                },
            };
            if let Some(v) = v {
                // only utilisation reads its last value back
                if matches!(spec, ValidatedSignal::Utilization(_)) {
                    kept_values.push((name.clone(), idx, v));
                }
                combined.push(v);
            }
            breakdown.push(SignalValue {
                signal: spec.kind_name(),
                value: v,
                detail,
            });
        }
        let desired = missing.is_none().then(|| policy.spec.combine(&combined));
        let action = match (&owner, desired) {
            (CostOwner::Foreign(_), _) if policy.spec.respect_foreign_costs => Action::KeepForeign,
            (_, None) => Action::KeepLastValue(missing.clone().unwrap_or_default()),
            (CostOwner::Ours, Some(d))
                if current_raw.as_deref() == Some(decimal(&mut desired_text, d)) =>
            {
                Action::Unchanged
            }
            (_, Some(d)) => Action::Patch(d),
        };
        if let Action::Patch(cost) = action {
            patches.push(Patch {
                namespace: namespace.clone(),
                pod: name.clone(),
                uid: uid.clone(),
                cost,
            });
        }
        let node = node_names[pod_nodes.slot[i] as usize].clone();
        let replica_set = pod_rs(pod).map(|r| {
            rs_names
                .entry(r.name.as_str())
                .or_insert_with_key(|n| (*n).into())
                .clone()
        });
        plans.push(PodPlan {
            name,
            uid,
            node,
            replica_set,
            signals: breakdown,
            current_raw,
            current,
            owner,
            desired: if matches!(action, Action::KeepForeign) {
                None
            } else {
                desired
            },
            action,
        });
    }

    // pods sharing a name (invalid, but possible in a file): the last one's values win
    let values: PreviousValues = kept_values.into_iter().collect();
    (
        Costed {
            plans,
            patches,
            values,
        },
        warnings,
    )
}

/// Pods sorted by name, stably. Each name is read once into a key of its 16
/// bytes after the prefix all names share, so most comparisons are one
/// integer compare instead of two reads of names scattered over the heap.
fn sorted_by_name<'a>(pods: Vec<&'a Pod>) -> Vec<&'a Pod> {
    let name = |p: &'a Pod| p.metadata.name.as_deref().unwrap_or("");
    let first = pods.first().map_or("", |p| name(p)).as_bytes();
    let mut common = first.len();
    for p in &pods {
        let n = name(p).as_bytes();
        common = common.min(n.iter().zip(first).take_while(|(a, b)| a == b).count());
    }
    let mut keyed: Vec<(u128, &str, &Pod)> = pods
        .into_iter()
        .map(|p| {
            let n = name(p);
            let mut window = [0u8; 16];
            let tail = &n.as_bytes()[common..];
            let len = tail.len().min(16);
            window[..len].copy_from_slice(&tail[..len]);
            // zero-padded big-endian bytes order as the bytes do, except that
            // a name ending inside the window ties with one that goes on with
            // NULs; the full compare settles every tie
            (u128::from_be_bytes(window), n, p)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    keyed.into_iter().map(|(_, _, p)| p).collect()
}

/// The value under `name` in (name, value) pairs iterated in name order, for
/// names asked in ascending order (repeats allowed): a merge join, no lookup
/// per name.
fn seek<K: AsRef<str>, V: Copy>(
    it: &mut std::iter::Peekable<impl Iterator<Item = (K, V)>>,
    name: &str,
) -> Option<V> {
    // one comparison per step: each key's bytes are read once
    while let Some((k, v)) = it.peek() {
        match k.as_ref().cmp(name) {
            std::cmp::Ordering::Less => {
                it.next();
            }
            std::cmp::Ordering::Equal => return Some(*v),
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

/// The nodes of the selected pods, each looked up once: the signals read a
/// pod's node through its slot instead of hashing its name again.
struct PodNodes<'a> {
    /// Slot of each pod's node (pods in plan order).
    slot: Vec<u32>,
    /// Node name per slot (empty: unscheduled).
    names: Vec<&'a str>,
    /// The node per slot, when the snapshot has it.
    node: Vec<Option<&'a Node>>,
    /// Active pods of the whole snapshot on each slot's node.
    pods_on: Vec<i64>,
}

impl<'a> PodNodes<'a> {
    fn new(pods: &[&'a Pod], nodes: &HashMap<&'a str, &'a Node>, all: &'a [Pod]) -> Self {
        let mut slot_of: HashMap<&str, u32> = HashMap::with_capacity(nodes.len() + 1);
        let mut names = Vec::new();
        let slot = pods
            .iter()
            .map(|p| {
                let n = node_of(p);
                *slot_of.entry(n).or_insert_with(|| {
                    names.push(n);
                    (names.len() - 1) as u32
                })
            })
            .collect();
        let node = names.iter().map(|n| nodes.get(n).copied()).collect();
        let mut pods_on = vec![0; names.len()];
        for p in all.iter().filter(|p| is_pod_active(p)) {
            let n = node_of(p);
            if !n.is_empty() {
                if let Some(&s) = slot_of.get(n) {
                    pods_on[s as usize] += 1;
                }
            }
        }
        Self {
            slot,
            names,
            node,
            pods_on,
        }
    }
}

/// Values of one signal for every pod, with a readable detail.
fn evaluate_signal(
    idx: usize,
    spec: &ValidatedSignal,
    pods: &[&Pod],
    pod_nodes: &PodNodes,
    samples: &SignalSamples,
    previous: &PreviousValues,
) -> Vec<(Option<i64>, Arc<str>)> {
    fn name(p: &Pod) -> &str {
        p.metadata.name.as_deref().unwrap_or("")
    }
    match spec {
        ValidatedSignal::BillingClass(b) => {
            let (label, preset) = match &b.source {
                BillingSource::NodeLabel(l) => (Some(l.as_str()), BillingPreset::Auto),
                BillingSource::Preset(p) => (None, *p),
            };
            // a node's class is the same for all its pods: derive it once per node
            let by_slot: Vec<Option<String>> = pod_nodes
                .node
                .iter()
                .map(|n| billing_class(n.and_then(|n| n.metadata.labels.as_ref()), label, preset))
                .collect();
            let classes: Vec<Option<&str>> = pod_nodes
                .slot
                .iter()
                .map(|&s| by_slot[s as usize].as_deref())
                .collect();
            // over a class budget: the newest pods beyond it go first
            let mut over = vec![false; pods.len()];
            // creation times read once, not twice per comparison
            let created: Vec<i128> = if b.budgets.is_empty() {
                Vec::new()
            } else {
                pods.iter().map(|p| creation_ns(p)).collect()
            };
            for (class, budget) in &b.budgets {
                let mut on: Vec<usize> = (0..pods.len())
                    .filter(|&i| classes[i] == Some(class.as_str()))
                    .collect();
                let excess = on.len().saturating_sub(*budget as usize);
                if excess == 0 {
                    continue;
                }
                on.sort_by(|&a, &b| {
                    created[b]
                        .cmp(&created[a])
                        .then_with(|| pods[b].metadata.name.cmp(&pods[a].metadata.name))
                });
                for i in on.into_iter().take(excess) {
                    over[i] = true;
                }
            }
            let lo = b.over_budget_value().unwrap_or(spec.value_range().0);
            // one detail per (class, over budget), shared by its pods
            let mut details: HashMap<(Option<&str>, bool), Arc<str>> = HashMap::new();
            (0..pods.len())
                .map(|i| {
                    let class = classes[i];
                    let detail = details
                        .entry((class, over[i]))
                        .or_insert_with(|| {
                            let shown = class.unwrap_or("(none)");
                            if over[i] {
                                format!("{shown} (over budget)").into()
                            } else {
                                shown.into()
                            }
                        })
                        .clone();
                    let v = if over[i] {
                        lo
                    } else {
                        i64::from(b.cost_of(class))
                    };
                    (Some(v), detail)
                })
                .collect()
        }
        ValidatedSignal::Utilization(u) => {
            // pods are sorted by name, as both maps are: walked side by side
            // instead of one lookup per pod
            let mut by_pod = samples
                .utilization
                .get(&idx)
                .map(|s| s.by_pod.iter().peekable());
            let mut prev_values = previous
                .iter()
                .filter(|(_, signal, _)| *signal == idx)
                .map(|(pod, _, v)| (pod, v))
                .peekable();
            let no_sample: Arc<str> = "no sample".into();
            // formatted into one buffer: one allocation per detail, not two
            let mut text = String::new();
            pods.iter()
                .map(|p| {
                    let n = name(p);
                    let prev = seek(&mut prev_values, n).and_then(|v| u32::try_from(v).ok());
                    let q = |v: f64| {
                        i64::from(quantize(
                            v,
                            u.range.min,
                            u.range.max,
                            u.buckets,
                            prev,
                            u.hysteresis,
                        ))
                    };
                    match by_pod.as_mut().and_then(|m| seek(m, n)) {
                        Some(Sample::Value(v)) => (
                            Some(q(*v)),
                            Arc::from(formatted(&mut text, format_args!("{v:.3}"))),
                        ),
                        Some(Sample::Unusable(problem)) => (None, problem.to_string().into()),
                        None => (None, no_sample.clone()),
                    }
                })
                .collect()
        }
        ValidatedSignal::NodeConsolidation(c) => {
            // the detail depends only on the count: formatted once per count
            let mut details: HashMap<i64, Arc<str>> = HashMap::new();
            pod_nodes
                .slot
                .iter()
                .map(|&s| {
                    let count = pod_nodes.pods_on[s as usize];
                    let detail = details
                        .entry(count)
                        .or_insert_with(|| format!("{count} pods on node").into());
                    (Some(count.min(i64::from(c.max_pods))), detail.clone())
                })
                .collect()
        }
        ValidatedSignal::ZoneBalance(z) => {
            // a node's zone is the same for all its pods: read once per node
            let zone_of: Vec<&str> = pod_nodes
                .node
                .iter()
                .map(|n| {
                    n.and_then(|n| n.metadata.labels.as_ref())
                        .and_then(|l| l.get(&z.topology_key))
                        .map_or("", String::as_str)
                })
                .collect();
            let mut per_zone: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (i, &s) in pod_nodes.slot.iter().enumerate() {
                per_zone.entry(zone_of[s as usize]).or_default().push(i);
            }
            let fullest = per_zone.values().map(Vec::len).max().unwrap_or(0) as i64;
            let mut out = vec![(None, Arc::<str>::default()); pods.len()];
            for (zone, members) in &per_zone {
                // i-th pod of a zone with c pods sits at i + (fullest - c): zones
                // lose pods round-robin from the fullest down
                let c = members.len() as i64;
                let detail: Arc<str> = format!(
                    "{} ({c} pods)",
                    if zone.is_empty() { "(none)" } else { zone }
                )
                .into();
                for (pos, &i) in members.iter().enumerate() {
                    let v = (pos as i64 + fullest - c).min(i64::from(z.max_per_zone));
                    out[i] = (Some(v), detail.clone());
                }
            }
            out
        }
    }
}

/// One ReplicaSet's pods keyed for the comparator, before their costs are
/// final: everything the order needs that does not depend on the plans, so
/// it can be built while the pods are being costed.
struct KeyedReplicaSet<'a> {
    /// ReplicaSet name (`None`: selected pods without one).
    name: Option<&'a str>,
    /// Its controlling Deployment.
    deployment: Option<String>,
    /// Keys of the active pods it owns, with their colocation ranks; each
    /// key's cost is the live one.
    keys: Vec<PodKey<'a>>,
    /// For each key, the index of its pod among the selected pods.
    selected: Vec<Option<u32>>,
    /// Related pods behind the colocation ranks.
    related_pods: usize,
}

/// Groups the selected pods (`pods`, in plan order) by ReplicaSet and keys
/// every active pod each one owns, with the colocation ranks upstream gives
/// them. Returns the groups in name order and the warnings they raise.
fn key_replica_sets<'a>(
    pods: &[&'a Pod],
    ns_pods: &[&'a Pod],
    ns_rs: &[&'a ReplicaSet],
    now: GoTime,
) -> (Vec<KeyedReplicaSet<'a>>, Vec<String>) {
    let mut warnings = Vec::new();
    // selected pods are found by address, not name: both sides point into
    // the same snapshot, and a pointer hashes faster than a name
    let mut index_of: HashMap<*const Pod, u32> = HashMap::with_capacity(pods.len());
    let mut groups: BTreeMap<Option<&str>, Vec<&Pod>> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        index_of.insert(*p as *const Pod, i as u32);
        groups
            .entry(pod_rs(p).map(|r| r.name.as_str()))
            .or_default()
            .push(p);
    }
    // upstream orders every active pod a ReplicaSet owns, selected or not:
    // one pass over the namespace for all groups, in the namespace's order
    let mut owned_by: HashMap<&str, Vec<&Pod>> =
        groups.keys().flatten().map(|n| (*n, Vec::new())).collect();
    for p in ns_pods.iter().filter(|p| is_pod_active(p)) {
        if let Some(owned) = pod_rs(p).and_then(|r| owned_by.get_mut(r.name.as_str())) {
            owned.push(p);
        }
    }
    // related pods, and their count per node, depend only on the controller:
    // computed once per controller, not once per ReplicaSet
    let mut related_by_owner: HashMap<&str, (usize, PodsOnNode)> = HashMap::new();
    let mut out = Vec::with_capacity(groups.len());
    for (rs_name, members) in groups {
        let rs = rs_name.and_then(|n| ns_rs.iter().find(|r| r.metadata.name.as_deref() == Some(n)));
        let owned: Vec<&Pod> = match rs_name {
            Some(n) => owned_by.remove(n).unwrap_or_default(),
            None => members,
        };
        let (related_count, on_node): (usize, Cow<PodsOnNode>) = match rs {
            Some(rs) => match controller_of(rs.metadata.owner_references.as_ref()) {
                Some(owner) => {
                    let (n, counts) =
                        related_by_owner
                            .entry(owner.uid.as_str())
                            .or_insert_with(|| {
                                let related = related_pods(owner, ns_rs, ns_pods);
                                (related.len(), PodsOnNode::count(related))
                            });
                    (*n, Cow::Borrowed(counts))
                }
                None => (0, Cow::default()),
            },
            None => match rs_name {
                Some(n) => {
                    warnings.push(format!(
                        "ReplicaSet {n} is not in the snapshot: colocation ranks use its own pods"
                    ));
                    (
                        owned.len(),
                        Cow::Owned(PodsOnNode::count(owned.iter().copied())),
                    )
                }
                None => (0, Cow::default()),
            },
        };
        let deployment = rs
            .and_then(|r| controller_of(r.metadata.owner_references.as_ref()))
            .filter(|o| o.kind == "Deployment")
            .map(|o| o.name.clone());
        let mut keys: Vec<PodKey> = owned
            .iter()
            .map(|p| PodKey::from_pod(p).with_now(now))
            .collect();
        on_node.assign(&mut keys);
        let selected = owned
            .iter()
            .map(|p| index_of.get(&(*p as *const Pod)).copied())
            .collect();
        out.push(KeyedReplicaSet {
            name: rs_name,
            deployment,
            keys,
            selected,
            related_pods: related_count,
        });
    }
    (out, warnings)
}

/// Orders each keyed ReplicaSet with the comparator and checks the result.
/// `plans[i]` is the plan of the i-th selected pod.
fn check_replica_sets(
    policy: &ResolvedPolicy,
    keyed: Vec<KeyedReplicaSet>,
    plans: &[PodPlan],
    opts: &PlanOptions,
) -> Vec<ReplicaSetPlan> {
    let cmp = Comparator {
        gates: opts.gates,
        now: opts.now,
    };
    let mut out = Vec::with_capacity(keyed.len());
    for KeyedReplicaSet {
        name: rs_name,
        deployment,
        mut keys,
        selected,
        related_pods,
    } in keyed
    {
        let owned_plans: Vec<Option<&PodPlan>> = selected
            .iter()
            .map(|i| i.map(|i| &plans[i as usize]))
            .collect();
        if opts.assume_patches_applied {
            // The cost annotation is the only thing a patch changes that the
            // comparator reads, so this equals keying a patched copy of each
            // pod without cloning it.
            for (k, plan) in keys.iter_mut().zip(&owned_plans) {
                if let Some(Action::Patch(c)) = plan.map(|x| &x.action) {
                    // what upstream parses from the decimal we write (tested)
                    k.cost = ParsedCost {
                        value: *c,
                        problem: None,
                    };
                }
            }
        }
        let ranking = rank_pods(&cmp, &keys);
        let ordered = OrderedPods { keys, ranking };
        let order = &ordered.ranking.order;
        // a managed pod's name is its plan's, shared
        let key_names: Vec<Arc<str>> = ordered
            .keys
            .iter()
            .zip(&owned_plans)
            .map(|(k, plan)| plan.map_or_else(|| Arc::from(&*k.name), |p| p.name.clone()))
            .collect();
        let name = |i: usize| key_names[i].clone();
        let names: Vec<Arc<str>> = order.iter().map(|&i| name(i)).collect();
        let live_costs: Vec<i32> = ordered.in_order().map(|k| k.cost.value).collect();
        let intended_costs: Vec<i32> = order
            .iter()
            .map(|&i| owned_plans[i].map_or(ordered.keys[i].cost.value, PodPlan::intended))
            .collect();
        let victims: Vec<Arc<str>> = opts
            .scale_down_by
            .map(|n| ordered.victims(n).into_iter().map(name).collect())
            .unwrap_or_default();
        let tie_at_cut = opts
            .scale_down_by
            .is_some_and(|n| ordered.ranking.tie_at_cut(n));
        let (verdict, mismatches) =
            check::check_order(&cmp, &ordered, &intended_costs, &owned_plans, policy);
        let ambiguous = ordered
            .ranking
            .ambiguity
            .as_ref()
            .map(|a| a.pods.iter().map(|&i| name(i)).collect())
            .unwrap_or_default();
        out.push(ReplicaSetPlan {
            name: rs_name.unwrap_or("(none)").to_string(),
            deployment,
            predicted: names,
            intended_costs,
            live_costs,
            victims,
            verdict,
            mismatches,
            ambiguous,
            tie_at_cut,
            related_pods,
        });
    }
    out
}

#[cfg(test)]
mod equivalence;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
