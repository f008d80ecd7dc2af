//! Property tests of the comparator and the strict-weak-order detection.

use proptest::prelude::*;

use super::cost::parse_deletion_cost;
use super::order::Comparator;
use super::rank::rank_pods;
use super::{FeatureGates, RankKey};

const NOW: i128 = 1_700_000_000 * 1_000_000_000;
const SEC: i128 = 1_000_000_000;

fn key_strategy() -> impl Strategy<Value = RankKey<'static>> {
    let time = prop_oneof![
        Just(None),
        // clustered so equal times and equal log2 buckets both happen often
        prop::sample::select(vec![0i128, 1, 2, 3, 5, 8, 9, 1000, 1024, 1500, 2048, -10])
            .prop_map(|s| Some(NOW - s * SEC)),
        // beyond i64 nanoseconds (before 1677): the sort narrows these to ranks
        prop::sample::select(vec![10i128.pow(11), 10i128.pow(11) + 1])
            .prop_map(|s| Some(NOW - s * SEC)),
    ];
    // restart counts beyond i32 only come from hand-built keys; narrowed too
    let restarts = prop_oneof![4 => 0i64..3, 1 => Just(i64::MAX), 1 => Just(i64::MIN)];
    (
        prop::sample::select(vec!["", "n1", "n2"]),
        prop::sample::select(vec![0u8, 1, 2]),
        any::<bool>(),
        prop::sample::select(vec!["0", "1", "-1", "007", "x"]),
        0i64..3,
        time.clone(),
        restarts,
        0i64..2,
        time,
        prop::sample::select(vec!["a", "b", "c", "d"]),
    )
        .prop_map(
            |(node, phase, ready, cost, rank, rt, restarts, sidecar, created, uid)| RankKey {
                namespace: "ns".into(),
                name: format!("{uid}-{node}").into(),
                uid: uid.into(),
                node_name: node.into(),
                phase: None,
                phase_ordinal: phase,
                ready,
                cost: parse_deletion_cost(cost),
                rank,
                ready_time: if ready { rt } else { None },
                restarts,
                sidecar_restarts: sidecar,
                created,
                ready_bucket: -1,
                created_bucket: -1,
            },
        )
}

fn cmp_strategy() -> impl Strategy<Value = Comparator> {
    (any::<bool>(), any::<bool>(), prop::bool::weighted(0.9)).prop_map(|(c, l, has_now)| {
        Comparator {
            gates: FeatureGates {
                pod_deletion_cost: c,
                logarithmic_scale_down: l,
            },
            now: has_now.then_some(NOW),
        }
    })
}

/// Definition-level check: irreflexive, transitive, incomparability transitive.
fn is_strict_weak_order(cmp: &Comparator, k: &[RankKey]) -> bool {
    let n = k.len();
    let l = |i: usize, j: usize| cmp.less(&k[i], &k[j]);
    let inc = |i: usize, j: usize| !l(i, j) && !l(j, i);
    for a in 0..n {
        if l(a, a) {
            return false;
        }
        for b in 0..n {
            for c in 0..n {
                if l(a, b) && l(b, c) && !l(a, c) {
                    return false;
                }
                if inc(a, b) && inc(b, c) && !inc(a, c) {
                    return false;
                }
            }
        }
    }
    true
}

fn prepared<'a>(cmp: &Comparator, keys: Vec<RankKey<'a>>) -> Vec<RankKey<'a>> {
    keys.into_iter().map(|k| k.with_now(cmp.now)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn less_is_irreflexive_and_asymmetric(cmp in cmp_strategy(), a in key_strategy(), b in key_strategy()) {
        let (a, b) = (a.with_now(cmp.now), b.with_now(cmp.now));
        prop_assert!(!cmp.less(&a, &a));
        prop_assert!(!(cmp.less(&a, &b) && cmp.less(&b, &a)));
    }

    #[test]
    fn detection_fires_exactly_when_not_strict_weak(cmp in cmp_strategy(), keys in prop::collection::vec(key_strategy(), 0..8)) {
        let keys = prepared(&cmp, keys);
        let ranking = rank_pods(&cmp, &keys);
        prop_assert_eq!(ranking.ambiguity.is_none(), is_strict_weak_order(&cmp, &keys));
    }

    #[test]
    fn sorted_order_agrees_with_pairwise_rule(cmp in cmp_strategy(), keys in prop::collection::vec(key_strategy(), 0..40)) {
        let keys = prepared(&cmp, keys);
        let r = rank_pods(&cmp, &keys);
        // a permutation
        let mut seen = r.order.clone();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..keys.len()).collect::<Vec<_>>());
        prop_assert_eq!(r.decided_by.len(), keys.len().saturating_sub(1));
        for (pos, w) in r.order.windows(2).enumerate() {
            let (prev, next) = (&keys[w[0]], &keys[w[1]]);
            let (less, rule) = cmp.decide(prev, next);
            prop_assert_eq!(r.decided_by[pos], if less { rule } else { super::Rule::Tie });
            if r.ambiguity.is_none() {
                prop_assert!(!cmp.less(next, prev), "pair {} out of order", pos);
                if !less {
                    prop_assert_eq!(r.block[pos], r.block[pos + 1]);
                }
            }
        }
        if r.ambiguity.is_none() {
            // every earlier block is strictly less than every later one
            for i in 0..keys.len() {
                for j in i + 1..keys.len() {
                    let (a, b) = (&keys[r.order[i]], &keys[r.order[j]]);
                    if r.block[i] == r.block[j] {
                        prop_assert!(!cmp.less(a, b) && !cmp.less(b, a));
                    } else {
                        prop_assert!(cmp.less(a, b));
                    }
                }
            }
        }
    }
}

