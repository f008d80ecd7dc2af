//! An object's controller: the owner reference marked `controller: true`
//! (Kubernetes allows one). Which ReplicaSet a pod belongs to, which
//! Deployment a ReplicaSet: read here, the one way, for the planner, the
//! engine and the CLI.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// The controller among an object's owner references.
pub fn controller_of(refs: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

/// The controller among an object's owner references, when it is of `kind`
/// (`ReplicaSet` for a pod, `Deployment` for a ReplicaSet).
pub fn controller_of_kind<'a>(
    refs: Option<&'a Vec<OwnerReference>>,
    kind: &str,
) -> Option<&'a OwnerReference> {
    controller_of(refs).filter(|r| r.kind == kind)
}

/// The name of the Deployment that controls `rs` (in its namespace).
pub fn deployment_of(rs: &ReplicaSet) -> Option<&str> {
    controller_of_kind(rs.metadata.owner_references.as_ref(), "Deployment").map(|d| d.name.as_str())
}

/// Whether the Deployment named `deployment` (in the ReplicaSet's
/// namespace) controls `rs`: the ReplicaSets of a Deployment.
pub fn of_deployment(rs: &ReplicaSet, deployment: &str) -> bool {
    deployment_of(rs) == Some(deployment)
}

/// The ReplicaSets of `replica_sets` in `namespace` that the Deployment
/// named `deployment` controls.
pub fn replica_sets_of<'a>(
    namespace: &'a str,
    deployment: &'a str,
    replica_sets: impl IntoIterator<Item = &'a ReplicaSet>,
) -> impl Iterator<Item = &'a ReplicaSet> {
    replica_sets.into_iter().filter(move |rs| {
        rs.metadata.namespace.as_deref() == Some(namespace) && of_deployment(rs, deployment)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(kind: &str, name: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            controller,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_the_reference_marked_controller_counts() {
        let refs = vec![
            owner("ReplicaSet", "adopter", None),
            owner("ReplicaSet", "web-abc", Some(false)),
            owner("ReplicaSet", "web-def", Some(true)),
        ];
        assert_eq!(
            controller_of(Some(&refs)).map(|r| &*r.name),
            Some("web-def")
        );
        assert_eq!(
            controller_of_kind(Some(&refs), "ReplicaSet").map(|r| &*r.name),
            Some("web-def")
        );
        assert_eq!(controller_of_kind(Some(&refs), "Deployment"), None);
        assert_eq!(controller_of(Some(&refs[..2].to_vec())), None);
        assert_eq!(controller_of(None), None);

        let mut rs = ReplicaSet::default();
        rs.metadata.owner_references = Some(vec![
            owner("Deployment", "web", Some(true)),
            owner("Deployment", "api", None),
        ]);
        assert!(of_deployment(&rs, "web"));
        assert!(!of_deployment(&rs, "api"));
        assert!(!of_deployment(&ReplicaSet::default(), "web"));
    }
}
