//! What `deployment/NAME`, `replicaset/NAME`, `pod/NAME` and a label
//! selector (`-l`) name in a [`Snapshot`], kubectl style, and the related
//! pods upstream counts for each (rule 5: all pods of the ReplicaSets that
//! share the owner Deployment). Pure: the CLI reads the snapshot from a file
//! or from the live cluster, then asks here, so both answer alike.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;

use kube_core::{Expression, Selector};

use super::Snapshot;
use crate::owner::{self, controller_of};
use crate::pod::PodRecord;
use crate::policy::selector::selects;

/// The kind of object a command names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// `deployment/NAME` (`deploy`, `deployments`, `deployment.apps`).
    Deployment,
    /// `replicaset/NAME` (`rs`, `replicasets`, `replicaset.apps`).
    ReplicaSet,
    /// `pod/NAME` (`po`, `pods`).
    Pod,
}

impl TargetKind {
    /// `deployment`, `replicaset`, `pod`: as kubectl writes them.
    pub fn word(self) -> &'static str {
        match self {
            TargetKind::Deployment => "deployment",
            TargetKind::ReplicaSet => "replicaset",
            TargetKind::Pod => "pod",
        }
    }
}

/// An object named as kubectl names it: `KIND/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its kind.
    pub kind: TargetKind,
    /// `metadata.name`.
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.word(), self.name)
    }
}

/// Why a target, a selector or a selection is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// `KIND/NAME` malformed or of a kind not served.
    #[error("{given:?}: expected deployment/NAME, replicaset/NAME or pod/NAME")]
    Target {
        /// As given.
        given: String,
    },
    /// A label selector kubectl would refuse too.
    #[error("-l {given:?}: {why} (expected e.g. app=web,tier!=cache,env in (a,b),!canary)")]
    Selector {
        /// As given.
        given: String,
        /// What is wrong.
        why: String,
    },
    /// The named object is in neither the pods nor the ReplicaSets and
    /// Deployments read.
    #[error("{target} not found in namespace {namespace}{hint}")]
    NotFound {
        /// What was asked.
        target: String,
        /// Where it was looked for.
        namespace: String,
        /// Where it is, when elsewhere.
        hint: String,
    },
    /// A name with `-A`, as kubectl refuses it.
    #[error("{target}: a name needs one namespace (-n), not -A")]
    NameAcrossNamespaces {
        /// What was asked.
        target: String,
    },
}

impl FromStr for Target {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || WorkloadError::Target {
            given: s.to_string(),
        };
        let (kind, name) = s.split_once('/').ok_or_else(bad)?;
        let kind = match kind.to_ascii_lowercase().as_str() {
            "deployment" | "deployments" | "deploy" | "deployment.apps" | "deployments.apps" => {
                TargetKind::Deployment
            }
            "replicaset" | "replicasets" | "rs" | "replicaset.apps" | "replicasets.apps" => {
                TargetKind::ReplicaSet
            }
            "pod" | "pods" | "po" => TargetKind::Pod,
            _ => return Err(bad()),
        };
        if name.is_empty() || name.contains('/') {
            return Err(bad());
        }
        Ok(Self {
            kind,
            name: name.to_string(),
        })
    }
}

/// Parses a label selector as kubectl's `-l` takes it: `k=v`, `k==v`,
/// `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, joined by commas.
pub fn parse_selector(given: &str) -> Result<Selector, WorkloadError> {
    let bad = |why: &str| WorkloadError::Selector {
        given: given.to_string(),
        why: why.to_string(),
    };
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in given.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or_else(|| bad("unbalanced ')'"))?,
            ',' if depth == 0 => {
                terms.push(&given[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad("unbalanced '('"));
    }
    terms.push(&given[start..]);
    let key = |k: &str| -> Result<String, WorkloadError> {
        let k = k.trim();
        if k.is_empty() || k.chars().any(|c| c.is_whitespace() || "=!(),".contains(c)) {
            return Err(bad(&format!("{k:?} is not a label key")));
        }
        Ok(k.to_string())
    };
    let set = |v: &str| -> Result<BTreeSet<String>, WorkloadError> {
        let inner = v
            .trim()
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| bad("a set is written (a,b)"))?;
        Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
    };
    let mut exprs = Vec::new();
    for term in terms {
        let t = term.trim();
        if t.is_empty() {
            return Err(bad("an empty term"));
        }
        let expr = if let Some(k) = t.strip_prefix('!') {
            Expression::DoesNotExist(key(k)?)
        } else if let Some((k, v)) = t.split_once(" notin ") {
            Expression::NotIn(key(k)?, set(v)?)
        } else if let Some((k, v)) = t.split_once(" in ") {
            Expression::In(key(k)?, set(v)?)
        } else if let Some((k, v)) = t.split_once("!=") {
            Expression::NotEqual(key(k)?, v.trim().to_string())
        } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            Expression::Equal(key(k)?, v.trim().to_string())
        } else {
            Expression::Exists(key(t)?)
        };
        exprs.push(expr);
    }
    Ok(exprs.into_iter().collect())
}

