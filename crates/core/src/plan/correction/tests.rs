//! The minimal correction: exact where it can be, fewest writes, sound
//! whatever value in flight lands, and the bound of a scale-in by k.

use proptest::prelude::*;

use super::*;
use crate::comparator::{rank_pods, Comparator, FeatureGates, ParsedCost, RankKey};

const NOW: i128 = 1_700_000_000 * 1_000_000_000;
const SEC: i128 = 1_000_000_000;

fn cmp() -> Comparator {
    Comparator {
        gates: FeatureGates::default(),
        now: Some(NOW),
    }
}

/// A Ready, Running pod on `node` with `cost`, created `age` seconds ago.
fn key(i: usize, node: &str, cost: i32, age: i128) -> RankKey<'static> {
    RankKey {
        namespace: "shop".into(),
        name: format!("web-{i}").into(),
        uid: format!("uid-{i:03}").into(),
        node_name: node.to_string().into(),
        phase: Some("Running".into()),
        phase_ordinal: 2,
        ready: true,
        cost: ParsedCost {
            value: cost,
            problem: None,
        },
        rank: 1,
        ready_time: Some(NOW - age * SEC),
        restarts: 0,
        sidecar_restarts: 0,
        created: Some(NOW - age * SEC),
        ready_bucket: -1,
        created_bucket: -1,
    }
    .with_now(Some(NOW))
}

fn ours(intended: i32) -> PodCosts {
    PodCosts {
        intended,
        writable: true,
        in_flight: None,
    }
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v
}

