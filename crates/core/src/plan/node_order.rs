//! The node order of `nodeConsolidation`: every node of a policy's pods gets
//! a value of its own, `band * slots + slot`, so that a scale-in takes whole
//! nodes and no two nodes share a cost.
//!
//! The band is the node's pod count (capped at `maxPods`; a node no
//! autoscaler may remove comes after every count). Among nodes with equal
//! counts the slot decides: a node wants the slot its name hashes to
//! (64-bit FNV-1a of the name, modulo the slots), and a node that finds it
//! taken by a node of the same band takes the next free one (nodes placed
//! by wanted slot, then by name). The slot depends on the node's name and,
//! only through such a collision, on the other nodes of its band: when one
//! node gains or loses a pod, only its own value moves, and with 4,096
//! slots a collision among a few dozen nodes of one count is rare.
//!
//! Pure: names and counts in, values out.

use std::collections::{BTreeMap, BTreeSet};

/// 64-bit FNV-1a of `bytes`. Pinned here rather than taken from a crate:
/// the written costs depend on it, so it must never change.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// The slot a node named `name` wants among `slots`.
pub fn wanted_slot(name: &str, slots: u32) -> u32 {
    (fnv1a(name.as_bytes()) % u64::from(slots.max(1))) as u32
}

/// The node order's answer: each node's value, and the bands that hold more
/// nodes than there are slots (those nodes share values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOrder {
    /// One value per node given, in the order given.
    pub values: Vec<i64>,
    /// Each band with more nodes than slots, and its node count.
    pub crowded: Vec<(i64, usize)>,
}

/// Values for nodes given as `(name, band)`, names distinct, with `slots`
/// values per band (at least 1).
pub fn node_order(nodes: &[(&str, i64)], slots: u32) -> NodeOrder {
    let slots = slots.max(1);
    let mut by_band: BTreeMap<i64, Vec<(u32, &str, usize)>> = BTreeMap::new();
    for (i, &(name, band)) in nodes.iter().enumerate() {
        by_band
            .entry(band)
            .or_default()
            .push((wanted_slot(name, slots), name, i));
    }
    let mut values = vec![0i64; nodes.len()];
    let mut crowded = Vec::new();
    for (band, mut members) in by_band {
        members.sort_unstable();
        if members.len() > slots as usize {
            crowded.push((band, members.len()));
        }
        let base = band * i64::from(slots);
        // each takes the first free slot from the one it wants on, wrapping
        // past the last; once every slot is taken the rest keep the one
        // they want (and share it: `crowded` says so)
        let mut taken = BTreeSet::new();
        for (want, _, i) in members {
            let mut s = want;
            if taken.len() < slots as usize {
                while !taken.insert(s) {
                    s = (s + 1) % slots;
                }
            }
            values[i] = base + i64::from(s);
        }
    }
    NodeOrder { values, crowded }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv1a_is_the_published_function() {
        // the FNV test vectors
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn equal_counts_get_distinct_values_and_counts_stay_first() {
        let nodes = [("n-a", 3), ("n-b", 3), ("n-c", 2), ("n-d", 3)];
        let o = node_order(&nodes, 1024);
        assert!(o.crowded.is_empty());
        let mut v = o.values.clone();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), 4, "{:?}", o.values);
        // the count decides before the slot
        assert!(o.values[2] < o.values[0].min(o.values[1]).min(o.values[3]));
        assert!(o.values.iter().all(|&x| (2 * 1024..4 * 1024).contains(&x)));
    }

    #[test]
    fn a_collision_takes_the_next_free_slot() {
        // two slots: names that want the same slot still get both
        let want: Vec<u32> = ["x", "y", "z"].iter().map(|n| wanted_slot(n, 2)).collect();
        let (a, b) = match (0..3)
            .flat_map(|i| (i + 1..3).map(move |j| (i, j)))
            .find(|&(i, j)| want[i] == want[j])
        {
            Some(p) => p,
            None => unreachable!("three names, two slots"),
        };
        let names = ["x", "y", "z"];
        let o = node_order(&[(names[a], 0), (names[b], 0)], 2);
        assert_ne!(o.values[0], o.values[1]);
        assert!(o.crowded.is_empty());
    }

    #[test]
    fn more_nodes_than_slots_is_said_and_stays_in_its_band() {
        let nodes = [("a", 1), ("b", 1), ("c", 1)];
        let o = node_order(&nodes, 2);
        assert_eq!(o.crowded, vec![(1, 3)]);
        assert!(o.values.iter().all(|&v| (2..4).contains(&v)));
    }

    proptest! {
        /// No two nodes share a value while a band has room; a lower band
        /// always comes first; and one node's new count moves that node's
        /// value alone unless a collision links it to another.
        #[test]
        fn strict_ordered_and_local(
            counts in proptest::collection::vec(1i64..6, 1..60),
            slots in prop_oneof![Just(4096u32), 64u32..4096],
            moved in any::<proptest::sample::Index>(),
            to in 1i64..6,
        ) {
            let names: Vec<String> = (0..counts.len()).map(|i| format!("node-{i}")).collect();
            let nodes: Vec<(&str, i64)> =
                names.iter().map(String::as_str).zip(counts.iter().copied()).collect();
            let o = node_order(&nodes, slots);
            prop_assert!(o.crowded.is_empty());
            let distinct: std::collections::BTreeSet<i64> = o.values.iter().copied().collect();
            prop_assert_eq!(distinct.len(), nodes.len());
            for (i, a) in nodes.iter().enumerate() {
                for (j, b) in nodes.iter().enumerate() {
                    if a.1 < b.1 {
                        prop_assert!(o.values[i] < o.values[j]);
                    }
                }
            }
            let m = moved.index(nodes.len());
            let mut changed = nodes.clone();
            changed[m].1 = to;
            let after = node_order(&changed, slots);
            let collided = |order: &NodeOrder, ns: &[(&str, i64)], i: usize| {
                order.values[i] % i64::from(slots) != i64::from(wanted_slot(ns[i].0, slots))
            };
            for i in 0..nodes.len() {
                if i != m && after.values[i] != o.values[i] {
                    // only a node pushed off its wanted slot (or the one
                    // that pushed it) may move with another's change
                    prop_assert!(
                        collided(&o, &nodes, i) || collided(&after, &changed, i)
                            || collided(&o, &nodes, m) || collided(&after, &changed, m)
                    );
                }
            }
        }
    }
}
