//! The fake API server behaves like the real one for kube's client and runtime.

use std::time::Duration;

use deletion_cost::policy::{DeletionCostPolicy, DeletionCostPolicySpec, DeletionCostPolicyStatus};
use deletion_cost_testkit::eventually;
use deletion_cost_testkit::fake_api::{client_for, FakeApi, Fault, TokenIdentity, Verb};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::runtime::watcher::Event;
use kube::runtime::{reflector, WatchStreamExt};
use kube::ResourceExt;
use serde_json::{json, Value};

/// Guards every wait so a broken double fails the test instead of hanging it.
const HANG: Duration = Duration::from_secs(20);

fn pod(ns: &str, name: &str, app: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    })
}

fn names<K: ResourceExt>(items: impl IntoIterator<Item = K>) -> Vec<String> {
    items.into_iter().map(|o| o.name_any()).collect()
}

async fn next<S: Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(HANG, stream.next())
        .await
        .expect("stream produced nothing in time")
        .expect("stream ended")
}

fn api_error(err: kube::Error) -> Box<kube::core::Status> {
    match err {
        kube::Error::Api(status) => status,
        other => panic!("expected kube::Error::Api, got {other:?}"),
    }
}

#[tokio::test]
async fn list_get_and_merge_patch_round_trip() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    fake.apply_json(pod("a", "p2", "web", "n2")).unwrap();
    fake.apply_json(pod("a", "p3", "db", "n1")).unwrap();
    fake.apply_json(pod("b", "p4", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");

    let web = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(web.items), ["p1", "p2"]);
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(names(on_n1.items), ["p1", "p3"]);
    let all: Api<Pod> = Api::all(fake.client());
    let everywhere = all
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(everywhere.items), ["p1", "p2", "p4"]);

    let before = pods.get("p1").await.unwrap();
    assert!(before.metadata.uid.is_some());
    assert!(before.metadata.creation_timestamp.is_some());
    let rv_before: u64 = before.resource_version().unwrap().parse().unwrap();

    let patch =
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-5"}}});
    let patched = pods
        .patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        patched
            .annotations()
            .get("controller.kubernetes.io/pod-deletion-cost"),
        Some(&"-5".to_string())
    );
    let after = pods.get("p1").await.unwrap();
    assert_eq!(after.annotations(), patched.annotations());
    assert!(after.resource_version().unwrap().parse::<u64>().unwrap() > rv_before);
    // The status the seed set is untouched by a metadata patch.
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Running"));

    // A null in a merge patch deletes the key.
    let remove =
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": null}}});
    pods.patch("p1", &PatchParams::default(), &Patch::Merge(&remove))
        .await
        .unwrap();
    let seen = fake.get_json("Pod", "a", "p1").unwrap();
    assert_eq!(seen.pointer("/metadata/annotations"), Some(&json!({})));

    // a read of metadata only gets a PartialObjectMetadata, as from the
    // real server; a missing object is a 404 (None)
    let meta = pods.get_metadata("p2").await.unwrap();
    assert_eq!(
        meta.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(
        meta.metadata.labels,
        pods.get("p2").await.unwrap().metadata.labels
    );
    assert!(pods.get_metadata_opt("nowhere").await.unwrap().is_none());
}

