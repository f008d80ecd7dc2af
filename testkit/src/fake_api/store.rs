//! The object store behind the fake API server: objects, resourceVersions,
//! watch history, selectors, patches and a small server-side-apply model.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::resources::{ResourceDef, RESOURCES};

/// An error the fake answers with, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details.retryAfterSeconds`, when the client should wait.
    pub retry_after: Option<u64>,
    /// The rest of `details`: which object, and why it is invalid (boxed:
    /// every write returns this error type).
    pub details: Option<Box<ErrorDetails>>,
}

/// `details` of a `Status`, as the real server fills it (empty fields omitted).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ErrorDetails {
    /// Object name.
    pub name: String,
    /// API group.
    pub group: String,
    /// Kind for 422, resource for 409 (as the real server does).
    pub kind: String,
    /// One entry per invalid field.
    pub causes: Vec<ErrorCause>,
}

/// One `details.causes` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: String,
    /// What is wrong with the field.
    pub message: String,
    /// The field's path (`metadata.uid`).
    pub field: String,
}

impl ApiError {
    /// An error with the reason the real API server uses for `code`.
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason_for(code).to_string(),
            message: message.into(),
            retry_after: None,
            details: None,
        }
    }

    /// A `NotFound` for one object, worded like the real server.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(404, format!("{} \"{name}\" not found", qualified(def)))
    }

    /// A `Conflict` for a stale resourceVersion, worded like the real server.
    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                qualified(def)
            ),
        )
    }

    /// What a PATCH that changes `metadata.uid` gets: the patch merges and
    /// validation finds an immutable field changed (422, not 409).
    pub fn uid_immutable(def: &ResourceDef, name: &str, sent: &str) -> Self {
        let field = "metadata.uid";
        let body = format!("Invalid value: {sent:?}: field is immutable");
        let kind = if def.group.is_empty() {
            def.kind.to_string()
        } else {
            format!("{}.{}", def.kind, def.group)
        };
        let mut err = Self::new(
            422,
            format!("{kind} \"{name}\" is invalid: {field}: {body}"),
        );
        err.details = Some(Box::new(ErrorDetails {
            name: name.to_string(),
            group: def.group.to_string(),
            kind: def.kind.to_string(),
            causes: vec![ErrorCause {
                reason: "FieldValueInvalid".into(),
                message: body,
                field: field.into(),
            }],
        }));
        err
    }

    /// What a PUT or DELETE whose UID precondition fails gets: the storage
    /// layer's error wrapped in a 409 Conflict, worded like the real server.
    pub fn uid_precondition(
        def: &ResourceDef,
        ns: &str,
        name: &str,
        sent: &str,
        live: &str,
    ) -> Self {
        let mut key = String::from("/registry");
        for part in [def.group, def.plural, ns, name] {
            if !part.is_empty() {
                key.push('/');
                key.push_str(part);
            }
        }
        let mut err = Self::new(
            409,
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": StorageError: invalid object, \
                 Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: \
                 UID in precondition: {sent}, UID in object meta: {live}",
                qualified(def)
            ),
        );
        err.details = Some(Box::new(ErrorDetails {
            name: name.to_string(),
            group: def.group.to_string(),
            kind: def.plural.to_string(),
            causes: Vec::new(),
        }));
        err
    }

    /// A `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// The `Status` object the real API server sends for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = Map::new();
        if let Some(d) = &self.details {
            for (key, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
                if !value.is_empty() {
                    details.insert(key.into(), value.as_str().into());
                }
            }
            if !d.causes.is_empty() {
                let causes = d
                    .causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
        }
        if let Some(secs) = self.retry_after {
            details.insert("retryAfterSeconds".into(), secs.into());
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// The `reason` the real API server pairs with an HTTP status code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

fn qualified(def: &ResourceDef) -> String {
    if def.group.is_empty() {
        def.plural.to_string()
    } else {
        format!("{}.{}", def.plural, def.group)
    }
}

/// What a watch event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Object created.
    Added,
    /// Object changed (including deletionTimestamp being set).
    Modified,
    /// Object removed.
    Deleted,
}

impl ChangeKind {
    /// The `type` of the watch event.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One entry of the watch history.
#[derive(Debug, Clone)]
pub struct Change {
    /// resourceVersion of the write.
    pub rv: u64,
    /// Index into [`RESOURCES`].
    pub res: usize,
    /// Event type.
    pub kind: ChangeKind,
    /// The object as of this write.
    pub obj: Arc<Value>,
    /// The object before a modification (selector transitions need it).
    pub prev: Option<Arc<Value>>,
}

/// A path of object keys (keys may contain dots, so not a dotted string).
type FieldPath = Vec<String>;

struct Stored {
    obj: Value,
    /// Field manager -> leaf fields it owns (a small model of managedFields).
    managers: BTreeMap<String, BTreeSet<FieldPath>>,
}

/// How a write should be carried out.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `fieldManager` of the request.
    pub manager: Option<String>,
    /// `force=true` on server-side apply.
    pub force: bool,
    /// `dryRun=All`: compute the result, store nothing.
    pub dry_run: bool,
}

/// Content types of PATCH bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`, treated as a merge patch.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/apply-patch+yaml`, merged with field ownership checks.
    Apply,
}

