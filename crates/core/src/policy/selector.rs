//! Label selectors: the checks that name the failing field, and matching,
//! which kube-core's [`Selector`] does as `metav1.LabelSelectorAsSelector`
//! evaluates it.

use std::collections::{BTreeMap, BTreeSet};

use kube_core::{Expression, Selector, SelectorExt};

use super::types::LabelSelector;

/// Whether `selector` selects an object with these `labels` (`None`: an
/// object without labels).
pub fn selects(selector: &Selector, labels: Option<&BTreeMap<String, String>>) -> bool {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    selector.matches(labels.unwrap_or(&NO_LABELS))
}

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

    /// The selector as kube-core's [`Selector`], for matching with
    /// [`selects`]; an empty one selects everything. Every selector
    /// converts, the ones [`LabelSelector::check`] rejects included (run it
    /// first to report them): a requirement with an unknown operator
    /// matches nothing (`In` no value), `In`/`NotIn` without values match
    /// nothing/everything, and `Exists`/`DoesNotExist` ignore values.
    pub fn to_selector(&self) -> Selector {
        let set = |values: &[String]| values.iter().cloned().collect::<BTreeSet<_>>();
        let labels = self
            .match_labels
            .iter()
            .map(|(k, v)| Expression::Equal(k.clone(), v.clone()));
        let expressions = self.match_expressions.iter().map(|r| {
            let key = r.key.clone();
            match r.operator.as_str() {
                "In" => Expression::In(key, set(&r.values)),
                "NotIn" => Expression::NotIn(key, set(&r.values)),
                "Exists" => Expression::Exists(key),
                "DoesNotExist" => Expression::DoesNotExist(key),
                _ => Expression::In(key, BTreeSet::new()),
            }
        });
        labels.chain(expressions).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::types::LabelSelectorRequirement;
    use super::*;

    /// The hand-written matcher that kube-core's replaced, kept as the oracle:
    /// whether `labels` satisfy every requirement; unknown operators match
    /// nothing.
    fn hand_written_matches(
        sel: &LabelSelector,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        sel.match_labels.iter().all(|(k, v)| get(k) == Some(v))
            && sel
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

    /// Small alphabets, so labels and requirements often meet.
    fn arb_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map("[abc]", "[xyz]", 0..4)
    }

    fn arb_selector() -> impl Strategy<Value = LabelSelector> {
        let operator = prop::sample::select(vec![
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
            "Equals",
            "",
            "in",
        ]);
        let requirement = ("[abc]", operator, prop::collection::vec("[xyz]", 0..3)).prop_map(
            |(key, operator, values)| LabelSelectorRequirement {
                key,
                operator: operator.to_string(),
                values,
            },
        );
        (arb_labels(), prop::collection::vec(requirement, 0..4)).prop_map(
            |(match_labels, match_expressions)| LabelSelector {
                match_labels,
                match_expressions,
            },
        )
    }

    proptest! {
        /// kube-core's matching of the converted selector agrees with the
        /// hand-written matcher it replaces, on every selector (the ones
        /// `check` rejects too) and on pods with and without labels.
        #[test]
        fn kube_core_selector_agrees_with_the_hand_written_matcher(
            sel in arb_selector(),
            labels in prop::option::of(arb_labels()),
        ) {
            let kube = selects(&sel.to_selector(), labels.as_ref());
            prop_assert_eq!(kube, hand_written_matches(&sel, labels.as_ref()), "{:?} on {:?}", sel, labels);
        }
    }

    #[test]
    fn the_empty_selector_selects_everything() {
        let sel = LabelSelector::default().to_selector();
        assert!(selects(&sel, None));
        assert!(selects(
            &sel,
            Some(&BTreeMap::from([("a".into(), "x".into())]))
        ));
    }

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
        assert!(selects(
            &sel.to_selector(),
            Some(&labels(&[("app", "web"), ("tier", "a")]))
        ));
        assert!(!selects(
            &sel.to_selector(),
            Some(&labels(&[("app", "web"), ("tier", "c")]))
        ));
        assert!(!selects(
            &sel.to_selector(),
            Some(&labels(&[("app", "web"), ("tier", "a"), ("canary", "1")]))
        ));
        assert!(!selects(&sel.to_selector(), None));
        let notin = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "x".into(),
                operator: "NotIn".into(),
                values: vec!["1".into()],
            }],
            ..Default::default()
        };
        assert!(selects(&notin.to_selector(), None));
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
