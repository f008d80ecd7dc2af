//! The comparator on arbitrary pod keys: `rank_pods` never panics, its order
//! is a permutation that agrees with `Less`, and it reports an ambiguity
//! exactly when `Less` is not a strict weak order on the pods.

#![no_main]

use arbitrary::Arbitrary;
use deletion_cost::comparator::{
    parse_deletion_cost, rank_pods, Comparator, FeatureGates, RankKey,
};
use k8s_openapi::jiff::Timestamp;
use libfuzzer_sys::fuzz_target;

/// 2023-11-14T22:13:20Z.
const NOW: i128 = 1_700_000_000 * 1_000_000_000;
/// Above this many pods the cubic definition check is skipped.
const BRUTE_FORCE_MAX: usize = 12;

/// A time as the API can carry it: an offset from `NOW`, small or anywhere in
/// the timestamp range.
#[derive(Debug, Arbitrary)]
enum Time {
    Zero,
    SecondsAgo(u16),
    Nanos(i64),
    Far(i64),
}

impl Time {
    fn to_go(&self) -> Option<i128> {
        let (min, max) = (
            Timestamp::MIN.as_nanosecond(),
            Timestamp::MAX.as_nanosecond(),
        );
        match *self {
            Time::Zero => None,
            Time::SecondsAgo(s) => Some(NOW - i128::from(s) * 1_000_000_000),
            Time::Nanos(n) => Some(NOW + i128::from(n)),
            Time::Far(s) => Some((i128::from(s) * 1_000_000_000).clamp(min, max)),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Cost {
    Int(i32),
    Raw(String),
}

/// The fields `RankKey::from_pod` fills, drawn from small sets so equal values
/// (the interesting case) are common.
#[derive(Debug, Arbitrary)]
struct Key {
    node: u8,
    phase: u8,
    ready: bool,
    cost: Cost,
    rank: u8,
    ready_time: Time,
    restarts: i8,
    sidecar_restarts: i8,
    created: Time,
    uid: u8,
}

#[derive(Debug, Arbitrary)]
struct Input {
    pod_deletion_cost: bool,
    logarithmic_scale_down: bool,
    now: Option<Time>,
    keys: Vec<Key>,
}

const NODES: [&str; 3] = ["", "n1", "n2"];
const PHASES: [&str; 5] = ["Pending", "Unknown", "Running", "Weird", ""];
const UIDS: [&str; 5] = ["a", "b", "c", "d", "aa"];

impl Key {
    fn to_key(&self, now: Option<i128>) -> RankKey<'_> {
        let phase = PHASES[usize::from(self.phase) % PHASES.len()];
        let uid = UIDS[usize::from(self.uid) % UIDS.len()];
        let node = NODES[usize::from(self.node) % NODES.len()];
        let cost = match &self.cost {
            Cost::Int(v) => parse_deletion_cost(&v.to_string()),
            Cost::Raw(s) => parse_deletion_cost(s),
        };
        RankKey {
            namespace: "ns".into(),
            name: format!("{uid}-{node}").into(),
            uid: uid.into(),
            node_name: node.into(),
            phase: Some(phase.into()),
            phase_ordinal: deletion_cost::comparator::key::phase_ordinal(Some(phase)),
            ready: self.ready,
            cost,
            // a count of related pods on the node
            rank: i64::from(self.rank % 4),
            // from_pod: only a ready pod has a ready time
            ready_time: if self.ready {
                self.ready_time.to_go()
            } else {
                None
            },
            restarts: i64::from(self.restarts),
            sidecar_restarts: i64::from(self.sidecar_restarts),
            created: self.created.to_go(),
            ready_bucket: -1,
            created_bucket: -1,
        }
        .with_now(now)
    }
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

fuzz_target!(|input: Input| {
    let cmp = Comparator {
        gates: FeatureGates {
            pod_deletion_cost: input.pod_deletion_cost,
            logarithmic_scale_down: input.logarithmic_scale_down,
        },
        now: input.now.as_ref().map_or(Some(NOW), Time::to_go),
    };
    let keys: Vec<RankKey> = input
        .keys
        .iter()
        .take(64)
        .map(|k| k.to_key(cmp.now))
        .collect();
    let r = rank_pods(&cmp, &keys);
    let n = keys.len();
    let mut seen = r.order.clone();
    seen.sort_unstable();
    assert_eq!(seen, (0..n).collect::<Vec<_>>(), "order is a permutation");
    assert_eq!(r.block.len(), n);
    assert_eq!(r.decided_by.len(), n.saturating_sub(1));
    if let Some(a) = &r.ambiguity {
        assert!(a.pods.len() >= 2 && a.pods.iter().all(|&i| i < n));
    }
    if n <= BRUTE_FORCE_MAX {
        assert_eq!(
            r.ambiguity.is_none(),
            is_strict_weak_order(&cmp, &keys),
            "ambiguity reported iff Less is not a strict weak order"
        );
    }
    if r.ambiguity.is_none() {
        // every earlier block is strictly less than every later one; a block ties
        for i in 0..n {
            for j in i + 1..n {
                let (a, b) = (&keys[r.order[i]], &keys[r.order[j]]);
                if r.block[i] == r.block[j] {
                    assert!(!cmp.less(a, b) && !cmp.less(b, a), "tie within a block");
                } else {
                    assert!(cmp.less(a, b), "blocks in order");
                }
            }
        }
    }
});
