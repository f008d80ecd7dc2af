//! The caches a plan reads: the watched pods, nodes, ReplicaSets and
//! policies ([`Caches`]), each trimmed to what the planner uses.
//!
//! Pods are cached as [`CachedPod`]: only what the planner, the comparator
//! and the writer read, deserialised straight from the API's JSON. Fields it
//! does not name (container specs, managedFields, foreign annotations' values
//! aside) are skipped by the parser and never allocated, which keeps a
//! 10,000-pod cache and its initial list small. Nodes and ReplicaSets are
//! trimmed after parsing ([`trim_node`], [`trim_replica_set`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Node, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::runtime::reflector::{ObjectRef, Store};
use serde::{Deserialize, Deserializer};

use crate::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};
use crate::plan::Snapshot;
use crate::policy::DeletionCostPolicy;

/// The caches a plan reads. Cheap to clone (the stores are shared), so
/// planning can take them to the blocking pool.
#[derive(Clone)]
pub struct Caches {
    pods: Store<CachedPod>,
    nodes: Store<Node>,
    replica_sets: Store<ReplicaSet>,
    policies: Store<DeletionCostPolicy>,
}

impl Caches {
    /// Handles on the reflectors' stores.
    pub fn new(
        pods: Store<CachedPod>,
        nodes: Store<Node>,
        replica_sets: Store<ReplicaSet>,
        policies: Store<DeletionCostPolicy>,
    ) -> Self {
        Caches {
            pods,
            nodes,
            replica_sets,
            policies,
        }
    }

    /// A snapshot of one namespace.
    pub fn snapshot(&self, ns: &str) -> Snapshot {
        let in_ns = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(ns);
        Snapshot {
            pods: self
                .pods
                .state()
                .iter()
                .filter(|p| in_ns(&p.metadata))
                .map(|p| p.to_pod())
                .collect(),
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
    pub fn pods(&self) -> Vec<Arc<CachedPod>> {
        self.pods.state()
    }

    /// One cached pod.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<CachedPod>> {
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

/// A cached pod. [`CachedPod::to_pod`] gives the planner's view of it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CachedPod {
    /// Identity, labels, owners, times and only our two annotations.
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// Node and sidecar names.
    #[serde(default)]
    pub spec: Option<CachedSpec>,
    /// Phase, Ready conditions and restart counts.
    #[serde(default)]
    pub status: Option<CachedStatus>,
}

/// The parts of `spec` the comparator reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedSpec {
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Names of the restartable (sidecar) init containers (rule 7).
    #[serde(default, deserialize_with = "sidecar_names")]
    pub init_containers: Option<Vec<String>>,
}

/// The parts of `status` the comparator reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedStatus {
    /// `status.phase`.
    pub phase: Option<String>,
    /// The `Ready` conditions, in order (the first one decides).
    #[serde(default, deserialize_with = "ready_conditions")]
    pub conditions: Option<Vec<ReadyCondition>>,
    /// Restart count per container.
    pub container_statuses: Option<Vec<Restarts>>,
    /// Restart count per init container.
    pub init_container_statuses: Option<Vec<Restarts>>,
}

/// A `Ready` condition.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyCondition {
    /// `type` (kept to filter on it).
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
    /// When it last changed.
    pub last_transition_time: Option<Time>,
}

/// A container's name and restart count.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restarts {
    /// Container name.
    pub name: String,
    /// `restartCount`.
    #[serde(default)]
    pub restart_count: i32,
}

/// `metadata` with only the fields read downstream; `managedFields` and the
/// rest are skipped while parsing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let w = WireMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: w.name,
        namespace: w.namespace,
        uid: w.uid,
        resource_version: w.resource_version,
        labels: w.labels,
        annotations: w.annotations.map(|mut a| {
            a.retain(|k, _| k == POD_DELETION_COST || k == POLICY_ANNOTATION);
            a
        }),
        owner_references: w.owner_references,
        creation_timestamp: w.creation_timestamp,
        deletion_timestamp: w.deletion_timestamp,
        ..Default::default()
    })
}

