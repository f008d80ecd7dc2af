//! A kube client whose pod watch can be held: while held, the frames of pod
//! watch responses wait (in order) before they reach the operator, so its
//! pod cache lags the fake API server for as long as the test wants.

use std::task::{Context, Poll};

use deletion_cost_testkit::fake_api::FakeApi;
use futures::future::BoxFuture;
use futures::StreamExt;
use http::{Request, Response};
use kube::client::{Body as KubeBody, ClientBuilder, DynBody};
use tokio::sync::watch;

use super::operator::client_config;

/// Holds and releases the pod watch of the client it came with.
#[derive(Clone)]
pub struct PodWatchHold(watch::Sender<bool>);

impl PodWatchHold {
    /// From now on, pod watch frames wait.
    pub fn hold(&self) {
        self.0.send_replace(true);
    }

    /// The waiting frames go on, in order, and new ones pass.
    pub fn release(&self) {
        self.0.send_replace(false);
    }
}

#[derive(Clone)]
struct HoldPodWatch<S> {
    inner: S,
    held: watch::Receiver<bool>,
}

impl<S> tower::Service<Request<KubeBody>> for HoldPodWatch<S>
where
    S: tower::Service<Request<KubeBody>, Response = Response<Box<DynBody>>> + Send,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<KubeBody>) -> Self::Future {
        let pod_watch = req.uri().path().ends_with("/pods")
            && req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let held = self.held.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            if !pod_watch {
                return Ok(resp);
            }
            Ok(resp.map(|body| {
                let frames = http_body_util::BodyStream::new(body).then(move |frame| {
                    let mut held = held.clone();
                    async move {
                        let _ = held.wait_for(|h| !h).await;
                        frame
                    }
                });
                let body: Box<DynBody> =
                    Box::new(http_body_util::StreamBody::new(Box::pin(frames)));
                body
            }))
        })
    }
}

/// A client of `fake` (as [`client_config`]) whose pod watch the returned
/// handle holds and releases; it starts released.
pub fn held_pod_watch(fake: &FakeApi) -> (kube::Client, PodWatchHold) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (tx, held) = watch::channel(false);
    let layer = tower::layer::layer_fn(move |inner| HoldPodWatch {
        inner,
        held: held.clone(),
    });
    let client = match ClientBuilder::try_from(client_config(fake)) {
        Ok(builder) => builder.with_layer(&layer).build(),
        Err(e) => panic!("a kube client for the fake API server: {e}"),
    };
    (client, PodWatchHold(tx))
}
