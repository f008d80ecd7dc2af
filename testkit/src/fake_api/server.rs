//! HTTP side of the fake API server: routing, faults, recording, watch streams.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::resources::{self, ResourceDef, Target, RESOURCES};
use super::store::{ApiError, ChangeKind, PatchKind, Selectors, WriteOpts};
use super::{lock, FaultAction, RecordedRequest, Shared, Verb};

/// Largest request body accepted (the real server's limit is 3 MiB per object).
const MAX_BODY: usize = 16 * 1024 * 1024;

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// Decodes an `application/x-www-form-urlencoded` query string.
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

fn json_response(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error_response(err: &ApiError) -> Response {
    let mut resp = json_response(err.code, &err.to_status());
    if let Some(secs) = err.retry_after {
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    resp
}

async fn handle(State(sh): State<Arc<Shared>>, req: Request) -> Response {
    let arrived = tokio::time::Instant::now();
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let query = Query(parse_query(&raw_query));
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`:
    // the object's metadata only, as the real server answers it
    let metadata_only = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata;"));
    // `as=PartialObjectMetadataList`: a list of the objects' metadata only
    let metadata_list = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadataList;"));
    let user = parts
        .headers
        .get(super::USER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let method = parts.method.as_str().to_string();
    let target = resources::parse_path(&path);
    let verb = target
        .as_ref()
        .and_then(|t| resources::verb_of(&method, t.name.is_some(), query.flag("watch")));
    let resource = target.as_ref().map(|t| match &t.sub {
        Some(sub) => format!("{}/{sub}", RESOURCES[t.res].plural),
        None => RESOURCES[t.res].plural.to_string(),
    });

    let seq = {
        let mut n = lock(&sh.request_seq);
        *n += 1;
        *n
    };
    lock(&sh.requests).push((
        seq,
        RecordedRequest {
            at: arrived,
            method: method.clone(),
            path: path.clone(),
            query: raw_query,
            content_type: content_type.clone(),
            body: body.to_vec(),
            verb,
            resource: resource.clone(),
            namespace: target.as_ref().and_then(|t| t.namespace.clone()),
            name: target.as_ref().and_then(|t| t.name.clone()),
            status: 0,
            injected: false,
            user,
        },
    ));

    // Faults: delays add up, the first status rule answers.
    let mut delay = Duration::ZERO;
    let mut injected = None;
    for fault in lock(&sh.faults).iter_mut() {
        if !fault.matches(verb, resource.as_deref()) {
            continue;
        }
        if let Some(c) = fault.count.as_mut() {
            *c -= 1;
        }
        match fault.action {
            FaultAction::Delay(d) => delay += d,
            FaultAction::Respond { code, retry_after } => {
                let mut err = ApiError::new(code, format!("injected fault: {code}"));
                err.retry_after = retry_after;
                injected = Some(err);
                break;
            }
        }
    }
    lock(&sh.faults).retain(|f| f.count != Some(0));
    if !delay.is_zero() {
        let mut shutdown = sh.shutdown_tx.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {}
        }
    }

    let was_injected = injected.is_some();
    let resp = match injected {
        Some(err) => error_response(&err),
        None => match target {
            Some(t) if metadata_only && verb == Some(Verb::Get) && t.sub.is_none() => {
                lock(&sh.store)
                    .get(
                        t.res,
                        t.namespace.as_deref().unwrap_or_default(),
                        t.name.as_deref().unwrap_or_default(),
                    )
                    .map(|obj| json_response(200, &partial_object_metadata(&obj)))
                    .unwrap_or_else(|e| error_response(&e))
            }
            Some(t) if metadata_list && verb == Some(Verb::List) && t.sub.is_none() => {
                list_body_of(&sh, &RESOURCES[t.res], &t, &query)
                    .map(|body| json_response(200, &partial_object_metadata_list(&body)))
                    .unwrap_or_else(|e| error_response(&e))
            }
            Some(t) => dispatch(
                &sh,
                &method,
                verb,
                t,
                &query,
                content_type.as_deref(),
                &body,
            )
            .unwrap_or_else(|e| error_response(&e)),
            None if path == "/version" => match lock(&sh.version).clone() {
                Some(body) => json_response(200, &body),
                None => error_response(&ApiError::new(
                    404,
                    "the server could not find the requested resource",
                )),
            },
            None => error_response(&ApiError::new(
                404,
                "the server could not find the requested resource",
            )),
        },
    };
    if let Some((_, r)) = lock(&sh.requests).iter_mut().rev().find(|(s, _)| *s == seq) {
        r.status = resp.status().as_u16();
        r.injected = was_injected;
    }
    resp
}

/// An object as `PartialObjectMetadata`: its metadata only.
fn partial_object_metadata(obj: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or(Value::Null)})
}

/// A list as `PartialObjectMetadataList`: each item's metadata only.
fn partial_object_metadata_list(list: &Value) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(partial_object_metadata).collect())
        .unwrap_or_default();
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
        "metadata": list.get("metadata").cloned().unwrap_or(Value::Null),
        "items": items})
}

fn parse_body(content_type: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(json_err) => {
            let yaml = content_type.is_some_and(|c| c.contains("yaml"));
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("request body is not UTF-8"))?;
            if yaml {
                serde_saphyr::from_str::<Value>(text)
                    .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))
            } else {
                Err(ApiError::bad_request(format!(
                    "invalid JSON body: {json_err}"
                )))
            }
        }
    }
}

fn write_opts(query: &Query) -> WriteOpts {
    WriteOpts {
        manager: query.get("fieldManager").map(str::to_string),
        force: query.flag("force"),
        dry_run: query.get("dryRun") == Some("All"),
    }
}

fn dispatch(
    sh: &Arc<Shared>,
    method: &str,
    verb: Option<Verb>,
    t: Target,
    query: &Query,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let def = &RESOURCES[t.res];
    let not_allowed = || ApiError::new(405, format!("{method} is not supported on {}", def.plural));
    if def.review {
        return match verb {
            Some(Verb::Create) => review(sh, def, parse_body(content_type, body)?),
            _ => Err(not_allowed()),
        };
    }
    let verb = verb.ok_or_else(not_allowed)?;
    let ns = t.namespace.clone().unwrap_or_default();
    if def.namespaced && t.namespace.is_none() && !matches!(verb, Verb::List | Verb::Watch) {
        return Err(ApiError::new(
            404,
            "the server could not find the requested resource",
        ));
    }
    let name = t.name.clone().unwrap_or_default();
    let opts = write_opts(query);
    let scale = t.sub.as_deref() == Some("scale");
    match verb {
        Verb::Get => {
            let obj = lock(&sh.store).get(t.res, &ns, &name)?;
            Ok(json_response(
                200,
                &if scale {
                    super::store::to_scale(&obj)
                } else {
                    obj
                },
            ))
        }
        Verb::List => list(sh, def, &t, query),
        Verb::Watch => watch(sh, t, query),
        Verb::Create => {
            let obj = parse_body(content_type, body)?;
            let created = sh.write(|s| s.create(t.res, t.namespace.as_deref(), obj, &opts))?;
            Ok(json_response(201, &created))
        }
        Verb::Update if scale => {
            let obj = parse_body(content_type, body)?;
            let replicas = obj
                .pointer("/spec/replicas")
                .cloned()
                .ok_or_else(|| ApiError::bad_request("Scale.spec.replicas is required"))?;
            let mut patch = json!({"spec": {"replicas": replicas}});
            if let Some(rv) = obj
                .pointer("/metadata/resourceVersion")
                .filter(|v| v != &&json!(""))
            {
                patch["metadata"] = json!({"resourceVersion": rv});
            }
            let updated =
                sh.write(|s| s.patch(t.res, &ns, &name, None, PatchKind::Merge, &patch, &opts))?;
            Ok(json_response(200, &super::store::to_scale(&updated)))
        }
        Verb::Update => {
            let obj = parse_body(content_type, body)?;
            let updated =
                sh.write(|s| s.update(t.res, &ns, &name, t.sub.as_deref(), obj, &opts))?;
            Ok(json_response(200, &updated))
        }
        Verb::Patch => {
            let kind = match content_type.map(|c| c.split(';').next().unwrap_or("").trim()) {
                Some("application/merge-patch+json") => PatchKind::Merge,
                Some("application/strategic-merge-patch+json") => PatchKind::Strategic,
                Some("application/json-patch+json") => PatchKind::Json,
                Some("application/apply-patch+yaml") => PatchKind::Apply,
                other => {
                    return Err(ApiError::new(
                        415,
                        format!(
                            "the body of the request was in an unknown format: {}",
                            other.unwrap_or("")
                        ),
                    ))
                }
            };
            if kind == PatchKind::Apply && opts.manager.is_none() {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value",
                ));
            }
            let patch = parse_body(content_type, body)?;
            if scale {
                let obj = lock(&sh.store).get(t.res, &ns, &name)?;
                let mut view = super::store::to_scale(&obj);
                match kind {
                    PatchKind::Json => {
                        let ops: json_patch::Patch =
                            serde_json::from_value(patch).map_err(|e| {
                                ApiError::bad_request(format!("invalid JSON patch: {e}"))
                            })?;
                        super::store::apply_json_patch(&mut view, &ops)?;
                    }
                    _ => json_patch::merge(&mut view, &patch),
                }
                let replicas = view.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                let merge = json!({"spec": {"replicas": replicas}});
                let updated = sh
                    .write(|s| s.patch(t.res, &ns, &name, None, PatchKind::Merge, &merge, &opts))?;
                return Ok(json_response(200, &super::store::to_scale(&updated)));
            }
            let (patched, existed) = sh.write(|s| {
                let existed = s.get(t.res, &ns, &name).is_ok();
                s.patch(t.res, &ns, &name, t.sub.as_deref(), kind, &patch, &opts)
                    .map(|p| (p, existed))
            })?;
            // The real server answers 201 when server-side apply created the object.
            Ok(json_response(if existed { 200 } else { 201 }, &patched))
        }
        Verb::Delete => {
            let options = if body.is_empty() {
                Value::Null
            } else {
                parse_body(content_type, body)?
            };
            let dry_run = opts.dry_run
                || options
                    .get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|d| d.iter().any(|v| v == "All"));
            let deleted =
                sh.write(|s| s.delete(t.res, &ns, &name, options.get("preconditions"), dry_run))?;
            Ok(json_response(200, &deleted))
        }
        Verb::DeleteCollection => {
            let sel = Selectors::parse(query.get("labelSelector"), query.get("fieldSelector"))?;
            let items = sh.write(|s| {
                let names: Vec<(String, String)> = s
                    .list(t.res, t.namespace.as_deref(), &sel)
                    .iter()
                    .map(|o| {
                        let get = |p: &str| {
                            o.pointer(p)
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string()
                        };
                        (get("/metadata/namespace"), get("/metadata/name"))
                    })
                    .collect();
                names
                    .into_iter()
                    .filter_map(|(ns, name)| s.delete(t.res, &ns, &name, None, opts.dry_run).ok())
                    .collect::<Vec<_>>()
            });
            Ok(json_response(
                200,
                &list_body(def, &items, lock(&sh.store).rv(), None),
            ))
        }
    }
}

fn list_body(def: &ResourceDef, items: &[Value], rv: u64, cont: Option<String>) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = c.into();
    }
    json!({
        "apiVersion": def.api_version(),
        "kind": format!("{}List", def.kind),
        "metadata": meta,
        "items": items,
    })
}

/// LIST with selectors and `limit`/`continue` (an offset into the sorted result;
/// later pages are read from current state, not from a snapshot).
fn list(
    sh: &Arc<Shared>,
    def: &ResourceDef,
    t: &Target,
    query: &Query,
) -> Result<Response, ApiError> {
    list_body_of(sh, def, t, query).map(|body| json_response(200, &body))
}

/// The body of a LIST (see [`list`]).
fn list_body_of(
    sh: &Arc<Shared>,
    def: &ResourceDef,
    t: &Target,
    query: &Query,
) -> Result<Value, ApiError> {
    let sel = Selectors::parse(query.get("labelSelector"), query.get("fieldSelector"))?;
    let offset = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| ApiError::new(410, "the provided continue parameter is too old"))?,
        None => 0,
    };
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let store = lock(&sh.store);
    let (page, total) = store.list_page(t.res, t.namespace.as_deref(), &sel, offset, limit);
    let rv = store.rv();
    drop(store);
    let end = offset.saturating_add(page.len()).min(total);
    let cont = (end < total).then(|| end.to_string());
    Ok(list_body(def, &page, rv, cont))
}

fn watch_line(kind: &str, obj: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": obj}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    watch_line(
        "BOOKMARK",
        &json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta}),
    )
}

fn gone(rv: u64, floor: u64) -> Bytes {
    let mut err = ApiError::new(410, format!("too old resource version: {rv} ({floor})"));
    err.reason = "Expired".into();
    watch_line("ERROR", &err.to_status())
}

struct WatchGuard(Arc<Shared>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut n = lock(&self.0.open_watches);
        *n = n.saturating_sub(1);
    }
}

/// A watch stream: newline-delimited events after `resourceVersion` (or the current
/// objects as ADDED first when it is absent or "0", or with `sendInitialEvents`).
fn watch(sh: &Arc<Shared>, t: Target, query: &Query) -> Result<Response, ApiError> {
    let def = &RESOURCES[t.res];
    let sel = Selectors::parse(query.get("labelSelector"), query.get("fieldSelector"))?;
    let bookmarks = query.flag("allowWatchBookmarks");
    let send_initial = query.flag("sendInitialEvents");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    let requested = match query
        .get("resourceVersion")
        .filter(|r| !r.is_empty() && *r != "0")
    {
        Some(r) => Some(
            r.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {r:?}")))?,
        ),
        None => None,
    };

    let (initial, start, expired) = {
        let store = lock(&sh.store);
        match requested {
            Some(r) if r < store.floor() => (Vec::new(), r, Some(store.floor())),
            Some(r) if !send_initial => (Vec::new(), r, None),
            _ => (
                store.list(t.res, t.namespace.as_deref(), &sel),
                store.rv(),
                None,
            ),
        }
    };

    let (tx, mut rx) = mpsc::channel::<Bytes>(256);
    let shared = sh.clone();
    let mut rv_rx = sh.rv_tx.subscribe();
    let mut close_rx = sh.close_tx.subscribe();
    let mut shutdown_rx = sh.shutdown_tx.subscribe();
    let interval = *lock(&sh.bookmark_interval);
    *lock(&sh.open_watches) += 1;
    let guard = WatchGuard(sh.clone());
    tokio::spawn(async move {
        let _guard = guard;
        if let Some(floor) = expired {
            let _ = tx.send(gone(start, floor)).await;
            return;
        }
        for obj in &initial {
            if tx.send(watch_line("ADDED", obj)).await.is_err() {
                return;
            }
        }
        if send_initial && bookmarks {
            let _ = tx.send(bookmark(def, start, true)).await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let ns = t.namespace.clone();
        let mut cursor = start;
        loop {
            rv_rx.borrow_and_update();
            let (changes, now_rv, lost) = {
                let store = shared
                    .store
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let lost = cursor < store.trimmed_floor();
                let changes = store.changes_since(cursor, |c| {
                    c.res == t.res
                        && ns.as_deref().is_none_or(|n| {
                            c.obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(n)
                        })
                });
                (changes, store.rv(), lost.then(|| store.trimmed_floor()))
            };
            // A close requested before these changes were read wins: the client
            // must get them from its resume, as after a real dropped connection.
            if close_rx.has_changed().unwrap_or(true) {
                return;
            }
            if let Some(floor) = lost {
                let _ = tx.send(gone(cursor, floor)).await;
                return;
            }
            for c in changes {
                // Selector transitions turn into ADDED/DELETED, as on the real server.
                let now = sel.matches(&c.obj);
                let before = c.prev.as_ref().map(|p| sel.matches(p));
                let kind = match (c.kind, before, now) {
                    (ChangeKind::Modified, Some(false), true) => "ADDED",
                    (ChangeKind::Modified, Some(true), false) => "DELETED",
                    (_, _, true) => c.kind.as_str(),
                    _ => continue,
                };
                if tx.send(watch_line(kind, &c.obj)).await.is_err() {
                    return;
                }
            }
            cursor = cursor.max(now_rv);
            let tick = async {
                match interval {
                    Some(i) if bookmarks => tokio::time::sleep(i).await,
                    _ => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                _ = async { let _ = shutdown_rx.wait_for(|s| *s).await; } => return,
                _ = close_rx.changed() => return,
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
                changed = rv_rx.changed() => if changed.is_err() { return },
                _ = tick => {
                    if tx.send(bookmark(def, cursor, false)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|item| item.map(Ok::<Bytes, Infallible>))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// TokenReview and SubjectAccessReview: answered from the test's configuration.
fn review(sh: &Arc<Shared>, def: &ResourceDef, body: Value) -> Result<Response, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = if def.kind == "TokenReview" {
        let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
        let wanted: Vec<String> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        match lock(&sh.tokens).get(token) {
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
            Some(id) => {
                let audiences: Vec<&String> = if wanted.is_empty() {
                    id.audiences.iter().collect()
                } else {
                    wanted.iter().filter(|a| id.audiences.contains(a)).collect()
                };
                if !wanted.is_empty() && audiences.is_empty() {
                    json!({"authenticated": false, "error": "token audiences are invalid for the target audiences"})
                } else {
                    json!({
                        "authenticated": true,
                        "user": {"username": id.username, "uid": id.uid, "groups": id.groups},
                        "audiences": audiences,
                    })
                }
            }
        }
    } else {
        let policy = lock(&sh.access).clone();
        let allowed = policy.is_some_and(|p| p(&spec));
        if allowed {
            json!({"allowed": true, "reason": "allowed by the test's access policy"})
        } else {
            json!({"allowed": false, "reason": "denied by the test's access policy"})
        }
    };
    let mut out = body;
    if let Some(o) = out.as_object_mut() {
        o.insert("apiVersion".into(), def.api_version().into());
        o.insert("kind".into(), def.kind.into());
        o.entry("metadata").or_insert_with(|| json!({}));
        o.insert("status".into(), status);
    }
    Ok(json_response(201, &out))
}
