//! Costing: each selected pod's signal values, its desired cost, and the
//! patch when that differs from what it carries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

// Seeded hashing, several times faster than std's SipHash on short keys such
// as node names; maps here are only looked up, never iterated, so their
// order cannot leak into a plan.
use foldhash::{HashMap, HashMapExt};
use k8s_openapi::api::core::v1::Node;
use rayon::prelude::*;

use super::node_order::{node_order, NodeOrder};
use super::selection::{NodeSlots, NsPod, Selection};
use super::{
    default_value, map_chunks, map_in_order, write_action, CostAction, CostOwner, CostWrite,
    NamedPolicy, PodPlan, PreviousValues, SignalValue, Split,
};
use crate::comparator::parse_deletion_cost;
use crate::marker::{first_anyway, marker_of};
use crate::pod::OurAnnotations;
use crate::policy::validate as signal;
use crate::policy::{CostRanks, OnSignalMissing, ValidatedSignal};
use crate::signals::billing::class_of;
use crate::signals::utilization::quantize;
use crate::signals::{Sample, SignalSamples};

fn creation_ns(p: &NsPod) -> i128 {
    p.pod
        .identity
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
pub(super) fn decimal(buf: &mut String, n: i32) -> &str {
    formatted(buf, format_args!("{n}"))
}

/// Strings many pods share, each allocated once, with a value derived from it.
struct Shared<V>(HashMap<Arc<str>, V>);

impl<V> Default for Shared<V> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<V: Copy> Shared<V> {
    /// The shared copy of `s` and its value, derived on first sight.
    fn get(&mut self, s: &str, derive: impl FnOnce(&str) -> V) -> (Arc<str>, V) {
        if let Some((k, v)) = self.0.get_key_value(s) {
            return (k.clone(), *v);
        }
        let v = derive(s);
        let k: Arc<str> = s.into();
        self.0.insert(k.clone(), v);
        (k, v)
    }
}

/// Each selected pod's plan, the patches and the values to remember.
pub(super) struct Costed {
    pub plans: Vec<PodPlan>,
    pub patches: Vec<CostWrite>,
    pub values: PreviousValues,
    /// The warning of a node order with more nodes of one count than slots.
    pub crowded: Option<String>,
}

/// Costs the selected pods (`pods`, sorted by name, rows of `selection`) with
/// every signal, split as `split` says; returns the plans and the warnings
/// the costing raised.
pub(super) fn cost_pods(
    policy: &NamedPolicy,
    pods: &[&NsPod],
    selection: &Selection,
    nodes: &[Arc<Node>],
    samples: &SignalSamples,
    previous: &PreviousValues,
    split: Split,
) -> (Costed, Vec<String>) {
    let Split { parallel, chunk } = split;
    let mut warnings = Vec::new();
    let pod_nodes = PodNodes::new(pods, &selection.nodes, nodes);
    warnings.extend(missing_nodes_warning(&pod_nodes));
    let mut crowded = None;
    let node_values = consolidation_of(policy).map(|c| {
        let order = node_values(c, &pod_nodes);
        crowded = crowded_warning(c, &order.crowded);
        warnings.extend(crowded.clone());
        (c, order.values)
    });

    // Names are copied first, chunk by chunk: the plans share them, and the
    // utilisation join then reads them from one place instead of from pods
    // scattered over the heap.
    let names: Vec<Vec<Arc<str>>> = map_chunks(parallel, pods, chunk, |part| {
        part.iter().map(|p| p.name.into()).collect()
    });
    let mut signal_values: Vec<Vec<SignalEntry>> =
        map_in_order(parallel, &policy.spec.signals, |idx, spec| {
            let nodes = NodeSignals {
                pods: &pod_nodes,
                consolidation: node_values.as_ref().map(|(_, v)| v.as_slice()),
            };
            evaluate_signal(idx, spec, pods, &names, &nodes, samples, previous)
        });

    // Pods are costed in chunks, on both threads when `parallel`. Each chunk
    // owns its pods' signal values and its own copies of the namespace and
    // ReplicaSet names all its pods share, so the threads do not contend for
    // those reference counts; only node names (~30 pods each) are shared.
    let node_names: Vec<Arc<str>> = pod_nodes.names.iter().map(|n| Arc::from(*n)).collect();
    let tasks = cost_tasks(pods, chunk, &pod_nodes.slot, names, &mut signal_values);
    let run = |task| cost_chunk(policy, task, &node_names, &selection.replica_sets);
    let costed: Vec<CostedChunk> = if parallel {
        tasks.into_par_iter().map(run).collect()
    } else {
        tasks.into_iter().map(run).collect()
    };
    let mut plans = Vec::with_capacity(pods.len());
    let mut patches = Vec::new();
    let mut kept_values = Vec::new();
    for c in costed {
        plans.extend(c.plans);
        patches.extend(c.patches);
        kept_values.extend(c.kept_values);
    }
    if let Some(max) = policy.spec.ranked_max_cost() {
        rank_costs(policy, max, &mut plans, &mut patches, &mut warnings);
    }
    super::marked::mark_costs(policy, &mut plans, &mut patches, &mut warnings);
    // pods sharing a name (invalid, but possible in a file): the last one's values win
    let values: PreviousValues = kept_values.into_iter().collect();
    (
        Costed {
            plans,
            patches,
            values,
            crowded,
        },
        warnings,
    )
}

/// The warning naming the selected pods' nodes the snapshot lacks, if any.
fn missing_nodes_warning(pod_nodes: &PodNodes) -> Option<String> {
    let missing_nodes: BTreeSet<&str> = pod_nodes
        .names
        .iter()
        .zip(&pod_nodes.node)
        .filter(|(n, node)| !n.is_empty() && node.is_none())
        .map(|(n, _)| *n)
        .collect();
    (!missing_nodes.is_empty()).then(|| {
        format!(
            "nodes not in the snapshot (their labels read as empty): {}",
            crate::text::capped_list(missing_nodes, crate::text::LISTED)
        )
    })
}

/// The pods cut into chunks of `chunk` (as `names` already is), each with
/// its pods' node slots and its share of every signal's values.
fn cost_tasks<'t, 'p, 'a>(
    pods: &'t [&'p NsPod<'a>],
    chunk: usize,
    node_slot: &'t [u32],
    names: Vec<Vec<Arc<str>>>,
    signal_values: &'t mut [Vec<SignalEntry>],
) -> Vec<CostTask<'t, 'p, 'a>> {
    let mut tasks: Vec<CostTask> = names
        .into_iter()
        .enumerate()
        .map(|(c, names)| {
            let from = c * chunk;
            let to = (from + chunk).min(pods.len());
            CostTask {
                pods: &pods[from..to],
                node_slot: &node_slot[from..to],
                names,
                values: Vec::new(),
            }
        })
        .collect();
    for values in signal_values {
        for (task, values) in tasks.iter_mut().zip(values.chunks_mut(chunk)) {
            task.values.push(values);
        }
    }
    tasks
}

