//! Checks the install manifests, the Dockerfile and the Grafana dashboard.
//!
//! Every overlay in `deploy/overlays/` is rendered with `kubectl kustomize`
//! (the kustomize built into kubectl), alone and with every component of
//! `deploy/components/`, and every rendered object is parsed into its
//! k8s-openapi type, so a typo in a field name or an unknown kind fails here
//! rather than at `kubectl apply`. On top of that: the CRD installs on its own
//! (`deploy/crd`), no install carries a cluster-scoped object another install
//! shares, the security settings of the Deployment, and RBAC compared rule by
//! rule with the permissions the operator was seen to use.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Service, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

const OVERLAYS: [&str; 2] = ["cluster-wide", "namespace-scoped"];
const COMPONENTS: [&str; 7] = [
    "alerts",
    "cert-manager",
    "flowcontrol",
    "networkpolicy",
    "prices",
    "scale-webhook",
    "servicemonitor",
];

/// Flags `deletion-cost run` accepts (the deployment may pass no others).
const RUN_FLAGS: [&str; 12] = [
    "--namespace",
    "--prometheus-url",
    "--metrics-addr",
    "--hook-addr",
    "--qps",
    "--burst",
    "--scale-in-allowance",
    "--log-format",
    "--leader-election-namespace",
    "--lease-name",
    "--dry-run",
    "--kubeconfig",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------
// Rendering and typed parsing

/// One rendered object, in its typed form.
// a handful of objects per render: boxing would only add noise
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Object {
    Namespace(Namespace),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    Deployment(Deployment),
    Service(Service),
    Pdb(PodDisruptionBudget),
    NetworkPolicy(NetworkPolicy),
    FlowSchema(FlowSchema),
    PriorityLevel(PriorityLevelConfiguration),
    ScaleWebhook(ValidatingWebhookConfiguration),
    ConfigMap(ConfigMap),
    /// Kinds from other projects' CRDs (ServiceMonitor, cert-manager's).
    Custom(DynamicObject),
}

/// A rendered overlay: the namespace its namespaced objects live in, and all
/// objects.
struct Rendered {
    overlay: String,
    objects: Vec<Object>,
}

fn kubectl_kustomize(dir: &Path) -> String {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "kubectl not found on PATH: tests/deploy.rs renders deploy/overlays with \
             `kubectl kustomize` (kubectl 1.32 or newer, with kustomize 5.5); install kubectl"
        ),
        Err(e) => panic!("running kubectl kustomize {}: {e}", dir.display()),
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Deserialises `value` into `T` and checks that serialising it back gives the
/// same document: a field k8s-openapi does not know (a typo) would be dropped
/// silently by serde, and shows up here as a difference.
fn typed<T: DeserializeOwned + Serialize>(what: &str, value: &Value) -> T {
    let parsed: T = serde_path_to_error::deserialize(value.clone())
        .unwrap_or_else(|e| panic!("{what}: does not parse as its k8s-openapi type: {e}"));
    let back = serde_json::to_value(&parsed).unwrap();
    let mut diffs = Vec::new();
    diff("", value, &back, &mut diffs);
    assert!(
        diffs.is_empty(),
        "{what}: fields lost or changed by the k8s-openapi type (unknown field names?): {diffs:?}"
    );
    parsed
}

/// Paths where `a` (the manifest) and `b` (the round-tripped object) differ.
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, av) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(bv) => diff(&p, av, bv, out),
                    None => out.push(format!("{p} missing after round trip")),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k} added by round trip"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), av, bv, out);
            }
        }
        _ if a == b => {}
        // `minimum: 0` comes back as 0.0 (f64 in the schema type)
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ => out.push(format!("{path}: {a} became {b}")),
    }
}

fn parse_object(overlay: &str, value: &Value) -> Object {
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let kind = value["kind"].as_str().unwrap_or_default();
    let name = value["metadata"]["name"].as_str().unwrap_or_default();
    let what = format!("{overlay}: {kind} {name} ({api_version})");
    match (api_version, kind) {
        ("v1", "Namespace") => Object::Namespace(typed(&what, value)),
        // no CRD: it installs on its own (deploy/crd), never with an operator,
        // whose deletion would take every namespace's policies with it
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            panic!("{what}: the CRD belongs in deploy/crd, not in an operator install")
        }
        ("v1", "ServiceAccount") => Object::ServiceAccount(typed(&what, value)),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => Object::ClusterRole(typed(&what, value)),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            Object::ClusterRoleBinding(typed(&what, value))
        }
        ("rbac.authorization.k8s.io/v1", "Role") => Object::Role(typed(&what, value)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => Object::RoleBinding(typed(&what, value)),
        ("apps/v1", "Deployment") => Object::Deployment(typed(&what, value)),
        ("v1", "Service") => Object::Service(typed(&what, value)),
        ("v1", "ConfigMap") => Object::ConfigMap(typed(&what, value)),
        ("policy/v1", "PodDisruptionBudget") => Object::Pdb(typed(&what, value)),
        ("networking.k8s.io/v1", "NetworkPolicy") => Object::NetworkPolicy(typed(&what, value)),
        ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema") => {
            Object::FlowSchema(typed(&what, value))
        }
        ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration") => {
            Object::PriorityLevel(typed(&what, value))
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            Object::ScaleWebhook(typed(&what, value))
        }
        ("monitoring.coreos.com/v1", "ServiceMonitor" | "PrometheusRule")
        | ("cert-manager.io/v1", "Certificate" | "Issuer") => {
            let obj: DynamicObject = serde_json::from_value(value.clone())
                .unwrap_or_else(|e| panic!("{what}: does not parse as a DynamicObject: {e}"));
            Object::Custom(obj)
        }
        _ => panic!("{what}: unknown kind; add it to parse_object with its k8s-openapi type"),
    }
}

fn render(overlay: &str) -> Rendered {
    render_dir(overlay, &repo().join("deploy/overlays").join(overlay))
}

/// An overlay with every component added, as a user's overlay on top of
/// ours would (rendered from a kustomization under the target directory:
/// kustomize takes only relative paths to other directories).
fn render_with_components(overlay: &str) -> Rendered {
    // inside the repository whatever CARGO_TARGET_DIR says: kustomize
    // takes other directories by relative path only
    let scratch = tempfile::Builder::new()
        .prefix(".kustomize-")
        .tempdir_in(repo())
        .unwrap();
    let dir = scratch.path().to_path_buf();
    let up = relative_to_repo(&dir);
    // a user's overlay sets the install namespace for what it adds
    let namespace = render(overlay).namespace();
    let components: Vec<String> = COMPONENTS
        .iter()
        .map(|&c| {
            if c == "networkpolicy" {
                // only with the API server's addresses set, as a user sets them
                let copy = networkpolicy_with_api_server(&dir, Some(API_SERVER_CIDR));
                format!("  - {}\n", copy.file_name().unwrap().to_string_lossy())
            } else {
                format!("  - {up}/deploy/components/{c}\n")
            }
        })
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {namespace}\nresources:\n  - {up}/deploy/overlays/{overlay}\ncomponents:\n{}",
            components.concat()
        ),
    )
    .unwrap();
    render_dir(&format!("{overlay} + components"), &dir)
}

