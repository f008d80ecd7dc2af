//! Simulated nodes, kwok-style: Nodes with the labels a scenario needs, kept
//! Ready (status heartbeat and node Lease), without the `not-ready` taint new
//! Nodes get; and the kubelet's part for pods bound to them, through the
//! status subresource: Running, the four conditions with transition times,
//! container statuses, and on request not ready or a restart count. Pods the
//! ReplicaSet controller deletes stay Terminating: no kubelet finishes them,
//! which is how a scenario sees which pods the controller chose; a pool can
//! ask for them to be finished instead ([`Kubelet::finish_deleted`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::cluster::{now_rfc3339, MANAGER, POOL_LABEL, SUITE_LABEL};

/// How long ago a pod's first status report says it started and became ready.
const STARTED_AGO: std::time::Duration = std::time::Duration::from_secs(600);

/// How the simulated kubelet reports one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodHealth {
    /// Ready condition (and container readiness).
    pub ready: bool,
    /// The container's restart count.
    pub restarts: i32,
}

impl Default for PodHealth {
    fn default() -> Self {
        PodHealth {
            ready: true,
            restarts: 0,
        }
    }
}

#[derive(Default)]
struct Shared {
    /// node name -> pool (scenario namespace)
    nodes: BTreeMap<String, String>,
    /// (namespace, pod) -> reported health, when not the default
    health: HashMap<(String, String), PodHealth>,
    /// Pools whose deleted pods are finished (removed with grace 0).
    finish: BTreeSet<String>,
}

/// The harness's kubelet for every simulated node.
pub struct Kubelet {
    client: Client,
    shared: Arc<Mutex<Shared>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Kubelet {
    /// Starts the pod loop and the node heartbeat.
    pub fn start(client: Client) -> Kubelet {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let pods = tokio::spawn(pod_loop(client.clone(), shared.clone()));
        let beat = tokio::spawn(heartbeat(client.clone(), shared.clone()));
        Kubelet {
            client,
            shared,
            tasks: vec![pods, beat],
        }
    }

    /// Creates Ready nodes `<pool>-<name>` with `labels`, in `pool`.
    pub async fn add_nodes(&self, pool: &str, nodes: &[(&str, BTreeMap<String, String>)]) {
        let api: Api<Node> = Api::all(self.client.clone());
        for (name, labels) in nodes {
            let name = format!("{pool}-{name}");
            let mut all = labels.clone();
            all.insert(SUITE_LABEL.into(), "true".into());
            all.insert(POOL_LABEL.into(), pool.into());
            all.insert("kubernetes.io/hostname".into(), name.clone());
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": all},
                "spec": {},
            }))
            .unwrap_or_else(|e| panic!("node {name}: {e}"));
            api.create(&PostParams::default(), &node)
                .await
                .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
            self.shared
                .lock()
                .await
                .nodes
                .insert(name.clone(), pool.into());
            report_node(&self.client, &name).await;
            // The NodeRestriction/TaintNodesByCondition admission adds
            // node.kubernetes.io/not-ready on create; a kubelet's Ready
            // report lets the node controller clear it, here we do.
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .unwrap_or_else(|e| panic!("clearing taints of {name}: {e}"));
        }
    }

    /// Reports `health` for one pod from now on.
    pub async fn set_health(&self, ns: &str, pod: &str, health: PodHealth) {
        self.shared
            .lock()
            .await
            .health
            .insert((ns.into(), pod.into()), health);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        // a failed read would leave the pod as it was until its next event:
        // try again for a while (a busy API server may refuse one)
        for _ in 0..25 {
            match api.get(pod).await {
                Ok(p) => return report_pod(&api, &p, health).await,
                Err(kube::Error::Api(s)) if s.code == 404 => return,
                Err(e) => {
                    eprintln!("simulated kubelet: reading pod {pod}: {e}; trying again");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// From now on a pod of `pool`'s nodes that gets deleted is finished at
    /// once (deleted again with grace 0), as a kubelet would once its
    /// containers stopped: a node the workload left is empty, not holding
    /// Terminating pods.
    pub async fn finish_deleted(&self, pool: &str) {
        self.shared.lock().await.finish.insert(pool.into());
    }

    /// Deletes one node and its Lease (what an autoscaler does to a node it
    /// removes); the heartbeat stops for it.
    pub async fn remove_node(&self, name: &str) {
        self.shared.lock().await.nodes.remove(name);
        delete_node(&self.client, name).await;
    }

    /// Deletes the nodes of `pool` and their Leases.
    pub async fn remove_pool(&self, pool: &str) {
        let names: Vec<String> = {
            let mut shared = self.shared.lock().await;
            let names = shared
                .nodes
                .iter()
                .filter(|(_, p)| p.as_str() == pool)
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>();
            shared.nodes.retain(|_, p| p != pool);
            shared.health.retain(|(ns, _), _| ns != pool);
            shared.finish.remove(pool);
            names
        };
        for n in names {
            delete_node(&self.client, &n).await;
        }
    }

    /// Stops the loops and deletes every node left.
    pub async fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
        let names: Vec<String> = self.shared.lock().await.nodes.keys().cloned().collect();
        for n in names {
            delete_node(&self.client, &n).await;
        }
    }
}

/// Deletes every node matching `lp`, with its Lease (leftovers of a run).
pub async fn remove_nodes(client: &Client, lp: &ListParams) {
    let api: Api<Node> = Api::all(client.clone());
    if let Ok(list) = api.list(lp).await {
        for n in list {
            delete_node(client, &n.name_any()).await;
        }
    }
}

async fn delete_node(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(name, &DeleteParams::default()).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let _ = leases.delete(name, &DeleteParams::default()).await;
}

/// Ready condition, capacity and a renewed node Lease: what a kubelet reports.
async fn report_node(client: &Client, name: &str) {
    let now = now_rfc3339();
    let nodes: Api<Node> = Api::all(client.clone());
    let status = json!({"status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "simulated by the deletion-cost e2e suite",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
        "nodeInfo": {"kubeletVersion": "v1.36.0-simulated", "architecture": "amd64",
                     "operatingSystem": "linux", "containerRuntimeVersion": "simulated://1",
                     "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                     "machineID": "", "systemUUID": "", "bootID": ""},
        "addresses": [{"type": "Hostname", "address": name}],
    }});
    if let Err(e) = nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        eprintln!("simulated kubelet: node {name} status: {e}");
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let micro = k8s_openapi::jiff::Timestamp::now().to_string();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro},
    });
    let _ = leases
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(lease),
        )
        .await;
}