/// One signal's value for one pod, with its readable detail.
type SignalEntry = (Option<i64>, Arc<str>);

/// One chunk of pods to cost, with what was computed for them beforehand.
struct CostTask<'t, 'p, 'a> {
    /// The pods, in plan order.
    pods: &'t [&'p NsPod<'a>],
    /// Slot of each pod's node in [`PodNodes`].
    node_slot: &'t [u32],
    /// Each pod's name, shared with its plan.
    names: Vec<Arc<str>>,
    /// `values[signal][pod]`: moved out as the pods are costed.
    values: Vec<&'t mut [SignalEntry]>,
}

/// The plans and patches of one chunk of pods, and the utilisation values
/// to remember, in pod order.
struct CostedChunk {
    plans: Vec<PodPlan>,
    patches: Vec<CostWrite>,
    kept_values: Vec<(Arc<str>, usize, i64)>,
}

/// Costs one chunk of pods from their signal values.
fn cost_chunk(
    policy: &NamedPolicy,
    task: CostTask,
    node_names: &[Arc<str>],
    replica_sets: &[&str],
) -> CostedChunk {
    let CostTask {
        pods,
        node_slot,
        names,
        mut values,
    } = task;
    let mut kept_values: Vec<(Arc<str>, usize, i64)> = Vec::new();
    let mut plans = Vec::with_capacity(pods.len());
    // strings many pods share, allocated once
    let namespace: Arc<str> = policy.namespace.as_str().into();
    let mut rs_names: Vec<Option<Arc<str>>> = vec![None; replica_sets.len()];
    // costs as written: few distinct values, each parsed once
    let mut costs = Shared::default();
    let mut patches = Vec::new();
    // per-pod scratch buffers, reused
    let mut combined = Vec::with_capacity(policy.spec.signals.len());
    let mut desired_text = String::new();
    for (i, (row, name)) in pods.iter().zip(names).enumerate() {
        let pod = row.pod;
        let uid: Arc<str> = pod.identity.uid.as_deref().unwrap_or("").into();
        let (current_raw, current) = current_cost(&mut costs, &pod.ours);
        let owner = cost_owner(policy, &pod.ours, &current_raw);
        let (breakdown, missing) = pod_signals(
            policy,
            &mut values,
            i,
            &name,
            &mut combined,
            &mut kept_values,
        );
        let desired = missing.is_none().then(|| policy.spec.combine(&combined));
        let action = cost_action(
            policy,
            &owner,
            current_raw.as_deref(),
            desired,
            &missing,
            &mut desired_text,
        );
        if let CostAction::Patch(cost) = action {
            patches.push(CostWrite {
                namespace: namespace.clone(),
                pod: name.clone(),
                uid: uid.clone(),
                cost,
            });
        }
        let node = node_names[node_slot[i] as usize].clone();
        let replica_set = row
            .replica_set
            .map(|r| shared_name(&mut rs_names, replica_sets, r));
        let kept_as_is = matches!(action, CostAction::KeepForeign | CostAction::KeepKarpenter);
        plans.push(PodPlan {
            name,
            uid,
            node,
            replica_set,
            signals: breakdown,
            current_raw,
            current,
            owner,
            desired: desired.filter(|_| !kept_as_is),
            action,
            marked: marker_of(pod.labels()).map(|label| super::marked::Marked {
                label,
                first_anyway: first_anyway(pod),
            }),
        });
    }

    CostedChunk {
        plans,
        patches,
        kept_values,
    }
}

