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
    /// Sorts objects by kind, a `List`'s items included; other kinds are
    /// counted in `ignored`. For the core's tests, which write clusters as
    /// values: the readers of kubectl's output (and their checks) are
    /// `deletion-cost-input`'s.
    pub(crate) fn from_values(values: Vec<serde_json::Value>) -> Self {
        let mut out = Snapshot::default();
        let mut ignored = std::collections::BTreeMap::<String, usize>::new();
        let mut pending = values;
        pending.reverse();
        while let Some(value) = pending.pop() {
            let kind = value["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "List" => {
                    let items = value["items"].as_array().cloned().unwrap_or_default();
                    pending.extend(items.into_iter().rev());
                }
                "Pod" => out.pods.push(Arc::new(
                    crate::pod::decode_pod_item(&value.to_string()).expect("a pod"),
                )),
                "Node" => out
                    .nodes
                    .push(Arc::new(serde_json::from_value(value).expect("a node"))),
                "ReplicaSet" => out
                    .replica_sets
                    .push(serde_json::from_value(value).expect("a ReplicaSet")),
                "Deployment" => out
                    .deployments
                    .push(serde_json::from_value(value).expect("a Deployment")),
                _ => *ignored.entry(kind).or_default() += 1,
            }
        }
        out.ignored = ignored.into_iter().collect();
        out
    }

    /// [`Snapshot::from_values`] of a YAML text (one document).
    pub(crate) fn from_yaml(text: &str) -> Self {
        Self::from_values(vec![serde_saphyr::from_str(text).expect("YAML")])
    }
}
