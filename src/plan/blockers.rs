//! What keeps an autoscaler from removing a node (pure): the annotations
//! Karpenter and the cluster-autoscaler read. Consolidation drains such
//! nodes last, and the savings never count them as freed.
//!
//! A node cannot be removed when it carries `karpenter.sh/do-not-disrupt:
//! "true"` or `cluster-autoscaler.kubernetes.io/scale-down-disabled:
//! "true"`, or while an active pod on it carries
//! `karpenter.sh/do-not-disrupt: "true"` (Karpenter counts DaemonSet and
//! mirror pods too) or `cluster-autoscaler.kubernetes.io/safe-to-evict:
//! "false"` (the cluster-autoscaler drains a DaemonSet pod with its node
//! whatever that says). Which autoscaler runs is not known here, so either
//! one's annotations count. PodDisruptionBudgets are not read.

use std::fmt;

use k8s_openapi::api::core::v1::Node;

use crate::annotations::{CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT};
use crate::comparator::is_pod_active;
use crate::owner::controller_of;
use crate::pod::PodRecord;

/// Reasons kept per node; the rest are counted ([`BlockedNode::more`]).
pub const BLOCKERS_LISTED: usize = 3;

/// One annotation that keeps a node, and who carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    /// `namespace/name` of the pod that carries it; `None`: the node does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The annotation's key.
    pub annotation: &'static str,
    /// Its value that keeps the node (`"true"`, or `"false"` for
    /// `safe-to-evict`).
    pub value: &'static str,
}

impl fmt::Display for Blocker {
    /// `shop/batch-x has karpenter.sh/do-not-disrupt`, `the node has
    /// cluster-autoscaler.kubernetes.io/scale-down-disabled`; a value other
    /// than `"true"` is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pod {
            Some(p) => write!(f, "{p} has {}", self.annotation)?,
            None => write!(f, "the node has {}", self.annotation)?,
        }
        if self.value != "true" {
            write!(f, ": {:?}", self.value)?;
        }
        Ok(())
    }
}

/// A node no autoscaler may remove, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedNode {
    /// The node's name.
    pub node: String,
    /// The first [`BLOCKERS_LISTED`] reasons: the node's own, then its
    /// pods' in snapshot order.
    pub blockers: Vec<Blocker>,
    /// Reasons not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl BlockedNode {
    /// A node with no reason yet.
    pub fn new(node: impl Into<String>) -> Self {
        BlockedNode {
            node: node.into(),
            blockers: Vec::new(),
            more: 0,
        }
    }

    /// Adds a reason (counted, not listed, past [`BLOCKERS_LISTED`]).
    pub fn push(&mut self, b: Blocker) {
        if self.blockers.len() < BLOCKERS_LISTED {
            self.blockers.push(b);
        } else {
            self.more += 1;
        }
    }
}

impl fmt::Display for BlockedNode {
    /// `od-a cannot be removed: jobs/batch-x has karpenter.sh/do-not-disrupt`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cannot be removed: ", self.node)?;
        for (i, b) in self.blockers.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{b}")?;
        }
        if self.more > 0 {
            write!(f, " (and {} more)", self.more)?;
        }
        Ok(())
    }
}

/// The annotations of `node` that keep it, Karpenter's first.
pub fn node_blockers(node: &Node) -> Vec<Blocker> {
    let Some(a) = node.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    [KARPENTER_DO_NOT_DISRUPT, CA_SCALE_DOWN_DISABLED]
        .into_iter()
        .filter(|k| a.get(*k).is_some_and(|v| v == "true"))
        .map(|annotation| Blocker {
            pod: None,
            annotation,
            value: "true",
        })
        .collect()
}

