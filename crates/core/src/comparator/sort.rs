//! The order of packed records, by integer keys level by level instead of
//! a comparison sort driven by `Less`.
//!
//! `Less` is lexicographic up to each of its two UID tie-breaks (see
//! [`Level`]): pods are sorted by the level's key; inside one key, pods whose
//! times differ go by UID and pods with the same time go on to the next
//! level. So a group whose times compare by UID is sorted by UID, and each
//! stretch of consecutive pods with one time is sorted by the next level.
//! When `Less` is a strict weak order this is its order, ties in input order
//! (a pod of another time between two same-time pods orders them by
//! transitivity); when it is not, the pods still follow these keys, and the
//! check in `verify` reports the conflict. Sorting integers never calls
//! `Less`, so no answer of it can upset the sort.

use rayon::prelude::*;

use super::order::Comparator;
use super::packed::{level_key, uid_cmp, Level, SortRec, Uids, LEVEL_FIELDS, PARALLEL};

/// The time word's place in a level key.
const TIME: usize = LEVEL_FIELDS - 1;

/// Below this many records a comparison sort on the key tuple is cheaper
/// than packing keys.
const SMALL: usize = 32;

/// The records in deletion order.
pub(super) fn sort(
    cmp: &Comparator,
    uids: &(impl Uids + ?Sized),
    mut recs: Vec<SortRec>,
) -> Vec<SortRec> {
    // records arrive in input order; owning them, the gathered copy
    // replaces them rather than being copied back as in `sort_level`
    let Some(keys) = sorted_keys(cmp, &recs, Level::Ready) else {
        sort_by_tuples(cmp, uids, &mut recs, Level::Ready);
        return recs;
    };
    let mut sorted = keys.gather(&recs);
    drop(recs);
    keys.settle(cmp, uids, &mut sorted, Level::Ready);
    sorted
}

/// Bits needed for values up to `v`.
fn bits(v: u128) -> u32 {
    u128::BITS - v.leading_zeros()
}

/// Records' keys for one level packed into integers and sorted: the level
/// key's fields (each by its range), as much of the UID prefix as fits,
/// then the record's position.
struct SortedKeys {
    packed: Vec<u128>,
    pos_bits: u32,
    uid_bits: u32,
}

impl SortedKeys {
    /// The records in the keys' order.
    fn gather(&self, recs: &[SortRec]) -> Vec<SortRec> {
        let mask = (1u128 << self.pos_bits) - 1;
        let at = |v: &u128| recs[(v & mask) as usize];
        if self.packed.len() >= PARALLEL {
            self.packed.par_iter().map(at).collect()
        } else {
            self.packed.iter().map(at).collect()
        }
    }

    /// Settles each group of equal level keys in `sorted` (the records in
    /// the keys' order).
    fn settle(
        &self,
        cmp: &Comparator,
        uids: &(impl Uids + ?Sized),
        sorted: &mut [SortRec],
        level: Level,
    ) {
        let low_bits = self.uid_bits + self.pos_bits;
        let uid_shift = u64::BITS - self.uid_bits;
        let mut start = 0;
        while start < sorted.len() {
            let group = self.packed[start] >> low_bits;
            // groups are mostly short: a scan beats a binary search
            let len = self.packed[start..]
                .iter()
                .take_while(|&&v| v >> low_bits == group)
                .count();
            settle_group(cmp, uids, &mut sorted[start..start + len], level, uid_shift);
            start += len;
        }
    }
}

/// Packs and sorts `recs`' keys for `level`; `None` when the fields are too
/// far apart to pack (only hand-made keys), or there are few records.
fn sorted_keys(cmp: &Comparator, recs: &[SortRec], level: Level) -> Option<SortedKeys> {
    if recs.len() <= SMALL {
        return None;
    }
    let key = |r: &SortRec| level_key(cmp, r, level);
    let parallel = recs.len() >= PARALLEL;
    let (lo, hi, by_uid) = key_ranges(cmp, recs, level, parallel);
    let lo = lo.map(|v| if v == u64::MAX { 0 } else { v });
    // the time word maps to 0 for zero and 1 + (word - lo) otherwise
    let field = |f: usize, v: u64| match f {
        TIME if v != 0 => u128::from(v - lo[f]) + 1,
        TIME => 0,
        _ => u128::from(v - lo[f]),
    };
    let widths: [u32; LEVEL_FIELDS] = std::array::from_fn(|f| bits(field(f, hi[f])));
    let pos_bits = bits(recs.len() as u128 - 1);
    let level_bits: u32 = widths.iter().sum();
    if level_bits + pos_bits > u128::BITS {
        return None;
    }
    let uid_bits = if by_uid {
        (u128::BITS - level_bits - pos_bits).min(u64::BITS)
    } else {
        0
    };
    let pack = |(pos, r): (usize, &SortRec)| {
        let (k, class) = key(r);
        let mut v: u128 = 0;
        for f in 0..LEVEL_FIELDS {
            v = (v << widths[f]) | field(f, k[f]);
        }
        let uid = match class {
            Some(_) if uid_bits > 0 => r.uid8 >> (u64::BITS - uid_bits),
            _ => 0,
        };
        ((v << uid_bits) | u128::from(uid)) << pos_bits | pos as u128
    };
    let mut packed: Vec<u128>;
    if parallel {
        packed = recs.par_iter().enumerate().map(pack).collect();
        packed.par_sort_unstable();
    } else {
        packed = recs.iter().enumerate().map(pack).collect();
        packed.sort_unstable();
    }
    Some(SortedKeys {
        packed,
        pos_bits,
        uid_bits,
    })
}

