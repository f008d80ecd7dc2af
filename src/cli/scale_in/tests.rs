use super::*;

#[test]
fn a_workload_is_a_deployment_or_a_replica_set() {
    assert_eq!(parse_workload("web").unwrap().to_string(), "deployment/web");
    assert_eq!(
        parse_workload("deploy/web").unwrap().to_string(),
        "deployment/web"
    );
    assert_eq!(
        parse_workload("rs/web-1").unwrap().to_string(),
        "replicaset/web-1"
    );
    for bad in ["pod/web-a", "statefulset/db", "deployment/"] {
        let e = parse_workload(bad).unwrap_err();
        assert_eq!(e.code, crate::cli::EXIT_BAD_INPUT, "{bad}");
        assert!(
            e.message.contains("deployment/NAME"),
            "{bad}: {}",
            e.message
        );
    }
}

#[test]
fn removed_pods_are_named_once_with_or_without_pod_slash() {
    let given = ["web-b", " pod/web-a", "web-b"].map(String::from);
    let names: Vec<String> = parse_remove(&given).unwrap().into_iter().collect();
    assert_eq!(names, ["web-a", "web-b"]);
    let e = parse_remove(&["web-a".into(), "".into()]).unwrap_err();
    assert_eq!(
        e.message,
        "--remove: an empty pod name (expected POD[,POD…])"
    );
}

fn decision(via: Via) -> Decision {
    Decision {
        workload: parse_workload("deployment/web").unwrap(),
        namespace: "shop".into(),
        replica_set: "web-1".into(),
        pod_labels: [("app".to_string(), "web".to_string())].into(),
        active: ["web-a", "web-b", "web-c"].map(String::from).to_vec(),
        from: 3,
        to: 1,
        named: ["web-a", "web-c"].map(String::from).to_vec(),
        via,
    }
}

#[test]
fn a_dry_run_under_a_policy_says_which_pods_it_would_mark() {
    let d = decision(Via::Marker {
        policy: "shop/spot-first".into(),
        label: crate::marker::PREFER_FOR_SCALE_DOWN,
        to_mark: vec!["web-c".into()],
        continuous: true,
    });
    assert_eq!(
        render(&d, None, ScaleInOutput::Text).unwrap(),
        "deployment/web in shop: 3 -> 1 replicas, removing web-a, web-c\n\
         policy shop/spot-first: would mark web-c (deletioncost.dev/prefer-for-scale-down); \
         its scale-in webhook puts marked pods first\n\
         dry run: nothing written, deployment/web not scaled\n"
    );
    let v: serde_json::Value =
        serde_json::from_str(&render(&d, None, ScaleInOutput::Json).unwrap()).unwrap();
    assert_eq!(v["dryRun"], true);
    assert_eq!(v["marked"], serde_json::json!(["web-c"]));
    assert_eq!(v["exact"], serde_json::Value::Null);
}

#[test]
fn a_report_says_what_went_and_what_was_put_back() {
    let d = decision(Via::Costs {
        writes: vec![CostWrite {
            pod: "web-a".into(),
            cost: -1,
            before: None,
        }],
    });
    let outcome = apply::Outcome {
        wrote: vec![("web-a".into(), -1)],
        scale_seconds: Some(0.0421),
        deleted: vec!["web-b".into(), "web-c".into()],
        put_back: vec!["web-a".into()],
        ..Default::default()
    };
    assert_eq!(
        render(&d, Some(&outcome), ScaleInOutput::Text).unwrap(),
        "deployment/web in shop: 3 -> 1 replicas, removing web-a, web-c\n\
         no policy: wrote pod-deletion-cost -1 on web-a\n\
         scaled in 42 ms\n\
         deleted: web-b, web-c\n\
         put back what was written on web-a (not deleted)\n"
    );
    let v: serde_json::Value =
        serde_json::from_str(&render(&d, Some(&outcome), ScaleInOutput::Json).unwrap()).unwrap();
    assert_eq!(v["exact"], false);
    assert_eq!(
        v["wrote"],
        serde_json::json!([{"pod": "web-a", "cost": -1}])
    );
}
