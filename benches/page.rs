//! The plan page (`plan -o html`, the operator's policy page) of the
//! generated cluster's plan at 1k and 10k pods, scale-down by 300: the
//! nodes-first layout a section of 100 pods or more takes, with every pod's
//! card under its node and its row in the table. Written to a sink as
//! `plan -o html` writes it, 1 MiB at a time.
//!
//! Run: `cargo bench --bench page -- --sample-size 10 --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use deletion_cost::plan::{self, PreviousValues};
use deletion_cost::report::{html, Report, Section};

#[path = "support/planned.rs"]
mod planned;
use planned::policy;

fn page(c: &mut Criterion) {
    let mut group = c.benchmark_group("page");
    let opts = planned::options(300);
    for n in [1_000usize, 10_000] {
        let (snapshot, samples) = planned::cluster(n);
        let p = policy("lexicographic", n);
        let planned = plan::plan(&p, &snapshot, &samples, &PreviousValues::new(), &opts);
        let report = Report {
            source: "bench".into(),
            now: None,
            sections: vec![Section::new(&p, &planned, &snapshot.nodes, &opts)],
        };
        let mut bytes = Vec::new();
        if let Err(e) = html::render_to(&report, &mut bytes) {
            panic!("rendering the page: {e}");
        }
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("render_to", n), &n, |b, _| {
            b.iter(|| html::render_to(black_box(&report), &mut std::io::sink()))
        });
    }
    group.finish();
}

criterion_group!(benches, page);
criterion_main!(benches);
