//! `deletion-cost scale-in WORKLOAD --remove POD[,POD…]` against the fake
//! API server, the test playing the Deployment and ReplicaSet controllers
//! (the embedded comparator picks what they delete): the pods named go,
//! with and without a policy; each refusal exits 2 having written nothing;
//! what was written on a named pod that stays is put back.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::marker::PREFER_FOR_SCALE_DOWN;
use deletion_cost_testkit::eventually;
use deletion_cost_testkit::fake_api::FakeApi;
use serde_json::{json, Value};

mod support;

const NS: &str = "shop";

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary with only the test's kubeconfig in reach.
async fn cli(home: &Path, args: &[&str]) -> Out {
    let home = home.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .args(&args)
            .env("KUBECONFIG", home.join("kubeconfig"))
            .env("HOME", &home)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Out {
            code: out.status.code().unwrap(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    })
    .await
    .unwrap()
}

fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
             users:\n- name: tester\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\n    namespace: {NS}\n\
             current-context: fake\n"
        ),
    )
    .unwrap();
    path
}

fn node(name: &str, capacity: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"),
            "labels": {"karpenter.sh/capacity-type": capacity}}})
}

/// Deployment `web` at `replicas`, its ReplicaSet `web-1` likewise.
fn workload(fake: &FakeApi, replicas: i32) {
    fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS, "uid": "uid-web",
            "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}))
        .unwrap();
    fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": NS, "uid": "uid-web-1",
            "creationTimestamp": "2026-11-01T00:00:00Z", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "uid-web", "controller": true}]},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap();
}

/// A pod of `web-1` on `node`, Ready unless said, with a cost if given.
fn pod(name: &str, node: &str, ready: bool, cost: Option<&str>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(c) = cost {
        annotations.insert(POD_DELETION_COST.into(), c.into());
        // the policy's own cost (without a policy, nobody reads this)
        annotations.insert("deletioncost.dev/policy".into(), "spot-first".into());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-11-20T00:00:00Z", "labels": {"app": "web"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                "uid": "uid-web-1", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "lastTransitionTime": "2026-11-20T00:00:00Z"}]}})
}

fn policy() -> Value {
    json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "spot-first", "namespace": NS,
            "creationTimestamp": "2026-11-02T00:00:00Z"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                "costs": {"spot": 0, "on-demand": 1000}, "default": 500}}]}})
}

