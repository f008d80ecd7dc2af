use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::policy::types::TargetKind;

/// A spec from its JSON form, as a user would write it.
fn spec(json: Value) -> DeletionCostPolicySpec {
    serde_json::from_value(json).unwrap()
}

/// The errors of a spec that must not validate.
fn errors(json: Value) -> Vec<ValidationError> {
    validate(&spec(json)).unwrap_err().0
}

/// Asserts exactly one error, at `field`, whose message contains `needle`.
fn assert_one_error(json: Value, field: &str, needle: &str) {
    assert_one(errors(json), field, needle);
}

/// Asserts exactly one error in `errs`, as [`assert_one_error`] does.
fn assert_one(errs: Vec<ValidationError>, field: &str, needle: &str) {
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    assert_eq!(errs[0].field, field, "{errs:#?}");
    assert!(
        errs[0].message.contains(needle),
        "message {:?} lacks {needle:?}",
        errs[0].message
    );
    // the rendered error starts with the field path
    assert!(errs[0].to_string().starts_with(&format!("{field}: ")));
}

/// A utilization signal with a query that uses `$namespace`.
fn util() -> Value {
    json!({"utilization": {
        "prometheus": {"query": "sum by (pod) (rate(x{namespace=\"$namespace\"}[5m]))"},
        "range": {"min": 0, "max": 1}
    }})
}

/// A spec selecting `app: web` with `signals`.
fn web(signals: Value) -> Value {
    json!({"selector": {"matchLabels": {"app": "web"}}, "signals": signals})
}

#[test]
fn defaults_are_applied() {
    let p = validate(&spec(web(json!([
        {"billingClass": {"costs": {"spot": -10, "on-demand": 10}}},
        util(),
        {"nodeConsolidation": {}},
        {"zoneBalance": {}}
    ]))))
    .unwrap();
    assert_eq!(p.refresh_interval, Duration::from_secs(300));
    assert_eq!(p.combine, Combine::Lexicographic);
    assert_eq!(p.on_signal_missing, OnSignalMissing::KeepLastValue);
    assert!(p.respect_foreign_costs);
    assert!(p.rate_limit.is_none());
    assert!(matches!(&p.target, Target::Selector(s) if s.match_labels["app"] == "web"));
    let ValidatedSignal::BillingClass(b) = &p.signals[0] else {
        panic!("{:?}", p.signals[0])
    };
    assert_eq!(b.source, BillingSource::Preset(BillingPreset::Auto));
    assert_eq!(b.weight, 1);
    assert_eq!(b.default, 0);
    let ValidatedSignal::Utilization(u) = &p.signals[1] else {
        panic!("{:?}", p.signals[1])
    };
    assert_eq!(u.buckets, 10);
    assert_eq!(u.hysteresis, 0.2);
    assert_eq!(u.pod_label, "pod");
    assert_eq!(u.max_age, Duration::from_secs(600));
    assert_eq!(u.weight, 1);
    assert_eq!(
        p.signals[2],
        ValidatedSignal::NodeConsolidation(NodeConsolidation {
            max_pods: 110,
            weight: 1,
            // what int32 leaves beside billing (21 values), utilisation (10)
            // and zones (1001): 2^31 / (21 * 10 * 1001 * 112 bands)
            node_slots: 91,
        })
    );
    assert_eq!(
        p.signals[3],
        ValidatedSignal::ZoneBalance(ZoneBalance {
            topology_key: "topology.kubernetes.io/zone".into(),
            max_per_zone: 1000,
            max_skew: 1,
            weight: 1
        })
    );
}

