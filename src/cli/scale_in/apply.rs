//! The cluster side of `scale-in --remove`, as the caller: the labels or
//! costs the [`Decision`] names, the scale through the workload's scale
//! subresource, the wait for the controller's deletions, and putting back
//! what was written on any named pod that stays.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, VersionMatch};
use kube::{Api, Client};
use serde_json::json;
use tokio::time::Instant;

use super::super::CliError;
use super::decide::{Decision, Via};
use crate::annotations::POD_DELETION_COST;
use crate::comparator::Comparator;
use crate::plan::workload::TargetKind;

/// How often the wait looks at the ReplicaSet's pods.
const POLL: Duration = Duration::from_millis(200);

/// After the API server's watch cache holds the writes: the margin for the
/// ReplicaSet controller's own watch to deliver them (milliseconds on a
/// healthy control plane) before the scale-in it acts on.
const SETTLE_MARGIN: Duration = Duration::from_millis(250);

/// Resolves at the first SIGINT or SIGTERM after this call (the handlers
/// are in place when it returns).
fn signalled() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(term) => {}
                () = wait(int) => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Aborts the signal watcher when the command is done with it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What happened.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Pods labelled with the marker.
    pub marked: Vec<String>,
    /// Costs written (pod, cost).
    pub wrote: Vec<(String, i32)>,
    /// How long the scale request took.
    pub scale_seconds: Option<f64>,
    /// The pods the controller deleted, in the order seen.
    pub deleted: Vec<String>,
    /// Named pods that stayed, whose label or cost was put back.
    pub put_back: Vec<String>,
    /// Whether the wait ended before the controller deleted as many pods
    /// as the scale-in removes.
    pub timed_out: bool,
    /// Whether SIGINT or SIGTERM ended the wait.
    pub interrupted: bool,
}

/// The HPAs that scale `d`'s workload with a `minReplicas` above its new
/// size, as warnings; none when HPAs may not be listed.
pub async fn hpa_warnings(client: &Client, d: &Decision) -> Vec<String> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &d.namespace);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return Vec::new();
    };
    let kind = match d.workload.kind {
        TargetKind::Deployment => "Deployment",
        _ => "ReplicaSet",
    };
    list.items
        .iter()
        .filter_map(|h| {
            let spec = &h.spec;
            let t = &spec.scale_target_ref;
            let min = spec.min_replicas.unwrap_or(1);
            (t.kind == kind && t.name == d.workload.name && d.to < min).then(|| {
                format!(
                    "horizontalpodautoscaler/{} keeps {} at {min} replica(s) or more: it will \
                     scale back up from {}",
                    h.metadata.name.as_deref().unwrap_or_default(),
                    d.workload,
                    d.to
                )
            })
        })
        .collect()
}

/// Writes what `d` needs, scales in and waits up to `timeout` for the
/// controller's deletions; on an error before the scale, and for named pods
/// that stay, what was written is put back. SIGINT or SIGTERM before the
/// scale puts back what was written and scales nothing; after it, the wait
/// ends and the report says so (the scale is set: the controller deletes
/// whether or not anyone waits).
pub async fn apply(
    client: &Client,
    d: &Decision,
    cmp: &Comparator,
    timeout: Duration,
) -> Result<Outcome, CliError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &d.namespace);
    let mut out = Outcome::default();
    // a write in flight finishes before anything is put back: a request
    // cut off mid-way could still land after the put-back
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn({
        let stop = stop.clone();
        // registered now, not when the task first runs: a signal from here
        // on is caught
        let signalled = signalled();
        async move {
            signalled.await;
            stop.store(true, Ordering::SeqCst);
        }
    });
    let _abort = AbortOnDrop(watcher);
    let stopped = || stop.load(Ordering::SeqCst);
    let ready = match write(&pods, d, &mut out, &stopped).await {
        Ok(written) if !stopped() => settle(&pods, d, written).await,
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    let ready = match (ready, &d.via) {
        (
            Ok(()),
            Via::Marker {
                policy,
                continuous: true,
                ..
            },
        ) if !stopped() => operator_at_work(&pods, d, cmp, policy, timeout, &stopped).await,
        (other, _) => other,
    };
    let ready = match ready {
        Ok(()) if stopped() => Err(CliError::failure(
            "interrupted before the scale: nothing scaled, what was written is put back",
        )),
        other => other,
    };
    if let Err(e) = ready {
        put_back(&pods, d, &out, &d.named).await;
        return Err(e);
    }
    let started = Instant::now();
    if let Err(e) = scale(client, d).await {
        put_back(&pods, d, &out, &d.named).await;
        return Err(e);
    }
    out.scale_seconds = Some(started.elapsed().as_secs_f64());
    let by = usize::try_from(d.from - d.to).unwrap_or(0);
    let deadline = Instant::now() + timeout;
    let active: BTreeSet<&str> = d.active.iter().map(String::as_str).collect();
    loop {
        let now_active = active_pods(&pods, d).await?;
        for name in &active {
            if !now_active.contains(*name) && !out.deleted.iter().any(|n| n == name) {
                out.deleted.push(name.to_string());
            }
        }
        if out.deleted.len() >= by {
            break;
        }
        if Instant::now() >= deadline {
            out.timed_out = true;
            break;
        }
        if stopped() {
            // what was written stays: the controller may not have acted yet
            out.interrupted = true;
            return Ok(out);
        }
        tokio::time::sleep(POLL).await;
    }
    let stayed: Vec<String> = d
        .named
        .iter()
        .filter(|n| !out.deleted.contains(n))
        .cloned()
        .collect();
    if !stayed.is_empty() {
        out.put_back = put_back(&pods, d, &out, &stayed).await;
    }
    Ok(out)
}

