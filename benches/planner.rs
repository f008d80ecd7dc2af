//! Planner end to end (signals, costs, patches and the per-ReplicaSet order
//! check) over generated clusters of 10k and 100k pods, with every signal,
//! under `lexicographic` and `sum`.
//!
//! Run: `cargo bench --bench planner -- --sample-size 10 --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use deletion_cost::comparator::FeatureGates;
use deletion_cost::plan::{self, NamedPolicy, PlanOptions, PreviousValues, Snapshot};
use deletion_cost::pod::PodRecord;
use deletion_cost::policy::DeletionCostPolicySpec;
use deletion_cost::signals::{SignalSamples, UtilizationSamples};
use k8s_openapi::jiff::Timestamp;

#[path = "../tests/golden/cluster.rs"]
mod cluster;

fn policy(combine: &str, pods: usize) -> NamedPolicy {
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

fn planner(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    let opts = PlanOptions {
        gates: FeatureGates::default(),
        now: Timestamp::from_second(cluster::NOW_SECS)
            .ok()
            .map(|t| t.as_nanosecond()),
        scale_down_by: Some(10),
        assume_patches_applied: true,
        chunks: Default::default(),
    };
    for n in [10_000usize, 100_000] {
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
        let previous = PreviousValues::new();
        for combine in ["lexicographic", "sum"] {
            let p = policy(combine, n);
            group.bench_with_input(BenchmarkId::new(combine, n), &n, |b, _| {
                b.iter(|| {
                    black_box(plan::plan(
                        black_box(&p),
                        &snapshot,
                        &samples,
                        &previous,
                        &opts,
                    ))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, planner);
criterion_main!(benches);