#[test]
fn explicit_values_are_kept() {
    let p = validate(&spec(json!({
        "targetRef": {"kind": "Deployment", "name": "web"},
        "combine": "sum",
        "refreshInterval": "1h30m",
        "rateLimit": {"qps": 2.5, "burst": 4},
        "onSignalMissing": "useDefault",
        "respectForeignCosts": false,
        "signals": [{"utilization": {
            "prometheus": {"query": "up", "podLabel": "name", "maxAge": "90s"},
            "range": {"min": 0, "max": 4},
            "buckets": 4,
            "hysteresis": 0,
            "default": 1.5,
            "weight": -3
        }}]
    })))
    .unwrap();
    assert_eq!(
        p.target,
        Target::Workload(TargetRef {
            kind: TargetKind::Deployment,
            name: "web".into()
        })
    );
    assert_eq!(p.refresh_interval, Duration::from_secs(5400));
    assert_eq!(p.rate_limit, Some(RateLimit { qps: 2.5, burst: 4 }));
    assert_eq!(p.on_signal_missing, OnSignalMissing::UseDefault);
    assert!(!p.respect_foreign_costs);
    let ValidatedSignal::Utilization(u) = &p.signals[0] else {
        panic!()
    };
    assert_eq!(
        (u.pod_label.as_str(), u.max_age, u.buckets, u.hysteresis),
        ("name", Duration::from_secs(90), 4, 0.0)
    );
    assert_eq!(u.default, Some(1.5));
    assert_eq!(p.signals[0].weight(), -3);
    assert_eq!(p.multipliers(), &[-3]);
}

#[test]
fn selector_and_target_ref_both_or_neither() {
    assert_one_error(
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "targetRef": {"kind": "Deployment", "name": "web"},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec",
        "not both",
    );
    assert_one_error(
        json!({"signals": [{"nodeConsolidation": {}}]}),
        "spec",
        "neither is set",
    );
}

