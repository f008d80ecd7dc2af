//! deletion-cost-operator's pure core: plain data in, decisions out. The
//! ReplicaSet controller's deletion order (`comparator`), pod records
//! (`pod`, `owner`), policies (`policy`), the pure parts of the signals
//! (`signals`) and the planner (`plan`). Reading what `kubectl get` prints,
//! policy and prices files is `deletion-cost-input`'s; the plan as a page is
//! `deletion-cost-report`'s. It talks to no API
//! server and no Prometheus, starts no runtime and opens no file: the
//! shell's crates (`deletion-cost-writes`, `deletion-cost-runtime`) and the
//! CLI do.

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
    text::without_os_error(&out)
}

pub mod annotations;
pub mod comparator;
pub mod marker;
pub mod owner;
pub mod plan;
pub mod pod;
pub mod policy;
pub mod signals;
pub mod text;