/// Parsed `labelSelector` and `fieldSelector`.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<(Vec<String>, bool, String)>,
}

#[derive(Debug, Clone)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Selectors {
    /// Parses the query parameters; errors answer 400 like the real server.
    pub fn parse(label: Option<&str>, field: Option<&str>) -> Result<Self, ApiError> {
        let mut out = Selectors::default();
        for term in split_terms(label.unwrap_or("")) {
            out.labels.push(parse_label_term(&term)?);
        }
        for term in split_terms(field.unwrap_or("")) {
            let (path, eq, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector term {term:?}"
                )));
            };
            let path = path.trim().split('.').map(str::to_string).collect();
            out.fields.push((path, eq, value.trim().to_string()));
        }
        Ok(out)
    }

    /// Whether the object matches every term.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let labels_ok = self.labels.iter().all(|req| match req {
            LabelReq::Eq(k, v) => label(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => label(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        });
        labels_ok
            && self.fields.iter().all(|(path, eq, want)| {
                let got = lookup(obj, path).map(scalar_string).unwrap_or_default();
                (got == *want) == *eq
            })
    }
}

/// Splits a selector on commas outside parentheses.
fn split_terms(s: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    terms.push(cur);
    terms
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_label_term(term: &str) -> Result<LabelReq, ApiError> {
    let set = |rest: &str| -> Option<Vec<String>> {
        let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
        Some(inner.split(',').map(|v| v.trim().to_string()).collect())
    };
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelReq::NotEq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelReq::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, rest)) = term.split_once(" notin ") {
        if let Some(vs) = set(rest) {
            return Ok(LabelReq::NotIn(k.trim().into(), vs));
        }
    }
    if let Some((k, rest)) = term.split_once(" in ") {
        if let Some(vs) = set(rest) {
            return Ok(LabelReq::In(k.trim().into(), vs));
        }
    }
    if let Some(k) = term.strip_prefix('!') {
        return Ok(LabelReq::NotExists(k.trim().into()));
    }
    if !term.contains([' ', '(', ')']) {
        return Ok(LabelReq::Exists(term.into()));
    }
    Err(ApiError::bad_request(format!(
        "unable to parse requirement {term:?}"
    )))
}

fn lookup<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn scalar_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// All objects, the global resourceVersion and the retained watch history.
pub struct Store {
    rv: u64,
    /// Set by `expire_history`: new watches from below get 410.
    expired_at: u64,
    /// rv of the newest change dropped by the history limit: even open watches
    /// that have not seen it get 410.
    trimmed: u64,
    history: VecDeque<Change>,
    history_limit: usize,
    objects: Vec<BTreeMap<(String, String), Stored>>,
    serial: u64,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            rv: 1,
            expired_at: 1,
            trimmed: 0,
            history: VecDeque::new(),
            history_limit: 1_000_000,
            objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
            serial: 0,
        }
    }
}

/// Keys the server owns; never part of field ownership.
const SYSTEM_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

impl Store {
    /// The current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// New watches from a resourceVersion below this get `410 Gone`.
    pub fn floor(&self) -> u64 {
        self.expired_at.max(self.trimmed)
    }

    /// Open watches whose cursor is below this have missed changes (410).
    pub fn trimmed_floor(&self) -> u64 {
        self.trimmed
    }

    /// Forgets the history: resumes from any earlier resourceVersion get 410.
    /// Bumps the resourceVersion so that a fresh list is resumable.
    pub fn expire_history(&mut self) {
        self.history.clear();
        self.rv += 1;
        self.expired_at = self.rv;
    }

