//! Test doubles shared by the integration tests and the load-harness benches.
//!
//! Always compiled (so benches can use it without a feature flag) but hidden
//! from the documentation: nothing here is part of the operator's behaviour.

pub mod fake_api;
