//! Strict checking of policies read from files, against the CRD's own
//! OpenAPI schema, as the API server checks them under strict field
//! validation (`kubectl apply` since 1.27): an unknown field anywhere is an
//! error, and so are values of the wrong type, out of range or not in an
//! enum. Messages speak the policy's language ("must be at least 1"), never
//! a Rust type, and name the field; an unknown field comes with the closest
//! known one (`spec.combin: unknown field; did you mean combine?`).
//!
//! Nulls are read as the server reads them: a `null` for a field that is not
//! `nullable` is dropped (pruned) before anything else, so it counts as unset.
//!
//! The CEL rules (`x-kubernetes-validations`) are not evaluated here:
//! [`super::validate()`] checks the same things in code.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use kube_core::CustomResourceExt;
use serde_json::{Map, Value};

use super::validate::ValidationError;
use super::DeletionCostPolicy;

/// The fields of `metadata` (ObjectMeta) the API server knows.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The CRD's `openAPIV3Schema`, as JSON (`Null` if it cannot be had, which
/// the tests rule out).
fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        DeletionCostPolicy::crd()
            .spec
            .versions
            .first()
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or(Value::Null)
    })
}

/// Checks a whole `DeletionCostPolicy` object, pruning nulls the server
/// would prune. Returns every problem found, each naming its field.
pub fn check(object: &mut Value) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let Some(map) = object.as_object_mut() else {
        errors.push(error("", "must be an object"));
        return errors;
    };
    let schema = schema();
    let mut known: Vec<&str> = vec!["apiVersion", "kind", "metadata"];
    let props = schema.get("properties").and_then(Value::as_object);
    known.extend(props.into_iter().flat_map(|p| p.keys().map(String::as_str)));
    for key in unknown_keys(map, &known) {
        errors.push(unknown_field(&key, &key, &known));
    }
    match map.get("metadata") {
        Some(Value::Object(meta)) => {
            for key in unknown_keys(meta, &OBJECT_META_FIELDS) {
                errors.push(unknown_field(
                    &format!("metadata.{key}"),
                    &key,
                    &OBJECT_META_FIELDS,
                ));
            }
        }
        None | Some(Value::Null) => {}
        Some(other) => errors.push(error(
            "metadata",
            format!("must be an object, found {}", describe(other)),
        )),
    }
    if let Some(props) = props {
        for (key, sub) in props {
            walk(sub, map, key, key, &mut errors);
        }
    }
    errors
}

/// Keys of `map` not in `known`, in order.
fn unknown_keys(map: &Map<String, Value>, known: &[&str]) -> Vec<String> {
    map.keys()
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect()
}

fn error(field: &str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// `path: unknown field; did you mean X?` (or the known fields when none is close).
fn unknown_field(path: &str, key: &str, known: &[&str]) -> ValidationError {
    let message = match closest(key, known) {
        Some(best) => format!("unknown field; did you mean {best}?"),
        None => format!("unknown field; known fields: {}", known.join(", ")),
    };
    error(path, message)
}

/// Checks the field `key` of `parent` (at `path`) against `schema`; drops it
/// when it is a null the server would prune.
fn walk(
    schema: &Value,
    parent: &mut Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<ValidationError>,
) {
    let Some(value) = parent.get_mut(key) else {
        return;
    };
    if value.is_null() {
        if !is_nullable(schema) {
            parent.remove(key);
        }
        return;
    }
    check_value(schema, value, path, errors);
}

fn is_nullable(schema: &Value) -> bool {
    schema.get("nullable").and_then(Value::as_bool) == Some(true)
}

/// `spec.signals[3]`: an item of the signal list, whose keys are signal kinds.
fn is_signal_item(path: &str) -> bool {
    path.strip_prefix("spec.signals[")
        .is_some_and(|rest| rest.ends_with(']') && !rest.contains(['.', '[']))
}

fn check_value(schema: &Value, value: &mut Value, path: &str, errors: &mut Vec<ValidationError>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "object" => {
            let Some(map) = value.as_object_mut() else {
                errors.push(error(
                    path,
                    format!("must be an object, found {}", describe(value)),
                ));
                return;
            };
            check_object(schema, map, path, errors);
        }
        "array" => {
            let Some(items) = value.as_array_mut() else {
                errors.push(error(
                    path,
                    format!("must be a list, found {}", describe(value)),
                ));
                return;
            };
            check_array(schema, items, path, errors);
        }
        "string" => match value.as_str() {
            None => errors.push(error(
                path,
                format!("must be a string, found {}", describe(value)),
            )),
            Some(s) => check_string(schema, s, path, errors),
        },
        "integer" => check_integer(schema, value, path, errors),
        "number" => match value.as_f64() {
            None => errors.push(error(
                path,
                format!("must be a number, found {}", describe(value)),
            )),
            Some(n) => check_minimum(schema, n, path, errors, false),
        },
        "boolean" if !value.is_boolean() => errors.push(error(
            path,
            format!("must be true or false, found {}", describe(value)),
        )),
        _ => {}
    }
}

