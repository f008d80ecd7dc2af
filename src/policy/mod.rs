//! The `DeletionCostPolicy` CRD: types, defaults and validation.

pub mod selector;
pub mod types;

pub use types::*;
