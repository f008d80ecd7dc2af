//! `deletion-cost plan` as a user runs it: the bundled example, every example
//! policy, a live Prometheus, bad input, and a cluster beside an autoscaler
//! (with `explain` and the page over it).

use std::process::{Command, Output};

use deletion_cost_testkit::prometheus::{openmetrics, unix_now, PrometheusServer};

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .arg("plan")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const NOW: &str = "--now=2026-11-22T03:00:00Z";

#[test]
fn bundled_example_runs_with_no_arguments() {
    let o = plan(&[NOW]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Policy shop/web"), "{out}");
    // spot pods first, then pay-as-you-go, then reserved; least utilised first within
    assert!(
        out.contains("web-7d9f8c6b5-4xk2p  spot-a1      spot [0]           0.120 [0]"),
        "{out}"
    );
    assert!(
        out.contains("keep (not ours)"),
        "the foreign cost is left alone:\n{out}"
    );
    assert!(
        out.contains("scale down by 2: deletes web-7d9f8c6b5-f8jls, web-7d9f8c6b5-4xk2p"),
        "{out}"
    );
    assert!(
        out.contains("not Ready (upstream deletes them before Ready pods)"),
        "{out}"
    );
}

#[test]
fn json_output_carries_the_whole_plan() {
    let o = plan(&[NOW, "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v[0];
    assert_eq!(p["policy"], "shop/web");
    assert_eq!(p["patches"].as_array().unwrap().len(), 7);
    let rs = &p["replicaSets"][0];
    assert_eq!(rs["verdict"], "NotAsIntended");
    assert_eq!(rs["mismatches"][0]["reason"], "NotReady");
    assert_eq!(rs["relatedPods"], 8);
    // what it is worth only with --prices
    assert!(p.get("savings").is_none());
}

/// Saved samples are judged stale as of --now, or of the current time when
/// --now is not given (they used to count as fresh then, so the same files
/// planned differently with and without --now, silently); a signal none of
/// whose samples is usable says so.
#[test]
fn samples_are_judged_as_of_now_and_an_unusable_file_is_named() {
    let args = |now: Option<&str>| {
        let mut a = vec![
            "--policy",
            "config/examples/combined.yaml",
            "--snapshot",
            "config/examples/cluster.yaml",
            "--samples",
            "config/examples/samples.json",
            "-o",
            "json",
        ];
        a.extend(now);
        plan(&a)
    };
    let warning = "spec.signals[1] (utilization): all 8 samples in config/examples/samples.json are older than maxAge (600s)";
    // taken at 03:00: fresh at 03:05, stale at 03:11 and today
    let fresh = args(Some("--now=2026-11-22T03:05:00Z"));
    assert!(fresh.status.success(), "{}", stderr(&fresh));
    assert!(!stderr(&fresh).contains(warning), "{}", stderr(&fresh));
    let late = args(Some("--now=2026-11-22T03:11:00Z"));
    assert!(
        stderr(&late).contains(&format!("{warning} as of 2026-11-22T03:11:00Z (--now)")),
        "{}",
        stderr(&late)
    );
    let today = args(None);
    assert!(stderr(&today).contains(warning), "{}", stderr(&today));
    assert!(
        stderr(&today).contains("(the current time)") && stderr(&today).contains("give --now"),
        "{}",
        stderr(&today)
    );
    // the stale plans agree with each other, and differ from the fresh one
    let patches = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v[0]["patches"].clone()
    };
    assert_eq!(patches(&late), patches(&today));
    assert_ne!(patches(&fresh), patches(&today));
}

/// The files `plan --help` names as the bundled example's, given explicitly.
const EXAMPLE_FILES: [&str; 8] = [
    "--policy",
    "config/examples/combined.yaml",
    "--snapshot",
    "config/examples/cluster.yaml",
    "--samples",
    "config/examples/samples.json",
    "--scale-down-by",
    "2",
];

/// The warning lines of a run's stderr.
fn warnings(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .map(str::to_string)
        .collect()
}

/// Issue 41, item 1: the bundled example is the run `plan --help` says it
/// is. With no files, with the README's --now, and with the same files
/// given explicitly, the plan is the one the README prints, byte for byte,
/// with no warning (the explicit files once judged every sample stale and
/// planned every pod `keep`); the example's samples are fresh at its time.
#[test]
fn the_bundled_example_is_the_files_given_explicitly() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let shown = readme
        .split("$ cargo run -q -- plan --now 2026-11-22T03:00:00Z\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README shows the bundled plan");
    let help = stdout(&plan(&["--help"]));
    let said = format!("{} --now 2026-11-22T03:00:00Z", EXAMPLE_FILES.join(" "));
    assert!(
        help.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&said),
        "plan --help names the bundled run as `{said}`:\n{help}"
    );
    let runs = [
        plan(&[]),
        plan(&[NOW]),
        plan(&[&EXAMPLE_FILES[..], &[NOW]].concat()),
    ];
    for o in &runs {
        assert!(o.status.success(), "{}", stderr(o));
        assert_eq!(stdout(o), shown, "the README's plan");
        assert_eq!(warnings(o), Vec::<String>::new());
        assert!(stdout(o).contains("8 pods selected, 7 patches"));
    }
    // and as JSON, alike
    let json = |extra: &[&str]| stdout(&plan(&[extra, &["-o", "json"]].concat()));
    assert_eq!(json(&[]), json(&[&EXAMPLE_FILES[..], &[NOW]].concat()));
    // at another --now both judge the samples as of it, and agree
    let late = "--now=2026-11-22T04:00:00Z";
    let (bundled, explicit) = (plan(&[late]), plan(&[&EXAMPLE_FILES[..], &[late]].concat()));
    assert_eq!(stdout(&bundled), stdout(&explicit));
    assert_eq!(warnings(&bundled), warnings(&explicit));
    assert!(
        warnings(&bundled)
            .iter()
            .any(|w| w.contains("are older than maxAge (600s) as of 2026-11-22T04:00:00Z (--now)")),
        "{}",
        stderr(&bundled)
    );
}

/// Issue 55, item 6: bare `plan` is the explicit flags `--help` names, for
/// every other flag too: the input limits apply to the bundled files
/// (they were not read through them), `--prices` needs no --scale-down-by
/// (the example scales down by 2 already; it exited 2), and stderr is the
/// same (the version note came in the explicit form only: the example
/// records its cluster's version now, so neither has it).
#[test]
fn bare_plan_is_the_explicit_flags_whatever_else_is_given() {
    let cases: [&[&str]; 7] = [
        &[],
        &["--max-input-bytes", "1k"],
        &["--max-input-bytes", "4k"],
        &["--max-pods", "3"],
        &["--prices", "config/examples/prices.yaml"],
        &["--prices", "config/examples/prices.yaml", "-o", "json"],
        &["-o", "html"],
    ];
    for extra in cases {
        let bare = plan(&[extra, &[NOW]].concat());
        let explicit = plan(&[&EXAMPLE_FILES[..], extra, &[NOW]].concat());
        assert_eq!(
            bare.status.code(),
            explicit.status.code(),
            "{extra:?}: {}",
            stderr(&bare)
        );
        assert_eq!(stderr(&bare), stderr(&explicit), "{extra:?}");
        assert_eq!(stdout(&bare), stdout(&explicit), "{extra:?}");
        assert!(
            !stderr(&bare).contains("no Kubernetes version"),
            "{extra:?}"
        );
    }
    let small = plan(&["--max-input-bytes", "1k", NOW]);
    assert_eq!(small.status.code(), Some(2));
    assert!(
        stderr(&small).contains("config/examples/combined.yaml: larger than --max-input-bytes"),
        "{}",
        stderr(&small)
    );
    let few = plan(&["--max-pods", "3", NOW]);
    assert_eq!(few.status.code(), Some(2));
    assert!(
        stderr(&few).contains("config/examples/cluster.yaml: more than --max-pods 3 pods"),
        "{}",
        stderr(&few)
    );
    let priced = plan(&["--prices", "config/examples/prices.yaml", NOW]);
    assert!(priced.status.success(), "{}", stderr(&priced));
    assert!(
        stdout(&priced).contains("What it is worth: scale down by 2"),
        "{}",
        stdout(&priced)
    );
}

