//! The CustomResourceDefinition generated from the Rust types.

use kube::CustomResourceExt;

use super::DeletionCostPolicy;

/// Why the CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("rendering the DeletionCostPolicy CRD as YAML: {0}")]
pub struct CrdError(String);

/// The `DeletionCostPolicy` CRD as one YAML document (what `deletion-cost crd`
/// prints and `deploy/crd.yaml` holds).
pub fn crd_yaml() -> Result<String, CrdError> {
    serde_saphyr::to_string(&DeletionCostPolicy::crd()).map_err(|e| CrdError(e.to_string()))
}
