//! `deletion-cost predict` run as users run it: the built binary, fixture
//! files or stdin, every input form, output form and bad-input path.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const NOW: &str = "--now=2025-01-01T12:00:00Z";

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/predict/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str], stdin: Option<&str>) -> Out {
    let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .arg("predict")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        // the command may exit (bad flags) without reading stdin: a broken pipe is fine
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    }
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn ok(args: &[&str], stdin: Option<&str>) -> Out {
    let out = run(args, stdin);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(&all, None).stdout).unwrap()
}

/// pods.json: web-d unassigned, web-e not ready, web-c ready most recently,
/// web-b cost "007" (invalid: 0), web-a cost 100; web-f Succeeded and web-g
/// deleting are left out.
const WEB_ORDER: [&str; 5] = ["web-d", "web-e", "web-c", "web-b", "web-a"];

// ---- input forms -----------------------------------------------------------

#[test]
fn json_list_prints_names_in_deletion_order() {
    let out = ok(&["-f", &fixture("pods.json"), NOW], None);
    assert_eq!(lines(&out.stdout), WEB_ORDER);
    assert!(
        out.stderr.contains("web-f (phase Succeeded)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("web-g (deletionTimestamp set)"),
        "{}",
        out.stderr
    );
}

#[test]
fn yaml_list_matches_json_list() {
    let out = ok(&["-f", &fixture("pods.yaml"), NOW], None);
    assert_eq!(lines(&out.stdout), WEB_ORDER);
}

#[test]
fn array_of_pods() {
    let out = ok(&["-f", &fixture("array.json"), NOW], None);
    assert_eq!(lines(&out.stdout), WEB_ORDER);
}

#[test]
fn single_pod() {
    let out = ok(&["-f", &fixture("single.json"), NOW], None);
    assert_eq!(lines(&out.stdout), ["web-a"]);
}

#[test]
fn stdin_with_and_without_dash() {
    let text = std::fs::read_to_string(fixture("pods.json")).unwrap();
    assert_eq!(lines(&ok(&[NOW], Some(&text)).stdout), WEB_ORDER);
    assert_eq!(lines(&ok(&["-f", "-", NOW], Some(&text)).stdout), WEB_ORDER);
}

#[test]
fn multi_document_yaml() {
    // web-a, web-b on node-1 (rank 2), web-c on node-2 (rank 1); web-a costs 100
    let out = ok(&["-f", &fixture("multi.yaml"), NOW], None);
    assert_eq!(lines(&out.stdout), ["web-b", "web-c", "web-a"]);
}

#[test]
fn an_input_without_pods_is_bad_input() {
    // `kubectl ... | deletion-cost predict` must not hide a failed kubectl
    bad(
        &[NOW],
        Some(""),
        &["no pods in <stdin> (the input is empty)"],
    );
    bad(&[NOW], None, &["no pods in <stdin> (the input is empty)"]);
    bad(&["-f", "-", NOW], Some(" \n\t\n"), &["no pods in <stdin>"]);
    bad(&["-f", "/dev/null", NOW], None, &["no pods in /dev/null"]);
    bad(
        &[NOW],
        Some("# only a comment\n---\n"),
        &["no pods in <stdin> (the input holds only comments)"],
    );
    bad(
        &[NOW],
        Some(r#"{"kind":"List","apiVersion":"v1","items":[]}"#),
        &["no pods in <stdin> (the list is empty)"],
    );
    let empty = tempfile::NamedTempFile::new().unwrap();
    let path = empty.path().to_str().unwrap();
    bad(&["-f", path, NOW], None, &[&format!("no pods in {path}")]);
    bad(
        &["-f", &fixture("pods.json"), "--related", path, NOW],
        None,
        &[&format!("no pods in {path}")],
    );
}

#[test]
fn items_that_are_not_named_pods_are_bad_input() {
    let not_a_pod = "not a Pod: no kind and no metadata.name";
    bad(&[NOW], Some("{}"), &["<stdin>: object: ", not_a_pod]);
    bad(
        &[NOW],
        Some(r#"{"foo":1}"#),
        &["<stdin>: object: ", not_a_pod, "foo"],
    );
    bad(&[NOW], Some("[{}]"), &["<stdin>: [0]: ", not_a_pod]);
    bad(&[NOW], Some("a: b"), &["<stdin>: object: ", not_a_pod]);
    bad(
        &[NOW],
        Some(r#"{"kind":"Pod"}"#),
        &["<stdin>: object: Pod without metadata.name"],
    );
    bad(
        &[NOW],
        Some(
            r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"a","uid":"1"}},{"kind":"Pod","metadata":{"name":""}}]}"#,
        ),
        &["<stdin>: items[1]: Pod without metadata.name"],
    );
}

#[test]
fn a_pod_listed_twice_is_bad_input_naming_both_items() {
    let pods: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("pods.json")).unwrap()).unwrap();
    let items = pods["items"].as_array().unwrap();
    // the same pod twice (same name and UID), as a concatenated dump would hold it
    let mut twice = pods.clone();
    twice["items"]
        .as_array_mut()
        .unwrap()
        .push(items[0].clone());
    let n = items.len();
    bad(
        &[NOW],
        Some(&twice.to_string()),
        &[&format!("<stdin>: items[{n}] (Pod shop/web-a) repeats <stdin>: items[0] (Pod shop/web-a): the same name shop/web-a")],
    );
    // another name, the same UID
    let mut same_uid = pods.clone();
    let mut copy = items[0].clone();
    copy["metadata"]["name"] = "web-z".into();
    same_uid["items"].as_array_mut().unwrap().push(copy);
    let uid = items[0]["metadata"]["uid"].as_str().unwrap();
    bad(
        &[NOW],
        Some(&same_uid.to_string()),
        &[&format!("items[{n}] (Pod shop/web-z) repeats <stdin>: items[0] (Pod shop/web-a): the same uid {uid}")],
    );
}

