//! Against a real cluster, only when `KUBECONFIG` is set: the CRD passes the
//! API server's own validation (server-side dry run), and the comparator
//! orders every ReplicaSet's live pods without error.

use std::collections::BTreeMap;

use deletion_cost::comparator::{is_pod_active, order_pods, Comparator, FeatureGates};
use deletion_cost::policy::DeletionCostPolicy;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, CustomResourceExt};

async fn client() -> Option<Client> {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set (these tests need a real cluster)");
        return None;
    }
    deletion_cost::signals::prometheus::install_crypto_provider();
    Some(
        Client::try_default()
            .await
            .expect("KUBECONFIG is set but no client could be built"),
    )
}

#[tokio::test]
async fn crd_passes_server_side_validation() {
    let Some(client) = client().await else { return };
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&pp, &DeletionCostPolicy::crd()).await {
        Ok(_) => {}
        // already installed: the schema was accepted once
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("the API server rejected the CRD: {e}"),
    }
}

#[tokio::test]
async fn live_replica_sets_order_without_error() {
    let Some(client) = client().await else { return };
    let pods: Vec<Pod> = Api::<Pod>::all(client)
        .list(&ListParams::default())
        .await
        .expect("listing pods")
        .items;
    let mut groups: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in pods.iter().filter(|p| is_pod_active(p)) {
        if let Some(o) = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        {
            if o.kind == "ReplicaSet" {
                groups.entry(o.uid.clone()).or_default().push(p);
            }
        }
    }
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: Some(k8s_openapi::jiff::Timestamp::now().as_nanosecond()),
    };
    for members in groups.values() {
        let ordered = order_pods(&cmp, members.iter().copied(), members.iter().copied());
        assert_eq!(ordered.ranking.order.len(), members.len());
    }
    eprintln!("ordered {} ReplicaSets from the live cluster", groups.len());
}