/// What a command asks for: a namespace (`None`: all, `-A`), optionally
/// one object and a label selector.
#[derive(Debug, Clone, Copy)]
pub struct Query<'q> {
    /// `-n` (or the kubeconfig's); `None` under `-A`.
    pub namespace: Option<&'q str>,
    /// `deployment/NAME`, `replicaset/NAME` or `pod/NAME`.
    pub target: Option<&'q Target>,
    /// `-l`.
    pub selector: Option<&'q Selector>,
}

/// Pods that scale in together: one Deployment's (all its ReplicaSets), or
/// one other controller's, or those without a controller.
#[derive(Debug, Clone)]
pub struct Family<'a> {
    /// The pods asked for, sorted by namespace and name.
    pub pods: Vec<&'a PodRecord>,
    /// All pods of the family, for the colocation rank.
    pub related: Vec<&'a PodRecord>,
}

/// Which family a pod belongs to: the order of the answer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum FamilyKey<'a> {
    /// `(namespace, kind, name)` of the Deployment, else of the controller.
    Owned(&'a str, &'a str, &'a str),
    /// No controller: upstream never deletes these for a scale-in.
    Unowned,
}

/// The pods `query` names in `snapshot`, by family; an object named but
/// found neither among the pods nor among the ReplicaSets and Deployments
/// is an error (a Deployment or ReplicaSet that exists without pods is an
/// empty answer).
pub fn select<'a>(snapshot: &'a Snapshot, query: &Query) -> Result<Vec<Family<'a>>, WorkloadError> {
    if let (None, Some(t)) = (query.namespace, query.target) {
        return Err(WorkloadError::NameAcrossNamespaces {
            target: t.to_string(),
        });
    }
    let rs_owner = deployments_by_replica_set(snapshot);
    let mut families: BTreeMap<FamilyKey<'a>, Family<'a>> = BTreeMap::new();
    for pod in snapshot.pods.iter().map(|p| &**p) {
        if is_asked_for(query, &rs_owner, pod) {
            families
                .entry(family_of(&rs_owner, pod))
                .or_insert_with(|| Family {
                    pods: Vec::new(),
                    related: Vec::new(),
                })
                .pods
                .push(pod);
        }
    }
    if families.is_empty() {
        if let (Some(ns), Some(t)) = (query.namespace, query.target) {
            if !exists(snapshot, ns, t) {
                return Err(WorkloadError::NotFound {
                    target: t.to_string(),
                    namespace: ns.to_string(),
                    hint: elsewhere(snapshot, t),
                });
            }
        }
    }
    for pod in snapshot.pods.iter().map(|p| &**p) {
        if let Some(f) = families.get_mut(&family_of(&rs_owner, pod)) {
            f.related.push(pod);
        }
    }
    let by_name = |p: &&PodRecord| (p.identity.namespace.clone(), p.identity.name.clone());
    Ok(families
        .into_values()
        .map(|mut f| {
            // the answer does not depend on the order the input lists pods in
            f.pods.sort_by_key(by_name);
            f.related.sort_by_key(by_name);
            f
        })
        .collect())
}

/// `(namespace, ReplicaSet name)` -> its controller Deployment's name.
type DeploymentOf<'a> = HashMap<(&'a str, &'a str), Option<&'a str>>;

