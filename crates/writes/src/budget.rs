//! One budget for every write: the patcher's operator-wide limiter
//! (`--qps`/`--burst`) also grants the writes that are not pod patches
//! (policy status, Events, the finalizer), so together they stay within it,
//! as client-go's one limiter covers every request of a component.
//!
//! [`budgeted_client`] wraps a kube `Client`: each write it sends first
//! waits for a [`Permit`](super::Permit) of the current leadership term's
//! patcher (reads go straight through), and reports its outcome back for
//! the metrics and, on a 429, the pause every write honours. The patcher grants permits after the
//! pod writes of a scale-in (`Priority::Urgent`) and alternately with
//! background pod writes, so neither starves the other.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::client::Body;
use kube::core::Status;
use kube::Client;

use super::kind::{BudgetError, WriteKind};
use super::patcher::Patcher;
use super::writer::{classify_status, WriteError};

/// The outcome of an HTTP answer to a write: `Ok` for 2xx, else the
/// classified error (a 429's `Retry-After` header read as its delay).
pub fn outcome_of(response: &Response<Body>) -> Result<(), WriteError> {
    let code = response.status();
    if code.is_success() {
        return Ok(());
    }
    let mut status = Status::failure("", "").with_code(code.as_u16());
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok());
    if let Some(seconds) = retry_after {
        status.details = Some(kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: seconds,
        });
    }
    Err(classify_status(&status))
}

/// Where a budgeted client finds the patcher of the current term (none
/// while following).
pub type TermSource = Arc<dyn Fn() -> Option<Patcher> + Send + Sync>;

/// A kube `Client` whose every write waits for a [`Permit`](super::Permit) of the patcher
/// `term` hands out, and is counted by kind and outcome; reads go straight
/// to `client`. Without a term the write is refused
/// ([`BudgetError::NotLeading`]), never sent unbudgeted. Call within a tokio
/// runtime (kube's client buffers its requests in a task).
pub fn budgeted_client(client: Client, term: TermSource) -> Client {
    let namespace = client.default_namespace().to_owned();
    Client::new(
        Budgeted {
            inner: client,
            term,
        },
        namespace,
    )
}

#[derive(Clone)]
struct Budgeted {
    inner: Client,
    term: TermSource,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Request<Body>> for Budgeted {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // the inner client buffers; waiting happens per request, in `call`
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.send(req).await })
    }
}

impl Budgeted {
    async fn send(self, req: Request<Body>) -> Result<Response<Body>, BoxError> {
        let Some(kind) = WriteKind::of_request(req.method(), req.uri().path()) else {
            return Ok(self.inner.send(req).await?);
        };
        // only the receiver is held while waiting, not the patcher: a term
        // that ends drops its queue and the wait ends with it
        let wait = match (self.term)() {
            Some(patcher) => patcher.permit(kind)?,
            None => {
                return Err(BudgetError::NotLeading { kind: kind.label() }.into());
            }
        };
        let permit = wait.await?;
        match self.inner.send(req).await {
            Ok(response) => {
                permit.finish(&outcome_of(&response));
                Ok(response)
            }
            Err(e) => {
                permit.finish(&Err(WriteError::Transport {
                    message: e.to_string(),
                }));
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::time::Duration;

    fn kind(method: Method, path: &str) -> Option<WriteKind> {
        WriteKind::of_request(&method, path)
    }

    #[test]
    fn requests_are_classified_by_what_they_write() {
        use WriteKind::*;
        let policy = "/apis/deletioncost.dev/v1alpha1/namespaces/shop/deletioncostpolicies/web";
        assert_eq!(
            kind(Method::PATCH, &format!("{policy}/status")),
            Some(Status)
        );
        assert_eq!(
            kind(Method::PATCH, &format!("{policy}?fieldManager=x")),
            Some(Other)
        );
        assert_eq!(kind(Method::GET, &format!("{policy}/status")), None);
        assert_eq!(
            kind(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/shop/events"
            ),
            Some(Events)
        );
        assert_eq!(
            kind(
                Method::PATCH,
                "/apis/events.k8s.io/v1/namespaces/shop/events/web.1"
            ),
            Some(Events)
        );
        assert_eq!(
            kind(Method::POST, "/api/v1/namespaces/shop/events"),
            Some(Events)
        );
        assert_eq!(
            kind(Method::PATCH, "/api/v1/namespaces/shop/pods/web-1"),
            Some(Pods)
        );
        assert_eq!(
            kind(Method::PATCH, "/api/v1/namespaces/shop/pods/web-1/status"),
            Some(Status)
        );
        assert_eq!(
            kind(
                Method::PUT,
                "/apis/apps/v1/namespaces/shop/deployments/web/scale"
            ),
            Some(Other)
        );
        assert_eq!(kind(Method::DELETE, "/api/v1/nodes/n1"), Some(Other));
        assert_eq!(kind(Method::GET, "/api/v1/pods?watch=true"), None);
    }

    fn response(code: u16, retry_after: Option<&str>) -> Response<Body> {
        let mut b = Response::builder().status(code);
        if let Some(v) = retry_after {
            b = b.header(http::header::RETRY_AFTER, v);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn answers_are_classified_as_the_patcher_classifies_its_own() {
        assert_eq!(outcome_of(&response(201, None)), Ok(()));
        assert_eq!(
            outcome_of(&response(429, Some("3"))),
            Err(WriteError::TooManyRequests {
                retry_after: Some(Duration::from_secs(3))
            })
        );
        assert_eq!(
            outcome_of(&response(429, None)),
            Err(WriteError::TooManyRequests { retry_after: None })
        );
        assert!(matches!(
            outcome_of(&response(503, None)),
            Err(WriteError::Server { code: 503, .. })
        ));
        assert!(matches!(
            outcome_of(&response(403, None)),
            Err(WriteError::Unauthorized { code: 403, .. })
        ));
        assert_eq!(outcome_of(&response(404, None)), Err(WriteError::Gone));
    }
}
