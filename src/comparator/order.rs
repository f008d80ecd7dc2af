//! Upstream's `ActivePodsWithRanks.Less` and the ranking of pods by it:
//! packed records (`packed.rs`) put in order by integer keys (`sort.rs`),
//! then an exact check of whether `Less` was a strict weak order on the
//! given pods (`verify.rs`).

use super::gates::FeatureGates;
use super::key::{GoTime, PodsOnNode, RankKey};
use super::packed::{decide_rec, pack, pack_slim, Level, SortRec, Uids};
use super::slim::SlimPod;
use super::sort;
use super::verify::verify;

/// The rule of `Less` that decided a comparison, numbered as upstream comments do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Rule {
    /// 1. Unassigned < assigned.
    Unassigned,
    /// 2. Pending < Unknown < Running.
    Phase,
    /// 3. Not ready < ready.
    Readiness,
    /// 4. Lower pod-deletion-cost first.
    DeletionCost,
    /// 5. More related pods on the same node first.
    Colocation,
    /// 6. Ready more recently first (log2 buckets when `LogarithmicScaleDown`).
    ReadyTime,
    /// 6. Same log2 bucket of ready time: lower UID first.
    ReadyTimeUid,
    /// 7. More container restarts first.
    Restarts,
    /// 7. Same regular restarts: more sidecar restarts first.
    SidecarRestarts,
    /// 8. Created more recently first (log2 buckets when `LogarithmicScaleDown`).
    CreationTime,
    /// 8. Same log2 bucket of creation time: lower UID first.
    CreationTimeUid,
    /// No rule separates the pods; upstream's order depends on its input order.
    Tie,
}

impl Rule {
    /// A short human description.
    pub fn describe(self) -> &'static str {
        match self {
            Rule::Unassigned => "unassigned pods first",
            Rule::Phase => "Pending < Unknown < Running",
            Rule::Readiness => "not-Ready pods first",
            Rule::DeletionCost => "lower pod-deletion-cost first",
            Rule::Colocation => "more related pods on the node first",
            Rule::ReadyTime => "ready more recently first",
            Rule::ReadyTimeUid => "same ready-time bucket: lower UID first",
            Rule::Restarts => "more restarts first",
            Rule::SidecarRestarts => "more sidecar restarts first",
            Rule::CreationTime => "created more recently first",
            Rule::CreationTimeUid => "same creation-time bucket: lower UID first",
            Rule::Tie => "tie: upstream order depends on informer order",
        }
    }
}

/// The comparator: feature gates plus the `Now` used for log buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparator {
    /// Active feature gates.
    pub gates: FeatureGates,
    /// `ActivePodsWithRanks.Now` in Unix nanoseconds; `None` is Go's zero time.
    pub now: GoTime,
}

/// Upstream's `afterOrZero`: zero times first, otherwise the later time first.
fn after_or_zero<T: Ord>(t1: Option<T>, t2: Option<T>) -> bool {
    match (t1, t2) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a > b,
    }
}

/// What rules 6-8 read, over the two layouts that carry it: a [`RankKey`] and
/// the sort's packed record. One implementation of the rules serves both.
pub(super) trait TailFields {
    /// A non-zero timestamp; only its order and equality matter.
    type Time: Copy + Ord;
    fn ready(&self) -> bool;
    fn ready_time(&self) -> Option<Self::Time>;
    fn ready_bucket(&self) -> i64;
    fn restarts(&self) -> i64;
    fn sidecar_restarts(&self) -> i64;
    fn created(&self) -> Option<Self::Time>;
    fn created_bucket(&self) -> i64;
}

impl TailFields for RankKey<'_> {
    type Time = i128;
    fn ready(&self) -> bool {
        self.ready
    }
    fn ready_time(&self) -> GoTime {
        self.ready_time
    }
    fn ready_bucket(&self) -> i64 {
        self.ready_bucket
    }
    fn restarts(&self) -> i64 {
        self.restarts
    }
    fn sidecar_restarts(&self) -> i64 {
        self.sidecar_restarts
    }
    fn created(&self) -> GoTime {
        self.created
    }
    fn created_bucket(&self) -> i64 {
        self.created_bucket
    }
}

impl Comparator {
    /// Upstream's `Less(i, j)`, returning also the rule that produced the answer
    /// (`Rule::Tie` when it fell through to `return false`).
    pub fn decide(&self, a: &RankKey, b: &RankKey) -> (bool, Rule) {
        match self.decide_head(a, b) {
            Some(r) => r,
            None => self.decide_tail(a, b, || a.uid < b.uid),
        }
    }

