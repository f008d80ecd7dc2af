//! What a write changes (the `kind` label of the write metrics) and why the
//! write budget refused one: the types the patcher, its counters and the
//! budgeted client share.

use http::Method;

/// What a write changes, as the `kind` label of
/// `deletion_cost_api_writes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A pod's deletion cost (the patcher's own writes), or the leader label.
    Pods,
    /// A policy's status subresource.
    Status,
    /// An Event (`events.k8s.io` or core).
    Events,
    /// Anything else (the finalizer on a policy).
    Other,
}

impl WriteKind {
    /// Every kind, in the order the metrics list them.
    pub const ALL: [WriteKind; 4] = [
        WriteKind::Pods,
        WriteKind::Status,
        WriteKind::Events,
        WriteKind::Other,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            WriteKind::Pods => "pods",
            WriteKind::Status => "status",
            WriteKind::Events => "events",
            WriteKind::Other => "other",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            WriteKind::Pods => 0,
            WriteKind::Status => 1,
            WriteKind::Events => 2,
            WriteKind::Other => 3,
        }
    }

    /// The kind of a request by its method and path; `None` for a read
    /// (GET, HEAD, OPTIONS, which includes watches).
    pub fn of_request(method: &Method, path: &str) -> Option<WriteKind> {
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or
        // /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME[/SUB]]
        let rest = match segments.iter().position(|s| *s == "namespaces") {
            Some(i) if segments.len() > i + 2 => &segments[i + 2..],
            _ => return Some(WriteKind::Other),
        };
        let core = segments.first() == Some(&"api");
        Some(match rest {
            ["events", ..] => WriteKind::Events,
            [_, _, "status"] => WriteKind::Status,
            ["pods", _] if core => WriteKind::Pods,
            _ => WriteKind::Other,
        })
    }
}

/// Why a write got no permit. The write was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// No leadership term: only the leader writes.
    #[error("{kind} write not sent: this replica does not lead (only the leader writes)")]
    NotLeading {
        /// What the write would have changed.
        kind: &'static str,
    },
    /// The term's patcher stopped (the term ended, or shutdown) before the
    /// write's turn came.
    #[error(
        "{kind} write not sent: the leadership term ended before its turn in the write budget"
    )]
    TermEnded {
        /// What the write would have changed.
        kind: &'static str,
    },
}
