//! The `DeletionCostPolicy` CRD: types, defaults and validation.

pub mod types;

pub use types::*;
