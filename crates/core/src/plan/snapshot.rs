//! A cluster snapshot: the objects the planner reads, sorted by kind. The
//! readers of what `kubectl get` prints fill one (`deletion-cost-input`'s
//! `SnapshotReader`); the operator builds one from its caches.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Node;

use crate::pod::PodRecord;

/// Objects the planner reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Pods (any namespace), trimmed to what the planner reads; shared, so
    /// the operator's rounds read its cached records without copying them.
    pub pods: Vec<Arc<PodRecord>>,
    /// Nodes.
    pub nodes: Vec<Arc<Node>>,
    /// ReplicaSets.
    pub replica_sets: Vec<ReplicaSet>,
    /// Deployments.
    pub deployments: Vec<Deployment>,
    /// Kinds that were present but are not read, with counts.
    pub ignored: Vec<(String, usize)>,
}

#[cfg(test)]
impl Snapshot {
    /// A snapshot of `value`: a Pod, Node, ReplicaSet or Deployment, or a
    /// `List` of them (other kinds are left out). For the core's tests, which
    /// write clusters as values: the readers of kubectl's output (and their
    /// checks) are `deletion-cost-input`'s.
    pub(crate) fn from_value(value: serde_json::Value) -> Self {
        let mut out = Snapshot::default();
        out.add(value);
        out
    }

    fn add(&mut self, value: serde_json::Value) {
        match value["kind"].as_str().unwrap_or_default() {
            "List" => {
                if let serde_json::Value::Array(items) = value["items"].clone() {
                    items.into_iter().for_each(|item| self.add(item));
                }
            }
            "Pod" => self.pods.push(Arc::new(
                crate::pod::decode_pod_item(&value.to_string()).expect("a pod"),
            )),
            "Node" => self
                .nodes
                .push(Arc::new(serde_json::from_value(value).expect("a node"))),
            "ReplicaSet" => self
                .replica_sets
                .push(serde_json::from_value(value).expect("a ReplicaSet")),
            "Deployment" => self
                .deployments
                .push(serde_json::from_value(value).expect("a Deployment")),
            _ => {}
        }
    }
}
