//! The scale-down marker: a pod label that says "remove me first", set by
//! whoever knows which pods should go (an autoscaler, a person, `deletion-cost
//! scale-in --remove`). Pure: labels in, an answer out.
//!
//! Two labels mark a pod: this project's own, and the name a Kubernetes
//! enhancement proposal gave the same idea (`kubernetes.io/
//! prefer-for-scale-down`, proposed for the Knative autoscaler and never
//! merged upstream: the ReplicaSet controller itself ignores it). Either
//! marks; a value of `"false"` does not.
//!
//! The ReplicaSet controller's first three rules (unscheduled, then Pending
//! or Unknown, then not Ready) come before any cost, so a marker cannot put
//! a Ready pod before such a pod, and a pod of those classes goes first
//! without the marker's help ([`FirstAnyway`]).

use std::collections::BTreeMap;

use crate::comparator::is_pod_ready;
use crate::comparator::key::phase_ordinal;
use crate::pod::PodView;

/// This project's marker label.
pub const PREFER_FOR_SCALE_DOWN: &str = "deletioncost.dev/prefer-for-scale-down";

/// The label the Kubernetes enhancement proposal "prefer for scale down"
/// named; proposed, never merged upstream, accepted here as a marker.
pub const KEP_PREFER_FOR_SCALE_DOWN: &str = "kubernetes.io/prefer-for-scale-down";

/// The marker labels, this project's first.
pub const MARKER_LABELS: [&str; 2] = [PREFER_FOR_SCALE_DOWN, KEP_PREFER_FOR_SCALE_DOWN];

/// The marker label `labels` carry, this project's first; none when
/// neither is there or both say `"false"`.
pub fn marker_of(labels: Option<&BTreeMap<String, String>>) -> Option<&'static str> {
    let labels = labels?;
    MARKER_LABELS
        .into_iter()
        .find(|key| labels.get(*key).is_some_and(|v| v != "false"))
}

/// Why the ReplicaSet controller deletes a pod before every scheduled,
/// Running and Ready pod, whatever the costs say (its rules 1 to 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FirstAnyway {
    /// Not scheduled to a node (rule 1).
    Unscheduled,
    /// Phase Pending or Unknown (rule 2).
    NotRunning,
    /// Not Ready (rule 3).
    NotReady,
}

impl std::fmt::Display for FirstAnyway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FirstAnyway::Unscheduled => "not scheduled",
            FirstAnyway::NotRunning => "Pending or Unknown",
            FirstAnyway::NotReady => "not Ready",
        })
    }
}

/// Whether (and why) the controller deletes `pod` before every scheduled,
/// Running, Ready pod whatever its cost.
pub fn first_anyway(pod: &(impl PodView + ?Sized)) -> Option<FirstAnyway> {
    if pod.node_name().unwrap_or_default().is_empty() {
        Some(FirstAnyway::Unscheduled)
    } else if phase_ordinal(pod.phase()) < phase_ordinal(Some("Running")) {
        Some(FirstAnyway::NotRunning)
    } else if !is_pod_ready(pod) {
        Some(FirstAnyway::NotReady)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::PodRecord;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn either_label_marks_ours_first_and_false_does_not() {
        assert_eq!(marker_of(None), None);
        assert_eq!(marker_of(Some(&labels(&[("app", "web")]))), None);
        assert_eq!(
            marker_of(Some(&labels(&[(PREFER_FOR_SCALE_DOWN, "true")]))),
            Some(PREFER_FOR_SCALE_DOWN)
        );
        // the proposal's label marks by its presence
        assert_eq!(
            marker_of(Some(&labels(&[(KEP_PREFER_FOR_SCALE_DOWN, "")]))),
            Some(KEP_PREFER_FOR_SCALE_DOWN)
        );
        assert_eq!(
            marker_of(Some(&labels(&[
                (KEP_PREFER_FOR_SCALE_DOWN, "true"),
                (PREFER_FOR_SCALE_DOWN, "true")
            ]))),
            Some(PREFER_FOR_SCALE_DOWN)
        );
        assert_eq!(
            marker_of(Some(&labels(&[(PREFER_FOR_SCALE_DOWN, "false")]))),
            None
        );
        assert_eq!(
            marker_of(Some(&labels(&[
                (PREFER_FOR_SCALE_DOWN, "false"),
                (KEP_PREFER_FOR_SCALE_DOWN, "true")
            ]))),
            Some(KEP_PREFER_FOR_SCALE_DOWN)
        );
    }

    fn pod(node: Option<&str>, phase: &str, ready: &str) -> PodRecord {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_first_three_rules_put_a_pod_first_anyway() {
        assert_eq!(
            first_anyway(&pod(None, "Running", "True")),
            Some(FirstAnyway::Unscheduled)
        );
        assert_eq!(
            first_anyway(&pod(Some("n"), "Pending", "True")),
            Some(FirstAnyway::NotRunning)
        );
        assert_eq!(
            first_anyway(&pod(Some("n"), "Unknown", "True")),
            Some(FirstAnyway::NotRunning)
        );
        assert_eq!(
            first_anyway(&pod(Some("n"), "Running", "False")),
            Some(FirstAnyway::NotReady)
        );
        assert_eq!(first_anyway(&pod(Some("n"), "Running", "True")), None);
    }
}
