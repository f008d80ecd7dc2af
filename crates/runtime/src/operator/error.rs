//! The operator shell's errors: one enum, each variant with a label for
//! `deletion_cost_reconciles_total{result}`.

use std::net::SocketAddr;

use kube::runtime::finalizer::Error as FinalizerError;

use crate::engine::RoundError;
use crate::hook::ServeError;
use crate::writes::SubmitError;

/// Errors of the operator shell.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// Building the Kubernetes client failed.
    #[error("kubernetes client: {0}")]
    Client(String),
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// kube-runtime's finalizer failed (adding or removing it, or the apply or
    /// cleanup it wraps).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<FinalizerError<OperatorError>>),
    /// The patcher refused a batch (queue full, shut down).
    #[error("patch queue: {0}")]
    Submit(#[from] SubmitError),
    /// The planner failed (a bug: it panicked on the blocking pool).
    #[error(transparent)]
    Round(#[from] RoundError),
    /// A flag has a bad value.
    #[error("{0}")]
    Config(String),
    /// A listener (the metrics/health server, the hook) failed.
    #[error("{listener} on {addr}: {message}")]
    Serve {
        /// Which listener: `metrics server`, `hook listener`.
        listener: &'static str,
        /// Listen address.
        addr: SocketAddr,
        /// What failed.
        message: String,
    },
    /// Leader election failed.
    #[error("leader election: {0}")]
    Lease(String),
    /// Removing a deleted policy's costs did not finish; retried.
    #[error("cleanup of {policy}: {remaining} pods still carry its cost")]
    CleanupIncomplete {
        /// namespace/name.
        policy: String,
        /// Pods not yet cleaned.
        remaining: usize,
    },
}

/// The hook's listener failures read as before the hook had its own error:
/// a bind failure as `Serve`, unusable certificate files as `Config` (bad
/// input, exit code 2).
impl From<ServeError> for OperatorError {
    fn from(e: ServeError) -> Self {
        match e {
            ServeError::Bind { addr, message } => OperatorError::Serve {
                listener: "hook listener",
                addr,
                message,
            },
            ServeError::Tls(message) => OperatorError::Config(message),
        }
    }
}

impl OperatorError {
    /// Label for the reconcile-errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            OperatorError::Client(_) => "client",
            OperatorError::Kube(_) => "api",
            OperatorError::Finalizer(e) => match &**e {
                FinalizerError::ApplyFailed(inner) | FinalizerError::CleanupFailed(inner) => {
                    inner.metric_label()
                }
                FinalizerError::AddFinalizer(_) | FinalizerError::RemoveFinalizer(_) => {
                    "finalizer_api"
                }
                _ => "finalizer",
            },
            OperatorError::Submit(_) => "queue",
            OperatorError::Round(_) => "planning",
            OperatorError::Config(_) => "config",
            OperatorError::Serve { .. } => "serve",
            OperatorError::Lease(_) => "lease",
            OperatorError::CleanupIncomplete { .. } => "cleanup",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_errors_keep_their_source_and_kind() {
        let inner = OperatorError::CleanupIncomplete {
            policy: "shop/web".into(),
            remaining: 3,
        };
        let err = OperatorError::Finalizer(Box::new(FinalizerError::CleanupFailed(inner)));
        assert_eq!(err.metric_label(), "cleanup");
        let chain = crate::error_chain(&err);
        assert!(chain.contains("3 pods still carry its cost"), "{chain}");
    }
}
