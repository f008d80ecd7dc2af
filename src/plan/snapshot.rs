//! A cluster snapshot: what `kubectl get pods,nodes,replicasets,deployments
//! -A -o yaml` prints, sorted by kind.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::input::{InputError, RawObject};

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
    /// Sorts decoded objects by kind; objects without a kind are an error
    /// because a snapshot mixes kinds.
    pub fn from_objects(objects: &[RawObject]) -> Result<Self, InputError> {
        let mut s = Snapshot::default();
        for o in objects {
            match o.kind.as_str() {
                "Pod" => s.pods.push(o.decode("Pod")?),
                "Node" => s.nodes.push(o.decode("Node")?),
                "ReplicaSet" => s.replica_sets.push(o.decode("ReplicaSet")?),
                "Deployment" => s.deployments.push(o.decode("Deployment")?),
                "" => {
                    return Err(InputError::Shape {
                        source_name: o.source_name.clone(),
                        location: o.location.clone(),
                        message: "object has no `kind`; a snapshot needs kinds (use `kubectl get ... -o yaml`)".into(),
                    })
                }
                other => match s.ignored.iter_mut().find(|(k, _)| k == other) {
                    Some((_, n)) => *n += 1,
                    None => s.ignored.push((other.to_string(), 1)),
                },
            }
        }
        Ok(s)
    }
}