#[test]
fn pods_without_uid_are_ordered_with_a_warning() {
    let out = ok(
        &[NOW],
        Some(r#"[{"metadata":{"name":"b"}},{"metadata":{"name":"a","uid":"1"}}]"#),
    );
    assert_eq!(lines(&out.stdout).len(), 2);
    assert!(
        out.stderr
            .contains("warning: <stdin>: 1 pod(s) without metadata.uid (b): upstream breaks the last ties by UID"),
        "{}",
        out.stderr
    );
    let out = ok(&["-f", &fixture("pods.json"), NOW], None);
    assert!(!out.stderr.contains("metadata.uid"), "{}", out.stderr);
}

// ---- output forms ----------------------------------------------------------

#[test]
fn json_output_carries_ranks_costs_rules_and_settings() {
    let v = json(&["-f", &fixture("pods.json"), NOW]);
    assert_eq!(v["now"], "2025-01-01T12:00:00Z");
    assert_eq!(v["featureGates"]["PodDeletionCost"], true);
    assert_eq!(v["featureGates"]["LogarithmicScaleDown"], true);
    let inactive: Vec<&str> = v["inactive"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(inactive, ["web-f", "web-g"]);
    let rs = &v["replicaSets"][0];
    assert_eq!(rs["owner"]["kind"], "ReplicaSet");
    assert_eq!(rs["owner"]["name"], "web-6d4f8c");
    assert!(rs["ambiguity"].is_null());
    let pods = rs["pods"].as_array().unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, WEB_ORDER);
    let rules: Vec<&Value> = pods.iter().map(|p| &p["decidedBy"]).collect();
    assert_eq!(
        rules,
        ["unassigned", "readiness", "readyTime", "deletionCost"]
            .iter()
            .map(|r| Value::from(*r))
            .chain([Value::Null])
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    let b = &pods[3];
    assert_eq!(b["cost"], 0);
    assert_eq!(b["costAnnotation"], "007");
    assert_eq!(b["costProblem"], "invalidFirstCharacter");
    assert_eq!(pods[4]["cost"], 100);
    // node-1: web-a, web-b; node-2: web-c, web-e; unassigned: web-d
    assert_eq!(b["rank"], 2);
    assert_eq!(pods[0]["rank"], 1);
    assert_eq!(pods[2]["restarts"], 3);
    assert_eq!(pods[2]["sidecarRestarts"], 2);
    assert_eq!(pods[2]["readyAgeSeconds"], 3600);
    assert!(pods[0]["victim"].is_null());
}

#[test]
fn table_output_is_human_readable() {
    let out = ok(&["-f", &fixture("pods.json"), NOW, "-o", "table"], None);
    let l = lines(&out.stdout);
    for col in [
        "REPLICASET",
        "POD",
        "NODE",
        "PHASE",
        "READY",
        "COST",
        "RANK",
        "READY-AGE",
        "RESTARTS",
        "DECIDED-BY",
    ] {
        assert!(l[0].contains(col), "{col} missing: {}", l[0]);
    }
    assert!(!l[0].contains("VICTIM"));
    let row_b = l.iter().find(|r| r.contains("web-b")).unwrap();
    assert!(row_b.contains(r#"0 (invalid "007")"#), "{row_b}");
    assert!(row_b.contains("lower pod-deletion-cost first"), "{row_b}");
    let row_c = l.iter().find(|r| r.contains("web-c")).unwrap();
    assert!(row_c.contains("1h"), "{row_c}");
    assert!(row_c.contains("3 (+2 sidecar)"), "{row_c}");
    // rows in deletion order
    let order: Vec<&str> = l[1..6]
        .iter()
        .map(|r| r.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(order, WEB_ORDER);
    assert!(out.stdout.contains("now 2025-01-01T12:00:00Z"));
}

// ---- --scale-down-by -------------------------------------------------------

#[test]
fn scale_down_by_prints_only_victims() {
    let out = ok(
        &["-f", &fixture("pods.json"), NOW, "--scale-down-by", "2"],
        None,
    );
    assert_eq!(lines(&out.stdout), ["web-d", "web-e"]);
    let table = ok(
        &[
            "-f",
            &fixture("pods.json"),
            NOW,
            "--scale-down-by",
            "2",
            "-o",
            "table",
        ],
        None,
    );
    assert!(lines(&table.stdout)[0].contains("VICTIM"));
    let victims = table
        .stdout
        .lines()
        .filter(|r| r.split_whitespace().any(|c| c == "yes"))
        .count();
    assert_eq!(victims, 2);
    let v = json(&["-f", &fixture("pods.json"), NOW, "--scale-down-by", "2"]);
    let rs = &v["replicaSets"][0];
    assert_eq!(rs["victims"], serde_json::json!(["web-d", "web-e"]));
    assert_eq!(rs["tieAtCut"], false);
    assert_eq!(rs["pods"][1]["victim"], true);
    assert_eq!(rs["pods"][2]["victim"], false);
}

#[test]
fn scale_down_by_more_than_pods_lists_all_in_deletion_order() {
    // upstream deletes every pod without sorting; they are listed in the
    // order, not the input's (issue 41: name order read as the order)
    let all = ok(&["-f", &fixture("array.json"), NOW], None);
    let out = ok(
        &["-f", &fixture("array.json"), NOW, "--scale-down-by", "9"],
        None,
    );
    assert_eq!(lines(&out.stdout), lines(&all.stdout));
    assert_ne!(
        lines(&out.stdout),
        ["web-a", "web-b", "web-c", "web-d", "web-e"]
    );
}

fn twin(name: &str, uid: &str, ready_at: &str) -> Value {
    serde_json::json!({
        "kind": "Pod",
        "metadata": {"name": name, "uid": uid, "creationTimestamp": "2024-12-01T00:00:00Z",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                          "uid": "rs-1", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}
    })
}

#[test]
fn tie_at_the_cut_is_reported() {
    let pods = serde_json::json!([
        twin("t1", "u1", "2024-12-01T00:00:00Z"),
        twin("t2", "u2", "2024-12-01T00:00:00Z"),
        twin("t3", "u3", "2024-12-01T00:00:00Z"),
    ])
    .to_string();
    let out = ok(&[NOW, "--scale-down-by", "1"], Some(&pods));
    assert_eq!(lines(&out.stdout), ["t1"]);
    assert!(out.stderr.contains("falls inside a tie"), "{}", out.stderr);
    let out = ok(&[NOW, "--scale-down-by", "1", "-o", "json"], Some(&pods));
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["replicaSets"][0]["tieAtCut"], true);
    assert_eq!(v["replicaSets"][0]["pods"][0]["decidedBy"], "tie");
    let out = ok(&[NOW, "--scale-down-by", "1", "-o", "table"], Some(&pods));
    assert!(out.stdout.contains("falls inside a tie"), "{}", out.stdout);
}

#[test]
fn ambiguous_order_is_reported_in_json_and_table() {
    // a and c ready at one instant (c restarted more: c < a), b in the same
    // log2 bucket at another instant (UID decides): a < b < c < a.
    let mut c = twin("c", "c", "2024-12-31T11:43:20Z");
    c["status"]["containerStatuses"] = serde_json::json!([{"name": "c", "image": "", "imageID": "", "ready": true, "restartCount": 5}]);
    let pods = serde_json::json!([
        twin("a", "a", "2024-12-31T11:43:20Z"),
        twin("b", "b", "2024-12-31T11:43:19Z"),
        c,
    ])
    .to_string();
    let out = ok(&[NOW, "-o", "json"], Some(&pods));
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let amb = &v["replicaSets"][0]["ambiguity"];
    assert_eq!(amb["rule"], "readyTimeUid");
    let mut names: Vec<&str> = amb["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(out.stderr.contains("ambiguous"), "{}", out.stderr);
    let table = ok(&[NOW, "-o", "table"], Some(&pods));
    assert!(table.stdout.contains("AMBIGUOUS"), "{}", table.stdout);
}

// ---- --related, gates, versions, owners -----------------------------------

#[test]
fn related_pods_change_the_colocation_rank() {
    // alone: p1 (node-1) and p2 (node-2) tie, input order stays
    let alone = ok(&["-f", &fixture("colocate.json"), NOW], None);
    assert_eq!(lines(&alone.stdout), ["p1", "p2"]);
    // with the sibling ReplicaSet's pods: node-2 holds 3 active pods, node-1
    // one (old-3 on node-1 has failed and does not count)
    let args = [
        "-f",
        &fixture("colocate.json"),
        "--related",
        &fixture("colocate-related.json"),
        NOW,
    ];
    assert_eq!(lines(&ok(&args, None).stdout), ["p2", "p1"]);
    let v = json(&args);
    let pods = &v["replicaSets"][0]["pods"];
    assert_eq!(pods[0]["rank"], 3);
    assert_eq!(pods[1]["rank"], 1);
    assert_eq!(pods[0]["decidedBy"], "colocation");
}

/// An empty related set is valid upstream (every colocation rank is 0): an
/// empty List given to --related is taken, with a note; an empty file stays
/// bad input (`an_input_without_pods_is_bad_input`).
#[test]
fn an_empty_related_list_makes_every_rank_zero() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("array.json", "[]"),
        (
            "list.json",
            r#"{"kind":"List","apiVersion":"v1","items":[]}"#,
        ),
        ("list.yaml", "kind: List\napiVersion: v1\nitems: []\n"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let path = path.to_string_lossy().to_string();
        let args = ["-f", &fixture("colocate.json"), "--related", &path, NOW];
        let out = ok(&args, None);
        assert_eq!(lines(&out.stdout), ["p1", "p2"], "{name}");
        assert!(
            out.stderr.contains(&format!(
                "--related {path}: the list is empty: no related pods, so every colocation rank (rule 5) is 0"
            )),
            "{name}: {}",
            out.stderr
        );
        let v = json(&args);
        let pods = &v["replicaSets"][0]["pods"];
        assert_eq!(
            (pods[0]["rank"].as_i64(), pods[1]["rank"].as_i64()),
            (Some(0), Some(0)),
            "{name}"
        );
    }
}

#[test]
fn feature_gates_override() {
    let f = fixture("gates.json");
    // cheap: cost -5, ready for months; fresh: cost 50, ready a minute ago
    assert_eq!(
        lines(&ok(&["-f", &f, NOW], None).stdout),
        ["cheap", "fresh"]
    );
    let off = ok(
        &["-f", &f, NOW, "--feature-gates", "PodDeletionCost=false"],
        None,
    );
    assert_eq!(lines(&off.stdout), ["fresh", "cheap"]);
    let v = json(&[
        "-f",
        &f,
        NOW,
        "--feature-gates",
        "PodDeletionCost=false,LogarithmicScaleDown=false",
    ]);
    assert_eq!(v["featureGates"]["PodDeletionCost"], false);
    assert_eq!(v["featureGates"]["LogarithmicScaleDown"], false);
}

#[test]
fn kubernetes_version_sets_gate_defaults() {
    let f = fixture("gates.json");
    let old = ok(&["-f", &f, NOW, "--kubernetes-version", "1.21"], None);
    assert_eq!(lines(&old.stdout), ["fresh", "cheap"]);
    let old_on = ok(
        &[
            "-f",
            &f,
            NOW,
            "--kubernetes-version",
            "1.21",
            "--feature-gates",
            "PodDeletionCost=true",
        ],
        None,
    );
    assert_eq!(lines(&old_on.stdout), ["cheap", "fresh"]);
    let new = json(&["-f", &f, NOW, "--kubernetes-version", "v1.33.2"]);
    assert_eq!(new["kubernetesVersion"], "1.33");
    assert_eq!(new["featureGates"]["LogarithmicScaleDown"], true);
}

/// gates.json's pods as a JSON array led by `version` (what `kubectl version
/// -o json` prints, or the raw `/version` body).
fn with_version(version: Value) -> String {
    let list: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("gates.json")).unwrap()).unwrap();
    let mut items = vec![version];
    items.extend(list["items"].as_array().unwrap().iter().cloned());
    Value::from(items).to_string()
}

#[test]
fn the_input_s_version_sets_gate_defaults() {
    let kubectl_version = |minor: &str| {
        serde_json::json!({
            "clientVersion": {"major": "1", "minor": "36", "gitVersion": "v1.36.0"},
            "serverVersion": {"major": "1", "minor": minor, "gitVersion": format!("v1.{minor}.3")}
        })
    };
    // 1.21 defaults (both gates off) from the input, and no note
    let old = ok(
        &[NOW, "-o", "json"],
        Some(&with_version(kubectl_version("21"))),
    );
    let v: Value = serde_json::from_str(&old.stdout).unwrap();
    assert_eq!(v["kubernetesVersion"], "1.21");
    assert_eq!(v["featureGates"]["PodDeletionCost"], false);
    assert!(
        !old.stderr.contains("no Kubernetes version"),
        "{}",
        old.stderr
    );
    // the raw /version body works too, and --kubernetes-version wins over the input
    let raw =
        with_version(serde_json::json!({"major": "1", "minor": "21", "gitVersion": "v1.21.0"}));
    assert_eq!(lines(&ok(&[NOW], Some(&raw)).stdout), ["fresh", "cheap"]);
    let flag = ok(&[NOW, "--kubernetes-version", "1.30"], Some(&raw));
    assert_eq!(lines(&flag.stdout), ["cheap", "fresh"]);
    // as a YAML document before the pods
    let yaml = format!(
        "serverVersion:\n  major: \"1\"\n  minor: \"21\"\n  gitVersion: v1.21.0\n---\n{}",
        std::fs::read_to_string(fixture("pods.yaml")).unwrap()
    );
    let v: Value = serde_json::from_str(&ok(&[NOW, "-o", "json"], Some(&yaml)).stdout).unwrap();
    assert_eq!(v["kubernetesVersion"], "1.21");
    // no version anywhere: the newest defaults, said on stderr
    let none = ok(&["-f", &fixture("gates.json"), NOW], None);
    assert!(
        none.stderr.contains("note: no Kubernetes version in")
            && none.stderr.contains("1.22+ gate defaults apply"),
        "{}",
        none.stderr
    );
    let flagged = ok(
        &[
            "-f",
            &fixture("gates.json"),
            NOW,
            "--kubernetes-version",
            "1.33",
        ],
        None,
    );
    assert!(
        !flagged.stderr.contains("no Kubernetes version"),
        "{}",
        flagged.stderr
    );
    // 1.37 and later: LogarithmicScaleDown cannot be turned off, it no longer exists
    bad(
        &[NOW, "--feature-gates", "LogarithmicScaleDown=false"],
        Some(&with_version(kubectl_version("37"))),
        &[
            "--feature-gates: LogarithmicScaleDown no longer exists in Kubernetes 1.37",
            "the cluster's version: v1.37.3 in <stdin>: [0]",
        ],
    );
    bad(
        &[
            "-f",
            &fixture("gates.json"),
            "--kubernetes-version",
            "1.40",
            "--feature-gates",
            "LogarithmicScaleDown=false",
        ],
        None,
        &["removed in 1.37"],
    );
    // kubectl that could not reach the server; two inputs of two clusters
    bad(
        &[NOW],
        Some(&with_version(
            serde_json::json!({"clientVersion": {"major": "1", "minor": "36"}}),
        )),
        &["<stdin>: [0]: `kubectl version` output without serverVersion"],
    );
    let dir = tempfile::tempdir().unwrap();
    let related = dir.path().join("related.json");
    std::fs::write(&related, with_version(kubectl_version("30"))).unwrap();
    bad(
        &["--related", &related.to_string_lossy(), NOW],
        Some(&with_version(kubectl_version("21"))),
        &["another Kubernetes version than <stdin>: [0] (v1.21.3)"],
    );
}

#[test]
fn several_owners_are_ordered_separately() {
    let f = fixture("owners.json");
    let out = ok(&["-f", &f, NOW], None);
    // groups by owner kind/name, pods without a controller last
    assert_eq!(
        lines(&out.stdout),
        ["api-2", "api-1", "web-x", "web-y", "lone"]
    );
    assert!(out.stderr.contains("3 ReplicaSets"), "{}", out.stderr);
    let victims = ok(&["-f", &f, NOW, "--scale-down-by", "1"], None);
    assert_eq!(lines(&victims.stdout), ["api-2", "web-x", "lone"]);
    let v = json(&["-f", &f, NOW]);
    let owners: Vec<&Value> = v["replicaSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["owner"]["name"])
        .collect();
    assert_eq!(
        owners,
        [
            &Value::from("api-7f9"),
            &Value::from("web-6d4f8c"),
            &Value::Null
        ]
    );
}

#[test]
fn help_explains_grouping() {
    let out = ok(&["--help"], None);
    assert!(
        out.stdout.contains("controller ownerReference"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("printed last"), "{}", out.stdout);
}

// ---- bad input -------------------------------------------------------------

fn bad(args: &[&str], stdin: Option<&str>, must_mention: &[&str]) {
    let out = run(args, stdin);
    assert_eq!(out.code, 2, "{args:?}: stderr {}", out.stderr);
    assert_eq!(out.stdout, "", "{args:?}: partial stdout");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    for m in must_mention {
        assert!(
            out.stderr.contains(m),
            "{args:?}: {m:?} not in {}",
            out.stderr
        );
    }
}

#[test]
fn unreadable_file() {
    let missing = fixture("does-not-exist.json");
    bad(
        &["-f", &missing, NOW],
        None,
        &["does-not-exist.json", "cannot read"],
    );
    bad(
        &["-f", &fixture("pods.json"), "--related", &missing],
        None,
        &["does-not-exist.json"],
    );
}

#[test]
fn bad_syntax() {
    bad(
        &["-f", &fixture("bad-syntax.json"), NOW],
        None,
        &["bad-syntax.json", "not valid JSON"],
    );
    bad(
        &["-f", &fixture("bad-syntax.yaml"), NOW],
        None,
        &["bad-syntax.yaml", "not valid YAML"],
    );
    bad(&[NOW], Some("42\n"), &["<stdin>", "found a number"]);
}

#[test]
fn wrong_kind() {
    bad(
        &["-f", &fixture("wrong-kind.json"), NOW],
        None,
        &["wrong-kind.json", "items[0]", "expected a Pod", "Node"],
    );
}

#[test]
fn bad_field_names_item_and_field() {
    bad(
        &["-f", &fixture("bad-field.json"), NOW],
        None,
        &[
            "bad-field.json",
            "items[1]",
            "\"bad\"",
            "status.conditions[1].status",
        ],
    );
    bad(
        &[
            "-f",
            &fixture("pods.json"),
            "--related",
            &fixture("bad-field.json"),
            NOW,
        ],
        None,
        &["bad-field.json", "status.conditions[1].status"],
    );
}

#[test]
fn bad_flag_values() {
    let f = fixture("pods.json");
    bad(
        &["-f", &f, "--now", "yesterday"],
        None,
        &["--now", "yesterday"],
    );
    bad(
        &["-f", &f, "--feature-gates", "Foo=true"],
        None,
        &["--feature-gates", "Foo=true"],
    );
    bad(
        &["-f", &f, "--feature-gates", "PodDeletionCost=maybe"],
        None,
        &["PodDeletionCost=maybe"],
    );
    bad(
        &["-f", &f, "--kubernetes-version", "latest"],
        None,
        &["--kubernetes-version", "latest"],
    );
    bad(
        &[
            "-f",
            &f,
            "--kubernetes-version",
            "1.31",
            "--feature-gates",
            "LogarithmicScaleDown=false",
        ],
        None,
        &["LogarithmicScaleDown", "1.31"],
    );
    bad(
        &["-f", &f, "--scale-down-by", "-1"],
        None,
        &["--scale-down-by"],
    );
    bad(
        &["-f", &f, "--scale-down-by", "many"],
        None,
        &["--scale-down-by"],
    );
    bad(&["-f", &f, "-o", "xml"], None, &["xml"]);
    bad(&["-f", "-", "--related", "-"], Some("[]"), &["stdin"]);
}

// ---- bounded input -----------------------------------------------------------

/// Runs `predict` with `stdin` fed from a thread: `chunk` repeated up to
/// `total` bytes, or until it stops reading.
fn run_fed(args: &[&str], chunk: &'static [u8], total: usize) -> Out {
    run_fed_after(args, b"", chunk, total)
}

/// [`run_fed`], with `prefix` sent once before the repeated `chunk`.
fn run_fed_after(args: &[&str], prefix: &'static [u8], chunk: &'static [u8], total: usize) -> Out {
    let mut command = Command::new(env!("CARGO_BIN_EXE_deletion-cost"));
    command.arg("predict").args(args);
    let out = deletion_cost_testkit::run_fed(command, prefix, chunk, total);
    Out {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn bad_fed(args: &[&str], chunk: &'static [u8], total: usize, must_mention: &[&str]) {
    let out = run_fed(args, chunk, total);
    assert_eq!(out.code, 2, "{args:?}: stderr {}", out.stderr);
    assert_eq!(out.stdout, "");
    for m in must_mention {
        assert!(out.stderr.contains(m), "{m:?} not in {}", out.stderr);
    }
}

#[cfg(unix)]
#[test]
fn binary_input_fails_at_its_first_byte() {
    bad(
        &["-f", "/dev/zero", NOW],
        None,
        &[
            "/dev/zero: not valid JSON or YAML at line 1 column 1",
            "NUL byte",
            "stopped reading",
        ],
    );
    bad(
        &["-f", &fixture("pods.json"), "--related", "/dev/zero", NOW],
        None,
        &["/dev/zero", "NUL byte"],
    );
}

#[test]
fn endless_stdin_stops_early() {
    // what `yes | deletion-cost predict` gives: fed up to 1 GiB, refused after 1 MiB
    bad_fed(
        &[NOW],
        b"y\ny\ny\ny\ny\ny\ny\ny\n",
        1 << 30,
        &["<stdin>", "expected a Kubernetes object", "stopped reading"],
    );
    bad_fed(
        &[NOW],
        &[0; 4096],
        1 << 30,
        &[
            "<stdin>: not valid JSON or YAML at line 1 column 1",
            "NUL byte",
        ],
    );
    // JSON values one after another are refused at the first `,`
    bad_fed(
        &[NOW],
        b"{\"metadata\":{\"name\":\"p\"}},\n",
        1 << 30,
        &["<stdin>: not valid JSON at line 1 column 26: trailing characters"],
    );
    // valid JSON that never ends meets the limit
    let out = run_fed_after(
        &[NOW, "--max-input-bytes", "64Ki"],
        b"[",
        b"{\"metadata\":{\"name\":\"p\"}},\n",
        1 << 30,
    );
    assert_eq!(out.code, 2, "stderr {}", out.stderr);
    for m in [
        "<stdin>: larger than --max-input-bytes 64Ki: stopped reading",
        "raise --max-input-bytes",
    ] {
        assert!(out.stderr.contains(m), "{m:?} not in {}", out.stderr);
    }
    // and, with the default limits, --max-pods long before the 2Gi; YAML
    // items the same (streamed, not read whole up to the 2Gi). YAML under a
    // lower limit: a debug build decodes 300,000 YAML items in about a
    // minute, the feed's own time limit.
    let endless: [(&[u8], &[u8], &str); 2] = [
        (b"[", b"{\"metadata\":{\"name\":\"p\"}},\n", "300000"),
        (
            b"kind: List\nitems:\n",
            b"- {kind: Pod, metadata: {name: p}}\n",
            "30000",
        ),
    ];
    for (prefix, item, limit) in endless {
        let out = run_fed_after(&[NOW, "--max-pods", limit], prefix, item, 1 << 30);
        assert_eq!(out.code, 2, "stderr {}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "<stdin>: more than --max-pods {limit} pods: stopped reading"
            )),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn max_input_bytes_limits_files() {
    let pods = fixture("pods.json");
    bad(
        &["-f", &pods, "--max-input-bytes", "1000", NOW],
        None,
        &["pods.json: larger than --max-input-bytes 1000 bytes (the file has"],
    );
    ok(&["-f", &pods, "--max-input-bytes", "1Mi", NOW], None);
    bad(
        &["-f", &pods, "--max-input-bytes", "12X", NOW],
        None,
        &["--max-input-bytes", "unknown unit"],
    );
}

/// Issue 30, item 7: UTF-16 input (PowerShell's `>`) is named as such, with
/// the way out, on the streaming reader of `-f` and `--related`; JSON nested
/// too deeply says so.
#[test]
fn utf16_and_deep_nesting_are_said_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"uid\":\"u\"}}]";
    let mut le_bom = vec![0xff, 0xfe];
    let mut be = Vec::new();
    for unit in text.encode_utf16() {
        le_bom.extend(unit.to_le_bytes());
        be.extend(unit.to_be_bytes());
    }
    for (name, bytes) in [("le.json", le_bom), ("be.json", be)] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let path = path.to_string_lossy().into_owned();
        for args in [
            vec!["-f", path.as_str()],
            vec!["-f", &fixture("pods.json"), "--related", path.as_str()],
        ] {
            let out = run(&args, None);
            assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
            assert!(
                out.stderr.contains("is UTF-16 text, not UTF-8")
                    && out.stderr.contains("iconv -f UTF-16 -t UTF-8"),
                "{args:?}: {}",
                out.stderr
            );
            assert!(!out.stderr.contains("binary data"), "{}", out.stderr);
        }
    }
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    bad(
        &["-f", "-"],
        Some(&deep),
        &["nested too deeply (more than 128 levels of lists and maps)"],
    );
}

/// A pod of `owner` (kind, name) on `node`; all pods alike but their names
/// and UIDs, so the pods of one owner tie without the log2 buckets.
fn plain_pod(name: &str, owner: (&str, &str), phase: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "shop", "uid": format!("uid-{name}"),
            "creationTimestamp": "2025-01-01T09:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner.0, "name": owner.1,
                "uid": format!("uid-{}", owner.1), "controller": true}]
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "x"}]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2025-01-01T10:00:00Z"}]}
    })
}

