//! What the controller deleted after a scale-in, compared with the
//! prediction: the comparison is pure, [`Engine::watch_deletions`] follows
//! the pod cache until every pod went or time is up.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::{Engine, Managed};

/// How often the pod cache is read while waiting for the deletions.
const POLL: Duration = Duration::from_millis(20);

/// What the controller deleted after the scale-in, against the prediction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VictimComparison {
    /// Pods predicted to go, first first.
    pub predicted: Vec<String>,
    /// Pods that went (got a deletionTimestamp or disappeared), by name.
    pub deleted: Vec<String>,
    /// Deleted but not predicted.
    pub unexpected: Vec<String>,
    /// Predicted but not (yet) deleted.
    pub missed: Vec<String>,
    /// As many pods went as the scale-in removes.
    pub complete: bool,
    /// Exactly the predicted pods went.
    pub as_predicted: bool,
}

/// Compares the pods active before the scale-in (`before`) and now
/// (`active_now`) with the `predicted` victims; `expected` pods should go.
pub fn compare_victims(
    predicted: &[String],
    before: &BTreeSet<String>,
    active_now: &BTreeSet<String>,
    expected: usize,
) -> VictimComparison {
    let deleted: BTreeSet<&String> = before.difference(active_now).collect();
    let predicted_set: BTreeSet<&String> = predicted.iter().collect();
    let unexpected = deleted
        .iter()
        .filter(|p| !predicted_set.contains(*p))
        .map(|p| (*p).clone())
        .collect::<Vec<_>>();
    let missed = predicted
        .iter()
        .filter(|p| !deleted.contains(p))
        .cloned()
        .collect::<Vec<_>>();
    let complete = deleted.len() >= expected;
    VictimComparison {
        predicted: predicted.to_vec(),
        deleted: deleted.into_iter().cloned().collect(),
        as_predicted: complete && unexpected.is_empty() && missed.is_empty(),
        unexpected,
        missed,
        complete,
    }
}

impl Engine {
    /// Follows the pod cache after a scale-in of `managed`'s workload until
    /// `expected` of the pods active `before` went, or until `deadline`:
    /// what went, against the `predicted` victims, as seen by then.
    pub async fn watch_deletions(
        &self,
        managed: &Managed,
        before: &BTreeSet<String>,
        predicted: &[String],
        expected: usize,
        deadline: Instant,
    ) -> VictimComparison {
        let mut comparison =
            compare_victims(predicted, before, &self.active_pods(managed), expected);
        while !comparison.complete && Instant::now() + POLL < deadline {
            tokio::time::sleep(POLL).await;
            comparison = compare_victims(predicted, before, &self.active_pods(managed), expected);
        }
        comparison
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_predicted_pods_going_is_as_predicted() {
        let c = compare_victims(&names(&["b", "a"]), &set(&["a", "b", "c"]), &set(&["c"]), 2);
        assert_eq!(c.deleted, ["a", "b"]);
        assert!(c.complete && c.as_predicted);
        assert!(c.unexpected.is_empty() && c.missed.is_empty());
    }

    #[test]
    fn other_pods_going_is_reported() {
        let c = compare_victims(&names(&["a", "b"]), &set(&["a", "b", "c"]), &set(&["b"]), 2);
        assert!(c.complete);
        assert!(!c.as_predicted);
        assert_eq!(c.unexpected, ["c"]);
        assert_eq!(c.missed, ["b"]);
    }

    #[test]
    fn too_few_deletions_are_incomplete() {
        let c = compare_victims(
            &names(&["a", "b"]),
            &set(&["a", "b", "c"]),
            &set(&["b", "c"]),
            2,
        );
        assert!(!c.complete);
        assert!(!c.as_predicted);
        assert_eq!(c.deleted, ["a"]);
        assert_eq!(c.missed, ["b"]);
        // new pods appearing meanwhile do not count as deleted
        let c = compare_victims(&names(&["a"]), &set(&["a", "b"]), &set(&["b", "z"]), 1);
        assert!(c.as_predicted);
    }
}
