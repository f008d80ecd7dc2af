//! A deterministic generator of realistic clusters: the input of the golden
//! plans (`tests/golden/main.rs`) and of the planner bench (`benches/planner.rs`
//! includes this file by path). It uses only `k8s-openapi` and `std`. What it
//! generates for a given size and seed is part of every golden plan: after a
//! change here, regenerate them (`UPDATE_GOLDEN=1 cargo test --test golden`)
//! and read the diff.
//!
//! Shape, for `n` pods: the namespace `shop` holds Deployment `web` with a
//! current ReplicaSet (70% of the pods less 20) and an old one (20 pods),
//! Deployment `worker` (10%) and a few bare pods; the rest (about 20%) spread
//! over ten other namespaces. One node per 30 pods with Karpenter capacity-type
//! (60% spot) and zone (a/b/c) labels. About 3% of pods are not Ready, 0.5%
//! unscheduled, 0.5% finished or terminating, 2% carry a foreign cost and half
//! of `web` already carries a cost written by the policy. Utilisation samples
//! exist for about 95% of the `web` pods.

#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EnvVar, Node, Pod, PodCondition, PodSpec, PodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;

/// Namespace of the policy.
pub const NAMESPACE: &str = "shop";
/// Name of the policy (and of its target Deployment).
pub const POLICY: &str = "web";
/// `now` of the generated cluster (Unix seconds): 2026-11-22T03:00:00Z.
pub const NOW_SECS: i64 = 1_795_316_400;
/// Pods of the old `web` ReplicaSet.
pub const OLD_PODS: usize = 20;

/// A generated cluster plus the utilisation samples of the policy's signal 1.
pub struct Cluster {
    /// Pods of every namespace.
    pub pods: Vec<Pod>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// ReplicaSets of every namespace.
    pub replica_sets: Vec<ReplicaSet>,
    /// (pod name, utilisation) for about 95% of the `web` pods.
    pub utilization: Vec<(String, f64)>,
}

/// The policy: every signal, targeting Deployment `web`; `combine` is
/// `lexicographic` or `sum`. `spot_budget` caps the spot pods.
pub fn policy_yaml(combine: &str, spot_budget: usize) -> String {
    format!(
        "targetRef: {{kind: Deployment, name: {POLICY}}}\n\
         combine: {combine}\n\
         onSignalMissing: keepLastValue\n\
         respectForeignCosts: true\n\
         signals:\n\
         - billingClass: {{costs: {{spot: 0, on-demand: 2}}, default: 1, budgets: {{spot: {spot_budget}}}}}\n\
         - utilization: {{prometheus: {{query: 'up'}}, range: {{min: 0, max: 1}}, buckets: 10}}\n\
         - nodeConsolidation: {{maxPods: 110}}\n\
         - zoneBalance: {{maxPerZone: 1000}}\n"
    )
}

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `per_mille`/1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

