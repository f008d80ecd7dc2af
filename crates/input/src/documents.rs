//! Text to objects: YAML documents and JSON, a `List`, an array or one
//! object, flattened to the items with where each came from.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{json_syntax, yaml_syntax, InputError};

/// One object found in an input, with where it was.
#[derive(Debug, Clone)]
pub struct RawObject {
    /// File path or `<stdin>`.
    pub source_name: String,
    /// `items[3]`, `document 2`, `[0]`, or `object`.
    pub location: String,
    /// `kind`, empty when absent.
    pub kind: String,
    /// The object.
    pub value: Value,
}

impl RawObject {
    /// `metadata.name`, empty when absent.
    pub fn name(&self) -> String {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    /// [`RawObject::decode`], consuming the object: its strings move into
    /// the typed object instead of being copied, and its tree is freed as it
    /// goes (a 100k-pod snapshot holds the tree and the objects otherwise).
    pub fn into_decoded<T: DeserializeOwned>(self, kind: &str) -> Result<T, InputError> {
        let name = self.name();
        serde_path_to_error::deserialize(self.value).map_err(|e| InputError::Field {
            context: format!("{}: {} ({kind} {name:?})", self.source_name, self.location),
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }

    /// Deserializes into a typed object, naming the failing field on error.
    pub fn decode<T: DeserializeOwned>(&self, kind: &str) -> Result<T, InputError> {
        serde_path_to_error::deserialize(&self.value).map_err(|e| InputError::Field {
            context: format!(
                "{}: {} ({kind} {:?})",
                self.source_name,
                self.location,
                self.name()
            ),
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }
}

/// Parses JSON (text starting with `{` or `[`: one value) or YAML (one
/// value per document, empty documents as null) into `T`; a syntax error is
/// one line naming the source, line and column.
pub fn parse_documents<T: DeserializeOwned>(
    source_name: &str,
    text: &str,
) -> Result<Vec<T>, InputError> {
    documents(source_name, text, serde_saphyr::Options::default())
}

/// [`parse_documents`], except that YAML's `.inf`, `-.inf` and `.nan` reach
/// `T` as floats instead of failing as syntax, so the caller can name the
/// field that holds one.
pub fn parse_documents_keeping_non_finite<T: DeserializeOwned>(
    source_name: &str,
    text: &str,
) -> Result<Vec<T>, InputError> {
    documents(
        source_name,
        text,
        serde_saphyr::options! {
            non_finite_float_policy: serde_saphyr::options::NonFiniteFloatPolicy::PassThrough,
        },
    )
}

pub(super) fn documents<T: DeserializeOwned>(
    source_name: &str,
    text: &str,
    mut options: serde_saphyr::Options,
) -> Result<Vec<T>, InputError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: T = serde_json::from_str(text).map_err(|e| json_syntax(source_name, &e))?;
        Ok(vec![v])
    } else {
        options.budget = Some(sized_budget(text.len()));
        serde_saphyr::from_multiple_with_options(text, options)
            .map_err(|e| yaml_syntax(source_name, &e))
    }
}

/// The options [`parse_documents`] reads a YAML text of `len` bytes with.
pub(crate) fn yaml_options(len: usize) -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(sized_budget(len));
    options
}

/// serde-saphyr's default budget suits configuration files: 250,000 nodes,
/// 1,000,000 events, 1,024 documents and 64 MiB of scalars, which
/// `kubectl get pods -A -o yaml` passes at about 1,800 pods. The text here is
/// already in memory and bounded by `--max-input-bytes`, so those limits grow
/// with it (a node, an event or a document takes at least a byte or a few of
/// text); the depth and alias limits, which stop a small text from expanding,
/// stay as they are. What anchors keep for their aliases is bounded lower
/// instead, and lower still in a small text: a few hundred bytes of nested
/// aliases (an alias bomb) took over 200 MiB before serde-saphyr's default
/// (a million events) stopped it, and no Kubernetes object needs a tenth of it.
pub(super) fn sized_budget(len: usize) -> serde_saphyr::budget::Budget {
    let mut b = serde_saphyr::budget::Budget::default();
    b.max_nodes = b.max_nodes.max(len);
    b.max_events = b.max_events.max(len.saturating_mul(2));
    b.max_documents = b.max_documents.max(len / 4);
    b.max_total_scalar_bytes = b.max_total_scalar_bytes.max(len);
    b.max_recorded_anchor_events = len
        .saturating_mul(4)
        .clamp(ANCHOR_EVENTS_FLOOR, ANCHOR_EVENTS_MAX);
    b
}

/// The fewest events anchors may keep, whatever the text's size: far more
/// than hand-written YAML with shared blocks (`&labels`, `<<: *defaults`) needs.
const ANCHOR_EVENTS_FLOOR: usize = 20_000;
/// The most events anchors may keep (about 23 MiB of them).
pub(crate) const ANCHOR_EVENTS_MAX: usize = 100_000;

/// Parses JSON or (multi-document) YAML into the objects it holds, flattening
/// lists and arrays.
pub fn parse_objects(source_name: &str, text: &str) -> Result<Vec<RawObject>, InputError> {
    let docs: Vec<Value> = parse_documents(source_name, text)?;
    let many = docs.len() > 1;
    let docs: Vec<(String, Value)> = docs
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_null())
        .map(|(i, v)| {
            let loc = if many {
                format!("document {}", i + 1)
            } else {
                "object".to_string()
            };
            (loc, v)
        })
        .collect();
    let mut out = Vec::new();
    for (loc, doc) in docs {
        flatten(source_name, loc, doc, &mut out)?;
    }
    Ok(out)
}

pub(crate) fn flatten(
    source_name: &str,
    location: String,
    v: Value,
    out: &mut Vec<RawObject>,
) -> Result<(), InputError> {
    let shape = |location: String, message: String| InputError::Shape {
        source_name: source_name.to_string(),
        location,
        message,
    };
    match v {
        Value::Array(items) => {
            for (i, item) in items.into_iter().enumerate() {
                let loc = if location == "object" {
                    format!("[{i}]")
                } else {
                    format!("{location}[{i}]")
                };
                flatten(source_name, loc, item, out)?;
            }
            Ok(())
        }
        Value::Object(mut map) => {
            let kind = map
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if kind == "List"
                || kind.ends_with("List")
                || (kind.is_empty() && map.contains_key("items"))
            {
                let items = match map.remove("items") {
                    Some(Value::Array(items)) => items,
                    Some(Value::Null) | None => Vec::new(),
                    Some(other) => {
                        return Err(shape(
                            location,
                            format!("`items` must be an array, found {}", type_name(&other)),
                        ))
                    }
                };
                for (i, item) in items.into_iter().enumerate() {
                    let loc = if location == "object" {
                        format!("items[{i}]")
                    } else {
                        format!("{location}.items[{i}]")
                    };
                    flatten(source_name, loc, item, out)?;
                }
                return Ok(());
            }
            out.push(RawObject {
                source_name: source_name.to_string(),
                location,
                kind,
                value: Value::Object(map),
            });
            Ok(())
        }
        other => Err(shape(
            location,
            format!(
                "expected a Kubernetes object, a List or an array, found {}",
                type_name(&other)
            ),
        )),
    }
}

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What an input held, for "no ... found" errors: its kinds, or that it is
/// empty.
pub fn held_kinds(objects: &[RawObject]) -> String {
    if objects.is_empty() {
        return "the input is empty".to_string();
    }
    let mut kinds: Vec<&str> = objects
        .iter()
        .map(|o| {
            if o.kind.is_empty() {
                "(no kind)"
            } else {
                o.kind.as_str()
            }
        })
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    format!("found kind {}", kinds.join(", "))
}
