//! Upstream's `ActivePodsWithRanks.Less`, a sort that never panics on it, and
//! an exact check of whether it was a strict weak order on the given pods.

use std::collections::BTreeMap;

use super::gates::FeatureGates;
use super::key::{GoTime, PodKey};

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
fn after_or_zero(t1: GoTime, t2: GoTime) -> bool {
    match (t1, t2) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a > b,
    }
}

impl Comparator {
    /// Upstream's `Less(i, j)`, returning also the rule that produced the answer
    /// (`Rule::Tie` when it fell through to `return false`).
    pub fn decide(&self, a: &PodKey, b: &PodKey) -> (bool, Rule) {
        match self.decide_head(a, b) {
            Some(r) => r,
            None => self.decide_tail(&Tail::of(a), &Tail::of(b), || a.uid < b.uid),
        }
    }

    /// Rules 1-5, which form a lexicographic key (see [`FastKey`]).
    fn decide_head(&self, a: &PodKey, b: &PodKey) -> Option<(bool, Rule)> {
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
    fn decide_tail(&self, a: &Tail, b: &Tail, uid_less: impl Fn() -> bool) -> (bool, Rule) {
        // 6. Been ready for empty time < less time < more time
        if a.ready && b.ready && a.ready_time != b.ready_time {
            let buckets = (a.ready_bucket, b.ready_bucket);
            if let Some(r) = self.time_rule(a.ready_time, b.ready_time, buckets, true, &uid_less) {
                return r;
            }
        }
        // 7. Pods with containers with higher restart counts < lower restart counts
        if a.restarts != b.restarts {
            return (a.restarts > b.restarts, Rule::Restarts);
        }
        if a.sidecar_restarts != b.sidecar_restarts {
            return (
                a.sidecar_restarts > b.sidecar_restarts,
                Rule::SidecarRestarts,
            );
        }
        // 8. Empty creation time pods < newer pods < older pods
        if a.created != b.created {
            let buckets = (a.created_bucket, b.created_bucket);
            if let Some(r) = self.time_rule(a.created, b.created, buckets, false, &uid_less) {
                return r;
            }
        }
        (false, Rule::Tie)
    }

    /// Rules 6 and 8 once the two times are known to differ.
    fn time_rule(
        &self,
        t1: GoTime,
        t2: GoTime,
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
        let diff = r1 - r2;
        if diff == 0 {
            return Some((uid_less(), uid));
        }
        Some((diff < 0, plain))
    }

    /// Upstream's `Less(i, j)`.
    pub fn less(&self, a: &PodKey, b: &PodKey) -> bool {
        self.decide(a, b).0
    }

    /// True when the log-bucket UID tie-break is in force for these two times.
    fn uid_tiebreak(&self, t: GoTime) -> bool {
        self.gates.logarithmic_scale_down && self.now.is_some() && t.is_some()
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
    /// Whether the cut after the first `n` pods falls inside a tie, so which of
    /// the tied pods upstream deletes depends on its input order.
    pub fn tie_at_cut(&self, n: usize) -> bool {
        n > 0 && n < self.order.len() && self.block[n - 1] == self.block[n]
    }
}

/// The fields rules 6-8 read (copied out of a [`PodKey`]; the copy is cheap
/// and lets `decide` and the sort share one implementation of the rules).
#[derive(Debug, Clone, Copy)]
struct Tail {
    ready: bool,
    ready_time: GoTime,
    ready_bucket: i64,
    restarts: i64,
    sidecar_restarts: i64,
    created: GoTime,
    created_bucket: i64,
}

impl Tail {
    fn of(k: &PodKey) -> Self {
        Self {
            ready: k.ready,
            ready_time: k.ready_time,
            ready_bucket: k.ready_bucket,
            restarts: k.restarts,
            sidecar_restarts: k.sidecar_restarts,
            created: k.created,
            created_bucket: k.created_bucket,
        }
    }
}

/// Rules 1-5 packed into one integer, plus the first 8 UID bytes: the sort
/// compares these instead of strings. Same answers as [`Comparator::less`].
#[derive(Debug, Clone, Copy)]
struct FastKey {
    /// assigned (1 bit), phase ordinal (8), ready (1), cost (32, 0 when the
    /// gate is off), then rank reversed (64): smaller means deleted first.
    head: u128,
    /// First 8 bytes of the UID, big-endian, zero-padded: ordered like the
    /// strings whenever the two differ.
    uid8: u64,
}

impl FastKey {
    fn new(cmp: &Comparator, k: &PodKey) -> Self {
        // order-preserving maps of signed values to unsigned ones
        let cost = if cmp.gates.pod_deletion_cost {
            (k.cost.value as u32) ^ (1 << 31)
        } else {
            0
        };
        let rank_rev = !((k.rank as u64) ^ (1 << 63));
        let head = (u128::from(!k.node_name.is_empty()) << 105)
            | (u128::from(k.phase_ordinal) << 97)
            | (u128::from(k.ready) << 96)
            | (u128::from(cost) << 64)
            | u128::from(rank_rev);
        let mut b = [0u8; 8];
        let n = k.uid.len().min(8);
        b[..n].copy_from_slice(&k.uid.as_bytes()[..n]);
        Self {
            head,
            uid8: u64::from_be_bytes(b),
        }
    }
}

/// `cmp.less(&keys[i], &keys[j])`, computed from the precomputed [`FastKey`]s.
fn fast_less(cmp: &Comparator, keys: &[PodKey], fast: &[FastKey], i: usize, j: usize) -> bool {
    let (fa, fb) = (&fast[i], &fast[j]);
    if fa.head != fb.head {
        return fa.head < fb.head;
    }
    cmp.decide_tail(&Tail::of(&keys[i]), &Tail::of(&keys[j]), || {
        if fa.uid8 != fb.uid8 {
            fa.uid8 < fb.uid8
        } else {
            keys[i].uid < keys[j].uid
        }
    })
    .0
}

/// Stable bottom-up merge sort driven only by `less`; terminates and never
/// panics whatever `less` answers (std's sort may panic on a non-total order).
fn merge_sort(n: usize, mut less: impl FnMut(usize, usize) -> bool) -> Vec<usize> {
    let mut a: Vec<usize> = (0..n).collect();
    let mut buf = vec![0usize; n];
    let mut width = 1;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j, mut k) = (start, mid, start);
            while i < mid && j < end {
                // take from the right only when strictly less: stability
                if less(a[j], a[i]) {
                    buf[k] = a[j];
                    j += 1;
                } else {
                    buf[k] = a[i];
                    i += 1;
                }
                k += 1;
            }
            buf[k..k + (mid - i)].copy_from_slice(&a[i..mid]);
            k += mid - i;
            buf[k..k + (end - j)].copy_from_slice(&a[j..end]);
            start = end;
        }
        std::mem::swap(&mut a, &mut buf);
        width *= 2;
    }
    a
}