/// The shared copy of ReplicaSet `r`'s name, made on first use.
#[inline]
fn shared_name(names: &mut [Option<Arc<str>>], replica_sets: &[&str], r: u32) -> Arc<str> {
    names[r as usize]
        .get_or_insert_with(|| replica_sets[r as usize].into())
        .clone()
}

/// The cost a pod carries, as written (shared) and as the controller reads
/// it; no annotation reads as 0.
#[inline]
fn current_cost(costs: &mut Shared<i32>, ours: &OurAnnotations) -> (Option<Arc<str>>, i32) {
    match ours.deletion_cost.as_deref() {
        Some(raw) => {
            let (raw, cost) = costs.get(raw, |r| parse_deletion_cost(r).value);
            (Some(raw), cost)
        }
        None => (None, parse_deletion_cost("0").value),
    }
}

/// What to do with a pod's cost: leave Karpenter's (and, when the policy
/// respects them, foreign ones) alone, keep the last value when a signal is
/// `missing`, else write `desired` unless the pod already carries it.
#[inline]
fn cost_action(
    policy: &NamedPolicy,
    owner: &CostOwner,
    current_raw: Option<&str>,
    desired: Option<i32>,
    missing: &Option<String>,
    desired_text: &mut String,
) -> CostAction {
    match (owner, desired) {
        (CostOwner::Karpenter, _) => CostAction::KeepKarpenter,
        (CostOwner::Foreign(_), _) if policy.spec.respect_foreign_costs => CostAction::KeepForeign,
        (_, None) => CostAction::KeepLastValue(missing.clone().unwrap_or_default()),
        (_, Some(d)) => write_action(owner, current_raw, d, desired_text),
    }
}

