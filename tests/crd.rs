//! The checked-in CRD (`deploy/crd/crd.yaml`): current, well-formed, structural,
//! and its admission rules (CEL) accept good policies and reject bad ones.

use std::path::Path;

use deletion_cost::input::{crd_yaml, parse_policies, PolicyFileError};
use deletion_cost::policy::{parse_duration, DeletionCostPolicy};
use kube::core::cel::{ErrorKind, Validator};
use kube::CustomResourceExt;
use serde_json::{json, Value};

const REGENERATE: &str = "cargo run -- crd > deploy/crd/crd.yaml";

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The CRD as JSON, as generated.
fn crd() -> Value {
    serde_json::to_value(DeletionCostPolicy::crd()).unwrap()
}

fn schema() -> Value {
    crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn checked_in_crd_is_current() {
    let generated = crd_yaml().unwrap();
    let checked_in = repo_file("deploy/crd/crd.yaml");
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "lengths differ".to_string(),
                |i| format!("first difference at line {}", i + 1),
            );
        panic!(
            "deploy/crd/crd.yaml is out of date with crates/core/src/policy/types.rs ({line}).\nRegenerate it with:\n    {REGENERATE}"
        );
    }
}

#[test]
fn yaml_reads_back_as_the_generated_crd() {
    let text = repo_file("deploy/crd/crd.yaml");
    let read: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(read, crd(), "the YAML encoding changed the CRD");
}

#[test]
fn names_scope_and_version() {
    let c = crd();
    assert_eq!(c["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(c["kind"], "CustomResourceDefinition");
    assert_eq!(
        c["metadata"]["name"],
        "deletioncostpolicies.deletioncost.dev"
    );
    let spec = &c["spec"];
    assert_eq!(spec["group"], "deletioncost.dev");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "DeletionCostPolicy");
    assert_eq!(spec["names"]["plural"], "deletioncostpolicies");
    assert_eq!(spec["names"]["singular"], "deletioncostpolicy");
    assert_eq!(spec["names"]["shortNames"], json!(["dcp"]));
    let versions = spec["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    let v = &versions[0];
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(v["served"], true);
    assert_eq!(v["storage"], true);
    assert_eq!(v["subresources"], json!({"status": {}}));
}

#[test]
fn printer_columns() {
    let c = crd();
    let cols = c["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap();
    let got: Vec<(&str, &str, &str)> = cols
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["jsonPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status"
            ),
            ("Managed", "integer", ".status.managedPods"),
            (
                "Order",
                "string",
                ".status.conditions[?(@.type==\"OrderAsIntended\")].status"
            ),
            ("Age", "date", ".metadata.creationTimestamp"),
        ]
    );
    // each column points at a field the status schema has
    let status = &schema()["properties"]["status"]["properties"];
    assert!(status["conditions"]["items"]["properties"]["type"].is_object());
    assert_eq!(status["managedPods"]["type"], "integer");
}

/// The formats the API server recognises (apiextensions-apiserver's
/// `GetUnrecognizedFormats`, Kubernetes 1.36): `int32`/`int64` for integers,
/// `float`/`double` for numbers, this list (compared without dashes) for
/// strings. Any other is warned about at every apply of the CRD
/// (`Warning: unrecognized format "uint32"`) and ignored when validating.
fn unrecognized_formats(path: &str, node: &Value, found: &mut Vec<String>) {
    const STRING_FORMATS: &str = "bsonobjectid uri email hostname ipv4 ipv6 cidr mac uuid uuid3 \
        uuid4 uuid5 isbn isbn10 isbn13 creditcard ssn hexcolor rgbcolor byte password date \
        duration datetime k8s-short-name k8s-long-name";
    let Some(map) = node.as_object() else {
        return;
    };
    if let Some(format) = map.get("format").and_then(Value::as_str) {
        let known = match map.get("type").and_then(Value::as_str) {
            Some("integer") => ["int32", "int64"].contains(&format),
            Some("number") => ["float", "double"].contains(&format),
            None | Some("string") => STRING_FORMATS
                .split_whitespace()
                .any(|f| f.replace('-', "") == format.replace('-', "")),
            Some(_) => false,
        };
        if !known {
            found.push(format!("{path}: {format:?}"));
        }
    }
    for (key, sub) in map {
        match key.as_str() {
            "properties" => {
                for (name, p) in sub.as_object().into_iter().flatten() {
                    unrecognized_formats(&format!("{path}.{name}"), p, found);
                }
            }
            "items" => unrecognized_formats(&format!("{path}[]"), sub, found),
            "additionalProperties" => unrecognized_formats(&format!("{path}.*"), sub, found),
            _ => {}
        }
    }
}

#[test]
fn every_format_is_one_the_api_server_recognises() {
    let mut found = Vec::new();
    unrecognized_formats("", &schema(), &mut found);
    assert!(
        found.is_empty(),
        "the API server would warn `unrecognized format` for {found:?}"
    );
    // the unsigned fields keep their range, which the server does enforce
    let spec = &schema()["properties"]["spec"]["properties"];
    let burst = &spec["rateLimit"]["properties"]["burst"];
    assert_eq!(
        (&burst["minimum"], &burst["maximum"]),
        (&json!(1.0), &json!(4294967295.0))
    );
    let budget = &spec["signals"]["items"]["properties"]["billingClass"]["properties"]["budgets"]
        ["additionalProperties"];
    assert_eq!(
        (&budget["minimum"], &budget["maximum"]),
        (&json!(0.0), &json!(4294967295.0))
    );
    let status = &schema()["properties"]["status"]["properties"];
    assert_eq!(status["managedPods"]["maximum"], json!(4294967295.0));
}

/// Keys a structural schema node may carry (apiextensions JSONSchemaProps
/// without the logical junctors, which a generated schema has no need for).
const ALLOWED_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "properties",
    "additionalProperties",
    "items",
    "required",
    "enum",
    "default",
    "nullable",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-validations",
];