    /// Keeps at most `limit` history entries (older resumes get 410).
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit;
        self.trim_history();
    }

    fn trim_history(&mut self) {
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.trimmed = old.rv;
            }
        }
    }

    /// Changes after `after` that pass `filter`, oldest first.
    pub fn changes_since(&self, after: u64, filter: impl Fn(&Change) -> bool) -> Vec<Change> {
        let start = self.history.partition_point(|c| c.rv <= after);
        self.history
            .range(start..)
            .filter(|c| filter(c))
            .cloned()
            .collect()
    }

    /// One object.
    pub fn get(&self, res: usize, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.objects[res]
            .get(&(ns.to_string(), name.to_string()))
            .map(|s| s.obj.clone())
            .ok_or_else(|| ApiError::not_found(&RESOURCES[res], name))
    }

    /// Objects of a resource in `ns` (all namespaces when `None`) matching the selectors,
    /// sorted by namespace and name.
    /// One page of a LIST: clones only the page (lists of 100k pods are paged
    /// 500 at a time; cloning everything per page was quadratic). Returns the
    /// page and the number of matching objects.
    pub fn list_page(
        &self,
        res: usize,
        ns: Option<&str>,
        sel: &Selectors,
        offset: usize,
        limit: usize,
    ) -> (Vec<Value>, usize) {
        let mut total = 0;
        let mut page = Vec::new();
        for (_, s) in self.objects[res]
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .filter(|(_, s)| sel.matches(&s.obj))
        {
            if total >= offset && page.len() < limit {
                page.push(s.obj.clone());
            }
            total += 1;
        }
        (page, total)
    }

    /// Every matching object.
    pub fn list(&self, res: usize, ns: Option<&str>, sel: &Selectors) -> Vec<Value> {
        self.objects[res]
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .filter(|(_, s)| sel.matches(&s.obj))
            .map(|(_, s)| s.obj.clone())
            .collect()
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// Creates an object through the API (`POST`).
    pub fn create(
        &mut self,
        res: usize,
        ns: Option<&str>,
        mut body: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let def = &RESOURCES[res];
        let meta = body
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("metadata is required"))?;
        if let (Some(path_ns), Some(body_ns)) = (ns, meta.get("namespace").and_then(Value::as_str))
        {
            if path_ns != body_ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let name = match meta.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => {
                    let prefix = prefix.to_string();
                    format!("{prefix}{:05x}", self.next_serial())
                }
                None => {
                    return Err(ApiError::new(
                        422,
                        format!("{} is invalid: metadata.name: Required value", def.kind),
                    ))
                }
            },
        };
        meta.insert("name".into(), name.into());
        if def.status {
            // With a status subresource, create ignores the given status.
            if let Some(o) = body.as_object_mut() {
                o.remove("status");
            }
        }
        self.create_object(res, ns.unwrap_or(""), body, opts, ChangeKind::Added)
    }

    fn create_object(
        &mut self,
        res: usize,
        ns: &str,
        mut body: Value,
        opts: &WriteOpts,
        kind: ChangeKind,
    ) -> Result<Value, ApiError> {
        let def = &RESOURCES[res];
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let key = (ns.to_string(), name.clone());
        if self.objects[res].contains_key(&key) {
            let mut err =
                ApiError::new(409, format!("{} \"{name}\" already exists", qualified(def)));
            err.reason = "AlreadyExists".into();
            return Err(err);
        }
        let serial = self.next_serial();
        let Some(obj) = body.as_object_mut() else {
            return Err(ApiError::bad_request("object must be a JSON object"));
        };
        obj.insert("apiVersion".into(), def.api_version().into());
        obj.insert("kind".into(), def.kind.into());
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        if def.namespaced {
            meta.insert("namespace".into(), ns.into());
        } else {
            meta.remove("namespace");
        }
        meta.insert(
            "uid".into(),
            format!("0fa4e000-0000-4000-8000-{serial:012x}").into(),
        );
        meta.insert("creationTimestamp".into(), now_rfc3339().into());
        meta.insert("generation".into(), 1.into());
        meta.remove("deletionTimestamp");
        let mut managers = BTreeMap::new();
        managers.insert(
            opts.manager.clone().unwrap_or_else(|| "unknown".into()),
            leaf_paths(&body),
        );
        if opts.dry_run {
            return Ok(body);
        }
        let rv = self.bump();
        set_rv(&mut body, rv);
        self.objects[res].insert(
            key,
            Stored {
                obj: body.clone(),
                managers,
            },
        );
        self.record(res, kind, &body, None);
        Ok(body)
    }

    /// Replaces an object (`PUT`), on the main resource or its `status` subresource.
    pub fn update(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        body: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let def = &RESOURCES[res];
        let old = self.get(res, ns, name)?;
        // A sent UID is a precondition, checked before the resourceVersion.
        if let Some(sent) = changed_uid(&old, &body) {
            return Err(ApiError::uid_precondition(
                def,
                ns,
                name,
                sent,
                uid_of(&old),
            ));
        }
        if let Some(rv) = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            if !rv.is_empty() && rv != rv_of(&old) {
                return Err(ApiError::stale(def, name));
            }
        }
        let candidate = shape(def, &old, body, sub)?;
        self.commit(res, ns, name, &old, candidate, opts)
    }

    /// Patches an object; apply patches create it when missing.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        kind: PatchKind,
        patch: &Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let def = &RESOURCES[res];
        let old = match self.get(res, ns, name) {
            Ok(old) => old,
            Err(e) if kind == PatchKind::Apply && sub.is_none() => {
                let mut body = patch.clone();
                if body.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
                    return Err(ApiError::bad_request(format!(
                        "metadata.name of the apply configuration must be {name:?}"
                    )));
                }
                if def.status {
                    if let Some(o) = body.as_object_mut() {
                        o.remove("status");
                    }
                }
                let _ = e;
                return self.create_object(res, ns, body, opts, ChangeKind::Added);
            }
            Err(e) => return Err(e),
        };
        if let Some(rv) = patch
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            if rv != rv_of(&old) {
                return Err(ApiError::stale(def, name));
            }
        }
        let mut patched = old.clone();
        match kind {
            PatchKind::Merge | PatchKind::Strategic => json_patch::merge(&mut patched, patch),
            PatchKind::Apply => {
                json_patch::merge(&mut patched, patch);
                // fields this manager applied before and leaves out now go,
                // unless another manager owns them too
                for path in self.dropped_by_apply(res, ns, name, sub, patch, opts) {
                    remove_path(&mut patched, &path);
                }
            }
            PatchKind::Json => {
                let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                apply_json_patch(&mut patched, &ops)?;
            }
        }
        if kind == PatchKind::Apply {
            self.check_apply_conflicts(res, ns, name, &old, patch, opts)?;
        }
        // A patch carries no precondition: validation sees an immutable field changed.
        if let Some(sent) = changed_uid(&old, &patched) {
            return Err(ApiError::uid_immutable(def, name, sent));
        }
        let candidate = shape(def, &old, patched, sub)?;
        if kind == PatchKind::Apply {
            let result = self.commit(res, ns, name, &old, candidate, opts)?;
            if !opts.dry_run {
                if let Some(stored) = self.objects[res].get_mut(&(ns.to_string(), name.to_string()))
                {
                    let manager = opts.manager.clone().unwrap_or_else(|| "unknown".into());
                    let applied: BTreeSet<FieldPath> = leaf_paths(patch)
                        .into_iter()
                        .filter(|p| in_part(def, sub, p))
                        .collect();
                    if opts.force {
                        for (m, owned) in stored.managers.iter_mut() {
                            if *m != manager {
                                owned.retain(|p| !applied.contains(p));
                            }
                        }
                    }
                    // the applied set replaces what this manager owned in the
                    // part written (the object or its status), nothing else
                    let owned = stored.managers.entry(manager).or_default();
                    owned.retain(|p| !in_part(def, sub, p));
                    owned.extend(applied);
                    stored.managers.retain(|_, owned| !owned.is_empty());
                }
            }
            return Ok(result);
        }
        self.commit(res, ns, name, &old, candidate, opts)
    }

    /// Fields an apply configuration leaves out that its manager applied
    /// before, in the part it writes, and no other manager owns: the API
    /// server removes them.
    fn dropped_by_apply(
        &self,
        res: usize,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        config: &Value,
        opts: &WriteOpts,
    ) -> Vec<FieldPath> {
        let def = &RESOURCES[res];
        let manager = opts.manager.clone().unwrap_or_else(|| "unknown".into());
        let Some(stored) = self.objects[res].get(&(ns.to_string(), name.to_string())) else {
            return Vec::new();
        };
        let Some(before) = stored.managers.get(&manager) else {
            return Vec::new();
        };
        let applied = leaf_paths(config);
        before
            .iter()
            .filter(|p| in_part(def, sub, p) && !applied.contains(*p))
            .filter(|p| {
                !stored
                    .managers
                    .iter()
                    .any(|(m, owned)| *m != manager && owned.contains(*p))
            })
            .cloned()
            .collect()
    }

    fn check_apply_conflicts(
        &self,
        res: usize,
        ns: &str,
        name: &str,
        old: &Value,
        config: &Value,
        opts: &WriteOpts,
    ) -> Result<(), ApiError> {
        if opts.force {
            return Ok(());
        }
        let manager = opts.manager.clone().unwrap_or_else(|| "unknown".into());
        let Some(stored) = self.objects[res].get(&(ns.to_string(), name.to_string())) else {
            return Ok(());
        };
        let mut conflicts = Vec::new();
        for path in leaf_paths(config) {
            if lookup(old, &path) == lookup(config, &path) {
                continue;
            }
            for (m, owned) in &stored.managers {
                if *m != manager && owned.contains(&path) {
                    conflicts.push(format!("conflict with {m:?}: .{}", path.join(".")));
                }
            }
        }
        if conflicts.is_empty() {
            Ok(())
        } else {
            Err(ApiError::new(
                409,
                format!(
                    "Apply failed with {} conflict(s): {}",
                    conflicts.len(),
                    conflicts.join(", ")
                ),
            ))
        }
    }

    /// Stores `candidate` over `old`: bumps resourceVersion and generation, records
    /// field ownership and the watch event, and removes objects whose deletion was
    /// only waiting for finalizers. A no-op write changes nothing.
    fn commit(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        old: &Value,
        mut candidate: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        if candidate == *old {
            return Ok(old.clone());
        }
        if spec_part(&candidate) != spec_part(old) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if let Some(meta) = candidate.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("generation".into(), (generation + 1).into());
            }
        }
        if opts.dry_run {
            return Ok(candidate);
        }
        let rv = self.bump();
        set_rv(&mut candidate, rv);
        let key = (ns.to_string(), name.to_string());
        let manager = opts.manager.clone().unwrap_or_else(|| "unknown".into());
        let mut changed = Vec::new();
        let mut removed = Vec::new();
        diff_paths(old, &candidate, &mut Vec::new(), &mut changed, &mut removed);
        let finished = candidate.pointer("/metadata/deletionTimestamp").is_some()
            && candidate
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if finished {
            self.objects[res].remove(&key);
            self.record(res, ChangeKind::Deleted, &candidate, None);
            return Ok(candidate);
        }
        if let Some(stored) = self.objects[res].get_mut(&key) {
            for owned in stored.managers.values_mut() {
                owned.retain(|p| !changed.contains(p) && !removed.iter().any(|r| p.starts_with(r)));
            }
            stored.managers.entry(manager).or_default().extend(changed);
            stored.managers.retain(|_, owned| !owned.is_empty());
            stored.obj = candidate.clone();
        }
        self.record(res, ChangeKind::Modified, &candidate, Some(old));
        Ok(candidate)
    }

    /// Deletes an object; with finalizers it only gets a deletionTimestamp.
    pub fn delete(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        preconditions: Option<&Value>,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let def = &RESOURCES[res];
        let old = self.get(res, ns, name)?;
        if let Some(pre) = preconditions {
            if let Some(rv) = pre.get("resourceVersion").and_then(Value::as_str) {
                if rv != rv_of(&old) {
                    return Err(ApiError::stale(def, name));
                }
            }
            if let Some(uid) = pre.get("uid").and_then(Value::as_str) {
                if uid != uid_of(&old) {
                    return Err(ApiError::uid_precondition(def, ns, name, uid, uid_of(&old)));
                }
            }
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(old);
            }
            let mut candidate = old.clone();
            if let Some(meta) = candidate.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("deletionTimestamp".into(), now_rfc3339().into());
                meta.insert("deletionGracePeriodSeconds".into(), 0.into());
            }
            return self.commit(
                res,
                ns,
                name,
                &old,
                candidate,
                &WriteOpts {
                    dry_run,
                    ..WriteOpts::default()
                },
            );
        }
        if dry_run {
            return Ok(old);
        }
        let rv = self.bump();
        let mut gone = old;
        set_rv(&mut gone, rv);
        self.objects[res].remove(&(ns.to_string(), name.to_string()));
        self.record(res, ChangeKind::Deleted, &gone, None);
        Ok(gone)
    }

    /// Seeds an object directly: creates it, or replaces it whole (status included).
    pub fn insert(&mut self, res: usize, obj: Value) -> Result<Value, ApiError> {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let def = &RESOURCES[res];
        if def.namespaced && ns.is_empty() {
            return Err(ApiError::bad_request(format!(
                "{} objects need metadata.namespace",
                def.kind
            )));
        }
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_request("metadata.name is required"))?
            .to_string();
        let opts = WriteOpts {
            manager: Some("seed".into()),
            ..WriteOpts::default()
        };
        match self.get(res, &ns, &name) {
            Err(_) => self.create_object(res, &ns, obj, &opts, ChangeKind::Added),
            Ok(old) => {
                let mut candidate = obj;
                for key in SYSTEM_METADATA {
                    if let Some(v) = old.pointer(&format!("/metadata/{key}")) {
                        if let Some(meta) =
                            candidate.get_mut("metadata").and_then(Value::as_object_mut)
                        {
                            meta.entry(*key).or_insert_with(|| v.clone());
                        }
                    }
                }
                set_rv(&mut candidate, rv_of(&old).parse().unwrap_or(0));
                if let Some(o) = candidate.as_object_mut() {
                    o.insert("apiVersion".into(), def.api_version().into());
                    o.insert("kind".into(), def.kind.into());
                }
                self.commit(res, &ns, &name, &old, candidate, &opts)
            }
        }
    }

    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, res: usize, kind: ChangeKind, obj: &Value, prev: Option<&Value>) {
        self.history.push_back(Change {
            rv: self.rv,
            res,
            kind,
            obj: Arc::new(obj.clone()),
            prev: prev.map(|p| Arc::new(p.clone())),
        });
        self.trim_history();
    }
}