#[tokio::test]
async fn list_pagination_returns_every_item_once() {
    let fake = FakeApi::start().await;
    for i in 0..7 {
        fake.apply_json(pod("a", &format!("p{i}"), "web", "n1"))
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = pods.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        seen.extend(names(page.items));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen, (0..7).map(|i| format!("p{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn watcher_sees_changes_in_order_resumes_after_close_and_relists_after_410() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let mut stream = watcher(pods, watcher::Config::default()).boxed();

    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    match next(&mut stream).await.unwrap() {
        Event::InitApply(p) => assert_eq!(p.name_any(), "p1"),
        other => panic!("expected InitApply(p1), got {other:?}"),
    }
    assert!(matches!(next(&mut stream).await.unwrap(), Event::InitDone));

    fake.apply_json(pod("a", "p2", "web", "n1")).unwrap();
    fake.apply_json(pod("a", "p2", "web", "n2")).unwrap();
    fake.delete_json("Pod", "a", "p2").unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(p) => assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("n1")),
        other => panic!("expected Apply(p2 on n1), got {other:?}"),
    }
    match next(&mut stream).await.unwrap() {
        Event::Apply(p) => assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("n2")),
        other => panic!("expected Apply(p2 on n2), got {other:?}"),
    }
    let last_rv = match next(&mut stream).await.unwrap() {
        Event::Delete(p) => {
            assert_eq!(p.name_any(), "p2");
            p.resource_version().unwrap()
        }
        other => panic!("expected Delete(p2), got {other:?}"),
    };

    // A dropped watch is resumed from the last resourceVersion: no re-list, and a
    // change made while it was closed is not lost.
    fake.close_watches();
    fake.apply_json(pod("a", "p3", "web", "n1")).unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(p) => assert_eq!(p.name_any(), "p3"),
        other => panic!("expected Apply(p3), got {other:?}"),
    }
    assert_eq!(fake.requests_for(Verb::List, "pods").len(), 1);
    let watches = fake.requests_for(Verb::Watch, "pods");
    assert_eq!(watches.len(), 2);
    assert_eq!(watches[1].query_param("resourceVersion"), Some(last_rv));
    assert_eq!(
        watches[0].query_param("allowWatchBookmarks").as_deref(),
        Some("true")
    );

    // Expired history: the resume gets 410 in an ERROR event and the watcher re-lists.
    fake.expire_history();
    fake.close_watches();
    match next(&mut stream).await {
        Err(watcher::Error::WatchError(status)) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected a 410 watch error, got {other:?}"),
    }
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    let mut relisted = Vec::new();
    loop {
        match next(&mut stream).await.unwrap() {
            Event::InitApply(p) => relisted.push(p.name_any()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?} during re-list"),
        }
    }
    assert_eq!(relisted, ["p1", "p3"]);
    assert_eq!(fake.requests_for(Verb::List, "pods").len(), 2);
    // And it keeps watching from the new list's resourceVersion.
    fake.apply_json(pod("a", "p4", "web", "n1")).unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(p) => assert_eq!(p.name_any(), "p4"),
        other => panic!("expected Apply(p4), got {other:?}"),
    }
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_and_end_bookmark() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    fake.apply_json(pod("a", "p2", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let mut stream = watcher(pods, watcher::Config::default().streaming_lists()).boxed();
    assert!(matches!(next(&mut stream).await.unwrap(), Event::Init));
    let mut initial = Vec::new();
    loop {
        match next(&mut stream).await.unwrap() {
            Event::InitApply(p) => initial.push(p.name_any()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, ["p1", "p2"]);
    assert!(fake.requests_for(Verb::List, "pods").is_empty());
    fake.apply_json(pod("a", "p3", "web", "n1")).unwrap();
    match next(&mut stream).await.unwrap() {
        Event::Apply(p) => assert_eq!(p.name_any(), "p3"),
        other => panic!("expected Apply(p3), got {other:?}"),
    }
}

#[tokio::test]
async fn watch_with_label_selector_reports_objects_leaving_and_entering_it() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let mut stream = watcher(pods, watcher::Config::default().labels("app=web"))
        .applied_objects()
        .boxed();
    assert_eq!(next(&mut stream).await.unwrap().name_any(), "p1");
    fake.apply_json(pod("a", "other", "db", "n1")).unwrap();
    fake.apply_json(pod("a", "p1", "db", "n1")).unwrap();
    fake.apply_json(pod("a", "p1", "web", "n2")).unwrap();
    // `other` never matched; p1 left (a Delete, not shown) and came back.
    let back = next(&mut stream).await.unwrap();
    assert_eq!(back.name_any(), "p1");
    assert_eq!(back.spec.unwrap().node_name.as_deref(), Some("n2"));
}

#[tokio::test]
async fn reflector_store_converges() {
    let fake = FakeApi::start().await;
    for i in 0..20 {
        fake.apply_json(pod("a", &format!("p{i:02}"), "web", "n1"))
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let (reader, writer) = reflector::store();
    let run = tokio::spawn(
        reflector(writer, watcher(pods, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(HANG, reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    for i in 20..40 {
        fake.apply_json(pod("a", &format!("p{i:02}"), "web", "n1"))
            .unwrap();
    }
    for i in (0..40).step_by(4) {
        fake.delete_json("Pod", "a", &format!("p{i:02}")).unwrap();
    }
    fake.close_watches();
    fake.apply_json(pod("a", "p01", "web", "n9")).unwrap();
    let mut want: Vec<String> = names(
        fake.list_json("Pod", Some("a"))
            .into_iter()
            .map(|v| serde_json::from_value::<Pod>(v).unwrap()),
    );
    want.sort();
    eventually(HANG, "the reflector to hold every pod", || async {
        let mut have: Vec<String> = reader.state().iter().map(|p| p.name_any()).collect();
        have.sort();
        have == want
            && reader
                .state()
                .iter()
                .any(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("n9"))
    })
    .await;
    assert_eq!(reader.state().len(), 30);
    run.abort();
}

#[tokio::test]
async fn errors_are_status_objects_kube_maps_to_api_errors() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");

    let missing = api_error(pods.get("nope").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "pods \"nope\" not found");

    let existing: Pod = serde_json::from_value(pod("a", "p1", "web", "n1")).unwrap();
    let dup = api_error(
        pods.create(&PostParams::default(), &existing)
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));

    let mut stale = pods.get("p1").await.unwrap();
    fake.apply_json(pod("a", "p1", "web", "n2")).unwrap();
    stale.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    let conflict = api_error(
        pods.replace("p1", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));

    let unknown: Api<Pod> = Api::namespaced(fake.client(), "a");
    let bad = api_error(
        unknown
            .list(&ListParams::default().labels("app in (web"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);
}

#[tokio::test]
async fn a_stale_uid_is_refused_like_the_real_server_and_changes_nothing() {
    let fake = FakeApi::start().await;
    let live = fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    let live_uid = live["metadata"]["uid"].as_str().unwrap().to_owned();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let cost = "controller.kubernetes.io/pod-deletion-cost";

    // PATCH has no preconditions: the merged UID fails validation (422)
    let stale = json!({"metadata": {"uid": "stale-uid", "annotations": {cost: "7"}}});
    let patches = [
        Patch::Merge(stale.clone()),
        Patch::Strategic(stale.clone()),
        Patch::Json(
            serde_json::from_value(json!([
                {"op": "replace", "path": "/metadata/uid", "value": "stale-uid"},
            ]))
            .unwrap(),
        ),
        Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "uid": "stale-uid", "annotations": {cost: "7"}}})),
    ];
    for patch in patches {
        let params = PatchParams::apply("test");
        let err = api_error(pods.patch("p1", &params, &patch).await.unwrap_err());
        assert_eq!(
            (err.code, err.reason.as_str()),
            (422, "Invalid"),
            "{patch:?}"
        );
        assert_eq!(
            err.message,
            "Pod \"p1\" is invalid: metadata.uid: Invalid value: \"stale-uid\": field is immutable"
        );
        let details = err.details.unwrap();
        assert_eq!(
            (details.name.as_str(), details.kind.as_str()),
            ("p1", "Pod")
        );
        let cause = &details.causes[0];
        assert_eq!(
            (
                cause.reason.as_str(),
                cause.field.as_str(),
                cause.message.as_str()
            ),
            (
                "FieldValueInvalid",
                "metadata.uid",
                "Invalid value: \"stale-uid\": field is immutable"
            )
        );
    }
    assert_eq!(fake.get_json("Pod", "a", "p1").unwrap(), live);

    // PUT takes a sent UID as a precondition (409)
    let mut replaced: Pod = serde_json::from_value(live.clone()).unwrap();
    replaced.metadata.uid = Some("stale-uid".into());
    replaced.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    let err = api_error(
        pods.replace("p1", &PostParams::default(), &replaced)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.starts_with("Operation cannot be fulfilled on pods \"p1\": ")
            && err.message.contains(&format!(
                "Precondition failed: UID in precondition: stale-uid, UID in object meta: {live_uid}"
            )),
        "{}",
        err.message
    );
    assert_eq!(fake.get_json("Pod", "a", "p1").unwrap(), live);

    // the live UID, or none, is no change
    let right = json!({"metadata": {"uid": live_uid, "annotations": {cost: "7"}}});
    let patched = pods
        .patch("p1", &PatchParams::default(), &Patch::Merge(&right))
        .await
        .unwrap();
    assert_eq!(patched.metadata.uid.as_deref(), Some(live_uid.as_str()));
    replaced.metadata.uid = None;
    replaced.metadata.resource_version = None;
    let put = pods
        .replace("p1", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(put.metadata.uid.as_deref(), Some(live_uid.as_str()));
}

#[tokio::test]
async fn injected_faults_answer_and_then_drain() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    // kube's own retry layer would hide the faults; the operator's view without it:
    let mut config = fake.config();
    config.default_retry = false;
    let client = client_for(config);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "a");
    fake.inject(
        Fault::status(429)
            .retry_after(2)
            .on(Verb::Patch, "pods")
            .times(2),
    );
    let patch = json!({"metadata": {"annotations": {"k": "v"}}});

    for _ in 0..2 {
        let err = api_error(
            pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap_err(),
        );
        assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
        assert_eq!(err.details.unwrap().retry_after_seconds, 2);
    }
    // Throttled writes changed nothing; the third goes through.
    assert!(fake
        .get_json("Pod", "a", "p1")
        .unwrap()
        .pointer("/metadata/annotations/k")
        .is_none());
    pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(fake.faults_left(), Some(0));
    let patches = fake.requests_for(Verb::Patch, "pods");
    assert_eq!(
        patches
            .iter()
            .map(|r| (r.status, r.injected))
            .collect::<Vec<_>>(),
        [(429, true), (429, true), (200, false)]
    );

    // The header is there for clients that read it.
    fake.inject(Fault::status(429).retry_after(7).on(Verb::Get, "pods"));
    let req = axum::http::Request::get("/api/v1/namespaces/a/pods/p1")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers().get("retry-after").unwrap(), "7");

    // 503 on lists only; gets are unaffected; a delay still answers normally.
    fake.inject(Fault::status(503).verb(Verb::List).always());
    let err = api_error(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (503, "ServiceUnavailable"));
    assert!(pods.get("p1").await.is_ok());
    assert_eq!(fake.faults_left(), None);
    fake.clear_faults();
    fake.inject(Fault::delay(Duration::from_millis(20)).resource("pods"));
    assert_eq!(
        pods.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    assert_eq!(fake.faults_left(), Some(0));

    // A 409 fault on a write that would otherwise succeed.
    fake.inject(Fault::status(409).on(Verb::Patch, "pods"));
    let err = api_error(
        pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn kube_default_client_retries_429_by_itself() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    fake.inject(Fault::status(429).retry_after(1).on(Verb::Patch, "pods"));
    let patch = json!({"metadata": {"annotations": {"k": "v"}}});
    pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let statuses: Vec<u16> = fake
        .requests_for(Verb::Patch, "pods")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 200], "the caller never saw the 429");
}

fn policy() -> DeletionCostPolicy {
    let spec: DeletionCostPolicySpec = serde_saphyr::from_str(
        "selector: {matchLabels: {app: web}}\n\
         signals:\n- billingClass: {costs: {spot: 0, on-demand: 100}, default: 50}\n",
    )
    .unwrap();
    let mut p = DeletionCostPolicy::new("web", spec);
    p.metadata.namespace = Some("shop".into());
    p
}

#[tokio::test]
async fn crd_status_subresource_is_separate_from_the_main_resource() {
    let fake = FakeApi::start().await;
    let api: Api<DeletionCostPolicy> = Api::namespaced(fake.client(), "shop");
    let mut with_status = policy();
    with_status.status = Some(DeletionCostPolicyStatus {
        managed_pods: 9,
        ..Default::default()
    });
    let created = api
        .create(&PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(created.status.is_none(), "create ignores status");
    assert_eq!(created.metadata.generation, Some(1));

    let status = json!({"status": {"managedPods": 3, "pendingPatches": 1}});
    let patched = api
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(patched.status.as_ref().unwrap().managed_pods, 3);
    assert_eq!(
        patched.metadata.generation,
        Some(1),
        "status does not bump generation"
    );

    // The main resource ignores status but takes spec and bumps generation.
    let main = json!({"status": {"managedPods": 99}, "spec": {"dryRun": true}});
    let after = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&main))
        .await
        .unwrap();
    assert_eq!(after.status.as_ref().unwrap().managed_pods, 3);
    assert_eq!(after.metadata.generation, Some(2));

    // The status subresource ignores spec changes.
    let spec_via_status = json!({"spec": {"dryRun": false}, "status": {"managedPods": 4}});
    let after = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&spec_via_status),
        )
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().managed_pods, 4);
    assert_eq!(after.metadata.generation, Some(2));
    let stored = fake.get_json("DeletionCostPolicy", "shop", "web").unwrap();
    assert_eq!(stored.pointer("/spec/dryRun"), Some(&json!(true)));
}

