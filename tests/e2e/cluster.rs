//! The cluster under test: an admin client, the suite's own objects (the
//! operator's namespace, ServiceAccount and RBAC, the CRD when the cluster
//! had none), one namespace and node pool per scenario, and the teardown.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use deletion_cost::policy::DeletionCostPolicy;
use deletion_cost_testkit::eventually;
use futures::FutureExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use tokio::sync::{Mutex, OnceCell};

use crate::kubelet::Kubelet;
use crate::proxy::Recorder;

/// Label on everything the suite creates; a later run removes leftovers by it.
pub const SUITE_LABEL: &str = "e2e.deletioncost.dev/suite";
/// Node label a scenario's Deployments select, so pods land on its nodes only.
pub const POOL_LABEL: &str = "e2e.deletioncost.dev/pool";
/// Field manager of the suite's own writes.
pub const MANAGER: &str = "deletion-cost-e2e";

/// What the whole run shares.
pub struct Env {
    /// cluster-admin client from KUBECONFIG.
    pub client: Client,
    /// Its configuration (the operator's proxy reuses the URL and CA).
    pub config: kube::Config,
    /// Short id of this run, in every name the suite makes.
    pub run: String,
    /// Namespace of the operator's ServiceAccount and Lease.
    pub system_ns: String,
    /// The operator's ServiceAccount token (TokenRequest API).
    pub token: String,
    /// Plays the kubelet for the scenarios' nodes.
    pub kubelet: Kubelet,
    /// Every request an operator made, across scenarios.
    pub recorder: Recorder,
    /// The cluster-scoped RBAC objects made from the overlay: (kind, name).
    cluster_objects: Vec<(String, String)>,
    installed_crd: bool,
    namespaces: Mutex<Vec<String>>,
}

static ENV: OnceCell<Result<Env, String>> = OnceCell::const_new();

/// The run's environment, set up on first use.
pub async fn env() -> Result<&'static Env, String> {
    ENV.get_or_init(|| async { Env::setup().await.map_err(|e| format!("e2e setup: {e}")) })
        .await
        .as_ref()
        .map_err(Clone::clone)
}

/// Removes everything the run created (also after failures).
pub async fn teardown() {
    if let Some(Ok(env)) = ENV.get() {
        env.teardown().await;
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Env {
    async fn setup() -> Result<Env, BoxError> {
        deletion_cost::prometheus::install_crypto_provider();
        let config = kube::Config::infer().await?;
        let client = Client::try_from(config.clone())?;
        let run = format!(
            "e2e{:06x}",
            std::process::id() ^ (now_nanos() as u32) & 0xff_ffff
        );
        remove_leftovers(&client).await?;

        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let crd = DeletionCostPolicy::crd();
        let crd_name = crd.name_any();
        // a CRD still terminating (an earlier run's teardown) refuses creates
        wait_crd_settled(&crds, &crd_name).await;
        let installed_crd = crds.get_opt(&crd_name).await?.is_none();
        if !installed_crd {
            // one left by an earlier build (a kept helm install, a manual
            // apply): the scenarios test this build's schema
            crds.patch(
                &crd_name,
                &PatchParams::apply("deletion-cost-e2e").force(),
                &Patch::Apply(&crd),
            )
            .await?;
        }
        if installed_crd {
            let mut crd = crd;
            crd.labels_mut().insert(SUITE_LABEL.into(), "true".into());
            crds.create(&PostParams::default(), &crd).await?;
            eventually(
                Duration::from_secs(30),
                "the CRD is Established",
                || async {
                    crds.get(&crd_name).await.ok().is_some_and(|c| {
                        c.status.and_then(|s| s.conditions).is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                    })
                },
            )
            .await;
        }

        let system_ns = format!("{run}-system");
        create_namespace(&client, &system_ns).await?;
        let cluster_objects = crate::rbac::install(&client, &run, &system_ns).await?;
        let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &system_ns);
        let token = sa
            .create_token_request(
                "deletion-cost",
                &PostParams::default(),
                &TokenRequest {
                    spec: Some(TokenRequestSpec {
                        expiration_seconds: Some(7200),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await?
            .status
            .and_then(|s| s.token)
            .ok_or("the TokenRequest answer has no token")?;
        let kubelet = Kubelet::start(client.clone());
        Ok(Env {
            client,
            config,
            run,
            system_ns: system_ns.clone(),
            token,
            kubelet,
            recorder: Recorder::default(),
            cluster_objects,
            installed_crd,
            namespaces: Mutex::new(vec![system_ns]),
        })
    }

    /// A fresh namespace for a scenario.
    pub async fn namespace(&self, scenario: &str) -> String {
        let ns = format!("{}-{scenario}", self.run);
        create_namespace(&self.client, &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));
        self.namespaces.lock().await.push(ns.clone());
        // pods are refused until the namespace's default ServiceAccount exists
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        eventually(
            Duration::from_secs(30),
            &format!("{ns} has its default ServiceAccount"),
            || async { accounts.get_opt("default").await.ok().flatten().is_some() },
        )
        .await;
        ns
    }

    /// Runs a scenario in its own namespace and removes the namespace and
    /// its nodes afterwards, whether it passed or not.
    pub async fn scenario<F, Fut>(&'static self, name: &str, body: F)
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = ()>,
    {
        let ns = self.namespace(name).await;
        let outcome = std::panic::AssertUnwindSafe(body(ns.clone()))
            .catch_unwind()
            .await;
        self.purge_namespace(&ns).await;
        self.kubelet.remove_pool(&ns).await;
        if let Err(p) = outcome {
            std::panic::resume_unwind(p);
        }
    }

    /// Deletes a namespace without waiting on things no kubelet finishes:
    /// policies lose their finalizer, pods go at once.
    pub async fn purge_namespace(&self, ns: &str) {
        purge_namespace(&self.client, ns).await;
        self.namespaces.lock().await.retain(|n| n != ns);
    }

    async fn teardown(&self) {
        let namespaces = self.namespaces.lock().await.clone();
        for ns in &namespaces {
            purge_namespace(&self.client, ns).await;
        }
        self.kubelet.stop().await;
        crate::rbac::uninstall(&self.client, &self.cluster_objects).await;
        if self.installed_crd {
            let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
            let name = DeletionCostPolicy::crd().name_any();
            let _ = crds.delete(&name, &DeleteParams::default()).await;
            // gone before the next run starts (its policies go first)
            wait_crd_settled(&crds, &name).await;
        }
    }
}

async fn create_namespace(client: &Client, name: &str) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {SUITE_LABEL: "true"}}
    }))
    .map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &ns).await.map(|_| ())
}