/// The address the tests give the networkpolicy component for the API server.
const API_SERVER_CIDR: &str = "10.0.0.10/32";

/// A copy of the networkpolicy component in `dir`, as a user keeps one, its
/// `api-server.env` given `apiServerCIDR` when `cidr` is some.
fn networkpolicy_with_api_server(dir: &Path, cidr: Option<&str>) -> PathBuf {
    let src = repo().join("deploy/components/networkpolicy");
    let copy = dir.join("networkpolicy");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
    }
    if let Some(cidr) = cidr {
        let env = copy.join("api-server.env");
        let mut text = std::fs::read_to_string(&env).unwrap();
        text.push_str(&format!("apiServerCIDR={cidr}\n"));
        std::fs::write(&env, text).unwrap();
    }
    copy
}

/// `../..` from `dir` up to the repository root.
fn relative_to_repo(dir: &Path) -> String {
    let rest = dir
        .strip_prefix(repo())
        .expect("the target directory is inside the repository");
    vec![".."; rest.components().count()].join("/")
}

fn render_dir(overlay: &str, dir: &Path) -> Rendered {
    let yaml = kubectl_kustomize(dir);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml)
        .unwrap_or_else(|e| panic!("{overlay}: rendered YAML does not parse: {e}"));
    let objects = docs
        .iter()
        .filter(|v| !v.is_null())
        .map(|v| parse_object(overlay, v))
        .collect();
    Rendered {
        overlay: overlay.to_string(),
        objects,
    }
}

impl Rendered {
    fn one<'a, T>(&'a self, what: &str, pick: impl Fn(&'a Object) -> Option<&'a T>) -> &'a T {
        let found: Vec<&T> = self.objects.iter().filter_map(pick).collect();
        assert_eq!(
            found.len(),
            1,
            "{}: expected exactly one {what}",
            self.overlay
        );
        found[0]
    }

    fn deployment(&self) -> &Deployment {
        self.one("Deployment", |o| match o {
            Object::Deployment(d) => Some(d),
            _ => None,
        })
    }

    fn service(&self, name: &str) -> &Service {
        self.one(&format!("Service {name}"), |o| match o {
            Object::Service(s) if s.metadata.name.as_deref() == Some(name) => Some(s),
            _ => None,
        })
    }

    fn custom(&self, kind: &str) -> &DynamicObject {
        self.one(kind, |o| match o {
            Object::Custom(c) if c.types.as_ref().is_some_and(|t| t.kind == kind) => Some(c),
            _ => None,
        })
    }

    fn service_account(&self) -> &ServiceAccount {
        self.one("ServiceAccount", |o| match o {
            Object::ServiceAccount(s) => Some(s),
            _ => None,
        })
    }

    fn namespace(&self) -> String {
        self.service_account().metadata.namespace.clone().unwrap()
    }

    fn container(&self) -> &Container {
        let spec = &self.deployment().spec;
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.containers.len(), 1, "{}: one container", self.overlay);
        &pod.containers[0]
    }

    fn pod_labels(&self) -> BTreeMap<String, String> {
        let spec = &self.deployment().spec;
        spec.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }

    fn args(&self) -> Vec<String> {
        self.container().args.clone().unwrap_or_default()
    }
}

fn all_rendered() -> Vec<Rendered> {
    let dir = repo().join("deploy/overlays");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(
        found, OVERLAYS,
        "deploy/overlays holds exactly the overlays this test knows how to check"
    );
    OVERLAYS.iter().map(|o| render(o)).collect()
}

fn is_subset(small: &BTreeMap<String, String>, big: &BTreeMap<String, String>) -> bool {
    !small.is_empty() && small.iter().all(|(k, v)| big.get(k) == Some(v))
}

// ---------------------------------------------------------------------------
// Workload, Service, PDB, ServiceMonitor

#[test]
fn every_overlay_renders_into_known_typed_objects() {
    let with_components = OVERLAYS.iter().map(|o| render_with_components(o));
    for r in all_rendered().into_iter().chain(with_components) {
        let count = |pick: fn(&Object) -> bool| r.objects.iter().filter(|o| pick(o)).count();
        assert_eq!(count(|o| matches!(o, Object::Pdb(_))), 1, "{}", r.overlay);
        r.deployment();
        r.service("deletion-cost");
        r.service("deletion-cost-hook");
        // optional pieces come only with their components
        let extras = count(|o| {
            matches!(
                o,
                Object::Custom(_)
                    | Object::ScaleWebhook(_)
                    | Object::NetworkPolicy(_)
                    | Object::FlowSchema(_)
                    | Object::PriorityLevel(_)
                    | Object::ConfigMap(_)
            )
        });
        if r.overlay.ends_with("components") {
            assert_eq!(extras, 9, "{}: one object per optional piece", r.overlay);
        } else {
            assert_eq!(extras, 0, "{}: optional pieces are components", r.overlay);
        }
        // a Namespace, if the overlay creates one, is the install namespace and
        // enforces the restricted Pod Security Standard the Deployment meets
        for o in &r.objects {
            if let Object::Namespace(n) = o {
                assert_eq!(n.metadata.name.as_deref(), Some(r.namespace().as_str()));
                let labels = n.metadata.labels.clone().unwrap_or_default();
                assert_eq!(
                    labels
                        .get("pod-security.kubernetes.io/enforce")
                        .map(String::as_str),
                    Some("restricted"),
                    "{}: namespace enforces restricted",
                    r.overlay
                );
            }
        }
        // every namespaced object lands in the one install namespace
        let ns = r.namespace();
        for o in &r.objects {
            let meta = match o {
                Object::ServiceAccount(x) => &x.metadata,
                Object::Role(x) => &x.metadata,
                Object::RoleBinding(x) => &x.metadata,
                Object::Deployment(x) => &x.metadata,
                Object::Service(x) => &x.metadata,
                Object::Pdb(x) => &x.metadata,
                Object::NetworkPolicy(x) => &x.metadata,
                Object::ConfigMap(x) => &x.metadata,
                Object::Custom(x) => &x.metadata,
                Object::ClusterRole(x) => {
                    assert_cluster_object_is_the_installs(&r, &x.metadata);
                    continue;
                }
                Object::ClusterRoleBinding(x) => {
                    assert_cluster_object_is_the_installs(&r, &x.metadata);
                    continue;
                }
                Object::FlowSchema(x) => {
                    assert_cluster_object_is_the_installs(&r, &x.metadata);
                    continue;
                }
                Object::PriorityLevel(x) => {
                    assert_cluster_object_is_the_installs(&r, &x.metadata);
                    continue;
                }
                Object::ScaleWebhook(x) => {
                    assert_cluster_object_is_the_installs(&r, &x.metadata);
                    continue;
                }
                Object::Namespace(_) => continue,
            };
            assert_eq!(
                meta.namespace.as_deref(),
                Some(ns.as_str()),
                "{}: {:?} outside the install namespace",
                r.overlay,
                meta.name
            );
        }
    }
}

