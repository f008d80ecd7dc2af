//! Live reads (`predict deployment/web -n shop`, `plan -n shop`, `explain
//! pod/NAME`) against the fake API server, through a kubeconfig file the
//! test writes (loopback only): each answer equals, byte for byte, the
//! answer from a saved snapshot of the same objects; the reads are
//! read-only; missing kubeconfig, unreachable server, 403 and unknown names
//! fail with clear messages and the CLI's exit codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use deletion_cost_testkit::fake_api::{FakeApi, Fault, Verb};
use serde_json::{json, Value};

const NOW: &str = "2026-11-22T12:00:00Z";

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary with no kubeconfig of the machine in reach: HOME is the
/// test's directory and KUBECONFIG is unset.
async fn cli(home: &Path, args: &[&str]) -> Out {
    let home = home.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    // the fake serves on this runtime while the child runs
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .args(&args)
            .env_remove("KUBECONFIG")
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

/// Fails naming what was looked for and where.
fn contains(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} not in:\n{text}");
}

fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
             users:\n- name: tester\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\n    namespace: default\n\
             current-context: fake\n"
        ),
    )
    .unwrap();
    path
}

fn node(name: &str, capacity: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"),
                     "labels": {"karpenter.sh/capacity-type": capacity}},
    })
}

fn deployment(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
                     "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    })
}

fn replica_set(ns: &str, name: &str, deployment: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
                     "creationTimestamp": "2026-11-01T00:00:00Z",
                     "labels": {"app": deployment},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                         "name": deployment, "uid": format!("uid-{ns}-{deployment}"), "controller": true}]},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": deployment}}},
    })
}

#[allow(clippy::too_many_arguments)]
fn pod(
    ns: &str,
    name: &str,
    rs: &str,
    app: &str,
    node: &str,
    ready: bool,
    cost: Option<&str>,
    created: &str,
) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(c) = cost {
        annotations.insert(
            "controller.kubernetes.io/pod-deletion-cost".into(),
            c.into(),
        );
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
                     "creationTimestamp": created, "labels": {"app": app},
                     "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "name": rs, "uid": format!("uid-{ns}-{rs}"), "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                                   "lastTransitionTime": "2026-11-20T00:00:00Z"}],
                   "containerStatuses": [{"name": "c", "restartCount": 1, "ready": ready,
                       "image": "busybox", "imageID": "", "started": true}]},
    })
}

fn policy(ns: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-11-02T00:00:00Z"},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                                          "costs": {"spot": 0, "on-demand": 1000}, "default": 500}}],
        },
    })
}

/// Two namespaces: `shop` with Deployment web (two ReplicaSets) and api,
/// and `other` with its own web; costs of every kind (the policy's, a
/// foreign one, an invalid one, none).
fn seed(fake: &FakeApi) {
    for n in [
        node("spot-a", "spot"),
        node("spot-b", "spot"),
        node("od-a", "on-demand"),
    ] {
        fake.apply_json(n).unwrap();
    }
    for (ns, d) in [("shop", "web"), ("shop", "api"), ("other", "web")] {
        fake.apply_json(deployment(ns, d)).unwrap();
    }
    for (ns, rs, d) in [
        ("shop", "web-new", "web"),
        ("shop", "web-old", "web"),
        ("shop", "api-1", "api"),
        ("other", "web-1", "web"),
    ] {
        fake.apply_json(replica_set(ns, rs, d)).unwrap();
    }
    let t = "2026-11-21T00:00:00Z";
    let old = "2026-11-01T00:00:00Z";
    let mut web_a = pod(
        "shop",
        "web-new-a",
        "web-new",
        "web",
        "spot-a",
        true,
        Some("0"),
        t,
    );
    web_a["metadata"]["annotations"]["deletioncost.dev/policy"] = "web".into();
    for p in [
        web_a,
        pod(
            "shop",
            "web-new-b",
            "web-new",
            "web",
            "od-a",
            true,
            Some("1000"),
            t,
        ),
        pod(
            "shop",
            "web-new-c",
            "web-new",
            "web",
            "spot-a",
            false,
            None,
            t,
        ),
        pod(
            "shop",
            "web-new-d",
            "web-new",
            "web",
            "spot-b",
            true,
            Some("7"),
            old,
        ),
        pod(
            "shop",
            "web-new-e",
            "web-new",
            "web",
            "od-a",
            true,
            Some("1e3"),
            old,
        ),
        pod(
            "shop",
            "web-old-a",
            "web-old",
            "web",
            "spot-a",
            true,
            None,
            old,
        ),
        pod("shop", "api-1-a", "api-1", "api", "spot-a", true, None, t),
        pod(
            "shop",
            "api-1-b",
            "api-1",
            "api",
            "od-a",
            true,
            Some("-5"),
            t,
        ),
        pod("other", "web-1-a", "web-1", "web", "spot-a", true, None, t),
    ] {
        fake.apply_json(p).unwrap();
    }
    fake.apply_json(policy("shop", "web", "web")).unwrap();
}

