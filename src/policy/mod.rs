//! The `DeletionCostPolicy` CRD: types, defaults and validation.

pub mod crd;
pub mod selector;
pub mod types;
pub mod validate;

pub use crd::crd_yaml;
pub use types::*;
pub use validate::{validate, ValidatedPolicy, ValidatedSignal, ValidationError, ValidationErrors};
