//! Warnings for what plans without error yet cannot tell pods apart: a
//! `zoneBalance` whose `topologyKey` no node of the selected pods carries
//! (every pod in zone "(none)"), a `nodeConsolidation` whose every node
//! holds `maxPods` pods or more (the counts all read alike), and a scale-down
//! by more pods than a ReplicaSet has (it loses every one). Pure, and read
//! from the plan's inputs: the costing itself is left as it is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::selection::{NodeSlots, NsPod};
use super::{NamedPolicy, ReplicaSetPlan};
use crate::policy::validate as signal;
use crate::policy::ValidatedSignal;
use crate::text::{capped_list, LISTED};

/// The label a node's zone is read from unless a policy says otherwise.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Every such warning for one plan: `pods` are the selected pods, `slots`
/// their nodes' slots (with active pod counts when the policy consolidates),
/// `replica_sets` the orders predicted.
pub(super) fn warnings(
    policy: &NamedPolicy,
    pods: &[&NsPod],
    slots: &NodeSlots,
    nodes: &[Arc<Node>],
    replica_sets: &[ReplicaSetPlan],
    scale_down_by: Option<usize>,
) -> Vec<String> {
    let mut out = Vec::new();
    // the slots of the selected pods' nodes, unscheduled pods left out
    let used: BTreeSet<u32> = pods
        .iter()
        .map(|p| p.node)
        .filter(|&s| !slots.names[s as usize].is_empty())
        .collect();
    for (index, s) in policy.spec.signals.iter().enumerate() {
        match s {
            ValidatedSignal::ZoneBalance(z) => {
                out.extend(zone_key_missing(index, z, &used, slots, nodes));
            }
            ValidatedSignal::NodeConsolidation(c) => {
                out.extend(every_node_full(index, c, &used, slots));
            }
            _ => {}
        }
    }
    out.extend(scale_down_past_the_pods(replica_sets, scale_down_by));
    out
}

/// `zoneBalance` over nodes none of which carries its `topologyKey`: every
/// pod reads zone "(none)". Nodes the snapshot lacks are left out (a
/// warning names them already).
fn zone_key_missing(
    index: usize,
    z: &signal::ZoneBalance,
    used: &BTreeSet<u32>,
    slots: &NodeSlots,
    nodes: &[Arc<Node>],
) -> Option<String> {
    let names: BTreeSet<&str> = used.iter().map(|&s| slots.names[s as usize]).collect();
    let labels: Vec<&BTreeMap<String, String>> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|n| names.contains(n))
        })
        .map(|n| n.metadata.labels.as_ref())
        .map(|l| l.unwrap_or(&EMPTY))
        .collect();
    if labels.is_empty() || labels.iter().any(|l| l.contains_key(&z.topology_key)) {
        return None;
    }
    let keys: BTreeSet<&str> = labels
        .iter()
        .flat_map(|l| l.keys().map(String::as_str))
        .collect();
    let keys: Vec<&str> = keys.into_iter().collect();
    let hint = match crate::policy::strict::closest(&z.topology_key, &keys) {
        Some(k) => format!("; did you mean {k}?"),
        None if keys.contains(&ZONE_LABEL) => format!("; the nodes carry {ZONE_LABEL}"),
        None => String::new(),
    };
    Some(format!(
        "spec.signals[{index}] (zoneBalance): no node of the selected pods carries the label {} \
         (topologyKey), so every pod is in zone (none) and the signal tells no pod apart{hint}",
        z.topology_key
    ))
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// `nodeConsolidation` where every node that may be removed holds `maxPods`
/// pods or more: counted as `maxPods` each, they tie, and the node order
/// falls back to the hash of their names, not the emptiest first.
fn every_node_full(
    index: usize,
    c: &signal::NodeConsolidation,
    used: &BTreeSet<u32>,
    slots: &NodeSlots,
) -> Option<String> {
    let counts: Vec<i64> = used
        .iter()
        .filter(|s| !slots.blocked.contains_key(s))
        .map(|&s| slots.active_pods[s as usize])
        .collect();
    let max_pods = i64::from(c.max_pods);
    if counts.len() < 2 || counts.iter().any(|&n| n < max_pods) {
        return None;
    }
    let busiest = counts.iter().copied().max().unwrap_or(max_pods);
    let hint = if busiest > max_pods {
        format!("; raise maxPods to {busiest} (the busiest node's count) to tell them apart")
    } else {
        String::new()
    };
    Some(format!(
        "spec.signals[{index}] (nodeConsolidation): each of the {} nodes of the selected pods \
         holds maxPods ({max_pods}) pods or more, so their counts tell no node apart: nodes are \
         drained in the order of their names' hashes, not the emptiest first{hint}",
        counts.len()
    ))
}

/// A scale-down by more pods than a ReplicaSet has: it goes to 0, every pod
/// deleted.
fn scale_down_past_the_pods(
    replica_sets: &[ReplicaSetPlan],
    scale_down_by: Option<usize>,
) -> Option<String> {
    let n = scale_down_by?;
    // pods without a ReplicaSet ("(none)") are scaled by nothing
    let short: Vec<(&str, usize)> = replica_sets
        .iter()
        .filter(|rs| rs.name != "(none)" && rs.predicted.len() < n)
        .map(|rs| (rs.name.as_str(), rs.predicted.len()))
        .collect();
    match short.as_slice() {
        [] => None,
        [(name, pods)] => Some(format!(
            "scale down by {n}: ReplicaSet {name} has {pods} pod(s), fewer than that: it goes \
             to 0, every pod deleted"
        )),
        many => {
            Some(format!(
            "scale down by {n}: {} ReplicaSets have fewer pods than that and go to 0, every pod \
             deleted: {}",
            many.len(),
            capped_list(many.iter().map(|(name, pods)| format!("{name} ({pods})")), LISTED)
        ))
        }
    }
}
