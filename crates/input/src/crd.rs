//! The CustomResourceDefinition generated from the Rust types.

use kube_core::CustomResourceExt;

use deletion_cost_core::policy::DeletionCostPolicy;

/// Why the CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("rendering the DeletionCostPolicy CRD as YAML: {0}")]
pub struct CrdError(String);

/// The `DeletionCostPolicy` CRD as one YAML document (what `deletion-cost crd`
/// prints and `deploy/crd/crd.yaml` holds).
pub fn crd_yaml() -> Result<String, CrdError> {
    let body =
        serde_saphyr::to_string(&DeletionCostPolicy::crd()).map_err(|e| CrdError(e.to_string()))?;
    Ok(format!("{CRD_HEADER}{body}"))
}

/// First lines of the rendered CRD: where it comes from.
pub const CRD_HEADER: &str = "# Generated from crates/core/src/policy/types.rs by `deletion-cost crd`; do not edit.\n# Regenerate: cargo run -- crd > deploy/crd/crd.yaml\n";
