//! The Helm chart on the real API server, through Helm's own library
//! (`scripts/chart.sh`, which installs the Python package bundling it): a
//! cluster-wide release installed with the defaults (over a CRD an earlier
//! `kubectl apply` of another version left: refused with what to do, then
//! installed with `--force-conflicts`), upgraded with every
//! switch the cluster serves (kinds whose CRDs it lacks are named and
//! skipped), a namespace-scoped release refused beside it, uninstalled with
//! the CRD and every policy left in place; then a namespace-scoped release,
//! a cluster-wide one refused beside it, and its uninstall.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use deletion_cost::policy::DeletionCostPolicy;
use deletion_cost_testkit::eventually;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client, CustomResourceExt};
use serde_json::{json, Value};

use crate::cluster::{Env, MANAGER, POOL_LABEL, SUITE_LABEL};
use crate::install::{describe, Installer};

const RELEASE: &str = "deletion-cost";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What `scripts/chart.sh install|upgrade --json` prints.
struct Release {
    revision: u64,
    status: String,
    notes: String,
    objects: Vec<Value>,
}

/// `scripts/chart.sh ARGS...`: Ok(stdout) or Err(stderr).
async fn chart(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("bash")
        .arg(repo().join("scripts/chart.sh"))
        .args(args)
        .current_dir(repo())
        .output()
        .await
        .unwrap_or_else(|e| panic!("running scripts/chart.sh: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(stderr)
    }
}

/// install or upgrade RELEASE in `ns` with the values file `values`.
async fn release(action: &str, ns: &str, values: &Path) -> Result<Release, String> {
    release_with(action, ns, values, &[]).await
}

/// [`release`] with more flags.
async fn release_with(
    action: &str,
    ns: &str,
    values: &Path,
    more: &[&str],
) -> Result<Release, String> {
    let values = values.to_string_lossy();
    let mut args = vec![action, RELEASE, "-n", ns, "-f", &values, "--json"];
    args.extend_from_slice(more);
    let stdout = chart(&args).await?;
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{action}: not JSON ({e}): {stdout}"));
    let objects: Vec<Value> =
        serde_saphyr::from_multiple(v["manifest"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{action}: the manifest: {e}"));
    Ok(Release {
        revision: v["revision"].as_u64().unwrap_or_default(),
        status: v["status"].as_str().unwrap_or_default().to_string(),
        notes: v["notes"].as_str().unwrap_or_default().to_string(),
        objects: objects.into_iter().filter(|o| !o.is_null()).collect(),
    })
}

/// Values every release of this scenario gets: the suite's label (a later
/// run removes what an interrupted one left) and a node selector no node
/// matches, so the operator's pods are never scheduled (no kubelet runs
/// them here; unscheduled pods go at once when deleted).
fn base_values(ns: &str, scope: &str) -> Value {
    json!({
        "scope": scope,
        "commonLabels": {SUITE_LABEL: "true"},
        "nodeSelector": {POOL_LABEL: format!("{ns}-none")},
    })
}

fn write_values(dir: &Path, name: &str, values: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(values).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

async fn served(client: &Client, group: &str, version: &str, kind: &str) -> bool {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    kube::discovery::pinned_kind(client, &gvk).await.is_ok()
}

async fn apply_policy(env: &Env, ns: &str, name: &str) {
    let body = json!({
        "apiVersion": "deletioncost.dev/v1alpha1",
        "kind": "DeletionCostPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "targetRef": {"kind": "Deployment", "name": "web"},
            "signals": [{"billingClass": {"preset": "auto", "costs": {"spot": 0, "on-demand": 100}, "default": 50}}],
        },
    });
    Api::<DeletionCostPolicy>::namespaced(env.client.clone(), ns)
        .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("applying policy {ns}/{name}: {e}"));
}

async fn assert_policy(env: &Env, ns: &str, name: &str, after: &str) {
    let got = Api::<DeletionCostPolicy>::namespaced(env.client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading policy {ns}/{name}: {e}"));
    assert!(got.is_some(), "policy {ns}/{name} is gone after {after}");
}

async fn assert_crd(env: &Env, after: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = crds
        .get_opt("deletioncostpolicies.deletioncost.dev")
        .await
        .unwrap_or_else(|e| panic!("reading the CRD: {e}"));
    assert!(
        crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "the CRD is gone or going after {after}"
    );
}

/// Every object of a release is on the server.
async fn assert_present(install: &Installer, r: &Release, what: &str) {
    let mut missing = Vec::new();
    for obj in &r.objects {
        if !install.exists(obj).await {
            missing.push(describe(obj));
        }
    }
    assert!(missing.is_empty(), "{what}: not on the server: {missing:?}");
}

fn kinds(r: &Release) -> BTreeSet<String> {
    r.objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn deployment_args(d: &Deployment) -> Vec<String> {
    d.spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

/// Removes what the scenario's releases may have left, whatever happened:
/// the releases (uninstalled if they exist) and their cluster-scoped objects.
async fn clean_up(env: &Env, namespaces: &[&str]) {
    for ns in namespaces {
        let _ = chart(&["uninstall", RELEASE, "-n", ns]).await;
    }
    let lp = ListParams::default().labels(&format!("{SUITE_LABEL}=true"));
    remove_leftovers(&env.client, &lp).await;
}

/// Deletes the cluster-scoped objects of the chart's releases that `lp`
/// selects (ClusterRoles and their bindings, flow-control objects).
pub async fn remove_leftovers(client: &Client, lp: &ListParams) {
    let lp = ListParams {
        label_selector: Some(format!(
            "{},app.kubernetes.io/managed-by=Helm,app.kubernetes.io/name=deletion-cost",
            lp.label_selector.clone().unwrap_or_default()
        )),
        ..lp.clone()
    };
    for (group, version, kind) in [
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema"),
        (
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
        ),
    ] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(list) = api.list(&lp).await {
            for o in list {
                let name = o.metadata.name.unwrap_or_default();
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
}

/// Leaves the CRD as an earlier `kubectl apply -f` (client-side) of another
/// version of the operator would: its `.spec.versions` set by the field
/// manager `kubectl-client-side-apply`, with another schema.
async fn crd_applied_by_kubectl_before(dir: &Path) {
    let mut crd = serde_json::to_value(DeletionCostPolicy::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] =
        json!("DeletionCostPolicy, as an earlier version of the operator described it");
    let path = write_values(dir, "crd-before.json", &crd);
    let out = tokio::process::Command::new("kubectl")
        .args(["apply", "-f"])
        .arg(&path)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running kubectl apply: {e}"));
    assert!(
        out.status.success(),
        "kubectl apply of the earlier CRD: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The CRD's schema description and the field managers that own its `.spec.versions`.
async fn crd_versions_owners(env: &Env) -> (Value, Vec<String>) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = crds
        .get("deletioncostpolicies.deletioncost.dev")
        .await
        .unwrap_or_else(|e| panic!("reading the CRD: {e}"));
    let owners = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:versions").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    let description = serde_json::to_value(&crd.spec.versions[0].schema)
        .unwrap_or_default()
        .pointer("/openAPIV3Schema/description")
        .cloned()
        .unwrap_or(Value::Null);
    (description, owners)
}

/// The scenario (see the module's doc).
pub async fn helm_chart(env: &'static Env) {
    env.scenario("helm", |ns| async move {
        let other = env.namespace("helm2").await;
        let outcome = std::panic::AssertUnwindSafe(steps(env, &ns, &other))
            .catch_unwind()
            .await;
        clean_up(env, &[&ns, &other]).await;
        env.purge_namespace(&other).await;
        if let Err(p) = outcome {
            std::panic::resume_unwind(p);
        }
    })
    .await;
}

async fn steps(env: &'static Env, ns: &str, other: &str) {
    let install = Installer::new(env).await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let started = std::time::Instant::now();

    // 1. cluster-wide, the chart's defaults, over a CRD an earlier `kubectl
    // apply` of another version left: Helm 4's server-side apply of the
    // chart's CRD conflicts; the refusal says to add --force-conflicts, which
    // installs the chart's CRD over it
    crd_applied_by_kubectl_before(dir.path()).await;
    let defaults = write_values(dir.path(), "defaults.json", &base_values(ns, "cluster"));
    let refused = release("install", ns, &defaults)
        .await
        .err()
        .unwrap_or_else(|| panic!("installed over a CRD another field manager set"));
    assert!(
        refused.contains("kubectl-client-side-apply")
            && refused.contains(&format!(
                "scripts/chart.sh install {RELEASE} -n {ns} ... --force-conflicts"
            )),
        "refused without saying what to do: {refused}"
    );
    let r1 = release_with("install", ns, &defaults, &["--force-conflicts"])
        .await
        .unwrap_or_else(|e| panic!("install with the defaults and --force-conflicts refused: {e}"));
    let want = serde_json::to_value(DeletionCostPolicy::crd()).unwrap()["spec"]["versions"][0]
        ["schema"]["openAPIV3Schema"]["description"]
        .clone();
    let (description, owners) = crd_versions_owners(env).await;
    assert_eq!(
        description, want,
        "the chart's CRD was not installed over the earlier one"
    );
    assert_eq!(owners, ["helm"], "the CRD's versions are not Helm's alone");
    assert_eq!((r1.revision, r1.status.as_str()), (1, "deployed"));
    assert!(
        r1.notes.contains("deletioncostpolicies") && r1.notes.contains(ns),
        "the release's notes: {}",
        r1.notes
    );
    assert_present(&install, &r1, "install").await;
    let want: BTreeSet<String> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds(&r1), want, "the kinds a default install makes");
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), ns);
    let d = deployments.get("deletion-cost").await.unwrap();
    let managers: Vec<_> = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("helm".to_string(), "Apply".to_string())),
        "Helm 4 applies server-side as the field manager `helm`: {managers:?}"
    );
    eprintln!(
        "helm: install: revision 1, {} objects on the server ({:.1} s)",
        r1.objects.len(),
        started.elapsed().as_secs_f64()
    );
    apply_policy(env, ns, "web").await;
    apply_policy(env, other, "web").await;

    // 2. upgrade: every switch the cluster serves, settings away from the defaults
    let mut skipped = Vec::new();
    let mut upgraded = base_values(ns, "cluster");
    for (key, on) in [
        ("networkPolicy", true),
        ("flowControl", true),
        ("prices", true),
        ("podDisruptionBudget", true),
        (
            "serviceMonitor",
            served(&env.client, "monitoring.coreos.com", "v1", "ServiceMonitor").await,
        ),
        (
            "prometheusRule",
            served(&env.client, "monitoring.coreos.com", "v1", "PrometheusRule").await,
        ),
        (
            "certManager",
            served(&env.client, "cert-manager.io", "v1", "Certificate").await,
        ),
        // without cert-manager too: the operator fills the caBundle
        ("scaleWebhook", true),
    ] {
        if on {
            upgraded[key] = json!({"enabled": true});
        } else {
            skipped.push(key);
        }
    }
    // the webhook's NetworkPolicy rule needs the API server's addresses
    upgraded["networkPolicy"]["apiServerCIDRs"] = json!(["127.0.0.1/32"]);
    upgraded["replicaCount"] = json!(3);
    upgraded["podDisruptionBudget"]["minAvailable"] = json!(2);
    upgraded["operator"] = json!({"qps": 7.5, "logFormat": "text", "shutdownGrace": 25});
    upgraded["leaderElection"] = json!({"leaseDuration": 20, "renewDeadline": 12.5});
    upgraded["hook"] = json!({"tokenAudiences": ["deletion-cost"]});
    upgraded["podAntiAffinity"] = json!("required");
    let every = write_values(dir.path(), "every-switch.json", &upgraded);
    let r2 = release("upgrade", ns, &every)
        .await
        .unwrap_or_else(|e| panic!("upgrade with every switch refused: {e}"));
    assert_eq!((r2.revision, r2.status.as_str()), (2, "deployed"));
    assert_present(&install, &r2, "upgrade").await;
    for kind in [
        "NetworkPolicy",
        "FlowSchema",
        "PriorityLevelConfiguration",
        "ValidatingWebhookConfiguration",
        "ConfigMap",
    ] {
        assert!(kinds(&r2).contains(kind), "no {kind} after the upgrade");
    }
    let webhook = r2
        .objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .cloned()
        .unwrap_or_default();
    let cert_manager = upgraded["certManager"]["enabled"] == json!(true);
    assert_eq!(
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_string(),
        cert_manager,
        "the CA injector's annotation only with cert-manager: {webhook}"
    );
    let d = deployments.get("deletion-cost").await.unwrap();
    assert_eq!(d.spec.replicas, Some(3));
    let args = deployment_args(&d);
    for flag in [
        "--qps=7.5",
        "--log-format=text",
        "--lease-duration=20",
        "--renew-deadline=12.5",
        "--shutdown-grace=25",
        "--hook-token-audience=deletion-cost",
        // the operator keeps the webhook's caBundle (with cert-manager, it does nothing)
        "--scale-webhook-ca",
        "--scale-webhook-addr=0.0.0.0:9443",
        "--prices=/etc/deletion-cost/prices/prices.yaml",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} not in {args:?}");
    }
    eprintln!(
        "helm: upgrade: revision 2, {} objects on the server ({}); not served by this cluster, skipped: {skipped:?} ({:.1} s)",
        r2.objects.len(),
        kinds(&r2).into_iter().collect::<Vec<_>>().join(", "),
        started.elapsed().as_secs_f64()
    );

    // 3. a namespace-scoped release beside the cluster-wide one: refused
    let scoped = write_values(dir.path(), "scoped.json", &base_values(other, "namespace"));
    let refused = release("install", other, &scoped)
        .await
        .err()
        .unwrap_or_else(|| {
            panic!("a namespace-scoped release beside a cluster-wide one was installed")
        });
    assert!(
        refused.contains("scope=namespace refused") && refused.contains(ns),
        "refused, but not for the documented reason: {refused}"
    );
    let roles: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        other,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
        )),
    );
    assert!(
        roles.get_opt("deletion-cost").await.unwrap().is_none(),
        "the refused release left a Role"
    );

    // 4. uninstall: the release's objects go, the CRD and every policy stay
    chart(&["uninstall", RELEASE, "-n", ns])
        .await
        .unwrap_or_else(|e| panic!("uninstall: {e}"));
    for obj in &r2.objects {
        eventually(
            Duration::from_secs(30),
            &format!("{} is removed by the uninstall", describe(obj)),
            || async { !install.exists(obj).await },
        )
        .await;
    }
    assert_crd(env, "helm uninstall").await;
    assert_policy(env, ns, "web", "helm uninstall").await;
    assert_policy(env, other, "web", "helm uninstall").await;
    eprintln!(
        "helm: uninstall: {} objects removed; the CRD and both policies stay ({:.1} s)",
        r2.objects.len(),
        started.elapsed().as_secs_f64()
    );

    // 5. namespace-scoped release, then a cluster-wide one refused beside it
    let r3 = release("install", other, &scoped)
        .await
        .unwrap_or_else(|e| panic!("the namespace-scoped install refused: {e}"));
    assert_present(&install, &r3, "namespace-scoped install").await;
    let cluster_reads = format!("deletion-cost-cluster-reads.{other}");
    assert!(
        r3.objects
            .iter()
            .any(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == cluster_reads.as_str()),
        "no ClusterRole {cluster_reads}"
    );
    assert!(
        !r3.objects
            .iter()
            .any(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "deletion-cost"),
        "a namespace-scoped release made the cluster-wide ClusterRole"
    );
    let refused = release("install", ns, &defaults)
        .await
        .err()
        .unwrap_or_else(|| {
            panic!("a cluster-wide release beside a namespace-scoped one was installed")
        });
    assert!(
        refused.contains("scope=cluster refused") && refused.contains(&cluster_reads),
        "refused, but not for the documented reason: {refused}"
    );
    chart(&["uninstall", RELEASE, "-n", other])
        .await
        .unwrap_or_else(|e| panic!("uninstall: {e}"));
    for obj in &r3.objects {
        eventually(
            Duration::from_secs(30),
            &format!("{} is removed by the uninstall", describe(obj)),
            || async { !install.exists(obj).await },
        )
        .await;
    }
    assert_crd(env, "the namespace-scoped uninstall").await;
    assert_policy(env, other, "web", "the namespace-scoped uninstall").await;
    eprintln!(
        "helm: namespace-scoped: {} objects installed and removed, cluster-wide refused beside it ({:.1} s)",
        r3.objects.len(),
        started.elapsed().as_secs_f64()
    );
}
