//! Label-selector matching, as `metav1.LabelSelectorAsSelector` evaluates it.

use std::collections::BTreeMap;

use super::types::LabelSelector;

/// Why a selector cannot be evaluated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// An operator other than In, NotIn, Exists, DoesNotExist.
    #[error("matchExpressions[{index}].operator: unknown operator {operator:?} (expected In, NotIn, Exists or DoesNotExist)")]
    UnknownOperator {
        /// Position in `matchExpressions`.
        index: usize,
        /// The operator given.
        operator: String,
    },
    /// In/NotIn without values, or Exists/DoesNotExist with values.
    #[error("matchExpressions[{index}].values: {message}")]
    BadValues {
        /// Position in `matchExpressions`.
        index: usize,
        /// What is wrong.
        message: &'static str,
    },
}

impl LabelSelector {
    /// True when the selector has no requirement (it would select every pod).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Checks operators and values.
    pub fn check(&self) -> Result<(), SelectorError> {
        for (index, r) in self.match_expressions.iter().enumerate() {
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(SelectorError::BadValues {
                        index,
                        message: "must be non-empty for In and NotIn",
                    })
                }
                "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                    return Err(SelectorError::BadValues {
                        index,
                        message: "must be empty for Exists and DoesNotExist",
                    })
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Err(SelectorError::UnknownOperator {
                        index,
                        operator: other.to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Whether `labels` satisfy every requirement. Unknown operators match
    /// nothing (run [`LabelSelector::check`] first to report them).
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.match_labels.iter().all(|(k, v)| get(k) == Some(v))
            && self
                .match_expressions
                .iter()
                .all(|r| match r.operator.as_str() {
                    "In" => get(&r.key).is_some_and(|v| r.values.contains(v)),
                    "NotIn" => get(&r.key).is_none_or(|v| !r.values.contains(v)),
                    "Exists" => get(&r.key).is_some(),
                    "DoesNotExist" => get(&r.key).is_none(),
                    _ => false,
                })
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::LabelSelectorRequirement;
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn match_labels_and_expressions() {
        let sel = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: vec!["a".into(), "b".into()],
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: vec![],
                },
            ],
        };
        assert!(sel.check().is_ok());
        assert!(sel.matches(Some(&labels(&[("app", "web"), ("tier", "a")]))));
        assert!(!sel.matches(Some(&labels(&[("app", "web"), ("tier", "c")]))));
        assert!(!sel.matches(Some(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("canary", "1")
        ]))));
        assert!(!sel.matches(None));
        let notin = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "x".into(),
                operator: "NotIn".into(),
                values: vec!["1".into()],
            }],
            ..Default::default()
        };
        assert!(notin.matches(None));
        let bad = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "x".into(),
                operator: "Equals".into(),
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("matchExpressions[0].operator"));
    }
}