/// A list's length against `minItems`/`maxItems`, then each item against
/// the `items` schema (a null item is an error of its own).
fn check_array(schema: &Value, items: &mut [Value], path: &str, errors: &mut Vec<ValidationError>) {
    let noun = if path == "spec.signals" {
        "signal"
    } else {
        "item"
    };
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
        if (items.len() as u64) < min {
            errors.push(error(
                path,
                format!("must list at least {min} {noun}{}", plural(min)),
            ));
        }
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
        if items.len() as u64 > max {
            errors.push(error(
                path,
                format!(
                    "must list at most {max} {noun}{}, found {}",
                    plural(max),
                    items.len()
                ),
            ));
        }
    }
    let Some(item_schema) = schema.get("items") else {
        return;
    };
    for (i, item) in items.iter_mut().enumerate() {
        let at = format!("{path}[{i}]");
        if item.is_null() {
            errors.push(error(&at, "must not be null"));
            continue;
        }
        check_value(item_schema, item, &at, errors);
    }
}

/// A string against the schema's `enum` and `minLength`.
fn check_string(schema: &Value, s: &str, path: &str, errors: &mut Vec<ValidationError>) {
    check_enum(schema, s, path, errors);
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    if (s.chars().count() as u64) < min {
        errors.push(error(
            path,
            if min == 1 {
                "must not be empty".to_string()
            } else {
                format!("must be at least {min} characters long")
            },
        ));
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn check_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    errors: &mut Vec<ValidationError>,
) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let known: Vec<&str> = props.keys().map(String::as_str).collect();
        for key in unknown_keys(map, &known) {
            if is_signal_item(path) {
                let message = match closest(&key, &known) {
                    Some(best) => format!("unknown signal {key}; did you mean {best}?"),
                    None => format!("unknown signal {key}; known: {}", known.join(", ")),
                };
                errors.push(error(path, message));
            } else {
                errors.push(unknown_field(&join(&key), &key, &known));
            }
        }
        for (key, sub) in props {
            walk(sub, map, key, &join(key), errors);
        }
    } else if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let at = format!("{path}[{key}]");
            walk(additional, map, &key, &at, errors);
        }
    }
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for field in required {
        if !map.contains_key(field) {
            errors.push(error(&join(field), "must be set"));
        }
    }
}

/// Whole-number bounds of an integer schema: its format's (`int32`), narrowed
/// by its `minimum` and `maximum` (an unsigned field states its range so,
/// the CRD carries no format Kubernetes does not know). `None` when the
/// schema bounds nothing below `int64`.
fn integer_bounds(schema: &Value) -> Option<(i64, i64)> {
    let format = schema.get("format").and_then(Value::as_str).unwrap_or("");
    let (mut lo, mut hi) = match format {
        "int32" => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        lo = lo.max(min.ceil() as i64);
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        hi = hi.min(max.floor() as i64);
    }
    (format == "int32" || schema.get("maximum").is_some()).then_some((lo, hi))
}

fn check_integer(schema: &Value, value: &Value, path: &str, errors: &mut Vec<ValidationError>) {
    let n = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            // beyond i64: report as out of range below
            n.as_u64().map(|_| i64::MAX)
        }),
        _ => None,
    };
    let Some(n) = n else {
        let found = if value.is_number() {
            format!("{value}")
        } else {
            describe(value)
        };
        errors.push(error(
            path,
            format!("must be a whole number, found {found}"),
        ));
        return;
    };
    if let Some((lo, hi)) = integer_bounds(schema) {
        if n < lo || n > hi {
            let message = if n < lo && lo >= 0 {
                format!("must be at least {lo}, found {value}")
            } else {
                format!("must be a whole number from {lo} to {hi}, found {value}")
            };
            errors.push(error(path, message));
            return;
        }
    }
    check_minimum(schema, n as f64, path, errors, true);
}

fn check_minimum(
    schema: &Value,
    n: f64,
    path: &str,
    errors: &mut Vec<ValidationError>,
    whole: bool,
) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if n < min {
            let shown = if whole {
                format!("{}", min.ceil() as i64)
            } else {
                format!("{min}")
            };
            errors.push(error(path, format!("must be at least {shown}, found {n}")));
        }
    }
}