/// Server-side apply on the status subresource: the status part only, and a
/// field its manager applied before and now leaves out goes, unless another
/// manager owns it too.
#[tokio::test]
async fn server_side_apply_of_a_status_drops_what_its_manager_left_out() {
    let fake = FakeApi::start().await;
    let api: Api<DeletionCostPolicy> = Api::namespaced(fake.client(), "shop");
    api.create(&PostParams::default(), &policy()).await.unwrap();
    let apply = |status: Value| {
        json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
               "spec": {"dryRun": true}, "status": status})
    };
    let ssa = PatchParams::apply("operator").force();

    let first = apply(json!({"managedPods": 3, "lastRefresh": "t0",
                             "mismatches": [{"pod": "p1", "reason": "NotReady"}]}));
    api.patch_status("web", &ssa, &Patch::Apply(&first))
        .await
        .unwrap();
    let written = fake.writes_to("deletioncostpolicies/status");
    assert_eq!(
        written
            .last()
            .and_then(|r| r.content_type.clone())
            .as_deref(),
        Some("application/apply-patch+yaml")
    );
    // another manager takes lastRefresh over by changing it
    let other = json!({"status": {"lastRefresh": "t1", "pendingPatches": 2}});
    api.patch_status("web", &PatchParams::apply("other"), &Patch::Merge(&other))
        .await
        .unwrap();

    let second = apply(json!({"managedPods": 4}));
    let after = api
        .patch_status("web", &ssa, &Patch::Apply(&second))
        .await
        .unwrap();
    let stored = fake.get_json("DeletionCostPolicy", "shop", "web").unwrap();
    let status = &stored["status"];
    assert_eq!(status["managedPods"], json!(4));
    assert!(status.get("mismatches").is_none(), "{status}");
    assert_eq!(
        status["lastRefresh"],
        json!("t1"),
        "owned by another manager"
    );
    assert_eq!(
        status["pendingPatches"],
        json!(2),
        "never applied by this manager"
    );
    assert_eq!(
        stored.pointer("/spec/dryRun"),
        None,
        "the status ignores spec"
    );
    assert_eq!(after.metadata.generation, Some(1));

    // an empty list is a value: applied, it stays
    let third = apply(json!({"managedPods": 4, "mismatches": []}));
    api.patch_status("web", &ssa, &Patch::Apply(&third))
        .await
        .unwrap();
    let stored = fake.get_json("DeletionCostPolicy", "shop", "web").unwrap();
    assert_eq!(stored["status"]["mismatches"], json!([]));
}