/// Orders pods as upstream's `sort.Sort(ActivePodsWithRanks)` would, given
/// keys with ranks and buckets already filled in. Ties keep input order.
pub fn rank_pods(cmp: &Comparator, keys: &[PodKey]) -> Ranking {
    let fast: Vec<FastKey> = keys.iter().map(|k| FastKey::new(cmp, k)).collect();
    let order = merge_sort(keys.len(), |i, j| fast_less(cmp, keys, &fast, i, j));
    let mut decided_by = Vec::with_capacity(order.len().saturating_sub(1));
    let mut block = Vec::with_capacity(order.len());
    let mut b = 0;
    for (pos, &i) in order.iter().enumerate() {
        if pos > 0 {
            let (less, rule) = cmp.decide(&keys[order[pos - 1]], &keys[i]);
            decided_by.push(if less { rule } else { Rule::Tie });
            if less {
                b += 1;
            }
        }
        block.push(b);
    }
    let items: Vec<(usize, usize)> = order.iter().copied().zip(block.iter().copied()).collect();
    let ambiguity = verify(cmp, keys, &items, Level::Ready, Rule::ReadyTimeUid).err();
    Ranking {
        order,
        decided_by,
        block,
        ambiguity,
    }
}

/// The two levels of `Less` that end in a UID tie-break, and the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Rules 1-6.
    Ready,
    /// Rules 7-8.
    Creation,
    /// Nothing left: all remaining pairs are ties.
    Done,
}

/// A total-preorder key for one level; pods with equal keys are compared by
/// the level's UID tie-break (when `tiebreak_time` is `Some`) or the next level.
type LevelKey = (i64, i64, i64, i64, i64, i64, i128);

fn time_key(cmp: &Comparator, t: GoTime, bucket: i64) -> (i64, i128) {
    match t {
        None => (0, 0),
        Some(_) if cmp.uid_tiebreak(t) => (1, i128::from(bucket)),
        // afterOrZero: the later time first
        Some(t) => (1, -t),
    }
}

fn level_key(cmp: &Comparator, k: &PodKey, level: Level) -> (LevelKey, Option<i128>) {
    match level {
        Level::Ready => {
            let cost = if cmp.gates.pod_deletion_cost {
                i64::from(k.cost.value)
            } else {
                0
            };
            let (tz, tv) = if k.ready {
                time_key(cmp, k.ready_time, k.ready_bucket)
            } else {
                (0, 0)
            };
            let tb = if k.ready && cmp.uid_tiebreak(k.ready_time) {
                k.ready_time
            } else {
                None
            };
            (
                (
                    i64::from(!k.node_name.is_empty()),
                    i64::from(k.phase_ordinal),
                    i64::from(k.ready),
                    cost,
                    -k.rank,
                    tz,
                    tv,
                ),
                tb,
            )
        }
        Level::Creation => {
            let (tz, tv) = time_key(cmp, k.created, k.created_bucket);
            let tb = if cmp.uid_tiebreak(k.created) {
                k.created
            } else {
                None
            };
            ((-k.restarts, -k.sidecar_restarts, tz, 0, 0, 0, tv), tb)
        }
        Level::Done => ((0, 0, 0, 0, 0, 0, 0), None),
    }
}

