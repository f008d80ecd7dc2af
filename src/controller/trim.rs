//! Trimming watched objects to what the planner reads, so a 10,000-pod cache
//! stays small: no managedFields, no container specs, no foreign annotations.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Node, Pod, PodCondition, PodSpec, PodStatus,
};

use crate::comparator::POD_DELETION_COST;
use crate::plan::POLICY_ANNOTATION;

/// Keeps only the pod fields the comparator and planner read.
pub fn trim_pod(pod: &mut Pod) {
    let m = &mut pod.metadata;
    m.managed_fields = None;
    m.generate_name = None;
    if let Some(a) = m.annotations.as_mut() {
        a.retain(|k, _| k == POD_DELETION_COST || k == POLICY_ANNOTATION);
    }
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            // sidecar restarts (rule 7) need the restartable init containers' names
            init_containers: spec.init_containers.map(|cs| {
                cs.into_iter()
                    .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                    .map(|c| Container {
                        name: c.name,
                        restart_policy: c.restart_policy,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
    }
    if let Some(status) = pod.status.take() {
        let slim = |cs: Option<Vec<ContainerStatus>>| {
            cs.map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        restart_count: c.restart_count,
                        ..Default::default()
                    })
                    .collect()
            })
        };
        pod.status = Some(PodStatus {
            phase: status.phase,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "Ready")
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        last_transition_time: c.last_transition_time,
                        ..Default::default()
                    })
                    .collect()
            }),
            container_statuses: slim(status.container_statuses),
            init_container_statuses: slim(status.init_container_statuses),
            ..Default::default()
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::PodKey;

    fn full_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1",
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
        }))
        .unwrap()
    }

    #[test]
    fn trimming_keeps_every_comparator_input() {
        let full = full_pod();
        let mut trimmed = full.clone();
        trim_pod(&mut trimmed);
        assert_eq!(PodKey::from_pod(&full), PodKey::from_pod(&trimmed));
        let a = trimmed.metadata.annotations.as_ref().unwrap();
        assert_eq!(a.len(), 2);
        assert!(trimmed.metadata.managed_fields.is_none());
        assert!(trimmed.spec.as_ref().unwrap().containers.is_empty());
        let before = serde_json::to_vec(&full).unwrap().len();
        let after = serde_json::to_vec(&trimmed).unwrap().len();
        assert!(after * 4 < before, "{after} vs {before}");
    }
}