/// Who wrote a pod's cost (`current_raw`, as it carries it), from its
/// annotations: Karpenter's marker wins over any other.
#[inline]
fn cost_owner(
    policy: &NamedPolicy,
    ours: &OurAnnotations,
    current_raw: &Option<Arc<str>>,
) -> CostOwner {
    let writer = ours.policy.as_ref();
    match (current_raw, writer) {
        _ if ours.autoscaler.karpenter_cost => CostOwner::Karpenter,
        (None, _) => CostOwner::None,
        (Some(_), Some(w)) if *w == policy.name => CostOwner::Ours,
        (Some(_), w) => CostOwner::Foreign(w.cloned()),
    }
}

/// Pod `i`'s signal values, moved out of `values[signal][i]`: its
/// breakdown for the plan, and the first missing signal's detail when the
/// policy then keeps the last value. Usable values go to `combined`
/// (cleared first), and utilisation values (the only ones read back) to
/// `kept_values`.
#[inline]
fn pod_signals(
    policy: &NamedPolicy,
    values: &mut [&mut [SignalEntry]],
    i: usize,
    name: &Arc<str>,
    combined: &mut Vec<i64>,
    kept_values: &mut Vec<(Arc<str>, usize, i64)>,
) -> (Vec<SignalValue>, Option<String>) {
    let mut breakdown = Vec::with_capacity(policy.spec.signals.len());
    combined.clear();
    let mut missing: Option<String> = None;
    for (idx, spec) in policy.spec.signals.iter().enumerate() {
        // each value is read once: move its detail out instead of cloning
        let (v, detail) = std::mem::take(&mut values[idx][i]);
        let no_value = v.is_none();
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
            missing: no_value,
        });
    }
    (breakdown, missing)
}

/// `spec.maxCost` (see [`crate::policy::ValidatedPolicy::ranked_max_cost`]): rewrites each
/// wanted cost as its rank among the plan's wanted costs, decides again
/// what to write, and rebuilds the patches in plan order.
fn rank_costs(
    policy: &NamedPolicy,
    max: i32,
    plans: &mut [PodPlan],
    patches: &mut Vec<CostWrite>,
    warnings: &mut Vec<String>,
) {
    let ranks = CostRanks::new(plans.iter().filter_map(|p| p.desired), max);
    if ranks.merges() {
        warnings.push(format!(
            "spec.maxCost {max}: the pods want {} different costs, more than the {} values of \
             0..={max}: neighbouring costs share a value (order kept, some ties added; raise \
             maxCost to keep every difference)",
            ranks.distinct(),
            i64::from(max) + 1
        ));
    }
    let namespace: Arc<str> = policy.namespace.as_str().into();
    let mut buf = String::new();
    patches.clear();
    for p in plans.iter_mut() {
        let Some(wanted) = p.desired else { continue };
        let cost = ranks.written(wanted);
        p.desired = Some(cost);
        p.action = write_action(&p.owner, p.current_raw.as_deref(), cost, &mut buf);
        if let CostAction::Patch(cost) = p.action {
            patches.push(CostWrite {
                namespace: namespace.clone(),
                pod: p.name.clone(),
                uid: p.uid.clone(),
                cost,
            });
        }
    }
}

/// The value under `name` in (name, value) pairs iterated in name order, for
/// names asked in ascending order (repeats allowed): a merge join, no lookup
/// per name.
pub(super) fn seek<K: AsRef<str>, V: Copy>(
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

/// The nodes of the selected pods, numbered from 0 in the order the pods
/// first name them, each looked up once: the signals read a pod's node
/// through its slot.
struct PodNodes<'a> {
    /// Slot of each pod's node (pods in plan order).
    slot: Vec<u32>,
    /// Node name per slot (empty: unscheduled).
    names: Vec<&'a str>,
    /// The node per slot, when the snapshot has it.
    node: Vec<Option<&'a Node>>,
    /// Active pods of the whole snapshot on each slot's node.
    pods_on: Vec<i64>,
    /// Whether an autoscaler may not remove each slot's node.
    blocked: Vec<bool>,
}

