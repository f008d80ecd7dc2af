//! The resources the fake API server knows and how request paths map to them.

use super::Verb;

/// One resource type served by the fake.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version inside the group.
    pub version: &'static str,
    /// Plural resource name as it appears in paths.
    pub plural: &'static str,
    /// Object kind.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists (the main resource then ignores status).
    pub status: bool,
    /// Whether a `/scale` subresource exists.
    pub scale: bool,
    /// Review resources: create only, nothing stored.
    pub review: bool,
}

impl ResourceDef {
    /// `apiVersion` of objects of this resource.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

#[allow(clippy::too_many_arguments)] // one table row, read positionally
const fn def(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
    scale: bool,
    review: bool,
) -> ResourceDef {
    ResourceDef {
        group,
        version,
        plural,
        kind,
        namespaced,
        status,
        scale,
        review,
    }
}

/// Every resource the fake serves.
pub static RESOURCES: &[ResourceDef] = &[
    def("", "v1", "pods", "Pod", true, true, false, false),
    def("", "v1", "nodes", "Node", false, true, false, false),
    def("", "v1", "events", "Event", true, false, false, false),
    def(
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        true,
        false,
        false,
        false,
    ),
    def("", "v1", "secrets", "Secret", true, false, false, false),
    def(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        true,
        true,
        false,
    ),
    def(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        true,
        true,
        false,
    ),
    def(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
        true,
        false,
        false,
    ),
    def(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        false,
        false,
        false,
    ),
    def(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        false,
        false,
        false,
    ),
    def(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        false,
        false,
        false,
    ),
    def(
        "deletioncost.dev",
        "v1alpha1",
        "deletioncostpolicies",
        "DeletionCostPolicy",
        true,
        true,
        false,
        false,
    ),
    def(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        false,
        false,
        false,
        true,
    ),
    def(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
        false,
        false,
        true,
    ),
];

/// Index into [`RESOURCES`] of the resource with this apiVersion and kind.
pub fn by_kind(api_version: &str, kind: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind)
}

/// Index into [`RESOURCES`] of the resource with this plural; `group` disambiguates
/// the two `events` (core first when `None`).
pub fn by_plural(group: Option<&str>, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.plural == plural && group.is_none_or(|g| r.group == g))
}

/// A request path resolved to a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Index into [`RESOURCES`].
    pub res: usize,
    /// Namespace from the path (`None` for cluster-scoped or all-namespace requests).
    pub namespace: Option<String>,
    /// Object name, if the path names one.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`), if any.
    pub sub: Option<String>,
}

/// Resolves `/api/v1/...` and `/apis/{group}/{version}/...` paths.
pub fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    let res = RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)?;
    let def = &RESOURCES[res];
    if namespace.is_some() && !def.namespaced {
        return None;
    }
    match sub.as_deref() {
        None => {}
        Some("status") if def.status => {}
        Some("scale") if def.scale => {}
        Some(_) => return None,
    }
    Some(Target {
        res,
        namespace,
        name,
        sub,
    })
}

/// The Kubernetes verb of a request, from its method, path shape and query.
pub fn verb_of(method: &str, has_name: bool, watch: bool) -> Option<Verb> {
    Some(match (method, has_name) {
        ("GET", _) if watch => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("GET", false) => Verb::List,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return None,
    })
}