/// A cluster-scoped object of a namespace-scoped install carries the install
/// namespace in its name, so no two installs share it (deleting one install
/// never removes what another uses). The cluster-wide install owns its own.
fn assert_cluster_object_is_the_installs(
    r: &Rendered,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    if !r.overlay.starts_with("namespace-scoped") {
        return;
    }
    let name = meta.name.clone().unwrap_or_default();
    assert!(
        name.ends_with(&format!(".{}", r.namespace())),
        "{}: cluster-scoped {name} would be shared by every namespace-scoped install",
        r.overlay
    );
}

#[test]
fn crd_installs_on_its_own() {
    let text = kubectl_kustomize(&repo().join("deploy/crd"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let docs: Vec<&Value> = docs.iter().filter(|v| !v.is_null()).collect();
    assert_eq!(docs.len(), 1, "deploy/crd renders the CRD and nothing else");
    let file: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/crd/crd.yaml")).unwrap(),
    )
    .unwrap();
    let crd: CustomResourceDefinition = typed("deploy/crd/crd.yaml", &file);
    let rendered: CustomResourceDefinition = typed("deploy/crd render", docs[0]);
    assert_eq!(rendered, crd, "deploy/crd renders deploy/crd/crd.yaml");
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("deletioncostpolicies.deletioncost.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
}

#[test]
fn deployment_is_ha_and_restricted() {
    for r in all_rendered() {
        let o = &r.overlay;
        let spec = &r.deployment().spec;
        assert_eq!(
            spec.replicas,
            Some(2),
            "{o}: two replicas (leader + warm follower)"
        );
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(
            pod.service_account_name.as_deref(),
            r.service_account().metadata.name.as_deref(),
            "{o}: runs as the rendered ServiceAccount"
        );
        assert_ne!(pod.host_network, Some(true), "{o}: hostNetwork");
        let psc = pod.security_context.as_ref().expect("pod securityContext");
        assert_eq!(psc.run_as_non_root, Some(true), "{o}: runAsNonRoot");
        assert!(psc.run_as_user.is_some_and(|u| u != 0), "{o}: non-zero uid");
        assert_eq!(
            psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{o}: seccomp"
        );

        let c = r.container();
        assert!(
            c.image.as_deref().is_some_and(|i| !i.is_empty()),
            "{o}: image"
        );
        let sc = c
            .security_context
            .as_ref()
            .expect("container securityContext");
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(true),
            "{o}: read-only root"
        );
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{o}: no escalation"
        );
        assert_ne!(sc.privileged, Some(true), "{o}: privileged");
        let caps = sc.capabilities.as_ref().expect("capabilities");
        assert_eq!(
            caps.drop.as_deref(),
            Some(&["ALL".to_string()][..]),
            "{o}: drop ALL"
        );
        assert!(
            caps.add.as_ref().is_none_or(|a| a.is_empty()),
            "{o}: no added caps"
        );

        let resources = c.resources.as_ref().expect("resources");
        for (what, list) in [
            ("requests", &resources.requests),
            ("limits", &resources.limits),
        ] {
            let list = list.as_ref().unwrap_or_else(|| panic!("{o}: no {what}"));
            assert!(list.contains_key("memory"), "{o}: {what}.memory");
        }
        assert!(resources.requests.as_ref().unwrap().contains_key("cpu"));

        // ports the probes and the Service refer to
        let ports: BTreeMap<String, i32> = c
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
            .collect();
        assert_eq!(ports.get("metrics"), Some(&8080), "{o}: metrics port");
        assert_eq!(ports.get("hook"), Some(&8443), "{o}: hook port");
        for (probe, path) in [
            (&c.liveness_probe, "/healthz"),
            (&c.readiness_probe, "/readyz"),
        ] {
            let get = probe
                .as_ref()
                .and_then(|p| p.http_get.as_ref())
                .unwrap_or_else(|| panic!("{o}: {path} probe missing"));
            assert_eq!(get.path.as_deref(), Some(path), "{o}");
            let port = match &get.port {
                IntOrString::Int(p) => *p,
                IntOrString::String(name) => ports[name],
            };
            assert_eq!(port, 8080, "{o}: {path} is served on the metrics listener");
        }

        let env: BTreeMap<String, String> = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| {
                let field = e.value_from.as_ref()?.field_ref.as_ref()?;
                Some((e.name.clone(), field.field_path.clone()))
            })
            .collect();
        assert_eq!(
            env.get("POD_NAME").map(String::as_str),
            Some("metadata.name")
        );
        assert_eq!(
            env.get("POD_NAMESPACE").map(String::as_str),
            Some("metadata.namespace")
        );

        let args = r.args();
        assert_eq!(
            args.first().map(String::as_str),
            Some("run"),
            "{o}: runs the operator"
        );
        for arg in &args[1..] {
            let flag = arg.split('=').next().unwrap();
            assert!(RUN_FLAGS.contains(&flag), "{o}: unknown flag {arg}");
            // $(VAR) is expanded by the kubelet only for variables the container defines
            if let Some(var) = arg.split("$(").nth(1).and_then(|s| s.split(')').next()) {
                assert!(env.contains_key(var), "{o}: {arg} uses undefined {var}");
            }
        }
        assert!(
            args.contains(&"--metrics-addr=0.0.0.0:8080".to_string()),
            "{o}"
        );
        assert!(
            args.contains(&"--hook-addr=0.0.0.0:8443".to_string()),
            "{o}"
        );
    }
}