fn lease(holder: &str) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "leader", "namespace": "ops"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }))
    .unwrap()
}

#[tokio::test]
async fn leases_update_with_conflicts_and_server_side_apply_ownership() {
    let fake = FakeApi::start().await;
    let leases: Api<Lease> = Api::namespaced(fake.client(), "ops");
    let created = leases
        .create(&PostParams::default(), &lease("a"))
        .await
        .unwrap();

    let mut update = created.clone();
    update.spec.as_mut().unwrap().lease_duration_seconds = Some(30);
    let updated = leases
        .replace("leader", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(updated.spec.unwrap().lease_duration_seconds, Some(30));
    // Replaying the first version is a stale write.
    let err = api_error(
        leases
            .replace("leader", &PostParams::default(), &update)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);

    // Server-side apply: a field owned by another manager with a different value
    // conflicts unless forced; the same value is shared.
    let apply = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "leader"}, "spec": {"holderIdentity": holder}})
    };
    leases
        .patch(
            "leader",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(apply("a")),
        )
        .await
        .unwrap();
    let err = api_error(
        leases
            .patch(
                "leader",
                &PatchParams::apply("mgr-b"),
                &Patch::Apply(apply("b")),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(err.message.contains("mgr-a"), "{}", err.message);
    leases
        .patch(
            "leader",
            &PatchParams::apply("mgr-b"),
            &Patch::Apply(apply("a")),
        )
        .await
        .unwrap();
    let forced = leases
        .patch(
            "leader",
            &PatchParams::apply("mgr-b").force(),
            &Patch::Apply(apply("b")),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().holder_identity.as_deref(), Some("b"));
    // After a strategic-merge patch clears the field, nobody owns it.
    let release = json!({"spec": {"holderIdentity": null}});
    leases
        .patch(
            "leader",
            &PatchParams::default(),
            &Patch::Strategic(&release),
        )
        .await
        .unwrap();
    leases
        .patch(
            "leader",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(apply("a")),
        )
        .await
        .unwrap();

    // Apply creates a missing object.
    let other = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "second"}, "spec": {"holderIdentity": "z"}});
    leases
        .patch("second", &PatchParams::apply("mgr-z"), &Patch::Apply(other))
        .await
        .unwrap();
    assert!(fake.get_json("Lease", "ops", "second").is_some());
}

