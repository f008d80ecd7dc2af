//! The comparator's inputs packed into one 64-byte record per pod, so the
//! sort and the order check stream through one contiguous array instead of
//! chasing each key's heap data; built from [`RankKey`]s or straight from
//! [`SlimPod`]s. Answers exactly as [`Comparator::decide`].

use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

use super::key::{bucket, GoTime, PodsOnNode, RankKey};
use super::order::{Comparator, Rule, TailFields};
use super::slim::{uid_prefix, SlimPod};

/// From this many pods records are packed on all cores.
pub(super) const PARALLEL: usize = 16_384;

/// Zero time in a [`SortRec`] (a real time never maps to it).
pub(super) const ZERO_TIME: i64 = i64::MIN;

/// Full UIDs by pod index, for the tie-breaks the packed prefix cannot settle.
pub(super) trait Uids {
    fn uid(&self, i: usize) -> &str;
}

impl Uids for [RankKey<'_>] {
    fn uid(&self, i: usize) -> &str {
        &self[i].uid
    }
}

impl Uids for [&SlimPod] {
    fn uid(&self, i: usize) -> &str {
        &self[i].uid
    }
}

/// One pod's comparator inputs; see the module doc.
#[derive(Debug, Clone, Copy)]
pub(super) struct SortRec {
    /// Rules 1-4: assigned (1 bit), phase ordinal (8), ready (1), cost (32,
    /// 0 when the gate is off); smaller means deleted first.
    pub head: u64,
    /// Rule 5: rank reversed, so smaller means deleted first.
    pub rank: u64,
    /// First 8 bytes of the UID, big-endian, zero-padded: ordered like the
    /// strings whenever the two differ.
    pub uid8: u64,
    /// Ready time and creation time, [`ZERO_TIME`] for zero; only order and
    /// equality matter, so out-of-range inputs are replaced by their ranks.
    pub ready_time: i64,
    pub created: i64,
    pub ready_bucket: i32,
    pub created_bucket: i32,
    pub restarts: i32,
    pub sidecar_restarts: i32,
    /// Index of the pod in the keys given.
    pub idx: u32,
    pub ready: bool,
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

/// Rules 1-4 in one word (see [`SortRec::head`]).
fn head(cmp: &Comparator, assigned: bool, phase_ordinal: u8, ready: bool, cost: i32) -> u64 {
    // order-preserving map of a signed cost to an unsigned one
    let cost = if cmp.gates.pod_deletion_cost {
        (cost as u32) ^ (1 << 31)
    } else {
        0
    };
    (u64::from(assigned) << 41)
        | (u64::from(phase_ordinal) << 33)
        | (u64::from(ready) << 32)
        | u64::from(cost)
}

/// Rule 5's rank, reversed and made unsigned (see [`SortRec::rank`]).
fn reversed_rank(rank: i64) -> u64 {
    !((rank as u64) ^ (1 << 63))
}

/// A time as the record holds it, when it fits without narrowing.
fn direct_time(t: GoTime) -> Option<i64> {
    match t {
        None => Some(ZERO_TIME),
        Some(t) => i64::try_from(t).ok().filter(|&t| t != ZERO_TIME),
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
pub(super) fn pack(cmp: &Comparator, keys: &[RankKey]) -> Vec<SortRec> {
    let time = |t: GoTime| t.unwrap_or(i128::MIN);
    // fast path: every field fits as it is (always, for real pods)
    let fits = |k: &RankKey| {
        let i32_ok = |v: i64| i32::try_from(v).is_ok();
        direct_time(k.ready_time).is_some()
            && direct_time(k.created).is_some()
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
                head: head(
                    cmp,
                    !k.node_name.is_empty(),
                    k.phase_ordinal,
                    k.ready,
                    k.cost.value,
                ),
                rank: reversed_rank(k.rank),
                uid8: uid_prefix(&k.uid),
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

/// Packs slim pods straight into records, with ranks from `on_node`: the
/// records [`pack`] gives for their [`RankKey`]s. `None` when a field needs
/// narrowing (a time before 1677 or after 2262), which only [`pack`] does.
pub(super) fn pack_slim(
    cmp: &Comparator,
    pods: &[&SlimPod],
    on_node: &PodsOnNode,
) -> Option<Vec<SortRec>> {
    let misfit = AtomicBool::new(false);
    let small = |v: i64| {
        i32::try_from(v).unwrap_or_else(|_| {
            misfit.store(true, Ordering::Relaxed);
            0
        })
    };
    let time = |t: GoTime| {
        direct_time(t).unwrap_or_else(|| {
            misfit.store(true, Ordering::Relaxed);
            ZERO_TIME
        })
    };
    let record = |rank: i64, i: usize, p: &SlimPod| SortRec {
        head: head(
            cmp,
            !p.node_name.is_empty(),
            super::key::phase_ordinal(p.phase.as_deref()),
            p.ready,
            p.cost.value,
        ),
        rank: reversed_rank(rank),
        uid8: p.uid.prefix(),
        ready_time: time(p.ready_time),
        created: time(p.created),
        ready_bucket: small(bucket(cmp.now, p.ready_time)),
        created_bucket: small(bucket(cmp.now, p.created)),
        restarts: small(p.restarts),
        sidecar_restarts: small(p.sidecar_restarts),
        idx: i as u32,
        ready: p.ready,
    };
    let recs: Vec<SortRec> = if pods.len() >= PARALLEL {
        pods.par_iter()
            .enumerate()
            .map(|(i, p)| record(on_node.rank(&p.node_name), i, p))
            .collect()
    } else {
        pods.iter()
            .enumerate()
            .map(|(i, p)| record(on_node.rank(&p.node_name), i, p))
            .collect()
    };
    (!misfit.load(Ordering::Relaxed)).then_some(recs)
}

/// `Less` on packed records, with the rule that decided.
#[inline(always)]
pub(super) fn decide_rec(
    cmp: &Comparator,
    uids: &(impl Uids + ?Sized),
    a: &SortRec,
    b: &SortRec,
) -> (bool, Rule) {
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
    cmp.decide_tail(a, b, || uid_cmp(uids, a, b).is_lt())
}

/// The UIDs' order: the packed prefix first, the strings on a tie.
#[inline]
pub(super) fn uid_cmp(uids: &(impl Uids + ?Sized), a: &SortRec, b: &SortRec) -> std::cmp::Ordering {
    a.uid8
        .cmp(&b.uid8)
        .then_with(|| uids.uid(a.idx as usize).cmp(uids.uid(b.idx as usize)))
}

/// The two levels of `Less` that end in a UID tie-break, and the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    /// Rules 1-6.
    Ready,
    /// Rules 7-8.
    Creation,
    /// Nothing left: all remaining pairs are ties.
    Done,
}

impl Level {
    /// The level pods equal at this one go on to.
    pub fn next(self) -> Level {
        match self {
            Level::Ready => Level::Creation,
            Level::Creation | Level::Done => Level::Done,
        }
    }

    /// The rule of this level's UID tie-break.
    pub fn uid_rule(self) -> Rule {
        match self {
            Level::Ready => Rule::ReadyTimeUid,
            Level::Creation | Level::Done => Rule::CreationTimeUid,
        }
    }
}

/// A total-preorder key for one level, compared lexicographically; pods
/// with equal keys are compared by the level's UID tie-break (when the time
/// class is `Some`) or by the next level. Each field takes few distinct
/// values, so the sort packs their ranges into one integer.
pub(super) type LevelKey = [u64; LEVEL_FIELDS];

/// Fields of a [`LevelKey`]; the last is a time word (0 for zero time).
pub(super) const LEVEL_FIELDS: usize = 4;

/// A level's time as an ordered word: 0 for zero, otherwise above it.
fn time_word(cmp: &Comparator, t: Option<i64>, bucket: i32) -> u64 {
    // signed to unsigned keeping order; the result is never 0 because the
    // value is never i64::MIN (times are above ZERO_TIME, so -t fits)
    let word = |v: i64| (v as u64) ^ (1 << 63);
    match t {
        None => 0,
        Some(_) if cmp.uid_tiebreak() => word(bucket.into()),
        // afterOrZero: the later time first
        Some(t) => word(-t),
    }
}

/// The level key of one record and its time class: the exact time, when
/// different times in one key compare by UID.
#[inline]
pub(super) fn level_key(cmp: &Comparator, r: &SortRec, level: Level) -> (LevelKey, Option<i64>) {
    // more restarts first: a key that falls as the count rises
    let desc = |v: i32| (i64::from(i32::MAX) - i64::from(v)) as u64;
    let (key, t) = match level {
        Level::Ready => {
            let t = r.ready.then(|| r.ready_time()).flatten();
            // rules 1-3 apart from the cost: each spans few bits on its own
            let key = [
                r.head >> 32,
                r.head & 0xffff_ffff,
                r.rank,
                time_word(cmp, t, r.ready_bucket),
            ];
            (key, t)
        }
        Level::Creation => {
            let t = r.created();
            let key = [
                desc(r.restarts),
                desc(r.sidecar_restarts),
                0,
                time_word(cmp, t, r.created_bucket),
            ];
            (key, t)
        }
        Level::Done => return ([0; LEVEL_FIELDS], None),
    };
    (key, t.filter(|_| cmp.uid_tiebreak()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::FeatureGates;

    /// The slim packing gives the records the key packing gives.
    #[test]
    fn slim_records_equal_key_records() {
        const NOW: i128 = 1_700_000_000_000_000_000;
        let now = Some(NOW);
        let node: std::sync::Arc<str> = "n1".into();
        let pod = |uid: &str, cost: Option<&str>, ready: bool, restarts: i64| SlimPod {
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
            node_name: node.clone(),
            phase: Some("Running".into()),
            deleting: false,
            owner: None,
            cost_annotation: cost.map(Into::into),
            cost: crate::comparator::slim::cost_of(cost),
            ready,
            ready_time: ready.then_some(NOW - 5_000_000_000),
            created: Some(NOW - 90_000_000_000),
            restarts,
            sidecar_restarts: 1,
        };
        let pods = [
            pod("a", Some("7"), true, 0),
            pod("bbbbbbbbbb", Some("x"), false, 3),
            pod("c", None, true, 2),
        ];
        let refs: Vec<&SlimPod> = pods.iter().collect();
        let off = FeatureGates {
            pod_deletion_cost: false,
            logarithmic_scale_down: false,
        };
        for gates in [FeatureGates::default(), off] {
            let cmp = Comparator { gates, now };
            let on_node = PodsOnNode::count_slim(&pods);
            let mut keys: Vec<RankKey> = pods
                .iter()
                .map(|p| RankKey::from_slim(p).with_now(now))
                .collect();
            on_node.assign(&mut keys);
            let from_keys = pack(&cmp, &keys);
            let from_slim = pack_slim(&cmp, &refs, &on_node).unwrap_or_default();
            assert_eq!(format!("{from_keys:?}"), format!("{from_slim:?}"));
        }
        // a time beyond i64 nanoseconds needs narrowing: left to `pack`
        let mut old = pod("d", None, true, 0);
        old.created = Some(-100_000_000_000_000_000_000);
        let cmp = Comparator {
            gates: FeatureGates::default(),
            now,
        };
        assert!(pack_slim(&cmp, &[&old], &PodsOnNode::default()).is_none());
    }
}