    /// Rules 1-5, which form a lexicographic key (see the packed record).
    fn decide_head(&self, a: &RankKey, b: &RankKey) -> Option<(bool, Rule)> {
        // 1. Unassigned < assigned. Upstream: names differ and one is empty,
        // which is exactly "one of the two is empty" (no string compare needed).
        if a.node_name.is_empty() != b.node_name.is_empty() {
            return Some((a.node_name.is_empty(), Rule::Unassigned));
        }
        // 2. PodPending < PodUnknown < PodRunning
        if a.phase_ordinal != b.phase_ordinal {
            return Some((a.phase_ordinal < b.phase_ordinal, Rule::Phase));
        }
        // 3. Not ready < ready
        if a.ready != b.ready {
            return Some((!a.ready, Rule::Readiness));
        }
        // 4. lower pod-deletion-cost < higher pod-deletion cost
        if self.gates.pod_deletion_cost && a.cost.value != b.cost.value {
            return Some((a.cost.value < b.cost.value, Rule::DeletionCost));
        }
        // 5. Doubled up < not doubled up
        if a.rank != b.rank {
            return Some((a.rank > b.rank, Rule::Colocation));
        }
        None
    }

    /// Rules 6-8, for pods equal under rules 1-5. `uid_less` answers
    /// `a.uid < b.uid` (the sort passes a cheaper equivalent).
    #[inline]
    pub(super) fn decide_tail<T: TailFields>(
        &self,
        a: &T,
        b: &T,
        uid_less: impl Fn() -> bool,
    ) -> (bool, Rule) {
        // 6. Been ready for empty time < less time < more time
        if a.ready() && b.ready() && a.ready_time() != b.ready_time() {
            let buckets = (a.ready_bucket(), b.ready_bucket());
            let (t1, t2) = (a.ready_time(), b.ready_time());
            if let Some(r) = self.time_rule(t1, t2, buckets, true, &uid_less) {
                return r;
            }
        }
        // 7. Pods with containers with higher restart counts < lower restart counts
        if a.restarts() != b.restarts() {
            return (a.restarts() > b.restarts(), Rule::Restarts);
        }
        if a.sidecar_restarts() != b.sidecar_restarts() {
            return (
                a.sidecar_restarts() > b.sidecar_restarts(),
                Rule::SidecarRestarts,
            );
        }
        // 8. Empty creation time pods < newer pods < older pods
        if a.created() != b.created() {
            let buckets = (a.created_bucket(), b.created_bucket());
            let (t1, t2) = (a.created(), b.created());
            if let Some(r) = self.time_rule(t1, t2, buckets, false, &uid_less) {
                return r;
            }
        }
        (false, Rule::Tie)
    }

    /// Rules 6 and 8 once the two times are known to differ.
    #[inline]
    fn time_rule<T: Ord>(
        &self,
        t1: Option<T>,
        t2: Option<T>,
        (r1, r2): (i64, i64),
        ready: bool,
        uid_less: &impl Fn() -> bool,
    ) -> Option<(bool, Rule)> {
        let (plain, uid) = if ready {
            (Rule::ReadyTime, Rule::ReadyTimeUid)
        } else {
            (Rule::CreationTime, Rule::CreationTimeUid)
        };
        if !self.gates.logarithmic_scale_down || self.now.is_none() || t1.is_none() || t2.is_none()
        {
            return Some((after_or_zero(t1, t2), plain));
        }
        // upstream subtracts the buckets; they are small, so comparing is the same
        match r1.cmp(&r2) {
            std::cmp::Ordering::Equal => Some((uid_less(), uid)),
            o => Some((o == std::cmp::Ordering::Less, plain)),
        }
    }

    /// Upstream's `Less(i, j)`.
    pub fn less(&self, a: &RankKey, b: &RankKey) -> bool {
        self.decide(a, b).0
    }

    /// True when the log-bucket UID tie-break is in force for a time that is
    /// not zero.
    pub(super) fn uid_tiebreak(&self) -> bool {
        self.gates.logarithmic_scale_down && self.now.is_some()
    }
}

/// Pods whose mutual order upstream cannot settle consistently.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ambiguity {
    /// Indices (into the keys given) of the pods involved.
    pub pods: Vec<usize>,
    /// Which rule's UID tie-break forms the cycle.
    pub rule: Rule,
}

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