/// Applies RFC 6902 ops like the real server: a `test` for `null` passes when the
/// path is absent (kube's finalizer helper relies on it). A failed `test` is how
/// clients express preconditions: 422 like the real server.
pub fn apply_json_patch(doc: &mut Value, ops: &json_patch::Patch) -> Result<(), ApiError> {
    for op in ops.iter() {
        if let json_patch::PatchOperation::Test(t) = op {
            if t.value.is_null() && doc.pointer(t.path.as_str()).is_none() {
                continue;
            }
        }
        json_patch::patch(doc, std::slice::from_ref(op))
            .map_err(|e| ApiError::new(422, format!("the JSON patch could not be applied: {e}")))?;
    }
    Ok(())
}

/// Builds the stored object from a client's candidate: server-owned metadata kept,
/// status kept on the main resource and only status taken on `/status`.
fn shape(
    def: &ResourceDef,
    old: &Value,
    mut candidate: Value,
    sub: Option<&str>,
) -> Result<Value, ApiError> {
    if sub == Some("status") {
        let mut next = old.clone();
        match candidate.get("status") {
            Some(status) => next["status"] = status.clone(),
            None => {
                if let Some(o) = next.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        return Ok(next);
    }
    let Some(obj) = candidate.as_object_mut() else {
        return Err(ApiError::bad_request("object must be a JSON object"));
    };
    obj.insert("apiVersion".into(), def.api_version().into());
    obj.insert("kind".into(), def.kind.into());
    if def.status {
        match old.get("status") {
            Some(status) => {
                obj.insert("status".into(), status.clone());
            }
            None => {
                obj.remove("status");
            }
        }
    }
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    for key in SYSTEM_METADATA.iter().chain(["name", "namespace"].iter()) {
        match old.pointer(&format!("/metadata/{key}")) {
            Some(v) => {
                meta.insert((*key).into(), v.clone());
            }
            None => {
                meta.remove(*key);
            }
        }
    }
    Ok(candidate)
}

/// Everything but metadata and status: a change here bumps `generation`.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

fn uid_of(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The non-empty `metadata.uid` of `candidate` when it is not the stored one
/// (an empty or absent UID means "keep it", as on the real server).
fn changed_uid<'a>(old: &Value, candidate: &'a Value) -> Option<&'a str> {
    let sent = candidate
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())?;
    (sent != uid_of(old)).then_some(sent)
}