fn key(uid: &str, ready_secs_ago: Option<i128>, restarts: i64) -> RankKey<'_> {
    RankKey {
        namespace: "ns".into(),
        name: uid.into(),
        uid: uid.into(),
        node_name: "n".into(),
        phase: Some("Running".into()),
        phase_ordinal: 2,
        ready: true,
        cost: parse_deletion_cost("0"),
        rank: 1,
        ready_time: ready_secs_ago.map(|s| NOW - s * SEC),
        restarts,
        sidecar_restarts: 0,
        created: Some(NOW - 10_000 * SEC),
        ready_bucket: -1,
        created_bucket: -1,
    }
}

#[test]
fn uid_cycle_is_reported_not_panicking() {
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: Some(NOW),
    };
    // a and c were ready at the same instant (rule 7 decides: c restarted more),
    // b in the same log2 bucket at another instant (UID decides): a < b < c < a.
    let keys = prepared(
        &cmp,
        vec![
            key("a", Some(1000), 0),
            key("b", Some(1001), 0),
            key("c", Some(1000), 5),
        ],
    );
    assert!(cmp.less(&keys[0], &keys[1]));
    assert!(cmp.less(&keys[1], &keys[2]));
    assert!(cmp.less(&keys[2], &keys[0]));
    let r = rank_pods(&cmp, &keys);
    let amb = r.ambiguity.expect("cycle must be detected");
    let mut pods = amb.pods.clone();
    pods.sort_unstable();
    assert_eq!(pods, vec![0, 1, 2]);
    assert_eq!(amb.rule, super::Rule::ReadyTimeUid);
}

/// Rewrites UIDs (unique; sharing their first 8 bytes when `shared_prefix`,
/// so the sort must read the strings) and, when `extreme`, widens costs
/// and ranks so the sort's packed keys run out of room for UID bits.
fn vary(keys: &mut [RankKey], unique: bool, shared_prefix: bool, extreme: bool) {
    let n = keys.len();
    for (i, k) in keys.iter_mut().enumerate() {
        if unique {
            // a permutation of 0..n, so input order and UID order differ
            let u = (i * 7 + 3) % n.max(1);
            let prefix = if shared_prefix { "abcdefgh" } else { "" };
            k.uid = format!("{prefix}{u:03}").into();
        }
        if extreme && i % 3 == 0 {
            k.rank = if i % 2 == 0 { i64::MAX } else { i64::MIN };
            k.cost = parse_deletion_cost(if i % 2 == 0 {
                "2147483647"
            } else {
                "-2147483648"
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Whenever `Less` is a strict weak order, the order is exactly a
    /// stable comparison sort by `Less` (the sort itself never calls it),
    /// and the conflict is reported exactly when it is not one.
    #[test]
    fn order_is_the_stable_sort_whenever_less_is_strict_weak(
        cmp in cmp_strategy(),
        keys in prop::collection::vec(key_strategy(), 0..36),
        unique in any::<bool>(),
        shared_prefix in any::<bool>(),
        extreme in prop::bool::weighted(0.2),
    ) {
        let mut keys = keys;
        vary(&mut keys, unique, shared_prefix, extreme);
        let keys = prepared(&cmp, keys);
        let weak = is_strict_weak_order(&cmp, &keys);
        let r = rank_pods(&cmp, &keys);
        prop_assert_eq!(r.ambiguity.is_none(), weak);
        if weak {
            let mut expected: Vec<usize> = (0..keys.len()).collect();
            expected.sort_by(|&a, &b| {
                if cmp.less(&keys[a], &keys[b]) {
                    std::cmp::Ordering::Less
                } else if cmp.less(&keys[b], &keys[a]) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            });
            prop_assert_eq!(&r.order, &expected);
        }
    }
}

/// The stable bottom-up merge sort by `Less` that ordered pods before the
/// integer-key sort, kept as a reference.
fn merge_sorted(cmp: &Comparator, keys: &[RankKey]) -> Vec<usize> {
    let mut items: Vec<usize> = (0..keys.len()).collect();
    let less = |a: &usize, b: &usize| cmp.less(&keys[*a], &keys[*b]);
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
    let n = items.len();
    let mut buf = items.clone();
    let mut width = RUN;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j, mut k) = (start, mid, start);
            while i < mid && j < end {
                if less(&items[j], &items[i]) {
                    buf[k] = items[j];
                    j += 1;
                } else {
                    buf[k] = items[i];
                    i += 1;
                }
                k += 1;
            }
            buf[k..k + (mid - i)].copy_from_slice(&items[i..mid]);
            k += mid - i;
            buf[k..end].copy_from_slice(&items[j..end]);
            start = end;
        }
        std::mem::swap(&mut items, &mut buf);
        width *= 2;
    }
    items
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The order differs from the merge sort's only inside groups of pods
    /// equal under rules 1-6's key on which `Less` is not a strict weak
    /// order: there upstream's own order depends on its input order.
    #[test]
    fn order_differs_from_the_merge_sort_only_where_less_conflicts(
        cmp in cmp_strategy(),
        keys in prop::collection::vec(key_strategy(), 0..80),
        unique in any::<bool>(),
    ) {
        let mut keys = keys;
        vary(&mut keys, unique, false, false);
        let keys = prepared(&cmp, keys);
        let new = rank_pods(&cmp, &keys).order;
        let old = merge_sorted(&cmp, &keys);
        let recs = super::packed::pack(&cmp, &keys);
        let group = |i: usize| super::packed::level_key(&cmp, &recs[i], super::packed::Level::Ready).0;
        let mut start = 0;
        while start < new.len() {
            let g = group(new[start]);
            let end = start + new[start..].iter().take_while(|&&i| group(i) == g).count();
            // both orders put the same group at the same positions
            let (a, b) = (&new[start..end], &old[start..end]);
            prop_assert!(b.iter().all(|&i| group(i) == g));
            let members: Vec<RankKey> = a.iter().map(|&i| keys[i].clone()).collect();
            if is_strict_weak_order(&cmp, &members) {
                prop_assert_eq!(a, b);
            }
            start = end;
        }
    }
}

#[test]
fn same_bucket_distinct_times_sorts_by_uid() {
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: Some(NOW),
    };
    let keys = prepared(
        &cmp,
        vec![
            key("c", Some(1030), 0),
            key("a", Some(1020), 9),
            key("b", Some(1010), 0),
        ],
    );
    let r = rank_pods(&cmp, &keys);
    assert!(r.ambiguity.is_none());
    let names: Vec<&str> = r.order.iter().map(|&i| &*keys[i].uid).collect();
    assert_eq!(names, ["a", "b", "c"]);
    // without the log gate the most recently ready goes first
    let plain = Comparator {
        gates: FeatureGates {
            logarithmic_scale_down: false,
            ..FeatureGates::default()
        },
        now: Some(NOW),
    };
    let r = rank_pods(&plain, &keys);
    let names: Vec<&str> = r.order.iter().map(|&i| &*keys[i].uid).collect();
    assert_eq!(names, ["b", "a", "c"]);
}

