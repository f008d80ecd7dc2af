//! Signal values remembered from one plan to the next, for hysteresis.

use std::sync::Arc;

/// Values of the signals that read their last value (utilisation, for
/// hysteresis) per pod and signal index. A flat list sorted by (pod, signal):
/// the operator keeps one per policy between rounds, so it is built in bulk
/// and holds no allocation per pod beyond the pod's (shared) name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreviousValues {
    entries: Vec<(Arc<str>, usize, i64)>,
}

impl PreviousValues {
    /// No values.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of (pod, signal) values.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of signal `signal` for pod `pod`.
    pub fn get(&self, pod: &str, signal: usize) -> Option<i64> {
        self.entries
            .binary_search_by(|(p, s, _)| (&**p, *s).cmp(&(pod, signal)))
            .ok()
            .map(|i| self.entries[i].2)
    }

    /// Values in (pod, signal) order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, usize, i64)> {
        self.entries.iter().map(|(p, s, v)| (&**p, *s, *v))
    }
}

/// Builds from values in any order; where a (pod, signal) repeats, the last wins.
impl<N: Into<Arc<str>>> FromIterator<(N, usize, i64)> for PreviousValues {
    fn from_iter<I: IntoIterator<Item = (N, usize, i64)>>(values: I) -> Self {
        let mut entries: Vec<(Arc<str>, usize, i64)> = values
            .into_iter()
            .map(|(p, s, v)| (p.into(), s, v))
            .collect();
        // the planner gives them sorted; only repeats of a name (possible in
        // a file, not in a cluster) need the sort
        let sorted = entries
            .windows(2)
            .all(|w| (&*w[0].0, w[0].1) < (&*w[1].0, w[1].1));
        if !sorted {
            // stable: among repeats the last given stays last, and is kept
            entries.sort_by(|a, b| (&*a.0, a.1).cmp(&(&*b.0, b.1)));
            let mut kept: Vec<(Arc<str>, usize, i64)> = Vec::with_capacity(entries.len());
            for e in entries {
                match kept.last_mut() {
                    Some(last) if (&*last.0, last.1) == (&*e.0, e.1) => *last = e,
                    _ => kept.push(e),
                }
            }
            entries = kept;
        }
        Self { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_the_merge_join_agree() {
        let v: PreviousValues = [("b", 1, 5), ("a", 1, 3), ("a", 0, 2), ("c", 1, 7)]
            .into_iter()
            .collect();
        assert_eq!(v.len(), 4);
        assert_eq!(v.get("a", 1), Some(3));
        assert_eq!(v.get("a", 2), None);
        assert_eq!(v.get("z", 1), None);
        // the planner's merge join over one signal's values
        let mut c = v
            .iter()
            .filter(|(_, s, _)| *s == 1)
            .map(|(p, _, v)| (p, v))
            .peekable();
        let got: Vec<Option<i64>> = ["a", "a", "b", "bb", "c", "d"]
            .iter()
            .map(|p| super::super::costing::seek(&mut c, p))
            .collect();
        assert_eq!(got, [Some(3), Some(3), Some(5), None, Some(7), None]);
    }

    #[test]
    fn the_last_of_a_repeated_value_wins() {
        let v: PreviousValues = [("a", 1, 1), ("b", 1, 4), ("a", 1, 2)]
            .into_iter()
            .collect();
        assert_eq!(
            v.iter().collect::<Vec<_>>(),
            [("a", 1, 2), ("b", 1, 4)],
            "one value per (pod, signal), sorted"
        );
    }
}
