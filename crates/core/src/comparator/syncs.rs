//! A scale-in as the ReplicaSet controller runs it: one sync deletes at most
//! `burstReplicas` pods (`replica_set.go`, `manageReplicas`: `diff` is
//! capped at `rsc.burstReplicas`, 500 in kube-controller-manager), and the
//! next sync ranks the pods left again, with the colocation counts (rule 5)
//! as the deletions left them. So a scale-in by more than 500 is not the
//! first pods of one ranking: after each batch the pods on the nodes that
//! lost pods rank lower, and without costs that tell nodes apart the next
//! batch takes its pods elsewhere.

use std::collections::HashMap;

use super::{rank_pods, Comparator, RankKey, Ranking};

/// The most pods one sync of the ReplicaSet controller deletes
/// (kube-controller-manager's `burstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// The pods a scale-in deletes, sync by sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Syncs {
    /// Indices into the keys, in the order deleted: each sync's victims in
    /// that sync's order.
    pub victims: Vec<usize>,
    /// The syncs it takes (0 for a scale-in by 0).
    pub syncs: usize,
    /// Some sync's cut falls inside a tie: which of the tied pods go
    /// depends on the controller's list order.
    pub tie_at_cut: bool,
}

/// The victims of a scale-in by `diff` over `keys` (colocation ranks as the
/// controller computes them before the first sync), in syncs of at most
/// `burst` pods; `first` is the ranking of all `keys`. A sync that deletes
/// every pod left does not sort (upstream's `getPodsToDelete`); its pods
/// are listed in the order it would have sorted them.
pub fn victims_in_syncs(
    cmp: &Comparator,
    keys: &[RankKey],
    first: &Ranking,
    diff: usize,
    burst: usize,
) -> Syncs {
    let burst = burst.max(1);
    let diff = diff.min(keys.len());
    let mut victims: Vec<usize> = Vec::with_capacity(diff);
    let mut gone = vec![false; keys.len()];
    let mut syncs = 0;
    let mut tie_at_cut = false;
    // pods deleted so far, per node: each lowers the rank of the pods left there
    let mut deleted_on: HashMap<&str, i64> = HashMap::new();
    while victims.len() < diff {
        let take = (diff - victims.len()).min(burst);
        let (order, tie) = if syncs == 0 {
            (first.order.clone(), first.tie_at_cut(take))
        } else {
            let left: Vec<usize> = (0..keys.len()).filter(|&i| !gone[i]).collect();
            let reranked: Vec<RankKey> = left
                .iter()
                .map(|&i| {
                    let mut k = keys[i].clone();
                    k.rank -= deleted_on.get(&*k.node_name).copied().unwrap_or(0);
                    k
                })
                .collect();
            let r = rank_pods(cmp, &reranked);
            let order = r.order.iter().map(|&j| left[j]).collect();
            (order, r.tie_at_cut(take))
        };
        tie_at_cut |= tie;
        for &i in order.iter().take(take) {
            gone[i] = true;
            *deleted_on.entry(&keys[i].node_name).or_default() += 1;
            victims.push(i);
        }
        syncs += 1;
    }
    Syncs {
        victims,
        syncs,
        tie_at_cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::{FeatureGates, GoTime, ParsedCost};
    use std::borrow::Cow;

    fn key(name: &str, node: &str, rank: i64, cost: i32) -> RankKey<'static> {
        RankKey {
            namespace: Cow::Borrowed("ns"),
            name: Cow::Owned(name.to_string()),
            uid: Cow::Owned(format!("uid-{name}")),
            node_name: Cow::Owned(node.to_string()),
            phase: Some(Cow::Borrowed("Running")),
            phase_ordinal: 2,
            ready: true,
            cost: ParsedCost {
                value: cost,
                problem: None,
            },
            rank,
            ready_time: GoTime::default(),
            restarts: 0,
            sidecar_restarts: 0,
            created: GoTime::default(),
            ready_bucket: 0,
            created_bucket: 0,
        }
    }

    fn cmp() -> Comparator {
        Comparator {
            gates: FeatureGates::default(),
            now: GoTime::default(),
        }
    }

    /// Equal costs: one ranking takes the busiest node's pods first, and
    /// keeps taking them; in syncs of 2, the first sync lowers that node's
    /// rank and the second takes pods elsewhere.
    #[test]
    fn a_later_sync_ranks_with_the_counts_the_first_left() {
        let mut keys = Vec::new();
        for i in 0..3 {
            keys.push(key(&format!("a{i}"), "a", 3, 0));
        }
        for i in 0..2 {
            keys.push(key(&format!("b{i}"), "b", 2, 0));
        }
        let first = rank_pods(&cmp(), &keys);
        let one = victims_in_syncs(&cmp(), &keys, &first, 3, 500);
        let nodes = |v: &[usize]| -> Vec<String> {
            v.iter().map(|&i| keys[i].node_name.to_string()).collect()
        };
        assert_eq!(nodes(&one.victims), ["a", "a", "a"]);
        assert_eq!(one.syncs, 1);
        let two = victims_in_syncs(&cmp(), &keys, &first, 3, 2);
        assert_eq!(two.syncs, 2);
        // after two of a's pods go, a holds 1 and b 2: b's go next
        assert_eq!(nodes(&two.victims), ["a", "a", "b"]);
    }

    /// Costs that tell nodes apart decide before the colocation rank: the
    /// syncs change nothing.
    #[test]
    fn costs_make_the_syncs_irrelevant() {
        let mut keys = Vec::new();
        for i in 0..3 {
            keys.push(key(&format!("a{i}"), "a", 3, 10));
        }
        for i in 0..2 {
            keys.push(key(&format!("b{i}"), "b", 2, 5));
        }
        let first = rank_pods(&cmp(), &keys);
        let one = victims_in_syncs(&cmp(), &keys, &first, 4, 500);
        let many = victims_in_syncs(&cmp(), &keys, &first, 4, 1);
        assert_eq!(one.victims, many.victims);
        assert_eq!(many.syncs, 4);
    }

    #[test]
    fn a_scale_in_by_more_than_the_pods_takes_them_all() {
        let keys = vec![key("a", "n", 1, 0)];
        let first = rank_pods(&cmp(), &keys);
        let s = victims_in_syncs(&cmp(), &keys, &first, 5, 500);
        assert_eq!(s.victims, vec![0]);
        assert_eq!(s.syncs, 1);
        let none = victims_in_syncs(&cmp(), &keys, &first, 0, 500);
        assert!(none.victims.is_empty());
        assert_eq!(none.syncs, 0);
    }
}