fn time(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn owner(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{kind}-{name}"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn replica_set(ns: &str, deployment: &str, hash: &str) -> ReplicaSet {
    let name = format!("{deployment}-{hash}");
    ReplicaSet {
        metadata: ObjectMeta {
            uid: Some(format!("uid-ReplicaSet-{name}")),
            name: Some(name),
            namespace: Some(ns.into()),
            labels: Some(labels(&[("app", deployment), ("pod-template-hash", hash)])),
            owner_references: Some(vec![owner("Deployment", deployment)]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", deployment), ("pod-template-hash", hash)])),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Where a pod belongs.
struct Owner<'a> {
    ns: &'a str,
    app: &'a str,
    hash: Option<&'a str>,
}

/// Generates a cluster of `n` pods; the same `n` and `seed` give the same cluster.
pub fn generate(n: usize, seed: u64) -> Cluster {
    let mut rng = Rng(seed | 1);
    let node_count = n.div_ceil(30).max(1);
    let zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
    let nodes: Vec<Node> = (0..node_count)
        .map(|i| {
            let capacity = if rng.chance(600) { "spot" } else { "on-demand" };
            Node {
                metadata: ObjectMeta {
                    name: Some(format!("ip-10-0-{}-{}.ec2.internal", i / 250, i % 250)),
                    labels: Some(labels(&[
                        ("karpenter.sh/capacity-type", capacity),
                        ("karpenter.sh/nodepool", "default"),
                        ("kubernetes.io/arch", "amd64"),
                        ("node.kubernetes.io/instance-type", "m6i.2xlarge"),
                        ("topology.kubernetes.io/zone", zones[i % zones.len()]),
                    ])),
                    ..Default::default()
                },
                ..Default::default()
            }
        })
        .collect();
    let node_names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect();

    let web = (n * 7 / 10).max(OLD_PODS + 1);
    let worker = n / 10;
    let bare = (n / 200).max(1);
    let other_namespaces: Vec<String> = (0..10).map(|i| format!("team-{i}")).collect();
    let mut replica_sets = vec![
        replica_set(NAMESPACE, "web", "7d9f8b6c5"),
        replica_set(NAMESPACE, "web", "5c4b7f9d8"),
        replica_set(NAMESPACE, "worker", "6b8c9d7f4"),
    ];
    for ns in &other_namespaces {
        replica_sets.push(replica_set(ns, "api", "8f7d6c5b4"));
    }

    let mut pods = Vec::with_capacity(n);
    let mut utilization = Vec::new();
    for i in 0..n {
        let o = if i < web - OLD_PODS {
            Owner {
                ns: NAMESPACE,
                app: "web",
                hash: Some("7d9f8b6c5"),
            }
        } else if i < web {
            Owner {
                ns: NAMESPACE,
                app: "web",
                hash: Some("5c4b7f9d8"),
            }
        } else if i < web + worker {
            Owner {
                ns: NAMESPACE,
                app: "worker",
                hash: Some("6b8c9d7f4"),
            }
        } else if i < web + worker + bare {
            Owner {
                ns: NAMESPACE,
                app: "debug",
                hash: None,
            }
        } else {
            Owner {
                ns: &other_namespaces[i % other_namespaces.len()],
                app: "api",
                hash: Some("8f7d6c5b4"),
            }
        };
        let name = match o.hash {
            Some(h) => format!("{}-{h}-{i:06x}", o.app),
            None => format!("{}-{i:06x}", o.app),
        };
        let created = NOW_SECS - 60 - rng.below(30 * 86_400) as i64;
        let ready = !rng.chance(30);
        let scheduled = !rng.chance(5);
        let mut annotations = BTreeMap::new();
        annotations.insert(
            "kubectl.kubernetes.io/restartedAt".to_string(),
            "2026-11-01T00:00:00Z".to_string(),
        );
        if o.app == "web" {
            if rng.chance(20) {
                annotations.insert(
                    "controller.kubernetes.io/pod-deletion-cost".into(),
                    format!("{}", rng.below(100) as i64 - 50),
                );
            } else if rng.chance(500) {
                annotations.insert(
                    "controller.kubernetes.io/pod-deletion-cost".into(),
                    rng.below(3_000_000).to_string(),
                );
                annotations.insert("deletioncost.dev/policy".into(), POLICY.into());
            }
            if !rng.chance(50) {
                let v = if rng.chance(2) {
                    f64::NAN
                } else {
                    rng.below(1500) as f64 / 1000.0
                };
                utilization.push((name.clone(), v));
            }
        }
        let mut pod_labels = labels(&[("app", o.app), ("team", "platform")]);
        if let Some(h) = o.hash {
            pod_labels.insert("pod-template-hash".into(), h.into());
        }
        let phase = if !scheduled {
            "Pending"
        } else if rng.chance(3) {
            "Succeeded"
        } else {
            "Running"
        };
        let deleting = rng.chance(2);
        pods.push(Pod {
            metadata: ObjectMeta {
                uid: Some(format!(
                    "{:08x}-{:04x}-4000-8000-{:012x}",
                    rng.next() as u32,
                    i % 65536,
                    i
                )),
                name: Some(name),
                namespace: Some(o.ns.into()),
                labels: Some(pod_labels),
                annotations: Some(annotations),
                owner_references: o
                    .hash
                    .map(|h| vec![owner("ReplicaSet", &format!("{}-{h}", o.app))]),
                creation_timestamp: Some(time(created)),
                deletion_timestamp: deleting.then(|| time(NOW_SECS - 5)),
                resource_version: Some((1_000_000 + i).to_string()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: scheduled
                    .then(|| node_names[rng.below(node_count as u64) as usize].clone()),
                containers: vec![Container {
                    name: o.app.into(),
                    image: Some(format!("registry.example/{}:1.4.2", o.app)),
                    env: Some(
                        (0..4)
                            .map(|e| EnvVar {
                                name: format!("SETTING_{e}"),
                                value: Some(format!("value-{e}")),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    resources: Some(ResourceRequirements {
                        requests: Some(
                            [
                                ("cpu".to_string(), Quantity("250m".into())),
                                ("memory".to_string(), Quantity("512Mi".into())),
                            ]
                            .into_iter()
                            .collect(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: if scheduled { "True" } else { "False" }.into(),
                        last_transition_time: Some(time(created + 1)),
                        ..Default::default()
                    },
                    PodCondition {
                        type_: "Ready".into(),
                        status: if ready && scheduled { "True" } else { "False" }.into(),
                        last_transition_time: Some(time(created + 5 + rng.below(600) as i64)),
                        ..Default::default()
                    },
                ]),
                container_statuses: scheduled.then(|| {
                    vec![ContainerStatus {
                        name: o.app.into(),
                        image: format!("registry.example/{}:1.4.2", o.app),
                        image_id: String::new(),
                        ready,
                        restart_count: if rng.chance(50) {
                            rng.below(5) as i32
                        } else {
                            0
                        },
                        ..Default::default()
                    }]
                }),
                pod_ip: scheduled.then(|| format!("10.1.{}.{}", (i / 250) % 250, i % 250)),
                ..Default::default()
            }),
        });
    }
    Cluster {
        pods,
        nodes,
        replica_sets,
        utilization,
    }
}
