//! The one API call the patcher makes, behind a trait so the patcher runs
//! against a fake in tests; and the kube implementation with its error
//! classification.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::core::Status;
use kube::{Api, Client};
use serde_json::Value;

/// Field manager recorded on every write (visible in `managedFields`).
pub const FIELD_MANAGER: &str = crate::MANAGER;

/// Why a write did not land, classified by what the patcher does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// 404, or the pod's UID is not the one sent (409 on a failed
    /// precondition, 422 "immutable" on a merge patch): the pod we meant is
    /// gone, replaced by a namesake. Done.
    #[error("pod is gone")]
    Gone,
    /// 429: the API server asks us to slow down (retry after the delay).
    #[error("too many requests (retry after {retry_after:?})")]
    TooManyRequests {
        /// The server's `retryAfterSeconds`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// 409 other than a UID precondition: retried with backoff.
    #[error("conflict: {message}")]
    Conflict {
        /// The server's message.
        message: String,
    },
    /// 5xx: retried with backoff.
    #[error("server error {code}: {message}")]
    Server {
        /// HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// No answer within the write timeout: retried with backoff.
    #[error("timed out")]
    Timeout,
    /// Connection, TLS, auth-refresh or response-decoding trouble: retried
    /// with backoff (a merge patch is idempotent, so resending is safe).
    #[error("transport error: {message}")]
    Transport {
        /// What went wrong.
        message: String,
    },
    /// 401 or 403: retried with backoff, since a restarted API server
    /// answers so for a moment while its authenticator and authorizer catch
    /// up; one that persists past the retry bound fails and is reported.
    #[error("refused ({code}): {message}")]
    Unauthorized {
        /// HTTP status code (401 or 403).
        code: u16,
        /// The server's message.
        message: String,
    },
    /// Not sent: the leadership term ended (or is not confirmed) before the
    /// write could start. Queued again for the next term; not an attempt.
    #[error("not sent: outside this replica's leadership term")]
    OutsideTerm,
    /// Any other 4xx (422 invalid, ...) or a request that cannot be built:
    /// permanent, reported and not retried.
    #[error("rejected ({code}): {message}")]
    Rejected {
        /// HTTP status code (0 when the request was never sent).
        code: u16,
        /// The server's message.
        message: String,
    },
}

impl WriteError {
    /// Whether the patcher should try this write again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            WriteError::TooManyRequests { .. }
                | WriteError::Conflict { .. }
                | WriteError::Server { .. }
                | WriteError::Timeout
                | WriteError::Transport { .. }
                | WriteError::Unauthorized { .. }
                | WriteError::OutsideTerm
        )
    }

    /// Short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            WriteError::Gone => "gone",
            WriteError::TooManyRequests { .. } => "too_many_requests",
            WriteError::Conflict { .. } => "conflict",
            WriteError::Server { .. } => "server_error",
            WriteError::Timeout => "timeout",
            WriteError::Transport { .. } => "transport",
            WriteError::Unauthorized { .. } => "unauthorized",
            WriteError::OutsideTerm => "outside_term",
            WriteError::Rejected { .. } => "rejected",
        }
    }
}

/// Writes one merge patch to one pod.
///
/// Implementations only make the call and classify its failure; retries,
/// rate limits and timeouts are the patcher's job.
pub trait PodWriter: Send + Sync + 'static {
    /// Apply `body` as a JSON merge patch to pod `namespace/name`.
    fn patch(
        &self,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;
}

/// The production writer: `PATCH` on the pod's metadata through kube.
///
/// Build its `Client` from a `kube::Config` with `default_retry = false`:
/// kube's built-in retry layer would resend 429/503/504 on its own, outside
/// this operator's rate limiter; the patcher does the retrying.
#[derive(Clone)]
pub struct KubePodWriter {
    client: Client,
    params: PatchParams,
}

impl KubePodWriter {
    /// A writer using `client`, recording field manager [`FIELD_MANAGER`].
    pub fn new(client: Client) -> Self {
        KubePodWriter {
            client,
            params: PatchParams::default(),
        }
        .with_field_manager(FIELD_MANAGER)
    }

    fn with_field_manager(mut self, manager: &str) -> Self {
        self.params.field_manager = Some(manager.to_owned());
        self
    }
}

impl PodWriter for KubePodWriter {
    async fn patch(&self, namespace: &str, name: &str, body: &Value) -> Result<(), WriteError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        // patch_metadata: the answer is the pod's metadata only, not the whole pod.
        api.patch_metadata(name, &self.params, &Patch::Merge(body))
            .await
            .map(|_| ())
            .map_err(|e| classify_kube_error(&e))
    }
}