/// Nodes spot-a and od-a; web at 4: web-a and web-b on spot (cost 0, the
/// policy's), web-c and web-d on on-demand (cost 1000).
async fn cluster(with_policy: bool) -> (Arc<FakeApi>, tempfile::TempDir) {
    let fake = Arc::new(FakeApi::start().await);
    fake.apply_json(node("spot-a", "spot")).unwrap();
    fake.apply_json(node("od-a", "on-demand")).unwrap();
    workload(&fake, 4);
    for (name, node, cost) in [
        ("web-a", "spot-a", "0"),
        ("web-b", "spot-a", "0"),
        ("web-c", "od-a", "1000"),
        ("web-d", "od-a", "1000"),
    ] {
        fake.apply_json(pod(name, node, true, Some(cost))).unwrap();
    }
    if with_policy {
        fake.apply_json(policy()).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    kubeconfig(dir.path(), &fake.url());
    (fake, dir)
}

/// Plays the Deployment and ReplicaSet controllers once: on the first
/// scale write, deletes the pods the comparator puts first over the costs
/// the pods carry then. Returns the pods it deleted.
fn controller(fake: &Arc<FakeApi>) -> tokio::task::JoinHandle<Vec<String>> {
    let fake = fake.clone();
    tokio::spawn(async move {
        eventually(Duration::from_secs(20), "a scale write", || async {
            !fake.writes_to("deployments/scale").is_empty()
        })
        .await;
        let dep = fake.get_json("Deployment", NS, "web").unwrap();
        let replicas = dep.pointer("/spec/replicas").unwrap().as_u64().unwrap() as usize;
        support::controller::delete_victims(&fake, NS, replicas)
    })
}

fn cost(fake: &FakeApi, pod: &str) -> Option<String> {
    fake.get_json("Pod", NS, pod)?["metadata"]["annotations"][POD_DELETION_COST]
        .as_str()
        .map(str::to_string)
}

fn label(fake: &FakeApi, pod: &str) -> Option<String> {
    fake.get_json("Pod", NS, pod)?["metadata"]["labels"][PREFER_FOR_SCALE_DOWN]
        .as_str()
        .map(str::to_string)
}

fn written_pods(fake: &FakeApi) -> Vec<String> {
    fake.writes_to("pods")
        .iter()
        .filter_map(|w| w.name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_the_named_pods_get_costs_below_the_rest_and_go() {
    let (fake, dir) = cluster(false).await;
    let ctl = controller(&fake);
    let out = cli(
        dir.path(),
        &["scale-in", "deployment/web", "--remove", "web-c,web-d"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let mut deleted = ctl.await.unwrap();
    deleted.sort();
    assert_eq!(deleted, ["web-c", "web-d"]);
    // the named pods only, one write each, below the other pods' 0
    assert_eq!(written_pods(&fake), ["web-c", "web-d"]);
    let scale = fake.writes_to("deployments/scale");
    assert_eq!(scale.len(), 1);
    assert_eq!(
        scale[0].json().unwrap().pointer("/spec/replicas"),
        Some(&json!(2))
    );
    assert!(fake.writes_to("pods").iter().all(|w| w.at <= scale[0].at));
    assert_eq!(
        out.stdout,
        "deployment/web in shop: 4 -> 2 replicas, removing web-c, web-d\n\
         no policy: wrote pod-deletion-cost -1 on web-c, -1 on web-d\n"
            .to_string()
            + &out.stdout[out.stdout.find("scaled in").unwrap()..]
    );
    assert!(
        out.stdout
            .ends_with("deleted: web-c, web-d (the pods named)\n"),
        "{}",
        out.stdout
    );
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_policy_the_named_pods_are_marked_and_no_cost_is_written() {
    let (fake, dir) = cluster(true).await;
    let ctl = controller(&fake);
    // web-a and web-b are the policy's own first choice: the costs in
    // place already delete them, so this passes without the operator
    let out = cli(
        dir.path(),
        &[
            "scale-in",
            "web",
            "--remove",
            "web-b,pod/web-a",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let mut deleted = ctl.await.unwrap();
    deleted.sort();
    assert_eq!(deleted, ["web-a", "web-b"]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["workload"], "deployment/web");
    assert_eq!(v["policy"], "shop/spot-first");
    assert_eq!(v["marker"], PREFER_FOR_SCALE_DOWN);
    assert_eq!(v["from"], 4);
    assert_eq!(v["to"], 2);
    assert_eq!(v["remove"], json!(["web-a", "web-b"]));
    assert_eq!(v["marked"], json!(["web-a", "web-b"]));
    assert_eq!(v["wrote"], json!([]));
    assert_eq!(v["exact"], true);
    assert_eq!(v["dryRun"], false);
    // label writes only: no cost from the command
    for w in fake.writes_to("pods") {
        let body = w.json().unwrap();
        assert!(body.pointer("/metadata/annotations").is_none(), "{body}");
        assert_eq!(
            body.pointer(&format!(
                "/metadata/labels/{}",
                PREFER_FOR_SCALE_DOWN.replace('/', "~1")
            )),
            Some(&json!("true"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_policy_nothing_is_scaled_until_the_operator_writes_the_marked_costs() {
    // a Continuous policy but no operator: the markers change no cost, so
    // a scale now would delete the spot pods; the command waits for the
    // operator's writes (bounded by --timeout), takes its markers back and
    // scales nothing
    let (fake, dir) = cluster(true).await;
    let out = cli(
        dir.path(),
        &[
            "scale-in",
            "deployment/web",
            "--remove",
            "web-c",
            "--timeout",
            "2",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr,
        "error: policy shop/spot-first did not write the marked pods' costs within 2 s: is the \
         operator running and leading? Nothing scaled, the markers are taken back\n"
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(fake.writes_to("deployments/scale").is_empty());
    assert_eq!(written_pods(&fake), ["web-c", "web-c"]);
    assert_eq!(label(&fake, "web-c"), None);
}

/// Named pods that stay get back what was written: here the test's
/// controller deletes by the costs as they were before the command wrote
/// (a scaler that acted on older state), so web-c stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_pod_that_stays_gets_its_cost_back_and_the_command_fails() {
    let (fake, dir) = cluster(false).await;
    let ctl = {
        let fake = fake.clone();
        tokio::spawn(async move {
            eventually(Duration::from_secs(20), "a scale write", || async {
                !fake.writes_to("deployments/scale").is_empty()
            })
            .await;
            fake.delete_json("Pod", NS, "web-a").unwrap();
        })
    };
    let out = cli(
        dir.path(),
        &["scale-in", "deployment/web", "--remove", "web-c"],
    )
    .await;
    ctl.await.unwrap();
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr,
        "error: the controller deleted web-a, not web-c (did something else scale or write costs \
         meanwhile?)\n"
    );
    assert!(
        out.stdout
            .ends_with("deleted: web-a\nput back what was written on web-c (not deleted)\n"),
        "{}",
        out.stdout
    );
    assert_eq!(cost(&fake, "web-c").as_deref(), Some("1000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_says_what_it_would_do_and_writes_nothing() {
    let (fake, dir) = cluster(false).await;
    let out = cli(
        dir.path(),
        &[
            "scale-in",
            "deployment/web",
            "--remove",
            "web-c",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout,
        "deployment/web in shop: 4 -> 3 replicas, removing web-c\n\
         no policy: would write pod-deletion-cost -1 on web-c\n\
         dry run: nothing written, deployment/web not scaled\n"
    );
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
    assert_eq!(cost(&fake, "web-c").as_deref(), Some("1000"));
}

/// Runs a refused `scale-in` and checks: exit 2, one `error:` line that
/// holds `says`, and no write at all.
async fn refused(fake: &FakeApi, dir: &Path, args: &[&str], says: &str) {
    let mut full = vec!["scale-in"];
    full.extend_from_slice(args);
    let out = cli(dir, &full).await;
    assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].starts_with("error: "), "{}", out.stderr);
    assert!(out.stderr.contains(says), "{says:?} not in {}", out.stderr);
    assert!(fake.writes().is_empty(), "{args:?}: {:?}", fake.writes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_is_one_line_exit_2_and_nothing_written() {
    let (fake, dir) = cluster(true).await;
    let d = dir.path();
    refused(
        &fake,
        d,
        &["deployment/web", "--remove", "web-a,nope"],
        "cannot remove exactly nope, web-a from deployment/web: nope is no active pod of \
         deployment/web",
    )
    .await;
    refused(
        &fake,
        d,
        &[
            "deployment/web",
            "--remove",
            "web-a,web-b,web-c,web-d,web-e",
        ],
        "from deployment/web: it has 4 replica(s)",
    )
    .await;
    refused(
        &fake,
        d,
        &["replicaset/web-1", "--remove", "web-a"],
        "deployment/web controls it and would scale it back: name the deployment",
    )
    .await;
    refused(
        &fake,
        d,
        &["pod/web-a", "--remove", "web-a"],
        "expected deployment/NAME or replicaset/NAME",
    )
    .await;
    refused(
        &fake,
        d,
        &["deployment/nope", "--remove", "web-a"],
        "no deployment/nope in namespace shop",
    )
    .await;

    // another pod marked: it competes with the named one
    let mut marked = fake.get_json("Pod", NS, "web-d").unwrap();
    marked["metadata"]["labels"][PREFER_FOR_SCALE_DOWN] = "true".into();
    fake.apply_json(marked).unwrap();
    fake.clear_requests();
    refused(
        &fake,
        d,
        &["deployment/web", "--remove", "web-c"],
        "web-d is marked for scale-down too (name it or remove the marker)",
    )
    .await;

    // a pod the controller deletes first whatever its cost
    fake.apply_json(pod("web-d", "od-a", false, Some("1000")))
        .unwrap();
    fake.clear_requests();
    refused(
        &fake,
        d,
        &["deployment/web", "--remove", "web-c"],
        "the controller removes web-d (not Ready) first whatever its cost",
    )
    .await;

    // a foreign cost the policy keeps on the named pod
    fake.apply_json(pod("web-d", "od-a", true, Some("1000")))
        .unwrap();
    let mut foreign = pod("web-c", "od-a", true, Some("5000"));
    foreign["metadata"]["annotations"]["deletioncost.dev/policy"] = "someone-else".into();
    fake.apply_json(foreign).unwrap();
    fake.clear_requests();
    refused(
        &fake,
        d,
        &["deployment/web", "--remove", "web-c"],
        "a cost in the way that policy shop/spot-first may not change: web-c (cost 5000)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_a_cost_at_int32s_least_value_is_in_the_way() {
    let (fake, dir) = cluster(false).await;
    fake.apply_json(pod("web-a", "spot-a", true, Some("-2147483648")))
        .unwrap();
    fake.clear_requests();
    refused(
        &fake,
        dir.path(),
        &["deployment/web", "--remove", "web-c"],
        "a cost in the way that this command may not change: web-a (cost -2147483648)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_and_a_resizing_replica_set_are_refused() {
    let (fake, dir) = cluster(false).await;
    // a second ReplicaSet of web holding replicas: a rollout
    fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-2", "namespace": NS, "uid": "uid-web-2",
            "creationTimestamp": "2026-11-02T00:00:00Z", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "uid-web", "controller": true}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap();
    fake.clear_requests();
    refused(
        &fake,
        dir.path(),
        &["deployment/web", "--remove", "web-c"],
        "it is rolling out (2 ReplicaSets hold replicas: web-1, web-2)",
    )
    .await;
    fake.delete_json("ReplicaSet", NS, "web-2").unwrap();
    // one pod short of its replicas
    fake.delete_json("Pod", NS, "web-b").unwrap();
    fake.clear_requests();
    refused(
        &fake,
        dir.path(),
        &["deployment/web", "--remove", "web-c"],
        "replicaset/web-1 is changing size (3 active pods for 4 replicas)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_that_keeps_more_replicas_is_warned_of() {
    let (fake, dir) = cluster(false).await;
    fake.apply_json(
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 3, "maxReplicas": 10}}),
    )
    .unwrap();
    let out = cli(
        dir.path(),
        &[
            "scale-in",
            "deployment/web",
            "--remove",
            "web-c,web-d",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr,
        "warning: horizontalpodautoscaler/web keeps deployment/web at 3 replica(s) or more: it \
         will scale back up from 2\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_are_refused_before_any_read() {
    let dir = tempfile::tempdir().unwrap();
    kubeconfig(dir.path(), "http://127.0.0.1:9");
    let out = cli(
        dir.path(),
        &["scale-in", "deployment/web", "--remove", "a,,b"],
    )
    .await;
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: --remove: an empty pod name (expected POD[,POD…])\n"
    );
    let out = cli(dir.path(), &["scale-in", "deployment/web"]).await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--remove"), "{}", out.stderr);
    // no kubeconfig: no --snapshot to suggest, this command has none
    let empty = tempfile::tempdir().unwrap();
    let out = cli(empty.path(), &["scale-in", "web", "--remove", "a"]).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: no kubeconfig to read the cluster with (")
            && out
                .stderr
                .ends_with("): pass --kubeconfig PATH or set KUBECONFIG\n"),
        "{}",
        out.stderr
    );
}

/// SIGTERM while a marker is being written: the write in flight finishes,
/// then the markers come off again, nothing is scaled, exit 1 saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_before_the_scale_puts_back_what_was_written_and_scales_nothing() {
    use deletion_cost_testkit::fake_api::{Fault, Verb};
    let (fake, dir) = cluster(true).await;
    fake.inject(Fault::delay(Duration::from_millis(1500)).on(Verb::Patch, "pods"));
    let home = dir.path().to_path_buf();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(["scale-in", "deployment/web", "--remove", "web-c,web-d"])
        .env("KUBECONFIG", home.join("kubeconfig"))
        .env("HOME", &home)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "a marker write in flight",
        || async {
            fake.requests()
                .iter()
                .any(|r| r.method == "PATCH" && r.name.as_deref() == Some("web-c"))
        },
    )
    .await;
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "error: interrupted before the scale: nothing scaled, what was written is put back\n"
    );
    assert!(fake.writes_to("deployments/scale").is_empty());
    // web-c was labelled (the write in flight landed), then unlabelled;
    // web-d never
    let pods_written: Vec<String> = written_pods(&fake);
    assert_eq!(pods_written, ["web-c", "web-c"]);
    assert_eq!(label(&fake, "web-c"), None);
    assert_eq!(label(&fake, "web-d"), None);
}