fn rv_of(obj: &Value) -> String {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), rv.to_string().into());
    }
}

/// Leaf fields of an object (arrays and scalars are leaves), without identity
/// and server-owned metadata.
fn leaf_paths(obj: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (k, child) in map {
                    if path.is_empty() && (k == "apiVersion" || k == "kind") {
                        continue;
                    }
                    if path.len() == 1
                        && path[0] == "metadata"
                        && (k == "name"
                            || k == "namespace"
                            || SYSTEM_METADATA.contains(&k.as_str()))
                    {
                        continue;
                    }
                    path.push(k.clone());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ if !path.is_empty() => {
                out.insert(path.clone());
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(obj, &mut Vec::new(), &mut out);
    out
}

/// Leaf fields whose value differs (`changed`, present in `new`) or that are gone
/// from `new` (`removed`).
fn diff_paths(
    old: &Value,
    new: &Value,
    path: &mut FieldPath,
    changed: &mut Vec<FieldPath>,
    removed: &mut Vec<FieldPath>,
) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                path.push(k.clone());
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff_paths(x, y, path, changed, removed),
                    (Some(_), None) => removed.push(path.clone()),
                    (None, Some(y)) => {
                        let mut sub = BTreeSet::new();
                        sub.extend(leaf_paths_at(y, path));
                        changed.extend(sub);
                    }
                    (None, None) => {}
                }
                path.pop();
            }
        }
        (a, b) if a != b => {
            changed.extend(leaf_paths_at(b, path));
        }
        _ => {}
    }
}

