//! The policy in the form the planner evaluates: defaults applied, each
//! signal's value range known.

use std::collections::BTreeMap;

use crate::policy::{
    BillingPreset, Combine, DeletionCostPolicySpec, LabelSelector, OnSignalMissing, TargetKind,
};

/// Which pods a policy manages.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Pods whose labels match.
    Selector(LabelSelector),
    /// Pods of a Deployment (through its ReplicaSets) or of a ReplicaSet.
    Workload {
        /// Deployment or ReplicaSet.
        kind: TargetKind,
        /// Its name.
        name: String,
    },
}

/// One signal with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalSpec {
    /// Node billing class.
    Billing {
        /// Custom label, or `None` to use `preset`.
        label: Option<String>,
        /// Preset when no custom label.
        preset: BillingPreset,
        /// Class -> cost.
        costs: BTreeMap<String, i32>,
        /// Cost of unknown classes.
        default: i32,
        /// Class -> max pods kept on it.
        budgets: BTreeMap<String, u32>,
    },
    /// Utilisation buckets.
    Utilization {
        /// Range start.
        min: f64,
        /// Range end.
        max: f64,
        /// Bucket count (>= 1).
        buckets: u32,
        /// Fraction of a bucket.
        hysteresis: f64,
        /// Value for `useDefault`.
        default: Option<f64>,
    },
    /// Pods on emptier nodes first.
    Consolidation {
        /// Cap on the count.
        max_pods: u32,
    },
    /// Pods in fuller zones first.
    Zone {
        /// Node label with the zone.
        topology_key: String,
        /// Cap on the value.
        max_per_zone: u32,
    },
}

impl SignalSpec {
    /// The lowest and highest value the signal can produce.
    pub fn range(&self) -> (i64, i64) {
        match self {
            SignalSpec::Billing {
                costs,
                default,
                budgets,
                ..
            } => {
                let lo = costs.values().copied().chain([*default]).min().unwrap_or(0);
                let hi = costs.values().copied().chain([*default]).max().unwrap_or(0);
                // pods over a class budget sit one below every class cost
                let lo = i64::from(lo) - i64::from(!budgets.is_empty());
                (lo, i64::from(hi))
            }
            SignalSpec::Utilization { buckets, .. } => (0, i64::from(buckets.saturating_sub(1))),
            SignalSpec::Consolidation { max_pods } => (0, i64::from(*max_pods)),
            SignalSpec::Zone { max_per_zone, .. } => (0, i64::from(*max_per_zone)),
        }
    }

    /// The value used for a missing sample under `useDefault`: the
    /// utilisation default quantised, otherwise the lowest value.
    pub fn default_value(&self) -> i64 {
        match self {
            SignalSpec::Utilization {
                min,
                max,
                buckets,
                default: Some(d),
                ..
            } => i64::from(crate::signals::utilization::quantize(
                *d, *min, *max, *buckets, None, 0.0,
            )),
            _ => self.range().0,
        }
    }

    /// Short name used in tables (`billing`, `utilization`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            SignalSpec::Billing { .. } => "billingClass",
            SignalSpec::Utilization { .. } => "utilization",
            SignalSpec::Consolidation { .. } => "nodeConsolidation",
            SignalSpec::Zone { .. } => "zoneBalance",
        }
    }
}

/// A policy ready for planning.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPolicy {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// Managed pods.
    pub target: Target,
    /// Signals with their weights (weight only matters for `sum`).
    pub signals: Vec<(SignalSpec, i64)>,
    /// Combination.
    pub combine: Combine,
    /// Missing-signal behaviour.
    pub on_missing: OnSignalMissing,
    /// Leave costs this policy did not write.
    pub respect_foreign_costs: bool,
}

