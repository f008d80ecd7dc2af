//! Reading Kubernetes objects from what `kubectl get -o json|yaml` prints:
//! a `List`/`*List`, a single object, an array of objects, or several YAML
//! documents. Errors name the source, the item and the field.

use std::io::Read;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or stdin could not be read.
    #[error("{source_name}: cannot read: {error}")]
    Io {
        /// File path or `<stdin>`.
        source_name: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// Not valid JSON or YAML.
    #[error("{source_name}: not valid {format}: {message}")]
    Syntax {
        /// File path or `<stdin>`.
        source_name: String,
        /// "JSON" or "YAML".
        format: &'static str,
        /// Parser message (with line and column).
        message: String,
    },
    /// A document of the wrong shape (a scalar, an object that is not a Kubernetes object).
    #[error("{source_name}: {location}: {message}")]
    Shape {
        /// File path or `<stdin>`.
        source_name: String,
        /// Where in the input (`items[3]`, `document 2`).
        location: String,
        /// What is wrong.
        message: String,
    },
    /// An object whose field has the wrong type or value.
    #[error("{context}: field `{field}`: {message}")]
    Field {
        /// Source, location, kind and name: `pods.json: items[3] (Pod "web-1")`.
        context: String,
        /// Path of the offending field, e.g. `status.conditions[0].status`.
        field: String,
        /// What serde said.
        message: String,
    },
}

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

/// Reads a file, or stdin for `-`.
pub fn read_source(path: &str) -> Result<(String, String), InputError> {
    if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| InputError::Io {
                source_name: "<stdin>".into(),
                error,
            })?;
        return Ok(("<stdin>".into(), text));
    }
    let text = std::fs::read_to_string(Path::new(path)).map_err(|error| InputError::Io {
        source_name: path.to_string(),
        error,
    })?;
    Ok((path.to_string(), text))
}

/// Parses JSON or (multi-document) YAML into the objects it holds, flattening
/// lists and arrays.
pub fn parse_objects(source_name: &str, text: &str) -> Result<Vec<RawObject>, InputError> {
    let trimmed = text.trim_start();
    let docs: Vec<(String, Value)> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(text).map_err(|e| InputError::Syntax {
            source_name: source_name.to_string(),
            format: "JSON",
            message: e.to_string(),
        })?;
        vec![("object".to_string(), v)]
    } else {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).map_err(|e| InputError::Syntax {
                source_name: source_name.to_string(),
                format: "YAML",
                message: e.to_string(),
            })?;
        let many = docs.len() > 1;
        docs.into_iter()
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
            .collect()
    };
    let mut out = Vec::new();
    for (loc, doc) in docs {
        flatten(source_name, loc, doc, &mut out)?;
    }
    Ok(out)
}

fn flatten(
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

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Decodes every object as a Pod; objects of another kind are an error.
pub fn pods_from(
    objects: &[RawObject],
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    objects
        .iter()
        .map(|o| {
            if !o.kind.is_empty() && o.kind != "Pod" {
                return Err(InputError::Shape {
                    source_name: o.source_name.clone(),
                    location: o.location.clone(),
                    message: format!("expected a Pod, found kind {:?}", o.kind),
                });
            }
            o.decode("Pod")
        })
        .collect()
}

/// Parses pods from JSON or YAML as [`parse_objects`] + [`pods_from`] do,
/// with the same answers. A JSON List or array of pods (what `kubectl get pods
/// -o json` prints) is first decoded straight into typed pods, without the
/// intermediate `serde_json::Value` tree: several times faster on large lists.
/// The typed decode accepts exactly what the general path accepts (same `Pod`
/// type, which checks `kind` and `apiVersion`); on any failure the general
/// path runs, so errors still name the item and field.
pub fn parse_pods(
    source_name: &str,
    text: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    if let Some(pods) = typed_pod_list(text) {
        return Ok(pods);
    }
    let objects = parse_objects(source_name, text)?;
    pods_from(&objects)
}

fn typed_pod_list(text: &str) -> Option<Vec<k8s_openapi::api::core::v1::Pod>> {
    use k8s_openapi::api::core::v1::Pod;
    #[derive(serde::Deserialize)]
    struct Items {
        kind: Option<String>,
        items: Option<Vec<Pod>>,
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str::<Vec<Pod>>(text).ok();
    }
    if !trimmed.starts_with('{') {
        return None;
    }
    let list: Items = serde_json::from_str(text).ok()?;
    // the same test `flatten` applies to decide that an object is a list
    let kind = list.kind.unwrap_or_default();
    let is_list = kind.ends_with("List") || (kind.is_empty() && list.items.is_some());
    if is_list {
        list.items
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let list = r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let objs = parse_objects("f.json", list).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location, "items[1]");
        let pods = pods_from(&objs).unwrap();
        assert_eq!(pods[0].metadata.name.as_deref(), Some("a"));

        let arr = r#"[{"metadata":{"name":"a"}}]"#;
        assert_eq!(parse_objects("f", arr).unwrap()[0].location, "[0]");

        let yaml = "kind: Pod\nmetadata:\n  name: y\n---\nkind: Pod\nmetadata:\n  name: z\n";
        let objs = parse_objects("f.yaml", yaml).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location, "document 2");
    }

    /// The typed fast path answers exactly as the general path, and leaves
    /// every error to it.
    #[test]
    fn parse_pods_matches_the_general_path() {
        let general = |t: &str| parse_objects("f.json", t).and_then(|o| pods_from(&o));
        let cases = [
            r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
            r#"{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[]}"#,
            r#"{"items":[{"metadata":{"name":"a"}}]}"#,
            r#"  [{"metadata":{"name":"a"}},{"kind":"Pod","apiVersion":"v1"}]"#,
            r#"{"kind":"List","items":null}"#,
            r#"{"kind":"List","items":[{"kind":"List","items":[{"metadata":{"name":"n"}}]}]}"#,
            r#"[[{"metadata":{"name":"a"}}]]"#,
            r#"{"kind":"Pod","metadata":{"name":"a"},"items":[]}"#,
            r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x"}}]}"#,
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod"}]}"#,
            r#"{"kind":"PodList","items":[{"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#,
            r#"{"kind":"List","items":[3]}"#,
            r#"{"kind":"List","items":[]} trailing"#,
            "kind: Pod\nmetadata:\n  name: y\n",
        ];
        for text in cases {
            match (parse_pods("f.json", text), general(text)) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                (a, b) => panic!("{text}: fast {a:?} vs general {b:?}"),
            }
        }
    }

    #[test]
    fn errors_name_source_item_and_field() {
        let bad = r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#;
        let objs = parse_objects("pods.json", bad).unwrap();
        let err = pods_from(&objs).unwrap_err().to_string();
        assert!(err.contains("pods.json"), "{err}");
        assert!(err.contains("items[0]"), "{err}");
        assert!(err.contains("status.conditions[0].status"), "{err}");

        let err = parse_objects("x.json", "{nope").unwrap_err().to_string();
        assert!(err.starts_with("x.json: not valid JSON"), "{err}");
        let err = parse_objects("x.yaml", "a: [").unwrap_err().to_string();
        assert!(err.starts_with("x.yaml: not valid YAML"), "{err}");
        let err = parse_objects("x.yaml", "42").unwrap_err().to_string();
        assert!(err.contains("found a number"), "{err}");
        let objs = parse_objects("x.yaml", "kind: Node\nmetadata: {name: n}").unwrap();
        assert!(pods_from(&objs)
            .unwrap_err()
            .to_string()
            .contains("expected a Pod"));
    }
}