#[test]
fn service_pdb_and_servicemonitor_select_the_operator() {
    for r in all_rendered() {
        let o = &r.overlay;
        let pod_labels = r.pod_labels();
        let ports = |svc: &Service| -> BTreeMap<String, (i32, Option<IntOrString>)> {
            svc.spec
                .iter()
                .flat_map(|s| s.ports.iter().flatten())
                .map(|p| (p.name.clone().unwrap(), (p.port, p.target_port.clone())))
                .collect()
        };
        // metrics: every replica
        let svc = r.service("deletion-cost");
        let selector = svc.spec.as_ref().unwrap().selector.clone().unwrap();
        assert!(
            is_subset(&selector, &pod_labels),
            "{o}: Service selects the operator pods"
        );
        let metrics = IntOrString::String("metrics".into());
        assert_eq!(
            ports(svc).get("metrics"),
            Some(&(8080, Some(metrics))),
            "{o}"
        );
        // the hook: only the replica that labelled itself the leader
        let hook_svc = r.service("deletion-cost-hook");
        let mut hook_selector = hook_svc.spec.as_ref().unwrap().selector.clone().unwrap();
        assert_eq!(
            hook_selector
                .remove(deletion_cost::engine::leadership::LEADER_LABEL)
                .as_deref(),
            Some("true"),
            "{o}: the hook Service selects the leader only"
        );
        assert_eq!(
            hook_selector, selector,
            "{o}: and otherwise the operator pods"
        );
        let hook = IntOrString::String("hook".into());
        assert_eq!(
            ports(hook_svc).get("hook"),
            Some(&(8443, Some(hook))),
            "{o}"
        );

        let pdb = r.one("PodDisruptionBudget", |x| match x {
            Object::Pdb(p) => Some(p),
            _ => None,
        });
        let pdb_spec = pdb.spec.as_ref().unwrap();
        assert_eq!(pdb_spec.min_available, Some(IntOrString::Int(1)), "{o}");
        let pdb_sel = pdb_spec
            .selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        assert!(
            is_subset(pdb_sel, &pod_labels),
            "{o}: PDB selects the operator pods"
        );
    }
    for overlay in OVERLAYS {
        let r = render_with_components(overlay);
        let o = &r.overlay;
        let svc = r.service("deletion-cost");
        let sm = r.custom("ServiceMonitor");
        let sm_sel: BTreeMap<String, String> =
            serde_json::from_value(sm.data["spec"]["selector"]["matchLabels"].clone()).unwrap();
        let svc_labels = svc.metadata.labels.clone().unwrap_or_default();
        assert!(
            is_subset(&sm_sel, &svc_labels),
            "{o}: ServiceMonitor selects the Service"
        );
        let endpoints = sm.data["spec"]["endpoints"].as_array().unwrap();
        assert!(!endpoints.is_empty(), "{o}: ServiceMonitor endpoints");
        for ep in endpoints {
            assert_eq!(ep["port"], "metrics", "{o}: scrapes the metrics port");
            assert_eq!(ep["path"], "/metrics", "{o}");
        }
    }
}

// ---------------------------------------------------------------------------
// RBAC

/// One granted permission: where it applies (`*` = cluster-wide, else a
/// namespace), API group, resource, verb.
type Grant = (String, String, String, String);

fn expand(scope: &str, rules: &[PolicyRule], out: &mut BTreeSet<Grant>, what: &str) {
    for rule in rules {
        assert!(
            rule.non_resource_urls.as_ref().is_none_or(|u| u.is_empty()),
            "{what}: non-resource URLs"
        );
        assert!(
            rule.resource_names.as_ref().is_none_or(|u| u.is_empty()),
            "{what}: resourceNames are not expected"
        );
        let groups = rule.api_groups.clone().unwrap_or_default();
        let resources = rule.resources.clone().unwrap_or_default();
        for s in groups.iter().chain(&resources).chain(&rule.verbs) {
            assert!(!s.contains('*'), "{what}: wildcard {s:?} in {rule:?}");
        }
        for g in &groups {
            for r in &resources {
                for v in &rule.verbs {
                    out.insert((scope.into(), g.clone(), r.clone(), v.clone()));
                }
            }
        }
    }
}

/// What the operator's ServiceAccount may do: rules of every role bound to it,
/// with the scope each binding gives them.
fn effective_grants(r: &Rendered) -> BTreeSet<Grant> {
    let o = &r.overlay;
    let sa_name = r.service_account().metadata.name.clone().unwrap();
    let sa_ns = r.namespace();
    let cluster_roles: BTreeMap<String, &ClusterRole> = r
        .objects
        .iter()
        .filter_map(|x| match x {
            Object::ClusterRole(c) => Some((c.metadata.name.clone().unwrap(), c)),
            _ => None,
        })
        .collect();
    let roles: BTreeMap<String, &Role> = r
        .objects
        .iter()
        .filter_map(|x| match x {
            Object::Role(c) => Some((c.metadata.name.clone().unwrap(), c)),
            _ => None,
        })
        .collect();
    let mut used = BTreeSet::new();
    let mut grants = BTreeSet::new();
    for x in &r.objects {
        let (kind, name, scope, role_ref, subjects) = match x {
            Object::ClusterRoleBinding(b) => (
                "ClusterRoleBinding",
                b.metadata.name.clone().unwrap(),
                "*".to_string(),
                &b.role_ref,
                b.subjects.clone().unwrap_or_default(),
            ),
            Object::RoleBinding(b) => (
                "RoleBinding",
                b.metadata.name.clone().unwrap(),
                b.metadata.namespace.clone().unwrap(),
                &b.role_ref,
                b.subjects.clone().unwrap_or_default(),
            ),
            _ => continue,
        };
        let what = format!("{o}: {kind} {name}");
        assert_eq!(subjects.len(), 1, "{what}: one subject");
        let s = &subjects[0];
        assert_eq!(
            (
                s.kind.as_str(),
                Some(s.name.as_str()),
                s.namespace.as_deref()
            ),
            (
                "ServiceAccount",
                Some(sa_name.as_str()),
                Some(sa_ns.as_str())
            ),
            "{what}: binds the operator's ServiceAccount in its namespace"
        );
        let rules = match role_ref.kind.as_str() {
            "ClusterRole" => cluster_roles.get(&role_ref.name).map(|c| &c.rules),
            "Role" => roles.get(&role_ref.name).map(|c| &c.rules),
            other => panic!("{what}: roleRef kind {other}"),
        }
        .unwrap_or_else(|| panic!("{what}: roleRef {} is not in the render", role_ref.name));
        used.insert((role_ref.kind.clone(), role_ref.name.clone()));
        expand(
            &scope,
            rules.as_deref().unwrap_or_default(),
            &mut grants,
            &what,
        );
    }
    // an unbound role is dead weight or a mistake
    for name in cluster_roles.keys() {
        assert!(
            used.contains(&("ClusterRole".into(), name.clone())),
            "{o}: unbound {name}"
        );
    }
    for name in roles.keys() {
        assert!(
            used.contains(&("Role".into(), name.clone())),
            "{o}: unbound {name}"
        );
    }
    grants
}

/// The permissions the operator used against a real API server, recorded by
/// the e2e suite from every request it made (tests/e2e/rbac.rs):
/// (group, resource, verb, where) with where = `cluster` (cluster-scoped
/// resource), `namespaced` (any namespace it manages) or `own-namespace`.
fn observed() -> Vec<(String, String, String, String)> {
    let path = repo().join("tests/fixtures/rbac/operator-requests.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows: Vec<_> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{}: bad line {l:?}", path.display());
            let group = if f[0] == "core" { "" } else { f[0] };
            (
                group.to_string(),
                f[1].to_string(),
                f[2].to_string(),
                f[3].to_string(),
            )
        })
        .collect();
    assert!(!rows.is_empty(), "{}: no permissions", path.display());
    rows
}