/// Issue 41, item 1: `explain` with the example's files says of each pod
/// what `plan` says: its signals, the cost it wants and the patch.
#[test]
fn explain_agrees_with_plan_on_every_pod() {
    let o = plan(&[&EXAMPLE_FILES[..], &[NOW, "-o", "json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let table = stdout(&plan(&[NOW]));
    let pods = v[0]["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 8);
    for pod in pods {
        let name = pod["name"].as_str().unwrap();
        let row = table
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not in\n{table}"));
        let patch = row.rsplit("  ").next().unwrap().trim();
        let e = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .args([
                "explain",
                &format!("pod/{name}"),
                "-n",
                "shop",
                NOW,
                "-o",
                "json",
            ])
            .args(&EXAMPLE_FILES[..6])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(e.status.success(), "{name}: {}", stderr(&e));
        assert!(warnings(&e).is_empty(), "{name}: {}", stderr(&e));
        let x: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
        let view = &x["policy"];
        assert_eq!(view["wanted"], pod["desired"], "{name}");
        assert_eq!(view["action"], patch, "{name}: plan says {patch:?}");
        let values = |signals: &serde_json::Value| -> Vec<serde_json::Value> {
            signals
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["value"].clone())
                .collect()
        };
        assert_eq!(values(&view["signals"]), values(&pod["signals"]), "{name}");
    }
    // stale samples: explain warns as plan does
    let e = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args([
            "explain",
            "pod/web-7d9f8c6b5-f8jls",
            "-n",
            "shop",
            "--now=2026-11-22T04:00:00Z",
        ])
        .args(&EXAMPLE_FILES[..6])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        stderr(&e)
            .contains("warning: policy shop/web: spec.signals[1] (utilization): all 8 samples"),
        "{}",
        stderr(&e)
    );
}

#[test]
fn every_example_policy_plans() {
    for f in [
        "spot-first.yaml",
        "payg-first.yaml",
        "least-utilised.yaml",
        "consolidation.yaml",
        "zone-balance.yaml",
        "combined.yaml",
    ] {
        let policy = format!("config/examples/{f}");
        let o = plan(&[
            NOW,
            "--policy",
            &policy,
            "--snapshot",
            "config/examples/cluster.yaml",
            "--samples",
            "config/examples/samples.json",
            "--scale-down-by",
            "3",
        ]);
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        assert!(stdout(&o).contains("scale down by 3: deletes"), "{f}");
    }
    // a directory snapshot reads every manifest in it
    let o = plan(&[
        NOW,
        "--policy",
        "config/examples/spot-first.yaml",
        "--snapshot",
        "config/examples",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Issue 55, item 1: stderr carries only `note:`, `warning:` and `error:`
/// lines, and `-q` leaves the notes out: the commands docs/policies.md
/// gives for each example (samples given to a policy without a utilisation
/// signal once printed a timestamped log line, which `-q` did not silence).
#[test]
fn stderr_holds_notes_and_warnings_only_and_quiet_silences_the_notes() {
    for f in [
        "spot-first.yaml",
        "payg-first.yaml",
        "least-utilised.yaml",
        "consolidation.yaml",
        "zone-balance.yaml",
        "combined.yaml",
    ] {
        let policy = format!("config/examples/{f}");
        let args = [
            "--policy",
            &policy,
            "--snapshot",
            "config/examples/cluster.yaml",
            "--samples",
            "config/examples/samples.json",
            NOW,
        ];
        let loud = plan(&args);
        assert!(loud.status.success(), "{f}: {}", stderr(&loud));
        for line in stderr(&loud).lines() {
            assert!(
                ["note: ", "warning: "].iter().any(|p| line.starts_with(p)),
                "{f}: a line that is no note or warning: {line:?}"
            );
        }
        let quiet = plan(&[&args[..], &["-q"]].concat());
        assert!(quiet.status.success(), "{f}: {}", stderr(&quiet));
        assert_eq!(stderr(&quiet), "", "{f}: -q leaves nothing to say here");
        assert_eq!(stdout(&quiet), stdout(&loud), "{f}");
    }
    // the note names the policy and the file
    let o = plan(&[
        "--policy",
        "config/examples/spot-first.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--samples",
        "config/examples/samples.json",
        NOW,
    ]);
    assert_eq!(
        stderr(&o),
        "note: policy shop/web-spot-first: it has no utilization signal, so the samples in \
         config/examples/samples.json are not used\n"
    );
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--policy",
                "nope.yaml",
                "--snapshot",
                "config/examples/cluster.yaml",
            ],
            "nope.yaml",
        ),
        (
            &["--policy", "config/examples/combined.yaml"],
            "--policy and --snapshot go together",
        ),
        (
            &[
                "--policy",
                "config/examples/cluster.yaml",
                "--snapshot",
                "config/examples/cluster.yaml",
            ],
            "no DeletionCostPolicy",
        ),
        (&["--now", "yesterday"], "--now"),
        (
            &["--feature-gates", "PodDeletionCost=maybe"],
            "--feature-gates",
        ),
        (
            &[
                "--policy",
                "tests/fixtures/plan/bad-buckets.yaml",
                "--snapshot",
                "config/examples/cluster.yaml",
            ],
            "spec.signals[1].utilization.buckets",
        ),
        (
            &[
                "--samples",
                "tests/fixtures/plan/bad-samples.csv",
                "--policy",
                "config/examples/combined.yaml",
                "--snapshot",
                "config/examples/cluster.yaml",
            ],
            "bad-samples.csv",
        ),
        (
            &[
                "--policy",
                "config/examples/combined.yaml",
                "--snapshot",
                "tests/fixtures/plan/bad-pod.yaml",
            ],
            "status.conditions",
        ),
    ];
    for (args, needle) in cases {
        let o = plan(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?} printed to stdout");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn live_prometheus_feeds_the_utilisation_signal() {
    let t = unix_now() - 20;
    let series = [
        ("web-7d9f8c6b5-4xk2p", "1.9"),
        ("web-7d9f8c6b5-9qmzt", "0.1"),
        ("web-7d9f8c6b5-b7rwd", "0.5"),
    ];
    let lines: Vec<(String, &str, i64)> = series
        .iter()
        .map(|(pod, v)| {
            (
                format!(r#"container_cpu_usage_seconds_total{{namespace="shop",container="app",pod="{pod}"}}"#),
                *v,
                t,
            )
        })
        .collect();
    let refs: Vec<(&str, &str, i64)> = lines.iter().map(|(s, v, t)| (s.as_str(), *v, *t)).collect();
    let prom = PrometheusServer::start(&openmetrics(&refs));
    let o = plan(&[
        NOW,
        "--policy",
        "tests/fixtures/plan/instant-cpu.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--prometheus",
        &prom.url(),
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cost = |pod: &str| {
        v[0]["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pod)
            .map(|p| p["desired"].clone())
            .unwrap()
    };
    // spot pods: utilisation decides (10 buckets over 0..2)
    assert_eq!(cost("web-7d9f8c6b5-9qmzt"), 0);
    assert_eq!(cost("web-7d9f8c6b5-b7rwd"), 2);
    assert_eq!(cost("web-7d9f8c6b5-4xk2p"), 9);
    // no series: keepLastValue leaves the pod alone
    assert!(cost("web-7d9f8c6b5-m3wqa").is_null());
    assert_eq!(prom.instant_queries_served(), 1);

    // Prometheus down: a clear run-time error, exit 1
    drop(prom);
    let o = plan(&[
        NOW,
        "--policy",
        "tests/fixtures/plan/instant-cpu.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--prometheus",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("127.0.0.1:9"), "{}", stderr(&o));
}

const SPOT_FIRST: &str = "config/examples/spot-first.yaml";

fn plan_over(snapshot: &str) -> Output {
    plan(&[NOW, "--policy", SPOT_FIRST, "--snapshot", snapshot])
}

fn bad_plan(o: &Output, needles: &[&str]) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert!(o.stdout.is_empty(), "partial stdout: {}", stdout(o));
    for n in needles {
        assert!(stderr(o).contains(n), "{n:?} not in {}", stderr(o));
    }
}

/// The bundled cluster's objects as JSON, to edit (without the version it
/// records, its second document).
fn cluster() -> serde_json::Value {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/cluster.yaml"),
    )
    .unwrap();
    let objects = text.split("\n---\n").next().unwrap_or_default();
    serde_saphyr::from_str(objects).unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, v: &serde_json::Value) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, v.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

fn first_pod(v: &serde_json::Value) -> (usize, serde_json::Value) {
    let items = v["items"].as_array().unwrap();
    let i = items.iter().position(|o| o["kind"] == "Pod").unwrap();
    (i, items[i].clone())
}

#[test]
fn a_snapshot_without_pods_is_bad_input() {
    bad_plan(
        &plan_over("/dev/null"),
        &["error: no pods in /dev/null (the input is empty"],
    );
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("blank.yaml");
    std::fs::write(&blank, "\n# nothing here\n").unwrap();
    bad_plan(
        &plan_over(blank.to_str().unwrap()),
        &["no pods in", "blank.yaml"],
    );
    let mut nodes_only = cluster();
    nodes_only["items"]
        .as_array_mut()
        .unwrap()
        .retain(|o| o["kind"] != "Pod");
    let path = write(&dir, "nodes.json", &nodes_only);
    bad_plan(
        &plan_over(&path),
        &[&format!(
            "no pods in {path} (found kind Deployment, Node, ReplicaSet"
        )],
    );
    // a directory: its path is the source
    let only = tempfile::tempdir().unwrap();
    write(&only, "nodes.json", &nodes_only);
    bad_plan(
        &plan_over(only.path().to_str().unwrap()),
        &["no pods in", "found kind Deployment, Node, ReplicaSet"],
    );
}

#[test]
fn snapshot_pods_without_name_or_listed_twice_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (i, pod) = first_pod(&cluster());

    let mut nameless = cluster();
    nameless["items"][i]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let path = write(&dir, "nameless.json", &nameless);
    bad_plan(
        &plan_over(&path),
        &[&format!("{path}: items[{i}]: Pod without metadata.name")],
    );

    let mut twice = cluster();
    twice["items"].as_array_mut().unwrap().push(pod.clone());
    let n = twice["items"].as_array().unwrap().len() - 1;
    let path = write(&dir, "twice.json", &twice);
    bad_plan(
        &plan_over(&path),
        &[&format!(
            "{path}: items[{n}] (Pod shop/web-7d9f8c6b5-4xk2p) repeats {path}: items[{i}] (Pod shop/web-7d9f8c6b5-4xk2p): the same name"
        )],
    );

    // across the files of a directory: both files named
    let split = tempfile::tempdir().unwrap();
    let a = write(&split, "a.json", &cluster());
    let b = write(&split, "b.json", &pod);
    bad_plan(
        &plan_over(split.path().to_str().unwrap()),
        &[&format!(
            "{b}: object (Pod shop/web-7d9f8c6b5-4xk2p) repeats {a}: items[{i}]"
        )],
    );

    // another name, the same UID
    let mut renamed = pod.clone();
    renamed["metadata"]["name"] = "web-renamed".into();
    let mut same_uid = cluster();
    same_uid["items"].as_array_mut().unwrap().push(renamed);
    let path = write(&dir, "uid.json", &same_uid);
    bad_plan(
        &plan_over(&path),
        &[
            "(Pod shop/web-renamed) repeats",
            "the same uid 5e1d2c3b-0000-4000-8000-000000000000",
        ],
    );
}

#[test]
fn snapshot_pods_of_the_same_name_in_two_namespaces_are_two_pods() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pod) = first_pod(&cluster());
    let mut other = pod.clone();
    other["metadata"]["namespace"] = "staging".into();
    other["metadata"].as_object_mut().unwrap().remove("uid");
    let mut v = cluster();
    v["items"].as_array_mut().unwrap().push(other);
    let path = write(&dir, "two-ns.json", &v);
    let o = plan_over(&path);
    assert!(o.status.success(), "{}", stderr(&o));
    // the copy has no UID: planned, with a warning
    assert!(
        stderr(&o).contains(&format!(
            "warning: {path}: 1 pod(s) without metadata.uid (staging/web-7d9f8c6b5-4xk2p)"
        )),
        "{}",
        stderr(&o)
    );
}

/// `config/examples/combined.yaml` with one edit, written to a temporary file.
fn edited_policy(dir: &tempfile::TempDir, name: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/combined.yaml"),
    )
    .unwrap();
    assert!(text.contains(from), "{from:?} not in combined.yaml");
    let path = dir.path().join(name);
    std::fs::write(&path, text.replace(from, to)).unwrap();
    path.to_string_lossy().into_owned()
}

fn plan_policy(policy: &str) -> Output {
    plan(&[
        NOW,
        "--policy",
        policy,
        "--snapshot",
        "config/examples/cluster.yaml",
    ])
}

#[test]
fn policies_are_parsed_as_strictly_as_the_api_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "typo.yaml",
            "combine: lexicographic",
            "combin: sum",
            "spec.combin: unknown field; did you mean combine?",
        ),
        (
            "signal.yaml",
            "- billingClass:",
            "- gpuPrice:",
            "spec.signals[0]: unknown signal gpuPrice; known: billingClass, nodeConsolidation, utilization, zoneBalance",
        ),
        (
            "deep-typo.yaml",
            "buckets: 10",
            "bucket: 10",
            "spec.signals[1].utilization.bucket: unknown field; did you mean buckets?",
        ),
        (
            "negative.yaml",
            "buckets: 10",
            "buckets: -5",
            "spec.signals[1].utilization.buckets: must be at least 1, found -5",
        ),
        (
            "enum.yaml",
            "onSignalMissing: keepLastValue",
            "onSignalMissing: keepLast",
            "spec.onSignalMissing: must be one of keepLastValue, skip, useDefault (found \"keepLast\"); did you mean keepLastValue?",
        ),
        (
            "max-cost.yaml",
            "combine: lexicographic",
            "combine: lexicographic\n  maxCost: 0",
            "spec.maxCost: must be at least 1, found 0",
        ),
        (
            "meta.yaml",
            "  namespace: shop",
            "  namespace: shop\n  lables: {a: b}",
            "metadata.lables: unknown field; did you mean labels?",
        ),
    ];
    for (file, from, to, message) in cases {
        let path = edited_policy(&dir, file, from, to);
        let o = plan_policy(&path);
        bad_plan(
            &o,
            &[
                &format!("error: {path}: object (DeletionCostPolicy \"web\") is invalid:\n"),
                message,
            ],
        );
        let err = stderr(&o);
        for never in ["expected u32", "unknown variant", "error: error"] {
            assert!(!err.contains(never), "{file}: {never:?} in {err}");
        }
    }
}

