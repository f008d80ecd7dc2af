//! The pod/list readers `predict` uses: any text in, never a panic out.
//!
//! Bytes -> `pods_from_reader` (the streaming reader). Then:
//!
//! Text -> `parse_objects` -> `pods_from` -> ordered with the default gates at a
//! fixed `now` -> victims for every scale-down size. The snapshot reader shares
//! the same parser, so it is fed the same objects.

#![no_main]

use deletion_cost::comparator::{
    assign_ranks, is_pod_active, rank_pods, Comparator, FeatureGates, OrderedPods, RankKey,
};
use deletion_cost::input::{parse_objects, pods_from, InputLimits, SnapshotReader};
use libfuzzer_sys::fuzz_target;

/// 2023-11-14T22:13:20Z: fixed so runs are reproducible.
const NOW: i128 = 1_700_000_000 * 1_000_000_000;

fuzz_target!(|data: &[u8]| {
    // the streaming reader `predict` runs on files and stdin: any bytes
    if let Err(e) =
        deletion_cost::input::pods_from_reader("fuzz", data, InputLimits::bytes(1 << 20), 0)
    {
        let _ = e.to_string();
    }
    // files are read as UTF-8 (`read_to_string`), so other bytes never get this far
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let objects = match parse_objects("fuzz", text) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    for o in &objects {
        let _ = o.name();
    }
    let mut reader = SnapshotReader::new(InputLimits::NONE);
    if let Err(e) = reader
        .read_text("fuzz", text)
        .and_then(|()| reader.finish())
    {
        let _ = e.to_string();
    }
    let pods = match pods_from(&objects) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let active: Vec<_> = pods.iter().filter(is_pod_active).collect();
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: Some(NOW),
    };
    let mut keys: Vec<RankKey> = active
        .iter()
        .map(|p| RankKey::from_pod(*p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, pods.iter());
    let ranking = rank_pods(&cmp, &keys);
    let ordered = OrderedPods { keys, ranking };
    let n = active.len();
    assert_eq!(ordered.keys.len(), n);
    assert_eq!(ordered.in_order().count(), n);
    let mut seen = ordered.ranking.order.clone();
    seen.sort_unstable();
    assert_eq!(seen, (0..n).collect::<Vec<_>>(), "order is a permutation");
    for diff in 0..=n + 1 {
        let victims = ordered.victims(diff);
        assert_eq!(victims.len(), diff.min(n));
        let _ = ordered.ranking.tie_at_cut(diff);
    }
});