/// What an install must grant: the observed permissions, namespaced ones at
/// `workload_scope` (`*` for a ClusterRole, else the install namespace),
/// cluster-scoped ones cluster-wide, the Lease's in `own_ns`.
fn wanted_grants(workload_scope: &str, own_ns: &str) -> BTreeSet<Grant> {
    observed()
        .into_iter()
        .map(|(group, resource, verb, place)| {
            let scope = match place.as_str() {
                "cluster" => "*".to_string(),
                "namespaced" => workload_scope.to_string(),
                "own-namespace" => own_ns.to_string(),
                other => panic!("unknown place {other:?} in the observed permissions"),
            };
            (scope, group, resource, verb)
        })
        .collect()
}

fn assert_same_grants(overlay: &str, got: &BTreeSet<Grant>, want: &BTreeSet<Grant>) {
    let extra: Vec<_> = got.difference(want).collect();
    let missing: Vec<_> = want.difference(got).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{overlay}: RBAC is not the least-privilege set\n  granted but not needed: {extra:?}\n  needed but missing: {missing:?}"
    );
}

#[test]
fn cluster_wide_rbac_is_least_privilege() {
    let r = render("cluster-wide");
    let ns = r.namespace();
    let want = wanted_grants("*", &ns);
    assert_same_grants(&r.overlay, &effective_grants(&r), &want);
    assert!(
        !r.args().iter().any(|a| a.starts_with("--namespace")),
        "cluster-wide install must not limit itself to one namespace"
    );
}

#[test]
fn namespace_scoped_rbac_stays_in_its_namespace() {
    let r = render("namespace-scoped");
    let ns = r.namespace();
    let want = wanted_grants(&ns, &ns);
    let got = effective_grants(&r);
    assert_same_grants(&r.overlay, &got, &want);

    // the point of this overlay: no ClusterRole touches pods
    for o in &r.objects {
        if let Object::ClusterRole(c) = o {
            let mut g = BTreeSet::new();
            expand(
                "*",
                c.rules.as_deref().unwrap_or_default(),
                &mut g,
                "ClusterRole",
            );
            assert!(
                !g.iter().any(|(_, _, res, _)| res.starts_with("pods")),
                "ClusterRole {:?} grants pod access in a namespace-scoped install",
                c.metadata.name
            );
        }
    }

    // --namespace names the namespace the Role lives in
    let args = r.args();
    let value = args
        .iter()
        .find_map(|a| a.strip_prefix("--namespace="))
        .expect("namespace-scoped install passes --namespace");
    assert!(
        value == ns || value == "$(POD_NAMESPACE)",
        "--namespace={value} is not the install namespace {ns}"
    );
}

// ---------------------------------------------------------------------------
// Dockerfile

/// Dockerfile instructions, continuation lines joined.
fn dockerfile_instructions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (op, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((op.to_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// The `[[bin]]` names in Cargo.toml.
fn cargo_bins() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let mut bins = Vec::new();
    let mut in_bin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(v) = line.strip_prefix("name") {
                bins.push(
                    v.trim_start_matches([' ', '='])
                        .trim_matches('"')
                        .to_string(),
                );
            }
        }
    }
    bins
}

/// The arguments of the one `cargo auditable build` (the release build
/// with its dependency list embedded) in a shell line (`&&`/`||` lists).
fn cargo_build_args(run: &str) -> Vec<String> {
    let steps: Vec<&str> = run
        .split("&&")
        .flat_map(|s| s.split("||"))
        .map(str::trim)
        .filter(|s| s.contains("cargo ") && s.contains(" build"))
        .collect();
    assert_eq!(steps.len(), 1, "one cargo build in {run}");
    assert!(
        steps[0].starts_with("cargo auditable build"),
        "the release build is `cargo auditable build` (the binary carries its dependency list): {}",
        steps[0]
    );
    steps[0]
        .split("cargo auditable build")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn dockerfile_builds_a_static_binary_onto_scratch() {
    let ins = dockerfile_instructions();
    let from_at: Vec<usize> = (0..ins.len()).filter(|&i| ins[i].0 == "FROM").collect();
    assert_eq!(
        from_at.len(),
        2,
        "multi-stage: a build stage and a runtime stage"
    );
    let build_stage = ins[from_at[0]]
        .1
        .split_once(" AS ")
        .or_else(|| ins[from_at[0]].1.split_once(" as "))
        .map(|(_, name)| name.trim().to_string())
        .expect("build stage is named");
    assert_eq!(
        ins[from_at[1]].1, "scratch",
        "runtime image is an empty base (no libc, no shell)"
    );
    let (build, runtime) = ins.split_at(from_at[1]);
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    assert!(
        !text.lines().any(|l| l.starts_with("# syntax")) && !text.contains("--mount="),
        "plain Dockerfile syntax: podman and buildah parse it without a BuildKit frontend"
    );

    // the build: the project's release build of the operator, glibc linked in
    assert!(cargo_bins().contains(&"deletion-cost".to_string()));
    assert!(
        build
            .iter()
            .any(|(op, a)| op == "ENV" && a.contains("RUSTFLAGS") && a.contains("+crt-static")),
        "the build stage sets RUSTFLAGS=\"-C target-feature=+crt-static\""
    );
    let runs: Vec<&String> = build
        .iter()
        .filter(|(op, a)| op == "RUN" && a.contains("cargo auditable build"))
        .map(|(_, a)| a)
        .collect();
    assert_eq!(runs.len(), 1, "one cargo build");
    let run = runs[0];
    let want = [
        "--release",
        "--locked",
        "--bin",
        "deletion-cost",
        "--target",
        "\"$target\"",
    ];
    assert_eq!(
        cargo_build_args(run),
        want,
        "build command is `cargo auditable build --release --locked --bin deletion-cost --target \"$target\"`"
    );
    // the same cargo-auditable, the build stage's and the script's
    let pinned = |text: &str| -> Option<String> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix("CARGO_AUDITABLE_VERSION="))
            .map(str::to_string)
            .or_else(|| {
                text.split(|c: char| c.is_whitespace() || c == '"')
                    .find_map(|w| w.strip_prefix("cargo-auditable@").map(str::to_string))
            })
    };
    // scripts/build-image.sh runs the same build on the host
    let script = std::fs::read_to_string(repo().join("scripts/build-image.sh")).unwrap();
    let script_build = script
        .lines()
        .find(|l| l.trim_start().starts_with("cargo auditable build"))
        .expect("scripts/build-image.sh runs cargo auditable build");
    assert_eq!(cargo_build_args(script_build), want);
    assert!(script.contains("-C target-feature=+crt-static"));
    assert_eq!(
        pinned(&text),
        pinned(&script),
        "one cargo-auditable version"
    );
    assert!(
        pinned(&text).is_some(),
        "the build stage installs a pinned cargo-auditable"
    );
    // both make the SBOM from that binary, into the image's root
    assert!(
        run.contains("python3 scripts/sbom.py \"target/$target/release/deletion-cost\" /rootfs/deletion-cost.cdx.json"),
        "the build stage writes the SBOM to /rootfs/deletion-cost.cdx.json: {run}"
    );
    assert!(
        script.contains(
            "python3 scripts/sbom.py \"$binary\" \"$context/rootfs/deletion-cost.cdx.json\""
        ),
        "scripts/build-image.sh writes the SBOM into the image's root"
    );

    // /rootfs holds the binary that build produced and the CA bundle
    let workdir_ok = build.iter().any(|(op, a)| op == "WORKDIR" && a == "/src");
    assert!(workdir_ok, "build stage WORKDIR /src (the COPY . . target)");
    let copies: Vec<Vec<&str>> = run
        .split("&&")
        .map(str::trim)
        .filter(|s| s.starts_with("cp "))
        .map(|s| s.split_whitespace().collect())
        .collect();
    let binary_dest = copies
        .iter()
        .find(|c| c.get(1) == Some(&"\"target/$target/release/deletion-cost\""))
        .and_then(|c| c.get(2))
        .expect("cp \"target/$target/release/deletion-cost\" /rootfs/...");
    let installed = binary_dest
        .strip_prefix("/rootfs")
        .expect("the binary goes into /rootfs");
    assert!(
        copies.iter().any(|c| c[1..]
            == [
                "/etc/ssl/certs/ca-certificates.crt",
                "/rootfs/etc/ssl/certs/ca-certificates.crt"
            ]),
        "the CA bundle goes to /rootfs/etc/ssl/certs/ca-certificates.crt"
    );

    // the runtime stage: /rootfs and nothing else (scripts/build-image.sh
    // replaces exactly this COPY with `COPY rootfs/ /` from its context)
    let runtime_copies: Vec<&String> = runtime
        .iter()
        .filter(|(op, _)| op == "COPY" || op == "ADD")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(
        runtime_copies,
        [&format!("--from={build_stage} /rootfs/ /")],
        "the runtime stage copies /rootfs/ from the build stage, once"
    );
    assert!(
        !runtime.iter().any(|(op, _)| op == "RUN"),
        "no RUN in a scratch stage (no shell)"
    );
    let json_list = |op: &str| -> Vec<String> {
        let arg = runtime
            .iter()
            .rev()
            .find(|(o, _)| o == op)
            .map(|(_, a)| a.clone())
            .unwrap_or_else(|| panic!("no {op}"));
        serde_json::from_str(&arg).unwrap_or_else(|e| panic!("{op} must be exec form: {e}"))
    };
    assert_eq!(
        json_list("ENTRYPOINT"),
        [installed],
        "entrypoint is the copied binary"
    );
    assert_eq!(json_list("CMD"), ["run"], "default command is the operator");

    // labels: the version is Cargo.toml's (the script passes it as VERSION too)
    assert!(
        runtime
            .iter()
            .any(|(op, a)| op == "ARG" && *a == format!("VERSION={}", env!("CARGO_PKG_VERSION"))),
        "ARG VERSION={} (Cargo.toml's version)",
        env!("CARGO_PKG_VERSION")
    );
    let labels = runtime
        .iter()
        .filter(|(op, _)| op == "LABEL")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    for label in [
        format!(
            "org.opencontainers.image.title=\"{}\"",
            env!("CARGO_PKG_NAME")
        ),
        "org.opencontainers.image.version=\"${VERSION}\"".to_string(),
    ] {
        assert!(labels.contains(&label), "LABEL {label}");
    }

    // uid and gid 65532, as the Deployment runs it
    let user = runtime
        .iter()
        .rev()
        .find(|(op, _)| op == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    assert_eq!(user, "65532:65532", "runs as uid:gid 65532 (non-root)");
    let r = render("cluster-wide");
    let pod = r.deployment().spec.template.spec.clone().unwrap();
    let sc = pod.security_context.unwrap();
    assert_eq!(
        format!("{}:{}", sc.run_as_user.unwrap(), sc.run_as_group.unwrap()),
        user,
        "Dockerfile USER matches runAsUser:runAsGroup"
    );
}