#[test]
fn empty_and_broken_policy_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let write_text = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    for (name, text) in [
        ("empty.yaml", ""),
        ("comments.yaml", "# a policy, some day\n---\n"),
    ] {
        let path = write_text(name, text);
        bad_plan(
            &plan_policy(&path),
            &[&format!(
                "error: {path}: no DeletionCostPolicy found (the input is empty)"
            )],
        );
    }
    let deep = write_text(
        "deep.yaml",
        &format!("spec: {}{}\n", "[".repeat(70), "]".repeat(70)),
    );
    let unclosed = write_text("unclosed.yaml", "kind: DeletionCostPolicy\nspec: {a: [\n");
    for (path, message) in [
        (
            &deep,
            "not valid YAML at line 1 column 70: nested too deeply (more than 64 levels of lists and maps)",
        ),
        (&unclosed, "not valid YAML at line 2 column"),
    ] {
        let o = plan_policy(path);
        bad_plan(&o, &[&format!("error: {path}: {message}")]);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one clean line: {err}");
        assert!(!err.contains("Depth {"), "{err}");
        assert!(!err.contains("error: error"), "{err}");
    }
}

/// A copy of an example policy with one edit.
fn edited_example(dir: &tempfile::TempDir, example: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/examples")
            .join(example),
    )
    .unwrap();
    assert!(text.contains(from), "{from:?} not in {example}");
    let path = dir.path().join(example);
    std::fs::write(&path, text.replace(from, to)).unwrap();
    path.to_string_lossy().into_owned()
}

/// Runs a plan that must succeed; returns its JSON warnings and stderr.
fn plan_warnings(args: &[&str]) -> (Vec<String>, String) {
    let mut all = vec![NOW, "-o", "json"];
    all.extend_from_slice(args);
    let o = plan(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let warnings = v[0]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    (warnings, stderr(&o))
}

fn has(warnings: &[String], err: &str, policy: &str, needle: &str) {
    assert!(
        warnings.iter().any(|w| w.contains(needle)),
        "{needle:?} not in {warnings:?}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with(&format!("warning: policy {policy}: ")) && l.contains(needle)),
        "{needle:?} not on stderr: {err}"
    );
}

#[test]
fn plans_that_do_nothing_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = "config/examples/cluster.yaml";

    // the policy's namespace has no pods: where its selector does find some
    let path = edited_example(&dir, "combined.yaml", "namespace: shop", "namespace: shopp");
    let (w, err) = plan_warnings(&[
        "--policy",
        &path,
        "--snapshot",
        cluster,
        "--samples",
        "config/examples/samples.json",
    ]);
    has(
        &w,
        &err,
        "shopp/web",
        "no pods in namespace shopp in the snapshot: nothing to plan; selector app=web selects pods in other namespaces: shop (8) (is metadata.namespace right?)",
    );
    assert_eq!(w.len(), 1, "{w:?}");

    // the same with a targetRef, and with a selector nothing matches anywhere
    let path = edited_example(&dir, "spot-first.yaml", "namespace: shop", "namespace: web");
    let (w, err) = plan_warnings(&["--policy", &path, "--snapshot", cluster]);
    has(
        &w,
        &err,
        "web/web-spot-first",
        "targetRef Deployment/web selects pods in other namespaces: shop (8)",
    );

    // pods in the namespace, none selected
    let path = edited_example(&dir, "combined.yaml", "app: web", "app: webb");
    let (w, err) = plan_warnings(&[
        "--policy",
        &path,
        "--snapshot",
        cluster,
        "--samples",
        "config/examples/samples.json",
    ]);
    has(
        &w,
        &err,
        "shop/web",
        "selector app=webb selects no active pod among the 11 pod(s) of namespace shop: nothing to plan",
    );

    // a utilisation signal without --samples or --prometheus
    let (w, err) = plan_warnings(&[
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        cluster,
    ]);
    has(
        &w,
        &err,
        "shop/web",
        "spec.signals[1] (utilization) has no samples: give --samples FILE or --prometheus URL",
    );

    // a plan that does something says none of this
    let (w, err) = plan_warnings(&[
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        cluster,
        "--samples",
        "config/examples/samples.json",
    ]);
    assert!(
        w.iter()
            .all(|w| !w.contains("nothing to plan") && !w.contains("no samples")),
        "{w:?}"
    );
    assert!(!err.contains("nothing to plan"), "{err}");
    let (w, _) = plan_warnings(&[
        "--policy",
        "config/examples/spot-first.yaml",
        "--snapshot",
        cluster,
    ]);
    assert!(w.iter().all(|w| !w.contains("no samples")), "{w:?}");
}

// ---- bounded input -----------------------------------------------------------

