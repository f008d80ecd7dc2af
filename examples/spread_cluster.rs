//! Writes a cluster snapshot for `deletion-cost plan` (a `kubectl get
//! pods,nodes,rs -o json` List) of one Deployment, `web` in namespace
//! `shop` (what `config/examples/consolidation.yaml` selects), spread over
//! nodes as a scheduler spreads it: pods created a second apart, placed
//! round-robin, all Running and Ready. The shape of Karpenter's benchmark
//! for its pod-deletion-cost management, offline: docs/policies.md's
//! consolidation figures.
//!
//! Run: `cargo run --example spread_cluster -- PODS NODES [--uneven] > cluster.json`
//! (`--uneven`: 38 to 42 pods a node, as kube-scheduler placed 1,000 pods on
//! 25 nodes on a real control plane, instead of equal counts).

use serde_json::{json, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut numbers = Vec::new();
    let mut uneven = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--uneven" => uneven = true,
            n => numbers.push(n.parse::<usize>().map_err(|e| format!("{n:?}: {e}"))?),
        }
    }
    let [pods, nodes] = numbers[..] else {
        return Err("usage: spread_cluster PODS NODES [--uneven]".into());
    };
    if nodes == 0 {
        return Err("NODES must be at least 1".into());
    }
    let counts = counts(pods, nodes, uneven);
    let mut items: Vec<Value> = (0..nodes).map(node).collect();
    items.push(replica_set());
    let rounds = counts.iter().copied().max().unwrap_or(0);
    let mut n = 0;
    for round in 0..rounds {
        for (i, _) in counts.iter().enumerate().filter(|(_, &c)| c > round) {
            items.push(pod(n, i));
            n += 1;
        }
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    println!("{}", serde_json::to_string(&list)?);
    Ok(())
}

/// Pods per node: as equal as the numbers allow, or 38..=42-like (two
/// below, two above the mean in turn) with `uneven`.
fn counts(pods: usize, nodes: usize, uneven: bool) -> Vec<usize> {
    let mut c: Vec<usize> = (0..nodes)
        .map(|i| pods / nodes + usize::from(i < pods % nodes))
        .collect();
    if uneven {
        for pair in c.chunks_mut(2) {
            if let [a, b] = pair {
                let d = (*a).min(*b).min(2);
                *a -= d;
                *b += d;
            }
        }
    }
    c
}

fn node(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i:03}"), "uid": format!("uid-node-{i:03}"),
            "labels": {"kubernetes.io/hostname": format!("node-{i:03}")}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}})
}

fn replica_set() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-7d9f8c6b5", "namespace": "shop", "uid": "uid-web-7d9f8c6b5",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "uid-web", "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d9f8c6b5"}}}})
}

fn pod(n: usize, node: usize) -> Value {
    // 2026-11-20T00:00:00Z plus n seconds
    let created = time(1_795_132_800 + n as i64);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-7d9f8c6b5-{n:05}"), "namespace": "shop",
            "uid": format!("uid-web-{n:05}"), "creationTimestamp": created,
            "labels": {"app": "web", "pod-template-hash": "7d9f8c6b5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d9f8c6b5", "uid": "uid-web-7d9f8c6b5", "controller": true}]},
        "spec": {"nodeName": format!("node-{node:03}"), "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "startTime": created,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": created}]}})
}

/// Unix seconds as RFC 3339 (UTC).
fn time(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