/// What keeps `pod`'s node while the pod stays there, if anything: an
/// active pod's `do-not-disrupt`, else its `safe-to-evict: "false"` unless
/// a DaemonSet controls it. An unscheduled pod keeps no node.
pub fn pod_blocker(pod: &PodRecord) -> Option<Blocker> {
    let marks = pod.ours.autoscaler;
    // most pods carry neither: decided before anything else is read
    if !(marks.do_not_disrupt || marks.not_safe_to_evict) {
        return None;
    }
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !scheduled || !is_pod_active(pod) {
        return None;
    }
    let (annotation, value) = if marks.do_not_disrupt {
        (KARPENTER_DO_NOT_DISRUPT, "true")
    } else if controller_of(pod.owner_references()).is_some_and(|o| o.kind == "DaemonSet") {
        return None;
    } else {
        (CA_SAFE_TO_EVICT, "false")
    };
    Some(Blocker {
        pod: Some(format!(
            "{}/{}",
            pod.identity.namespace.as_deref().unwrap_or(""),
            pod.identity.name.as_deref().unwrap_or("")
        )),
        annotation,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(v: serde_json::Value) -> PodRecord {
        serde_json::from_value(v).unwrap()
    }

    fn pod(annotations: serde_json::Value, owner: &str) -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "batch-x", "namespace": "jobs", "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "o",
                    "uid": "u", "controller": true}]},
            "spec": {"nodeName": "od-a"},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn a_pod_keeps_its_node_as_each_autoscaler_reads_it() {
        let dnd = serde_json::json!({KARPENTER_DO_NOT_DISRUPT: "true"});
        let b = pod_blocker(&record(pod(dnd.clone(), "Job"))).unwrap();
        assert_eq!(
            b.to_string(),
            "jobs/batch-x has karpenter.sh/do-not-disrupt"
        );
        // Karpenter counts DaemonSet pods; the cluster-autoscaler does not
        assert!(pod_blocker(&record(pod(dnd, "DaemonSet"))).is_some());
        let ste = serde_json::json!({CA_SAFE_TO_EVICT: "false"});
        assert_eq!(
            pod_blocker(&record(pod(ste.clone(), "ReplicaSet")))
                .unwrap()
                .to_string(),
            "jobs/batch-x has cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\""
        );
        assert_eq!(pod_blocker(&record(pod(ste.clone(), "DaemonSet"))), None);
        // other values, finished, terminating and unscheduled pods keep nothing
        let other =
            serde_json::json!({KARPENTER_DO_NOT_DISRUPT: "false", CA_SAFE_TO_EVICT: "true"});
        assert_eq!(pod_blocker(&record(pod(other, "Job"))), None);
        let mut done = pod(ste.clone(), "Job");
        done["status"]["phase"] = "Succeeded".into();
        assert_eq!(pod_blocker(&record(done)), None);
        let mut leaving = pod(ste.clone(), "Job");
        leaving["metadata"]["deletionTimestamp"] = "2026-11-22T03:00:00Z".into();
        assert_eq!(pod_blocker(&record(leaving)), None);
        let mut unscheduled = pod(ste, "Job");
        unscheduled["spec"] = serde_json::json!({});
        assert_eq!(pod_blocker(&record(unscheduled)), None);
    }

    #[test]
    fn a_node_is_kept_by_its_own_annotations() {
        let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "od-c",
            "annotations": {CA_SCALE_DOWN_DISABLED: "true", KARPENTER_DO_NOT_DISRUPT: "false"}}}))
        .unwrap();
        let mut n = BlockedNode::new("od-c");
        for b in node_blockers(&node) {
            n.push(b);
        }
        assert_eq!(
            n.to_string(),
            "od-c cannot be removed: the node has cluster-autoscaler.kubernetes.io/scale-down-disabled"
        );
        assert!(node_blockers(&Node::default()).is_empty());
    }

    #[test]
    fn many_reasons_are_counted_past_the_first_few() {
        let mut n = BlockedNode::new("od-a");
        for i in 0..5 {
            n.push(Blocker {
                pod: Some(format!("jobs/batch-{i}")),
                annotation: KARPENTER_DO_NOT_DISRUPT,
                value: "true",
            });
        }
        assert_eq!(n.blockers.len(), BLOCKERS_LISTED);
        assert_eq!(n.more, 2);
        assert!(n
            .to_string()
            .ends_with("jobs/batch-2 has karpenter.sh/do-not-disrupt (and 2 more)"));
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["more"], 2);
        assert_eq!(json["blockers"][0]["pod"], "jobs/batch-0");
        assert_eq!(json["blockers"][0]["value"], "true");
    }
}
