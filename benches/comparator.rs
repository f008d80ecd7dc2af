//! The embedded comparator at 1k, 10k and 100k pods, three costs measured
//! apart: (a) key precomputation (`PodKey::from_pod`, `with_now`,
//! `assign_ranks`), (b) `rank_pods` (sort plus strict-weak-order check) on
//! ready keys, (c) parsing a `kubectl get pods -o json` PodList of that size.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use deletion_cost::comparator::key::go_time;
use deletion_cost::comparator::{assign_ranks, rank_pods, Comparator, FeatureGates, PodKey};
use deletion_cost::input::{parse_objects, pods_from};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[path = "support/gen.rs"]
mod gen;

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

fn comparator() -> Comparator {
    Comparator {
        gates: FeatureGates::default(),
        now: go_time(Some(&Time(gen::now()))),
    }
}

fn keys(cmp: &Comparator, pods: &[Pod]) -> Vec<PodKey> {
    let mut keys: Vec<PodKey> = pods
        .iter()
        .map(|p| PodKey::from_pod(p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, pods);
    keys
}

fn bench(c: &mut Criterion) {
    let cmp = comparator();
    for n in SIZES {
        let pods = gen::pods(n, 42);
        let ready_keys = keys(&cmp, &pods);
        let list =
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": &pods}).to_string();

        let mut g = c.benchmark_group("comparator");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("keys", n), &pods, |b, pods| {
            b.iter(|| keys(&cmp, black_box(pods)))
        });
        g.bench_with_input(BenchmarkId::new("rank_pods", n), &ready_keys, |b, k| {
            b.iter(|| rank_pods(&cmp, black_box(k)))
        });
        g.bench_with_input(BenchmarkId::new("parse_json", n), &list, |b, text| {
            b.iter(|| {
                let objects = parse_objects("bench.json", black_box(text)).unwrap();
                pods_from(&objects).unwrap()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
