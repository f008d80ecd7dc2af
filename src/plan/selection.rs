//! Selection: the pods of a policy's namespace as the planner reads them,
//! and which of them the policy's target selects. Each pod's name,
//! controlling ReplicaSet, node and activity are read once here, so costing
//! and keying compare small values instead of walking each pod's metadata
//! again.

use std::collections::BTreeSet;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;

use crate::pod::{PodRecord, SharedMeta};
use kube::core::Selector;
use rayon::prelude::*;

use crate::owner;

use super::blockers::{node_blockers, pod_blocker, BlockedNode, Blocker};
use super::{map_chunks, map_in_order, node_of, pod_rs, NamedPolicy, Split};
use crate::comparator::is_pod_active;
use crate::policy::selector::selects;
use crate::policy::validate::Target;
use crate::policy::TargetKind;

/// One pod of the policy's namespace.
pub(super) struct NsPod<'a> {
    /// The pod in the snapshot.
    pub pod: &'a PodRecord,
    /// `metadata.name`, empty when absent.
    pub name: &'a str,
    /// Its controlling ReplicaSet, as an index into
    /// [`Selection::replica_sets`].
    pub replica_set: Option<u32>,
    /// Slot of its `spec.nodeName` (the empty name included) in [`NodeSlots`].
    pub node: u32,
    /// Upstream's `IsPodActive`.
    pub active: bool,
}

/// Node names, each given a slot: pods on the same node are then matched
/// by slot, and each name is hashed once per pod instead of once per stage.
pub(super) struct NodeSlots<'a> {
    /// Name of each slot: the snapshot's nodes first, then names no node
    /// of the snapshot has (the empty one of unscheduled pods among them).
    pub names: Vec<&'a str>,
    /// Active pods of the whole snapshot on each slot's node (not counted
    /// unless asked, and never for the empty name).
    pub active_pods: Vec<i64>,
    /// The slots whose node no autoscaler may remove, and why (the node's
    /// annotations and every namespace's pods').
    pub blocked: HashMap<u32, BlockedNode>,
}

/// Node slots while a chunk of the snapshot is scanned: the snapshot's
/// nodes have the same slots in every chunk; other names get slots of the
/// chunk's own, after them, renumbered when the chunks are joined.
struct ChunkNodes<'k, 'a> {
    known: &'k HashMap<&'a str, u32>,
    other: HashMap<&'a str, u32>,
    other_names: Vec<&'a str>,
    active_pods: Vec<i64>,
    /// Pods that keep their node, by slot, in snapshot order.
    blockers: Vec<(u32, Blocker)>,
}

impl<'k, 'a> ChunkNodes<'k, 'a> {
    fn new(known: &'k HashMap<&'a str, u32>) -> Self {
        Self {
            known,
            other: HashMap::new(),
            other_names: Vec::new(),
            active_pods: vec![0; known.len()],
            blockers: Vec::new(),
        }
    }

    /// The slot of `name`.
    fn slot(&mut self, name: &'a str) -> u32 {
        if let Some(&s) = self.known.get(name) {
            return s;
        }
        let first_other = self.known.len();
        *self.other.entry(name).or_insert_with(|| {
            self.other_names.push(name);
            self.active_pods.push(0);
            (first_other + self.other_names.len() - 1) as u32
        })
    }
}

/// The pods of a policy's namespace, in snapshot order, and which of them it
/// plans for.
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
    /// Names of the ReplicaSets that control the namespace's pods, each once.
    pub replica_sets: Vec<&'a str>,
}

/// A [`Selection`] over one chunk of the snapshot, `active` unsorted and
/// ReplicaSets numbered in the chunk.
struct ChunkSelection<'k, 'a> {
    pods: Vec<NsPod<'a>>,
    active: Vec<u32>,
    inactive: Vec<String>,
    nodes: ChunkNodes<'k, 'a>,
    rs_index: HashMap<&'a str, u32>,
    /// Name of each of the chunk's ReplicaSets, and whether the target
    /// selects its pods (a ReplicaSet target only).
    replica_sets: Vec<(&'a str, bool)>,
}

impl<'a> ChunkSelection<'_, 'a> {
    /// The chunk's number for the ReplicaSet `name`.
    fn replica_set(&mut self, name: &'a str, matcher: &Matcher) -> u32 {
        *self.rs_index.entry(name).or_insert_with(|| {
            let picked = match matcher {
                Matcher::ReplicaSets(names) => names.contains(name),
                Matcher::Labels(_) => false,
            };
            self.replica_sets.push((name, picked));
            (self.replica_sets.len() - 1) as u32
        })
    }
}

