//! deletion-cost-operator: decides which pods a workload loses on scale-in.
//!
//! The pure core (`comparator`, `policy`, `signals`, `plan`) takes plain data
//! and returns decisions; the shell (`apply`, `controller`, `hook`, `cli`)
//! talks to the API server and Prometheus.

pub mod apply;
pub mod cli;
pub mod comparator;
pub mod controller;
pub mod hook;
pub mod input;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod signals;
#[doc(hidden)]
pub mod testing;