/// Whether a field belongs to the part a write to `sub` changes: `status`
/// for the status subresource; the rest for the main resource of a kind
/// with one.
fn in_part(def: &ResourceDef, sub: Option<&str>, path: &FieldPath) -> bool {
    let status = path.first().map(String::as_str) == Some("status");
    match sub {
        Some("status") => status,
        _ => !(def.status && status),
    }
}

/// Removes a field, and the objects it leaves empty.
fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if let Some(Value::Object(map)) = parents.iter().try_fold(&mut *obj, |v, k| v.get_mut(k)) {
        map.remove(last);
        if map.is_empty() && !parents.is_empty() {
            remove_path(obj, parents);
        }
    }
}

fn leaf_paths_at(v: &Value, prefix: &FieldPath) -> Vec<FieldPath> {
    match v {
        Value::Object(map) if !map.is_empty() => map
            .iter()
            .flat_map(|(k, child)| {
                let mut p = prefix.clone();
                p.push(k.clone());
                leaf_paths_at(child, &p)
            })
            .collect(),
        _ => vec![prefix.clone()],
    }
}

/// Current time as the API server writes timestamps.
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// An autoscaling/v1 `Scale` view of a Deployment or ReplicaSet.
pub fn to_scale(obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let pick = |k: &str| meta.get(k).cloned().unwrap_or(Value::Null);
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut scale_meta = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if !pick(k).is_null() {
            scale_meta.insert(k.into(), pick(k));
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": { "replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1)) },
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selector_terms() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "a"}}});
        let ok = |s: &str| Selectors::parse(Some(s), None).unwrap().matches(&obj);
        assert!(ok("app=web"));
        assert!(ok("app==web,tier!=b"));
        assert!(!ok("app=db"));
        assert!(ok("tier in (a, b)"));
        assert!(!ok("tier notin (a,b)"));
        assert!(ok("app,!zone"));
        assert!(!ok("!app"));
    }

    #[test]
    fn field_selector_on_nested_paths() {
        let obj = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        let ok = |s: &str| Selectors::parse(None, Some(s)).unwrap().matches(&obj);
        assert!(ok("spec.nodeName=n1,metadata.name=p"));
        assert!(!ok("spec.nodeName!=n1"));
        assert!(ok("status.phase="));
    }

    #[test]
    fn diff_reports_changed_and_removed_leaves() {
        let old = json!({"a": {"b": 1, "c": 2}});
        let new = json!({"a": {"b": 3}, "d": {"e": 1}});
        let (mut changed, mut removed) = (Vec::new(), Vec::new());
        diff_paths(&old, &new, &mut Vec::new(), &mut changed, &mut removed);
        let p = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(changed, vec![p(&["a", "b"]), p(&["d", "e"])]);
        assert_eq!(removed, vec![p(&["a", "c"])]);
    }
}