async fn heartbeat(client: Client, shared: Arc<Mutex<Shared>>) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let names: Vec<String> = shared.lock().await.nodes.keys().cloned().collect();
        for n in names {
            report_node(&client, &n).await;
        }
    }
}

/// Watches the suite's pods; reports each bound one as the kubelet would.
async fn pod_loop(client: Client, shared: Arc<Mutex<Shared>>) {
    let api: Api<Pod> = Api::all(client.clone());
    let wc = watcher::Config::default().labels(&format!("{SUITE_LABEL}=true"));
    let mut events = watcher(api, wc).default_backoff().applied_objects().boxed();
    while let Some(event) = events.next().await {
        let Ok(pod) = event else { continue };
        let (Some(ns), Some(node)) = (
            pod.namespace(),
            pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ) else {
            continue;
        };
        let health = {
            let shared = shared.lock().await;
            let Some(pool) = shared.nodes.get(&node) else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                if shared.finish.contains(pool) {
                    drop(shared);
                    finish_pod(&client, &ns, &pod).await;
                }
                continue;
            }
            shared
                .health
                .get(&(ns.clone(), pod.name_any()))
                .copied()
                .unwrap_or_default()
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        report_pod(&api, &pod, health).await;
    }
}

/// Deletes a Terminating pod with grace 0 (this pod, not one of the same
/// name created since): the kubelet's last step.
async fn finish_pod(client: &Client, ns: &str, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: pod.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pod.name_any(), &dp).await {
        Ok(_) => {}
        // gone already, or another pod of that name
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => eprintln!(
            "simulated kubelet: finishing pod {ns}/{}: {e}",
            pod.name_any()
        ),
    }
}

/// Patches a pod's status to `health` unless it already says so.
async fn report_pod(api: &Api<Pod>, pod: &Pod, health: PodHealth) {
    let status = pod.status.clone().unwrap_or_default();
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .cloned()
    };
    let restarts = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.restart_count)
        .max();
    let ready = if health.ready { "True" } else { "False" };
    if status.phase.as_deref() == Some("Running")
        && condition("Ready").is_some_and(|c| c.status == ready)
        && restarts == Some(health.restarts)
    {
        return;
    }
    let now = now_rfc3339();
    // A pod's first report says it started STARTED_AGO: every pod of a
    // scenario then sits in the same log2 bucket of the comparator's
    // ready-time rule for minutes, so a prediction made seconds before the
    // controller's decision sees the same buckets. Later changes (not ready,
    // ready again) carry their real time.
    let first_report = condition("Ready").is_none();
    let since_start = if first_report {
        (k8s_openapi::jiff::Timestamp::now() - STARTED_AGO).to_string()
    } else {
        now.clone()
    };
    // a condition keeps its transition time while its status stays
    let cond = |t: &str, s: &str| -> Value {
        let since = condition(t)
            .filter(|c| c.status == s)
            .and_then(|c| c.last_transition_time)
            .map(|t| t.0.to_string())
            .unwrap_or_else(|| since_start.clone());
        json!({"type": t, "status": s, "lastTransitionTime": since})
    };
    let started = status
        .start_time
        .map(|t| t.0.to_string())
        .unwrap_or_else(|| since_start.clone());
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            json!({
                "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                "ready": health.ready, "started": true, "restartCount": health.restarts,
                "state": {"running": {"startedAt": started}},
            })
        })
        .collect();
    let body = json!({"status": {
        "phase": "Running",
        "startTime": started,
        "conditions": [
            cond("PodScheduled", "True"),
            cond("Initialized", "True"),
            cond("ContainersReady", ready),
            cond("Ready", ready),
        ],
        "containerStatuses": containers,
    }});
    if let Err(e) = api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await
    {
        // a pod deleted meanwhile is fine; anything else is worth seeing
        if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
            eprintln!("simulated kubelet: pod {}: {e}", pod.name_any());
        }
    }
}
