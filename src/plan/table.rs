//! The pods of a policy's namespace as the planner reads them. Each pod's
//! name, controlling ReplicaSet, node and activity are read once here, so
//! costing and keying compare small values instead of walking each pod's
//! metadata again.

use std::collections::BTreeSet;

use foldhash::HashMap;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;

use super::{both, controller_of, node_of, pod_rs, ResolvedPolicy, PARALLEL_FROM};
use crate::comparator::is_pod_active;
use crate::policy::validate::Target;
use crate::policy::{LabelSelector, TargetKind};

/// One pod of the policy's namespace.
pub(super) struct NsPod<'a> {
    /// The pod in the snapshot.
    pub pod: &'a Pod,
    /// `metadata.name`, empty when absent.
    pub name: &'a str,
    /// Name of its controlling ReplicaSet.
    pub replica_set: Option<&'a str>,
    /// Slot of its `spec.nodeName` (the empty name included) in [`NodeSlots`].
    pub node: u32,
    /// Upstream's `IsPodActive`.
    pub active: bool,
}

/// Node names, each given a slot: pods on the same node are then matched
/// by slot, and each name is hashed once per pod instead of once per stage.
#[derive(Default)]
pub(super) struct NodeSlots<'a> {
    slot_of: HashMap<&'a str, u32>,
    /// Name of each slot.
    pub names: Vec<&'a str>,
    /// Active pods of the whole snapshot on each slot's node (not counted
    /// unless asked, and never for the empty name).
    pub active_pods: Vec<i64>,
}

impl<'a> NodeSlots<'a> {
    /// The slot of `name`, given a new one if it has none yet.
    fn slot(&mut self, name: &'a str) -> u32 {
        *self.slot_of.entry(name).or_insert_with(|| {
            self.names.push(name);
            self.active_pods.push(0);
            (self.names.len() - 1) as u32
        })
    }

    /// Takes in `other`'s slots and counts; returns the new slot of each of its slots.
    fn absorb(&mut self, other: NodeSlots<'a>) -> Vec<u32> {
        other
            .names
            .iter()
            .zip(&other.active_pods)
            .map(|(name, count)| {
                let s = self.slot(name);
                self.active_pods[s as usize] += count;
                s
            })
            .collect()
    }
}

/// The pods of a policy's namespace, in snapshot order, and which of them it
/// plans for.
#[derive(Default)]
pub(super) struct Selection<'a> {
    /// Every pod of the namespace.
    pub pods: Vec<NsPod<'a>>,
    /// Indexes in `pods` of the selected active pods, not excluded, sorted
    /// by name (stably: pods sharing a name stay in snapshot order).
    pub active: Vec<u32>,
    /// Names of the selected pods left out as terminating or finished.
    pub inactive: Vec<String>,
    /// Nodes of the namespace's pods (and, when counted, of every active pod).
    pub nodes: NodeSlots<'a>,
}

impl<'a> Selection<'a> {
    /// Adds the selection over the pods that follow.
    fn append(&mut self, rest: Selection<'a>) {
        let moved = self.nodes.absorb(rest.nodes);
        let offset = self.pods.len() as u32;
        self.pods.extend(rest.pods.into_iter().map(|mut p| {
            p.node = moved[p.node as usize];
            p
        }));
        // both lists are sorted: merged, ties to the earlier pods, as a
        // stable sort of the whole would place them
        let mine = std::mem::take(&mut self.active);
        let name = |i: u32| self.pods[i as usize].name;
        let mut theirs = rest.active.into_iter().map(|i| i + offset).peekable();
        let mut merged = Vec::with_capacity(mine.len() + theirs.len());
        for i in mine {
            while let Some(j) = theirs.next_if(|&j| name(j) < name(i)) {
                merged.push(j);
            }
            merged.push(i);
        }
        merged.extend(theirs);
        self.active = merged;
        self.inactive.extend(rest.inactive);
    }
}