async fn purge_namespace(client: &Client, ns: &str) {
    // Policies first, and gone before the namespace is: an operator of a
    // later scenario watches every namespace and would put its finalizer
    // back on a policy left in a terminating one.
    let policies: Api<DeletionCostPolicy> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = policies.list(&ListParams::default()).await {
        for p in list {
            let _ = policies
                .patch(
                    &p.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = policies
                .delete(&p.name_any(), &DeleteParams::default())
                .await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while policies
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| !l.items.is_empty())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &DeleteParams::default()).await;
}

/// Removes what an interrupted earlier run left (it carries the suite label).
async fn remove_leftovers(client: &Client) -> Result<(), kube::Error> {
    let lp = ListParams::default().labels(&format!("{SUITE_LABEL}=true"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces.list(&lp).await? {
        purge_namespace(client, &ns.name_any()).await;
    }
    crate::kubelet::remove_nodes(client, &lp).await;
    // a CRD this suite installed and an interrupted run left behind
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds.list(&lp).await? {
        let _ = crds.delete(&crd.name_any(), &DeleteParams::default()).await;
        wait_crd_settled(&crds, &crd.name_any()).await;
    }
    // a scale-in webhook an interrupted run left registered: the server
    // would go on calling its dead URL
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for w in webhooks.list(&lp).await? {
        let _ = webhooks
            .delete(&w.name_any(), &DeleteParams::default())
            .await;
    }
    crate::rbac::remove_leftovers(client, &lp).await;
    crate::helm::remove_leftovers(client, &lp).await;
    Ok(())
}

/// Waits (up to 2 minutes) until the CRD is absent or not terminating.
async fn wait_crd_settled(crds: &Api<CustomResourceDefinition>, name: &str) {
    eventually(
        Duration::from_secs(120),
        &format!("CRD {name} is not terminating"),
        || async {
            crds.get_opt(name)
                .await
                .ok()
                .is_some_and(|c| c.is_none_or(|c| c.metadata.deletion_timestamp.is_none()))
        },
    )
    .await;
}

/// Nanoseconds since the epoch (run ids, transition times).
pub fn now_nanos() -> i128 {
    k8s_openapi::jiff::Timestamp::now().as_nanosecond()
}

/// RFC 3339 now, as the API's timestamps.
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Labels as a BTreeMap from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
