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
