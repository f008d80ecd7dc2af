//! A pure port of the ReplicaSet controller's scale-down order
//! (`pkg/controller/controller_utils.go` `ActivePodsWithRanks.Less`,
//! `replica_set.go` `getPodsToDelete`), with no I/O and no client.

pub mod cost;
pub mod gates;
pub mod gomath;
pub mod key;
pub mod order;
mod packed;
pub mod rank;
pub mod slim;
mod sort;
pub mod syncs;
mod verify;

pub use cost::{parse_deletion_cost, CostProblem, ParsedCost};
pub use gates::{
    choose as choose_gates, FeatureGates, GateChoice, GateError, GateSource, KubeVersion,
};
pub use key::{
    assign_ranks, inactive_reason, is_pod_active, is_pod_ready, GoTime, PodsOnNode, RankKey,
};
pub use order::{Ambiguity, Comparator, Rule};
pub use rank::{rank_pods, rank_slim, Ranking};
pub use slim::{ControllerRef, SlimPod, Uid};
pub use syncs::{victims_in_syncs, Syncs, BURST_REPLICAS};

/// Active pods of one ReplicaSet in the order upstream deletes them.
#[derive(Debug, Clone)]
pub struct OrderedPods<'a> {
    /// Keys of the pods, in the order they were given.
    pub keys: Vec<RankKey<'a>>,
    /// The order, ties and ambiguity over `keys`.
    pub ranking: Ranking,
}

impl<'a> OrderedPods<'a> {
    /// Keys in deletion order.
    pub fn in_order(&self) -> impl Iterator<Item = &RankKey<'a>> {
        self.ranking.order.iter().map(|&i| &self.keys[i])
    }

    /// See [`Ranking::victims`]; indices into `keys`.
    pub fn victims(&self, diff: usize) -> Vec<usize> {
        self.ranking.victims(diff)
    }
}

/// Orders the given pods, which must already be active (see [`is_pod_active`]),
/// ranking them by colocation against `related` (upstream: every pod selected by
/// the ReplicaSets that share this one's controller; empty when the ReplicaSet
/// has no controller). Tests only: the planner keys and ranks its pods itself.
#[cfg(test)]
pub(crate) fn order_pods<'a, P: crate::pod::PodView + 'a>(
    cmp: &Comparator,
    pods: impl IntoIterator<Item = &'a P>,
    related: impl IntoIterator<Item = &'a P>,
) -> OrderedPods<'a> {
    let mut keys: Vec<RankKey> = pods
        .into_iter()
        .map(|p| RankKey::from_pod(p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, related);
    let ranking = rank_pods(cmp, &keys);
    OrderedPods { keys, ranking }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod upstream_tests;