/// Issue 30, item 8: stderr stays bounded whatever the input's size: one
/// line per kind of problem, lists cut after ten names with "and K more".
#[test]
fn notes_stay_short_whatever_the_input_s_size() {
    let mut items = Vec::new();
    for i in 0..40 {
        // 40 ReplicaSets whose two pods tie: a cut inside a tie in each
        for half in ["a", "b"] {
            items.push(plain_pod(
                &format!("web{i}-{half}"),
                ("ReplicaSet", &format!("web{i}")),
                "Running",
            ));
        }
        items.push(plain_pod(
            &format!("job{i}"),
            ("Job", &format!("job{i}")),
            "Running",
        ));
        items.push(plain_pod(
            &format!("done{i}"),
            ("Job", "batch"),
            "Succeeded",
        ));
    }
    let input = serde_json::json!({"kind": "List", "items": items}).to_string();
    let out = ok(
        &[
            NOW,
            "--kubernetes-version=1.30",
            "--feature-gates=LogarithmicScaleDown=false",
            "--scale-down-by=1",
        ],
        Some(&input),
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines.len() <= 6, "{}", out.stderr);
    assert!(lines.iter().all(|l| l.len() < 1000), "{}", out.stderr);
    let line = |what: &str| {
        let found: Vec<&&str> = lines.iter().filter(|l| l.contains(what)).collect();
        assert_eq!(found.len(), 1, "{what}: {}", out.stderr);
        found[0].to_string()
    };
    let inactive = line("inactive pod(s)");
    assert!(
        inactive.contains("left out 40 inactive pod(s): done0 (phase Succeeded)"),
        "{inactive}"
    );
    assert!(inactive.ends_with(" and 30 more"), "{inactive}");
    let jobs = line("does not scale in");
    assert!(jobs.contains("pods of Job/"), "{jobs}");
    assert!(
        jobs.contains(" and 30 more: a Job does not scale in"),
        "{jobs}"
    );
    let ties = line("falls inside a tie");
    assert!(ties.contains("ReplicaSet/web0, "), "{ties}");
    assert!(
        ties.contains(" and 30 more: the cut after 1 pod(s)"),
        "{ties}"
    );
}