/// Each ReplicaSet of the snapshot with the Deployment that controls it.
fn deployments_by_replica_set(snapshot: &Snapshot) -> DeploymentOf<'_> {
    let mut rs_owner: DeploymentOf = HashMap::new();
    for rs in &snapshot.replica_sets {
        let m = &rs.metadata;
        let deployment = owner::deployment_of(rs);
        rs_owner.insert(
            (
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
            ),
            deployment,
        );
    }
    rs_owner
}

/// The family `pod` belongs to: its Deployment's when a ReplicaSet of one
/// controls it, else its controller's.
fn family_of<'a>(rs_owner: &DeploymentOf<'a>, pod: &'a PodRecord) -> FamilyKey<'a> {
    let ns = pod.identity.namespace.as_deref().unwrap_or_default();
    match controller_of(pod.owner_references()) {
        None => FamilyKey::Unowned,
        Some(o) => match (o.kind.as_str(), rs_owner.get(&(ns, o.name.as_str()))) {
            ("ReplicaSet", Some(Some(d))) => FamilyKey::Owned(ns, "Deployment", d),
            (kind, _) => FamilyKey::Owned(ns, kind, o.name.as_str()),
        },
    }
}

/// Whether `query` asks for `pod`: its namespace, its labels, and the
/// object named (the pod, its ReplicaSet or that one's Deployment).
fn is_asked_for(query: &Query, rs_owner: &DeploymentOf, pod: &PodRecord) -> bool {
    let m = &pod.identity;
    let ns = m.namespace.as_deref().unwrap_or_default();
    if query.namespace.is_some_and(|q| q != ns) {
        return false;
    }
    if query.selector.is_some_and(|s| !selects(s, pod.labels())) {
        return false;
    }
    let controller = || controller_of(pod.owner_references());
    match query.target {
        None => true,
        Some(t) => match t.kind {
            TargetKind::Pod => m.name.as_deref() == Some(t.name.as_str()),
            TargetKind::ReplicaSet => {
                controller().is_some_and(|o| o.kind == "ReplicaSet" && o.name == t.name)
            }
            TargetKind::Deployment => controller().is_some_and(|o| {
                o.kind == "ReplicaSet"
                    && rs_owner.get(&(ns, o.name.as_str())) == Some(&Some(t.name.as_str()))
            }),
        },
    }
}

/// Whether the object `t` names is in `namespace` of the snapshot.
fn exists(snapshot: &Snapshot, namespace: &str, t: &Target) -> bool {
    namespaces_holding(snapshot, t).contains(namespace)
}

/// The namespaces holding an object of `t`'s kind and name.
fn namespaces_holding<'a>(snapshot: &'a Snapshot, t: &Target) -> BTreeSet<&'a str> {
    let named = |name: Option<&'a String>, namespace: Option<&'a String>| {
        (name.map(String::as_str) == Some(t.name.as_str()))
            .then(|| namespace.map_or("", String::as_str))
    };
    match t.kind {
        TargetKind::Pod => snapshot
            .pods
            .iter()
            .filter_map(|p| named(p.identity.name.as_ref(), p.identity.namespace.as_ref()))
            .collect(),
        TargetKind::ReplicaSet => snapshot
            .replica_sets
            .iter()
            .filter_map(|r| named(r.metadata.name.as_ref(), r.metadata.namespace.as_ref()))
            .collect(),
        TargetKind::Deployment => snapshot
            .deployments
            .iter()
            .filter_map(|d| named(d.metadata.name.as_ref(), d.metadata.namespace.as_ref()))
            .collect(),
    }
}

