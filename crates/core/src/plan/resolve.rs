//! A policy ready for planning: its name and namespace plus the validated
//! model from [`crate::policy::validate()`].

use crate::policy::{validate, DeletionCostPolicySpec, ValidatedPolicy, ValidatedSignal};
use crate::signals::utilization::quantize;

/// A validated policy with its identity: [`ValidatedPolicy`] is the spec
/// alone (what `validate` checks, shared by every copy of a policy);
/// this adds the name and namespace a plan, its patches and its status
/// are addressed to.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPolicy {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// The validated spec (defaults applied, value ranges known).
    pub spec: ValidatedPolicy,
}

/// Why a policy cannot be planned: every invalid field, one per line.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("DeletionCostPolicy {policy}: {errors}")]
pub struct ResolveError {
    /// namespace/name.
    pub policy: String,
    /// `field: message` lines.
    pub errors: String,
}

impl NamedPolicy {
    /// Validates the spec.
    pub fn validate(
        name: &str,
        namespace: &str,
        spec: &DeletionCostPolicySpec,
    ) -> Result<Self, ResolveError> {
        let spec = validate(spec).map_err(|e| ResolveError {
            policy: format!("{namespace}/{name}"),
            errors: e.to_string(),
        })?;
        Ok(Self {
            name: name.to_string(),
            namespace: namespace.to_string(),
            spec,
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The value used for a missing sample under `useDefault`: the utilisation
/// default quantised, otherwise the signal's lowest value.
pub fn default_value(signal: &ValidatedSignal) -> i64 {
    match signal {
        ValidatedSignal::Utilization(u) => match u.default {
            Some(d) => i64::from(quantize(d, u.range.min, u.range.max, u.buckets, None, 0.0)),
            None => signal.value_range().0,
        },
        _ => signal.value_range().0,
    }
}
