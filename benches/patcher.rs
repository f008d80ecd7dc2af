//! Patch throughput under the rate limiter.
//!
//! 1. Real clock (criterion): a no-op writer and a high limit; how fast the
//!    patcher drains 10,000 submitted writes. With qps 10,000/burst 1,000 the
//!    limiter binds (~0.9 s minimum); with qps 1e9 the patcher's own cost shows.
//! 2. Paused tokio clock (printed before the criterion run): writes per
//!    simulated second against the configured QPS, counted in 1 s windows.
//!
//! Run: `cargo bench --bench patcher -- --sample-size 10 --warm-up-time 1 --measurement-time 5`

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use deletion_cost::writes::{
    PatchRequest, Patcher, PatcherConfig, PodRef, PodWriter, Priority, Rate, WriteError,
};
use serde_json::Value;
use tokio::time::Instant;

/// Accepts every write at once, remembering when it came (tokio clock).
#[derive(Clone, Default)]
struct NoopWriter {
    at: Arc<Mutex<Vec<Instant>>>,
}

impl PodWriter for NoopWriter {
    async fn patch(&self, _ns: &str, _name: &str, body: &Value) -> Result<(), WriteError> {
        black_box(body);
        if let Ok(mut at) = self.at.lock() {
            at.push(Instant::now());
        }
        Ok(())
    }
}

fn requests(n: usize) -> Vec<PatchRequest> {
    (0..n)
        .map(|i| {
            PatchRequest::set(PodRef::new("shop", format!("web-{i:06}")), "web", i as i32)
                .with_uid(format!("uid-{i}"))
        })
        .collect()
}

fn rate(qps: f64, burst: u32) -> Rate {
    match Rate::new("bench", qps, burst) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

/// Submits `n` writes as one batch and waits until all landed.
async fn write_all(writer: NoopWriter, r: Rate, n: usize) -> usize {
    let patcher = Patcher::start(writer, PatcherConfig::new(r));
    let batch = match patcher.submit_batch(requests(n), Priority::Background) {
        Ok(b) => b,
        Err(e) => panic!("submit: {e}"),
    };
    let report = batch.wait().await;
    assert!(report.all_done(), "not every write landed");
    patcher.drain(Duration::from_secs(1)).await;
    report.outcomes.len()
}

fn throughput(c: &mut Criterion) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let n = 10_000;
    let mut group = c.benchmark_group("patcher");
    group.throughput(Throughput::Elements(n as u64));
    for (label, qps, burst) in [
        ("qps10k-burst1k", 10_000.0, 1_000),
        ("unlimited", 1e9, 10_000),
    ] {
        group.bench_with_input(BenchmarkId::new(label, n), &n, |b, &n| {
            b.iter(|| rt.block_on(write_all(NoopWriter::default(), rate(qps, burst), n)))
        });
    }
    group.finish();
}

/// Writes per simulated 1 s window on tokio's paused clock.
fn simulated(qps: f64, burst: u32, n: usize) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let writer = NoopWriter::default();
    let at = Arc::clone(&writer.at);
    let (start, end) = rt.block_on(async move {
        let start = Instant::now();
        write_all(writer, rate(qps, burst), n).await;
        (start, Instant::now())
    });
    let times = at.lock().map(|v| v.clone()).unwrap_or_default();
    let secs = (end - start).as_secs_f64();
    let mut windows = vec![0usize; secs.ceil() as usize + 1];
    for t in &times {
        windows[(*t - start).as_secs() as usize] += 1;
    }
    let last = times
        .last()
        .map(|t| (*t - start).as_secs_f64())
        .unwrap_or(0.0);
    // after the burst, writes should come at the configured rate
    let sustained = (times.len() - burst as usize) as f64 / last.max(f64::EPSILON);
    let max_window = windows.iter().copied().max().unwrap_or(0);
    let steady: Vec<usize> = windows
        .iter()
        .copied()
        .skip(1)
        .take(windows.len().saturating_sub(3))
        .collect();
    println!(
        "simulated qps={qps} burst={burst} writes={}: last write at {last:.2} s; \
         {sustained:.1} writes/s after the burst; busiest 1 s window {max_window}; \
         full windows after the first: min {} max {}",
        times.len(),
        steady.iter().min().copied().unwrap_or(0),
        steady.iter().max().copied().unwrap_or(0),
    );
}

fn main() {
    simulated(50.0, 10, 500);
    simulated(5.0, 1, 100);
    simulated(500.0, 100, 10_000);
    let mut c = Criterion::default().configure_from_args();
    throughput(&mut c);
    c.final_summary();
}