/// `(found in namespaces a, b)`, or nothing.
fn elsewhere(snapshot: &Snapshot, t: &Target) -> String {
    let found = namespaces_holding(snapshot, t);
    if found.is_empty() {
        return String::new();
    }
    let list: Vec<&str> = found.into_iter().take(5).collect();
    format!(" (found in namespace {})", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_as_kubectl_names_them() {
        let t: Target = "deploy/web".parse().unwrap();
        assert_eq!(t.kind, TargetKind::Deployment);
        assert_eq!(t.to_string(), "deployment/web");
        assert_eq!(
            "rs/web-1".parse::<Target>().unwrap().kind,
            TargetKind::ReplicaSet
        );
        assert_eq!("pods/p".parse::<Target>().unwrap().kind, TargetKind::Pod);
        for bad in ["web", "service/web", "deployment/", "pod/a/b"] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
    }

    fn snapshot() -> Snapshot {
        let pod = |ns: &str, name: &str, rs: &str, app: &str| {
            serde_json::json!({"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"),
                    "labels": {"app": app},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": rs, "uid": format!("{ns}-{rs}"), "controller": true}]},
                "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
        };
        let rs = |ns: &str, name: &str, deployment: &str| {
            serde_json::json!({"kind": "ReplicaSet", "apiVersion": "apps/v1",
                "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"),
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                        "name": deployment, "uid": format!("{ns}-{deployment}"), "controller": true}]}})
        };
        let items = vec![
            // listed out of name order: the answer is sorted
            pod("shop", "web-b-1", "web-b", "web"),
            pod("shop", "web-a-1", "web-a", "web"),
            pod("shop", "api-1", "api-x", "api"),
            pod("other", "web-z-1", "web-z", "web"),
            rs("shop", "web-a", "web"),
            rs("shop", "web-b", "web"),
            rs("shop", "api-x", "api"),
            rs("other", "web-z", "web"),
        ];
        let text = serde_json::json!({"kind": "List", "apiVersion": "v1", "items": items});
        Snapshot::from_value(text)
    }

    fn names(pods: &[&PodRecord]) -> Vec<String> {
        pods.iter()
            .map(|p| p.identity.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_deployment_names_the_pods_of_all_its_replica_sets_as_one_family() {
        let snap = snapshot();
        let web: Target = "deployment/web".parse().unwrap();
        let query = Query {
            namespace: Some("shop"),
            target: Some(&web),
            selector: None,
        };
        let families = select(&snap, &query).unwrap();
        assert_eq!(families.len(), 1);
        assert_eq!(names(&families[0].pods), ["web-a-1", "web-b-1"]);
        assert_eq!(names(&families[0].related), ["web-a-1", "web-b-1"]);
        // one ReplicaSet: its pods, ranked among the Deployment's
        let rs: Target = "rs/web-b".parse().unwrap();
        let families = select(
            &snap,
            &Query {
                target: Some(&rs),
                ..query
            },
        )
        .unwrap();
        assert_eq!(names(&families[0].pods), ["web-b-1"]);
        assert_eq!(names(&families[0].related), ["web-a-1", "web-b-1"]);
    }

    #[test]
    fn a_selector_across_namespaces_gives_a_family_per_deployment() {
        let snap = snapshot();
        let sel = parse_selector("app=web").unwrap();
        let families = select(
            &snap,
            &Query {
                namespace: None,
                target: None,
                selector: Some(&sel),
            },
        )
        .unwrap();
        let got: Vec<Vec<String>> = families.iter().map(|f| names(&f.pods)).collect();
        assert_eq!(got, [vec!["web-z-1"], vec!["web-a-1", "web-b-1"]]);
    }

    #[test]
    fn names_not_found_say_where_they_are() {
        let snap = snapshot();
        let t: Target = "pod/web-z-1".parse().unwrap();
        let err = select(
            &snap,
            &Query {
                namespace: Some("shop"),
                target: Some(&t),
                selector: None,
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod/web-z-1 not found in namespace shop (found in namespace other)"
        );
        let err = select(
            &snap,
            &Query {
                namespace: None,
                target: Some(&t),
                selector: None,
            },
        )
        .unwrap_err();
        assert!(matches!(err, WorkloadError::NameAcrossNamespaces { .. }));
    }

    #[test]
    fn selectors_as_kubectl_takes_them() {
        let s = parse_selector("app=web,tier!=cache,env in (a, b),!canary,team").unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(selects(
            &s,
            Some(&labels(&[("app", "web"), ("env", "b"), ("team", "x")]))
        ));
        assert!(!selects(
            &s,
            Some(&labels(&[("app", "web"), ("env", "c"), ("team", "x")]))
        ));
        assert!(!selects(
            &s,
            Some(&labels(&[
                ("app", "web"),
                ("env", "a"),
                ("team", "x"),
                ("canary", "1")
            ]))
        ));
        for bad in ["", "app=web,", "env in (a", "env in a", "a b=c"] {
            assert!(parse_selector(bad).is_err(), "{bad:?}");
        }
    }
}