/// What `kubectl get pods,nodes,replicasets,deployments -A -o json` and
/// `kubectl version -o json` print for the fake's objects, as two files of
/// a snapshot directory; and the policies of `shop` as a file.
fn save_snapshot(fake: &FakeApi, dir: &Path) -> (String, String) {
    let snap = dir.join("snapshot");
    std::fs::create_dir_all(&snap).unwrap();
    let mut items = Vec::new();
    for (kind, api_version) in [
        ("Pod", "v1"),
        ("Node", "v1"),
        ("ReplicaSet", "apps/v1"),
        ("Deployment", "apps/v1"),
    ] {
        for mut o in fake.list_json(kind, None) {
            o["kind"] = kind.into();
            o["apiVersion"] = api_version.into();
            items.push(o);
        }
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(
        snap.join("cluster.json"),
        serde_json::to_string_pretty(&list).unwrap(),
    )
    .unwrap();
    let version =
        json!({"serverVersion": {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake"}});
    std::fs::write(snap.join("version.json"), version.to_string()).unwrap();
    let mut policies = fake.list_json("DeletionCostPolicy", Some("shop"));
    for p in &mut policies {
        p["kind"] = "DeletionCostPolicy".into();
        p["apiVersion"] = "deletioncost.dev/v1alpha1".into();
    }
    let policy_file = dir.join("policies.json");
    std::fs::write(
        &policy_file,
        serde_json::to_string_pretty(
            &json!({"apiVersion": "v1", "kind": "List", "items": policies}),
        )
        .unwrap(),
    )
    .unwrap();
    (
        snap.to_string_lossy().into_owned(),
        policy_file.to_string_lossy().into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_reads_answer_as_the_snapshot_of_the_same_objects() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let kc = kc.to_str().unwrap();
    let (snap, policies) = save_snapshot(&fake, dir.path());
    fake.clear_requests();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![
                "predict",
                "deployment/web",
                "-n",
                "shop",
                "-o",
                "json",
                "--scale-down-by",
                "2",
            ],
            vec![],
        ),
        (
            vec!["predict", "deploy/web", "-n", "shop", "-o", "table"],
            vec![],
        ),
        (vec!["predict", "deployment/web", "-n", "shop"], vec![]),
        (
            vec!["predict", "replicaset/web-old", "-n", "shop", "-o", "table"],
            vec![],
        ),
        (
            vec![
                "predict",
                "-n",
                "shop",
                "-o",
                "table",
                "--scale-down-by",
                "1",
            ],
            vec![],
        ),
        (vec!["predict", "-l", "app=web", "-A", "-o", "json"], vec![]),
        (vec!["plan", "-n", "shop"], vec!["--policy", &policies]),
        (
            vec!["plan", "-A", "-o", "json"],
            vec!["--policy", &policies],
        ),
        (
            vec!["plan", "-n", "shop", "-o", "json", "--scale-down-by", "2"],
            vec!["--policy", &policies],
        ),
        (
            vec!["explain", "pod/web-new-c", "-n", "shop"],
            vec!["--policy", &policies],
        ),
        (
            vec!["explain", "pod/web-new-a", "-n", "shop", "-o", "json"],
            vec!["--policy", &policies],
        ),
        (
            vec!["explain", "pod/web-new-e", "-n", "shop"],
            vec!["--policy", &policies],
        ),
    ];
    for (args, snapshot_extra) in cases {
        let mut live = args.clone();
        live.extend(["--now", NOW, "--kubeconfig", kc]);
        let mut saved = args.clone();
        saved.extend(["--now", NOW, "--snapshot", &snap]);
        saved.extend(snapshot_extra);
        let l = cli(dir.path(), &live).await;
        let s = cli(dir.path(), &saved).await;
        assert_eq!(l.code, 0, "{live:?}: {}", l.stderr);
        assert_eq!(s.code, 0, "{saved:?}: {}", s.stderr);
        assert!(!l.stdout.is_empty(), "{live:?}");
        assert_eq!(l.stdout, s.stdout, "{live:?} and {saved:?} differ");
        // the server's /version stands for the snapshot's version
        assert!(!l.stderr.contains("no Kubernetes version"), "{}", l.stderr);
    }
    assert!(
        fake.writes().is_empty(),
        "live reads wrote: {:?}",
        fake.writes()
    );
    let verbs: Vec<Verb> = fake.requests().iter().filter_map(|r| r.verb).collect();
    assert!(
        verbs.iter().all(|v| matches!(v, Verb::Get | Verb::List)),
        "{verbs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_read_live_orders_as_predict_over_its_pods_file() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let mut pods: Vec<Value> = fake
        .list_json("Pod", Some("shop"))
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == "web")
        .collect();
    for p in &mut pods {
        p["kind"] = "Pod".into();
        p["apiVersion"] = "v1".into();
    }
    let file = dir.path().join("pods.json");
    std::fs::write(
        &file,
        json!({"kind": "List", "apiVersion": "v1", "items": pods}).to_string(),
    )
    .unwrap();
    let live = cli(
        dir.path(),
        &[
            "predict",
            "deployment/web",
            "-n",
            "shop",
            "-o",
            "json",
            "--now",
            NOW,
            "--kubernetes-version",
            "1.33",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
    )
    .await;
    let saved = cli(
        dir.path(),
        &[
            "predict",
            "-f",
            file.to_str().unwrap(),
            "-o",
            "json",
            "--now",
            NOW,
            "--kubernetes-version",
            "1.33",
        ],
    )
    .await;
    assert_eq!(live.code, 0, "{}", live.stderr);
    assert_eq!(live.stdout, saved.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_place_rules_and_cost_origin() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let kc = kc.to_str().unwrap();
    let out = cli(
        dir.path(),
        &[
            "explain",
            "pod/web-new-c",
            "-n",
            "shop",
            "--now",
            NOW,
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // not Ready: first of the ReplicaSet's five
    contains(&out.stdout, "order:      1 of 5");
    contains(&out.stdout, "before:     #2 ");
    contains(&out.stdout, "not-Ready pods first");
    contains(&out.stdout, "from:       none");
    contains(&out.stdout, "policy:     shop/web");
    contains(&out.stdout, "wants 0: set 0");
    let ours = cli(
        dir.path(),
        &[
            "explain",
            "web-new-a",
            "-n",
            "shop",
            "--now",
            NOW,
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    assert!(
        ours.stdout
            .contains("from:       policy shop/web, from its signals"),
        "{}",
        ours.stdout
    );
    contains(&ours.stdout, "billingClass spot [0]");
    let foreign = cli(
        dir.path(),
        &[
            "explain",
            "pod/web-new-d",
            "-n",
            "shop",
            "--now",
            NOW,
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    contains(&foreign.stdout, "from:       foreign");
    contains(&foreign.stdout, "keep (not ours)");
    // from a snapshot without --policy: the operator's mark is still read
    let (snap, _) = save_snapshot(&fake, dir.path());
    let saved = cli(
        dir.path(),
        &[
            "explain",
            "pod/web-new-a",
            "-n",
            "shop",
            "--now",
            NOW,
            "--snapshot",
            &snap,
        ],
    )
    .await;
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    contains(
        &saved.stdout,
        "written by the operator for policy shop/web, which is not among the policies read",
    );
    assert!(
        saved.stdout.contains(&format!(
            "policy:     none: {snap} holds no DeletionCostPolicy (give one with --policy FILE)"
        )),
        "{}",
        saved.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_read_errors_name_what_is_wrong() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &fake.url());
    let kc = kc.to_str().unwrap();

    // no kubeconfig at all
    let out = cli(dir.path(), &["predict", "deployment/web", "-n", "shop"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    contains(&out.stderr, "no kubeconfig");
    contains(&out.stderr, "--kubeconfig PATH");
    let out = cli(
        dir.path(),
        &["plan", "-n", "shop", "--kubeconfig", "/nonexistent/kc"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    contains(&out.stderr, "/nonexistent/kc: no such file");
    let out = cli(
        dir.path(),
        &[
            "predict",
            "-n",
            "shop",
            "--kubeconfig",
            kc,
            "--context",
            "nope",
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    contains(&out.stderr, "no such context");

    // unknown names: bad input, as a name missing from a snapshot
    let out = cli(
        dir.path(),
        &[
            "predict",
            "deployment/nope",
            "-n",
            "shop",
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("deployment/nope not found in namespace shop"),
        "{}",
        out.stderr
    );
    let out = cli(
        dir.path(),
        &[
            "predict",
            "deployment/api",
            "-n",
            "other",
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    // a live read looks in the one namespace asked for
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("deployment/api not found in namespace other"),
        "{}",
        out.stderr
    );
    let out = cli(
        dir.path(),
        &["explain", "pod/nope", "-n", "shop", "--kubeconfig", kc],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    contains(&out.stderr, "pod/nope not found");
    let out = cli(dir.path(), &["plan", "-n", "empty", "--kubeconfig", kc]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("no DeletionCostPolicy in namespace empty"),
        "{}",
        out.stderr
    );

    // from a snapshot, a name found elsewhere says where
    let (snap, _) = save_snapshot(&fake, dir.path());
    let out = cli(
        dir.path(),
        &[
            "predict",
            "deployment/api",
            "-n",
            "other",
            "--snapshot",
            &snap,
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("deployment/api not found in namespace other (found in namespace shop)"),
        "{}",
        out.stderr
    );
    let out = cli(
        dir.path(),
        &[
            "predict",
            "pod/web-new-a",
            "-n",
            "shop",
            "--snapshot",
            &snap,
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    contains(&out.stderr, "explain pod/web-new-a");

    // with --snapshot, -n picks the policies planned
    let (snap, policies) = save_snapshot(&fake, dir.path());
    let out = cli(
        dir.path(),
        &[
            "plan",
            "-n",
            "other",
            "--snapshot",
            &snap,
            "--policy",
            &policies,
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("-n other: no DeletionCostPolicy of namespace other in"),
        "{}",
        out.stderr
    );

    // refused: the verb and resource named
    fake.inject(Fault::status(403).on(Verb::List, "pods").always());
    let out = cli(
        dir.path(),
        &[
            "predict",
            "deployment/web",
            "-n",
            "shop",
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    contains(&out.stderr, "may not list pods in namespace shop");
    fake.clear_faults();
    // nodes are cluster-scoped: a namespace's user may not list them
    fake.inject(Fault::status(403).on(Verb::List, "nodes").always());
    let out = cli(dir.path(), &["plan", "-n", "shop", "--kubeconfig", kc]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("may not list nodes: planned without nodes"),
        "{}",
        out.stderr
    );
    fake.clear_faults();
    fake.inject(
        Fault::status(404)
            .on(Verb::List, "deletioncostpolicies")
            .always(),
    );
    let out = cli(dir.path(), &["plan", "-n", "shop", "--kubeconfig", kc]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    contains(&out.stderr, "no DeletionCostPolicy resource");
    fake.clear_faults();

    // nothing listens
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gone = dir.path().join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let kc_gone = kubeconfig(&gone, &format!("http://127.0.0.1:{port}"));
    let out = cli(
        dir.path(),
        &[
            "predict",
            "-n",
            "shop",
            "--kubeconfig",
            kc_gone.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cannot reach the API server at http://127.0.0.1:"),
        "{}",
        out.stderr
    );

    // file input and live flags do not mix
    let out = cli(dir.path(), &["predict", "-f", "x.json", "-n", "shop"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let out = cli(
        dir.path(),
        &[
            "plan",
            "--snapshot",
            "x",
            "--policy",
            "y",
            "--kubeconfig",
            kc,
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    contains(&out.stderr, "--snapshot and --kubeconfig");
}