#[test]
fn tie_at_cut_is_reported() {
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: Some(NOW),
    };
    let keys = prepared(
        &cmp,
        vec![
            key("a", Some(5), 0),
            key("b", Some(5), 0),
            key("c", Some(100_000), 0),
        ],
    );
    let r = rank_pods(&cmp, &keys);
    assert!(r.ambiguity.is_none());
    assert!(r.tie_at_cut(1));
    assert!(!r.tie_at_cut(2));
    let ties = r.ties();
    assert_eq!(ties.len(), 1);
    assert_eq!(ties[0], 0..2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// The sort's precomputed fast comparison answers exactly as `less`,
    /// including UIDs that share their first 8 bytes and extreme ranks/costs.
    #[test]
    fn fast_less_matches_less(
        cmp in cmp_strategy(),
        mut a in key_strategy(),
        mut b in key_strategy(),
        ua in prop::sample::select(vec!["", "a", "abcdefgh", "abcdefgh1", "abcdefgh2", "abcdefg", "abcdefg\u{0}", "b"]),
        ub in prop::sample::select(vec!["", "a", "abcdefgh", "abcdefgh1", "abcdefgh2", "abcdefg", "abcdefg\u{0}", "b"]),
        ra in prop::sample::select(vec![i64::MIN, -1, 0, 1, 2, i64::MAX]),
        rb in prop::sample::select(vec![i64::MIN, -1, 0, 1, 2, i64::MAX]),
        ca in prop::sample::select(vec!["-2147483648", "-1", "0", "1", "2147483647"]),
        pa in 0u8..=255,
        extreme in any::<bool>(),
        same_head in any::<bool>(),
    ) {
        if same_head {
            // equal under rules 1-5 so the tail (times, UIDs) decides
            b.node_name = a.node_name.clone();
            b.phase_ordinal = a.phase_ordinal;
            b.ready = a.ready;
            b.cost = a.cost.clone();
            b.rank = a.rank;
            if !b.ready {
                b.ready_time = None;
            }
        }
        a.uid = ua.into();
        b.uid = ub.into();
        if extreme && !same_head {
            a.rank = ra;
            b.rank = rb;
            a.cost = parse_deletion_cost(ca);
            a.phase_ordinal = pa;
        }
        let keys = prepared(&cmp, vec![a, b]);
        prop_assert_eq!(super::rank::check_fast_less(&cmp, &keys, 0, 1), cmp.less(&keys[0], &keys[1]));
        prop_assert_eq!(super::rank::check_fast_less(&cmp, &keys, 1, 0), cmp.less(&keys[1], &keys[0]));
    }
}