impl<'a> Selection<'a> {
    /// Joins the chunks' selections in order, without sorting; `blocked`
    /// holds the known nodes' own reasons, the pods' are added after them.
    fn join(
        known_names: Vec<&'a str>,
        mut blocked: HashMap<u32, BlockedNode>,
        chunks: Vec<ChunkSelection<'_, 'a>>,
    ) -> Self {
        let first_other = known_names.len();
        let mut names = known_names;
        let mut active_pods = vec![0; first_other];
        let mut other: HashMap<&str, u32> = HashMap::new();
        let mut rs_index: HashMap<&str, u32> = HashMap::new();
        let mut out = Selection {
            pods: Vec::with_capacity(chunks.iter().map(|c| c.pods.len()).sum()),
            active: Vec::with_capacity(chunks.iter().map(|c| c.active.len()).sum()),
            inactive: Vec::new(),
            nodes: NodeSlots {
                names: Vec::new(),
                active_pods: Vec::new(),
                blocked: HashMap::new(),
            },
            replica_sets: Vec::new(),
        };
        for chunk in chunks {
            // the chunk's own slots, renumbered
            let moved: Vec<u32> = chunk
                .nodes
                .other_names
                .iter()
                .map(|&n| {
                    *other.entry(n).or_insert_with(|| {
                        names.push(n);
                        active_pods.push(0);
                        (names.len() - 1) as u32
                    })
                })
                .collect();
            let slot = |s: u32| match (s as usize).checked_sub(first_other) {
                Some(i) => moved[i],
                None => s,
            };
            for (s, count) in chunk.nodes.active_pods.iter().enumerate() {
                active_pods[slot(s as u32) as usize] += count;
            }
            for (s, b) in chunk.nodes.blockers {
                let s = slot(s);
                blocked
                    .entry(s)
                    .or_insert_with(|| BlockedNode::new(names[s as usize]))
                    .push(b);
            }
            let rs_moved: Vec<u32> = chunk
                .replica_sets
                .iter()
                .map(|&(n, _)| {
                    *rs_index.entry(n).or_insert_with(|| {
                        out.replica_sets.push(n);
                        (out.replica_sets.len() - 1) as u32
                    })
                })
                .collect();
            let offset = out.pods.len() as u32;
            out.pods.extend(chunk.pods.into_iter().map(|mut p| {
                p.node = slot(p.node);
                p.replica_set = p.replica_set.map(|r| rs_moved[r as usize]);
                p
            }));
            out.active.extend(chunk.active.iter().map(|i| i + offset));
            out.inactive.extend(chunk.inactive);
        }
        out.nodes = NodeSlots {
            names,
            active_pods,
            blocked,
        };
        out
    }
}

/// How the policy's target picks pods.
enum Matcher<'a> {
    /// By labels (the policy's selector, converted once per plan).
    Labels(Selector),
    /// By controlling ReplicaSet: the one named, or a Deployment's.
    ReplicaSets(BTreeSet<&'a str>),
}

impl<'m> Matcher<'m> {
    fn new(policy: &'m NamedPolicy, ns_rs: &[&'m ReplicaSet]) -> Self {
        match &policy.spec.target {
            Target::Selector(sel) => Matcher::Labels(sel.to_selector()),
            Target::Workload(t) if t.kind == TargetKind::ReplicaSet => {
                Matcher::ReplicaSets(BTreeSet::from([t.name.as_str()]))
            }
            Target::Workload(t) => Matcher::ReplicaSets(
                ns_rs
                    .iter()
                    .filter(|rs| owner::of_deployment(rs, &t.name))
                    .filter_map(|rs| rs.metadata.name.as_deref())
                    .collect(),
            ),
        }
    }

    /// Whether the target selects `p`; `rs_picked`: whether it selects
    /// the pods of `p`'s ReplicaSet.
    fn matches(&self, p: &PodRecord, rs_picked: bool) -> bool {
        match self {
            Matcher::Labels(sel) => selects(sel, p.labels()),
            Matcher::ReplicaSets(_) => rs_picked,
        }
    }
}

/// The policy's namespace in `pods` and the pods it selects (sorted by
/// name), leaving out those in `excluded`. With `count_nodes`, also counts
/// every active pod of the snapshot per node. The snapshot is scanned, and
/// the names sorted, as `split` says: in chunks, on the thread pool when
/// parallel, where a thread done early takes over chunks of the other. The
/// result is the same either way, and for any chunk size.
pub(super) fn select<'a>(
    policy: &NamedPolicy,
    pods: &'a [Arc<PodRecord>],
    nodes: &'a [Arc<Node>],
    ns_rs: &[&'a ReplicaSet],
    excluded: &BTreeSet<String>,
    count_nodes: bool,
    split: Split,
) -> Selection<'a> {
    let Split { parallel, chunk } = split;
    let matcher = Matcher::new(policy, ns_rs);
    let ns = policy.namespace.as_str();
    let mut known: HashMap<&str, u32> = HashMap::with_capacity(nodes.len());
    let mut known_names = Vec::with_capacity(nodes.len());
    let mut blocked: HashMap<u32, BlockedNode> = HashMap::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let slot = *known.entry(name).or_insert_with(|| {
            known_names.push(name);
            (known_names.len() - 1) as u32
        });
        for b in node_blockers(node) {
            blocked
                .entry(slot)
                .or_insert_with(|| BlockedNode::new(name))
                .push(b);
        }
    }
    let chunks = map_chunks(parallel, pods, chunk, |part| {
        select_in(ns, part, &known, &matcher, excluded, count_nodes)
    });
    let mut whole = Selection::join(known_names, blocked, chunks);
    let active = std::mem::take(&mut whole.active);
    whole.active = sorted_by_name(&whole.pods, active, parallel, chunk);
    whole
}