impl<'a> PodNodes<'a> {
    fn new(pods: &[&NsPod], slots: &NodeSlots<'a>, nodes: &'a [Arc<Node>]) -> Self {
        // the selection's slots cover every node seen; keep those of these pods
        let mut local = vec![u32::MAX; slots.names.len()];
        let mut names = Vec::new();
        let mut pods_on = Vec::new();
        let mut blocked = Vec::new();
        let slot = pods
            .iter()
            .map(|p| {
                let s = &mut local[p.node as usize];
                if *s == u32::MAX {
                    *s = names.len() as u32;
                    names.push(slots.names[p.node as usize]);
                    pods_on.push(slots.active_pods[p.node as usize]);
                    blocked.push(slots.blocked.contains_key(&p.node));
                }
                *s
            })
            .collect();
        let by_name: HashMap<&str, &Node> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, &**n)))
            .collect();
        let node = names.iter().map(|n| by_name.get(n).copied()).collect();
        Self {
            slot,
            names,
            node,
            pods_on,
            blocked,
        }
    }
}

/// The policy's consolidation signal, if it has one.
fn consolidation_of(policy: &NamedPolicy) -> Option<&signal::NodeConsolidation> {
    policy.spec.signals.iter().find_map(|s| match s {
        ValidatedSignal::NodeConsolidation(c) => Some(c),
        _ => None,
    })
}

/// The band of a node for `nodeConsolidation`: its pod count (capped at
/// `maxPods`), or after every count when no autoscaler may remove it:
/// draining it frees nothing.
fn band(c: &signal::NodeConsolidation, pods_on: i64, blocked: bool) -> i64 {
    if blocked {
        c.blocked_band()
    } else {
        pods_on.clamp(0, i64::from(c.max_pods))
    }
}

/// Each node slot's consolidation value ([`super::node_order`]).
fn node_values(c: &signal::NodeConsolidation, pod_nodes: &PodNodes) -> NodeOrder {
    let nodes: Vec<(&str, i64)> = pod_nodes
        .names
        .iter()
        .zip(pod_nodes.pods_on.iter().zip(&pod_nodes.blocked))
        .map(|(name, (&on, &blocked))| (*name, band(c, on, blocked)))
        .collect();
    node_order(&nodes, c.node_slots)
}

/// The warning for bands with more nodes than the cost range leaves values
/// for: those nodes share costs, so a scale-in may split them.
fn crowded_warning(c: &signal::NodeConsolidation, crowded: &[(i64, usize)]) -> Option<String> {
    let (band, nodes) = crowded.iter().max_by_key(|(_, n)| *n)?;
    let what = if *band == c.blocked_band() {
        "nodes no autoscaler may remove".to_string()
    } else {
        format!("nodes holding {band} pod(s)")
    };
    Some(format!(
        "nodeConsolidation: {nodes} {what}, but int32 leaves room for {} node(s) per pod count \
         beside the other signals: some of them share a cost, so a scale-in may take pods from \
         several (lower maxPods, buckets, cost ranges or maxPerZone to make room)",
        c.node_slots
    ))
}

/// What the node signals read: the pods' nodes, and each node slot's
/// consolidation value when the policy has that signal.
struct NodeSignals<'n, 'a> {
    pods: &'n PodNodes<'a>,
    consolidation: Option<&'n [i64]>,
}

/// Values of one signal for every pod, with a readable detail.
fn evaluate_signal(
    idx: usize,
    spec: &ValidatedSignal,
    pods: &[&NsPod],
    names: &[Vec<Arc<str>>],
    nodes: &NodeSignals,
    samples: &SignalSamples,
    previous: &PreviousValues,
) -> Vec<(Option<i64>, Arc<str>)> {
    match spec {
        ValidatedSignal::BillingClass(b) => {
            billing_class_values(b, spec.value_range().0, pods, nodes.pods)
        }
        ValidatedSignal::Utilization(u) => utilization_values(idx, u, names, samples, previous),
        ValidatedSignal::NodeConsolidation(c) => {
            consolidation_values(c, nodes.pods, nodes.consolidation.unwrap_or(&[]))
        }
        ValidatedSignal::ZoneBalance(z) => zone_values(z, pods.len(), nodes),
    }
}

