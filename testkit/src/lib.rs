//! deletion-cost-operator's test kit: the test doubles its integration tests
//! share. Dev-only: the product depends on it under `[dev-dependencies]`, and
//! nothing here depends on the product.
//!
//! - [`fake_api`]: an in-process fake Kubernetes API server behind a real
//!   `kube::Client` (list/watch, patches, faults, a request log).

pub mod fake_api;
