//! Reading `DeletionCostPolicy` objects from YAML or JSON files (`plan
//! --policy`, tests), with errors that name the file, the object and the field.

use deletion_cost_core::policy::{
    validate, DeletionCostPolicy, ValidatedPolicy, ValidationError, ValidationErrors,
};

use crate::{parse_objects, InputError, RawObject};

/// `apiVersion` of the policy objects this build understands.
pub const API_VERSION: &str = "deletioncost.dev/v1alpha1";
/// `kind` of policy objects.
pub const KIND: &str = "DeletionCostPolicy";

/// Why policies could not be read from a file.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// Unreadable file, bad syntax, or a field of the wrong type or value
    /// (including unknown enum values such as presets).
    #[error(transparent)]
    Input(#[from] InputError),
    /// The input holds no `DeletionCostPolicy`.
    #[error("{source_name}: no DeletionCostPolicy found ({found})")]
    NoPolicy {
        /// File path or `<stdin>`.
        source_name: String,
        /// What the input held instead.
        found: String,
    },
    /// A `DeletionCostPolicy` of another API version.
    #[error("{source_name}: {location} (DeletionCostPolicy {name:?}): apiVersion {found:?} is not supported (expected {API_VERSION})")]
    WrongApiVersion {
        /// File path or `<stdin>`.
        source_name: String,
        /// Where in the input.
        location: String,
        /// `metadata.name`.
        name: String,
        /// The apiVersion given.
        found: String,
    },
    /// One policy was expected and the input holds several.
    #[error("{source_name}: expected one DeletionCostPolicy, found {}: {}", names.len(), names.join(", "))]
    TooMany {
        /// File path or `<stdin>`.
        source_name: String,
        /// `namespace/name` of each policy found.
        names: Vec<String>,
    },
    /// A policy that decodes but does not validate.
    #[error("{source_name}: {location} (DeletionCostPolicy {name:?}) is invalid:\n{errors}")]
    Invalid {
        /// File path or `<stdin>`.
        source_name: String,
        /// Where in the input.
        location: String,
        /// `metadata.name`.
        name: String,
        /// Every problem, one per line, each naming its field.
        errors: ValidationErrors,
    },
}

/// A policy read from a file, with where it was found.
#[derive(Debug, Clone)]
pub struct PolicyObject {
    /// File path or `<stdin>`.
    pub source_name: String,
    /// `document 2`, `items[0]`, `object`...
    pub location: String,
    /// The decoded policy.
    pub policy: DeletionCostPolicy,
}

impl PolicyObject {
    /// `metadata.name`, empty when absent.
    pub fn name(&self) -> &str {
        self.policy.metadata.name.as_deref().unwrap_or_default()
    }

    /// `namespace/name` (`name` alone when the namespace is unset).
    pub fn qualified_name(&self) -> String {
        match self.policy.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", self.name()),
            _ => self.name().to_string(),
        }
    }

    /// Validates the spec; errors name the file and the object as well as
    /// the field.
    pub fn validate(&self) -> Result<ValidatedPolicy, PolicyFileError> {
        validate(&self.policy.spec).map_err(|errors| PolicyFileError::Invalid {
            source_name: self.source_name.clone(),
            location: self.location.clone(),
            name: self.name().to_string(),
            errors,
        })
    }
}

/// Decodes every `DeletionCostPolicy` among `objects`, skipping objects of
/// other kinds (a cluster snapshot may hold policies among pods and nodes).
/// May return an empty list.
pub fn policies_from(objects: &[RawObject]) -> Result<Vec<PolicyObject>, PolicyFileError> {
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| o.kind == KIND) {
        let api_version = o
            .value
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(API_VERSION);
        if api_version != API_VERSION {
            return Err(PolicyFileError::WrongApiVersion {
                source_name: o.source_name.clone(),
                location: o.location.clone(),
                name: o.name(),
                found: api_version.to_string(),
            });
        }
        // strict, as the API server: unknown fields, types, ranges, enums
        let mut checked = o.clone();
        let errors = deletion_cost_core::policy::strict::check(&mut checked.value);
        if !errors.is_empty() {
            return Err(PolicyFileError::Invalid {
                source_name: o.source_name.clone(),
                location: o.location.clone(),
                name: o.name(),
                errors: ValidationErrors(errors),
            });
        }
        let policy = checked.decode(KIND).map_err(|e| match e {
            InputError::Field { field, message, .. } => PolicyFileError::Invalid {
                source_name: o.source_name.clone(),
                location: o.location.clone(),
                name: o.name(),
                errors: ValidationErrors(vec![decode_error(&field, &message)]),
            },
            other => PolicyFileError::Input(other),
        })?;
        out.push(PolicyObject {
            source_name: o.source_name.clone(),
            location: o.location.clone(),
            policy,
        });
    }
    Ok(out)
}

