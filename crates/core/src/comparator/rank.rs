//! Pods ranked as upstream's `sort.Sort(ActivePodsWithRanks)` would: packed
//! records (`packed.rs`) put in order by integer keys (`sort.rs`), then an
//! exact check of whether `Less` (`order.rs`) was a strict weak order on the
//! given pods (`verify.rs`).

use super::key::{PodsOnNode, RankKey};
use super::order::{Ambiguity, Comparator, Rule};
use super::packed::{decide_rec, pack, pack_slim, Level, SortRec, Uids};
use super::slim::SlimPod;
use super::sort;
use super::verify::verify;

/// The result of ordering pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranking {
    /// Indices into the keys, first deleted first.
    pub order: Vec<usize>,
    /// For each adjacent pair `order[k]`, `order[k+1]`: the rule that decided.
    pub decided_by: Vec<Rule>,
    /// Equivalence block of each position: equal numbers tie upstream.
    pub block: Vec<usize>,
    /// Set when `Less` is not a strict weak order on these pods: upstream's
    /// result then depends on the order the informer listed them in.
    pub ambiguity: Option<Ambiguity>,
}

impl Ranking {
    /// Upstream's `getPodsToDelete(filtered, related, diff)`: the first `diff`
    /// pods of the order; when `diff` reaches the pod count upstream does not
    /// sort and deletes every pod. Returns indices into the keys.
    pub fn victims(&self, diff: usize) -> Vec<usize> {
        if diff >= self.order.len() {
            return (0..self.order.len()).collect();
        }
        self.order[..diff].to_vec()
    }

    /// [`Ranking::victims`] in deletion order, as the CLI and the plan list
    /// them: the first `diff` pods of the order. When `diff` reaches the pod
    /// count upstream deletes every pod without sorting, so the same pods go;
    /// listed in the order, not the input's (names, to a reader).
    pub fn victims_in_order(&self, diff: usize) -> Vec<usize> {
        self.order[..diff.min(self.order.len())].to_vec()
    }

    /// Whether the cut after the first `n` pods falls inside a tie, so which of
    /// the tied pods upstream deletes depends on its input order.
    pub fn tie_at_cut(&self, n: usize) -> bool {
        n > 0 && n < self.order.len() && self.block[n - 1] == self.block[n]
    }

    /// Runs of two or more pods upstream ranks equal, as position ranges in
    /// `order`: among them upstream keeps its informer's list order.
    pub fn ties(&self) -> Vec<std::ops::Range<usize>> {
        let mut out = Vec::new();
        let mut start = 0;
        for pos in 1..=self.block.len() {
            if pos == self.block.len() || self.block[pos] != self.block[start] {
                if pos - start > 1 {
                    out.push(start..pos);
                }
                start = pos;
            }
        }
        out
    }
}

/// Orders pods as upstream's `sort.Sort(ActivePodsWithRanks)` would, given
/// keys with ranks and buckets already filled in. Ties keep input order.
pub fn rank_pods(cmp: &Comparator, keys: &[RankKey]) -> Ranking {
    rank_records(cmp, pack(cmp, keys), keys)
}

/// [`rank_pods`] for slim pods, ranked by colocation with `on_node`, without
/// building their [`RankKey`]s: the same ranking as `rank_pods` gives for
/// `RankKey::from_slim(p).with_now(cmp.now)` with ranks from `on_node`.
pub fn rank_slim(cmp: &Comparator, pods: &[&SlimPod], on_node: &PodsOnNode) -> Ranking {
    match pack_slim(cmp, pods, on_node) {
        Some(recs) => rank_records(cmp, recs, pods),
        // a time beyond i64 nanoseconds: keys narrow it
        None => {
            let mut keys: Vec<RankKey> = pods
                .iter()
                .map(|p| RankKey::from_slim(p).with_now(cmp.now))
                .collect();
            on_node.assign(&mut keys);
            rank_pods(cmp, &keys)
        }
    }
}

fn rank_records(cmp: &Comparator, recs: Vec<SortRec>, uids: &(impl Uids + ?Sized)) -> Ranking {
    let sorted = sort::sort(cmp, uids, recs);
    let mut decided_by = Vec::with_capacity(sorted.len().saturating_sub(1));
    let mut block = Vec::with_capacity(sorted.len());
    let mut b = 0;
    for (pos, r) in sorted.iter().enumerate() {
        if pos > 0 {
            let (less, rule) = decide_rec(cmp, uids, &sorted[pos - 1], r);
            decided_by.push(if less { rule } else { Rule::Tie });
            if less {
                b += 1;
            }
        }
        block.push(b);
    }
    let items: Vec<(usize, usize)> = (0..sorted.len()).zip(block.iter().copied()).collect();
    let ambiguity = verify(cmp, uids, &sorted, &items, Level::Ready, Rule::ReadyTimeUid)
        .err()
        .map(|mut a| {
            // positions in the sorted records back to indices into the keys
            for p in &mut a.pods {
                *p = sorted[*p].idx as usize;
            }
            a
        });
    Ranking {
        order: sorted.iter().map(|r| r.idx as usize).collect(),
        decided_by,
        block,
        ambiguity,
    }
}

/// Test hook: `Less` on the packed records of `keys`, for the pods at `i`, `j`.
#[cfg(test)]
pub(crate) fn check_fast_less(cmp: &Comparator, keys: &[RankKey], i: usize, j: usize) -> bool {
    let recs = pack(cmp, keys);
    decide_rec(cmp, keys, &recs[i], &recs[j]).0
}
