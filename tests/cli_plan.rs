//! `deletion-cost plan` as a user runs it: the bundled example, every example
//! policy, a live Prometheus, and bad input.

mod support;

use std::process::{Command, Output};

use support::prometheus::{openmetrics, unix_now, PrometheusServer};

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