// ---------------------------------------------------------------------------
// Grafana dashboard

/// The metrics the operator exports.
const METRICS: [&str; 13] = [
    "deletion_cost_patches_total",
    "deletion_cost_patch_queue_depth",
    "deletion_cost_rate_limit_wait_seconds",
    "deletion_cost_configured_qps",
    "deletion_cost_order_mismatches",
    "deletion_cost_signal_fetch_errors_total",
    "deletion_cost_reconciles_total",
    "deletion_cost_hook_requests_total",
    "deletion_cost_leader",
    "deletion_cost_scale_in_freed_hourly_total",
    "deletion_cost_scale_in_freed_nodes_total",
    "deletion_cost_freed_nodes_settled_total",
    "deletion_cost_freed_hourly_settled_total",
];
const HISTOGRAMS: [&str; 1] = ["deletion_cost_rate_limit_wait_seconds"];

/// PromQL words that are not metric names.
const PROMQL_WORDS: [&str; 16] = [
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "clamp_min",
    "label_values",
];

/// PromQL words followed by a list of label names, not metrics.
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Metric names a PromQL expression reads: identifiers outside strings, label
/// matchers, range selectors and grouping lists, that are not functions,
/// keywords or Grafana variables.
fn metric_names(expr: &str) -> Vec<String> {
    // blank out strings, `{...}` and `[...]`
    let mut cleaned = Vec::new();
    let (mut brace, mut bracket, mut in_string) = (0, 0, false);
    for ch in expr.chars() {
        let keep = match ch {
            '"' => {
                in_string = !in_string;
                false
            }
            _ if in_string => false,
            '{' => {
                brace += 1;
                false
            }
            '}' => {
                brace -= 1;
                false
            }
            '[' => {
                bracket += 1;
                false
            }
            ']' => {
                bracket -= 1;
                false
            }
            _ => brace == 0 && bracket == 0,
        };
        cleaned.push(if keep { ch } else { ' ' });
    }
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '$';
    let mut out = Vec::new();
    let mut i = 0;
    while i < cleaned.len() {
        if !is_ident(cleaned[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < cleaned.len() && (is_ident(cleaned[i]) || cleaned[i] == '.') {
            i += 1;
        }
        let word: String = cleaned[start..i].iter().collect();
        if GROUPING.contains(&word.as_str()) {
            // skip the `(label, ...)` list that follows
            let mut j = i;
            while j < cleaned.len() && cleaned[j] == ' ' {
                j += 1;
            }
            if j < cleaned.len() && cleaned[j] == '(' {
                while j < cleaned.len() && cleaned[j] != ')' {
                    j += 1;
                }
                i = j;
            }
            continue;
        }
        let first = word.chars().next().unwrap_or('0');
        if first == '$' || first.is_ascii_digit() || PROMQL_WORDS.contains(&word.as_str()) {
            continue;
        }
        out.push(word);
    }
    out
}

#[test]
fn promql_metric_name_extraction() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, pod) (rate(a_bucket{x="y{z}"}[5m]))) / on (pod) max(b{namespace=~"$namespace"}) offset 1h"#,
    );
    assert_eq!(names, ["a_bucket", "b"]);
    assert_eq!(
        metric_names("label_values(c, namespace)"),
        ["c", "namespace"]
    );
}