/// Default wait after a 429 that carries no `retryAfterSeconds`.
///
/// kube's error type keeps the response's `Status` body but not its headers,
/// so the `Retry-After` header itself is not visible here; the API server
/// puts the same value in `details.retryAfterSeconds` of its 429 Status.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Classify a kube client error.
pub fn classify_kube_error(err: &kube::Error) -> WriteError {
    match err {
        kube::Error::Api(status) => classify_status(status),
        kube::Error::BuildRequest(e) => WriteError::Rejected {
            code: 0,
            message: format!("cannot build request: {e}"),
        },
        kube::Error::HttpError(e) => WriteError::Rejected {
            code: 0,
            message: format!("cannot build request: {e}"),
        },
        other => WriteError::Transport {
            message: other.to_string(),
        },
    }
}

/// Classify an API `Status` by its code (pure; the kube error mapping uses it).
pub fn classify_status(status: &Status) -> WriteError {
    let message = status.message.clone();
    match status.code {
        404 => WriteError::Gone,
        // A failed UID precondition means the pod was replaced by a namesake.
        409 if message.contains("UID in precondition") => WriteError::Gone,
        409 => WriteError::Conflict { message },
        // A merge patch has no preconditions: the server merges our
        // `metadata.uid` into the live pod and refuses the changed UID.
        422 if uid_changed(status) => WriteError::Gone,
        429 => WriteError::TooManyRequests {
            retry_after: status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
        },
        // 408 Request Timeout is the server giving up on us: retry.
        408 => WriteError::Timeout,
        code @ (401 | 403) => WriteError::Unauthorized { code, message },
        code @ 500..=599 => WriteError::Server { code, message },
        code => WriteError::Rejected { code, message },
    }
}

/// Whether a 422 says `metadata.uid` differs from the live object's.
fn uid_changed(status: &Status) -> bool {
    const FIELD: &str = "metadata.uid";
    let immutable = |m: &str| m.contains("immutable");
    let by_cause = status.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| c.field == FIELD && (c.reason == "FieldValueInvalid" || immutable(&c.message)))
    });
    by_cause
        || (status.message.contains(&format!("{FIELD}: Invalid value"))
            && immutable(&status.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, message: &str) -> Status {
        Status::failure(message, "").with_code(code)
    }

    #[test]
    fn refusals_of_a_restarting_server_are_retried() {
        for code in [401, 403] {
            let e = classify_status(&status(code, "pods \"p\" is forbidden"));
            assert!(
                matches!(e, WriteError::Unauthorized { .. }),
                "{code}: {e:?}"
            );
            assert!(e.is_retryable(), "{code}");
        }
        assert!(!classify_status(&status(422, "invalid")).is_retryable());
    }

    #[test]
    fn not_found_is_gone() {
        assert_eq!(
            classify_status(&status(404, "pods \"x\" not found")),
            WriteError::Gone
        );
    }

    #[test]
    fn uid_precondition_is_gone_other_conflicts_retry() {
        let e = classify_status(&status(
            409,
            "Precondition failed: UID in precondition: a, UID in object meta: b",
        ));
        assert_eq!(e, WriteError::Gone);
        let e = classify_status(&status(409, "the object has been modified"));
        assert!(matches!(e, WriteError::Conflict { .. }));
        assert!(e.is_retryable());
    }

    /// A merge patch carrying a stale UID, as a real API server answers it.
    fn uid_immutable(with_causes: bool) -> Status {
        let mut s = Status::failure(
            "Pod \"web-1\" is invalid: metadata.uid: Invalid value: \"u-old\": field is immutable",
            "Invalid",
        )
        .with_code(422);
        if with_causes {
            s.details = Some(StatusDetails {
                name: "web-1".into(),
                group: String::new(),
                kind: "Pod".into(),
                uid: String::new(),
                causes: vec![StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: "Invalid value: \"u-old\": field is immutable".into(),
                    field: "metadata.uid".into(),
                }],
                retry_after_seconds: 0,
            });
        }
        s
    }

    #[test]
    fn uid_immutable_on_a_merge_patch_is_gone() {
        assert_eq!(classify_status(&uid_immutable(true)), WriteError::Gone);
        // the message alone says it too (a proxy may strip details)
        assert_eq!(classify_status(&uid_immutable(false)), WriteError::Gone);
        // other invalid fields stay a permanent refusal
        let mut other = uid_immutable(true);
        other.message = "Pod \"web-1\" is invalid: metadata.annotations: Invalid value".into();
        if let Some(d) = other.details.as_mut() {
            d.causes[0].field = "metadata.annotations".into();
            d.causes[0].message = "Invalid value: \"x\": name part must be 63 characters".into();
        }
        assert!(matches!(
            classify_status(&other),
            WriteError::Rejected { code: 422, .. }
        ));
    }

    #[test]
    fn too_many_requests_reads_retry_after_seconds() {
        let mut s = status(429, "too many requests");
        s.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 7,
        });
        assert_eq!(
            classify_status(&s),
            WriteError::TooManyRequests {
                retry_after: Some(Duration::from_secs(7))
            }
        );
        assert_eq!(
            classify_status(&status(429, "slow down")),
            WriteError::TooManyRequests { retry_after: None }
        );
    }

    #[test]
    fn server_errors_retry_client_errors_do_not() {
        for code in [500, 502, 503, 504] {
            let e = classify_status(&status(code, "boom"));
            assert!(matches!(e, WriteError::Server { .. }), "{code}");
            assert!(e.is_retryable());
        }
        assert_eq!(
            classify_status(&status(408, "timeout")),
            WriteError::Timeout
        );
        for code in [400, 405, 422] {
            let e = classify_status(&status(code, "no"));
            assert_eq!(
                e,
                WriteError::Rejected {
                    code,
                    message: "no".into()
                }
            );
            assert!(!e.is_retryable());
        }
        assert!(!WriteError::Gone.is_retryable());
    }

    #[test]
    fn kube_api_error_goes_through_status_classification() {
        let err = kube::Error::Api(status(503, "unavailable").boxed());
        assert!(matches!(
            classify_kube_error(&err),
            WriteError::Server { code: 503, .. }
        ));
    }
}

