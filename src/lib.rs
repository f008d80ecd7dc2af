//! deletion-cost-operator: decides which pods a workload loses on scale-in.
//!
//! The pure core (`annotations`, `comparator`, `policy`, `signals`, `plan`,
//! `report`) takes plain data and returns decisions; the shell (`apply`, `operator`, `hook`, `prometheus`,
//! `metrics`, `cli`) talks to the API server and Prometheus.
//!
//! Test doubles (the fake API server and the tests' shared harnesses) are not
//! part of this crate: they live in the dev-only test kit, `testkit/`.

/// `User-Agent` of every request the binary sends (API server, Prometheus,
/// the hook), so audit logs and API Priority and Fairness can tell who calls.
pub const USER_AGENT: &str = concat!("deletion-cost/", env!("CARGO_PKG_VERSION"));

/// Name of the operator in the API server: field manager of its writes,
/// reporter of its Events, prefix of its lease identity.
pub const MANAGER: &str = "deletion-cost-operator";

/// An error with its sources, `: `-joined, outermost first (a cause already
/// in the text is not repeated): reqwest, kube and rustls hide the useful
/// part ("connection refused", "UnknownIssuer") a level or two down.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    input::without_os_error(&out)
}

pub mod annotations;
pub mod cli;
pub mod comparator;
pub mod engine;
pub mod hook;
pub mod input;
pub mod metrics;
pub mod operator;
pub mod owner;
pub mod plan;
pub mod pod;
pub mod policy;
pub mod prometheus;
pub mod report;
pub mod signals;
pub mod writes;
