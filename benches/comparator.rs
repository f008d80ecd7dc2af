//! The embedded comparator at 1k, 10k and 100k pods, costs measured apart:
//! (a) key precomputation (`RankKey::from_pod`, `with_now`, `assign_ranks`),
//! (b) `rank_pods` (sort plus strict-weak-order check) on ready keys, and
//! `keys_and_sort`: what `predict` does per ReplicaSet, from slim records
//! read from the List,
//! (c) parsing a `kubectl get pods -o json` List of that size, through the
//! general path (`parse_objects` + `pods_from`) and through `parse_pods`
//! (what `predict` uses), and that List as block-style YAML through the
//! same reader (`read_pods_slim_yaml`), and (d) `predict` end to end on the
//! List written to a file: read, parse, order, render the table.
//!
//! Run: `cargo bench --bench comparator -- --sample-size 10 --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use deletion_cost::cli::predict::{predict, render_table, Settings};
use deletion_cost::cli::source::read_pods_slim;
use deletion_cost::comparator::key::go_time;
use deletion_cost::comparator::{
    assign_ranks, rank_pods, rank_slim, Comparator, FeatureGates, PodsOnNode, RankKey, SlimPod,
};
use deletion_cost::input::{parse_objects, parse_pods, pods_from, pods_from_reader, InputLimits};
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

fn keys<'a>(cmp: &Comparator, pods: &'a [Pod]) -> Vec<RankKey<'a>> {
    let mut keys: Vec<RankKey> = pods
        .iter()
        .map(|p| RankKey::from_pod(p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, pods);
    keys
}

/// What `predict` does per ReplicaSet: colocation counts, keys packed from
/// slim records, sort and check.
fn keys_and_sort(cmp: &Comparator, pods: &[&SlimPod]) -> usize {
    let on_node = PodsOnNode::count_slim(pods.iter().copied());
    rank_slim(cmp, pods, &on_node).order.len()
}

fn bench(c: &mut Criterion) {
    let cmp = comparator();
    for n in SIZES {
        let pods = gen::pods(n, 42);
        let ready_keys = keys(&cmp, &pods);
        let list =
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": &pods}).to_string();

        // the check stops at the first conflict: say whether one was found,
        // so the rank_pods figure can be read as a full or a cut-short check
        let ranking = rank_pods(&cmp, &ready_keys);
        println!(
            "{n} pods: strict weak order: {}",
            match &ranking.ambiguity {
                None => "yes (full check)".to_string(),
                Some(a) => format!("no ({} pods in the first conflict)", a.pods.len()),
            }
        );
        // the same keys with every time made distinct (plus i ns): a strict
        // weak order, so the check runs to the end
        let distinct: Vec<RankKey> = ready_keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let mut k = k.clone();
                k.ready_time = k.ready_time.map(|t| t + i as i128);
                k.created = k.created.map(|t| t + i as i128);
                k.with_now(cmp.now)
            })
            .collect();
        assert!(rank_pods(&cmp, &distinct).ambiguity.is_none());
        // as predict holds them: read from the List, nodes and owners shared
        let (slim, _) =
            pods_from_reader("bench.json", list.as_bytes(), InputLimits::NONE, 0).unwrap();
        let slim: Vec<&SlimPod> = slim.iter().collect();
        let mut g = c.benchmark_group("comparator");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("keys", n), &pods, |b, pods| {
            b.iter(|| keys(&cmp, black_box(pods)))
        });
        g.bench_with_input(BenchmarkId::new("keys_and_sort", n), &slim, |b, pods| {
            b.iter(|| keys_and_sort(&cmp, black_box(pods)))
        });
        g.bench_with_input(BenchmarkId::new("rank_pods", n), &ready_keys, |b, k| {
            b.iter(|| rank_pods(&cmp, black_box(k)))
        });
        g.bench_with_input(
            BenchmarkId::new("rank_pods_full_check", n),
            &distinct,
            |b, k| b.iter(|| rank_pods(&cmp, black_box(k))),
        );
        g.bench_with_input(BenchmarkId::new("parse_json", n), &list, |b, text| {
            b.iter(|| {
                let objects = parse_objects("bench.json", black_box(text)).unwrap();
                pods_from(&objects).unwrap()
            })
        });
        g.bench_with_input(BenchmarkId::new("parse_pods", n), &list, |b, text| {
            b.iter(|| parse_pods("bench.json", black_box(text)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("read_pods_slim", n), &list, |b, text| {
            b.iter(|| {
                pods_from_reader(
                    "bench.json",
                    black_box(text.as_bytes()),
                    InputLimits::NONE,
                    0,
                )
                .unwrap()
            })
        });
        // the same List as block-style YAML (what `kubectl get -o yaml`
        // prints), made only when this bench runs: it takes seconds at 100k
        let yaml = std::cell::OnceCell::new();
        g.bench_function(BenchmarkId::new("read_pods_slim_yaml", n), |b| {
            let text: &String = yaml.get_or_init(|| {
                let value: serde_json::Value = serde_json::from_str(&list).unwrap();
                let yaml = serde_saphyr::to_string(&value).unwrap();
                let (pods, _) =
                    pods_from_reader("bench.yaml", yaml.as_bytes(), InputLimits::NONE, 0).unwrap();
                assert_eq!(pods.len(), n);
                yaml
            });
            b.iter(|| {
                pods_from_reader(
                    "bench.yaml",
                    black_box(text.as_bytes()),
                    InputLimits::NONE,
                    0,
                )
                .unwrap()
            })
        });
        drop(yaml);
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &list).unwrap();
        let path = file.path().to_str().unwrap().to_string();
        let settings = Settings {
            now: gen::now(),
            gates: FeatureGates::default(),
            kubernetes_version: None,
            scale_down_by: Some(10),
        };
        g.bench_with_input(BenchmarkId::new("predict", n), &path, |b, path| {
            b.iter(|| {
                let (_, pods, _) = read_pods_slim(path, InputLimits::NONE).unwrap();
                render_table(&predict(&settings, &pods, None))
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