fn sidecar_names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct WireContainer {
        name: String,
        restart_policy: Option<String>,
    }
    let cs: Option<Vec<WireContainer>> = Option::deserialize(d)?;
    Ok(cs.map(|cs| {
        cs.into_iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| c.name)
            .collect()
    }))
}

fn ready_conditions<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<ReadyCondition>>, D::Error> {
    let cs: Option<Vec<ReadyCondition>> = Option::deserialize(d)?;
    Ok(cs.map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect()))
}

impl CachedPod {
    /// The pod as the planner reads it: the cached fields in a `Pod`, the
    /// rest empty.
    pub fn to_pod(&self) -> Pod {
        let statuses = |cs: &Option<Vec<Restarts>>| {
            cs.as_ref().map(|cs| {
                cs.iter()
                    .map(|c| ContainerStatus {
                        name: c.name.clone(),
                        restart_count: c.restart_count,
                        ..Default::default()
                    })
                    .collect()
            })
        };
        Pod {
            metadata: self.metadata.clone(),
            spec: self.spec.as_ref().map(|s| PodSpec {
                node_name: s.node_name.clone(),
                init_containers: s.init_containers.as_ref().map(|names| {
                    names
                        .iter()
                        .map(|n| Container {
                            name: n.clone(),
                            restart_policy: Some("Always".into()),
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                conditions: s.conditions.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| PodCondition {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
                            last_transition_time: c.last_transition_time.clone(),
                            ..Default::default()
                        })
                        .collect()
                }),
                container_statuses: statuses(&s.container_statuses),
                init_container_statuses: statuses(&s.init_container_statuses),
                ..Default::default()
            }),
        }
    }
}

impl k8s_openapi::Resource for CachedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for CachedPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::RankKey;

    fn full_pod_json() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
                "labels": {"app": "web"},
                "annotations": {
                    POD_DELETION_COST: "7",
                    POLICY_ANNOTATION: "web",
                    "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(4000)
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "creationTimestamp": "2026-11-20T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "r1", "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "app", "image": "app:1", "env": [{"name": "A", "value": "b"}]}],
                "initContainers": [
                    {"name": "init", "image": "init:1"},
                    {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always"}
                ]
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T00:01:00Z"}
                ],
                "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "sha", "ready": true, "restartCount": 3}],
                "initContainerStatuses": [{"name": "proxy", "image": "p", "imageID": "s", "ready": true, "restartCount": 2}]
            }
        })
    }

    #[test]
    fn keeps_every_comparator_input() {
        let full: Pod = serde_json::from_value(full_pod_json()).unwrap();
        let cached: CachedPod = serde_json::from_value(full_pod_json()).unwrap();
        let pod = cached.to_pod();
        assert_eq!(RankKey::from_pod(&full), RankKey::from_pod(&pod));
        let a = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            pod.metadata.owner_references,
            full.metadata.owner_references
        );
        assert!(pod.metadata.managed_fields.is_none());
        assert!(pod.spec.as_ref().unwrap().containers.is_empty());
        assert_eq!(
            pod.spec
                .as_ref()
                .unwrap()
                .init_containers
                .as_ref()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            pod.status
                .as_ref()
                .unwrap()
                .conditions
                .as_ref()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn keeps_comparator_inputs_of_sparse_and_not_ready_pods() {
        for v in [
            serde_json::json!({"metadata": {"name": "bare"}}),
            serde_json::json!({"metadata": {"name": "p", "deletionTimestamp": "2026-11-20T00:00:00Z"},
                "spec": {"containers": []},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-20T00:01:00Z"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T00:02:00Z"}]}}),
            serde_json::json!({}),
        ] {
            let full: Pod = serde_json::from_value(v.clone()).unwrap();
            let cached: CachedPod = serde_json::from_value(v).unwrap();
            assert_eq!(
                RankKey::from_pod(&full),
                RankKey::from_pod(&cached.to_pod())
            );
            assert_eq!(
                crate::comparator::is_pod_active(&full),
                crate::comparator::is_pod_active(&cached.to_pod())
            );
        }
    }
}