fn bad_input(args: &[&str], must_mention: &[&str]) {
    let o = plan(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(stdout(&o), "", "{args:?}");
    for m in must_mention {
        assert!(err.contains(m), "{args:?}: {m:?} not in {err}");
    }
}

#[cfg(unix)]
#[test]
fn binary_input_fails_at_its_first_byte_on_every_reader() {
    let policy = "config/examples/combined.yaml";
    let snapshot = "config/examples/cluster.yaml";
    let nul = [
        "/dev/zero: not valid JSON or YAML at line 1 column 1",
        "NUL byte",
        "stopped reading",
    ];
    bad_input(&["--policy", policy, "--snapshot", "/dev/zero", NOW], &nul);
    bad_input(
        &["--policy", "/dev/zero", "--snapshot", snapshot, NOW],
        &nul,
    );
    bad_input(
        &[
            "--policy",
            policy,
            "--snapshot",
            snapshot,
            "--samples",
            "/dev/zero",
            NOW,
        ],
        &nul,
    );
    bad_input(
        &["--prices", "/dev/zero", "--scale-down-by", "2", NOW],
        &nul,
    );
}

#[test]
fn max_input_bytes_limits_every_reader() {
    let policy = "config/examples/combined.yaml";
    let snapshot = "config/examples/cluster.yaml";
    let samples = "config/examples/samples.json";
    let small = ["--max-input-bytes", "100"];
    let limit = "larger than --max-input-bytes 100 bytes (the file has";
    let with = |args: &[&'static str]| [args, &small[..], &[NOW][..]].concat();
    bad_input(
        &with(&["--policy", policy, "--snapshot", snapshot]),
        &[policy, limit],
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        format!("{}/{snapshot}", env!("CARGO_MANIFEST_DIR")),
        dir.path().join("cluster.yaml"),
    )
    .unwrap();
    let dir_path = dir.path().to_string_lossy().into_owned();
    let o = plan(&[
        "--policy",
        policy,
        "--snapshot",
        &dir_path,
        "--max-input-bytes",
        "4Ki",
        NOW,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cluster.yaml: larger than --max-input-bytes 4Ki"),
        "{}",
        stderr(&o)
    );
    // samples padded past the limit, policy and snapshot under it
    let mut padded =
        std::fs::read_to_string(format!("{}/{samples}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    padded.push_str(&" ".repeat(20 << 10));
    let big_samples = dir.path().join("samples.json");
    std::fs::write(&big_samples, padded).unwrap();
    let big_samples = big_samples.to_string_lossy().into_owned();
    for (limit, code) in [("64Ki", 0), ("16Ki", 2)] {
        let o = plan(&[
            "--policy",
            policy,
            "--snapshot",
            snapshot,
            "--samples",
            &big_samples,
            "--max-input-bytes",
            limit,
            NOW,
        ]);
        assert_eq!(o.status.code(), Some(code), "{limit}: {}", stderr(&o));
        if code == 2 {
            assert!(
                stderr(&o).contains("samples.json: larger than --max-input-bytes 16Ki"),
                "{}",
                stderr(&o)
            );
        }
    }
}

// ---- what it is worth (--prices) ---------------------------------------------

const PRICES: &str = "config/examples/prices.yaml";

/// The time of the example samples: with --samples FILE and --now, older
/// samples are stale.
const SAMPLES_NOW: &str = NOW;

/// The `savings` of the first plan; `args` include `--now`.
fn savings_json(args: &[&str]) -> serde_json::Value {
    let o = plan(&[&["-o", "json"][..], args].concat());
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0]["savings"].clone()
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().or(n["name"].as_str()).unwrap().to_string())
        .collect()
}

#[test]
fn prices_show_what_the_policys_scale_down_is_worth_against_upstream() {
    // by 3, the policy empties spot-b1; upstream's choice without the
    // policy's costs empties nothing
    let o = plan(&[NOW, "--prices", PRICES, "--scale-down-by", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("What it is worth: scale down by 3 (prices: config/examples/prices.yaml, USD; a month is 730 h)"),
        "{out}"
    );
    for row in [
        "with the policy                web-7d9f8c6b5-f8jls, web-7d9f8c6b5-4xk2p, web-7d9f8c6b5-b7rwd  spot-b1 (spot)  0.0416    30.368",
        "Kubernetes default             web-7d9f8c6b5-f8jls, web-7d9f8c6b5-9qmzt, web-7d9f8c6b5-x6nfo  none            0.00      0.00",
        "difference (policy - default)                                                                 +1              +0.0416   +30.368",
        "with the policy  spot           1      1.93  6.8Gi   0.0416    30.368",
        "Kubernetes default: the pods the ReplicaSet controller deletes without the policy's costs",
    ] {
        assert!(out.contains(row), "{row:?} not in\n{out}");
    }

    let s = savings_json(&[NOW, "--prices", PRICES, "--scale-down-by", "3"]);
    assert_eq!(s["pricesFile"], PRICES);
    assert_eq!(s["currency"], "USD");
    assert_eq!(s["hoursPerMonth"], 730);
    assert_eq!(names(&s["policy"]["freedNodes"]), ["spot-b1"]);
    let node = &s["policy"]["freedNodes"][0];
    assert_eq!(node["billingClass"], "spot");
    assert_eq!(node["instanceType"], "m6i.large");
    assert_eq!(node["allocatableCpuMillicores"], 1930);
    assert_eq!(node["allocatableMemoryBytes"], 7129936u64 * 1024);
    assert_eq!(node["priceFrom"], "billingClass");
    assert_eq!(s["policy"]["byBillingClass"][0]["nodes"], 1);
    assert_eq!(
        names(&s["upstream"]["victims"]),
        [
            "web-7d9f8c6b5-f8jls",
            "web-7d9f8c6b5-9qmzt",
            "web-7d9f8c6b5-x6nfo"
        ]
    );
    assert!(s["upstream"]["freedNodes"].as_array().unwrap().is_empty());
    assert_eq!(s["difference"]["nodes"], 1);
    assert_eq!(s["difference"]["hourly"], 0.0416);
    assert_eq!(s["difference"]["monthly"], 30.368);
    assert_eq!(s["difference"]["complete"], true);

    // by 2 neither choice empties a node; the same with the files named
    let s = savings_json(&[
        SAMPLES_NOW,
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--samples",
        "config/examples/samples.json",
        "--prices",
        PRICES,
        "--scale-down-by",
        "2",
    ]);
    assert_eq!(
        names(&s["policy"]["victims"]),
        ["web-7d9f8c6b5-f8jls", "web-7d9f8c6b5-4xk2p"]
    );
    assert!(s["policy"]["freedNodes"].as_array().unwrap().is_empty());
    assert!(s["upstream"]["freedNodes"].as_array().unwrap().is_empty());
    assert_eq!(s["difference"]["hourly"], 0.0);

    // without --prices there is no savings object
    assert!(savings_json(&[NOW, "--scale-down-by", "3"]).is_null());
}

#[test]
fn daemon_set_pods_do_not_keep_a_node_and_other_pods_do() {
    let dir = tempfile::tempdir().unwrap();
    let pod_on = |name: &str, owner: Option<&str>| {
        let mut p = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "kube-system", "uid": format!("uid-{name}")},
            "spec": {"nodeName": "spot-b1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        });
        if let Some(kind) = owner {
            p["metadata"]["ownerReferences"] = serde_json::json!([
                {"apiVersion": "apps/v1", "kind": kind, "name": "agent", "uid": "uid-agent", "controller": true}
            ]);
        }
        p
    };
    let run = |extra: Vec<serde_json::Value>, file: &str| {
        let mut c = cluster();
        c["items"].as_array_mut().unwrap().extend(extra);
        let path = write(&dir, file, &c);
        savings_json(&[
            SAMPLES_NOW,
            "--policy",
            "config/examples/combined.yaml",
            "--snapshot",
            &path,
            "--samples",
            "config/examples/samples.json",
            "--prices",
            PRICES,
            "--scale-down-by",
            "3",
        ])
    };
    let s = run(vec![pod_on("agent-x", Some("DaemonSet"))], "ds.json");
    assert_eq!(names(&s["policy"]["freedNodes"]), ["spot-b1"]);
    let mut finished = pod_on("job-x", None);
    finished["status"]["phase"] = "Succeeded".into();
    let s = run(vec![finished], "finished.json");
    assert_eq!(names(&s["policy"]["freedNodes"]), ["spot-b1"]);
    let s = run(vec![pod_on("bare-x", None)], "bare.json");
    assert!(s["policy"]["freedNodes"].as_array().unwrap().is_empty());
    assert_eq!(s["difference"]["hourly"], 0.0);
}

#[test]
fn a_node_without_a_price_is_named_never_free() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.yaml");
    std::fs::write(&prices, "billingClasses: {reserved: 0.121}\n").unwrap();
    let prices = prices.to_string_lossy().into_owned();
    let o = plan(&[NOW, "--prices", &prices, "--scale-down-by", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("spot-b1 (spot, unpriced)"), "{out}");
    assert!(
        out.contains("policy: no price for spot-b1 (left out of the sums)"),
        "{out}"
    );
    assert!(
        stderr(&o).contains("no price for freed node(s) spot-b1"),
        "{}",
        stderr(&o)
    );
    let s = savings_json(&[NOW, "--prices", &prices, "--scale-down-by", "3"]);
    assert_eq!(names(&s["policy"]["unpricedNodes"]), ["spot-b1"]);
    assert!(s["policy"]["freedNodes"][0]["hourly"].is_null());
    assert_eq!(s["difference"]["complete"], false);
}

#[test]
fn bad_prices_exit_2_naming_the_problem() {
    // given files need a scale-down (the bundled example has one, by 2)
    bad_input(
        &[&EXAMPLE_FILES[..6], &[NOW, "--prices", PRICES]].concat(),
        &["--prices needs --scale-down-by N"],
    );
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "billingclasses: {spot: 0.1}",
            "billingclasses: unknown field; did you mean billingClasses?",
        ),
        (
            "billingClasses: {spot: -0.1}",
            "billingClasses.spot: must be a price per hour, a finite number from 0 to 1e9; found -0.1",
        ),
        (
            "billingClasses: {spot: .nan}",
            "billingClasses.spot: must be a price per hour, a finite number from 0 to 1e9; found NaN",
        ),
        (
            "{\"instanceTypes\": {\"m6i.large\": \"cheap\"}}",
            "instanceTypes.m6i.large: must be a price per hour (a number); found a string (\"cheap\")",
        ),
        ("", "no prices (the input is empty)"),
    ];
    for (i, (text, needle)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("prices-{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let path = path.to_string_lossy().into_owned();
        bad_input(
            &[NOW, "--prices", &path, "--scale-down-by", "2"],
            &[&format!("error: {path}: {needle}")],
        );
    }
    bad_input(
        &[NOW, "--prices", "nope.yaml", "--scale-down-by", "2"],
        &["nope.yaml: cannot read"],
    );
    bad_input(
        &[
            NOW,
            "--prices",
            PRICES,
            "--scale-down-by",
            "2",
            "--max-input-bytes",
            "100",
        ],
        &["config/examples/prices.yaml: larger than --max-input-bytes 100 bytes"],
    );
}

#[test]
fn html_output_is_one_self_contained_page() {
    let o = plan(&[NOW, "-o", "html"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    for pod in [
        "4xk2p", "9qmzt", "b7rwd", "c2hvn", "f8jls", "k5tpe", "m3wqa", "x6nfo",
    ] {
        assert!(
            page.contains(&format!(" data-pod=\"web-7d9f8c6b5-{pod}\">")),
            "{pod} missing"
        );
    }
    // the bundled example scales down by 2: both victims are marked
    assert!(page.contains("<g class=\"pod victim out-of-order\" data-pod=\"web-7d9f8c6b5-f8jls\">"));
    assert!(page.contains("<g class=\"pod victim\" data-pod=\"web-7d9f8c6b5-4xk2p\">"));
    assert!(page.contains("<g class=\"pod foreign\" data-pod=\"web-7d9f8c6b5-k5tpe\">"));
    // nothing that could fetch
    for bad in [
        "http://", "https://", "src=", "href=", "<script", "<link", "@import",
    ] {
        assert!(!page.contains(bad), "{bad} in the page");
    }
}

#[test]
fn html_output_has_a_section_per_policy_and_escapes_names() {
    let dir = tempfile::tempdir().unwrap();
    let mut snapshot = cluster();
    let items = snapshot["items"].as_array_mut().unwrap();
    let (i, mut evil) = {
        let i = items.iter().position(|o| o["kind"] == "Pod").unwrap();
        (i, items[i].clone())
    };
    evil["metadata"]["name"] = "web-<script>alert(1)</script>".into();
    evil["metadata"]["uid"] = "evil-uid".into();
    items.insert(i, evil);
    let snapshot = write(&dir, "cluster.json", &snapshot);
    let policies = dir.path().join("policies.yaml");
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/spot-first.yaml"),
    )
    .unwrap();
    std::fs::write(
        &policies,
        format!(
            "{example}\n---\n{}",
            example.replace("name: web-spot-first", "name: web-spot-second")
        ),
    )
    .unwrap();
    let o = plan(&[
        NOW,
        "-o",
        "html",
        "--policy",
        policies.to_str().unwrap(),
        "--snapshot",
        &snapshot,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    assert_eq!(page.matches("<html").count(), 1);
    assert_eq!(
        page.matches("<section class=\"policy\"").count(),
        2,
        "{page}"
    );
    assert!(page.contains("<h2>Policy shop/web-spot-first</h2>"));
    assert!(page.contains("<h2>Policy shop/web-spot-second</h2>"));
    assert!(
        !page.contains("<script"),
        "an input name came through unescaped"
    );
    assert!(page.contains("data-pod=\"web-&lt;script&gt;alert(1)&lt;/script&gt;\""));
}

#[test]
fn the_page_shows_what_the_scale_down_is_worth() {
    let o = plan(&[
        NOW,
        "-o",
        "html",
        "--prices",
        PRICES,
        "--scale-down-by",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(
        page.contains("<h3>What it is worth: scale down by 3</h3>"),
        "{page}"
    );
    for row in [
        "<td class=\"mono\">spot-b1 (spot)</td><td>0.0416</td><td>30.368</td>",
        "<td class=\"mono\">none</td><td>0.00</td><td>0.00</td>",
        "<td>+1</td><td class=\"yes\">+0.0416</td><td class=\"yes\">+30.368</td>",
    ] {
        assert!(page.contains(row), "{row:?} not on the page");
    }
    // without --prices the page has no such section
    let o = plan(&[NOW, "-o", "html", "--scale-down-by", "3"]);
    assert!(!stdout(&o).contains("What it is worth"));
}

#[test]
fn the_snapshot_s_version_sets_the_gates() {
    let dir = tempfile::tempdir().unwrap();
    // the example's objects without the version it records
    let cluster = std::fs::read_to_string(format!(
        "{}/config/examples/cluster.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let (objects, version) = cluster.split_once("\n---\n").unwrap();
    assert!(version.contains("serverVersion:"), "{version}");
    std::fs::write(dir.path().join("cluster.yaml"), objects).unwrap();
    let snapshot = dir.path().to_string_lossy().into_owned();
    let gate_off = "PodDeletionCost feature gate is off";

    // no version: the newest defaults, with a note
    let o = plan_over(&snapshot);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains(gate_off), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("note: no Kubernetes version in")
            && stderr(&o).contains("1.22+ gate defaults apply"),
        "{}",
        stderr(&o)
    );

    // `kubectl version -o json` in the directory: 1.21, PodDeletionCost off
    let version = |minor: &str| {
        format!(
            r#"{{"clientVersion":{{"major":"1","minor":"36","gitVersion":"v1.36.0"}},"serverVersion":{{"major":"1","minor":"{minor}","gitVersion":"v1.{minor}.0"}}}}"#
        )
    };
    std::fs::write(dir.path().join("version.json"), version("21")).unwrap();
    let o = plan_over(&snapshot);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(gate_off), "{}", stdout(&o));
    assert!(
        !stderr(&o).contains("no Kubernetes version"),
        "{}",
        stderr(&o)
    );
    // --kubernetes-version overrides it
    let o = plan(&[
        NOW,
        "--policy",
        SPOT_FIRST,
        "--snapshot",
        &snapshot,
        "--kubernetes-version",
        "1.30",
    ]);
    assert!(!stdout(&o).contains(gate_off), "{}", stdout(&o));

    // 1.37: LogarithmicScaleDown cannot be turned off
    std::fs::write(dir.path().join("version.json"), version("37")).unwrap();
    let o = plan(&[
        NOW,
        "--policy",
        SPOT_FIRST,
        "--snapshot",
        &snapshot,
        "--feature-gates",
        "LogarithmicScaleDown=false",
    ]);
    bad_plan(
        &o,
        &[
            "LogarithmicScaleDown no longer exists in Kubernetes 1.37",
            "version.json: object",
        ],
    );

    // a version in YAML in another file; two versions that differ
    let yaml = dir.path().join("two.yaml");
    std::fs::write(
        &yaml,
        "serverVersion: {major: \"1\", minor: \"30\", gitVersion: v1.30.2}\n",
    )
    .unwrap();
    bad_plan(
        &plan_over(&snapshot),
        &["another Kubernetes version than", "(v1.37.0)"],
    );
    std::fs::remove_file(dir.path().join("version.json")).unwrap();
    let o = plan_over(&snapshot);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("no Kubernetes version"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn endless_snapshot_on_stdin_stops_at_max_pods() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_deletion-cost"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--policy", "config/examples/combined.yaml"])
        .args(["--snapshot", "-", "--max-pods", "5000", NOW]);
    let o = deletion_cost_testkit::run_fed(
        command,
        b"{\"kind\":\"List\",\"items\":[",
        b"{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"shop\"}},\n",
        1 << 30,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("<stdin>: more than --max-pods 5000 pods: stopped reading"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), "");
}

/// Issue 30, item 7: what the readers' libraries call things, said in the
/// input's words.
#[test]
fn messages_say_what_is_wrong_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_string_lossy().into_owned()
    };
    let cluster = "config/examples/cluster.yaml";
    let policy = "config/examples/combined.yaml";
    let fails = |args: &[&str], must: &str, must_not: &str| {
        let o = plan(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(must), "{args:?}: {err}");
        assert!(!err.contains(must_not), "{args:?}: {err}");
        assert!(o.stdout.is_empty());
    };
    // serde_json's "recursion limit exceeded"
    let deep = write(
        "deep.json",
        format!("{}{}", "[".repeat(200), "]".repeat(200)).as_bytes(),
    );
    fails(
        &["--policy", &deep, "--snapshot", cluster],
        "nested too deeply (more than 128 levels of lists and maps)",
        "recursion limit",
    );
    // issue 55, item 2: 200k levels, in JSON and in YAML, on every reader;
    // a key given twice in YAML as JSON says it, not in the library's words
    let deeper_json = write(
        "deeper.json",
        format!("{}{}", "[".repeat(200_000), "]".repeat(200_000)).as_bytes(),
    );
    let deeper_yaml = write(
        "deeper.yaml",
        format!("a: {}{}", "[".repeat(200_000), "]".repeat(200_000)).as_bytes(),
    );
    let samples = "config/examples/samples.json";
    for (f, depth) in [(&deeper_json, "128"), (&deeper_yaml, "64")] {
        let words = format!("nested too deeply (more than {depth} levels of lists and maps)");
        fails(&["--policy", f, "--snapshot", cluster], &words, "recursion");
        fails(&["--policy", policy, "--snapshot", f], &words, "recursion");
    }
    fails(
        &[
            "--policy",
            policy,
            "--snapshot",
            cluster,
            "--samples",
            &deeper_json,
        ],
        "nested too deeply (more than 128 levels of lists and maps)",
        "recursion",
    );
    let twice = write("twice.yaml", b"billingClasses: {spot: 1, spot: 2}\n");
    fails(
        &["--policy", policy, "--snapshot", cluster, "--samples", samples, "--scale-down-by", "1", "--prices", &twice],
        "twice.yaml: not valid YAML at line 1 column 27: spot: given twice (a key may appear once in a map)",
        "DuplicateKeyPolicy",
    );
    let twice = write(
        "twice-policy.yaml",
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/examples/combined.yaml"
        ))
        .unwrap()
        .replacen(
            "kind: DeletionCostPolicy",
            "kind: DeletionCostPolicy\nkind: DeletionCostPolicy",
            1,
        )
        .as_bytes(),
    );
    fails(
        &["--policy", &twice, "--snapshot", cluster],
        "kind: given twice (a key may appear once in a map)",
        "DuplicateKeyPolicy",
    );
    // UTF-16, with a byte-order mark and without, on both readers
    let text = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"}}";
    let mut with_bom = vec![0xff, 0xfe];
    let mut without = Vec::new();
    for unit in text.encode_utf16() {
        with_bom.extend(unit.to_le_bytes());
        without.extend(unit.to_le_bytes());
    }
    let with_bom = write("bom.json", &with_bom);
    let without = write("nobom.json", &without);
    for f in [&with_bom, &without] {
        fails(
            &["--policy", f, "--snapshot", cluster],
            "is UTF-16 text, not UTF-8",
            "binary data",
        );
        fails(
            &["--policy", policy, "--snapshot", f],
            "is UTF-16 text, not UTF-8",
            "binary data",
        );
    }
    // YAML's .nan: "rejected by the configured policy" read as the DeletionCostPolicy
    let nan = write(
        "nan.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  priority: .nan\n",
    );
    fails(
        &["--policy", policy, "--snapshot", &nan],
        "line 6 column 13: `.nan` is not a finite number",
        "configured policy",
    );
    // an anchor past the reader's replay limit: no Rust Debug text
    let mut bomb = String::from("a: &x\n");
    bomb.push_str(&"- 1\n".repeat(1_000_001));
    let bomb = write("anchor.yaml", bomb.as_bytes());
    fails(
        &["--policy", &bomb, "--snapshot", cluster],
        "an anchor (`&name`) holds more than the YAML reader keeps",
        "RecordedAnchor",
    );
    // a Prometheus URL that is no URL
    fails(
        &[
            "--policy",
            policy,
            "--snapshot",
            cluster,
            "--prometheus",
            "/nowhere",
        ],
        "--prometheus /nowhere: not a Prometheus URL such as http://prometheus:9090",
        "failed to build",
    );
}

/// Issue 55, item 3: control characters that input holds (a node label
/// value, the prices file's currency) are shown escaped in the table and on
/// stderr, never sent raw to the terminal, which would run them.
#[test]
fn control_characters_from_input_reach_no_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/cluster.yaml"
    ))
    .unwrap()
    .replace(
        "billing.example.com/class: reserved",
        "billing.example.com/class: \"\\e[41mreserved\\e[0m\"",
    );
    let snapshot = dir.path().join("cluster.yaml");
    std::fs::write(&snapshot, cluster).unwrap();
    let prices = dir.path().join("prices.yaml");
    std::fs::write(
        &prices,
        "currency: \"\\e]0;title\\aUSD\"\nbillingClasses: {spot: 0.04, pay-as-you-go: 0.2}\n",
    )
    .unwrap();
    let o = plan(
        &[
            &EXAMPLE_FILES[..2],
            &EXAMPLE_FILES[4..6],
            &[
                "--snapshot",
                &snapshot.to_string_lossy(),
                "--prices",
                &prices.to_string_lossy(),
                "--scale-down-by",
                "3",
                NOW,
            ],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    for text in [&out, &err] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "a control character: {text:?}"
        );
    }
    // a class the policy does not know: its default cost, 1
    assert!(out.contains("\\u{1b}[41mreserved\\u{1b}[0m [1]"), "{out}");
    assert!(out.contains("\\u{1b}]0;title\\u{7}USD"), "{out}");
    // the columns stay aligned around the escaped cell
    let header = out.lines().nth(1).unwrap();
    let row = out
        .lines()
        .find(|l| l.contains("web-7d9f8c6b5-c2hvn"))
        .unwrap();
    assert_eq!(
        header.find("UTILIZATION"),
        row.find("1.620"),
        "{header}\n{row}"
    );
}

