//! The operator's RBAC as shipped (rendered from `deploy/overlays/cluster-wide`
//! with the kustomize built into kubectl), installed for the suite's own
//! ServiceAccount; and the permissions the operator's recorded requests
//! actually used, which `tests/fixtures/rbac/operator-requests.txt` keeps for
//! the fast suite (tests/deploy.rs checks every overlay against it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::cluster::SUITE_LABEL;
use crate::proxy::Entry;

/// Where the observed permissions are kept for the fast suite.
pub const OBSERVED_FILE: &str = "tests/fixtures/rbac/operator-requests.txt";

/// Namespace the overlay renders into (replaced by the suite's own).
const RENDERED_NS: &str = "deletion-cost-system";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The overlay's RBAC objects and ServiceAccount, rewritten for this run:
/// namespace `system_ns`, cluster-scoped names suffixed with the run id.
pub fn rendered(run: &str, system_ns: &str) -> Vec<Value> {
    let docs = crate::install::render(&repo().join("deploy/overlays/cluster-wide"));
    let keep = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    docs.into_iter()
        .filter(|d| keep.contains(&d["kind"].as_str().unwrap_or_default()))
        .map(|mut d| {
            let cluster_scoped = d["kind"].as_str().is_some_and(|k| k.starts_with("Cluster"));
            if cluster_scoped {
                let name = d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                d["metadata"]["name"] = format!("{name}-{run}").into();
            } else {
                d["metadata"]["namespace"] = system_ns.into();
            }
            d["metadata"]["labels"][SUITE_LABEL] = "true".into();
            if d["kind"] == "ClusterRoleBinding" {
                let role = d["roleRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                d["roleRef"]["name"] = format!("{role}-{run}").into();
            }
            if let Some(subjects) = d["subjects"].as_array_mut() {
                for s in subjects {
                    if s["namespace"] == RENDERED_NS {
                        s["namespace"] = system_ns.into();
                    }
                }
            }
            d
        })
        .collect()
}

fn api_for(client: &Client, obj: &Value) -> Api<DynamicObject> {
    let (group, version) = match obj["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
    {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap_or_default().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap_or_default());
    let ar = ApiResource::from_gvk(&gvk);
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The label selector of the hook Service as shipped (`key=value,...`).
pub fn hook_service_selector() -> String {
    let docs = crate::install::render(&repo().join("deploy/overlays/cluster-wide"));
    let svc = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "deletion-cost-hook")
        .unwrap_or_else(|| panic!("no deletion-cost-hook Service in the overlay"));
    svc["spec"]["selector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Creates the operator's ServiceAccount and RBAC; returns the
/// cluster-scoped objects made (to delete at the end).
pub async fn install(
    client: &Client,
    run: &str,
    system_ns: &str,
) -> Result<Vec<(String, String)>, kube::Error> {
    let mut cluster = Vec::new();
    for obj in rendered(run, system_ns) {
        let api = api_for(client, &obj);
        let dynamic: DynamicObject =
            serde_json::from_value(obj.clone()).map_err(kube::Error::SerdeError)?;
        api.create(&PostParams::default(), &dynamic).await?;
        if obj["metadata"]["namespace"].is_null() {
            cluster.push((
                obj["kind"].as_str().unwrap_or_default().to_string(),
                dynamic.name_any(),
            ));
        }
    }
    Ok(cluster)
}

fn cluster_api(client: &Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Deletes the cluster-scoped RBAC objects of this run.
pub async fn uninstall(client: &Client, objects: &[(String, String)]) {
    for (kind, name) in objects {
        let _ = cluster_api(client, kind)
            .delete(name, &DeleteParams::default())
            .await;
    }
}

/// Deletes cluster-scoped RBAC objects an interrupted run left.
pub async fn remove_leftovers(client: &Client, lp: &ListParams) {
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        let api = cluster_api(client, kind);
        if let Ok(list) = api.list(lp).await {
            for o in list {
                let _ = api.delete(&o.name_any(), &DeleteParams::default()).await;
            }
        }
    }
}

/// A request as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// API group (`core` for the legacy group).
    pub group: String,
    /// Resource, with `/subresource` when there is one.
    pub resource: String,
    /// Namespace of the request, when namespaced.
    pub namespace: Option<String>,
    /// Object name, when the request names one.
    pub name: Option<String>,
}

/// Parses an API path; `None` for non-resource paths (`/version`, discovery).
pub fn parse_path(path: &str) -> Option<Access> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("core".to_string(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        // the namespace object itself
        ["namespaces", name] => {
            return Some(Access {
                group,
                resource: "namespaces".into(),
                namespace: None,
                name: Some(name.to_string()),
            })
        }
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let (resource, name) = match rest {
        [res] => (res.to_string(), None),
        [res, name] => (res.to_string(), Some(name.to_string())),
        [res, name, sub] => (format!("{res}/{sub}"), Some(name.to_string())),
        _ => return None,
    };
    Some(Access {
        group,
        resource,
        namespace,
        name,
    })
}

/// Whether a path names a collection (no object name).
pub fn is_collection(path: &str) -> bool {
    parse_path(path).is_some_and(|a| a.name.is_none())
}

/// One line of the observed-permissions file: group, resource, verb and
/// where the request went (`cluster` for cluster-scoped resources,
/// `namespaced` for any namespace the operator manages, `own-namespace`
/// for its own namespace only).
pub type Permission = (String, String, String, String);

/// The permissions a set of requests used, as the file keeps them.
pub fn permissions(entries: &[Entry], system_ns: &str) -> BTreeSet<Permission> {
    let all: BTreeSet<Permission> = entries
        .iter()
        .filter_map(|e| {
            let a = parse_path(&e.path)?;
            let scope = match &a.namespace {
                None => "cluster",
                Some(ns) if ns == system_ns => "own-namespace",
                Some(_) => "namespaced",
            };
            // A cluster-wide list of a namespaced resource is still a
            // namespaced permission (ClusterRole over all namespaces).
            let scope = if scope == "cluster" && !is_cluster_scoped(&a.group, &a.resource) {
                "namespaced"
            } else {
                scope
            };
            let mut used = vec![(
                a.group.clone(),
                a.resource.clone(),
                e.verb().to_string(),
                scope.to_string(),
            )];
            // a server-side apply that created the object (201) was also
            // authorised as a create
            if e.method == "PATCH" && e.status == 201 {
                used.push((a.group, a.resource, "create".to_string(), scope.to_string()));
            }
            Some(used)
        })
        .flatten()
        .collect();
    // a namespaced permission covers the operator's own namespace too (its
    // own pod's leader label is a pod patch like any other)
    all.iter()
        .filter(|(g, r, v, s)| {
            s != "own-namespace"
                || !all.contains(&(g.clone(), r.clone(), v.clone(), "namespaced".into()))
        })
        .cloned()
        .collect()
}

fn is_cluster_scoped(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource.split('/').next().unwrap_or_default()),
        ("core", "nodes" | "namespaces")
            | ("authentication.k8s.io", "tokenreviews")
            | ("authorization.k8s.io", "subjectaccessreviews")
            | ("apiextensions.k8s.io", _)
            | (
                "rbac.authorization.k8s.io",
                "clusterroles" | "clusterrolebindings"
            )
    )
}

/// The file's text for a set of permissions.
pub fn render_file(perms: &BTreeSet<Permission>) -> String {
    let mut out = String::from(
        "# Permissions the operator used in the e2e suite against a real API server,\n\
         # recorded from every request it made (tests/e2e/rbac.rs). tests/deploy.rs\n\
         # checks that every overlay grants exactly these. Regenerate with\n\
         #   E2E_UPDATE_RBAC=1 KUBECONFIG=... cargo test --test e2e\n\
         # columns: group resource verb where\n",
    );
    for (g, r, v, s) in perms {
        out.push_str(&format!("{g} {r} {v} {s}\n"));
    }
    out
}

/// The committed file's permissions.
pub fn read_file(path: &Path) -> BTreeSet<Permission> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [g, r, v, s] => Some((g.to_string(), r.to_string(), v.to_string(), s.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// Path of the committed file.
pub fn observed_file() -> PathBuf {
    repo().join(OBSERVED_FILE)
}
