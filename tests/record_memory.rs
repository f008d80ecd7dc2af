//! Heap bytes per cached pod, measured by a counting allocator: the
//! decoded record, and the record with its key in kube's reflector store
//! (what the operator's pod cache holds). Run by hand:
//! `cargo test --release --test record_memory -- --ignored --nocapture`.
//! Figures are in docs/performance.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use deletion_cost::engine::caches::CachedPod;
use deletion_cost::pod::PodRecord;
use kube::runtime::{reflector, watcher};

/// Counts the bytes the program holds (requested sizes, without the
/// allocator's own overhead).
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HELD.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HELD.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        HELD.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A pod of a 1,000-pod ReplicaSet as the API serves it: two labels, an
/// owner, a `last-applied-configuration` of 600 bytes, our cost.
fn pod_json(i: usize) -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-7d9f8b6c5-{i:05}"), "namespace": "shop",
            "resourceVersion": format!("{}", 100_000 + i),
            "uid": format!("0b8f3c2e-1d2a-4c5b-9e8f-{i:012}"),
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9f8b6c5"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(600),
                "controller.kubernetes.io/pod-deletion-cost": "-120"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d9f8b6c5", "uid": "1f0c-rs", "controller": true,
                "blockOwnerDeletion": true}]},
        "spec": {"nodeName": format!("node-{}", i % 50),
            "containers": [{"name": "app", "image": "registry.example/app:1.2.3"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2026-11-01T00:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": i % 4}]}
    })
    .to_string()
}

fn held() -> isize {
    HELD.load(Ordering::Relaxed)
}

#[test]
#[ignore = "measurement: run by hand, see the module doc"]
fn bytes_per_cached_pod() {
    let n = 20_000;
    let texts: Vec<String> = (0..n).map(pod_json).collect();

    let before = held();
    let records: Vec<Arc<PodRecord>> = texts
        .iter()
        .map(|t| Arc::new(serde_json::from_str(t).expect("a pod")))
        .collect();
    let per_record = (held() - before) as f64 / n as f64 - 8.0; // less the Vec's pointer

    let (store, mut writer) = reflector::store::<CachedPod>();
    let before = held();
    for r in &records {
        writer.apply_watcher_event(&watcher::Event::Apply(CachedPod(Arc::new((**r).clone()))));
    }
    let per_cached = (held() - before) as f64 / n as f64;
    drop(records);
    assert_eq!(store.state().len(), n);

    println!(
        "size_of::<PodRecord>(): {} bytes",
        std::mem::size_of::<PodRecord>()
    );
    println!("a decoded record (in an Arc): {per_record:.0} bytes");
    println!("a record in the reflector store, with its key and its handle: {per_cached:.0} bytes");
}
