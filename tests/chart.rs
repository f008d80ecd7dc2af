//! The Helm chart (`charts/deletion-cost-operator`) against the crate, without
//! Helm: its CRD is `deploy/crd/crd.yaml`, its versions are the crate's, every
//! flag its Deployment writes is one `deletion-cost run` has, the values it
//! writes out by default are the binary's defaults, and its values schema is
//! closed and covers values.yaml. Helm itself checks the chart in
//! `scripts/chart.sh test` (lint, install refusals, the render against the
//! kustomize overlays) and in the e2e suite (a real install).

use std::collections::BTreeSet;
use std::path::Path;

use clap::{CommandFactory, Parser};
use deletion_cost::cli::{Cli, Command};
use serde_json::Value;

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn chart_file(rel: &str) -> String {
    repo_file(&format!("charts/deletion-cost-operator/{rel}"))
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}"))
}

fn values() -> Value {
    yaml(&chart_file("values.yaml"))
}

fn schema() -> Value {
    serde_json::from_str(&chart_file("values.schema.json")).unwrap()
}

#[test]
fn crd_is_the_deploy_crd() {
    assert!(
        chart_file("crds/crd.yaml") == repo_file("deploy/crd/crd.yaml"),
        "charts/deletion-cost-operator/crds/crd.yaml differs from deploy/crd/crd.yaml; copy it:\n    \
         cp deploy/crd/crd.yaml charts/deletion-cost-operator/crds/crd.yaml"
    );
}

#[test]
fn chart_version_and_app_version_are_the_crates() {
    let chart = yaml(&chart_file("Chart.yaml"));
    let crate_version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["name"], "deletion-cost-operator");
    assert_eq!(
        chart["version"], crate_version,
        "Chart.yaml version is not the crate's ({crate_version}, Cargo.toml)"
    );
    assert_eq!(
        chart["appVersion"], crate_version,
        "Chart.yaml appVersion is not the crate's ({crate_version}, Cargo.toml)"
    );
}

/// Every `--flag` the Deployment template writes.
fn template_flags() -> BTreeSet<String> {
    let text = chart_file("templates/deployment.yaml");
    let mut flags = BTreeSet::new();
    for line in text.lines() {
        let Some(arg) = line.trim().strip_prefix("- --") else {
            continue;
        };
        let name: String = arg
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        flags.insert(name);
    }
    flags
}

#[test]
fn every_flag_the_chart_writes_is_a_flag_of_run() {
    let cli = Cli::command();
    let run = cli
        .get_subcommands()
        .find(|s| s.get_name() == "run")
        .expect("a run subcommand");
    let real: BTreeSet<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .chain(
            cli.get_arguments()
                .filter_map(|a| a.get_long().map(str::to_string)),
        )
        .collect();
    let written = template_flags();
    assert!(
        written.len() >= 20,
        "found only {written:?} in the template"
    );
    let unknown: Vec<_> = written.difference(&real).collect();
    assert!(
        unknown.is_empty(),
        "templates/deployment.yaml writes flags `deletion-cost run` does not have: {unknown:?}"
    );
    // Every flag of run is either written by the chart or deliberately not.
    let not_offered = [
        "help",
        "version",
        "kubeconfig",         // in-cluster config
        "hook-service-name",  // the Service is deletion-cost-hook
        "hook-insecure-http", // never plain HTTP from the chart
    ];
    let missing: Vec<_> = real
        .iter()
        .filter(|f| !written.contains(*f) && !not_offered.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `deletion-cost run` the chart offers no value for: {missing:?}"
    );
}