/// Issue 30, item 4: Kubernetes' own limits (names 253 bytes, namespaces and
/// label values 63, annotations 256 KiB together) are refused with exit 2
/// naming the item and the field, on `-f` and `--related`; at the limit
/// they are taken.
#[test]
fn kubernetes_limits_are_refused_naming_the_item() {
    let pod = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut p = plain_pod(name, ("ReplicaSet", "web"), "Running");
        edit(&mut p);
        p
    };
    let list = |items: Vec<Value>| serde_json::json!({"kind": "List", "items": items}).to_string();
    let at_limit = list(vec![
        pod(&"n".repeat(253), &|_| {}),
        pod("b", &|p| {
            p["metadata"]["labels"] = serde_json::json!({"app": "v".repeat(63)});
            p["metadata"]["annotations"] = serde_json::json!({"a": "x".repeat(262_143)});
        }),
    ]);
    ok(&[NOW], Some(&at_limit));
    let long_name = "n".repeat(254);
    let cases: Vec<(Value, &str)> = vec![
        (
            pod(&long_name, &|_| {}),
            "metadata.name: 254 bytes long; Kubernetes allows at most 253",
        ),
        (
            pod("b", &|p| p["metadata"]["namespace"] = Value::from("s".repeat(64))),
            "metadata.namespace: 64 bytes long; Kubernetes allows at most 63",
        ),
        (
            pod("b", &|p| {
                p["metadata"]["labels"] = serde_json::json!({"app": "v".repeat(64)})
            }),
            "metadata.labels[\"app\"]: the value is 64 bytes long; Kubernetes allows at most 63",
        ),
        (
            pod("b", &|p| {
                p["metadata"]["annotations"] = serde_json::json!({"a": "x".repeat(262_144)})
            }),
            "metadata.annotations: keys and values together are 262145 bytes; Kubernetes allows at most 262144 (256 KiB)",
        ),
        (
            pod("b", &|p| p["spec"]["nodeName"] = Value::from("n".repeat(300))),
            "spec.nodeName: 300 bytes long",
        ),
    ];
    for (bad_pod, message) in cases {
        let input = list(vec![pod("a", &|_| {}), bad_pod]);
        let out = run(&[NOW], Some(&input));
        assert_eq!(out.code, 2, "{message}: {}", out.stderr);
        assert!(
            out.stderr.contains("<stdin>: items[1] (Pod \"")
                && out.stderr.contains(message)
                && out.stderr.contains("the API server stores no such object"),
            "{message}: {}",
            out.stderr
        );
        // the name is cut, never printed whole
        assert!(!out.stderr.contains(&long_name), "{}", out.stderr);
        assert_eq!(out.stdout, "");
        // --related reads the same way
        let dir = tempfile::tempdir().unwrap();
        let related = dir.path().join("related.json");
        std::fs::write(&related, &input).unwrap();
        let out = run(
            &[
                NOW,
                "-f",
                &fixture("pods.json"),
                "--related",
                related.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(out.code, 2, "{message}: {}", out.stderr);
        assert!(out.stderr.contains(message), "{}", out.stderr);
    }
}

/// Issue 30, item 5: cost annotations Kubernetes cannot read are read as 0,
/// as upstream does, and said once on stderr whatever the output form; the
/// table marks each.
#[test]
fn invalid_cost_annotations_are_said_once() {
    let bad = ["1e3", " 5", "0x10", "2147483648"];
    let mut items: Vec<Value> = bad
        .iter()
        .enumerate()
        .map(|(i, cost)| {
            let mut p = plain_pod(&format!("bad{i}"), ("ReplicaSet", "web"), "Running");
            p["metadata"]["annotations"] =
                serde_json::json!({"controller.kubernetes.io/pod-deletion-cost": cost});
            p
        })
        .collect();
    let mut good = plain_pod("good", ("ReplicaSet", "web"), "Running");
    good["metadata"]["annotations"] =
        serde_json::json!({"controller.kubernetes.io/pod-deletion-cost": "-5"});
    items.push(good);
    let input = serde_json::json!({"kind": "List", "items": items}).to_string();
    for output in ["names", "table", "json"] {
        let out = ok(&[NOW, "-o", output], Some(&input));
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains("pod-deletion-cost annotation"))
            .collect();
        assert_eq!(warnings.len(), 1, "{output}: {}", out.stderr);
        let w = warnings[0];
        assert!(
            w.starts_with(
                "warning: 4 pod(s) carry a controller.kubernetes.io/pod-deletion-cost annotation \
                 that is not a whole number from -2147483648 to 2147483647, which Kubernetes reads as 0"
            ),
            "{w}"
        );
        for (i, cost) in bad.iter().enumerate() {
            assert!(w.contains(&format!("bad{i} ({cost:?}: ")), "{cost}: {w}");
        }
        assert!(!w.contains("good"), "{w}");
        if output == "table" {
            assert_eq!(
                out.stdout.matches("0 (invalid ").count(),
                4,
                "{}",
                out.stdout
            );
        }
    }
    // the good pod (-5) goes first: the invalid ones count as 0
    let out = ok(&[NOW], Some(&input));
    assert_eq!(out.stdout.lines().next(), Some("good"), "{}", out.stdout);
}

