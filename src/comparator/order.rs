//! Upstream's `ActivePodsWithRanks.Less`, a sort that never panics on it, and
//! an exact check of whether it was a strict weak order on the given pods.

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
/// the sort's packed [`SortRec`]. One implementation of the rules serves both.
trait TailFields {
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

    /// Rules 1-5, which form a lexicographic key (see [`SortRec`]).
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
    fn decide_tail<T: TailFields>(
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
    fn uid_tiebreak(&self) -> bool {
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

/// Zero time in a [`SortRec`] (a real time never maps to it).
const ZERO_TIME: i64 = i64::MIN;

/// One pod's comparator inputs packed into 64 bytes, so the sort and the
/// check stream through one contiguous array instead of chasing each
/// [`RankKey`]'s heap data. Answers exactly as [`Comparator::decide`].
#[derive(Debug, Clone, Copy)]
struct SortRec {
    /// Rules 1-4: assigned (1 bit), phase ordinal (8), ready (1), cost (32,
    /// 0 when the gate is off); smaller means deleted first.
    head: u64,
    /// Rule 5: rank reversed, so smaller means deleted first.
    rank: u64,
    /// First 8 bytes of the UID, big-endian, zero-padded: ordered like the
    /// strings whenever the two differ.
    uid8: u64,
    /// Ready time and creation time, [`ZERO_TIME`] for zero; only order and
    /// equality matter, so out-of-range inputs are replaced by their ranks.
    ready_time: i64,
    created: i64,
    ready_bucket: i32,
    created_bucket: i32,
    restarts: i32,
    sidecar_restarts: i32,
    /// Index of the pod in the keys given.
    idx: u32,
    ready: bool,
}

impl TailFields for SortRec {
    type Time = i64;
    fn ready(&self) -> bool {
        self.ready
    }
    fn ready_time(&self) -> Option<i64> {
        (self.ready_time != ZERO_TIME).then_some(self.ready_time)
    }
    fn ready_bucket(&self) -> i64 {
        self.ready_bucket.into()
    }
    fn restarts(&self) -> i64 {
        self.restarts.into()
    }
    fn sidecar_restarts(&self) -> i64 {
        self.sidecar_restarts.into()
    }
    fn created(&self) -> Option<i64> {
        (self.created != ZERO_TIME).then_some(self.created)
    }
    fn created_bucket(&self) -> i64 {
        self.created_bucket.into()
    }
}

/// Order-preserving narrowing of one field over all keys: the values
/// themselves when they all fit in `[lo, hi]`, otherwise their dense ranks
/// (only the order and equality of these fields are ever read).
fn narrow<T: Copy + Ord + TryInto<i64>>(values: Vec<T>, lo: i64, hi: i64) -> Vec<i64> {
    let direct: Option<Vec<i64>> = values
        .iter()
        .map(|&v| v.try_into().ok().filter(|v| (lo..=hi).contains(v)))
        .collect();
    if let Some(direct) = direct {
        return direct;
    }
    let mut sorted = values.clone();
    sorted.sort_unstable();
    sorted.dedup();
    values
        .iter()
        // the ranks are < values.len(), far below `hi - lo`
        .map(|v| lo + sorted.binary_search(v).unwrap_or(0) as i64)
        .collect()
}

/// Packs every key; see [`SortRec`]. `keys.len()` must fit in `u32`.
fn pack(cmp: &Comparator, keys: &[RankKey]) -> Vec<SortRec> {
    let time = |t: GoTime| t.unwrap_or(i128::MIN);
    // fast path: every field fits as it is (always, for real pods)
    let fits = |k: &RankKey| {
        let t_ok =
            |t: GoTime| t.is_none_or(|t| t > i128::from(ZERO_TIME) && t <= i128::from(i64::MAX));
        let i32_ok = |v: i64| i32::try_from(v).is_ok();
        t_ok(k.ready_time)
            && t_ok(k.created)
            && i32_ok(k.ready_bucket)
            && i32_ok(k.created_bucket)
            && i32_ok(k.restarts)
            && i32_ok(k.sidecar_restarts)
    };
    let narrowed = (!keys.iter().all(fits)).then(|| {
        // above ZERO_TIME, which zero times get below
        let times = |f: fn(&RankKey) -> GoTime| {
            narrow(
                keys.iter().map(|k| time(f(k))).collect(),
                ZERO_TIME + 1,
                i64::MAX,
            )
        };
        let small = |f: fn(&RankKey) -> i64| {
            narrow(
                keys.iter().map(f).collect(),
                i32::MIN.into(),
                i32::MAX.into(),
            )
        };
        (
            times(|k| k.ready_time),
            times(|k| k.created),
            small(|k| k.ready_bucket),
            small(|k| k.created_bucket),
            small(|k| k.restarts),
            small(|k| k.sidecar_restarts),
        )
    });
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            // order-preserving maps of signed values to unsigned ones
            let cost = if cmp.gates.pod_deletion_cost {
                (k.cost.value as u32) ^ (1 << 31)
            } else {
                0
            };
            let head = (u64::from(!k.node_name.is_empty()) << 41)
                | (u64::from(k.phase_ordinal) << 33)
                | (u64::from(k.ready) << 32)
                | u64::from(cost);
            let mut b = [0u8; 8];
            let n = k.uid.len().min(8);
            b[..n].copy_from_slice(&k.uid.as_bytes()[..n]);
            // values checked or narrowed above, so the casts are exact
            let (rt, cr, rb, cb, rs, ss) = match &narrowed {
                None => (
                    time(k.ready_time) as i64,
                    time(k.created) as i64,
                    k.ready_bucket,
                    k.created_bucket,
                    k.restarts,
                    k.sidecar_restarts,
                ),
                Some(n) => (n.0[i], n.1[i], n.2[i], n.3[i], n.4[i], n.5[i]),
            };
            SortRec {
                head,
                rank: !((k.rank as u64) ^ (1 << 63)),
                uid8: u64::from_be_bytes(b),
                ready_time: if k.ready_time.is_none() {
                    ZERO_TIME
                } else {
                    rt
                },
                created: if k.created.is_none() { ZERO_TIME } else { cr },
                ready_bucket: rb as i32,
                created_bucket: cb as i32,
                restarts: rs as i32,
                sidecar_restarts: ss as i32,
                idx: i as u32,
                ready: k.ready,
            }
        })
        .collect()
}

/// `Less` on packed records, with the rule that decided.
#[inline(always)]
fn decide_rec(cmp: &Comparator, keys: &[RankKey], a: &SortRec, b: &SortRec) -> (bool, Rule) {
    if (a.head, a.rank) != (b.head, b.rank) {
        let diff = a.head ^ b.head;
        let rule = if diff >> 41 != 0 {
            Rule::Unassigned
        } else if diff >> 33 != 0 {
            Rule::Phase
        } else if diff >> 32 != 0 {
            Rule::Readiness
        } else if diff != 0 {
            Rule::DeletionCost
        } else {
            Rule::Colocation
        };
        return ((a.head, a.rank) < (b.head, b.rank), rule);
    }
    cmp.decide_tail(a, b, || {
        if a.uid8 != b.uid8 {
            a.uid8 < b.uid8
        } else {
            keys[a.idx as usize].uid < keys[b.idx as usize].uid
        }
    })
}

/// Stable bottom-up merge sort driven only by `less`; terminates and never
/// panics whatever `less` answers (std's sort may panic on a non-total order).
fn merge_sort<T: Copy>(items: &mut Vec<T>, mut less: impl FnMut(&T, &T) -> bool) {
    let n = items.len();
    // short runs by insertion sort first: fewer passes over the whole array
    const RUN: usize = 16;
    for run in items.chunks_mut(RUN) {
        for i in 1..run.len() {
            let mut j = i;
            while j > 0 && less(&run[j], &run[j - 1]) {
                run.swap(j, j - 1);
                j -= 1;
            }
        }
    }
    let mut buf = items.clone();
    let mut width = RUN;
    while width < n {
        let (a, out) = (&items[..], &mut buf[..]);
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j, mut k) = (start, mid, start);
            while i < mid && j < end {
                // take from the right only when strictly less: stability
                if less(&a[j], &a[i]) {
                    out[k] = a[j];
                    j += 1;
                } else {
                    out[k] = a[i];
                    i += 1;
                }
                k += 1;
            }
            out[k..k + (mid - i)].copy_from_slice(&a[i..mid]);
            k += mid - i;
            out[k..k + (end - j)].copy_from_slice(&a[j..end]);
            start = end;
        }
        std::mem::swap(items, &mut buf);
        width *= 2;
    }
}