/// Costs as they stand after `writes`, each pod at `live[i]` unless written.
fn apply(keys: &[RankKey<'static>], writes: &[Write]) -> Vec<RankKey<'static>> {
    let mut out = keys.to_vec();
    for w in writes {
        out[w.pod].cost = ParsedCost {
            value: w.cost,
            problem: None,
        };
    }
    out
}

#[test]
fn costs_already_putting_the_wanted_pods_first_need_no_write() {
    let keys: Vec<_> = (0..6).map(|i| key(i, "n1", i as i32 * 10, 100)).collect();
    // intended: the same order, other values
    let pods: Vec<_> = (0..6).map(ours).collect();
    let c = correct(&cmp(), &keys, &pods, 2);
    assert!(c.already_right);
    assert!(c.writes.is_empty());
    assert_eq!(sorted(c.wanted), vec![0, 1]);
    assert_eq!(sorted(c.after), vec![0, 1]);
}

#[test]
fn a_reshuffle_of_three_hundred_pods_needs_only_the_victims_written() {
    // live costs say 0..300; the policy now wants the last three first
    let keys: Vec<_> = (0..300).map(|i| key(i, "n1", i as i32, 100)).collect();
    let pods: Vec<_> = (0..300).map(|i| ours(300 - i)).collect();
    let c = correct(&cmp(), &keys, &pods, 3);
    assert!(!c.already_right);
    assert_eq!(c.unreachable, None);
    assert_eq!(sorted(c.wanted.clone()), vec![297, 298, 299]);
    assert_eq!(c.writes.len(), 3, "{:?}", c.writes);
    assert!(c.writes.iter().all(|w| w.direction == Direction::Lower));
    // below every kept pod's live cost (0): -1 at most
    assert!(c.writes.iter().all(|w| w.cost < 0), "{:?}", c.writes);
    // in the order the policy intends: the cheapest intended first
    assert_eq!(c.writes[0].pod, 299);
    let after = rank_pods(&cmp(), &apply(&keys, &c.writes)).victims(3);
    assert_eq!(sorted(after), vec![297, 298, 299]);
}

#[test]
fn the_intended_value_is_written_when_it_is_low_enough() {
    let keys: Vec<_> = (0..4).map(|i| key(i, "n1", 100 + i as i32, 100)).collect();
    let pods = vec![ours(50), ours(60), ours(70), ours(5)];
    let c = correct(&cmp(), &keys, &pods, 1);
    assert_eq!(
        c.writes,
        vec![Write {
            pod: 3,
            cost: 5,
            direction: Direction::Lower
        }]
    );
}

#[test]
fn a_foreign_cost_at_the_bottom_is_raised_around_not_written() {
    // pod 0 carries a foreign -100 the policy may not touch; pod 3 is
    // foreign too and wanted first, but sits at 40: the kept pods below it
    // are raised above it
    let keys = vec![
        key(0, "n1", 10, 100),
        key(1, "n1", 20, 100),
        key(2, "n1", 30, 100),
        key(3, "n1", 40, 100),
    ];
    let mut pods = vec![ours(50), ours(60), ours(70), ours(40)];
    pods[3].writable = false;
    pods[3].intended = 1; // would sort it first if it could be written
    let c = correct(&cmp(), &keys, &pods, 1);
    assert_eq!(c.unreachable, None, "{c:?}");
    assert_eq!(sorted(c.after.clone()), vec![3]);
    assert!(c
        .writes
        .iter()
        .all(|w| w.direction == Direction::Raise && w.cost > 40));
    assert_eq!(c.writes.len(), 3);
}

/// Two pods of one live cost told apart only by their ready-age buckets
/// (3 s and 5 s: buckets 2-4 s and 4-8 s), which the policy wants apart:
/// the clock can change that before the controller sorts, so the cut is
/// written to a cost boundary rather than taken as right, and it holds at
/// any later moment.
#[test]
fn a_cut_only_the_age_buckets_decide_is_written() {
    let keys = vec![
        key(0, "a", 0, 3),
        key(1, "b", 0, 5),
        key(2, "c", 1000, 9),
        key(3, "d", 1000, 9),
    ];
    let pods = vec![ours(0), ours(1), ours(1000), ours(1000)];
    let live = rank_pods(&cmp(), &keys);
    assert_eq!(live.decided_by[0], crate::comparator::Rule::ReadyTime);
    let c = correct(&cmp(), &keys, &pods, 1);
    assert!(!c.already_right, "{c:?}");
    assert_eq!(c.writes.len(), 1, "{c:?}");
    for later in [0, 1, 2, 7, 60] {
        let now = NOW + later * SEC;
        let then = Comparator {
            now: Some(now),
            ..cmp()
        };
        let after: Vec<RankKey> = apply(&keys, &c.writes)
            .into_iter()
            .map(|k| k.with_now(Some(now)))
            .collect();
        let r = rank_pods(&then, &after);
        assert_eq!(r.victims(1), c.wanted, "{later} s later");
        assert_eq!(r.decided_by[0], crate::comparator::Rule::DeletionCost);
    }
}

/// The same two pods when the policy costs them alike (two pods of one
/// node under `nodeConsolidation`): whichever the clock puts first, the
/// policy accepts, so nothing is written, at any moment.
#[test]
fn a_cut_inside_pods_the_policy_costs_alike_needs_no_write() {
    let keys = vec![
        key(0, "a", 0, 3),
        key(1, "b", 0, 5),
        key(2, "c", 1000, 9),
        key(3, "d", 1000, 9),
    ];
    let pods = vec![ours(0), ours(0), ours(1000), ours(1000)];
    let c = correct(&cmp(), &keys, &pods, 1);
    assert!(c.already_right, "{c:?}");
    assert!(c.writes.is_empty(), "{c:?}");
    assert_eq!(c.as_they_stand.len(), 1);
    assert!([0, 1].contains(&c.as_they_stand[0]), "{c:?}");
}

/// A scale-in larger than one sync: the correction holds across the
/// syncs, because it separates the wanted pods by cost, which ranks
/// before the colocation counts each sync takes anew.
#[test]
fn a_scale_in_past_one_sync_is_cut_by_cost() {
    use crate::comparator::BURST_REPLICAS;
    // two nodes of equal live cost: 520 pods on "big", 400 on "small";
    // the policy wants the 400 of "small" and 200 of "big" gone
    let mut keys = Vec::new();
    let mut pods = Vec::new();
    for i in 0..920 {
        let (node, rank) = if i < 520 {
            ("big", 520)
        } else {
            ("small", 400)
        };
        let mut k = key(i, node, 0, 100);
        k.rank = rank;
        keys.push(k.with_now(Some(NOW)));
        pods.push(ours(if i < 200 {
            5
        } else if i < 520 {
            10
        } else {
            0
        }));
    }
    let k = 600;
    assert!(k > BURST_REPLICAS);
    let c = correct(&cmp(), &keys, &pods, k);
    assert_eq!(c.unreachable, None);
    let landed = apply(&keys, &c.writes);
    let r = rank_pods(&cmp(), &landed);
    let syncs = crate::comparator::victims_in_syncs(&cmp(), &landed, &r, k, BURST_REPLICAS);
    assert_eq!(syncs.syncs, 2);
    let mut got = syncs.victims.clone();
    got.sort_unstable();
    let mut want = c.wanted.clone();
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(want.iter().all(|&i| !(200..520).contains(&i)), "{want:?}");
}

#[test]
fn a_tie_at_the_cut_accepts_any_of_the_tied_pods() {
    // intended: pods 1 and 2 tie for the one victim slot; pod 2 goes first now
    let keys = vec![
        key(0, "n1", 30, 100),
        key(1, "n1", 20, 100),
        key(2, "n1", 10, 100),
    ];
    let mut keys = keys;
    // equal in everything the comparator reads but the cost and the UID
    // (one creation bucket; no UID rule applies when times are equal)
    for k in &mut keys {
        k.uid = "same".into();
    }
    let pods = vec![ours(50), ours(7), ours(7)];
    let c = correct(&cmp(), &keys, &pods, 1);
    assert!(c.already_right, "{c:?}");
    assert_eq!(c.wanted, vec![2]);
}

/// A cut the correction leaves in a tie (equal costs, nothing else told
/// apart) names one of several victims the policy accepts, not the one the
/// controller will pick: the correction says so. With the costs apart the
/// same cut is a prediction.
#[test]
fn a_correction_left_in_a_tie_says_so() {
    let correct_by_one = |keys: &[RankKey<'static>], pods: &[PodCosts]| {
        let names: Vec<std::sync::Arc<str>> =
            keys.iter().map(|k| k.name.to_string().into()).collect();
        let uids = names.clone();
        ReplicaSetCorrection::new("web", &cmp(), keys, pods, names, &uids, 1)
    };
    let mut keys = vec![
        key(0, "n1", 0, 100),
        key(1, "n1", 0, 100),
        key(2, "n1", 1000, 100),
    ];
    for k in &mut keys {
        k.uid = "same".into();
    }
    let mut pods = vec![ours(0), ours(0), ours(1000)];
    let tied = correct_by_one(&keys, &pods);
    assert!(tied.correction.already_right, "{:?}", tied.correction);
    assert!(tied.tie_at_cut());
    keys[0].cost.value = -1;
    pods[0] = ours(-1);
    let apart = correct_by_one(&keys, &pods);
    assert!(apart.correction.already_right, "{:?}", apart.correction);
    assert!(!apart.tie_at_cut());
}

#[test]
fn not_ready_pods_go_first_whatever_their_cost() {
    let mut keys: Vec<_> = (0..5).map(|i| key(i, "n1", 0, 100)).collect();
    keys[4].ready = false;
    keys[4].ready_time = None;
    keys[4].cost.value = 1000;
    // the policy wants pods 4 and 3 out: 4 goes anyway, 3 needs a write
    let pods = vec![ours(10), ours(20), ours(30), ours(1), ours(9999)];
    let c = correct(&cmp(), &keys, &pods, 2);
    assert_eq!(sorted(c.wanted.clone()), vec![3, 4]);
    assert_eq!(c.writes.len(), 1, "{:?}", c.writes);
    assert_eq!(c.writes[0].pod, 3);
}

#[test]
fn a_value_in_flight_is_read_pessimistically() {
    // pod 1 is wanted and first now, but a write in flight would put it at
    // 100, above pod 0: it is written again
    let keys = vec![key(0, "n1", 50, 100), key(1, "n1", 10, 100)];
    let mut pods = vec![ours(60), ours(5)];
    pods[1].in_flight = Some(100);
    let c = correct(&cmp(), &keys, &pods, 1);
    assert!(!c.already_right);
    assert_eq!(c.writes.len(), 1);
    assert!(c.writes[0].cost < 50);
}

#[test]
fn without_the_cost_gate_costs_change_nothing_so_nothing_is_written() {
    let keys: Vec<_> = (0..3).map(|i| key(i, "n1", i as i32, 100)).collect();
    let pods = vec![ours(3), ours(2), ours(1)];
    let mut off = cmp();
    off.gates.pod_deletion_cost = false;
    let c = correct(&off, &keys, &pods, 1);
    // the policy's order is the controller's: the one without costs
    assert!(c.already_right);
    assert!(c.writes.is_empty());
}

#[test]
fn scaling_to_zero_or_by_nothing_writes_nothing() {
    let keys: Vec<_> = (0..3).map(|i| key(i, "n1", i as i32, 100)).collect();
    let pods = vec![ours(3), ours(2), ours(1)];
    assert!(correct(&cmp(), &keys, &pods, 0).writes.is_empty());
    let all = correct(&cmp(), &keys, &pods, 3);
    assert!(all.writes.is_empty());
    assert_eq!(sorted(all.after), vec![0, 1, 2]);
}

// ------------------------------------------------------------ properties

fn case() -> impl Strategy<Value = (Vec<RankKey<'static>>, Vec<PodCosts>, usize)> {
    case_of(true)
}

/// Without `rare`: no cost at int32's ends and nothing in flight.
fn case_of(rare: bool) -> impl Strategy<Value = (Vec<RankKey<'static>>, Vec<PodCosts>, usize)> {
    let ends = if rare { 1 } else { 0 };
    let pod = (
        prop_oneof![8 => Just("n1"), 2 => Just("n2"), 1 => Just("")],
        prop_oneof![9 => Just(2u8), 1 => Just(0u8)],
        prop::bool::weighted(0.85),
        prop_oneof![6 => -3i32..4, ends => Just(i32::MIN), ends => Just(i32::MAX)],
        -3i32..4,
        prop::bool::weighted(0.85),
        prop_oneof![4 => Just(None), ends => (-3i32..4).prop_map(Some)],
        prop::sample::select(vec![10i128, 100, 1000, 1001]),
        0i64..3,
    );
    prop::collection::vec(pod, 2..9).prop_flat_map(|pods| {
        let n = pods.len();
        let (keys, costs): (Vec<_>, Vec<_>) = pods
            .into_iter()
            .enumerate()
            .map(
                |(i, (node, phase, ready, live, intended, writable, in_flight, age, rank))| {
                    let mut k = key(i, node, live, age);
                    k.phase_ordinal = phase;
                    k.ready = ready;
                    k.rank = rank;
                    if !ready {
                        k.ready_time = None;
                    }
                    (
                        k.with_now(Some(NOW)),
                        PodCosts {
                            intended,
                            writable,
                            in_flight,
                        },
                    )
                },
            )
            .unzip();
        (Just(keys), Just(costs), 1..n)
    })
}

/// Every combination of the values in flight landing or not.
fn landings(keys: &[RankKey<'static>], pods: &[PodCosts]) -> Vec<Vec<RankKey<'static>>> {
    let flying: Vec<usize> = (0..pods.len())
        .filter(|&i| pods[i].in_flight.is_some())
        .collect();
    (0..1u32 << flying.len())
        .map(|mask| {
            let mut ks = keys.to_vec();
            for (bit, &i) in flying.iter().enumerate() {
                if mask & (1 << bit) != 0 {
                    ks[i].cost.value = pods[i].in_flight.unwrap_or_default();
                }
            }
            ks
        })
        .collect()
}

fn intended_accepts(
    keys: &[RankKey<'static>],
    pods: &[PodCosts],
    k: usize,
    victims: &[usize],
) -> bool {
    let intended: Vec<RankKey> = keys
        .iter()
        .zip(pods)
        .map(|(key, p)| RankKey {
            cost: ParsedCost {
                value: p.intended,
                problem: None,
            },
            ..key.clone()
        })
        .collect();
    let r = rank_pods(&cmp(), &intended);
    let (before, tied) = super::cost_cut(&r, &intended, k);
    let set: std::collections::BTreeSet<usize> = victims.iter().copied().collect();
    before.iter().all(|i| set.contains(i))
        && set.iter().all(|i| before.contains(i) || tied.contains(i))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Exact when reachable: once the writes land, whichever value in
    /// flight lands too, the controller deletes exactly the wanted pods,
    /// which the policy accepts, and no tie at the cut leaves it to chance.
    #[test]
    fn once_written_the_controller_deletes_exactly_the_wanted_pods((keys, pods, k) in case()) {
        let c = correct(&cmp(), &keys, &pods, k);
        prop_assert!(intended_accepts(&keys, &pods, k, &c.wanted));
        if c.already_right && pods.iter().all(|p| p.in_flight.is_none()) {
            // taken as right only where the clock cannot move the cut
            // out of what the policy accepts: the controller sorts later
            for later in [1, 2, 7, 60, 3600] {
                let now = NOW + later * SEC;
                let then = Comparator { now: Some(now), ..cmp() };
                let moved: Vec<RankKey> = keys.iter().map(|k| k.clone().with_now(Some(now))).collect();
                let r = rank_pods(&then, &moved);
                if r.ambiguity.is_none() {
                    prop_assert!(intended_accepts(&keys, &pods, k, &r.victims(k)),
                        "{later} s later: victims {:?} not accepted", r.victims(k));
                }
            }
        }
        if c.unreachable.is_some() {
            return Ok(());
        }
        for landed in landings(&keys, &pods) {
            let r = rank_pods(&cmp(), &apply(&landed, &c.writes));
            if r.ambiguity.is_some() {
                continue;
            }
            prop_assert!(intended_accepts(&keys, &pods, k, &r.victims(k)),
                "victims {:?} not accepted; writes {:?}", r.victims(k), c.writes);
            if !c.already_right {
                prop_assert!(!r.tie_at_cut(k));
                prop_assert_eq!(sorted(r.victims(k)), sorted(c.wanted.clone()));
            }
        }
    }

    /// Only pods the policy may write are written, never to their live
    /// value, and lowered pods are wanted ones, raised ones are kept.
    #[test]
    fn writes_respect_what_the_policy_may_touch((keys, pods, k) in case()) {
        let c = correct(&cmp(), &keys, &pods, k);
        for w in &c.writes {
            prop_assert!(pods[w.pod].writable);
            let wanted = c.wanted.contains(&w.pod);
            prop_assert_eq!(w.direction == Direction::Lower, wanted);
        }
        let mut pods_written: Vec<usize> = c.writes.iter().map(|w| w.pod).collect();
        pods_written.sort_unstable();
        pods_written.dedup();
        prop_assert_eq!(pods_written.len(), c.writes.len());
    }

    /// The bound: when every wanted pod may be written and no kept pod sits
    /// at int32's least value, a scale-in by k writes at most k values.
    #[test]
    fn a_scale_in_by_k_writes_at_most_k_values_when_the_pods_are_ours((keys, pods, k) in case()) {
        let c = correct(&cmp(), &keys, &pods, k);
        let all_ours = pods.iter().all(|p| p.writable);
        let no_floor = keys.iter().all(|k| k.cost.value != i32::MIN)
            && pods.iter().all(|p| p.in_flight != Some(i32::MIN));
        if all_ours && no_floor {
            prop_assert!(c.unreachable.is_none(), "{c:?}");
            prop_assert!(c.writes.len() <= k, "{} writes for k = {k}", c.writes.len());
        }
    }

}

proptest! {
    // most cases need no write: they are skipped, not failed
    #![proptest_config(ProptestConfig { cases: 1000, max_global_rejects: 20_000, ..ProptestConfig::default() })]

    /// Fewest writes: no smaller set of pods, written at the most favourable
    /// values (wanted at the least, kept at the most), puts every wanted pod
    /// of the deciding class below every kept one by cost (the cut that
    /// holds whatever the later rules say).
    #[test]
    fn no_smaller_set_of_writes_would_do((keys, pods, k) in case_of(false)) {
        let c = correct(&cmp(), &keys, &pods, k);
        prop_assume!(c.unreachable.is_none() && !c.already_right);
        let n = keys.len();
        let wanted: std::collections::BTreeSet<usize> = c.wanted.iter().copied().collect();
        for mask in 0u32..(1 << n) {
            if (mask.count_ones() as usize) >= c.writes.len() {
                continue;
            }
            let mut ks = keys.clone();
            let mut allowed = true;
            for (i, key) in ks.iter_mut().enumerate() {
                if mask & (1 << i) != 0 {
                    allowed &= pods[i].writable;
                    key.cost.value = if wanted.contains(&i) { i32::MIN } else { i32::MAX };
                }
            }
            if !allowed {
                continue;
            }
            let class = |k: &RankKey| (!k.node_name.is_empty(), k.phase_ordinal, k.ready);
            let last = c.wanted.iter().max_by_key(|&&i| class(&keys[i])).map(|&i| class(&keys[i]));
            let in_class = |i: usize| Some(class(&keys[i])) == last;
            let highest_wanted = (0..n).filter(|&i| in_class(i) && wanted.contains(&i)).map(|i| ks[i].cost.value).max();
            let lowest_kept = (0..n).filter(|&i| in_class(i) && !wanted.contains(&i)).map(|i| ks[i].cost.value).min();
            let separated = match (highest_wanted, lowest_kept) {
                (Some(w), Some(k)) => w < k,
                _ => true,
            };
            let r = rank_pods(&cmp(), &ks);
            let exact = separated
                && r.victims(k).iter().copied().collect::<std::collections::BTreeSet<_>>() == wanted;
            prop_assert!(!exact, "{:b} ({} writes) beats {:?}", mask, mask.count_ones(), c.writes);
        }
    }
}