// ---- issue 41, item 4: dead ends ---------------------------------------------

/// A cluster snapshot given as pods points to the commands that read one.
#[test]
fn a_snapshot_given_as_pods_points_to_snapshot() {
    let cluster = format!(
        "{}/config/examples/cluster.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    for args in [
        vec!["-f", cluster.as_str(), NOW],
        vec![
            "-f",
            &fixture("pods.json"),
            "--related",
            cluster.as_str(),
            NOW,
        ],
    ] {
        let out = run(&args, None);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr.contains("expected a Pod, found kind"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr
                .contains(&format!("deletion-cost predict --snapshot {cluster}"))
                && out
                    .stderr
                    .contains(&format!("deletion-cost plan --snapshot {cluster}")),
            "{}",
            out.stderr
        );
    }
    // and what it points to works
    let out = ok(
        &[
            "--snapshot",
            &cluster,
            "-n",
            "shop",
            "--now=2026-11-22T03:00:00Z",
        ],
        None,
    );
    assert!(
        lines(&out.stdout).contains(&"web-7d9f8c6b5-f8jls"),
        "{}",
        out.stdout
    );
}

/// `--scale-down-by 0` says why nothing is printed; by as many pods as there
/// are or more, the victims are every pod in deletion order (they were
/// listed by name, as upstream receives them unsorted).
#[test]
fn scale_down_by_zero_or_by_everything() {
    let zero = ok(
        &["-f", &fixture("pods.json"), NOW, "--scale-down-by", "0"],
        None,
    );
    assert!(zero.stdout.is_empty(), "{}", zero.stdout);
    assert!(
        zero.stderr
            .contains("note: --scale-down-by 0: scaling in by 0 deletes no pod"),
        "{}",
        zero.stderr
    );
    for n in ["5", "50"] {
        let all = ok(
            &["-f", &fixture("pods.json"), NOW, "--scale-down-by", n],
            None,
        );
        assert_eq!(lines(&all.stdout), WEB_ORDER, "--scale-down-by {n}");
        let v = json(&["-f", &fixture("pods.json"), NOW, "--scale-down-by", n]);
        assert_eq!(v["replicaSets"][0]["victims"], serde_json::json!(WEB_ORDER));
    }
    // plan lists them so too
    let o = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(["plan", "--now=2026-11-22T03:00:00Z", "--scale-down-by", "8"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let order: Vec<&str> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[0].parse::<usize>().is_ok() && f[1].starts_with("web-"))
                .then(|| f[1])
        })
        .collect();
    assert_eq!(order.len(), 8, "{out}");
    assert!(
        out.contains(&format!("scale down by 8: deletes {}\n", order.join(", "))),
        "{out}"
    );
}