#[cfg(test)]
mod kube_tests {
    use super::*;
    use kube::client::Body;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, Clone)]
    struct Seen {
        method: String,
        uri: String,
        content_type: String,
        body: Value,
    }

    /// A kube client whose every request gets `status` and `reply`.
    fn client(status: u16, reply: Value) -> (Client, Arc<Mutex<Vec<Seen>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let service = tower::service_fn(move |req: http::Request<Body>| {
            let log = Arc::clone(&log);
            let reply = reply.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect_bytes().await?;
                log.lock().unwrap().push(Seen {
                    method: parts.method.to_string(),
                    uri: parts.uri.to_string(),
                    content_type: parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                });
                let resp = http::Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()))?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(resp)
            }
        });
        (Client::new(service, "default"), seen)
    }

    fn failure(code: u16, reason: &str, message: &str, retry_after: u32) -> Value {
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code,
            "details": {"retryAfterSeconds": retry_after},
        })
    }

    #[tokio::test]
    async fn sends_a_metadata_merge_patch_with_field_manager() {
        let meta = serde_json::json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "web-1", "namespace": "shop"},
        });
        let (client, seen) = client(200, meta);
        let writer = KubePodWriter::new(client);
        let body = serde_json::json!({"metadata": {"annotations": {"a": "1"}}});
        writer.patch("shop", "web-1", &body).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, "PATCH");
        assert!(seen[0]
            .uri
            .starts_with("/api/v1/namespaces/shop/pods/web-1?"));
        assert!(seen[0].uri.contains("fieldManager=deletion-cost-operator"));
        assert_eq!(seen[0].content_type, "application/merge-patch+json");
        assert_eq!(seen[0].body, body);
    }

    #[tokio::test]
    async fn maps_api_failures_through_kube() {
        let cases = [
            (
                404,
                failure(404, "NotFound", "pods \"p\" not found", 0),
                WriteError::Gone,
            ),
            (
                429,
                failure(429, "TooManyRequests", "slow down", 3),
                WriteError::TooManyRequests {
                    retry_after: Some(Duration::from_secs(3)),
                },
            ),
            (
                403,
                failure(403, "Forbidden", "forbidden", 0),
                WriteError::Unauthorized {
                    code: 403,
                    message: "forbidden".into(),
                },
            ),
        ];
        // a real server's answer to a merge patch whose UID is stale
        let mut replaced = failure(
            422,
            "Invalid",
            "Pod \"p\" is invalid: metadata.uid: Invalid value: \"u-old\": field is immutable",
            0,
        );
        replaced["details"] = serde_json::json!({
            "name": "p", "kind": "Pod",
            "causes": [{"reason": "FieldValueInvalid", "field": "metadata.uid",
                        "message": "Invalid value: \"u-old\": field is immutable"}],
        });
        let cases = cases.into_iter().chain([(422, replaced, WriteError::Gone)]);
        for (code, reply, want) in cases {
            let (client, _) = client(code, reply);
            let got = KubePodWriter::new(client)
                .patch("shop", "p", &serde_json::json!({}))
                .await
                .unwrap_err();
            assert_eq!(got, want, "status {code}");
        }
        let (client, _) = client(503, failure(503, "ServiceUnavailable", "down", 0));
        let got = KubePodWriter::new(client)
            .patch("shop", "p", &serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(got.is_retryable(), "{got:?}");
    }
}
