//! A cluster snapshot: what `kubectl get pods,nodes,replicasets,deployments
//! -A -o yaml` prints, sorted by kind.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::input::{is_version_object, InputError, RawObject};

/// Objects the planner reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Pods (any namespace).
    pub pods: Vec<Pod>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// ReplicaSets.
    pub replica_sets: Vec<ReplicaSet>,
    /// Deployments.
    pub deployments: Vec<Deployment>,
    /// Kinds that were present but are not read, with counts.
    pub ignored: Vec<(String, usize)>,
}

impl Snapshot {
    /// Sorts decoded objects by kind; other kinds, and objects without a kind
    /// (a snapshot mixes kinds, so they cannot be guessed), are counted in
    /// `ignored`. The cluster's version ([`crate::input::server_version`]) is
    /// read apart. The objects are consumed: each one's tree is freed as it
    /// is decoded, and its strings move instead of being copied.
    pub fn from_objects(objects: Vec<RawObject>) -> Result<Self, InputError> {
        let mut s = Snapshot::default();
        for o in objects.into_iter().filter(|o| !is_version_object(o)) {
            match o.kind.as_str() {
                "Pod" => s.pods.push(o.into_decoded("Pod")?),
                "Node" => s.nodes.push(o.into_decoded("Node")?),
                "ReplicaSet" => s.replica_sets.push(o.into_decoded("ReplicaSet")?),
                "Deployment" => s.deployments.push(o.into_decoded("Deployment")?),
                other => {
                    let kind = if other.is_empty() { "(no kind)" } else { other };
                    match s.ignored.iter_mut().find(|(k, _)| k == kind) {
                        Some((_, n)) => *n += 1,
                        None => s.ignored.push((kind.to_string(), 1)),
                    }
                }
            }
        }
        Ok(s)
    }
}
