//! The generated cluster (`tests/golden/cluster.rs`) as the planner takes
//! it: its policy, snapshot and utilisation samples, for the benches that
//! plan it (`planner`) or show its plan (`page`).

use deletion_cost::comparator::FeatureGates;
use deletion_cost::plan::{NamedPolicy, PlanOptions, Snapshot};
use deletion_cost::pod::PodRecord;
use deletion_cost::policy::DeletionCostPolicySpec;
use deletion_cost::signals::{SignalSamples, UtilizationSamples};
use k8s_openapi::jiff::Timestamp;

#[path = "../../tests/golden/cluster.rs"]
pub mod cluster;

/// The cluster's policy under `combine`, for a cluster of `pods`.
pub fn policy(combine: &str, pods: usize) -> NamedPolicy {
    let yaml = cluster::policy_yaml(combine, pods / 3);
    let spec: DeletionCostPolicySpec = match serde_saphyr::from_str(&yaml) {
        Ok(s) => s,
        Err(e) => panic!("bench policy does not parse: {e}"),
    };
    match NamedPolicy::validate(cluster::POLICY, cluster::NAMESPACE, &spec) {
        Ok(p) => p,
        Err(e) => panic!("bench policy is invalid: {e}"),
    }
}

/// A cluster of `n` pods: its snapshot and its pods' utilisation.
pub fn cluster(n: usize) -> (Snapshot, SignalSamples) {
    let gen = cluster::generate(n, 42);
    let mut samples = SignalSamples::default();
    samples.utilization.insert(
        1,
        UtilizationSamples::from_series(
            gen.utilization.into_iter().map(|(p, v)| (p, v, None)),
            None,
            None,
        ),
    );
    let snapshot = Snapshot {
        pods: gen
            .pods
            .into_iter()
            .map(|p| std::sync::Arc::new(PodRecord::from(p)))
            .collect(),
        nodes: gen.nodes.into_iter().map(std::sync::Arc::new).collect(),
        replica_sets: gen.replica_sets,
        deployments: vec![],
        ignored: vec![],
    };
    (snapshot, samples)
}

/// Plan options at the cluster's `now`, patches assumed applied, marking
/// the victims of a scale-down by `scale_down_by`.
pub fn options(scale_down_by: usize) -> PlanOptions {
    PlanOptions {
        gates: FeatureGates::default(),
        now: Timestamp::from_second(cluster::NOW_SECS)
            .ok()
            .map(|t| t.as_nanosecond()),
        scale_down_by: Some(scale_down_by),
        assume_patches_applied: true,
        chunks: Default::default(),
    }
}
