//! The minimal correction of a scale-in (`plan::correction::correct`) over
//! one ReplicaSet of 10,000 pods whose intended costs were reshuffled since
//! the live ones were written: the scale-in by k = 3 (the webhook's
//! typical case) and by k = 100, and the case where the live costs already
//! put the right pods first. Keys are built outside the timing (the planner
//! has them at hand when it corrects).
//!
//! Run: `cargo bench --bench correction -- --sample-size 20 --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use deletion_cost::comparator::key::go_time;
use deletion_cost::comparator::{assign_ranks, Comparator, FeatureGates, RankKey};
use deletion_cost::plan::correction::{correct, PodCosts};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[path = "support/gen.rs"]
mod gen;

const PODS: usize = 10_000;

fn comparator() -> Comparator {
    Comparator {
        gates: FeatureGates::default(),
        now: go_time(Some(&Time(gen::now()))),
    }
}

fn keys<'a>(cmp: &Comparator, pods: &'a [Pod]) -> Vec<RankKey<'a>> {
    let mut keys: Vec<RankKey> = pods
        .iter()
        .map(|p| RankKey::from_pod(p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, pods);
    keys
}

/// What the policy intends: a deterministic shuffle of the live costs
/// (utilisation reshuffled across the workload), all of them the policy's.
fn reshuffled(keys: &[RankKey]) -> Vec<PodCosts> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| PodCosts {
            intended: (k.cost.value.wrapping_mul(7919) ^ (i as i32).wrapping_mul(104_729)) % 1000,
            writable: true,
            in_flight: None,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let cmp = comparator();
    let pods = gen::pods(PODS, 42);
    let keys = keys(&cmp, &pods);
    let shuffled = reshuffled(&keys);
    let same: Vec<PodCosts> = keys
        .iter()
        .map(|k| PodCosts {
            intended: k.cost.value,
            writable: true,
            in_flight: None,
        })
        .collect();
    let mut g = c.benchmark_group("correction");
    for k in [3usize, 100] {
        g.bench_with_input(BenchmarkId::new("reshuffled", k), &k, |b, &k| {
            b.iter(|| black_box(correct(&cmp, &keys, &shuffled, k)).writes.len())
        });
    }
    g.bench_function("already_right/3", |b| {
        b.iter(|| black_box(correct(&cmp, &keys, &same, 3)).writes.len())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