/// The labels or costs; the highest resource version written.
async fn write(
    pods: &Api<Pod>,
    d: &Decision,
    out: &mut Outcome,
    stopped: &impl Fn() -> bool,
) -> Result<u64, CliError> {
    let mut highest = 0u64;
    match &d.via {
        Via::Marker { label, to_mark, .. } => {
            for pod in to_mark.iter().take_while(|_| !stopped()) {
                let patch = json!({"metadata": {"labels": {*label: "true"}}});
                let p = pods
                    .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| write_error(e, "label", pod, &d.namespace))?;
                out.marked.push(pod.clone());
                highest = highest.max(revision(&p));
            }
        }
        Via::Costs { writes } => {
            for w in writes.iter().take_while(|_| !stopped()) {
                let patch =
                    json!({"metadata": {"annotations": {POD_DELETION_COST: w.cost.to_string()}}});
                let p = pods
                    .patch(&w.pod, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| write_error(e, "patch", &w.pod, &d.namespace))?;
                out.wrote.push((w.pod.clone(), w.cost));
                highest = highest.max(revision(&p));
            }
        }
    }
    Ok(highest)
}

fn revision(p: &Pod) -> u64 {
    p.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn write_error(e: kube::Error, verb: &str, pod: &str, ns: &str) -> CliError {
    match e {
        kube::Error::Api(s) if s.code == 403 => CliError::failure(format!(
            "forbidden: the kubeconfig's user may not {verb} pod {pod} in namespace {ns} \
             (scale-in --remove needs patch on pods and on the workload's scale) ({})",
            s.message
        )),
        other => CliError::failure(format!(
            "writing pod {pod} in namespace {ns}: {}",
            crate::error_chain(&other)
        )),
    }
}

/// How long the operator may take to write the marked pods' costs under a
/// `Continuous` policy (its round after a pod event: about a second).
const OPERATOR_WRITES_WITHIN: Duration = Duration::from_secs(15);

/// Under a `Continuous` policy: waits until the costs in place delete
/// exactly the named pods, which the operator's round writes moments after
/// the marker. A scale without that would go through the webhook alone, and
/// if no operator leads, delete pods nobody named; so past
/// [`OPERATOR_WRITES_WITHIN`] (or `--timeout`, if shorter) nothing is
/// scaled.
async fn operator_at_work(
    pods: &Api<Pod>,
    d: &Decision,
    cmp: &Comparator,
    policy: &str,
    timeout: Duration,
    stopped: &impl Fn() -> bool,
) -> Result<(), CliError> {
    let named: BTreeSet<String> = d.named.iter().cloned().collect();
    let k = named.len();
    let within = OPERATOR_WRITES_WITHIN.min(timeout);
    let deadline = Instant::now() + within;
    while !stopped() {
        let list = pods
            .list(&ListParams::default().labels(&selector(&d.pod_labels)))
            .await
            .map_err(|e| {
                CliError::failure(format!(
                    "reading the pods of replicaset/{}: {}",
                    d.replica_set,
                    crate::error_chain(&e)
                ))
            })?;
        let related: Vec<&Pod> = list.items.iter().collect();
        let active: Vec<&Pod> = related
            .iter()
            .copied()
            .filter(|p| {
                crate::owner::controller_of(p.metadata.owner_references.as_ref())
                    .is_some_and(|o| o.kind == "ReplicaSet" && o.name == d.replica_set)
            })
            .filter(|p| crate::comparator::inactive_reason(*p).is_none())
            .collect();
        if super::decide::first_to_go(cmp, &active, &related, k) == named {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CliError::failure(format!(
                "policy {policy} did not write the marked pods' costs within {} s: is the \
                 operator running and leading? Nothing scaled, the markers are taken back",
                within.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Waits until the API server's watch cache holds revision `written` (the
/// cache the controller's watch reads), then a margin.
async fn settle(pods: &Api<Pod>, d: &Decision, written: u64) -> Result<(), CliError> {
    if written == 0 {
        return Ok(());
    }
    let params = ListParams::default()
        .labels(&selector(&d.pod_labels))
        .at(&written.to_string())
        .matching(VersionMatch::NotOlderThan)
        .limit(1);
    tokio::time::timeout(Duration::from_secs(10), pods.list_metadata(&params))
        .await
        .map_err(|_| {
            CliError::failure("the API server's cache did not show the writes within 10 s")
        })?
        .map_err(|e| {
            CliError::failure(format!(
                "waiting for the writes to show: {}",
                crate::error_chain(&e)
            ))
        })?;
    tokio::time::sleep(SETTLE_MARGIN).await;
    Ok(())
}

fn selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Scales the workload to `d.to`, if it is still at `d.from`.
async fn scale(client: &Client, d: &Decision) -> Result<(), CliError> {
    let name = &d.workload.name;
    let (now, result) = match d.workload.kind {
        TargetKind::Deployment => {
            let api: Api<Deployment> = Api::namespaced(client.clone(), &d.namespace);
            scale_with(&api, name, d).await
        }
        _ => {
            let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &d.namespace);
            scale_with(&api, name, d).await
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(match (now, e) {
            (Some(n), _) if n != d.from => CliError::failure(format!(
                "{} changed size meanwhile ({} -> {n} replicas): nothing scaled; try again",
                d.workload, d.from
            )),
            (_, kube::Error::Api(s)) if s.code == 409 => CliError::failure(format!(
                "{} changed meanwhile (the API server said: {}): nothing scaled; try again",
                d.workload, s.message
            )),
            (_, kube::Error::Api(s)) if s.code == 403 => CliError::failure(format!(
                "forbidden: the kubeconfig's user may not update the scale of {} ({})",
                d.workload, s.message
            )),
            (_, e) => CliError::failure(format!(
                "scaling {}: {}",
                d.workload,
                crate::error_chain(&e)
            )),
        }),
    }
}

/// Reads the scale, and updates it at the version read (a scaler that
/// moved it meanwhile makes this fail rather than be overwritten).
async fn scale_with<K>(api: &Api<K>, name: &str, d: &Decision) -> (Option<i32>, kube::Result<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let current = match api.get_scale(name).await {
        Ok(s) => s,
        Err(e) => return (None, Err(e)),
    };
    let now = current.spec.as_ref().and_then(|s| s.replicas);
    if now != Some(d.from) {
        return (
            now,
            Err(kube::Error::Api(Box::new(
                kube::core::Status::failure("changed", "Conflict").with_code(409),
            ))),
        );
    }
    let patch = json!({
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {"replicas": d.to}
    });
    let result = api
        .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ());
    (now, result)
}

/// The names of the ReplicaSet's active pods now.
async fn active_pods(pods: &Api<Pod>, d: &Decision) -> Result<BTreeSet<String>, CliError> {
    let list = pods
        .list(&ListParams::default().labels(&selector(&d.pod_labels)))
        .await
        .map_err(|e| {
            CliError::failure(format!(
                "listing the pods of replicaset/{} while waiting for the deletions: {}",
                d.replica_set,
                crate::error_chain(&e)
            ))
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| crate::comparator::inactive_reason(p).is_none())
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Removes the marker set, or puts back the cost replaced, on `which` of
/// the pods written; the pods it put back. Best effort: a pod gone needs
/// nothing, and a failure is said on stderr.
async fn put_back(pods: &Api<Pod>, d: &Decision, out: &Outcome, which: &[String]) -> Vec<String> {
    let mut done = Vec::new();
    let patches: Vec<(String, serde_json::Value)> = match &d.via {
        Via::Marker { label, .. } => out
            .marked
            .iter()
            .filter(|p| which.contains(p))
            .map(|p| (p.clone(), json!({"metadata": {"labels": {*label: null}}})))
            .collect(),
        Via::Costs { writes } => out
            .wrote
            .iter()
            .filter(|(p, _)| which.contains(p))
            .filter_map(|(p, _)| {
                let before = writes.iter().find(|w| &w.pod == p)?.before.clone();
                Some((
                    p.clone(),
                    json!({"metadata": {"annotations": {POD_DELETION_COST: before}}}),
                ))
            })
            .collect(),
    };
    for (pod, patch) in patches {
        match pods
            .patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => done.push(pod),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => super::super::stderr::warn(&format!(
                "putting back what was written on pod {pod}: {}",
                crate::error_chain(&e)
            )),
        }
    }
    done
}
