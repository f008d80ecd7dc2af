//! What the watches keep of nodes and ReplicaSets: the caches hold
//! thousands of them, so only what the planner reads stays.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;

use crate::annotations::{CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT};

/// Keeps a node's labels (billing class, zone) and the annotations that
/// keep an autoscaler from removing it ([`NODE_ANNOTATIONS_KEPT`]), nothing
/// else.
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(a) = node.metadata.annotations.as_mut() {
        a.retain(|k, _| NODE_ANNOTATIONS_KEPT.contains(&k.as_str()));
    }
    if node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.is_empty())
    {
        node.metadata.annotations = None;
    }
    node.spec = None;
    node.status = None;
}

/// The node annotations the planner reads: whether Karpenter or the
/// cluster-autoscaler may remove the node.
pub const NODE_ANNOTATIONS_KEPT: [&str; 2] = [KARPENTER_DO_NOT_DISRUPT, CA_SCALE_DOWN_DISABLED];
/// Keeps a ReplicaSet's owner and selector.
pub fn trim_replica_set(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
    rs.metadata.annotations = None;
    rs.spec.template = None;
    rs.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_node_keeps_labels_and_the_autoscalers_annotations() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "od-c",
                "labels": {"karpenter.sh/capacity-type": "on-demand"},
                "annotations": {
                    CA_SCALE_DOWN_DISABLED: "true",
                    KARPENTER_DO_NOT_DISRUPT: "true",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true"
                },
                "managedFields": [{"manager": "kubelet"}]
            },
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"allocatable": {"cpu": "2"}}
        }))
        .unwrap();
        trim_node(&mut node);
        let a = node.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            a.keys().map(String::as_str).collect::<Vec<_>>(),
            [CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT]
        );
        assert!(node.metadata.labels.is_some());
        assert!(node.metadata.managed_fields.is_none() && node.spec.is_none());

        // a node with none of them holds no map
        let mut plain: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "od-b", "annotations": {"node.alpha.kubernetes.io/ttl": "0"}}
        }))
        .unwrap();
        trim_node(&mut plain);
        assert!(plain.metadata.annotations.is_none());
    }
}
