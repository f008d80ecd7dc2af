//! The `DeletionCostPolicy` CRD: types, defaults and validation. Policy
//! files are read, and the CRD rendered as YAML, by `deletion-cost-input`.

pub mod overlap;
pub mod selector;
pub mod strict;
pub mod types;
pub mod validate;

pub use overlap::{overlap_order, wins_over};
pub use types::*;
pub use validate::{
    parse_duration, validate, CostRanks, ValidatedPolicy, ValidatedSignal, ValidationError,
    ValidationErrors,
};
