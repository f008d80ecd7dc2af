//! An exact check, in O(n log n), that `Less` is a strict weak order on the
//! pods given, read off their sorted order and equivalence blocks.

use super::order::{Ambiguity, Comparator, Rule};
use super::packed::{level_key, uid_cmp, Level, SortRec, Uids};

/// Checks that the sorted `items` (position in the sorted `recs`, equivalence block)
/// describe `Less` exactly; since a block sequence is a strict weak order,
/// this holds iff `Less` is one on these pods. O(n log n).
pub(super) fn verify(
    cmp: &Comparator,
    uids: &(impl Uids + ?Sized),
    recs: &[SortRec],
    items: &[(usize, usize)],
    level: Level,
    context: Rule,
) -> Result<(), Ambiguity> {
    let fail = |items: &[(usize, usize)], rule| Ambiguity {
        pods: items.iter().map(|&(i, _)| i).collect(),
        rule,
    };
    let uid_rule = level.uid_rule();
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
    let next = level.next();
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
                verify_time_classes(cmp, uids, recs, group, &classes, next, uid_rule)?;
            } else {
                verify(cmp, uids, recs, group, next, context)?;
            }
        }
        start = end;
    }
    Ok(())
}

/// [`verify`] for a `group` of equal keys whose pods compare by UID across
/// time classes (`classes[p]` is the class of `group[p]`): the UID order
/// across classes, then each class by the next level.
fn verify_time_classes(
    cmp: &Comparator,
    uids: &(impl Uids + ?Sized),
    recs: &[SortRec],
    group: &[(usize, usize)],
    classes: &[i64],
    next: Level,
    uid_rule: Rule,
) -> Result<(), Ambiguity> {
    check_uid_group(uids, recs, group, |p| classes[p], uid_rule)?;
    let mut sorted = classes.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).all(|w| w[0] != w[1]) {
        // every class has one pod: nothing left to compare
        return Ok(());
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
        verify(cmp, uids, recs, class, next, uid_rule).map_err(|_| Ambiguity {
            pods: group.iter().map(|&(i, _)| i).collect(),
            rule: uid_rule,
        })?;
        from += chunk.len();
    }
    Ok(())
}

/// Within a group where different times compare by UID: pods of different
/// time classes must be ordered by UID across blocks and share a UID within one.
fn check_uid_group(
    uids: &(impl Uids + ?Sized),
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
    let uid_cmp = |p: usize, q: usize| uid_cmp(uids, &recs[group[p].0], &recs[group[q].0]);
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
