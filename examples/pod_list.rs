//! Writes a `kubectl get pods -o json` List of generated pods (the
//! benchmarks' `benches/support/gen.rs`) as compact JSON on stdout, for the
//! large-input figures of docs/performance.md (and the README's headline).
//!
//! Run: `cargo run --release --example pod_list -- 100000 > pods-100k.json`

use std::io::Write as _;

#[path = "../benches/support/gen.rs"]
#[allow(dead_code)]
mod gen;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 100_000,
    };
    let pods = gen::pods(n, 42);
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods});
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer(&mut out, &list)?;
    out.flush()?;
    Ok(())
}