#[test]
fn grafana_dashboard_queries_only_exported_metrics() {
    let text = std::fs::read_to_string(repo().join("deploy/grafana-dashboard.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).expect("dashboard is valid JSON");
    let allowed = |name: &str| {
        METRICS.contains(&name)
            || HISTOGRAMS.iter().any(|h| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name == format!("{h}{s}"))
            })
    };
    let base = |name: &str| -> String {
        HISTOGRAMS
            .iter()
            .find(|h| name.starts_with(*h))
            .map_or(name.to_string(), |h| h.to_string())
    };

    let mut used = BTreeSet::new();
    let mut titles = Vec::new();
    let panels = dash["panels"].as_array().expect("panels");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().expect("panel title").to_string();
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no queries");
        for t in targets {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: target without expr"));
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{title}: {expr} reads no metric");
            for n in names {
                assert!(
                    allowed(&n),
                    "{title}: {expr} reads {n}, which the operator does not export"
                );
                used.insert(base(&n));
            }
        }
        titles.push(title.to_lowercase());
    }
    // the template variable query reads an exported metric too
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            let names = metric_names(q);
            assert!(allowed(&names[0]), "variable {}: {q}", v["name"]);
        }
    }
    let unused: Vec<_> = METRICS.iter().filter(|m| !used.contains(**m)).collect();
    assert!(unused.is_empty(), "metrics with no panel: {unused:?}");
    for needed in [
        "write rate vs limit",
        "queue depth",
        "mismatches by reason",
        "hook outcomes",
        "signal fetch errors",
        "reconcile",
        "freed by the policy vs the default",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(needed)),
            "no panel about {needed:?}; panels: {titles:?}"
        );
    }
}

/// The prices component mounts its ConfigMap's directory (the kubelet
/// updates it in place; a subPath it would not) where `--prices` reads, its
/// file reads as `run` reads it, and it composes with the cert-manager
/// component's volume.
#[test]
fn the_prices_component_mounts_the_file_run_reads() {
    for overlay in OVERLAYS {
        let r = render_with_components(overlay);
        let map = r.one("ConfigMap", |o| match o {
            Object::ConfigMap(c) => Some(c),
            _ => None,
        });
        assert_eq!(
            map.metadata.name.as_deref(),
            Some("deletion-cost-prices"),
            "{overlay}: one name whatever the content (the chart's too)"
        );
        let text = map
            .data
            .as_ref()
            .and_then(|d| d.get("prices.yaml"))
            .expect("prices.yaml in the ConfigMap");
        deletion_cost::input::parse_prices("prices.yaml", text)
            .unwrap_or_else(|e| panic!("{overlay}: {e}"));
        let args = r.args();
        let file = args
            .iter()
            .find_map(|a| a.strip_prefix("--prices="))
            .unwrap_or_else(|| panic!("{overlay}: no --prices in {args:?}"));
        assert!(
            args.iter().any(|a| a.starts_with("--node-removal-window=")),
            "{overlay}: {args:?}"
        );
        let c = r.container();
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "prices")
            .unwrap_or_else(|| panic!("{overlay}: no prices mount"));
        assert_eq!(
            format!("{}/prices.yaml", mount.mount_path),
            file,
            "{overlay}"
        );
        assert!(
            mount.sub_path.is_none(),
            "{overlay}: a subPath is never updated"
        );
        let volumes = r
            .deployment()
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let names: BTreeSet<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            BTreeSet::from(["prices", "hook-tls"]),
            "{overlay}: both components' volumes"
        );
        let prices = volumes
            .iter()
            .find(|v| v.name == "prices")
            .and_then(|v| v.config_map.as_ref());
        assert_eq!(
            prices.map(|c| c.name.as_str()),
            Some("deletion-cost-prices"),
            "{overlay}"
        );
    }
}

/// The scale-in webhook calls the hook's Service at the webhook's path, only
/// for replica counts going down, on the parent resources and their scale
/// subresources, and never blocks a scale-in.
#[test]
fn the_scale_in_webhook_calls_the_hook_service_only_on_scale_ins() {
    for overlay in OVERLAYS {
        let r = render_with_components(overlay);
        let config = r.one("ValidatingWebhookConfiguration", |o| match o {
            Object::ScaleWebhook(w) => Some(w),
            _ => None,
        });
        let hooks = config.webhooks.as_deref().unwrap_or_default();
        assert_eq!(hooks.len(), 1, "{overlay}");
        let w = &hooks[0];
        let svc = w
            .client_config
            .service
            .as_ref()
            .expect("a Service reference");
        let hook = r.service("deletion-cost-hook");
        assert_eq!(
            svc.name,
            hook.metadata.name.clone().unwrap_or_default(),
            "{overlay}"
        );
        assert_eq!(
            Some(svc.namespace.clone()),
            hook.metadata.namespace.clone(),
            "{overlay}"
        );
        assert_eq!(svc.path.as_deref(), Some("/v1/admit-scale-in"), "{overlay}");
        let ports: Vec<i32> = hook
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .iter()
            .map(|p| p.port)
            .collect();
        assert!(
            ports.contains(&svc.port.unwrap_or(443)),
            "{overlay}: port {:?} not in {ports:?}",
            svc.port
        );
        // that Service port leads to the webhook's own listener, not the
        // hook's: the one the NetworkPolicy opens to the API server only
        let service_port = hook
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|p| p.port == svc.port.unwrap_or(443))
            .unwrap_or_default();
        assert_eq!(
            service_port.target_port,
            Some(IntOrString::String("webhook".into())),
            "{overlay}"
        );
        let container_port = r
            .container()
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("webhook"))
            .map(|p| p.container_port);
        assert_eq!(container_port, Some(9443), "{overlay}");
        assert!(
            r.args()
                .contains(&"--scale-webhook-addr=0.0.0.0:9443".to_string()),
            "{overlay}: {:?}",
            r.args()
        );
        assert_eq!(w.failure_policy.as_deref(), Some("Ignore"), "{overlay}");
        assert_eq!(w.side_effects, "NoneOnDryRun", "{overlay}");
        // a frozen or unreachable leader holds a scale-in this long at most
        // (issue 52), and the operator answers within its budget below it
        assert_eq!(w.timeout_seconds, Some(3), "{overlay}");
        let budget = deletion_cost::hook::HookConfig::default().webhook_budget;
        assert!(
            budget.as_secs_f64() + 0.4 <= 3.0,
            "{overlay}: the default budget {budget:?} leaves the answer time to reach the API server"
        );
        let resources: Vec<String> = w
            .rules
            .iter()
            .flatten()
            .flat_map(|rule| rule.resources.clone().unwrap_or_default())
            .collect();
        for res in [
            "deployments",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
        ] {
            assert!(
                resources.iter().any(|x| x == res),
                "{overlay}: {res} not in {resources:?}"
            );
        }
        let conditions = w.match_conditions.as_deref().unwrap_or_default();
        assert!(
            conditions.iter().any(|c| c
                .expression
                .contains("object.spec.replicas < oldObject.spec.replicas")),
            "{overlay}: called only on scale-ins"
        );
        // cert-manager's CA injector reads the Certificate in the install namespace
        let inject = config
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .get("cert-manager.io/inject-ca-from")
            .cloned();
        assert_eq!(
            inject,
            Some(format!("{}/deletion-cost-hook", r.namespace())),
            "{overlay}"
        );
        // without cert-manager the operator keeps the caBundle itself: it may
        // get and update this one configuration, as its own ServiceAccount
        let name = config.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            name,
            deletion_cost::hook::webhook_ca::config_name(&r.namespace()),
            "{overlay}: the name the operator looks for"
        );
        let role = r.one("the caBundle ClusterRole", |o| match o {
            Object::ClusterRole(c) if c.metadata.name.as_deref() == Some(name.as_str()) => Some(c),
            _ => None,
        });
        let rules = role.rules.clone().unwrap_or_default();
        assert_eq!(rules.len(), 1, "{overlay}: {rules:?}");
        assert_eq!(
            rules[0].resources.clone().unwrap_or_default(),
            ["validatingwebhookconfigurations"]
        );
        assert_eq!(
            rules[0].resource_names.as_deref().unwrap_or_default(),
            std::slice::from_ref(&name)
        );
        assert_eq!(rules[0].verbs, ["get", "update"], "{overlay}");
        let binding = r.one("the caBundle ClusterRoleBinding", |o| match o {
            Object::ClusterRoleBinding(b) if b.role_ref.name == name => Some(b),
            _ => None,
        });
        let sa = r.service_account();
        let subjects = binding.subjects.clone().unwrap_or_default();
        assert_eq!(subjects.len(), 1, "{overlay}");
        assert_eq!(Some(subjects[0].name.clone()), sa.metadata.name.clone());
        assert_eq!(subjects[0].namespace, sa.metadata.namespace, "{overlay}");
    }
}