#[test]
fn defaults_written_out_are_the_binarys() {
    let Command::Run(run) = Cli::try_parse_from(["deletion-cost", "run"])
        .unwrap()
        .command
    else {
        panic!("not run");
    };
    let v = values();
    let num = |path: &[&str]| -> f64 {
        let mut node = &v;
        for p in path {
            node = &node[*p];
        }
        node.as_f64()
            .unwrap_or_else(|| panic!("values.yaml {path:?} is not a number: {node}"))
    };
    let pairs: [(&[&str], f64); 12] = [
        (
            &["leaderElection", "leaseDuration"],
            run.lease_duration as f64,
        ),
        (&["leaderElection", "renewDeadline"], run.renew_deadline),
        (&["leaderElection", "retryPeriod"], run.retry_period),
        (&["operator", "prometheusTimeout"], run.prometheus_timeout),
        (&["operator", "qps"], run.qps),
        (&["operator", "burst"], f64::from(run.burst)),
        (&["operator", "shutdownGrace"], run.shutdown_grace as f64),
        (&["hook", "settleDelay"], run.hook_settle_delay),
        (&["hook", "maxConcurrent"], run.hook_max_concurrent as f64),
        (&["hook", "sourceQps"], run.hook_source_qps),
        (&["hook", "sourceBurst"], f64::from(run.hook_source_burst)),
        (
            &["prices", "nodeRemovalWindow"],
            run.node_removal_window as f64,
        ),
    ];
    for (path, binary) in pairs {
        assert_eq!(
            num(path),
            binary,
            "values.yaml {} is not the binary's default",
            path.join(".")
        );
    }
    assert_eq!(v["leaderElection"]["leaseName"], run.lease_name.as_str());
    assert_eq!(
        v["operator"]["metricsPort"].as_u64(),
        Some(u64::from(run.metrics_addr.port()))
    );
    assert_eq!(v["hook"]["tokenAudiences"], Value::Array(vec![]));
    assert_eq!(v["operator"]["dryRun"], Value::Bool(run.dry_run));
}

/// The chart's default prices are the prices component's file, and read as
/// `run --prices` reads them.
#[test]
fn the_default_prices_are_the_components_and_read() {
    let file = values()["prices"]["file"]
        .as_str()
        .expect("prices.file is text")
        .to_string();
    assert_eq!(
        file,
        repo_file("deploy/components/prices/prices.yaml"),
        "values.yaml prices.file differs from deploy/components/prices/prices.yaml"
    );
    let prices =
        deletion_cost::input::parse_prices("prices.file", &file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prices.currency.as_deref(), Some("USD"));
    assert!(!prices.billing_classes.is_empty());
}

/// Every object in the schema with named properties refuses others; every
/// key of values.yaml is in the schema; every named leaf has a default.
fn walk_schema(path: &str, schema: &Value, values: Option<&Value>, problems: &mut Vec<String>) {
    let typ = schema["type"].as_str();
    if let Some(props) = schema["properties"].as_object() {
        if schema["additionalProperties"] != Value::Bool(false) {
            problems.push(format!("{path}: additionalProperties is not false"));
        }
        if let Some(Value::Object(vals)) = values {
            for k in vals.keys() {
                if !props.contains_key(k) {
                    problems.push(format!("{path}.{k}: in values.yaml, not in the schema"));
                }
            }
        }
        for (k, sub) in props {
            let v = values.and_then(|v| v.get(k));
            walk_schema(&format!("{path}.{k}"), sub, v, problems);
        }
        return;
    }
    if schema.get("description").and_then(Value::as_str).is_none() {
        problems.push(format!(
            "{path}: no description (the README's table needs one)"
        ));
    }
    if typ == Some("object") && schema["additionalProperties"]["type"] != "string" {
        problems.push(format!(
            "{path}: an open object that is not a map of strings"
        ));
    }
    if typ == Some("array") && schema["items"]["type"] == "object" {
        walk_schema(&format!("{path}[]"), &schema["items"], None, problems);
    }
    let optional_quantity = path.ends_with("ephemeral-storage");
    if values.is_none() && !optional_quantity && !path.ends_with("[]") && !path.contains("[].") {
        problems.push(format!("{path}: no default in values.yaml"));
    }
}

#[test]
fn values_schema_is_closed_and_covers_values_yaml() {
    let schema = schema();
    let values = values();
    let mut problems = Vec::new();
    walk_schema("", &schema, Some(&values), &mut problems);
    assert!(problems.is_empty(), "values.schema.json: {problems:#?}");
}