#[test]
fn empty_selector() {
    assert_one_error(
        json!({"selector": {}, "signals": [{"nodeConsolidation": {}}]}),
        "spec.selector",
        "must not be empty",
    );
    assert_one_error(
        json!({
            "selector": {"matchLabels": {}, "matchExpressions": []},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.selector",
        "every pod",
    );
}

#[test]
fn bad_selector_expression() {
    assert_one_error(
        json!({
            "selector": {"matchExpressions": [{"key": "app", "operator": "In"}]},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.selector",
        "matchExpressions[0].values",
    );
    assert_one_error(
        json!({
            "selector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["a"]}]},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.selector",
        "matchExpressions[0].operator",
    );
}

#[test]
fn empty_target_ref_name() {
    assert_one_error(
        json!({
            "targetRef": {"kind": "ReplicaSet", "name": ""},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.targetRef.name",
        "must not be empty",
    );
}

#[test]
fn no_signals() {
    assert_one_error(web(json!([])), "spec.signals", "at least one");
}

#[test]
fn signal_with_none_or_two_kinds() {
    assert_one_error(
        web(json!([{"nodeConsolidation": {}}, {}])),
        "spec.signals[1]",
        "none is set",
    );
    assert_one_error(
        web(json!([{"nodeConsolidation": {}, "zoneBalance": {}}])),
        "spec.signals[0]",
        "found nodeConsolidation, zoneBalance",
    );
}

#[test]
fn billing_class_label_and_preset() {
    assert_one_error(
        web(json!([{"billingClass": {"nodeLabel": "x", "preset": "eks", "costs": {"a": 1}}}])),
        "spec.signals[0].billingClass",
        "not both",
    );
    assert_one_error(
        web(json!([{"billingClass": {"nodeLabel": " ", "costs": {"a": 1}}}])),
        "spec.signals[0].billingClass.nodeLabel",
        "must not be empty",
    );
}

#[test]
fn preset_costs_must_name_normalised_classes() {
    assert_one_error(
        web(json!([{"billingClass": {"preset": "eks", "costs": {"SPOT": 1, "on-demand": 2}}}])),
        "spec.signals[0].billingClass.costs.SPOT",
        "write \"spot\"",
    );
    assert_one_error(
        web(json!([{"billingClass": {"costs": {"spot": 1}, "budgets": {"On-Demand": 3}}}])),
        "spec.signals[0].billingClass.budgets.On-Demand",
        "never matches",
    );
    assert!(validate(&spec(web(json!([{"billingClass": {
        "preset": "karpenter",
        "costs": {"spot": 0, "on-demand": 1, "reserved": 2}
    }}]))))
    .is_ok());
    // a custom label takes classes as written
    assert!(validate(&spec(web(json!([
        {"billingClass": {"nodeLabel": "pool", "costs": {"SPOT": 1}}}
    ]))))
    .is_ok());
}

#[test]
fn query_placeholders() {
    assert!(check_query("up{namespace=\"$namespace\", $selector}").is_ok());
    assert!(check_query("sum(rate(x[5m])) by (pod)").is_ok());
    let e = check_query("up{pod=\"$pod\", ns=\"$namespaces\"}").unwrap_err();
    assert!(e.contains("`$pod`") && e.contains("`$namespaces`"), "{e}");
    assert!(check_query("up{ns=\"${namespace}\"}")
        .unwrap_err()
        .contains("lone `$`"));
    assert!(check_query("up $").unwrap_err().contains("lone `$`"));
    assert_eq!(check_query("  ").unwrap_err(), "must not be empty");
    assert_one_error(
        web(json!([
            {"nodeConsolidation": {}},
            {"utilization": {"prometheus": {"query": "up{x=\"$node\"}"}, "range": {"min": 0, "max": 1}}}
        ])),
        "spec.signals[1].utilization.prometheus.query",
        "`$node`",
    );
    assert_one_error(
        web(json!([
            {"utilization": {"prometheus": {"query": ""}, "range": {"min": 0, "max": 1}}}
        ])),
        "spec.signals[0].utilization.prometheus.query",
        "must not be empty",
    );
}

#[test]
fn zero_buckets() {
    assert_one_error(
        web(json!([
            {"nodeConsolidation": {}},
            {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 0}}
        ])),
        "spec.signals[1].utilization.buckets",
        "must be at least 1",
    );
}

#[test]
fn utilization_numbers() {
    let signal = |utilization: Value| web(json!([{ "utilization": utilization }]));
    assert_one_error(
        signal(json!({"prometheus": {"query": "up"}, "range": {"min": 1, "max": 1}})),
        "spec.signals[0].utilization.range.max",
        "greater than range.min",
    );
    // JSON has no NaN or infinity: those are set on the parsed spec
    let mut nan = spec(signal(
        json!({"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}}),
    ));
    nan.signals[0].utilization.as_mut().unwrap().range.min = f64::NAN;
    assert_one(
        validate(&nan).unwrap_err().0,
        "spec.signals[0].utilization.range.min",
        "finite",
    );
    assert_one_error(
        signal(
            json!({"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "hysteresis": 1}),
        ),
        "spec.signals[0].utilization.hysteresis",
        "below 1",
    );
    assert_one_error(
        signal(
            json!({"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "hysteresis": -0.1}),
        ),
        "spec.signals[0].utilization.hysteresis",
        "at least 0",
    );
    let mut inf = spec(signal(
        json!({"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}}),
    ));
    inf.signals[0].utilization.as_mut().unwrap().default = Some(f64::INFINITY);
    assert_one(
        validate(&inf).unwrap_err().0,
        "spec.signals[0].utilization.default",
        "finite",
    );
    assert_one_error(
        json!({
            "onSignalMissing": "useDefault",
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}}}]
        }),
        "spec.signals[0].utilization.default",
        "useDefault",
    );
}

#[test]
fn durations() {
    for (text, secs) in [("30s", 30), ("5m", 300), ("1h", 3600), ("1h30m", 5400)] {
        assert_eq!(
            parse_duration(text),
            Ok(Duration::from_secs(secs)),
            "{text}"
        );
    }
    assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("1m1ms"), Ok(Duration::from_millis(60_001)));
    for (text, needle) in [
        ("", "empty"),
        ("5", "no unit"),
        ("m", "expected a number"),
        ("5x", "unknown unit"),
        ("1.5h", "unknown unit"),
        ("-5m", "expected a number"),
        ("5 m", "unknown unit"),
        ("99999999999999999999h", "too large"),
        ("9999999999999999h", "too large"),
    ] {
        let e = parse_duration(text).unwrap_err();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
    assert_one_error(
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "refreshInterval": "soon",
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.refreshInterval",
        "not a duration",
    );
    assert_one_error(
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "refreshInterval": "500ms",
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.refreshInterval",
        "at least 1s",
    );
    // maxAge is a string: a bare number has no unit
    assert_one_error(
        web(json!([{"utilization": {
            "prometheus": {"query": "up", "maxAge": "10"},
            "range": {"min": 0, "max": 1}
        }}])),
        "spec.signals[0].utilization.prometheus.maxAge",
        "no unit",
    );
    assert_one_error(
        web(json!([{"utilization": {
            "prometheus": {"query": "up", "maxAge": "0s"},
            "range": {"min": 0, "max": 1}
        }}])),
        "spec.signals[0].utilization.prometheus.maxAge",
        "greater than 0",
    );
}

#[test]
fn rate_limit() {
    assert_one_error(
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "rateLimit": {"qps": 0, "burst": 1},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.rateLimit.qps",
        "greater than 0",
    );
    assert_one_error(
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "rateLimit": {"qps": 1, "burst": 0},
            "signals": [{"nodeConsolidation": {}}]
        }),
        "spec.rateLimit.burst",
        "at least 1",
    );
}

#[test]
fn caps_at_least_one() {
    assert_one_error(
        web(json!([{"nodeConsolidation": {"maxPods": 0}}])),
        "spec.signals[0].nodeConsolidation.maxPods",
        "at least 1",
    );
    assert_one_error(
        web(json!([{"zoneBalance": {"maxPerZone": 0}}])),
        "spec.signals[0].zoneBalance.maxPerZone",
        "at least 1",
    );
    assert_one_error(
        web(json!([{"zoneBalance": {"topologyKey": ""}}])),
        "spec.signals[0].zoneBalance.topologyKey",
        "must not be empty",
    );
}

#[test]
fn zero_weight_under_sum() {
    assert_one_error(
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "combine": "sum",
            "signals": [{"nodeConsolidation": {}}, {"zoneBalance": {"weight": 0}}]
        }),
        "spec.signals[1].zoneBalance.weight",
        "must not be 0",
    );
    // weights do not matter under lexicographic
    assert!(validate(&spec(web(json!([
        {"nodeConsolidation": {}},
        {"zoneBalance": {"weight": 0}}
    ]))))
    .is_ok());
}

#[test]
fn duplicate_signals() {
    assert_one_error(
        web(json!([
            {"billingClass": {"nodeLabel": "pool", "costs": {"a": 1}}},
            {"billingClass": {"nodeLabel": "pool", "costs": {"b": 1}}}
        ])),
        "spec.signals[1].billingClass",
        "duplicates spec.signals[0]: both read the same node label (pool)",
    );
    assert_one_error(
        web(json!([
            {"billingClass": {"costs": {"spot": 1}}},
            {"billingClass": {"preset": "karpenter", "costs": {"spot": 2}}}
        ])),
        "spec.signals[1].billingClass",
        "karpenter.sh/capacity-type",
    );
    assert_one_error(
        web(json!([
            {"billingClass": {"preset": "eks", "costs": {"spot": 1}}},
            {"billingClass": {"nodeLabel": "eks.amazonaws.com/capacityType", "costs": {"SPOT": 2}}}
        ])),
        "spec.signals[1].billingClass",
        "duplicates spec.signals[0]",
    );
    assert_one_error(
        web(json!([
            {"utilization": {"prometheus": {"query": "sum  by (pod) (x)"}, "range": {"min": 0, "max": 1}}},
            {"utilization": {"prometheus": {"query": "sum by (pod) (x)"}, "range": {"min": 0, "max": 2}, "buckets": 3}}
        ])),
        "spec.signals[1].utilization",
        "same query",
    );
    assert_one_error(
        web(json!([
            {"nodeConsolidation": {}},
            {"zoneBalance": {}},
            {"nodeConsolidation": {"maxPods": 50}}
        ])),
        "spec.signals[2].nodeConsolidation",
        "duplicates spec.signals[0]",
    );
    assert_one_error(
        web(json!([
            {"zoneBalance": {}},
            {"zoneBalance": {"topologyKey": "topology.kubernetes.io/zone"}}
        ])),
        "spec.signals[1].zoneBalance",
        "topology key",
    );
    // different data is not a duplicate
    assert!(validate(&spec(web(json!([
        {"billingClass": {"preset": "eks", "costs": {"spot": 1}}},
        {"billingClass": {"preset": "azure", "costs": {"spot": 1}}},
        {"zoneBalance": {}},
        {"zoneBalance": {"topologyKey": "rack"}},
        util(),
        {"utilization": {"prometheus": {"query": "up", "podLabel": "name"}, "range": {"min": 0, "max": 1}}}
    ]))))
    .is_ok());
}

#[test]
fn lexicographic_overflow_names_the_signals() {
    let errs = errors(web(json!([
        {"nodeConsolidation": {"maxPods": 100000}},
        {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 100000}}
    ])));
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "spec.signals");
    let m = &errs[0].message;
    assert!(
        // 100,001 counts and the band of nodes no autoscaler may remove,
        // one node slot each: no room is left for more
        m.contains("signals[0] nodeConsolidation has 100002 values"),
        "{m}"
    );
    assert!(
        m.contains("signals[1] utilization has 100000 values"),
        "{m}"
    );
    assert!(m.contains("fewer buckets"), "{m}");

    let errs = errors(web(json!([
        {"billingClass": {"costs": {"spot": -2000000000, "on-demand": 2000000000}}}
    ])));
    assert!(errs[0]
        .message
        .contains("signals[0] billingClass has 4000000001 values"));
}

#[test]
fn lexicographic_at_the_limit_fits() {
    // 2^31 combinations exactly: 0 ..= i32::MAX
    let p = validate(&spec(web(json!([
        {"billingClass": {"nodeLabel": "pool", "costs": {"a": 0, "b": 32767}}},
        {"billingClass": {"nodeLabel": "rack", "costs": {"a": 0, "b": 65535}}}
    ]))))
    .unwrap();
    assert_eq!(p.multipliers(), &[65536, 1]);
    assert_eq!(p.combined_range(), (0, i64::from(i32::MAX)));
    assert_eq!(p.combine(&[32767, 65535]), i32::MAX);
    assert!(errors(web(json!([
        {"billingClass": {"nodeLabel": "pool", "costs": {"a": 0, "b": 32768}}},
        {"billingClass": {"nodeLabel": "rack", "costs": {"a": 0, "b": 65535}}}
    ])))[0]
        .message
        .contains("overflows int32 at signals[0]"));
}

#[test]
fn sum_overflow_names_the_terms() {
    let errs = errors(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "combine": "sum",
        "signals": [
            {"billingClass": {"costs": {"spot": -3000000, "on-demand": 10}, "weight": 1000}},
            {"nodeConsolidation": {}}
        ]
    }));
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "spec.signals");
    let m = &errs[0].message;
    assert!(
        m.contains("signals[0] billingClass: |weight 1000| * 3000000 = 3000000000"),
        "{m}"
    );
    assert!(m.contains("signals[1] nodeConsolidation"), "{m}");
    assert!(m.contains("smaller weights or costs"), "{m}");
}

#[test]
fn value_ranges() {
    let p = validate(&spec(web(json!([
        {"billingClass": {"nodeLabel": "pool", "costs": {"a": 5, "b": 20}, "default": -3}},
        {"billingClass": {"costs": {"spot": 1, "on-demand": 9}, "budgets": {"spot": 4}}},
        {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 7}},
        {"nodeConsolidation": {"maxPods": 30}},
        {"zoneBalance": {"maxPerZone": 12}}
    ]))))
    .unwrap();
    let ranges: Vec<_> = p.signals.iter().map(ValidatedSignal::value_range).collect();
    // the default (0) counts, and budgets add one slot below for pods over
    // budget; consolidation has 32 bands (0..=30 pods, then the nodes no
    // autoscaler may remove) of as many node slots as int32 leaves beside
    // the others' 24 * 11 * 7 * 13 values: 2^31 / (24024 * 32) = 2793
    assert_eq!(
        ranges,
        vec![(-3, 20), (-1, 9), (0, 6), (0, 32 * 2793 - 1), (0, 12)]
    );
    assert_eq!(p.combined_range().1, i64::from(24024 * 32 * 2793) - 1);
    let ValidatedSignal::BillingClass(b) = &p.signals[1] else {
        panic!()
    };
    assert_eq!(b.over_budget_value(), Some(-1));
    assert_eq!(b.cost_of(Some("on-demand")), 9);
    assert_eq!(b.cost_of(Some("other")), 0);
    assert_eq!(b.cost_of(None), 0);
    // multipliers: product of the later ranges' sizes
    const CONSOLIDATION: i64 = 32 * 2793;
    assert_eq!(
        p.multipliers(),
        &[
            11 * 7 * CONSOLIDATION * 13,
            7 * CONSOLIDATION * 13,
            CONSOLIDATION * 13,
            13,
            1
        ]
    );
}

#[test]
fn combine_lexicographic_and_sum() {
    let lex = validate(&spec(web(json!([
        {"billingClass": {"costs": {"spot": -1, "on-demand": 1}}},
        {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 10}}
    ]))))
    .unwrap();
    assert_eq!(lex.multipliers(), &[10, 1]);
    assert_eq!(lex.combine(&[-1, 0]), 0);
    assert_eq!(lex.combine(&[-1, 9]), 9);
    assert_eq!(lex.combine(&[1, 0]), 20);
    // out-of-range values are clamped; a missing value counts as the minimum
    assert_eq!(lex.combine(&[5, 99]), 29);
    assert_eq!(lex.combine(&[1]), 20);
    assert_eq!(lex.combined_range(), (0, 29));

    let sum = validate(&spec(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "combine": "sum",
        "signals": [
            {"billingClass": {"costs": {"spot": -1, "on-demand": 1}, "weight": 100}},
            {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "weight": -2}}
        ]
    })))
    .unwrap();
    assert_eq!(sum.multipliers(), &[100, -2]);
    assert_eq!(sum.combine(&[1, 3]), 94);
    assert_eq!(sum.combine(&[-1, 9]), -118);
    assert_eq!(sum.combined_range(), (-118, 100));
}