/// Issue 55, item 5: `plan` shows what a `writes: OnScaleIn` policy
/// writes: nothing in the background (every cost it wants is "not
/// written"), and with --scale-down-by N only the minimal correction of a
/// scale-in by N, which deletes the pods the Continuous plan deletes;
/// `-o json` says the mode (it once showed the Continuous patches).
#[test]
fn on_scale_in_policies_show_what_they_write() {
    let dir = tempfile::tempdir().unwrap();
    let policy = edited_example(
        &dir,
        "combined.yaml",
        "  respectForeignCosts: true",
        "  writes: OnScaleIn\n  respectForeignCosts: true",
    );
    let run = |policy: &str, extra: &[&str]| {
        let o = plan(
            &[
                &[
                    "--policy",
                    policy,
                    "--snapshot",
                    "config/examples/cluster.yaml",
                    "--samples",
                    "config/examples/samples.json",
                    NOW,
                ][..],
                extra,
            ]
            .concat(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    let json = |policy: &str, extra: &[&str]| -> serde_json::Value {
        serde_json::from_slice(&run(policy, &[extra, &["-o", "json"]].concat()).stdout).unwrap()
    };
    let continuous = json("config/examples/combined.yaml", &["--scale-down-by", "3"]);
    assert_eq!(continuous[0]["writes"], "Continuous");
    assert_eq!(continuous[0]["patches"].as_array().unwrap().len(), 7);

    // in the background: nothing
    let idle = json(&policy, &[]);
    assert_eq!(idle[0]["writes"], "OnScaleIn");
    assert_eq!(idle[0]["patches"], serde_json::json!([]));
    let actions: Vec<&str> = idle[0]["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["action"]["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions.iter().filter(|a| **a == "notWritten").count(), 7);
    let table = stdout(&run(&policy, &[]));
    assert!(
        table.contains("8 pods selected, 0 patches (writes: OnScaleIn: nothing in the background"),
        "{table}"
    );
    assert!(table.contains("0       not written (OnScaleIn)"), "{table}");

    // at a scale-in by 3: the correction only, and the same victims
    let at = json(&policy, &["--scale-down-by", "3"]);
    let patched: Vec<&str> = at[0]["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pod"].as_str().unwrap())
        .collect();
    assert!(
        (1..=3).contains(&patched.len()),
        "at most k writes for a scale-in by k: {patched:?}"
    );
    assert_eq!(
        at[0]["replicaSets"][0]["victims"],
        continuous[0]["replicaSets"][0]["victims"]
    );
    for p in at[0]["pods"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        assert_eq!(
            p["action"]["action"] == "patch",
            patched.contains(&name),
            "{name}: {p}"
        );
    }
    let table = stdout(&run(&policy, &["--scale-down-by", "3"]));
    assert!(
        table.contains(&format!(
            "8 pods selected, {} patches (writes: OnScaleIn: what a scale-in by 3 writes",
            patched.len()
        )),
        "{table}"
    );

    // explain says the same of a pod
    let e = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args([
            "explain",
            "pod/web-7d9f8c6b5-9qmzt",
            "-n",
            "shop",
            NOW,
            "--policy",
            &policy,
            "--snapshot",
            "config/examples/cluster.yaml",
            "--samples",
            "config/examples/samples.json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        stdout(&e).contains("plan:       wants 4: not written (OnScaleIn)"),
        "{}",
        stdout(&e)
    );
}

/// Issue 30, item 8: stderr stays bounded whatever the input's size: one
/// line per kind of problem (a warning several policies raise is said
/// once, naming them), lists cut after ten names, at most 20 warning lines.
#[test]
fn warnings_stay_short_whatever_the_input_s_size() {
    let dir = tempfile::tempdir().unwrap();
    // 30 pods, each of a ReplicaSet and on a node the snapshot does not hold
    let pods: Vec<serde_json::Value> = (0..30)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-{i}"), "namespace": "shop",
                    "uid": format!("u-{i}"), "labels": {"app": "web"},
                    "creationTimestamp": "2026-11-20T00:00:00Z",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": format!("web-{i}"), "uid": format!("rs-{i}"), "controller": true}]},
                "spec": {"nodeName": format!("node-{i}"), "containers": [{"name": "a", "image": "x"}]},
                "status": {"phase": "Running"}
            })
        })
        .collect();
    let snapshot = write(
        &dir,
        "snapshot.json",
        &serde_json::json!({"kind": "List", "items": pods}),
    );
    // two policies over those pods, and 30 in namespaces without pods
    let policy = |name: &str, ns: &str| {
        format!(
            "apiVersion: deletioncost.dev/v1alpha1\nkind: DeletionCostPolicy\n\
             metadata: {{name: {name}, namespace: {ns}}}\n\
             spec:\n  selector: {{matchLabels: {{app: web}}}}\n  signals:\n\
             \x20   - billingClass: {{preset: auto, costs: {{spot: 0}}, default: 50}}\n"
        )
    };
    let mut policies = vec![policy("a", "shop")];
    policies.extend((0..30).map(|i| policy("p", &format!("empty-{i}"))));
    let file = dir.path().join("policies.yaml");
    std::fs::write(&file, policies.join("---\n")).unwrap();
    let o = plan(&[
        NOW,
        "--policy",
        file.to_str().unwrap(),
        "--snapshot",
        &snapshot,
        "--kubernetes-version=1.33",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 21, "{err}");
    assert!(lines.iter().all(|l| l.len() < 1000), "{err}");
    assert!(
        err.contains(
            "warning: policy shop/a: nodes not in the snapshot (their labels read as empty): \
             node-0, node-1, node-10, node-11, node-12, node-13, node-14, node-15, node-16, \
             node-17 and 20 more\n"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "warning: policy shop/a: 30 ReplicaSets are not in the snapshot (web-0, web-1, \
             web-10, web-11, web-12, web-13, web-14, web-15, web-16, web-17 and 20 more): \
             colocation ranks use each one's own pods\n"
        ),
        "{err}"
    );
    assert!(
        lines[20]
            .ends_with("and 12 more warning(s) (-o json lists every one in each plan's warnings)"),
        "{err}"
    );
}