/// Orders pods as upstream's `sort.Sort(ActivePodsWithRanks)` would, given
/// keys with ranks and buckets already filled in. Ties keep input order.
pub fn rank_pods(cmp: &Comparator, keys: &[RankKey]) -> Ranking {
    let mut recs = pack(cmp, keys);
    merge_sort(&mut recs, |a, b| decide_rec(cmp, keys, a, b).0);
    let order: Vec<usize> = recs.iter().map(|r| r.idx as usize).collect();
    let mut decided_by = Vec::with_capacity(order.len().saturating_sub(1));
    let mut block = Vec::with_capacity(order.len());
    let mut b = 0;
    for (pos, r) in recs.iter().enumerate() {
        if pos > 0 {
            let (less, rule) = decide_rec(cmp, keys, &recs[pos - 1], r);
            decided_by.push(if less { rule } else { Rule::Tie });
            if less {
                b += 1;
            }
        }
        block.push(b);
    }
    let items: Vec<(usize, usize)> = (0..recs.len()).zip(block.iter().copied()).collect();
    let ambiguity = verify(cmp, keys, &recs, &items, Level::Ready, Rule::ReadyTimeUid)
        .err()
        .map(|mut a| {
            // positions in the sorted records back to indices into the keys
            for p in &mut a.pods {
                *p = recs[*p].idx as usize;
            }
            a
        });
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
/// the level's UID tie-break (when the time class is `Some`) or the next level.
type LevelKey = (u64, u64, u8, i64);

fn time_key(cmp: &Comparator, t: Option<i64>, bucket: i32) -> (u8, i64) {
    match t {
        None => (0, 0),
        Some(_) if cmp.uid_tiebreak() => (1, bucket.into()),
        // afterOrZero: the later time first (t > ZERO_TIME, so -t cannot overflow)
        Some(t) => (1, -t),
    }
}

fn level_key(cmp: &Comparator, r: &SortRec, level: Level) -> (LevelKey, Option<i64>) {
    // more restarts first: a key that falls as the count rises
    let desc = |v: i32| (i64::from(i32::MAX) - i64::from(v)) as u64;
    match level {
        Level::Ready => {
            let t = r.ready.then(|| r.ready_time()).flatten();
            let (tz, tv) = time_key(cmp, t, r.ready_bucket);
            let class = t.filter(|_| cmp.uid_tiebreak());
            ((r.head, r.rank, tz, tv), class)
        }
        Level::Creation => {
            let t = r.created();
            let (tz, tv) = time_key(cmp, t, r.created_bucket);
            let class = t.filter(|_| cmp.uid_tiebreak());
            ((desc(r.restarts), desc(r.sidecar_restarts), tz, tv), class)
        }
        Level::Done => ((0, 0, 0, 0), None),
    }
}

/// Checks that the sorted `items` (position in the sorted `recs`, equivalence
/// block) describe `Less` exactly; since a block sequence is a strict weak
/// order, this holds iff `Less` is one on these pods. O(n log n).
fn verify(
    cmp: &Comparator,
    keys: &[RankKey],
    recs: &[SortRec],
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
    // computed on the fly: cheaper than a vector of them at 100k pods
    let lk = |i: usize| level_key(cmp, &recs[items[i].0], level);
    let mut start = 0;
    while start < items.len() {
        let (first, class) = lk(start);
        let mut end = start + 1;
        let mut next_key = None;
        while end < items.len() {
            let k = lk(end).0;
            if k != first {
                next_key = Some(k);
                break;
            }
            end += 1;
        }
        if let Some(k) = next_key {
            // key must increase across groups, and blocks must change with it
            if k < first || items[end].1 == items[end - 1].1 {
                return Err(fail(&items[start..=end], context));
            }
        }
        let group = &items[start..end];
        if group.len() > 1 {
            if class.is_some() {
                let classes: Vec<i64> = (start..end).map(|i| lk(i).1.unwrap_or(0)).collect();
                check_uid_group(keys, recs, group, |p| classes[p], uid_rule)?;
                let mut sorted = classes.clone();
                sorted.sort_unstable();
                if sorted.windows(2).all(|w| w[0] != w[1]) {
                    // every class has one pod: nothing left to compare
                    start = end;
                    continue;
                }
                // members grouped by class, sorted order kept within each
                let mut by_class: Vec<(i64, (usize, usize))> =
                    classes.iter().copied().zip(group.iter().copied()).collect();
                by_class.sort_by_key(|&(c, _)| c);
                let members: Vec<(usize, usize)> = by_class.iter().map(|&(_, it)| it).collect();
                let mut from = 0;
                for chunk in by_class.chunk_by(|a, b| a.0 == b.0) {
                    let class = &members[from..from + chunk.len()];
                    // the UID tie-break interleaves the whole group, so a
                    // conflict inside one time class involves all of it
                    verify(cmp, keys, recs, class, next, uid_rule)
                        .map_err(|_| fail(group, uid_rule))?;
                    from += chunk.len();
                }
            } else {
                verify(cmp, keys, recs, group, next, context)?;
            }
        }
        start = end;
    }
    Ok(())
}

/// Within a group where different times compare by UID: pods of different
/// time classes must be ordered by UID across blocks and share a UID within one.
fn check_uid_group(
    keys: &[RankKey],
    recs: &[SortRec],
    group: &[(usize, usize)],
    class: impl Fn(usize) -> i64,
    rule: Rule,
) -> Result<(), Ambiguity> {
    let fail = || Ambiguity {
        pods: group.iter().map(|&(i, _)| i).collect(),
        rule,
    };
    // UIDs of group members `p`, `q`: the packed prefix first, strings on a tie
    let uid_cmp = |p: usize, q: usize| {
        let (a, b) = (&recs[group[p].0], &recs[group[q].0]);
        a.uid8
            .cmp(&b.uid8)
            .then_with(|| keys[a.idx as usize].uid.cmp(&keys[b.idx as usize].uid))
    };
    let uid_lt = |p: usize, q: usize| uid_cmp(p, q) == std::cmp::Ordering::Less;
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
        if r.clone().any(|p| class(p) != first_class)
            && r.clone().any(|p| uid_cmp(p, r.start).is_ne())
        {
            return Err(fail());
        }
    }
    // earlier block, different class: strictly lower UID than every later one.
    // min1/min2: (member, class) with the lowest UIDs seen so far in later
    // blocks, from two different classes.
    let mut min1: Option<(usize, i64)> = None;
    let mut min2: Option<(usize, i64)> = None;
    for r in ranges.iter().rev() {
        for p in r.clone() {
            let c = class(p);
            let other = match (min1, min2) {
                (Some(m), _) if m.1 != c => Some(m.0),
                (_, Some(m)) => Some(m.0),
                _ => None,
            };
            if other.is_some_and(|o| !uid_lt(p, o)) {
                return Err(fail());
            }
        }
        for p in r.clone() {
            let c = class(p);
            match (min1, min2) {
                (Some(m), _) if m.1 == c => {
                    if uid_lt(p, m.0) {
                        min1 = Some((p, c));
                    }
                }
                (_, Some(m)) if m.1 == c => {
                    if uid_lt(p, m.0) {
                        min2 = Some((p, c));
                        if min1.is_some_and(|m1| uid_lt(p, m1.0)) {
                            std::mem::swap(&mut min1, &mut min2);
                        }
                    }
                }
                (None, _) => min1 = Some((p, c)),
                (Some(m1), _) => {
                    if uid_lt(p, m1.0) {
                        min2 = min1;
                        min1 = Some((p, c));
                    } else if min2.is_none_or(|m2| uid_lt(p, m2.0)) {
                        min2 = Some((p, c));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Test hook: `Less` on the packed records of `keys`, for the pods at `i`, `j`.
#[cfg(test)]
pub(crate) fn check_fast_less(cmp: &Comparator, keys: &[RankKey], i: usize, j: usize) -> bool {
    let recs = pack(cmp, keys);
    decide_rec(cmp, keys, &recs[i], &recs[j]).0
}