#[test]
fn all_errors_are_reported_at_once() {
    let errs = errors(json!({
        "selector": {},
        "refreshInterval": "x",
        "signals": [
            {"utilization": {"prometheus": {"query": "$x"}, "range": {"min": 0, "max": 1}, "buckets": 0}}
        ]
    }));
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.selector",
            "spec.refreshInterval",
            "spec.signals[0].utilization.prometheus.query",
            "spec.signals[0].utilization.buckets"
        ]
    );
    let text = ValidationErrors(errs).to_string();
    assert_eq!(text.lines().count(), 4);
}

/// A signal spec with a small range; `i` keeps labels and queries distinct.
fn arb_signal(i: usize) -> impl Strategy<Value = Signal> {
    prop_oneof![
        (-50i32..50, -50i32..50, -50i32..50, any::<bool>(), -5i32..5).prop_map(
            move |(a, b, d, budget, w)| Signal {
                billing_class: Some(BillingClassSignal {
                    node_label: Some(format!("label-{i}")),
                    preset: None,
                    costs: BTreeMap::from([("a".into(), a), ("b".into(), b)]),
                    default: d,
                    budgets: if budget {
                        BTreeMap::from([("a".into(), 2)])
                    } else {
                        BTreeMap::new()
                    },
                    weight: Some(if w == 0 { 1 } else { w }),
                }),
                ..Default::default()
            }
        ),
        (1u32..40, -5i32..5).prop_map(move |(buckets, w)| Signal {
            utilization: Some(UtilizationSignal {
                prometheus: super::super::types::PrometheusQuery {
                    query: format!("q{i}"),
                    pod_label: None,
                    max_age: None,
                },
                range: ValueRange { min: 0.0, max: 1.0 },
                buckets: Some(buckets),
                hysteresis: None,
                default: None,
                weight: Some(if w == 0 { 2 } else { w }),
            }),
            ..Default::default()
        }),
        (1u32..300, -5i32..5).prop_map(move |(max, w)| Signal {
            zone_balance: Some(ZoneBalanceSignal {
                topology_key: Some(format!("zone-{i}")),
                max_per_zone: Some(max),
                max_skew: None,
                weight: Some(if w == 0 { 3 } else { w }),
            }),
            ..Default::default()
        }),
    ]
}