fn select_in<'k, 'a>(
    ns: &str,
    pods: &'a [Arc<PodRecord>],
    known: &'k HashMap<&'a str, u32>,
    matcher: &Matcher,
    excluded: &BTreeSet<String>,
    count_nodes: bool,
) -> ChunkSelection<'k, 'a> {
    let mut out = ChunkSelection {
        pods: Vec::new(),
        active: Vec::new(),
        inactive: Vec::new(),
        nodes: ChunkNodes::new(known),
        rs_index: HashMap::new(),
        replica_sets: Vec::new(),
    };
    // which ReplicaSet and whether the target picks: both read only the
    // labels and owners a record shares with its ReplicaSet's other pods,
    // which mostly come one after another
    let mut last: Option<(&Arc<SharedMeta>, Option<u32>, bool)> = None;
    for pod in pods {
        let active = is_pod_active(pod);
        let node_name = node_of(pod);
        // any namespace's pod may keep its node from an autoscaler
        if let Some(b) = pod_blocker(pod) {
            let s = out.nodes.slot(node_name);
            out.nodes.blockers.push((s, b));
        }
        if pod.identity.namespace.as_deref().unwrap_or("") != ns {
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
        let (replica_set, picked) = match last {
            Some((s, replica_set, picked)) if Arc::ptr_eq(s, &pod.shared) => (replica_set, picked),
            _ => {
                let replica_set = pod_rs(pod).map(|r| out.replica_set(&r.name, matcher));
                let rs_picked = replica_set.is_some_and(|r| out.replica_sets[r as usize].1);
                let picked = matcher.matches(pod, rs_picked);
                last = Some((&pod.shared, replica_set, picked));
                (replica_set, picked)
            }
        };
        let p = NsPod {
            pod,
            name: pod.identity.name.as_deref().unwrap_or(""),
            replica_set,
            node,
            active,
        };
        if picked && !excluded.contains(p.name) {
            if active {
                out.active.push(out.pods.len() as u32);
            } else if let Some(name) = &pod.identity.name {
                out.inactive.push(name.clone());
            }
        }
        out.pods.push(p);
    }
    out
}

/// Length of the prefix every name in `names` shares with `first`.
fn common_prefix<'n>(first: &[u8], names: impl Iterator<Item = &'n str>) -> usize {
    let mut common = first.len();
    for n in names.map(str::as_bytes) {
        // most names share the whole prefix: one compare, not one per byte
        if !n.starts_with(&first[..common]) {
            common = n.iter().zip(first).take_while(|(a, b)| a == b).count();
        }
    }
    common
}

/// Indexes of `which` pods sorted by name, stably (on the thread pool when
/// `parallel`). Each name is read once into a key of its 16 bytes after the
/// prefix all names share, so most comparisons are one integer compare
/// instead of two reads of names scattered over the heap.
fn sorted_by_name(pods: &[NsPod], which: Vec<u32>, parallel: bool, chunk: usize) -> Vec<u32> {
    let name = |i: u32| pods[i as usize].name;
    let first = which.first().map_or("", |&i| name(i)).as_bytes();
    let common = map_chunks(parallel, &which, chunk, |c| {
        common_prefix(first, c.iter().map(|&i| name(i)))
    })
    .into_iter()
    .min()
    .unwrap_or(0);
    let key = |_, &i: &u32| {
        let n = name(i);
        let mut window = [0u8; 16];
        let tail = &n.as_bytes()[common..];
        let len = tail.len().min(16);
        window[..len].copy_from_slice(&tail[..len]);
        // zero-padded big-endian bytes order as the bytes do, except that
        // a name ending inside the window ties with one that goes on with
        // NULs; the full compare settles every tie
        (u128::from_be_bytes(window), n, i)
    };
    let order =
        |a: &(u128, &str, u32), b: &(u128, &str, u32)| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1));
    let mut keyed = map_in_order(parallel, &which, key);
    if parallel {
        keyed.par_sort_by(order);
    } else {
        keyed.sort_by(order);
    }
    keyed.into_iter().map(|(_, _, i)| i).collect()
}