/// `billingClass`: the cost of each pod's node's class; pods over a class
/// budget get `min` (or the budget's value).
fn billing_class_values(
    b: &signal::BillingClass,
    min: i64,
    pods: &[&NsPod],
    pod_nodes: &PodNodes,
) -> Vec<(Option<i64>, Arc<str>)> {
    // a node's class is the same for all its pods: derive it once per
    // node, and number the classes so pods compare numbers, not names
    let mut class_ids: HashMap<Option<String>, usize> = HashMap::new();
    let mut classes: Vec<Option<String>> = Vec::new();
    let class_of_slot: Vec<usize> = pod_nodes
        .node
        .iter()
        .map(|n| {
            let class = class_of(&b.source, n.and_then(|n| n.metadata.labels.as_ref()));
            *class_ids.entry(class).or_insert_with_key(|c| {
                classes.push(c.clone());
                classes.len() - 1
            })
        })
        .collect();
    let class: Vec<usize> = pod_nodes
        .slot
        .iter()
        .map(|&s| class_of_slot[s as usize])
        .collect();
    // over a class budget: the newest pods beyond it go first
    let mut over = vec![false; pods.len()];
    // creation times read once, not twice per comparison
    let created: Vec<i128> = if b.budgets.is_empty() {
        Vec::new()
    } else {
        pods.iter().map(|p| creation_ns(p)).collect()
    };
    for (name, budget) in &b.budgets {
        let Some(&id) = class_ids.get(&Some(name.clone())) else {
            continue;
        };
        let mut on: Vec<usize> = (0..pods.len()).filter(|&i| class[i] == id).collect();
        let excess = on.len().saturating_sub(*budget as usize);
        if excess == 0 {
            continue;
        }
        // newest first, then by name descending; the index settles
        // the rest as a stable sort would, so only the cut is needed
        on.select_nth_unstable_by(excess - 1, |&a, &b| {
            created[b]
                .cmp(&created[a])
                .then_with(|| pods[b].pod.identity.name.cmp(&pods[a].pod.identity.name))
                .then_with(|| a.cmp(&b))
        });
        for &i in &on[..excess] {
            over[i] = true;
        }
    }
    let lo = b.over_budget_value().unwrap_or(min);
    let cost: Vec<i64> = classes
        .iter()
        .map(|c| i64::from(b.cost_of(c.as_deref())))
        .collect();
    // one detail per (class, over budget), shared by its pods
    let mut details: Vec<[Option<Arc<str>>; 2]> = vec![[None, None]; classes.len()];
    (0..pods.len())
        .map(|i| {
            let c = class[i];
            let detail = details[c][usize::from(over[i])]
                .get_or_insert_with(|| {
                    let shown = classes[c].as_deref().unwrap_or("(none)");
                    if over[i] {
                        format!("{shown} (over budget)").into()
                    } else {
                        shown.into()
                    }
                })
                .clone();
            (Some(if over[i] { lo } else { cost[c] }), detail)
        })
        .collect()
}

/// `utilization`: each pod's sample quantized, with hysteresis against its
/// previous value.
fn utilization_values(
    idx: usize,
    u: &signal::Utilization,
    names: &[Vec<Arc<str>>],
    samples: &SignalSamples,
    previous: &PreviousValues,
) -> Vec<(Option<i64>, Arc<str>)> {
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
    // formatted into one buffer; values shown alike share one string
    let mut text = String::new();
    let mut shown = Shared::default();
    names
        .iter()
        .flatten()
        .map(|n| {
            let n = &**n;
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
                Some(Sample::Value(v)) => {
                    // a value far from any utilisation (-1e308) in a
                    // few characters, not hundreds of digits
                    let t = if v.abs() < 1e9 {
                        formatted(&mut text, format_args!("{v:.3}"))
                    } else {
                        formatted(&mut text, format_args!("{v:.3e}"))
                    };
                    (Some(q(*v)), shown.get(t, |_| ()).0)
                }
                Some(Sample::Unusable(problem)) => (None, problem.to_string().into()),
                None => (None, no_sample.clone()),
            }
        })
        .collect()
}