#[tokio::test]
async fn delete_with_finalizers_waits_until_they_are_removed() {
    let fake = FakeApi::start().await;
    let mut p = pod("a", "p1", "web", "n1");
    p["metadata"]["finalizers"] = json!(["deletioncost.dev/cleanup"]);
    fake.apply_json(p).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");

    let first = pods.delete("p1", &DeleteParams::default()).await.unwrap();
    let terminating = first
        .left()
        .expect("the object comes back while finalizers remain");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(pods
        .get("p1")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_some());

    // kube's finalizer helper removes its entry with a JSON patch guarded by `test`.
    let stale_guard = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "someone-else"},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]))
    .unwrap();
    let err = api_error(
        pods.patch(
            "p1",
            &PatchParams::default(),
            &Patch::Json::<()>(stale_guard),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let remove = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "deletioncost.dev/cleanup"},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]))
    .unwrap();
    pods.patch("p1", &PatchParams::default(), &Patch::Json::<()>(remove))
        .await
        .unwrap();
    let gone = api_error(pods.get("p1").await.unwrap_err());
    assert_eq!(gone.code, 404);

    // Without finalizers a delete removes at once.
    fake.apply_json(pod("a", "p2", "web", "n1")).unwrap();
    pods.delete("p2", &DeleteParams::default()).await.unwrap();
    assert!(fake.get_json("Pod", "a", "p2").is_none());
}