fn arb_spec(combine: Combine) -> impl Strategy<Value = DeletionCostPolicySpec> {
    (1usize..5)
        .prop_flat_map(|n| (0..n).map(arb_signal).collect::<Vec<_>>())
        .prop_map(move |signals| DeletionCostPolicySpec {
            selector: Some(LabelSelector {
                match_labels: BTreeMap::from([("app".into(), "web".into())]),
                ..Default::default()
            }),
            target_ref: None,
            signals,
            combine,
            max_cost: None,
            refresh_interval: None,
            rate_limit: None,
            on_signal_missing: OnSignalMissing::KeepLastValue,
            respect_foreign_costs: true,
            writes: Default::default(),
        })
}

/// Values per signal, some outside the signal's range.
fn values_for(p: &ValidatedPolicy, picks: &[(u32, i64)]) -> Vec<i64> {
    p.signals
        .iter()
        .zip(picks)
        .map(|(s, (pick, off))| {
            let (min, max) = s.value_range();
            // mostly inside the range, sometimes beyond it
            min + i64::from(*pick) % (max - min + 1) + if pick % 7 == 0 { *off } else { 0 }
        })
        .collect()
}

fn clamped(p: &ValidatedPolicy, values: &[i64]) -> Vec<i64> {
    p.signals
        .iter()
        .zip(values)
        .map(|(s, v)| {
            let (min, max) = s.value_range();
            (*v).clamp(min, max)
        })
        .collect()
}

