//! The caches a plan reads: the watched pods, nodes, ReplicaSets and
//! policies ([`Caches`]), each trimmed to what the planner uses.
//!
//! Pods are cached as [`PodRecord`]s, the planner's own shape: only what the
//! planner, the comparator and the writer read, deserialised straight from
//! the API's JSON. Fields it does not name (container specs, managedFields,
//! foreign annotations' values aside) are skipped by the parser and never
//! allocated, which keeps a 10,000-pod cache and its initial list small. Nodes and ReplicaSets are
//! trimmed after parsing ([`trim_node`], [`trim_replica_set`]).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::plan::Snapshot;
use crate::pod::PodRecord;
use crate::policy::DeletionCostPolicy;

/// The caches a plan reads. Cheap to clone (the stores are shared), so
/// planning can take them to the blocking pool.
#[derive(Clone)]
pub struct Caches {
    pods: Store<PodRecord>,
    nodes: Store<Node>,
    replica_sets: Store<ReplicaSet>,
    policies: Store<DeletionCostPolicy>,
    /// The one namespace whose pods are watched (a namespace-scoped
    /// install), or none when every namespace's are.
    pods_of: Option<String>,
}

impl Caches {
    /// Handles on the reflectors' stores; `pods_of`: the one namespace
    /// whose pods the pod store holds, if it holds only one.
    pub fn new(
        pods: Store<PodRecord>,
        nodes: Store<Node>,
        replica_sets: Store<ReplicaSet>,
        policies: Store<DeletionCostPolicy>,
        pods_of: Option<String>,
    ) -> Self {
        Caches {
            pods,
            nodes,
            replica_sets,
            policies,
            pods_of,
        }
    }

    /// The one namespace whose pods are cached, when the install is
    /// namespace-scoped: a node's occupancy then counts only its pods.
    pub fn pods_of(&self) -> Option<&str> {
        self.pods_of.as_deref()
    }

    /// A snapshot for a round of a policy in `ns`: every cached pod (shared,
    /// not copied: a node's occupancy counts every namespace's pods, as
    /// `plan` over a cluster-wide snapshot does), every node, and the
    /// namespace's ReplicaSets.
    pub fn snapshot(&self, ns: &str) -> Snapshot {
        let in_ns = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(ns);
        Snapshot {
            pods: self.pods.state(),
            nodes: self.nodes.state().iter().map(|n| (**n).clone()).collect(),
            replica_sets: self
                .replica_sets
                .state()
                .iter()
                .filter(|r| in_ns(&r.metadata))
                .map(|r| (**r).clone())
                .collect(),
            deployments: Vec::new(),
            ignored: Vec::new(),
        }
    }

    /// Every cached pod.
    pub fn pods(&self) -> Vec<Arc<PodRecord>> {
        self.pods.state()
    }

    /// One cached pod.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.pods.get(&ObjectRef::new(name).within(ns))
    }

    /// Every cached policy.
    pub fn policies(&self) -> Vec<Arc<DeletionCostPolicy>> {
        self.policies.state()
    }

    /// One cached policy.
    pub fn policy(&self, ns: &str, name: &str) -> Option<Arc<DeletionCostPolicy>> {
        self.policies.get(&ObjectRef::new(name).within(ns))
    }
}

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