/// Issue 30, item 4: a snapshot object past Kubernetes' own limits (a pod's
/// name, a node's label value, annotations) is refused with exit 2 naming
/// it, whichever reader (JSON streamed, YAML) takes it.
#[test]
fn snapshot_objects_past_kubernetes_limits_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster();
    let (i, _) = first_pod(&cluster);
    let node = cluster["items"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o["kind"] == "Node")
        .unwrap();
    let long = "w".repeat(254);
    type Edit<'a> = Box<dyn Fn(&mut serde_json::Value) + 'a>;
    let edits: Vec<(Edit, String)> = vec![
        (
            Box::new(|c| c["items"][i]["metadata"]["name"] = long.clone().into()),
            format!(
                "items[{i}] (Pod \"{}...\"): metadata.name: 254 bytes long; Kubernetes allows at most 253",
                "w".repeat(40)
            ),
        ),
        (
            Box::new(|c| {
                c["items"][node]["metadata"]["labels"]["zone-x"] = "z".repeat(64).into()
            }),
            format!("items[{node}] (Node "),
        ),
        (
            Box::new(|c| {
                c["items"][i]["metadata"]["annotations"] =
                    serde_json::json!({"big": "a".repeat(300_000)})
            }),
            "metadata.annotations: keys and values together are 300003 bytes".to_string(),
        ),
    ];
    for (n, (edit, message)) in edits.iter().enumerate() {
        let mut c = cluster.clone();
        edit(&mut c);
        let json = write(&dir, &format!("s{n}.json"), &c);
        let yaml = dir.path().join(format!("s{n}.yaml"));
        std::fs::write(&yaml, serde_saphyr::to_string(&c).unwrap()).unwrap();
        for snapshot in [json.as_str(), yaml.to_str().unwrap()] {
            let o = plan(&[
                NOW,
                "--policy",
                "config/examples/combined.yaml",
                "--snapshot",
                snapshot,
            ]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{snapshot}: {err}");
            assert!(
                err.contains(message.as_str()),
                "{snapshot}: {message}: {err}"
            );
            assert!(
                err.contains("the API server stores no such object"),
                "{err}"
            );
            assert!(o.stdout.is_empty());
        }
    }
}