proptest! {
    #[test]
    fn lexicographic_accepts_exactly_what_fits_and_keeps_order(
        spec in arb_spec(Combine::Lexicographic),
        a in prop::collection::vec((any::<u32>(), -1000i64..1000), 4),
        b in prop::collection::vec((any::<u32>(), -1000i64..1000), 4),
    ) {
        let product: i128 = spec.signals.iter().map(|s| {
            let (min, max) = ValidatedSignal::from_spec_for_test(s).value_range();
            i128::from(max - min + 1)
        }).product();
        match validate(&spec) {
            Err(e) => {
                prop_assert!(product > 1i128 << 31, "rejected {product}: {e}");
                prop_assert!(e.0[0].message.contains("overflows int32"));
            }
            Ok(p) => {
                prop_assert!(product <= 1i128 << 31);
                let (va, vb) = (values_for(&p, &a), values_for(&p, &b));
                let (ca, cb) = (p.combine(&va), p.combine(&vb));
                let (lo, hi) = p.combined_range();
                prop_assert!(lo <= i64::from(ca) && i64::from(ca) <= hi);
                prop_assert!(lo <= i64::from(cb) && i64::from(cb) <= hi);
                // lexicographic order of the (clamped) values is the order of costs
                prop_assert_eq!(clamped(&p, &va).cmp(&clamped(&p, &vb)), ca.cmp(&cb));
            }
        }
    }

    #[test]
    fn sum_stays_in_int32_and_in_range(
        spec in arb_spec(Combine::Sum),
        a in prop::collection::vec((any::<u32>(), -1000i64..1000), 4),
    ) {
        let p = validate(&spec).unwrap();
        let va = values_for(&p, &a);
        let c = i64::from(p.combine(&va));
        let (lo, hi) = p.combined_range();
        prop_assert!(lo <= c && c <= hi);
        let expected: i64 = clamped(&p, &va).iter().zip(p.multipliers()).map(|(v, w)| v * w).sum();
        prop_assert_eq!(c, expected);
    }

    #[test]
    fn combine_never_panics_on_any_values(
        spec in arb_spec(Combine::Sum),
        values in prop::collection::vec(any::<i64>(), 0..6),
    ) {
        let p = validate(&spec).unwrap();
        let c = i64::from(p.combine(&values));
        let (lo, hi) = p.combined_range();
        prop_assert!(lo <= c && c <= hi);
    }
}

