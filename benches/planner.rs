//! Planner end to end (signals, costs, patches and the per-ReplicaSet order
//! check) over generated clusters of 10k and 100k pods, with every signal,
//! under `lexicographic` and `sum`.
//!
//! Run: `cargo bench --bench planner -- --sample-size 10 --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use deletion_cost::plan::{self, PreviousValues};

#[path = "support/planned.rs"]
mod planned;
use planned::policy;

fn planner(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    let opts = planned::options(10);
    for n in [10_000usize, 100_000] {
        let (snapshot, samples) = planned::cluster(n);
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
