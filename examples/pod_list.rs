//! Writes a `kubectl get pods -o json` List of generated pods as compact JSON
//! on stdout, for the large-input figures of docs/performance.md (and the
//! README's headline): by default the benchmarks' pods
//! (`benches/support/gen.rs`, about 1.7 KB each, with the fields a real pod
//! has); with `--comparator-fields`, pods carrying only what the comparator
//! reads (name, UID, creation time, node, phase, the Ready condition and
//! restart counts: about 0.4 KB each), every ready and creation time
//! distinct, so the order is a strict total one.
//!
//! Run: `cargo run --release --example pod_list -- 100000 > pods-100k.json`,
//! `cargo run --release --example pod_list -- 100000 --comparator-fields > pods-slim-100k.json`

use std::io::Write as _;

#[path = "../benches/support/gen.rs"]
#[allow(dead_code)]
mod gen;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut n = 100_000;
    let mut comparator_fields = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--comparator-fields" => comparator_fields = true,
            _ => n = a.parse()?,
        }
    }
    let pods = if comparator_fields {
        comparator_pods(n)
    } else {
        serde_json::to_value(gen::pods(n, 42))?
    };
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods});
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer(&mut out, &list)?;
    out.flush()?;
    Ok(())
}

/// `n` pods with only the fields the comparator reads, on `n / 20` nodes;
/// pod `i` was created `i` seconds apart and became ready 7 s later, so no
/// two times are equal.
fn comparator_pods(n: usize) -> serde_json::Value {
    let now = gen::now().as_second();
    let nodes = (n / 20).max(1);
    let stamp = |secs: i64| {
        k8s_openapi::jiff::Timestamp::from_second(secs)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let pods: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            // a multiplicative hash spreads nodes, UIDs and restarts over the pods
            let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let created = now - 600 - (n - i) as i64 * 13;
            let node = h as usize % nodes;
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": format!("checkout-web-6d4f8c9b7-{i:05x}"),
                    "namespace": "checkout",
                    "uid": format!(
                        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
                        h >> 32,
                        (h >> 16) & 0xffff,
                        i & 0xfff,
                        (i >> 12) & 0xfff,
                        h & 0xffff_ffff_ffff
                    ),
                    "creationTimestamp": stamp(created),
                },
                "spec": {"nodeName": format!("ip-10-0-{}-{}.eu-west-1.compute.internal", node / 250, node % 250)},
                "status": {
                    "phase": "Running",
                    "conditions": [{
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": stamp(created + 7),
                    }],
                    "containerStatuses": [
                        {"name": "web", "restartCount": (h >> 40) % 4},
                        {"name": "envoy", "restartCount": (h >> 50) % 2},
                    ],
                },
            })
        })
        .collect();
    serde_json::Value::Array(pods)
}
