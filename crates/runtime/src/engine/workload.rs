//! Which policy manages a workload, and which pods make it up: what the
//! hook (and any caller that scales one workload) asks before its round.
//! Pure, over a snapshot and the cached policies.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::owner::{self, controller_of_kind};
use k8s_openapi::api::apps::v1::ReplicaSet;

use super::policy_index::ValidPolicy;
use crate::comparator::is_pod_active;
use crate::plan::{NamedPolicy, Snapshot};
use crate::pod::PodView;
use crate::policy::validate::Target;
use crate::policy::{overlap_order, DeletionCostPolicy, TargetKind};

/// A workload about to be scaled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadRef {
    /// Its namespace.
    pub namespace: String,
    /// Deployment or ReplicaSet.
    pub kind: TargetKind,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for WorkloadRef {
    /// `Deployment shop/web`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            TargetKind::Deployment => "Deployment",
            TargetKind::ReplicaSet => "ReplicaSet",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

/// A workload and the policy that manages it.
#[derive(Debug, Clone)]
pub struct Managed {
    /// The workload.
    pub workload: WorkloadRef,
    /// The policy as cached.
    pub policy: Arc<DeletionCostPolicy>,
    /// The policy, validated.
    pub resolved: NamedPolicy,
    /// The ReplicaSets that make up the workload.
    pub replica_sets: BTreeSet<String>,
    /// Its active pods.
    pub pods: BTreeSet<String>,
}

/// No valid policy manages the workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no valid DeletionCostPolicy in namespace {namespace:?} manages {workload} ({pods} active pods)")]
pub struct NotManaged {
    /// The namespace searched.
    pub namespace: String,
    /// The workload, as `Deployment shop/web`.
    pub workload: String,
    /// How many active pods it has.
    pub pods: usize,
}

/// Names of the ReplicaSets that make up a workload: the ReplicaSet itself,
/// or those a Deployment controls.
pub fn workload_replica_sets(
    workload: &WorkloadRef,
    replica_sets: &[ReplicaSet],
) -> BTreeSet<String> {
    match workload.kind {
        TargetKind::ReplicaSet => BTreeSet::from([workload.name.clone()]),
        TargetKind::Deployment => {
            owner::replica_sets_of(&workload.namespace, &workload.name, replica_sets)
                .filter_map(|rs| rs.metadata.name.clone())
                .collect()
        }
    }
}

/// Active pods (name) controlled by one of `replica_sets` in `namespace`.
pub fn active_pods_of(
    replica_sets: &BTreeSet<String>,
    namespace: &str,
    pods: &[impl PodView],
) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.meta().namespace == Some(namespace))
        .filter(|p| {
            controller_of_kind(p.owner_references(), "ReplicaSet")
                .is_some_and(|rs| replica_sets.contains(&rs.name))
        })
        .filter(|p| is_pod_active(*p))
        .filter_map(|p| p.meta().name.map(str::to_string))
        .collect()
}

/// The policy managing the workload: among the namespace's valid policies
/// that select its pods (or target it), the one that wins shared pods, as
/// the rounds decide overlaps.
pub(super) fn managing(
    workload: &WorkloadRef,
    snapshot: &Snapshot,
    policies: Vec<ValidPolicy>,
) -> Result<Managed, NotManaged> {
    let ns = workload.namespace.as_str();
    let replica_sets = workload_replica_sets(workload, &snapshot.replica_sets);
    let pods = active_pods_of(&replica_sets, ns, &snapshot.pods);
    let mut found: Vec<(Arc<DeletionCostPolicy>, NamedPolicy)> = policies
        .into_iter()
        .filter(|p| p.resolved.namespace == ns)
        .filter_map(
            |ValidPolicy {
                 policy: p,
                 resolved,
             }| {
                let targets = match &resolved.spec.target {
                    Target::Workload(t) => t.name == workload.name && t.kind == workload.kind,
                    Target::Selector(_) => false,
                };
                let selects =
                    targets || !crate::plan::selected_pods(&resolved, snapshot).is_disjoint(&pods);
                selects.then(|| (p, (*resolved).clone()))
            },
        )
        .collect();
    found.sort_by(|a, b| overlap_order(&a.0, &b.0));
    match found.into_iter().next() {
        Some((policy, resolved)) => Ok(Managed {
            workload: workload.clone(),
            policy,
            resolved,
            replica_sets,
            pods,
        }),
        None => Err(NotManaged {
            namespace: ns.to_string(),
            workload: workload.to_string(),
            pods: pods.len(),
        }),
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
        let dep = |ns: &str| WorkloadRef {
            namespace: ns.into(),
            kind: TargetKind::Deployment,
            name: "web".into(),
        };
        let owned = workload_replica_sets(&dep("shop"), &rss);
        assert_eq!(owned, set(&["web-1", "web-2"]));
        assert!(workload_replica_sets(&dep("other"), &rss).is_empty());
        let pods = [
            pod("w1", "web-1", false),
            pod("w2", "web-2", false),
            pod("w3", "web-2", true),
            pod("d1", "db-1", false),
        ];
        assert_eq!(active_pods_of(&owned, "shop", &pods), set(&["w1", "w2"]));
        let one = WorkloadRef {
            namespace: "shop".into(),
            kind: TargetKind::ReplicaSet,
            name: "db-1".into(),
        };
        let owned = workload_replica_sets(&one, &rss);
        assert_eq!(active_pods_of(&owned, "shop", &pods), set(&["d1"]));
    }
}
