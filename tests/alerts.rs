//! The alerting rules (`deploy/components/alerts/rules.yaml`): promtool
//! checks them and runs their unit tests (`tests/alerts/rules.test.yaml`,
//! a firing and a silent case for every alert), they read only metrics the
//! operator exports, every alert has its runbook in `docs/metrics.md`, and
//! the PrometheusRule of the kustomize component and the chart's copy are
//! the same rules. promtool comes with Debian's `prometheus` package, which
//! `scripts/test.sh` installs.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use deletion_cost::metrics::{Metrics, PolicyReason};
use deletion_cost::writes::StatsSnapshot;
use serde_json::Value;

const RULES: &str = "deploy/components/alerts/rules.yaml";
const RULE_TESTS: &str = "tests/alerts/rules.test.yaml";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every rule of the rules file.
fn rules() -> Vec<Value> {
    let file = yaml(RULES);
    let groups = file["groups"].as_array().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

fn alert_names() -> Vec<String> {
    rules()
        .iter()
        .map(|r| {
            r["alert"]
                .as_str()
                .expect("only alerting rules")
                .to_string()
        })
        .collect()
}

fn promtool(args: &[&str]) -> String {
    let out = match Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool not found on PATH: tests/alerts.rs checks the alerting rules with it; \
             install Debian's prometheus package (scripts/test.sh does: apt-get install prometheus)"
        ),
        Err(e) => panic!("running promtool {args:?}: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_the_rules_and_passes_their_unit_tests() {
    let checked = promtool(&["check", "rules", RULES]);
    let count = alert_names().len();
    assert!(
        checked.contains(&format!("SUCCESS: {count} rules found")),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", RULE_TESTS]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// promtool's unit tests hold, for every alert, an evaluation where it
/// fires and one where it must stay silent.
#[test]
fn every_alert_has_a_firing_and_a_silent_case() {
    let tests = yaml(RULE_TESTS);
    assert_eq!(tests["rule_files"][0], format!("../../{RULES}"));
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .collect();
    for alert in alert_names() {
        let of: Vec<&&Value> = cases.iter().filter(|c| c["alertname"] == alert).collect();
        let firing = of
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
        let silent = of
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(firing, "{alert}: no case where it fires in {RULE_TESTS}");
        assert!(
            silent,
            "{alert}: no case where it stays silent in {RULE_TESTS}"
        );
    }
}

/// Exported names as they appear in a query: counters with `_total`,
/// histograms as their `_bucket`, `_sum` and `_count`, from the operator's
/// own exposition.
fn exported() -> BTreeSet<String> {
    let metrics = Metrics::new(5.0, Box::new(StatsSnapshot::default));
    // a labelled family is exposed once it has a series: one each
    metrics.reconciled("invalid");
    metrics.scale_webhook_call("fresh", 0.1);
    metrics.hook_request("ok");
    metrics.gone_without_gauge()("nodes", false);
    metrics
        .order_mismatches
        .get_or_create(&PolicyReason {
            policy: "shop/web".into(),
            reason: "PendingPatch".into(),
        })
        .set(0);
    metrics
        .signal_fetch_errors
        .get_or_create(&PolicyReason {
            policy: "shop/web".into(),
            reason: "timeout".into(),
        })
        .inc();
    let mut names = BTreeSet::new();
    for line in metrics.encode().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE NAME KIND");
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_alert_reads_only_exported_metrics() {
    let exported = exported();
    assert!(
        exported.contains("deletion_cost_leader")
            && exported.contains("deletion_cost_reconciles_total")
            && exported.contains("deletion_cost_rate_limit_wait_seconds_bucket"),
        "the exposition lost its families: {exported:?}"
    );
    for rule in rules() {
        let alert = rule["alert"].as_str().unwrap();
        let expr = rule["expr"].as_str().expect("expr");
        let used: Vec<&str> = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("deletion_cost_"))
            .collect();
        assert!(!used.is_empty(), "{alert}: reads no operator metric");
        for name in used {
            assert!(
                exported.contains(name),
                "{alert}: reads {name}, which the operator does not export \
                 (or, for a labelled family, exported() makes no series of it)"
            );
        }
    }
}

/// Every alert: a severity, a summary and description, and a runbook in
/// docs/metrics.md under a heading of its name saying what it means, what
/// to look at and what to do.
#[test]
fn every_alert_has_its_runbook_in_docs_metrics() {
    let doc = read("docs/metrics.md");
    for rule in rules() {
        let alert = rule["alert"].as_str().unwrap();
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning"].contains(&severity),
            "{alert}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| s.len() > 20),
                "{alert}: no {key}"
            );
        }
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            url,
            format!("docs/metrics.md#{}", alert.to_lowercase()),
            "{alert}: runbook_url"
        );
        let heading = format!("\n### {alert}\n");
        let start = doc
            .find(&heading)
            .unwrap_or_else(|| panic!("docs/metrics.md has no `### {alert}` section"));
        let body = &doc[start + heading.len()..];
        let section = &body[..body.find("\n#").unwrap_or(body.len())];
        for part in ["**Means**", "**Look at**", "**Do**"] {
            assert!(
                section.contains(part),
                "docs/metrics.md, {alert}: no {part} paragraph"
            );
        }
    }
}

/// The kustomize component's PrometheusRule and the chart's copy hold the
/// rules file's rules, as they are.
#[test]
fn the_prometheus_rule_and_the_charts_copy_are_the_rules_file() {
    let plain = yaml(RULES);
    let rule = yaml("deploy/components/alerts/prometheusrule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert!(
        rule["spec"] == plain,
        "deploy/components/alerts/prometheusrule.yaml's spec differs from {RULES}: \
         its spec must be the rules file's groups"
    );
    let kustomization = read("deploy/components/alerts/kustomization.yaml");
    assert!(kustomization.contains("- prometheusrule.yaml"));
    assert!(
        read("charts/deletion-cost-operator/files/alert-rules.yaml") == read(RULES),
        "charts/deletion-cost-operator/files/alert-rules.yaml differs from {RULES}; copy it:\n    \
         cp {RULES} charts/deletion-cost-operator/files/alert-rules.yaml"
    );
    assert!(repo()
        .join("charts/deletion-cost-operator/templates/prometheusrule.yaml")
        .exists());
}