impl ValidatedSignal {
    /// The validated form of one signal spec, assuming it is valid.
    fn from_spec_for_test(s: &Signal) -> ValidatedSignal {
        let one = DeletionCostPolicySpec {
            selector: Some(LabelSelector {
                match_labels: BTreeMap::from([("app".into(), "web".into())]),
                ..Default::default()
            }),
            target_ref: None,
            signals: vec![s.clone()],
            combine: Combine::Sum,
            max_cost: None,
            refresh_interval: None,
            rate_limit: None,
            on_signal_missing: OnSignalMissing::KeepLastValue,
            respect_foreign_costs: true,
            writes: Default::default(),
        };
        validate(&one).unwrap().signals.remove(0)
    }
}

#[test]
fn max_cost_must_be_positive() {
    let base = |max_cost: i32| {
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0}}}],
            "maxCost": max_cost
        })
    };
    for bad in [0, -3] {
        assert_one_error(
            base(bad),
            "spec.maxCost",
            &format!("must be at least 1, found {bad}"),
        );
    }
    assert_eq!(validate(&spec(base(1))).unwrap().max_cost, Some(1));
}

#[test]
fn max_cost_ranks_only_costs_that_can_leave_its_range() {
    // a billingClass policy of `costs`, with the spec's fields in `extra`
    let policy = |costs: Value, extra: Value| {
        let mut s = web(json!([{"billingClass": {"costs": costs}}]));
        for (field, value) in extra.as_object().unwrap() {
            s[field] = value.clone();
        }
        validate(&spec(s)).unwrap()
    };
    // 0..=2 fits in 0..=5: written as combined
    assert_eq!(
        policy(json!({"spot": 0, "on-demand": 2}), json!({"maxCost": 5})).ranked_max_cost(),
        None
    );
    assert_eq!(
        policy(json!({"spot": 0, "on-demand": 2}), json!({})).ranked_max_cost(),
        None
    );
    // above it, or below 0: ranked
    assert_eq!(
        policy(
            json!({"spot": 0, "on-demand": 2000000}),
            json!({"maxCost": 5})
        )
        .ranked_max_cost(),
        Some(5)
    );
    assert_eq!(
        policy(
            json!({"spot": -1, "on-demand": 1}),
            json!({"combine": "sum", "maxCost": 5})
        )
        .ranked_max_cost(),
        Some(5)
    );
    // lexicographic costs start at 0 whatever the signals' values
    assert_eq!(
        policy(json!({"spot": -1, "on-demand": 1}), json!({"maxCost": 5})).ranked_max_cost(),
        None
    );
}