#[tokio::test]
async fn requests_are_recorded_for_assertions() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    fake.apply_json(pod("a", "p2", "web", "n1")).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    for name in ["p1", "p2"] {
        let patch = json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "7"}}});
        pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    let all = fake.requests();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].verb, Some(Verb::List));
    assert_eq!(
        all[0].query_param("labelSelector").as_deref(),
        Some("app=web")
    );
    let writes = fake.writes_to("pods");
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[0].method, "PATCH");
    assert_eq!(writes[0].path, "/api/v1/namespaces/a/pods/p1");
    assert_eq!(writes[1].name.as_deref(), Some("p2"));
    assert_eq!(
        writes[0].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        writes[0].json().unwrap(),
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "7"}}})
    );
    assert!(writes[0].at <= writes[1].at);
    assert_eq!(
        fake.max_writes_in_window(Some("pods"), Duration::from_secs(3600)),
        2
    );
    assert_eq!(
        fake.max_writes_in_window(Some("nodes"), Duration::from_secs(3600)),
        0
    );
    assert!(fake.writes_to("pods/status").is_empty());
    fake.clear_requests();
    assert!(fake.requests().is_empty());
}

#[tokio::test(start_paused = true)]
async fn write_windows_follow_tokio_time() {
    let fake = FakeApi::start().await;
    fake.apply_json(pod("a", "p1", "web", "n1")).unwrap();
    let mut config = fake.config();
    config.read_timeout = None;
    config.write_timeout = None;
    config.connect_timeout = None;
    let pods: Api<Pod> = Api::namespaced(client_for(config), "a");
    let patch = json!({"metadata": {"labels": {"x": "1"}}});
    for _ in 0..3 {
        pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        fake.max_writes_in_window(Some("pods"), Duration::from_secs(1)),
        3
    );
    assert_eq!(
        fake.max_writes_in_window(Some("pods"), Duration::from_secs(10)),
        4
    );
}

