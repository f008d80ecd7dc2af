//! The install manifests on the real API server: render `deploy/` with the
//! kustomize built into kubectl, dry-run or apply every object, delete an
//! install as `kubectl delete -k` would.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

use crate::cluster::{Env, SUITE_LABEL};

const COMPONENTS: [&str; 6] = [
    "alerts",
    "cert-manager",
    "flowcontrol",
    "networkpolicy",
    "prices",
    "servicemonitor",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `Kind namespace/name` of a rendered object.
pub fn describe(obj: &Value) -> String {
    format!(
        "{} {}/{}",
        obj["kind"].as_str().unwrap_or_default(),
        obj["metadata"]["namespace"].as_str().unwrap_or("-"),
        obj["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// A copy of the networkpolicy component in `dir` with the API server's
/// address set, as a user sets it (it does not render without one);
/// returns its path relative to `dir`.
fn networkpolicy_copy(dir: &Path) -> String {
    let src = repo().join("deploy/components/networkpolicy");
    let copy = dir.join("networkpolicy");
    std::fs::create_dir_all(&copy).unwrap_or_else(|e| panic!("{e}"));
    for entry in std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        if path.file_name().is_some_and(|n| n == "api-server.env") {
            text.push_str("apiServerCIDR=127.0.0.1/32\n");
        }
        let name = path.file_name().unwrap_or_default().to_owned();
        std::fs::write(copy.join(name), text).unwrap_or_else(|e| panic!("{e}"));
    }
    "networkpolicy".into()
}

/// Renders, applies and deletes install manifests.
pub struct Installer {
    client: Client,
    scratch: tempfile::TempDir,
}

impl Installer {
    /// An installer with its scratch directory inside the repository
    /// (kustomize takes only relative paths to other directories).
    pub async fn new(env: &Env) -> Installer {
        let scratch = tempfile::Builder::new()
            .prefix(".kustomize-")
            .tempdir_in(repo())
            .unwrap_or_else(|e| panic!("scratch dir: {e}"));
        Installer {
            client: env.client.clone(),
            scratch,
        }
    }

    fn up(&self, dir: &Path) -> String {
        let rest = dir
            .strip_prefix(repo())
            .unwrap_or_else(|_| panic!("{} is not inside the repository", dir.display()));
        vec![".."; rest.components().count()].join("/")
    }

    /// Every object `kubectl kustomize DIR` renders (DIR relative to the repo).
    pub fn render_dir(&self, dir: &str) -> Vec<Value> {
        render(&repo().join(dir))
    }

    /// An overlay with every component added, as a user's overlay would.
    pub fn render_with_components(&self, overlay: &str) -> Vec<Value> {
        let dir = self.scratch.path().join(format!("{overlay}-components"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let up = self.up(&dir);
        let namespace = render(&repo().join("deploy/overlays").join(overlay))
            .iter()
            .find(|o| o["kind"] == "ServiceAccount")
            .and_then(|o| o["metadata"]["namespace"].as_str().map(str::to_string))
            .unwrap_or_default();
        let components: String = COMPONENTS
            .iter()
            .map(|&c| {
                if c == "networkpolicy" {
                    format!("  - {}\n", networkpolicy_copy(&dir))
                } else {
                    format!("  - {up}/deploy/components/{c}\n")
                }
            })
            .collect();
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {namespace}\n\
                 resources:\n  - {up}/deploy/overlays/{overlay}\ncomponents:\n{components}"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        render(&dir)
    }

    /// The namespace-scoped overlay for `namespace`, set in its one place
    /// (the kustomization's `namespace:`), as a user would.
    pub fn namespace_install(&self, namespace: &str) -> Vec<Value> {
        let src = repo().join("deploy/overlays/namespace-scoped");
        let dir = self.scratch.path().join(format!("install-{namespace}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let up = self.up(&dir);
        for entry in std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let mut text = std::fs::read_to_string(&path).unwrap_or_default();
            if path.file_name().is_some_and(|n| n == "kustomization.yaml") {
                text = text
                    .replace(
                        "\nnamespace: my-app\n",
                        &format!("\nnamespace: {namespace}\n"),
                    )
                    .replace("../../base", &format!("{up}/deploy/base"));
            }
            let name = path.file_name().unwrap_or_default().to_owned();
            std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
        }
        render(&dir)
            .into_iter()
            .map(|mut o| {
                o["metadata"]["labels"][SUITE_LABEL] = "true".into();
                o
            })
            .collect()
    }

    async fn api(&self, obj: &Value) -> Result<(Api<DynamicObject>, bool), String> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = obj["kind"].as_str().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps): (ApiResource, _) = discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|_| format!("{kind}.{group}"))?;
        Ok(match (caps.scope, obj["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(ns)) => {
                (Api::namespaced_with(self.client.clone(), ns, &ar), true)
            }
            _ => (Api::all_with(self.client.clone(), &ar), false),
        })
    }

    /// Server-side dry run of `obj`, its namespace moved to `ns` (dry runs
    /// need an existing namespace). `Err(kind)` when the cluster does not
    /// serve the kind (a CRD it lacks).
    pub async fn dry_run(&self, obj: &Value, ns: &str) -> Result<(), String> {
        let mut obj = obj.clone();
        if obj["metadata"]["namespace"].is_string() {
            obj["metadata"]["namespace"] = ns.into();
        }
        let (api, _) = self.api(&obj).await?;
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let pp = PatchParams::apply("deletion-cost-e2e").dry_run().force();
        api.patch(&name, &pp, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("the API server refused {}: {e}", describe(&obj)));
        Ok(())
    }

    /// Applies `obj` for real (server-side apply).
    pub async fn apply(&self, obj: &Value) {
        let (api, _) = self
            .api(obj)
            .await
            .unwrap_or_else(|k| panic!("{k} is not served by this cluster"));
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        api.patch(
            name,
            &PatchParams::apply("deletion-cost-e2e").force(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {}: {e}", describe(obj)));
    }

    /// Deletes `obj` if it exists.
    pub async fn delete(&self, obj: &Value) {
        if let Ok((api, _)) = self.api(obj).await {
            let _ = api
                .delete(
                    obj["metadata"]["name"].as_str().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        }
    }

    /// Whether `obj` exists (and is not being deleted).
    pub async fn exists(&self, obj: &Value) -> bool {
        let Ok((api, _)) = self.api(obj).await else {
            return false;
        };
        api.get_opt(obj["metadata"]["name"].as_str().unwrap_or_default())
            .await
            .ok()
            .flatten()
            .is_some_and(|o| o.metadata.deletion_timestamp.is_none())
    }
}

/// Every object `kubectl kustomize DIR` renders.
pub fn render(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}