/// Each level-key field's lowest and highest value over some records, and
/// whether any of them is ordered by uid.
type Ranges = ([u64; LEVEL_FIELDS], [u64; LEVEL_FIELDS], bool);

/// The [`Ranges`] of `recs`' keys for `level`, on both threads when
/// `parallel`. The time word's 0 (zero time) sits apart from the others, so
/// its range starts at the lowest non-zero word.
fn key_ranges(cmp: &Comparator, recs: &[SortRec], level: Level, parallel: bool) -> Ranges {
    let key = |r: &SortRec| level_key(cmp, r, level);
    let ranges = |chunk: &[SortRec]| {
        let (mut lo, mut hi) = ([u64::MAX; LEVEL_FIELDS], [0u64; LEVEL_FIELDS]);
        let mut by_uid = false;
        for r in chunk {
            let (k, class) = key(r);
            for f in 0..LEVEL_FIELDS {
                if f < TIME || k[f] != 0 {
                    lo[f] = lo[f].min(k[f]);
                }
                hi[f] = hi[f].max(k[f]);
            }
            by_uid |= class.is_some();
        }
        (lo, hi, by_uid)
    };
    let merge = |(lo1, hi1, u1): Ranges, (lo2, hi2, u2): Ranges| {
        (
            std::array::from_fn(|f| lo1[f].min(lo2[f])),
            std::array::from_fn(|f| hi1[f].max(hi2[f])),
            u1 || u2,
        )
    };
    if parallel {
        recs.par_chunks(PARALLEL / 2)
            .map(ranges)
            .reduce(|| ranges(&[]), merge)
    } else {
        ranges(recs)
    }
}

/// Sorts `recs` by `level` and the levels below it.
fn sort_level(cmp: &Comparator, uids: &(impl Uids + ?Sized), recs: &mut [SortRec], level: Level) {
    if recs.len() < 2 {
        return;
    }
    // ties keep input order, and positions stand for it
    if !recs.is_sorted_by_key(|r| r.idx) {
        recs.sort_unstable_by_key(|r| r.idx);
    }
    if level == Level::Done {
        return;
    }
    let Some(keys) = sorted_keys(cmp, recs, level) else {
        return sort_by_tuples(cmp, uids, recs, level);
    };
    let sorted = keys.gather(recs);
    recs.copy_from_slice(&sorted);
    drop(sorted);
    keys.settle(cmp, uids, recs, level);
}

/// [`sort_level`] by comparing key tuples.
fn sort_by_tuples(
    cmp: &Comparator,
    uids: &(impl Uids + ?Sized),
    recs: &mut [SortRec],
    level: Level,
) {
    let key = |r: &SortRec| level_key(cmp, r, level);
    recs.sort_unstable_by_key(|r| {
        let (k, class) = key(r);
        (k, class.map_or(0, |_| r.uid8), r.idx)
    });
    let mut start = 0;
    while start < recs.len() {
        let first = key(&recs[start]).0;
        let len = recs[start..]
            .iter()
            .take_while(|r| key(r).0 == first)
            .count();
        settle_group(cmp, uids, &mut recs[start..start + len], level, 0);
        start += len;
    }
}

/// Orders one group of equal level keys, already sorted by the UID prefix
/// `uid8 >> uid_shift` (when its times compare by UID) and input order.
fn settle_group(
    cmp: &Comparator,
    uids: &(impl Uids + ?Sized),
    group: &mut [SortRec],
    level: Level,
    uid_shift: u32,
) {
    if group.len() < 2 {
        return;
    }
    if level_key(cmp, &group[0], level).1.is_none() {
        return sort_level(cmp, uids, group, level.next());
    }
    // the whole group has a time, and the UID tie-break is on
    let class = |r: &SortRec| match level {
        Level::Ready => r.ready_time,
        _ => r.created,
    };
    // full UIDs where the packed prefix ties (rare: random UIDs differ early)
    let prefix = |r: &SortRec| r.uid8.checked_shr(uid_shift).unwrap_or(0);
    for run in group.chunk_by_mut(|a, b| prefix(a) == prefix(b)) {
        if run.len() > 1 {
            run.sort_unstable_by(|a, b| uid_cmp(uids, a, b).then(a.idx.cmp(&b.idx)));
        }
    }
    // stretches of one time: the next level decides inside each
    for stretch in group.chunk_by_mut(|a, b| class(a) == class(b)) {
        sort_level(cmp, uids, stretch, level.next());
    }
}