#[test]
fn cost_ranks() {
    let r = CostRanks::new([2_000_000, -7, 30, 30, 2_000_000], 10);
    assert!(!r.merges());
    assert_eq!(r.distinct(), 3);
    let written: Vec<i32> = [-7, 30, 2_000_000].map(|c| r.written(c)).to_vec();
    assert_eq!(written, [0, 1, 2]);
    // more distinct costs than 0..=max holds: scaled, ends kept, ties added
    let r = CostRanks::new(0..10, 3);
    assert!(r.merges());
    let written: Vec<i32> = (0..10).map(|c| r.written(c)).collect();
    assert_eq!(written, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
    // nothing wanted
    assert_eq!(CostRanks::new([], 5).distinct(), 0);
}

proptest! {
    /// `maxCost` keeps the order of costs: ties stay ties, a lower cost is
    /// never written higher, and strictly lower whenever the ranks fit.
    #[test]
    fn cost_ranks_keep_the_order(
        wanted in prop::collection::vec(any::<i32>(), 0..60),
        small in prop::collection::vec(-5i32..5, 0..60),
        max in prop_oneof![1i32..12, 12i32..=i32::MAX],
    ) {
        for wanted in [&wanted, &small] {
            let r = CostRanks::new(wanted.iter().copied(), max);
            let fits = r.distinct() <= max as usize + 1;
            prop_assert_eq!(r.merges(), !fits);
            for &a in wanted {
                let wa = r.written(a);
                prop_assert!((0..=max).contains(&wa), "{} -> {}", a, wa);
                for &b in wanted {
                    let wb = r.written(b);
                    match a.cmp(&b) {
                        std::cmp::Ordering::Equal => prop_assert_eq!(wa, wb),
                        std::cmp::Ordering::Less if fits => prop_assert!(wa < wb),
                        std::cmp::Ordering::Less => prop_assert!(wa <= wb),
                        std::cmp::Ordering::Greater => {}
                    }
                }
            }
            // the ends of the range are used: the lowest cost is written 0
            if let Some(&lowest) = wanted.iter().min() {
                prop_assert_eq!(r.written(lowest), 0);
            }
        }
    }
}