/// Issue 30, item 5: a pod whose current cost Kubernetes cannot read is
/// marked in the table (read as 0, as upstream does) and named once on
/// stderr.
#[test]
fn invalid_cost_annotations_are_marked_and_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster();
    let (i, pod) = first_pod(&c);
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    c["items"][i]["metadata"]["annotations"] =
        serde_json::json!({"controller.kubernetes.io/pod-deletion-cost": "1e3"});
    let snapshot = write(&dir, "s.json", &c);
    let o = plan(&[
        NOW,
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        &snapshot,
        "--samples",
        "config/examples/samples.json",
    ]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("1e3 (invalid: read as 0)")
            || out.contains("1e3 (foreign; invalid: read as 0)"),
        "{out}"
    );
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("pod-deletion-cost annotation"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(
            "1 pod(s) carry a controller.kubernetes.io/pod-deletion-cost annotation that is not a whole number"
        ) && lines[0].contains(&format!("{name} (\"1e3\": not a base-10 integer; ")),
        "{err}"
    );
}

/// Issue 30, item 6: two policies selecting the same pods in one file are
/// planned as the operator plans them: the older (then the smaller name)
/// wins the shared pods, the other leaves them and is told it would be
/// marked Conflict; a policy given twice is planned once, as applied.
#[test]
fn overlapping_and_repeated_policies_say_which_wins() {
    let dir = tempfile::tempdir().unwrap();
    let policy = |name: &str, created: Option<&str>, spot: u32| {
        let created = created
            .map(|t| format!(", creationTimestamp: \"{t}\""))
            .unwrap_or_default();
        format!(
            "apiVersion: deletioncost.dev/v1alpha1\nkind: DeletionCostPolicy\n\
             metadata: {{name: {name}, namespace: shop{created}}}\n\
             spec:\n  selector: {{matchLabels: {{app: web}}}}\n  signals:\n\
             \x20   - billingClass: {{nodeLabel: billing.example.com/class, costs: {{spot: {spot}, reserved: 2}}, default: 1}}\n"
        )
    };
    let run = |docs: &[String]| {
        let file = dir.path().join("policies.yaml");
        std::fs::write(&file, docs.join("---\n")).unwrap();
        let o = plan(&[
            NOW,
            "--policy",
            file.to_str().unwrap(),
            "--snapshot",
            "config/examples/cluster.yaml",
            "--kubernetes-version=1.33",
            "-o",
            "json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v, stderr(&o))
    };
    let pods = |v: &serde_json::Value, i: usize| v[i]["pods"].as_array().unwrap().len();
    // no creationTimestamp on either: the smaller name wins
    let (v, err) = run(&[policy("b-later", None, 0), policy("a-first", None, 0)]);
    assert_eq!(
        (v[0]["policy"].as_str(), pods(&v, 0)),
        (Some("shop/b-later"), 0),
        "{err}"
    );
    assert_eq!(
        (v[1]["policy"].as_str(), pods(&v, 1)),
        (Some("shop/a-first"), 8),
        "{err}"
    );
    assert!(
        err.contains(
            "warning: policy shop/b-later: shares pods with policies that win them, as the \
             operator decides (it marks this policy Conflict); those pods are planned under the \
             winner only: shop/a-first (8 pod(s); as old (the same creationTimestamp, or none), \
             smaller name)"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "warning: policy shop/a-first: wins the pods it shares with shop/b-later (8 pod(s)"
        ),
        "{err}"
    );
    assert!(!err.contains("selects no active pod"), "{err}");
    // the older creationTimestamp wins, whatever the names
    let (v, err) = run(&[
        policy("a-new", Some("2026-11-02T00:00:00Z"), 0),
        policy("z-old", Some("2026-11-01T00:00:00Z"), 0),
    ]);
    assert_eq!((pods(&v, 0), pods(&v, 1)), (0, 8), "{err}");
    assert!(
        err.contains("shop/z-old (8 pod(s); older creationTimestamp)"),
        "{err}"
    );
    // the same name twice: planned once, the last, as `kubectl apply -f` leaves it
    let (v, err) = run(&[policy("web", None, 5), policy("web", None, 0)]);
    assert_eq!(v.as_array().unwrap().len(), 1, "{err}");
    assert!(
        err.contains(
            "policies.yaml: document 2 and document 1 are both DeletionCostPolicy shop/web: the \
             API server holds one object per name"
        ),
        "{err}"
    );
    assert!(!err.contains("Conflict"), "{err}");
}

/// Issue 30, item 11: stdin is `<stdin>` and read by one flag at most;
/// `--scale-down-by -1` is refused alike by `plan` and `predict`; the
/// bundled example prints no version note.
#[test]
fn stdin_scale_down_and_the_bundled_example_as_predict_has_them() {
    use std::io::Write;
    use std::process::Stdio;
    let with_stdin = |args: &[&str], input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        child.wait_with_output().unwrap()
    };
    let o = with_stdin(&["plan", "--snapshot", "-", "--policy", "-"], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("error: --policy and --snapshot cannot all read stdin (-)"),
        "{}",
        stderr(&o)
    );
    let o = with_stdin(
        &[
            "plan",
            "--snapshot",
            "-",
            "--policy",
            "config/examples/combined.yaml",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("error: no pods in <stdin> (the input is empty"),
        "{}",
        stderr(&o)
    );
    let expected = "error: invalid value '-1' for '--scale-down-by <N>': expected a number of \
                    pods, a whole number from 0 up; found \"-1\"";
    for cmd in [
        &["plan"][..],
        &["predict", "-f", "tests/fixtures/predict/pods.json"],
    ] {
        let o = with_stdin(&[cmd, &["--scale-down-by", "-1"]].concat(), "");
        assert_eq!(o.status.code(), Some(2), "{cmd:?}");
        assert!(stderr(&o).contains(expected), "{cmd:?}: {}", stderr(&o));
    }
    let o = plan(&[NOW]);
    assert!(o.status.success());
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
}

/// Issue 30, item 11: samples of pods the policy does not select, and
/// negative utilisation, are said (once per signal and kind); `Infinity`
/// reads alike in every samples form.
#[test]
fn samples_the_plan_cannot_use_as_given_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        plan(&[
            NOW,
            "--policy",
            "config/examples/combined.yaml",
            "--snapshot",
            "config/examples/cluster.yaml",
            "--samples",
            path.to_str().unwrap(),
        ])
    };
    let o = run(
        "s.csv",
        "pod,value\nweb-7d9f8c6b5-4xk2p,-0.5\nweb-7d9f8c6b5-9qmzt,0.3\nghost-1,0.2\nghost-2,0.1\n",
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "s.csv are of pods the policy does not select, and are \
             not used: ghost-1, ghost-2"
        ),
        "{err}"
    );
    assert!(
        err.contains("s.csv are negative, which no utilisation is; they count in the lowest bucket: web-7d9f8c6b5-4xk2p -5.000e-1"),
        "{err}"
    );
    // the same text in the three forms: all read it, as +Inf (an unusable sample)
    let answer = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"web-7d9f8c6b5-4xk2p"},"value":[1795312800,"Infinity"]}]}}"#;
    for (name, text) in [
        ("a.json", answer.to_string()),
        (
            "b.json",
            r#"{"samples":[{"pod":"web-7d9f8c6b5-4xk2p","value":"Infinity"}]}"#.to_string(),
        ),
        (
            "c.csv",
            "pod,value\nweb-7d9f8c6b5-4xk2p,Infinity\n".to_string(),
        ),
    ] {
        let o = run(name, &text);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("value is infinite"),
            "{name}: {}",
            stdout(&o)
        );
    }
}

/// 1,000 pods of one ReplicaSet on 25 nodes (40 each, spot, pay-as-you-go
/// and reserved in turn), with utilisation samples.
fn large_workload(dir: &tempfile::TempDir) -> (String, String) {
    let classes = ["spot", "pay-as-you-go", "reserved"];
    let mut items: Vec<serde_json::Value> = (0..25)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("node-{i:02}"), "labels": {
                    "billing.example.com/class": classes[i % 3],
                    "topology.kubernetes.io/zone": format!("z{}", i % 3)}}})
        })
        .collect();
    items.push(
        serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-7d9f8c6b5", "namespace": "shop", "uid": "rs-1"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
    );
    let mut samples = Vec::new();
    for i in 0..1000 {
        let name = format!("web-7d9f8c6b5-{i:04}");
        items.push(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{i}"),
                "creationTimestamp": "2026-11-20T00:00:00Z", "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-7d9f8c6b5", "uid": "rs-1", "controller": true}]},
            "spec": {"nodeName": format!("node-{:02}", i % 25)},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2026-11-20T00:01:00Z"}]}}));
        samples.push(serde_json::json!({"pod": name, "value": (i * 37 % 100) as f64 / 50.0}));
    }
    let snapshot = write(
        dir,
        "large.json",
        &serde_json::json!({"kind": "List", "items": items}),
    );
    let samples = write(
        dir,
        "samples.json",
        &serde_json::json!({"samples": samples}),
    );
    (snapshot, samples)
}