#[tokio::test]
async fn scale_subresource_reads_and_sets_replicas() {
    let fake = FakeApi::start().await;
    fake.apply_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        "status": {"replicas": 3},
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(fake.client(), "shop");
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    let patched = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().replicas, Some(1));
    let stored = fake.get_json("Deployment", "shop", "web").unwrap();
    assert_eq!(stored.pointer("/spec/replicas"), Some(&json!(1)));
    assert_eq!(stored.pointer("/metadata/generation"), Some(&json!(2)));
    assert_eq!(fake.writes_to("deployments/scale").len(), 1);
}

#[tokio::test]
async fn token_and_access_reviews_answer_from_the_test_configuration() {
    let fake = FakeApi::start().await;
    fake.add_token(
        "good",
        TokenIdentity {
            username: "system:serviceaccount:kube-system:replicaset-controller".into(),
            uid: "u1".into(),
            groups: vec!["system:serviceaccounts".into()],
            audiences: vec!["deletion-cost-hook".into()],
        },
    );
    fake.set_access_policy(|spec| {
        spec.pointer("/user").and_then(Value::as_str)
            == Some("system:serviceaccount:kube-system:replicaset-controller")
    });
    let reviews: Api<TokenReview> = Api::all(fake.client());
    let review = |token: &str, aud: &str| -> TokenReview {
        serde_json::from_value(json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "metadata": {}, "spec": {"token": token, "audiences": [aud]},
        }))
        .unwrap()
    };
    let ok = reviews
        .create(
            &PostParams::default(),
            &review("good", "deletion-cost-hook"),
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(ok.authenticated, Some(true));
    assert_eq!(ok.user.unwrap().groups.unwrap(), ["system:serviceaccounts"]);
    for (token, aud) in [("good", "other"), ("bad", "deletion-cost-hook")] {
        let denied = reviews
            .create(&PostParams::default(), &review(token, aud))
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(denied.authenticated, Some(false), "{token} for {aud}");
    }

    let sars: Api<SubjectAccessReview> = Api::all(fake.client());
    let sar = |user: &str| -> SubjectAccessReview {
        serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {}, "spec": {"user": user, "resourceAttributes": {"verb": "get", "resource": "pods"}},
        }))
        .unwrap()
    };
    let allowed = sars
        .create(
            &PostParams::default(),
            &sar("system:serviceaccount:kube-system:replicaset-controller"),
        )
        .await
        .unwrap();
    assert!(allowed.status.unwrap().allowed);
    let denied = sars
        .create(&PostParams::default(), &sar("mallory"))
        .await
        .unwrap();
    assert!(!denied.status.unwrap().allowed);
    assert!(
        fake.list_json("TokenReview", None).is_empty(),
        "reviews are not stored"
    );
}