/// Why a policy cannot be planned.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResolveError {
    /// A field with a bad value.
    #[error("DeletionCostPolicy {policy}: {field}: {message}")]
    Field {
        /// namespace/name.
        policy: String,
        /// Field path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ResolvedPolicy {
    /// Applies defaults and the checks the planner relies on.
    pub fn resolve(
        name: &str,
        namespace: &str,
        spec: &DeletionCostPolicySpec,
    ) -> Result<Self, ResolveError> {
        let err = |field: String, message: &str| ResolveError::Field {
            policy: format!("{namespace}/{name}"),
            field,
            message: message.to_string(),
        };
        let target = match (&spec.selector, &spec.target_ref) {
            (Some(sel), None) => {
                if sel.is_empty() {
                    return Err(err(
                        "spec.selector".into(),
                        "must not be empty (it would select every pod in the namespace)",
                    ));
                }
                sel.check()
                    .map_err(|e| err("spec.selector".into(), &e.to_string()))?;
                Target::Selector(sel.clone())
            }
            (None, Some(t)) => {
                if t.name.is_empty() {
                    return Err(err("spec.targetRef.name".into(), "must not be empty"));
                }
                Target::Workload {
                    kind: t.kind,
                    name: t.name.clone(),
                }
            }
            _ => {
                return Err(err(
                    "spec".into(),
                    "exactly one of `selector` and `targetRef` must be set",
                ))
            }
        };
        if spec.signals.is_empty() {
            return Err(err("spec.signals".into(), "must list at least one signal"));
        }
        let mut signals = Vec::new();
        for (i, s) in spec.signals.iter().enumerate() {
            let f = |sub: &str| format!("spec.signals[{i}]{sub}");
            let set = [
                s.billing_class.is_some(),
                s.utilization.is_some(),
                s.node_consolidation.is_some(),
                s.zone_balance.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if set != 1 {
                return Err(err(
                    f(""),
                    "exactly one of billingClass, utilization, nodeConsolidation, zoneBalance must be set",
                ));
            }
            let (spec, weight) = if let Some(b) = &s.billing_class {
                (
                    SignalSpec::Billing {
                        label: b.node_label.clone(),
                        preset: b.preset.unwrap_or(BillingPreset::Auto),
                        costs: b.costs.clone(),
                        default: b.default,
                        budgets: b.budgets.clone(),
                    },
                    b.weight,
                )
            } else if let Some(u) = &s.utilization {
                let buckets = u.buckets.unwrap_or(10);
                if buckets == 0 {
                    return Err(err(f(".utilization.buckets"), "must be at least 1"));
                }
                if u.range.max.partial_cmp(&u.range.min) != Some(std::cmp::Ordering::Greater)
                    || !u.range.min.is_finite()
                    || !u.range.max.is_finite()
                {
                    return Err(err(f(".utilization.range"), "max must be greater than min"));
                }
                let hysteresis = u.hysteresis.unwrap_or(0.2);
                if !(0.0..1.0).contains(&hysteresis) {
                    return Err(err(f(".utilization.hysteresis"), "must be in [0, 1)"));
                }
                (
                    SignalSpec::Utilization {
                        min: u.range.min,
                        max: u.range.max,
                        buckets,
                        hysteresis,
                        default: u.default,
                    },
                    u.weight,
                )
            } else if let Some(c) = &s.node_consolidation {
                (
                    SignalSpec::Consolidation {
                        max_pods: c.max_pods.unwrap_or(110),
                    },
                    c.weight,
                )
            } else if let Some(z) = &s.zone_balance {
                (
                    SignalSpec::Zone {
                        topology_key: z
                            .topology_key
                            .clone()
                            .unwrap_or_else(|| "topology.kubernetes.io/zone".into()),
                        max_per_zone: z.max_per_zone.unwrap_or(1000),
                    },
                    z.weight,
                )
            } else {
                unreachable!("exactly one signal kind is set")
            };
            signals.push((spec, i64::from(weight.unwrap_or(1))));
        }
        let policy = Self {
            name: name.to_string(),
            namespace: namespace.to_string(),
            target,
            signals,
            combine: spec.combine,
            on_missing: spec.on_signal_missing,
            respect_foreign_costs: spec.respect_foreign_costs,
        };
        policy
            .check_bounds()
            .map_err(|m| err("spec.signals".into(), &m))?;
        Ok(policy)
    }

    /// Checks the combined cost always fits in int32.
    fn check_bounds(&self) -> Result<(), String> {
        match self.combine {
            Combine::Lexicographic => {
                let mut product: i128 = 1;
                for (s, _) in &self.signals {
                    let (lo, hi) = s.range();
                    product = product.saturating_mul(i128::from(hi - lo + 1));
                    if product > i128::from(i32::MAX) {
                        return Err(format!(
                            "lexicographic combination needs {product}+ distinct values, more than int32 holds; use fewer buckets or a smaller cost range"
                        ));
                    }
                }
            }
            Combine::Sum => {
                let mut total: i128 = 0;
                for (s, w) in &self.signals {
                    let (lo, hi) = s.range();
                    total += i128::from(w.abs()) * i128::from(lo.abs().max(hi.abs()));
                }
                if total > i128::from(i32::MAX) {
                    return Err(format!(
                        "weighted sum can reach {total}, more than int32 holds; lower the weights or costs"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Combines per-signal values (each within its range) into one cost.
    pub fn combine(&self, values: &[i64]) -> i32 {
        let total: i128 = match self.combine {
            Combine::Lexicographic => {
                let mut acc: i128 = 0;
                for ((s, _), v) in self.signals.iter().zip(values) {
                    let (lo, hi) = s.range();
                    acc = acc * i128::from(hi - lo + 1) + i128::from((*v).clamp(lo, hi) - lo);
                }
                acc
            }
            Combine::Sum => self
                .signals
                .iter()
                .zip(values)
                .map(|((_, w), v)| i128::from(*w) * i128::from(*v))
                .sum(),
        };
        total.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32
    }
}
