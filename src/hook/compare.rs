//! Pure helpers of the hook: which pods belong to a workload, and what the
//! controller deleted after a scale-in compared with the prediction.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ReplicaSet;
use serde::Serialize;

use super::api::{Workload, WorkloadKind};
use crate::comparator::is_pod_active;
use crate::pod::PodView;

fn controller_ref<'a>(
    refs: Option<&'a Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    kind: &str,
) -> Option<&'a str> {
    refs?
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| r.name.as_str())
}

/// Names of the ReplicaSets that make up a workload (in `namespace`): the
/// ReplicaSet itself, or those a Deployment controls.
pub fn workload_replica_sets(
    workload: &Workload,
    namespace: &str,
    replica_sets: &[ReplicaSet],
) -> BTreeSet<String> {
    match workload.kind {
        WorkloadKind::ReplicaSet => BTreeSet::from([workload.name.clone()]),
        WorkloadKind::Deployment => replica_sets
            .iter()
            .filter(|rs| rs.metadata.namespace.as_deref() == Some(namespace))
            .filter(|rs| {
                controller_ref(rs.metadata.owner_references.as_ref(), "Deployment")
                    == Some(workload.name.as_str())
            })
            .filter_map(|rs| rs.metadata.name.clone())
            .collect(),
    }
}

/// Active pods (name) controlled by one of `replica_sets` in `namespace`.
pub fn active_pods_of(
    replica_sets: &BTreeSet<String>,
    namespace: &str,
    pods: &[impl PodView],
) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.meta().namespace.as_deref() == Some(namespace))
        .filter(|p| {
            controller_ref(p.meta().owner_references.as_ref(), "ReplicaSet")
                .is_some_and(|rs| replica_sets.contains(rs))
        })
        .filter(|p| is_pod_active(*p))
        .filter_map(|p| p.meta().name.clone())
        .collect()
}

/// What the controller deleted after the scale-in, against the prediction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VictimComparison {
    /// Pods predicted to go, first first.
    pub predicted: Vec<String>,
    /// Pods that went (got a deletionTimestamp or disappeared), by name.
    pub deleted: Vec<String>,
    /// Deleted but not predicted.
    pub unexpected: Vec<String>,
    /// Predicted but not (yet) deleted.
    pub missed: Vec<String>,
    /// As many pods went as the scale-in removes.
    pub complete: bool,
    /// Exactly the predicted pods went.
    pub as_predicted: bool,
}

/// Compares the pods active before the scale-in (`before`) and now
/// (`active_now`) with the `predicted` victims; `expected` pods should go.
pub fn compare_victims(
    predicted: &[String],
    before: &BTreeSet<String>,
    active_now: &BTreeSet<String>,
    expected: usize,
) -> VictimComparison {
    let deleted: BTreeSet<&String> = before.difference(active_now).collect();
    let predicted_set: BTreeSet<&String> = predicted.iter().collect();
    let unexpected = deleted
        .iter()
        .filter(|p| !predicted_set.contains(*p))
        .map(|p| (*p).clone())
        .collect::<Vec<_>>();
    let missed = predicted
        .iter()
        .filter(|p| !deleted.contains(p))
        .cloned()
        .collect::<Vec<_>>();
    let complete = deleted.len() >= expected;
    VictimComparison {
        predicted: predicted.to_vec(),
        deleted: deleted.into_iter().cloned().collect(),
        as_predicted: complete && unexpected.is_empty() && missed.is_empty(),
        unexpected,
        missed,
        complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_predicted_pods_going_is_as_predicted() {
        let c = compare_victims(&names(&["b", "a"]), &set(&["a", "b", "c"]), &set(&["c"]), 2);
        assert_eq!(c.deleted, ["a", "b"]);
        assert!(c.complete && c.as_predicted);
        assert!(c.unexpected.is_empty() && c.missed.is_empty());
    }

    #[test]
    fn other_pods_going_is_reported() {
        let c = compare_victims(&names(&["a", "b"]), &set(&["a", "b", "c"]), &set(&["b"]), 2);
        assert!(c.complete);
        assert!(!c.as_predicted);
        assert_eq!(c.unexpected, ["c"]);
        assert_eq!(c.missed, ["b"]);
    }

    #[test]
    fn too_few_deletions_are_incomplete() {
        let c = compare_victims(
            &names(&["a", "b"]),
            &set(&["a", "b", "c"]),
            &set(&["b", "c"]),
            2,
        );
        assert!(!c.complete);
        assert!(!c.as_predicted);
        assert_eq!(c.deleted, ["a"]);
        assert_eq!(c.missed, ["b"]);
        // new pods appearing meanwhile do not count as deleted
        let c = compare_victims(&names(&["a"]), &set(&["a", "b"]), &set(&["b", "z"]), 1);
        assert!(c.as_predicted);
    }

    fn rs(name: &str, deployment: &str) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "uid": "d", "controller": true}]},
            "spec": {"selector": {}}
        }))
        .unwrap()
    }

    fn pod(name: &str, rs: &str, deleting: bool) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": "r", "controller": true}]},
            "status": {"phase": "Running"}
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_deployment_owns_its_replica_sets_pods() {
        let rss = [rs("web-1", "web"), rs("web-2", "web"), rs("db-1", "db")];
        let dep = Workload {
            kind: WorkloadKind::Deployment,
            name: "web".into(),
        };
        let owned = workload_replica_sets(&dep, "shop", &rss);
        assert_eq!(owned, set(&["web-1", "web-2"]));
        assert!(workload_replica_sets(&dep, "other", &rss).is_empty());
        let pods = [
            pod("w1", "web-1", false),
            pod("w2", "web-2", false),
            pod("w3", "web-2", true),
            pod("d1", "db-1", false),
        ];
        assert_eq!(active_pods_of(&owned, "shop", &pods), set(&["w1", "w2"]));
        let one = Workload {
            kind: WorkloadKind::ReplicaSet,
            name: "db-1".into(),
        };
        let owned = workload_replica_sets(&one, "shop", &rss);
        assert_eq!(active_pods_of(&owned, "shop", &pods), set(&["d1"]));
    }
}