/// The NetworkPolicy component admits only ipBlocks (the API server's
/// addresses) to the scale-in webhook's port, and no rule opens every port.
#[test]
fn the_network_policy_admits_only_the_api_server_to_the_webhook() {
    for overlay in OVERLAYS {
        let r = render_with_components(overlay);
        let policy = r.one("NetworkPolicy", |o| match o {
            Object::NetworkPolicy(p) => Some(p),
            _ => None,
        });
        let rules = policy
            .spec
            .as_ref()
            .and_then(|s| s.ingress.clone())
            .unwrap_or_default();
        let port_names = |rule: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
            rule.ports
                .iter()
                .flatten()
                .filter_map(|p| match &p.port {
                    Some(IntOrString::String(name)) => Some(name.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        for rule in &rules {
            assert!(
                !port_names(rule).is_empty(),
                "{overlay}: a rule for every port: {rule:?}"
            );
        }
        let webhook: Vec<_> = rules
            .iter()
            .filter(|rule| port_names(rule).iter().any(|p| p == "webhook"))
            .collect();
        assert_eq!(webhook.len(), 1, "{overlay}: {rules:?}");
        assert_eq!(port_names(webhook[0]), ["webhook"], "{overlay}");
        let from = webhook[0].from.clone().unwrap_or_default();
        assert!(
            !from.is_empty()
                && from.iter().all(|peer| peer.ip_block.is_some()
                    && peer.pod_selector.is_none()
                    && peer.namespace_selector.is_none()),
            "{overlay}: the webhook only from ipBlocks: {from:?}"
        );
        // the address set in api-server.env, where the placeholder was
        let cidrs: Vec<_> = from
            .iter()
            .filter_map(|peer| peer.ip_block.as_ref().map(|b| b.cidr.as_str()))
            .collect();
        assert_eq!(cidrs, [API_SERVER_CIDR], "{overlay}");
    }
}

/// `kubectl kustomize DIR`'s exit status, stdout and stderr.
fn try_kustomize(dir: &Path) -> std::process::Output {
    Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl kustomize {}: {e}", dir.display()))
}

/// The networkpolicy component as shipped has no API server address: the
/// webhook's rule would admit nothing, and every webhook call would be
/// dropped without a word. So it does not render until `apiServerCIDR` is
/// set in its `api-server.env`, and the error says so; set, it renders with
/// that address in the webhook's rule and nothing else of the setting (the
/// ConfigMap kustomize reads it from stays out of the output).
#[test]
fn the_network_policy_component_renders_only_with_the_api_servers_address() {
    let scratch = tempfile::Builder::new()
        .prefix(".kustomize-")
        .tempdir_in(repo())
        .unwrap();
    let kustomization = |dir: &Path, component: &str| {
        let up = relative_to_repo(dir);
        let component = component.replace("REPO", &up);
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                 resources:\n  - {up}/deploy/overlays/cluster-wide\ncomponents:\n  - {component}\n"
            ),
        )
        .unwrap();
    };

    // as shipped
    let shipped = scratch.path().join("shipped");
    std::fs::create_dir_all(&shipped).unwrap();
    kustomization(&shipped, "REPO/deploy/components/networkpolicy");
    let out = try_kustomize(&shipped);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the networkpolicy component rendered without the API server's address:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for says in [
        "data.apiServerCIDR",
        "set apiServerCIDR in api-server.env",
        "the addresses the API server calls the webhook from",
        "docs/install.md",
    ] {
        assert!(
            stderr.contains(says),
            "the error does not say {says:?}: {stderr}"
        );
    }
    // the file it names holds the key to set, commented out
    let env =
        std::fs::read_to_string(repo().join("deploy/components/networkpolicy/api-server.env"))
            .unwrap();
    assert!(
        env.lines()
            .all(|l| l.trim().is_empty() || l.starts_with('#')),
        "api-server.env sets something as shipped:\n{env}"
    );
    assert!(env.contains("# apiServerCIDR="), "{env}");

    // set, as a user sets it
    let set = scratch.path().join("set");
    std::fs::create_dir_all(&set).unwrap();
    networkpolicy_with_api_server(&set, Some("172.18.0.2/32"));
    kustomization(&set, "networkpolicy");
    let out = try_kustomize(&set);
    assert!(
        out.status.success(),
        "with apiServerCIDR set: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(
        !kinds.contains(&"ConfigMap"),
        "the setting's ConfigMap is in the output: {kinds:?}"
    );
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .expect("a NetworkPolicy");
    let webhook_rule = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ports"][0]["port"] == "webhook")
        .expect("the webhook's rule");
    assert_eq!(
        webhook_rule["from"],
        serde_json::json!([{"ipBlock": {"cidr": "172.18.0.2/32"}}])
    );
    assert!(
        !yaml.contains("set-apiServerCIDR"),
        "the placeholder is left somewhere:\n{yaml}"
    );
}
