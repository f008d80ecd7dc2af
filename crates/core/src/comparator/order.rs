//! Upstream's `ActivePodsWithRanks.Less`: its rules and the comparison of
//! two pods. The ranking of many (`rank.rs`) uses it through packed records.

use super::gates::FeatureGates;
use super::key::{GoTime, RankKey};

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