/// Checks the rules of a structural schema that apply to what we generate:
/// every node has a type, no `$ref` or junctors, arrays have items, maps have
/// a value schema, CEL rules are well-formed, defaults match their type.
fn check_structural(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    for key in obj.keys() {
        if !ALLOWED_KEYS.contains(&key.as_str()) {
            problems.push(format!("{path}: key {key:?} not allowed"));
        }
    }
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "object" => {
            if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
                problems.push(format!("{path}: both properties and additionalProperties"));
            }
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    check_structural(&format!("{path}.{k}"), v, problems);
                }
                for r in obj
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let r = r.as_str().unwrap_or("");
                    if !props.contains_key(r) {
                        problems.push(format!("{path}: required {r:?} is not a property"));
                    }
                }
            }
            match obj.get("additionalProperties") {
                None => {}
                Some(v @ Value::Object(_)) => check_structural(&format!("{path}.*"), v, problems),
                Some(other) => problems.push(format!("{path}: additionalProperties {other}")),
            }
        }
        "array" => match obj.get("items") {
            Some(items) => check_structural(&format!("{path}[]"), items, problems),
            None => problems.push(format!("{path}: array without items")),
        },
        "string" | "integer" | "number" | "boolean" => {}
        other => problems.push(format!("{path}: type {other:?}")),
    }
    if let Some(d) = obj.get("default") {
        let fits = match ty {
            "string" => d.is_string(),
            "integer" => d.is_i64() || d.is_u64(),
            "number" => d.is_number(),
            "boolean" => d.is_boolean(),
            "object" => d.is_object(),
            "array" => d.is_array(),
            _ => false,
        };
        if !fits {
            problems.push(format!("{path}: default {d} is not a {ty}"));
        }
        if let (Some(e), false) = (obj.get("enum").and_then(Value::as_array), d.is_null()) {
            if !e.contains(d) {
                problems.push(format!("{path}: default {d} not in enum"));
            }
        }
    }
    for rule in obj
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !rule["rule"].is_string() || !rule["message"].is_string() {
            problems.push(format!(
                "{path}: validation rule without rule/message: {rule}"
            ));
        }
    }
}