/// `nodeConsolidation`: each pod's node's value in the node order
/// (`values`, by node slot).
fn consolidation_values(
    c: &signal::NodeConsolidation,
    pod_nodes: &PodNodes,
    values: &[i64],
) -> Vec<(Option<i64>, Arc<str>)> {
    // the detail depends only on the node: formatted once per node
    let mut details: Vec<Option<Arc<str>>> = vec![None; pod_nodes.names.len()];
    pod_nodes
        .slot
        .iter()
        .map(|&s| {
            let s = s as usize;
            let detail = details[s].get_or_insert_with(|| {
                let count = pod_nodes.pods_on[s];
                let pods = if count == 1 { "pod" } else { "pods" };
                if pod_nodes.blocked[s] {
                    format!("{count} {pods} on node, cannot be removed").into()
                } else if count > i64::from(c.max_pods) {
                    format!("{count} {pods} on node (counted as maxPods {})", c.max_pods).into()
                } else {
                    format!("{count} {pods} on node").into()
                }
            });
            (values.get(s).copied(), detail.clone())
        })
        .collect()
}

/// `zoneBalance`: the pods of the zones holding most go first, round-robin.
/// A pod's value is `maxPerZone` minus the pods its zone keeps from it on
/// (itself and those after it in the zone's order), so the zone with most
/// left always has the lowest value, and with `maxSkew` s each value covers
/// s such counts (zones within s pods of each other tie, and the next
/// signal picks). Counted from `maxPerZone`, not from the fullest zone, a
/// pod's value does not move when other pods go: the controller deletes
/// from the front of each zone, and the pods behind keep their count. Pods
/// go in name order; with a node order (`nodeConsolidation` in the policy)
/// they go node by node in that order, and every pod of a node takes its
/// node's first place, so zone balance moves whole nodes.
fn zone_values(
    z: &signal::ZoneBalance,
    pod_count: usize,
    nodes: &NodeSignals,
) -> Vec<(Option<i64>, Arc<str>)> {
    let pod_nodes = nodes.pods;
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
    // pods grouped through their node's zone number, not its name
    let mut zone_ids: BTreeMap<&str, usize> = BTreeMap::new();
    let zone_id: Vec<usize> = zone_of
        .iter()
        .map(|zone| {
            let next = zone_ids.len();
            *zone_ids.entry(zone).or_insert(next)
        })
        .collect();
    let mut members_of = vec![Vec::new(); zone_ids.len()];
    for (i, &s) in pod_nodes.slot.iter().enumerate() {
        members_of[zone_id[s as usize]].push(i);
    }
    if let Some(order) = nodes.consolidation {
        for members in &mut members_of {
            // stable: a node's pods stay together, in name order
            members.sort_by_key(|&i| {
                let slot = pod_nodes.slot[i];
                (order.get(slot as usize).copied(), slot)
            });
        }
    }
    let per_zone: BTreeMap<&str, Vec<usize>> = zone_ids
        .into_iter()
        .map(|(zone, id)| (zone, std::mem::take(&mut members_of[id])))
        .collect();
    let top = i64::from(z.max_per_zone);
    let skew = i64::from(z.max_skew.max(1));
    let mut out = vec![(None, Arc::<str>::default()); pod_count];
    for (zone, members) in &per_zone {
        let c = members.len() as i64;
        let detail: Arc<str> = format!(
            "{} ({c} {})",
            if zone.is_empty() { "(none)" } else { zone },
            if c == 1 { "pod" } else { "pods" }
        )
        .into();
        let mut node_first: Option<(u32, i64)> = None;
        for (pos, &i) in members.iter().enumerate() {
            let mut place = pos as i64;
            if nodes.consolidation.is_some() {
                let slot = pod_nodes.slot[i];
                match node_first {
                    Some((s, first)) if s == slot => place = first,
                    _ => node_first = Some((slot, place)),
                }
            }
            // the pods its zone keeps from this one on, counted whole nodes
            let keeps = c - place;
            let v = ((top - keeps).max(0) / skew).min(top);
            out[i] = (Some(v), detail.clone());
        }
    }
    out
}
