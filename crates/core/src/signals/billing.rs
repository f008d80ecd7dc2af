//! The node's billing class, from a custom label or the well-known labels
//! cloud providers and Karpenter set.

use std::collections::BTreeMap;

use crate::policy::validate::BillingSource;
use crate::policy::BillingPreset;

/// Karpenter's label: `spot` / `on-demand` (also `reserved`).
pub const KARPENTER: &str = "karpenter.sh/capacity-type";
/// EKS managed node groups: `SPOT` / `ON_DEMAND`.
pub const EKS: &str = "eks.amazonaws.com/capacityType";
/// GKE Spot VMs: `"true"`.
pub const GKE_SPOT: &str = "cloud.google.com/gke-spot";
/// GKE preemptible VMs: `"true"`.
pub const GKE_PREEMPTIBLE: &str = "cloud.google.com/gke-preemptible";
/// AKS spot node pools: `spot` (regular pools carry `regular` or nothing).
pub const AZURE: &str = "kubernetes.azure.com/scalesetpriority";

/// The normalised class presets produce for interruptible capacity.
pub const SPOT: &str = "spot";
/// The normalised class presets produce for regular capacity.
pub const ON_DEMAND: &str = "on-demand";

/// Reads one preset's label; `None` when the node does not carry it.
fn from_preset(preset: BillingPreset, labels: &BTreeMap<String, String>) -> Option<String> {
    let get = |k: &str| labels.get(k).map(|v| v.trim().to_ascii_lowercase());
    match preset {
        BillingPreset::Auto => [
            BillingPreset::Karpenter,
            BillingPreset::Eks,
            BillingPreset::GkeSpot,
            BillingPreset::GkePreemptible,
            BillingPreset::Azure,
        ]
        .into_iter()
        .find_map(|p| from_preset(p, labels)),
        BillingPreset::Karpenter => get(KARPENTER),
        BillingPreset::Eks => get(EKS).map(|v| match v.as_str() {
            "on_demand" => ON_DEMAND.to_string(),
            _ => v,
        }),
        // GKE only labels spot/preemptible nodes; "false" means regular
        BillingPreset::GkeSpot => get(GKE_SPOT).map(|v| gke_class(&v)),
        BillingPreset::GkePreemptible => get(GKE_PREEMPTIBLE).map(|v| gke_class(&v)),
        BillingPreset::Azure => get(AZURE).map(|v| match v.as_str() {
            "regular" => ON_DEMAND.to_string(),
            _ => v,
        }),
    }
}

fn gke_class(v: &str) -> String {
    if v == "true" {
        SPOT.to_string()
    } else {
        ON_DEMAND.to_string()
    }
}

/// The billing class of a node: the custom label's value as written, or the
/// preset's normalised class. `None` when the node has no such label (or the
/// pod has no node).
pub fn billing_class(
    node_labels: Option<&BTreeMap<String, String>>,
    custom_label: Option<&str>,
    preset: BillingPreset,
) -> Option<String> {
    let labels = node_labels?;
    match custom_label {
        Some(label) => labels.get(label).cloned(),
        None => from_preset(preset, labels),
    }
}

/// The billing class of a node as a billing-class signal with `source`
/// reads it: the one mapping the planner and the savings share.
pub fn class_of(
    source: &BillingSource,
    node_labels: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    match source {
        BillingSource::NodeLabel(l) => billing_class(node_labels, Some(l), BillingPreset::Auto),
        BillingSource::Preset(p) => billing_class(node_labels, None, *p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn presets_normalise() {
        let auto = BillingPreset::Auto;
        let c = |l: &[(&str, &str)]| billing_class(Some(&labels(l)), None, auto);
        assert_eq!(c(&[(KARPENTER, "spot")]).as_deref(), Some("spot"));
        assert_eq!(c(&[(KARPENTER, "on-demand")]).as_deref(), Some("on-demand"));
        assert_eq!(c(&[(EKS, "SPOT")]).as_deref(), Some("spot"));
        assert_eq!(c(&[(EKS, "ON_DEMAND")]).as_deref(), Some("on-demand"));
        assert_eq!(c(&[(GKE_SPOT, "true")]).as_deref(), Some("spot"));
        assert_eq!(c(&[(GKE_PREEMPTIBLE, "true")]).as_deref(), Some("spot"));
        assert_eq!(c(&[(AZURE, "spot")]).as_deref(), Some("spot"));
        assert_eq!(c(&[(AZURE, "regular")]).as_deref(), Some("on-demand"));
        assert_eq!(c(&[("other", "x")]), None);
        assert_eq!(billing_class(None, None, auto), None);
    }

    #[test]
    fn custom_label_is_used_as_written() {
        let l = labels(&[
            ("billing.example.com/class", "pay-as-you-go"),
            (KARPENTER, "spot"),
        ]);
        assert_eq!(
            billing_class(
                Some(&l),
                Some("billing.example.com/class"),
                BillingPreset::Auto
            )
            .as_deref(),
            Some("pay-as-you-go")
        );
        // an explicit preset ignores other providers' labels
        assert_eq!(billing_class(Some(&l), None, BillingPreset::Eks), None);
    }
}