fn check_enum(schema: &Value, s: &str, path: &str, errors: &mut Vec<ValidationError>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    let allowed: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
    if allowed.contains(&s) {
        return;
    }
    let hint = closest(s, &allowed)
        .map(|best| format!("; did you mean {best}?"))
        .unwrap_or_default();
    errors.push(error(
        path,
        format!("must be one of {} (found {s:?}){hint}", allowed.join(", ")),
    ));
}

/// What a JSON value is, in words.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The known name closest to `word` (case-insensitive edit distance), if it
/// is close enough to be a likely typo: at most a third of the longer name's
/// length, and at least 1 (`combin` → `combine`, `utilisation` → `utilization`),
/// or a known name that starts with it (`keepLast` → `keepLastValue`).
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let w = word.to_lowercase();
    known
        .iter()
        .map(|k| (strsim::levenshtein(&w, &k.to_lowercase()), *k))
        .filter(|(d, k)| {
            let longer = w.chars().count().max(k.chars().count());
            *d <= (longer / 3).max(1)
                // a cut-short name: `keepLast` for `keepLastValue`
                || (w.chars().count() >= 3 && k.to_lowercase().starts_with(&w))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strsim::levenshtein as edit_distance;

    fn policy(spec: Value) -> Value {
        json!({
            "apiVersion": "deletioncost.dev/v1alpha1",
            "kind": "DeletionCostPolicy",
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": spec,
        })
    }

    fn errors(spec: Value) -> Vec<String> {
        check(&mut policy(spec))
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    fn base() -> Value {
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0}}}],
        })
    }

    fn with(f: impl FnOnce(&mut Value)) -> Vec<String> {
        let mut spec = base();
        f(&mut spec);
        errors(spec)
    }

    #[test]
    fn the_schema_is_there() {
        assert!(schema()["properties"]["spec"]["properties"]["signals"].is_object());
        assert_eq!(errors(base()), Vec::<String>::new());
    }

    #[test]
    fn edit_distance_and_closest() {
        assert_eq!(edit_distance("combin", "combine"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("combin", &["combine", "selector"]), Some("combine"));
        assert_eq!(
            closest("utilisation", &["utilization", "zoneBalance"]),
            Some("utilization")
        );
        assert_eq!(closest("Buckets", &["buckets"]), Some("buckets"));
        assert_eq!(closest("gpuPrice", &["billingClass", "utilization"]), None);
        assert_eq!(
            closest("keepLast", &["keepLastValue", "skip"]),
            Some("keepLastValue")
        );
    }

    #[test]
    fn unknown_fields_everywhere_name_the_closest_known_one() {
        assert_eq!(
            with(|s| s["combin"] = json!("sum")),
            ["spec.combin: unknown field; did you mean combine?"]
        );
        assert_eq!(
            with(|s| s["signals"][0]["billingClass"]["defualt"] = json!(1)),
            ["spec.signals[0].billingClass.defualt: unknown field; did you mean default?"]
        );
        assert_eq!(
            with(|s| s["selector"]["matchLabel"] = json!({"a": "b"})),
            ["spec.selector.matchLabel: unknown field; did you mean matchLabels?"]
        );
        let e = with(|s| s["zzz"] = json!(1));
        assert!(
            e[0].starts_with("spec.zzz: unknown field; known fields: "),
            "{e:?}"
        );
        let mut p = policy(base());
        p["metadata"]["lables"] = json!({});
        p["specs"] = json!({});
        let e: Vec<String> = check(&mut p).iter().map(|e| e.to_string()).collect();
        assert!(
            e.contains(&"specs: unknown field; did you mean spec?".to_string()),
            "{e:?}"
        );
        assert!(
            e.contains(&"metadata.lables: unknown field; did you mean labels?".to_string()),
            "{e:?}"
        );
        // maps take any key
        assert!(
            with(|s| s["signals"][0]["billingClass"]["costs"]["anything-at/all"] = json!(3))
                .is_empty()
        );
    }

    #[test]
    fn unknown_signal_is_named() {
        assert_eq!(
            with(|s| s["signals"] = json!([{"gpuPrice": {}}])),
            ["spec.signals[0]: unknown signal gpuPrice; known: billingClass, nodeConsolidation, utilization, zoneBalance"]
        );
        assert_eq!(
            with(|s| s["signals"] = json!([{"zoneBalance": {}}, {"utilisation": {}}])),
            ["spec.signals[1]: unknown signal utilisation; did you mean utilization?"]
        );
    }

    #[test]
    fn values_in_the_policys_language() {
        let util = |buckets: Value| {
            with(|s| {
                s["signals"] = json!([{"utilization": {
                    "prometheus": {"query": "up"},
                    "range": {"min": 0, "max": 1},
                    "buckets": buckets,
                }}])
            })
        };
        assert_eq!(
            util(json!(-5)),
            ["spec.signals[0].utilization.buckets: must be at least 1, found -5"]
        );
        assert_eq!(
            util(json!(0)),
            ["spec.signals[0].utilization.buckets: must be at least 1, found 0"]
        );
        assert_eq!(
            util(json!(5_000_000_000_i64)),
            ["spec.signals[0].utilization.buckets: must be a whole number from 1 to 4294967295, found 5000000000"]
        );
        assert_eq!(
            util(json!(2.5)),
            ["spec.signals[0].utilization.buckets: must be a whole number, found 2.5"]
        );
        assert_eq!(
            util(json!("ten")),
            ["spec.signals[0].utilization.buckets: must be a whole number, found the string \"ten\""]
        );
        assert!(util(json!(null)).is_empty(), "null is unset");
        assert_eq!(
            with(|s| s["combine"] = json!("summ")),
            ["spec.combine: must be one of lexicographic, sum (found \"summ\"); did you mean sum?"]
        );
        assert_eq!(
            with(|s| s["respectForeignCosts"] = json!("yes")),
            ["spec.respectForeignCosts: must be true or false, found the string \"yes\""]
        );
        assert_eq!(
            with(|s| s["signals"][0]["billingClass"]["default"] = json!(3_000_000_000_i64)),
            ["spec.signals[0].billingClass.default: must be a whole number from -2147483648 to 2147483647, found 3000000000"]
        );
        assert_eq!(
            with(|s| s["signals"][0]["billingClass"]["costs"]["spot"] = json!("cheap")),
            ["spec.signals[0].billingClass.costs[spot]: must be a whole number, found the string \"cheap\""]
        );
        assert_eq!(
            with(|s| s["signals"] = json!([])),
            ["spec.signals: must list at least 1 signal"]
        );
        assert_eq!(
            with(|s| s["signals"] = json!("billingClass")),
            ["spec.signals: must be a list, found the string \"billingClass\""]
        );
        assert_eq!(
            with(|s| s["targetRef"] = json!({"kind": "Deployment"})),
            ["spec.targetRef.name: must be set"]
        );
        assert_eq!(
            with(|s| s["rateLimit"] = json!({"qps": "fast", "burst": 0})),
            [
                "spec.rateLimit.burst: must be at least 1, found 0",
                "spec.rateLimit.qps: must be a number, found the string \"fast\""
            ]
        );
        let mut spec = base();
        spec.as_object_mut().unwrap().remove("signals");
        assert_eq!(errors(spec), ["spec.signals: must be set"]);
        assert_eq!(
            errors(json!(null)),
            Vec::<String>::new(),
            "an unset spec is left to validation"
        );
    }

    #[test]
    fn max_cost_is_a_positive_int32() {
        assert_eq!(with(|s| s["maxCost"] = json!(1000)), Vec::<String>::new());
        assert_eq!(
            with(|s| s["maxCost"] = json!(0)),
            ["spec.maxCost: must be at least 1, found 0"]
        );
        assert_eq!(
            with(|s| s["maxCost"] = json!(2_147_483_648_i64)),
            ["spec.maxCost: must be a whole number from 1 to 2147483647, found 2147483648"]
        );
        let wrong_type = with(|s| s["maxCost"] = json!("1k"));
        assert!(
            wrong_type.len() == 1
                && wrong_type[0].starts_with("spec.maxCost: must be a whole number"),
            "{wrong_type:?}"
        );
    }

    #[test]
    fn non_nullable_nulls_are_pruned_like_the_server_does() {
        let mut p = policy(base());
        p["spec"]["combine"] = Value::Null;
        assert!(check(&mut p).is_empty());
        assert!(p["spec"].get("combine").is_none());
        // a nullable field keeps its null
        p["spec"]["refreshInterval"] = Value::Null;
        assert!(check(&mut p).is_empty());
        assert!(p["spec"].get("refreshInterval").is_some());
        // a required field that is null is missing
        p["spec"]["signals"] = Value::Null;
        let e: Vec<String> = check(&mut p).iter().map(|e| e.to_string()).collect();
        assert_eq!(e, ["spec.signals: must be set"]);
    }
}