/// Checks that the sorted `items` (pod index, equivalence block) describe
/// `Less` exactly; since a block sequence is a strict weak order, this holds
/// iff `Less` is one on these pods. O(n log n).
fn verify(
    cmp: &Comparator,
    keys: &[PodKey],
    items: &[(usize, usize)],
    level: Level,
    context: Rule,
) -> Result<(), Ambiguity> {
    let fail = |items: &[(usize, usize)], rule| Ambiguity {
        pods: items.iter().map(|&(i, _)| i).collect(),
        rule,
    };
    let uid_rule = if level == Level::Ready {
        Rule::ReadyTimeUid
    } else {
        Rule::CreationTimeUid
    };
    if items.len() < 2 {
        return Ok(());
    }
    if level == Level::Done {
        // every remaining pair is a tie, so all must share one block
        return if items.iter().all(|&(_, b)| b == items[0].1) {
            Ok(())
        } else {
            Err(fail(items, context))
        };
    }
    let next = if level == Level::Ready {
        Level::Creation
    } else {
        Level::Done
    };
    let lk: Vec<(LevelKey, Option<i128>)> = items
        .iter()
        .map(|&(i, _)| level_key(cmp, &keys[i], level))
        .collect();
    let mut start = 0;
    while start < items.len() {
        let mut end = start + 1;
        while end < items.len() && lk[end].0 == lk[start].0 {
            end += 1;
        }
        if end < items.len() {
            // key must increase across groups, and blocks must change with it
            if lk[end].0 < lk[end - 1].0 || items[end].1 == items[end - 1].1 {
                return Err(fail(&items[start..=end], context));
            }
        }
        let group = &items[start..end];
        if lk[start].1.is_some() {
            check_uid_group(keys, group, &lk[start..end], uid_rule)?;
            let mut classes: BTreeMap<i128, Vec<(usize, usize)>> = BTreeMap::new();
            for (it, k) in group.iter().zip(&lk[start..end]) {
                classes.entry(k.1.unwrap_or(0)).or_default().push(*it);
            }
            for class in classes.values() {
                verify(cmp, keys, class, next, uid_rule)?;
            }
        } else {
            verify(cmp, keys, group, next, context)?;
        }
        start = end;
    }
    Ok(())
}

/// Within a group where different times compare by UID: pods of different
/// time classes must be ordered by UID across blocks and share a UID within one.
fn check_uid_group(
    keys: &[PodKey],
    group: &[(usize, usize)],
    lk: &[(LevelKey, Option<i128>)],
    rule: Rule,
) -> Result<(), Ambiguity> {
    let fail = || Ambiguity {
        pods: group.iter().map(|&(i, _)| i).collect(),
        rule,
    };
    let class = |p: usize| lk[p].1.unwrap_or(0);
    let uid = |p: usize| keys[group[p].0].uid.as_str();
    // block ranges inside the group
    let mut ranges = Vec::new();
    let mut s = 0;
    for p in 1..=group.len() {
        if p == group.len() || group[p].1 != group[s].1 {
            ranges.push(s..p);
            s = p;
        }
    }
    // same block, different classes: UIDs must be equal
    for r in &ranges {
        let first_class = class(r.start);
        if r.clone().any(|p| class(p) != first_class) && r.clone().any(|p| uid(p) != uid(r.start)) {
            return Err(fail());
        }
    }
    // earlier block, different class: strictly lower UID than every later one
    let mut min1: Option<(&str, i128)> = None;
    let mut min2: Option<(&str, i128)> = None;
    for r in ranges.iter().rev() {
        for p in r.clone() {
            let c = class(p);
            let other = match (min1, min2) {
                (Some(m), _) if m.1 != c => Some(m.0),
                (_, Some(m)) => Some(m.0),
                _ => None,
            };
            if other.is_some_and(|o| o <= uid(p)) {
                return Err(fail());
            }
        }
        for p in r.clone() {
            let (u, c) = (uid(p), class(p));
            match (min1, min2) {
                (Some(m), _) if m.1 == c => {
                    if u < m.0 {
                        min1 = Some((u, c));
                    }
                }
                (_, Some(m)) if m.1 == c => {
                    if u < m.0 {
                        min2 = Some((u, c));
                        if min1.is_some_and(|m1| u < m1.0) {
                            std::mem::swap(&mut min1, &mut min2);
                        }
                    }
                }
                (None, _) => min1 = Some((u, c)),
                (Some(m1), _) => {
                    if u < m1.0 {
                        min2 = min1;
                        min1 = Some((u, c));
                    } else if min2.is_none_or(|m2| u < m2.0) {
                        min2 = Some((u, c));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Test hook: [`fast_less`] with its keys built here.
#[cfg(test)]
pub(crate) fn check_fast_less(cmp: &Comparator, keys: &[PodKey], i: usize, j: usize) -> bool {
    let fast: Vec<FastKey> = keys.iter().map(|k| FastKey::new(cmp, k)).collect();
    fast_less(cmp, keys, &fast, i, j)
}