/// How the policy's target picks pods.
enum Matcher<'a> {
    /// By labels.
    Labels(&'a LabelSelector),
    /// By controlling ReplicaSet: the one named, or a Deployment's.
    ReplicaSets(BTreeSet<&'a str>),
}

impl Matcher<'_> {
    fn new<'a>(policy: &'a ResolvedPolicy, ns_rs: &[&'a ReplicaSet]) -> Matcher<'a> {
        match &policy.spec.target {
            Target::Selector(sel) => Matcher::Labels(sel),
            Target::Workload(t) if t.kind == TargetKind::ReplicaSet => {
                Matcher::ReplicaSets(BTreeSet::from([t.name.as_str()]))
            }
            Target::Workload(t) => Matcher::ReplicaSets(
                ns_rs
                    .iter()
                    .filter(|rs| {
                        controller_of(rs.metadata.owner_references.as_ref())
                            .is_some_and(|o| o.kind == "Deployment" && o.name == t.name)
                    })
                    .filter_map(|rs| rs.metadata.name.as_deref())
                    .collect(),
            ),
        }
    }

    fn matches(&self, p: &NsPod) -> bool {
        match self {
            Matcher::Labels(sel) => sel.matches(p.pod.metadata.labels.as_ref()),
            Matcher::ReplicaSets(names) => p.replica_set.is_some_and(|n| names.contains(n)),
        }
    }
}

/// The policy's namespace in `pods` and the pods it selects (sorted by
/// name), leaving out those in `excluded`. With `count_nodes`, also counts every active pod
/// of the snapshot per node. Works on the snapshot's two halves, on two
/// threads when it is large.
pub(super) fn select<'a>(
    policy: &ResolvedPolicy,
    pods: &'a [Pod],
    ns_rs: &[&'a ReplicaSet],
    excluded: &BTreeSet<String>,
    count_nodes: bool,
) -> Selection<'a> {
    let matcher = Matcher::new(policy, ns_rs);
    let ns = policy.namespace.as_str();
    let (first, second) = pods.split_at(pods.len() / 2);
    let (rest, mut whole) = both(
        pods.len() >= 2 * PARALLEL_FROM,
        || select_in(ns, second, &matcher, excluded, count_nodes),
        || select_in(ns, first, &matcher, excluded, count_nodes),
    );
    whole.append(rest);
    whole
}

fn select_in<'a>(
    ns: &str,
    pods: &'a [Pod],
    matcher: &Matcher,
    excluded: &BTreeSet<String>,
    count_nodes: bool,
) -> Selection<'a> {
    let mut out = Selection::default();
    for pod in pods {
        let active = is_pod_active(pod);
        let node_name = node_of(pod);
        if pod.metadata.namespace.as_deref().unwrap_or("") != ns {
            if count_nodes && active && !node_name.is_empty() {
                let s = out.nodes.slot(node_name);
                out.nodes.active_pods[s as usize] += 1;
            }
            continue;
        }
        let node = out.nodes.slot(node_name);
        if count_nodes && active && !node_name.is_empty() {
            out.nodes.active_pods[node as usize] += 1;
        }
        let p = NsPod {
            pod,
            name: pod.metadata.name.as_deref().unwrap_or(""),
            replica_set: pod_rs(pod).map(|r| r.name.as_str()),
            node,
            active,
        };
        if matcher.matches(&p) && !excluded.contains(p.name) {
            if active {
                out.active.push(out.pods.len() as u32);
            } else if let Some(name) = &pod.metadata.name {
                out.inactive.push(name.clone());
            }
        }
        out.pods.push(p);
    }
    out.active = sorted_by_name(&out.pods, std::mem::take(&mut out.active));
    out
}

/// Indexes of `which` pods sorted by name, stably. Each name is read once
/// into a key of its 16 bytes after the prefix all names share, so most
/// comparisons are one integer compare instead of two reads of names
/// scattered over the heap.
fn sorted_by_name(pods: &[NsPod], which: Vec<u32>) -> Vec<u32> {
    let name = |i: u32| pods[i as usize].name;
    let first = which.first().map_or("", |&i| name(i)).as_bytes();
    let mut common = first.len();
    for &i in &which {
        let n = name(i).as_bytes();
        common = common.min(n.iter().zip(first).take_while(|(a, b)| a == b).count());
    }
    let mut keyed: Vec<(u128, &str, u32)> = which
        .into_iter()
        .map(|i| {
            let n = name(i);
            let mut window = [0u8; 16];
            let tail = &n.as_bytes()[common..];
            let len = tail.len().min(16);
            window[..len].copy_from_slice(&tail[..len]);
            // zero-padded big-endian bytes order as the bytes do, except that
            // a name ending inside the window ties with one that goes on with
            // NULs; the full compare settles every tie
            (u128::from_be_bytes(window), n, i)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    keyed.into_iter().map(|(_, _, i)| i).collect()
}
