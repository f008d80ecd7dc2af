//! Every way a hook request can fail, with its HTTP status, its metric
//! outcome and its JSON body (pure).

use serde_json::{json, Value};

/// A failed hook request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// No or an invalid bearer token.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The caller may not scale the workload.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The request is malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The body is larger than the limit.
    #[error("request body larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The client did not send the body in time.
    #[error("request body not received within {seconds}s")]
    SlowClient {
        /// The limit in seconds.
        seconds: u64,
    },
    /// Unknown path or method.
    #[error("{0}")]
    NoRoute(String),
    /// The workload does not exist or no policy manages it.
    #[error("not found: {0}")]
    NotFound(String),
    /// Another prescale for the same workload is running.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The hook runs its maximum of concurrent requests.
    #[error("busy: {limit} prescale requests already running; retry later")]
    Busy {
        /// `--hook-max-concurrent`.
        limit: usize,
    },
    /// The caller's address made more calls than its budget
    /// (`--hook-source-qps`, `--hook-source-burst`).
    #[error("too many calls from this address; retry in {seconds} s")]
    RateLimited {
        /// Seconds until it may call again.
        seconds: u64,
    },
    /// The request's time budget ran out.
    #[error("timeout after {seconds}s while {phase}")]
    Timeout {
        /// The budget.
        seconds: u64,
        /// What was being waited for.
        phase: String,
    },
    /// This replica does not hold the lease.
    #[error("not the leader; send the request to {}", .leader.as_deref().unwrap_or("the current leader (unknown)"))]
    NotLeader {
        /// The lease holder's identity (pod name), when known.
        leader: Option<String>,
    },
    /// Anything else (API server unreachable, patcher refused).
    #[error("internal error: {0}")]
    Internal(String),
}

impl HookError {
    /// HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            HookError::Unauthenticated(_) => 401,
            HookError::Forbidden(_) => 403,
            HookError::BadRequest(_) => 400,
            HookError::TooLarge { .. } => 413,
            HookError::SlowClient { .. } => 408,
            HookError::NoRoute(_) | HookError::NotFound(_) => 404,
            HookError::Conflict(_) => 409,
            HookError::Busy { .. } | HookError::RateLimited { .. } => 429,
            HookError::Timeout { .. } => 504,
            HookError::NotLeader { .. } => 503,
            HookError::Internal(_) => 500,
        }
    }

    /// Value of the `outcome` label of `deletion_cost_hook_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            HookError::Unauthenticated(_) => "unauthenticated",
            HookError::Forbidden(_) => "forbidden",
            HookError::BadRequest(_)
            | HookError::TooLarge { .. }
            | HookError::SlowClient { .. }
            | HookError::NoRoute(_) => "bad_request",
            HookError::NotFound(_) => "not_found",
            HookError::Conflict(_) => "conflict",
            HookError::Busy { .. } => "busy",
            HookError::RateLimited { .. } => "rate_limited",
            HookError::Timeout { .. } => "timeout",
            HookError::NotLeader { .. } => "not_leader",
            HookError::Internal(_) => "error",
        }
    }

    /// The JSON error body: `{"error": ..., "code": N}` (plus `leader` on 503).
    pub fn body(&self) -> Value {
        let mut body = json!({"error": self.to_string(), "code": self.status()});
        if let HookError::NotLeader { leader } = self {
            body["leader"] = json!(leader);
        }
        body
    }

    /// `Retry-After` seconds worth suggesting, if any.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            HookError::Busy { .. } | HookError::Conflict(_) => Some(1),
            HookError::RateLimited { seconds } => Some(*seconds),
            HookError::NotLeader { .. } => Some(5),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_status_and_outcome() {
        let cases = [
            (
                HookError::Unauthenticated("no token".into()),
                401,
                "unauthenticated",
            ),
            (HookError::Forbidden("x".into()), 403, "forbidden"),
            (HookError::BadRequest("x".into()), 400, "bad_request"),
            (HookError::TooLarge { limit: 65536 }, 413, "bad_request"),
            (HookError::SlowClient { seconds: 10 }, 408, "bad_request"),
            (HookError::NoRoute("x".into()), 404, "bad_request"),
            (HookError::NotFound("x".into()), 404, "not_found"),
            (HookError::Conflict("x".into()), 409, "conflict"),
            (HookError::Busy { limit: 4 }, 429, "busy"),
            (HookError::RateLimited { seconds: 2 }, 429, "rate_limited"),
            (
                HookError::Timeout {
                    seconds: 3,
                    phase: "x".into(),
                },
                504,
                "timeout",
            ),
            (HookError::NotLeader { leader: None }, 503, "not_leader"),
            (HookError::Internal("x".into()), 500, "error"),
        ];
        for (err, status, outcome) in cases {
            assert_eq!(err.status(), status, "{err}");
            assert_eq!(err.outcome(), outcome, "{err}");
            let body = err.body();
            assert_eq!(body["code"], status);
            assert_eq!(body["error"], err.to_string());
        }
    }

    #[test]
    fn not_leader_names_the_leader() {
        let err = HookError::NotLeader {
            leader: Some("deletion-cost-7f9-abc".into()),
        };
        assert_eq!(err.body()["leader"], "deletion-cost-7f9-abc");
        assert!(err.to_string().contains("deletion-cost-7f9-abc"));
        let unknown = HookError::NotLeader { leader: None }.body();
        assert!(unknown["leader"].is_null());
        assert_eq!(err.retry_after(), Some(5));
    }
}