#[test]
fn schema_is_structural() {
    let s = schema();
    let mut problems = Vec::new();
    check_structural("", &s, &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    // the root holds only what a CRD may declare
    let root: Vec<&String> = s["properties"].as_object().unwrap().keys().collect();
    assert_eq!(root, vec!["spec", "status"]);
    assert_eq!(s["required"], json!(["spec"]));
}

#[test]
fn schema_bounds() {
    let spec = &schema()["properties"]["spec"]["properties"];
    let signal = &spec["signals"]["items"]["properties"];
    let util = &signal["utilization"]["properties"];
    assert_eq!(spec["signals"]["minItems"], 1);
    assert_eq!(spec["signals"]["maxItems"], 16);
    assert_eq!(util["buckets"]["minimum"], 1.0);
    assert_eq!(util["hysteresis"]["minimum"], 0.0);
    assert_eq!(util["prometheus"]["properties"]["query"]["minLength"], 1);
    assert_eq!(
        signal["nodeConsolidation"]["properties"]["maxPods"]["minimum"],
        1.0
    );
    assert_eq!(
        signal["zoneBalance"]["properties"]["maxPerZone"]["minimum"],
        1.0
    );
    assert_eq!(spec["rateLimit"]["properties"]["burst"]["minimum"], 1.0);
    assert_eq!(spec["maxCost"]["minimum"], 1.0);
    assert_eq!(spec["maxCost"]["format"], "int32");
    assert_eq!(spec["targetRef"]["properties"]["name"]["minLength"], 1);
    assert_eq!(
        spec["targetRef"]["properties"]["kind"]["enum"],
        json!(["Deployment", "ReplicaSet"])
    );
    assert_eq!(
        signal["billingClass"]["properties"]["preset"]["enum"],
        json!([
            "auto",
            "karpenter",
            "eks",
            "gkeSpot",
            "gkePreemptible",
            "azure"
        ])
    );
    assert_eq!(spec["combine"]["enum"], json!(["lexicographic", "sum"]));
    assert_eq!(
        spec["selector"]["properties"]["matchExpressions"]["items"]["properties"]["operator"]
            ["enum"],
        json!(["In", "NotIn", "Exists", "DoesNotExist"])
    );
    let pattern = deletion_cost::policy::DURATION_PATTERN;
    assert_eq!(spec["refreshInterval"]["pattern"], pattern);
    assert_eq!(
        util["prometheus"]["properties"]["maxAge"]["pattern"],
        pattern
    );
}

#[test]
fn duration_pattern_agrees_with_the_parser() {
    // evaluate the schema's regex with the CEL engine's `matches`
    let rule = format!(
        "self.matches('{}')",
        deletion_cost::policy::DURATION_PATTERN
    );
    let s = json!({"type": "string", "x-kubernetes-validations": [{"rule": rule, "message": "m"}]});
    let v = Validator::new();
    for text in [
        "30s", "5m", "1h", "1h30m", "1500ms", "0s", "", "5", "m", "5x", "1.5h", "-5m", "5 m",
        "1h 30m", "10mh",
    ] {
        let by_pattern = v.validate(&s, &json!(text), None).is_ok();
        let by_parser = parse_duration(text).is_ok();
        assert_eq!(by_pattern, by_parser, "{text:?}");
    }
}

/// A policy using every field.
fn full_policy() -> Value {
    json!({
        "apiVersion": "deletioncost.dev/v1alpha1",
        "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]
            },
            "signals": [
                {"billingClass": {"preset": "karpenter", "costs": {"spot": 0, "on-demand": 1},
                                  "default": 1, "budgets": {"spot": 3}, "weight": 2}},
                {"billingClass": {"nodeLabel": "pool", "costs": {"a": 0}}},
                {"utilization": {"prometheus": {"query": "up{namespace=\"$namespace\"}",
                                                "podLabel": "pod", "maxAge": "10m"},
                                 "range": {"min": 0, "max": 2}, "buckets": 10,
                                 "hysteresis": 0, "default": 0.5, "weight": 1}},
                {"nodeConsolidation": {"maxPods": 110, "weight": 1}},
                {"zoneBalance": {"topologyKey": "topology.kubernetes.io/zone",
                                 "maxPerZone": 1000, "weight": 1}}
            ],
            "combine": "sum",
            "maxCost": 1000,
            "refreshInterval": "1h30m",
            "rateLimit": {"qps": 1, "burst": 1},
            "onSignalMissing": "useDefault",
            "respectForeignCosts": false
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled",
                            "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"}],
            "managedPods": 3
        }
    })
}

/// The CEL messages an object fails with (empty when it passes). Fails the
/// test on anything but a rule evaluating to false (e.g. a rule that does
/// not compile).
fn cel_failures(object: &Value) -> Vec<String> {
    match Validator::new().validate(&schema(), object, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| {
                assert_eq!(e.kind, ErrorKind::ValidationFailure, "{e:?}");
                e.to_string()
            })
            .collect(),
    }
}

/// `full_policy()` with `edit` applied to its spec.
fn with_spec(edit: impl FnOnce(&mut Value)) -> Value {
    let mut p = full_policy();
    edit(&mut p["spec"]);
    p
}

#[test]
fn cel_accepts_a_full_policy() {
    assert_eq!(cel_failures(&full_policy()), Vec::<String>::new());
    // and the same policy passes validation in code
    let text = serde_json::to_string(&full_policy()).unwrap();
    let found = parse_policies("full.json", &text).unwrap();
    found[0].validate().unwrap();
}

/// Status conditions are `metav1.Condition`s: the operator cannot read one
/// without `lastTransitionTime`, so the schema does not admit one.
#[test]
fn status_conditions_need_a_transition_time() {
    let mut p = full_policy();
    p["status"]["conditions"][0]
        .as_object_mut()
        .unwrap()
        .remove("lastTransitionTime");
    let text = serde_json::to_string(&p).unwrap();
    let err = parse_policies("full.json", &text).unwrap_err().to_string();
    assert!(
        err.contains("status.conditions[0].lastTransitionTime"),
        "{err}"
    );
}