/// Issue 55, item 9: a large plan's page puts the nodes first: a line per
/// node with its pods, its victims and what the scale-in leaves of it (freed
/// and what that is worth, with prices), its pod cards folded behind the
/// line; the victims and the cost breakdown folded behind their counts. It
/// opened on the 300 victims' names and drew 1,000 cards. The bundled
/// example keeps its picture.
/// At 300 victims the text says the first ten and how many more, in the
/// verdict line and in the savings table, instead of a line of 300 names.
#[test]
fn a_large_scale_down_names_ten_victims_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, samples) = large_workload(&dir);
    let o = plan(&[
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        &snapshot,
        "--samples",
        &samples,
        "--prices",
        PRICES,
        "--scale-down-by",
        "300",
        NOW,
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let verdict = out
        .lines()
        .find(|l| l.starts_with("  scale down by 300: deletes "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(verdict.contains(" and 290 more"), "{verdict}");
    assert_eq!(verdict.matches("web-").count(), 10, "{verdict}");
    let policy_row = out
        .lines()
        .find(|l| l.starts_with("  with the policy "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(policy_row.contains(" and 290 more"), "{policy_row}");
}

#[test]
fn a_large_page_puts_the_nodes_first_and_folds_the_long_lists() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, samples) = large_workload(&dir);
    let o = plan(&[
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        &snapshot,
        "--samples",
        &samples,
        "--prices",
        PRICES,
        "--scale-down-by",
        "300",
        NOW,
        "-o",
        "html",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    // the verdict names the count; the names are folded behind it
    let verdict = page
        .lines()
        .find(|l| l.contains("scale down by 300 deletes"))
        .unwrap();
    assert!(verdict.contains("deletes 300 pods"), "{verdict}");
    let open_text = verdict.split("<details").next().unwrap();
    assert!(!open_text.contains("web-7d9f8c6b5-0"), "{open_text}");
    assert!(
        verdict.contains(
            "<details class=\"fold victims\"><summary>the 300 pods it deletes, in order</summary>"
        ),
        "{verdict}"
    );
    // a line per node, before any pod card, each card folded behind its line
    let lines: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("<details class=\"node\""))
        .collect();
    assert_eq!(lines.len(), 25);
    assert_eq!(page.matches("<svg class=\"node").count(), 25);
    let first_line = page.find("<details class=\"node\"").unwrap();
    assert!(page.find("<g class=\"pod").unwrap() > first_line);
    let victims: usize = lines
        .iter()
        .map(|l| {
            let n = l.split(" victim(s)").next().unwrap();
            n.rsplit("<b>").next().unwrap().parse::<usize>().unwrap()
        })
        .sum();
    assert_eq!(victims, 300);
    // the spot nodes go first; emptied ones say what freeing them is worth
    assert!(lines[0].contains("spot"), "{}", lines[0]);
    assert!(
        lines.iter().any(|l| l.contains(
            "40 victim(s)</b> · <span class=\"yes\">freed: 0.0416 USD/h, 30.368 USD a month</span>"
        )),
        "{lines:#?}"
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("0 victim(s)</b> · keeps all its pods")));
    // the breakdown is folded behind its count
    assert!(page.contains("<details class=\"fold breakdown\"><summary><b>Cost breakdown</b>: 1000 pods, a row each</summary>"));
    // the small example keeps its picture: no fold
    let small = stdout(&plan(&[NOW, "-o", "html"]));
    assert!(
        !small.contains("<details"),
        "the bundled page folds nothing"
    );
    assert_eq!(small.matches("<g class=\"pod").count(), 8);
}

/// Issue 30, item 11: the page's order strip fits a narrow window (scaled
/// down, never cut), and its time is to the second, not the nanosecond.
#[test]
fn the_page_fits_a_narrow_window_and_says_its_time_in_seconds() {
    let o = plan(&["-o", "html"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.contains("svg.order{max-width:100%;height:auto}"));
    let at = page
        .find("comparator time ")
        .expect("the page says its time")
        + 16;
    let time = &page[at..at + 20];
    assert!(
        time.len() == 20 && time.ends_with('Z') && !time.contains('.'),
        "{}",
        &page[at..at + 40]
    );
}

/// Issue 30, item 11: a sample far from any utilisation prints in a few
/// characters (it printed -1e308 as 309 digits).
#[test]
fn a_huge_sample_prints_short() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("huge.csv");
    std::fs::write(&samples, "pod,value\nweb-7d9f8c6b5-4xk2p,-1e308\n").unwrap();
    let o = plan(&[
        NOW,
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--samples",
        samples.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("-1.000e308 [0]"), "{out}");
    assert!(out.lines().all(|l| l.len() < 200), "{out}");
}

/// Issue 30, item 8: the table names at most ten pods of an ambiguous
/// order, then how many more (`-o json` keeps them all).
#[test]
fn an_ambiguous_order_names_ten_pods_then_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = cluster();
    let (_, template) = first_pod(&v);
    let items = v["items"].as_array_mut().unwrap();
    items.retain(|o| o["kind"] != "Pod");
    for i in 0..15 {
        let mut p = template.clone();
        p["metadata"]["name"] = serde_json::json!(format!("twin-{i:02}"));
        // pending pods created in two seconds of one log2 bucket: equal
        // times tie, unequal ones fall back to the UID, so upstream's
        // comparator is not a strict weak order on them
        p["metadata"]["uid"] = serde_json::json!(format!("{:02}-uid", (i * 7) % 15));
        p["metadata"]["creationTimestamp"] =
            serde_json::json!(format!("2026-11-20T10:00:0{}Z", i % 2));
        p["spec"].as_object_mut().unwrap().remove("nodeName");
        p["status"] = serde_json::json!({"phase": "Pending"});
        if let Some(a) = p["metadata"]["annotations"].as_object_mut() {
            a.clear();
        }
        items.push(p);
    }
    let snapshot = write(&dir, "twins.json", &v);
    let o = plan_over(&snapshot);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = out
        .lines()
        .find(|l| l.contains("order as intended: ambiguous among"))
        .unwrap_or_else(|| panic!("no ambiguous order:\n{out}"));
    assert!(line.contains(" and 5 more"), "{line}");
    assert_eq!(line.matches("twin-").count(), 10, "{line}");
}

/// The issue's snapshot (`tests/fixtures/plan/autoscalers.yaml`): od-a held
/// by another namespace's `do-not-disrupt` pod, od-c `scale-down-disabled`,
/// od-b three web pods, one with Karpenter's cost.
const AUTOSCALERS: [&str; 4] = [
    "--policy",
    "tests/fixtures/plan/autoscalers-policy.yaml",
    "--snapshot",
    "tests/fixtures/plan/autoscalers.yaml",
];

#[test]
fn consolidation_drains_only_nodes_an_autoscaler_may_remove() {
    let mut args = AUTOSCALERS.to_vec();
    args.extend([NOW, "-q", "--scale-down-by", "2"]);
    let o = plan(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("scale down by 2: deletes web-7d9f8c6b5-b3, web-7d9f8c6b5-b1"),
        "od-b is drained, not od-a and od-c:\n{out}"
    );
    for why in [
        "    od-a cannot be removed: jobs/batch-x has karpenter.sh/do-not-disrupt\n",
        "    od-c cannot be removed: the node has cluster-autoscaler.kubernetes.io/scale-down-disabled\n",
        "2 pods on node, cannot be removed [458664]",
        // issue 55, item 8: one pod, not "1 pods"
        "web-7d9f8c6b5-c1  od-c  1 pod on node, cannot be removed [455438]",
    ] {
        assert!(out.contains(why), "{why:?} missing:\n{out}");
    }
    // respectForeignCosts: false, and Karpenter's cost stays
    assert!(
        out.contains("-1000 (Karpenter's)  -       keep (Karpenter's)"),
        "{out}"
    );

    // by 5, every pod goes: od-b is freed, od-c emptied but kept, od-a still
    // holds batch-x
    let mut args = AUTOSCALERS.to_vec();
    args.extend([
        NOW,
        "-q",
        "--scale-down-by",
        "5",
        "--prices",
        "tests/fixtures/plan/autoscalers-prices.yaml",
        "-o",
        "json",
    ]);
    let o = plan(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v[0];
    assert_eq!(p["blockedNodes"][0]["node"], "od-a");
    assert_eq!(p["blockedNodes"][0]["blockers"][0]["pod"], "jobs/batch-x");
    assert_eq!(
        p["blockedNodes"][1]["blockers"][0]["annotation"],
        "cluster-autoscaler.kubernetes.io/scale-down-disabled"
    );
    let policy = &p["savings"]["policy"];
    assert_eq!(policy["freedNodes"][0]["name"], "od-b");
    assert_eq!(policy["freedNodes"].as_array().unwrap().len(), 1);
    assert_eq!(policy["notRemovable"][0]["node"], "od-c");
    let b3 = p["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "web-7d9f8c6b5-b3")
        .unwrap();
    assert_eq!(b3["owner"], "karpenter");
    assert_eq!(b3["action"]["action"], "keepKarpenter");

    // the page says the same
    let mut args = AUTOSCALERS.to_vec();
    args.extend([
        NOW,
        "-q",
        "--scale-down-by",
        "5",
        "--prices",
        "tests/fixtures/plan/autoscalers-prices.yaml",
        "-o",
        "html",
    ]);
    let o = plan(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    for said in [
        "<li class=\"warn\">od-a cannot be removed: jobs/batch-x has karpenter.sh/do-not-disrupt</li>",
        "<svg class=\"node blocked\" data-node=\"od-c\"",
        "policy: emptied but not freed: od-c cannot be removed",
        "<span class=\"tag foreign\">Karpenter's cost</span>",
    ] {
        assert!(page.contains(said), "{said:?} missing from the page");
    }
}

#[test]
fn explain_names_what_keeps_the_node_and_karpenters_cost() {
    let run = |pod: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .args(["explain", pod, "-n", "shop", NOW, "-q"])
            .args(AUTOSCALERS)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let out = run("pod/web-7d9f8c6b5-a1");
    assert!(
        out.contains(
            "  autoscaler: od-a cannot be removed: jobs/batch-x has karpenter.sh/do-not-disrupt\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("nodeConsolidation 2 pods on node, cannot be removed [458664]"),
        "{out}"
    );
    let out = run("pod/web-7d9f8c6b5-b3");
    assert!(
        out.contains("  from:       Karpenter's deletion-cost controller (karpenter.sh/managed-deletion-cost)"),
        "{out}"
    );
    assert!(out.contains("keep (Karpenter's)"), "{out}");
    assert!(!out.contains("autoscaler:"), "od-b may go:\n{out}");
}