#[tokio::test]
async fn dropping_the_fake_stops_listening_and_ends_watches() {
    let fake = FakeApi::start().await;
    let addr = fake.addr();
    let pods: Api<Pod> = Api::namespaced(fake.client(), "a");
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let forward = tokio::spawn(
        watcher(pods, watcher::Config::default()).for_each(move |e| {
            let _ = tx.send(e);
            async {}
        }),
    );
    assert!(matches!(
        next_event(&mut events).await.unwrap(),
        Event::Init
    ));
    assert!(matches!(
        next_event(&mut events).await.unwrap(),
        Event::InitDone
    ));
    eventually(HANG, "one open watch", || async {
        fake.open_watches() == 1
    })
    .await;
    drop(fake);
    eventually(HANG, "the listener to be closed after drop", || async {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    // The open watch ends and the resume cannot connect.
    match next_event(&mut events).await {
        Err(watcher::Error::WatchStartFailed(_)) => {}
        other => panic!("expected the resume to fail, got {other:?}"),
    }
    forward.abort();
}

async fn next_event<T>(rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(HANG, rx.recv())
        .await
        .expect("no event in time")
        .expect("channel closed")
}

/// kube's Controller, its finalizer helper and a pod watch run unchanged.
#[tokio::test]
async fn controller_with_finalizer_reconciles_and_cleans_up() {
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::finalizer::{finalizer, Event as Finalizer};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Ctx {
        client: kube::Client,
        cleanups: AtomicUsize,
    }
    #[derive(Debug, thiserror::Error)]
    #[error("reconcile failed: {0}")]
    struct Failed(String);

    async fn reconcile(p: Arc<DeletionCostPolicy>, ctx: Arc<Ctx>) -> Result<Action, Failed> {
        let ns = p.namespace().unwrap();
        let api: Api<DeletionCostPolicy> = Api::namespaced(ctx.client.clone(), &ns);
        finalizer(&api, "deletioncost.dev/cleanup", p, |event| async {
            match event {
                Finalizer::Apply(p) => {
                    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
                    let n = pods
                        .list(&ListParams::default().labels("app=web"))
                        .await
                        .map_err(|e| Failed(e.to_string()))?
                        .items
                        .len();
                    let status = json!({"status": {"managedPods": n}});
                    api.patch_status(
                        &p.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await
                    .map_err(|e| Failed(e.to_string()))?;
                    Ok(Action::await_change())
                }
                Finalizer::Cleanup(_) => {
                    ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::await_change())
                }
            }
        })
        .await
        .map_err(|e: kube::runtime::finalizer::Error<Failed>| Failed(e.to_string()))
    }

    let fake = FakeApi::start().await;
    fake.apply_json(pod("shop", "p1", "web", "n1")).unwrap();
    fake.insert(&policy()).unwrap();
    let client = fake.client();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        cleanups: AtomicUsize::new(0),
    });
    let policies: Api<DeletionCostPolicy> = Api::namespaced(client.clone(), "shop");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let run = tokio::spawn(
        Controller::new(policies, watcher::Config::default())
            .watches(pods, watcher::Config::default(), |pod| {
                pod.namespace()
                    .map(|ns| kube::runtime::reflector::ObjectRef::new("web").within(&ns))
            })
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_secs(1)),
                ctx.clone(),
            )
            .for_each(|_| async {}),
    );

    let managed = |fake: &FakeApi| {
        fake.get_json("DeletionCostPolicy", "shop", "web")
            .and_then(|p| p.pointer("/status/managedPods").cloned())
    };
    eventually(HANG, "managedPods 1", || async {
        managed(&fake) == Some(json!(1))
    })
    .await;
    let stored = fake.get_json("DeletionCostPolicy", "shop", "web").unwrap();
    assert_eq!(
        stored.pointer("/metadata/finalizers"),
        Some(&json!(["deletioncost.dev/cleanup"]))
    );

    // A new pod re-triggers the policy through the pod watch.
    fake.apply_json(pod("shop", "p2", "web", "n1")).unwrap();
    eventually(HANG, "managedPods 2", || async {
        managed(&fake) == Some(json!(2))
    })
    .await;

    // Deleting waits for the finalizer; the controller cleans up and removes it.
    fake.delete_json("DeletionCostPolicy", "shop", "web")
        .unwrap();
    eventually(HANG, "the policy to be gone", || async {
        fake.get_json("DeletionCostPolicy", "shop", "web").is_none()
    })
    .await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    run.abort();
}