#[test]
fn cel_selector_xor_target_ref() {
    let both = with_spec(|s| {
        s["targetRef"] = json!({"kind": "Deployment", "name": "web"});
    });
    let f = cel_failures(&both);
    assert!(
        f.iter()
            .any(|m| m.contains("exactly one of selector and targetRef")),
        "{f:?}"
    );
    let neither = with_spec(|s| {
        s.as_object_mut().unwrap().remove("selector");
    });
    let f = cel_failures(&neither);
    assert!(
        f.iter()
            .any(|m| m.contains("exactly one of selector and targetRef")),
        "{f:?}"
    );
    let target_only = with_spec(|s| {
        s.as_object_mut().unwrap().remove("selector");
        s["targetRef"] = json!({"kind": "ReplicaSet", "name": "web-1"});
    });
    assert!(cel_failures(&target_only).is_empty());
}

#[test]
fn cel_selector_not_empty() {
    for empty in [
        json!({}),
        json!({"matchLabels": {}, "matchExpressions": []}),
    ] {
        let p = with_spec(|s| s["selector"] = empty.clone());
        let f = cel_failures(&p);
        assert!(
            f.iter().any(|m| m.contains("selector must not be empty")),
            "{empty}: {f:?}"
        );
    }
    let only_expr = with_spec(|s| {
        s["selector"] = json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]});
    });
    assert!(cel_failures(&only_expr).is_empty());
}

#[test]
fn cel_one_kind_per_signal() {
    let two = with_spec(|s| {
        s["signals"][3]["zoneBalance"] = json!({});
    });
    let f = cel_failures(&two);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].contains("each signal sets exactly one of"), "{f:?}");
    let none = with_spec(|s| {
        s["signals"][3] = json!({});
    });
    assert!(cel_failures(&none)[0].contains("each signal sets exactly one of"));
}

#[test]
fn cel_billing_label_or_preset() {
    let both = with_spec(|s| {
        s["signals"][0]["billingClass"]["nodeLabel"] = json!("pool2");
    });
    let f = cel_failures(&both);
    assert!(
        f.iter()
            .any(|m| m.contains("set nodeLabel or preset, not both")),
        "{f:?}"
    );
}

#[test]
fn cel_range_and_hysteresis() {
    for (min, max) in [(1.0, 1.0), (2.0, 1.0)] {
        let p = with_spec(|s| {
            s["signals"][2]["utilization"]["range"] = json!({"min": min, "max": max});
        });
        let f = cel_failures(&p);
        assert!(
            f.iter()
                .any(|m| m.contains("range.max must be greater than range.min")),
            "{f:?}"
        );
    }
    for h in [json!(1), json!(1.5)] {
        let p = with_spec(|s| s["signals"][2]["utilization"]["hysteresis"] = h.clone());
        let f = cel_failures(&p);
        assert!(
            f.iter().any(|m| m.contains("hysteresis must be")),
            "{h}: {f:?}"
        );
    }
    let p = with_spec(|s| s["signals"][2]["utilization"]["hysteresis"] = json!(0.99));
    assert!(cel_failures(&p).is_empty());
}

#[test]
fn cel_rate_limit_qps() {
    for qps in [json!(0), json!(0.0), json!(-1)] {
        let p = with_spec(|s| s["rateLimit"]["qps"] = qps.clone());
        let f = cel_failures(&p);
        assert!(
            f.iter()
                .any(|m| m.contains("rateLimit.qps must be greater than 0")),
            "{qps}: {f:?}"
        );
    }
    let p = with_spec(|s| s["rateLimit"]["qps"] = json!(0.5));
    assert!(cel_failures(&p).is_empty());
}

#[test]
fn bundled_examples_pass_admission_and_validation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        let policies = match parse_policies(&name, &text) {
            Ok(p) => p,
            // the cluster snapshot holds no policy
            Err(PolicyFileError::NoPolicy { .. }) => continue,
            Err(e) => panic!("{e}"),
        };
        for p in policies {
            if let Err(e) = p.validate() {
                panic!("{e}");
            }
            let object = serde_json::to_value(&p.policy).unwrap();
            assert_eq!(cel_failures(&object), Vec::<String>::new(), "{name}");
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} example policies found");
}

#[test]
fn crd_command_prints_the_checked_in_file() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        repo_file("deploy/crd/crd.yaml"),
        "regenerate with: {REGENERATE}"
    );
}
