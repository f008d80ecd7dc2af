//! The `DeletionCostPolicy` CRD: types, defaults and validation.

pub mod crd;
pub mod file;
pub mod overlap;
pub mod selector;
pub mod strict;
pub mod types;
pub mod validate;

pub use crd::crd_yaml;
pub use file::{parse_policies, PolicyFileError, PolicyObject};
pub use overlap::{overlap_order, wins_over};
pub use types::*;
pub use validate::{
    parse_duration, validate, CostRanks, ValidatedPolicy, ValidatedSignal, ValidationError,
    ValidationErrors,
};
