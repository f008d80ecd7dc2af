//! deletion-cost-operator: decides which pods a workload loses on scale-in.
//!
//! The layers are crates: the pure core (`deletion-cost-core`: the
//! comparator, pod records, policies, signals, the planner, input parsing),
//! the plan's page (`deletion-cost-report`), the write path
//! (`deletion-cost-writes`), the runtime (`deletion-cost-runtime`: the
//! engine, the operator, the hook and the scale-in webhook, metrics, the
//! Prometheus client). This package is the
//! CLI (`cli`) and the binary; it re-exports the layers under one name so a
//! test or a bench reads `deletion_cost::plan` wherever a module lives.
//!
//! Test doubles (the fake API server and the tests' shared harnesses) are not
//! part of the product: they live in the dev-only test kit, `testkit/`.

pub use deletion_cost_core::{
    annotations, comparator, error_chain, marker, owner, plan, pod, policy, signals, text, MANAGER,
    USER_AGENT,
};
pub use deletion_cost_input as input;
pub use deletion_cost_report as report;
pub use deletion_cost_runtime::{engine, hook, metrics, operator, prometheus};
pub use deletion_cost_writes as writes;

pub mod cli;