/// A decode error the strict check did not catch first, in the policy's
/// words: `missing field `spec`` becomes `spec: must be set`.
fn decode_error(field: &str, message: &str) -> ValidationError {
    let at = |sub: &str| match field {
        "" | "." => sub.to_string(),
        f => format!("{f}.{sub}"),
    };
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next())
    {
        return ValidationError {
            field: at(name),
            message: "must be set".into(),
        };
    }
    ValidationError {
        field: if field == "." {
            String::new()
        } else {
            field.to_string()
        },
        message: message.to_string(),
    }
}

/// Parses JSON or YAML text and returns every `DeletionCostPolicy` in it, in
/// input order; an input with none is an error that says what it held.
pub fn parse_policies(source_name: &str, text: &str) -> Result<Vec<PolicyObject>, PolicyFileError> {
    let objects = parse_objects(source_name, text)?;
    let policies = policies_from(&objects)?;
    if policies.is_empty() {
        let found = crate::held_kinds(&objects);
        return Err(PolicyFileError::NoPolicy {
            source_name: source_name.to_string(),
            found,
        });
    }
    Ok(policies)
}

/// The only policy of a list, or an error naming all of them. Only the
/// tests read one policy this way: `plan` takes every policy it is given.
#[cfg(test)]
fn single(mut policies: Vec<PolicyObject>) -> Result<PolicyObject, PolicyFileError> {
    match policies.len() {
        1 => Ok(policies.remove(0)),
        0 => Err(PolicyFileError::NoPolicy {
            source_name: "input".into(),
            found: "empty list".into(),
        }),
        _ => Err(PolicyFileError::TooMany {
            source_name: policies[0].source_name.clone(),
            names: policies.iter().map(PolicyObject::qualified_name).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "apiVersion: deletioncost.dev/v1alpha1\nkind: DeletionCostPolicy\nmetadata: {name: NAME, namespace: shop}\nspec:\n  selector: {matchLabels: {app: web}}\n  signals: [{nodeConsolidation: {}}]\n";

    fn policy(name: &str) -> String {
        POLICY.replace("NAME", name)
    }

    #[test]
    fn finds_policies_among_other_objects() {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\n---\n{}---\n{}",
            policy("a"),
            policy("b")
        );
        let found = parse_policies("in.yaml", &text).unwrap();
        let names: Vec<String> = found.iter().map(PolicyObject::qualified_name).collect();
        assert_eq!(names, vec!["shop/a", "shop/b"]);
        assert_eq!(found[1].location, "document 3");
        let err = single(found).unwrap_err().to_string();
        assert_eq!(
            err,
            "in.yaml: expected one DeletionCostPolicy, found 2: shop/a, shop/b"
        );
        let one = single(parse_policies("in.yaml", &policy("a")).unwrap()).unwrap();
        assert!(one.validate().is_ok());
    }

    #[test]
    fn json_list_works() {
        let text = r#"{"kind": "List", "items": [{"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy", "metadata": {"name": "x"}, "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "signals": [{"zoneBalance": {}}]}}]}"#;
        let found = parse_policies("in.json", text).unwrap();
        assert_eq!(found[0].location, "items[0]");
        assert_eq!(found[0].qualified_name(), "x");
    }

    #[test]
    fn no_policy_says_what_was_found() {
        let err = parse_policies(
            "pods.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "pods.yaml: no DeletionCostPolicy found (found kind Pod)"
        );
        let err = parse_policies("e.yaml", "").unwrap_err().to_string();
        assert!(err.contains("the input is empty"), "{err}");
    }

    #[test]
    fn wrong_api_version() {
        let text = policy("a").replace("v1alpha1", "v2");
        let err = parse_policies("p.yaml", &text).unwrap_err().to_string();
        assert!(
            err.contains("apiVersion \"deletioncost.dev/v2\" is not supported"),
            "{err}"
        );
        assert!(err.contains("DeletionCostPolicy \"a\""), "{err}");
    }

    #[test]
    fn decode_errors_name_the_field() {
        let text = policy("a").replace(
            "nodeConsolidation: {}",
            "nodeConsolidation: {maxPods: lots}",
        );
        let err = parse_policies("p.yaml", &text).unwrap_err().to_string();
        assert!(err.contains("p.yaml"), "{err}");
        assert!(
            err.contains("spec.signals[0].nodeConsolidation.maxPods: must be a whole number, found the string \"lots\""),
            "{err}"
        );
        let text = policy("a").replace(
            "signals: [{nodeConsolidation: {}}]",
            "signals: [{billingClass: {preset: aws, costs: {}}}]",
        );
        let err = parse_policies("p.yaml", &text).unwrap_err().to_string();
        assert!(
            err.contains("spec.signals[0].billingClass.preset: must be one of auto, karpenter, eks, gkeSpot, gkePreemptible, azure (found \"aws\")"),
            "{err}"
        );
    }

    #[test]
    fn invalid_policy_names_file_object_and_field() {
        let text = policy("a").replace("{matchLabels: {app: web}}", "{}");
        let p = single(parse_policies("p.yaml", &text).unwrap()).unwrap();
        let err = p.validate().unwrap_err().to_string();
        assert!(
            err.starts_with("p.yaml: object (DeletionCostPolicy \"a\") is invalid:\nspec.selector: must not be empty"),
            "{err}"
        );
    }

    #[test]
    fn strict_like_the_api_server() {
        let text = policy("a").replace("  signals:", "  combin: sum\n  signals:");
        let err = parse_policies("p.yaml", &text).unwrap_err().to_string();
        assert_eq!(
            err,
            "p.yaml: object (DeletionCostPolicy \"a\") is invalid:\nspec.combin: unknown field; did you mean combine?"
        );
        let text = policy("a").replace("nodeConsolidation: {}", "gpuPrice: {}");
        let err = parse_policies("p.yaml", &text).unwrap_err().to_string();
        assert!(
            err.ends_with("spec.signals[0]: unknown signal gpuPrice; known: billingClass, nodeConsolidation, utilization, zoneBalance"),
            "{err}"
        );
        // every problem at once, each naming its field
        let text = policy("a").replace(
            "nodeConsolidation: {}",
            "nodeConsolidation: {maxPods: -5, wieght: 2}",
        );
        let err = parse_policies("p.yaml", &text).unwrap_err().to_string();
        assert!(
            err.ends_with("spec.signals[0].nodeConsolidation.wieght: unknown field; did you mean weight?\nspec.signals[0].nodeConsolidation.maxPods: must be at least 1, found -5"),
            "{err}"
        );
        // a policy without a spec
        let err = parse_policies(
            "p.yaml",
            "apiVersion: deletioncost.dev/v1alpha1\nkind: DeletionCostPolicy\nmetadata: {name: x}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.ends_with("is invalid:\nspec: must be set"), "{err}");
    }

    #[test]
    fn empty_and_comment_only_files_are_named() {
        for text in ["", "  \n", "# only a comment\n", "---\n# x\n---\n"] {
            let err = parse_policies("policy.yaml", text).unwrap_err().to_string();
            assert_eq!(
                err, "policy.yaml: no DeletionCostPolicy found (the input is empty)",
                "{text:?}"
            );
        }
    }

    #[test]
    fn unknown_preset_names_the_field_when_decoding() {
        let objects = crate::parse_objects(
            "policy.yaml",
            "apiVersion: deletioncost.dev/v1alpha1\nkind: DeletionCostPolicy\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  signals:\n  - billingClass: {preset: aws, costs: {spot: 1}}\n",
        )
        .unwrap();
        let err = objects[0]
            .decode::<DeletionCostPolicy>("DeletionCostPolicy")
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.signals[0].billingClass.preset"), "{err}");
        assert!(err.contains("aws"), "{err}");
    }
}