/// The note for an input without a Kubernetes version is one short line.
#[test]
fn the_version_note_is_one_short_line() {
    let out = ok(&["-f", &fixture("gates.json"), NOW], None);
    let note: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("no Kubernetes version"))
        .collect();
    assert_eq!(note.len(), 1, "{}", out.stderr);
    let without_source = note[0].replace(&fixture("gates.json"), "FILE");
    assert!(
        without_source.chars().count() <= 100,
        "{} characters: {without_source}",
        without_source.chars().count()
    );
}

/// Started on a terminal with no input, `predict` says it reads standard
/// input instead of waiting in silence; Ctrl-D ends the input.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn on_a_terminal_predict_says_it_reads_stdin() {
    use std::io::{BufRead, BufReader};
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two new descriptors into the out-pointers; the
    // other pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    for fd in [master, slave] {
        // SAFETY: fcntl on descriptors we own: close them in other children
        assert_eq!(
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
            0
        );
    }
    // SAFETY: both descriptors were just opened and are owned here only.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(["predict", NOW])
        .env_remove("DELETION_COST_LOG_FORMAT")
        .stdin(Stdio::from(slave))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("note: reading pods from standard input (end with Ctrl-D)"),
        "{first}"
    );
    // Ctrl-D on an empty line: end of input, which holds no pods
    let mut term = std::fs::File::from(master);
    term.write_all(b"\x04").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{rest}");
    assert!(rest.contains("no pods in <stdin>"), "{rest}");
    // from a pipe (no terminal) no such note
    let piped = run(&[NOW], Some(""));
    assert!(
        !piped.stderr.contains("reading pods from standard input"),
        "{}",
        piped.stderr
    );
}
