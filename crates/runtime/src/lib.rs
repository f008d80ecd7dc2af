//! deletion-cost-operator's runtime: the shell around the pure core. The
//! engine (`engine`: rounds, scale-ins, cleanup, the caches), the
//! operator's wiring and reconcile (`operator`), the pre-scale-down hook
//! and the scale-in webhook (`hook`), the metrics (`metrics`) and the
//! Prometheus client (`prometheus`). It builds on `deletion-cost-core`,
//! `deletion-cost-input` and `deletion-cost-writes`, re-exported here under the names its modules
//! use; neither of those can use anything of this crate.

pub use deletion_cost_core::{
    annotations, comparator, error_chain, marker, owner, plan, pod, policy, signals, MANAGER,
    USER_AGENT,
};
pub use deletion_cost_input as input;
pub use deletion_cost_report as report;
pub use deletion_cost_writes as writes;

pub mod engine;
pub mod hook;
pub mod metrics;
pub mod operator;
pub mod prometheus;
