//! Trimming watched nodes and ReplicaSets to what the planner reads (pods are
//! cached in their own slim type, see `caches`).

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;

/// Keeps a node's labels (billing class, zone) and nothing else.
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    node.spec = None;
    node.status = None;
}

/// Keeps a ReplicaSet's owner and selector.
pub fn trim_replica_set(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
    rs.metadata.annotations = None;
    rs.spec.template = None;
    rs.status = None;
}
