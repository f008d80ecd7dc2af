//! The ReplicaSet controller's scale-in, played by a test: the pods it
//! deletes are those the embedded comparator puts first over the costs the
//! fake's pods carry at that moment.

use deletion_cost::comparator::{
    assign_ranks, rank_pods, Comparator, FeatureGates, OrderedPods, RankKey,
};
use deletion_cost_testkit::fake_api::FakeApi;
use k8s_openapi::api::core::v1::Pod;

/// Deletes from namespace `ns` of `fake` the pods the controller deletes to
/// leave `replicas` (one ReplicaSet in the namespace), and names them.
pub fn delete_victims(fake: &FakeApi, ns: &str, replicas: usize) -> Vec<String> {
    let live: Vec<Pod> = fake
        .list_json("Pod", Some(ns))
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: Some(k8s_openapi::jiff::Timestamp::now().as_nanosecond()),
    };
    let mut keys: Vec<RankKey> = live
        .iter()
        .map(|p| RankKey::from_pod(p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, &live);
    let ranking = rank_pods(&cmp, &keys);
    let ordered = OrderedPods { keys, ranking };
    let doomed: Vec<String> = ordered
        .in_order()
        .take(live.len().saturating_sub(replicas))
        .map(|k| k.name.to_string())
        .collect();
    for name in &doomed {
        fake.delete_json("Pod", ns, name).unwrap();
    }
    doomed
}
