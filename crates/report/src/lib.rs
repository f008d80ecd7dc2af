//! The plan as a picture: what a page about one or more plans shows, read
//! from the plans and the snapshot they were made from (pure), and the HTML
//! renderer ([`html`]). `plan -o html` and the operator's
//! `/policies/<namespace>/<name>` page both build a [`Report`] and render it.

pub mod html;

use std::collections::BTreeMap;

// the core's modules under the names the renderers know them by
pub(crate) use deletion_cost_core::{plan, policy, signals};

use k8s_openapi::api::core::v1::Node;

use crate::plan::{NamedPolicy, Plan, PlanOptions};
use crate::policy::validate::BillingSource;
use crate::policy::{BillingPreset, Combine, PricedScaleIns, ValidatedSignal};
use crate::signals::billing::billing_class;

/// Node label read for the zone when the policy has no zone-balance signal.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One page: a section per policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Report<'a> {
    /// Where the plans come from (`deletion-cost plan`, the operator), shown
    /// under the title.
    pub source: String,
    /// The comparator's `now` (RFC 3339), shown as given: the renderer never
    /// reads the clock.
    pub now: Option<String>,
    /// One section per policy, in the order given.
    pub sections: Vec<Section<'a>>,
}

/// What the page shows about one policy's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Section<'a> {
    /// `namespace/name`.
    pub policy: String,
    /// Signal kinds, most important first.
    pub signals: Vec<&'static str>,
    /// `lexicographic` or `sum`.
    pub combine: &'static str,
    /// The plan.
    pub plan: &'a Plan,
    /// Billing class and zone of each node the plan's pods run on.
    pub nodes: BTreeMap<String, NodeInfo>,
    /// The scale-down whose victims the plan marks.
    pub scale_down_by: Option<usize>,
    /// The order is predicted as if every planned patch had landed (the
    /// offline plan), not over the pods as they are (the operator).
    pub after_patches: bool,
    /// The scale-ins priced as they happened (the operator's page, with
    /// `run --prices`).
    pub priced_scale_ins: Option<&'a PricedScaleIns>,
}

/// Where a node sits on the page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    /// Billing class as the policy reads it (its billing-class signal's label
    /// or preset; the well-known labels otherwise). `None`: no such label.
    pub billing_class: Option<String>,
    /// Zone label value (the zone-balance signal's `topologyKey`, else
    /// [`ZONE_LABEL`]). `None`: no such label.
    pub zone: Option<String>,
}

impl<'a> Section<'a> {
    /// The section for `plan`, with its nodes' billing class and zone read
    /// from `snapshot_nodes` (its pods are not needed).
    pub fn new(
        policy: &NamedPolicy,
        plan: &'a Plan,
        snapshot_nodes: &[std::sync::Arc<Node>],
        opts: &PlanOptions,
    ) -> Self {
        let spec = &policy.spec;
        let (label, preset) = spec
            .signals
            .iter()
            .find_map(|s| match s {
                ValidatedSignal::BillingClass(b) => Some(match &b.source {
                    BillingSource::NodeLabel(l) => (Some(l.as_str()), BillingPreset::Auto),
                    BillingSource::Preset(p) => (None, *p),
                }),
                _ => None,
            })
            .unwrap_or((None, BillingPreset::Auto));
        let zone_key = spec
            .signals
            .iter()
            .find_map(|s| match s {
                ValidatedSignal::ZoneBalance(z) => Some(z.topology_key.as_str()),
                _ => None,
            })
            .unwrap_or(ZONE_LABEL);
        let mut nodes: BTreeMap<String, NodeInfo> = plan
            .pods
            .iter()
            .filter(|p| !p.node.is_empty())
            .map(|p| (p.node.to_string(), NodeInfo::default()))
            .collect();
        for node in snapshot_nodes {
            let Some(info) = node.metadata.name.as_deref().and_then(|n| nodes.get_mut(n)) else {
                continue;
            };
            let labels = node.metadata.labels.as_ref();
            info.billing_class = billing_class(labels, label, preset);
            info.zone = labels.and_then(|l| l.get(zone_key)).cloned();
        }
        Self {
            policy: policy.key(),
            signals: spec.signals.iter().map(|s| s.kind_name()).collect(),
            combine: match spec.combine {
                Combine::Lexicographic => "lexicographic",
                Combine::Sum => "sum",
            },
            plan,
            nodes,
            scale_down_by: opts.scale_down_by,
            after_patches: opts.assume_patches_applied,
            priced_scale_ins: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{self, PreviousValues};
    use crate::signals::SignalSamples;
    use deletion_cost_input::parse_policies;

    #[test]
    fn nodes_carry_the_class_the_policy_reads_and_their_zone() {
        let policy = parse_policies(
            "p.yaml",
            include_str!("../../../config/examples/combined.yaml"),
        )
        .unwrap()
        .remove(0);
        let resolved = NamedPolicy {
            name: policy.name().to_string(),
            namespace: "shop".into(),
            spec: policy.validate().unwrap(),
        };
        let mut reader =
            deletion_cost_input::SnapshotReader::new(deletion_cost_input::InputLimits::NONE);
        reader
            .read_text(
                "cluster.yaml",
                include_str!("../../../config/examples/cluster.yaml"),
            )
            .unwrap();
        let snapshot = reader.finish().unwrap().snapshot;
        let opts = PlanOptions {
            gates: Default::default(),
            now: None,
            scale_down_by: Some(2),
            assume_patches_applied: true,
            chunks: Default::default(),
        };
        let p = plan::plan(
            &resolved,
            &snapshot,
            &SignalSamples::default(),
            &PreviousValues::default(),
            &opts,
        );
        let s = Section::new(&resolved, &p, &snapshot.nodes, &opts);
        assert_eq!(s.policy, "shop/web");
        assert_eq!(s.signals, ["billingClass", "utilization"]);
        // the custom label, as written: not Karpenter's on-demand
        let n = &s.nodes["ondemand-a1"];
        assert_eq!(n.billing_class.as_deref(), Some("reserved"));
        assert_eq!(n.zone.as_deref(), Some("eu-west-1a"));
        assert_eq!(
            s.nodes["payg-c1"].billing_class.as_deref(),
            Some("pay-as-you-go")
        );
        assert_eq!(s.scale_down_by, Some(2));
        assert!(s.after_patches);
    }
}
