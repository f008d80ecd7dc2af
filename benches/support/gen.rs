//! Realistic generated pods for benchmarks: one Deployment's ReplicaSet spread
//! over nodes (about 20 pods a node), mostly Running and Ready, with a spread
//! of ages, restarts, sidecars and deletion-cost annotations (some invalid).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The `now` the generated ages are relative to.
pub fn now() -> Timestamp {
    Timestamp::from_second(1_735_732_800).unwrap() // 2025-01-01T12:00:00Z
}

/// splitmix64: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn uuid(r: &mut Rng) -> String {
    let (a, b) = (r.next(), r.next());
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

fn status(name: &str, restarts: i32, ready: bool) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: format!("registry.example.com/shop/{name}:1.42.0"),
        image_id: format!("registry.example.com/shop/{name}@sha256:{:064x}", 7),
        ready,
        restart_count: restarts,
        started: Some(true),
        container_id: Some(format!("containerd://{:064x}", restarts as u64 + 11)),
        ..Default::default()
    }
}

fn container(name: &str, sidecar: bool) -> Container {
    let q = |s: &str| Quantity(s.into());
    Container {
        name: name.into(),
        image: Some(format!("registry.example.com/shop/{name}:1.42.0")),
        restart_policy: sidecar.then(|| "Always".into()),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), q("250m")),
                ("memory".into(), q("256Mi")),
            ])),
            limits: Some(BTreeMap::from([("memory".into(), q("512Mi"))])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `n` pods of one ReplicaSet, deterministic for a given `seed`.
pub fn pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut r = Rng(seed);
    let nodes = (n / 20).max(1) as u64;
    let now = now();
    (0..n)
        .map(|i| {
            let name = format!("web-6d4f8c9b7-{i:05x}");
            let age = SignedDuration::from_secs(60 + r.below(30 * 86_400) as i64);
            let created = now.checked_sub(age).unwrap();
            let ready_at = created
                .checked_add(SignedDuration::from_secs(5 + r.below(120) as i64))
                .unwrap();
            let roll = r.below(100);
            let (phase, scheduled, ready) = match roll {
                0 => ("Pending", false, false),
                1..=3 => ("Pending", true, false),
                4..=5 => ("Unknown", true, false),
                6..=9 => ("Running", true, false),
                _ => ("Running", true, true),
            };
            let restarts = if r.chance(10) {
                1 + r.below(5) as i32
            } else {
                0
            };
            let sidecar = r.chance(20);
            let mut annotations = BTreeMap::from([(
                "kubectl.kubernetes.io/restartedAt".to_string(),
                "2024-12-01T00:00:00Z".to_string(),
            )]);
            if r.chance(30) {
                let v = match r.below(50) {
                    0 => "007".to_string(),
                    1 => "cheap".to_string(),
                    _ => (r.below(1100) as i64 - 100).to_string(),
                };
                annotations.insert("controller.kubernetes.io/pod-deletion-cost".into(), v);
            }
            let t = |ts: Timestamp| Some(Time(ts));
            let mut conditions = vec![
                PodCondition {
                    type_: "PodScheduled".into(),
                    status: if scheduled { "True" } else { "False" }.into(),
                    last_transition_time: t(created),
                    ..Default::default()
                },
                PodCondition {
                    type_: "Initialized".into(),
                    status: "True".into(),
                    last_transition_time: t(created),
                    ..Default::default()
                },
            ];
            if phase == "Running" {
                conditions.push(PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: t(ready_at),
                    ..Default::default()
                });
                conditions.push(PodCondition {
                    type_: "ContainersReady".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: t(ready_at),
                    ..Default::default()
                });
            }
            Pod {
                metadata: ObjectMeta {
                    name: Some(name),
                    generate_name: Some("web-6d4f8c9b7-".into()),
                    namespace: Some("shop".into()),
                    uid: Some(uuid(&mut r)),
                    resource_version: Some((1_000_000 + i).to_string()),
                    creation_timestamp: t(created),
                    labels: Some(BTreeMap::from([
                        ("app".into(), "web".into()),
                        ("pod-template-hash".into(), "6d4f8c9b7".into()),
                    ])),
                    annotations: Some(annotations),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "ReplicaSet".into(),
                        name: "web-6d4f8c9b7".into(),
                        uid: "5f0c1e2a-0000-4000-a000-000000000001".into(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    node_name: scheduled.then(|| {
                        let node = r.below(nodes);
                        format!("ip-10-0-{}-{}.ec2.internal", node / 250, node % 250)
                    }),
                    containers: vec![container("web", false)],
                    init_containers: sidecar.then(|| vec![container("proxy", true)]),
                    service_account_name: Some("web".into()),
                    ..Default::default()
                }),
                status: Some(PodStatus {
                    phase: Some(phase.into()),
                    conditions: Some(conditions),
                    host_ip: scheduled.then(|| "10.0.0.1".into()),
                    pod_ip: scheduled.then(|| format!("10.1.{}.{}", i / 250 % 250, i % 250)),
                    start_time: t(created),
                    container_statuses: (phase == "Running")
                        .then(|| vec![status("web", restarts, ready)]),
                    init_container_statuses: (sidecar && phase == "Running")
                        .then(|| vec![status("proxy", r.below(2) as i32, true)]),
                    qos_class: Some("Burstable".into()),
                    ..Default::default()
                }),
            }
        })
        .collect()
}
