//! deletion-cost-operator's test kit: the test doubles and harnesses its
//! integration tests share. Dev-only: the product depends on it under
//! `[dev-dependencies]`, and nothing here depends on the product.
//!
//! - [`fake_api`]: an in-process fake Kubernetes API server behind a real
//!   `kube::Client` (list/watch, patches, faults, a request log);
//! - [`prometheus`]: Debian's real Prometheus, backfilled and started on loopback;
//! - [`eventually`]: the one way a test waits for a condition;
//! - [`shuffle`]: a seeded shuffle, for input-order tests;
//! - [`run_fed`]: a command with stdin fed without end;
//! - [`free_addr`], [`free_port`], [`http_get`], [`http_request`]: loopback
//!   ports and a bare HTTP/1.1 client for the operator's own listeners.
//!
//! The harness that runs the operator in-process needs the product, so it
//! stays with the tests (`tests/support/operator.rs`).

pub mod fake_api;
mod feed;
mod net;
pub mod prometheus;
mod shuffle;
mod wait;

pub use feed::run_fed;
pub use net::{free_addr, free_port, http_get, http_request, read_request};
pub use shuffle::shuffle;
pub use wait::{eventually, wait_until};
