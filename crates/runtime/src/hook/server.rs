//! The hook's listener: its own accept loop so the time to read request
//! headers is bounded (slow clients), the number of open connections is
//! capped, and TLS is the default (plain HTTP only when asked).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::error::HookError;
use super::handler::{handle, HookState};
use super::{tls, HookConfig, HookTls};
use crate::engine::Engine;

/// Why the hook's listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address cannot be bound.
    #[error("hook listener on {addr}: {message}")]
    Bind {
        /// Listen address.
        addr: SocketAddr,
        /// What failed.
        message: String,
    },
    /// The certificate files cannot be used.
    #[error("{0}")]
    Tls(String),
}

/// Open connections at most; more are closed at once.
const MAX_CONNECTIONS: usize = 256;

fn json_response(status: u16, body: &serde_json::Value, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (code, body.to_string()).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

fn error_response(st: &HookState, err: &HookError) -> Response {
    st.engine.metrics().hook_request(err.outcome());
    json_response(err.status(), &err.body(), err.retry_after())
}

async fn prescale(State(st): State<Arc<HookState>>, headers: HeaderMap, body: Body) -> Response {
    match handle(&st, &headers, body).await {
        Ok(answer) => match serde_json::to_value(&answer) {
            Ok(v) => {
                st.engine.metrics().hook_request("ok");
                json_response(200, &v, None)
            }
            Err(e) => error_response(
                &st,
                &HookError::Internal(format!("encoding the answer: {e}")),
            ),
        },
        Err(err) => {
            tracing::info!(status = err.status(), error = %err, "prescale refused");
            error_response(&st, &err)
        }
    }
}

/// The scale-in admission webhook: the API server's AdmissionReview in,
/// an allowing AdmissionReview out (see [`super::admission`]).
async fn admit_scale_in(State(st): State<Arc<HookState>>, body: axum::body::Bytes) -> Response {
    let review = super::admission::admit(&st, &body).await;
    match serde_json::to_value(&review) {
        Ok(v) => json_response(200, &v, None),
        Err(e) => error_response(
            &st,
            &HookError::Internal(format!("encoding the admission answer: {e}")),
        ),
    }
}

fn router(state: Arc<HookState>) -> axum::Router {
    let not_allowed = {
        let st = state.clone();
        move || {
            let st = st.clone();
            async move { error_response(&st, &HookError::NoRoute("use POST /v1/prescale".into())) }
        }
    };
    let no_route = {
        let st = state.clone();
        move || {
            let st = st.clone();
            async move {
                error_response(
                    &st,
                    &HookError::NoRoute("unknown path; the hook serves POST /v1/prescale".into()),
                )
            }
        }
    };
    axum::Router::new()
        .route("/v1/prescale", post(prescale).fallback(not_allowed))
        .route("/v1/admit-scale-in", post(admit_scale_in))
        .fallback(no_route)
        .with_state(state)
}

/// Binds the hook listener and serves `POST /v1/prescale` until `shutdown`:
/// requests plan and write through `engine`, and call the API server
/// (TokenReview, SubjectAccessReview, the scale) with `client`.
pub async fn serve(
    addr: SocketAddr,
    config: HookConfig,
    client: kube::Client,
    engine: Arc<Engine>,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Bind {
            addr,
            message: e.to_string(),
        })?;
    // with a self-issued certificate the accept loop starts once it is
    // ready; the listener is bound already, so callers wait in its queue
    let (mut tls, mut self_issued) = (None, None);
    match &config.tls {
        HookTls::Files(files) => {
            tls = Some(tls::acceptor_from_files(&files.cert, &files.key).map_err(ServeError::Tls)?);
        }
        HookTls::SelfIssued { service, namespace } => {
            let namespace = namespace
                .clone()
                .unwrap_or_else(|| engine.leadership().lease().namespace.clone());
            self_issued = Some((client.clone(), service.clone(), namespace));
        }
        HookTls::PlainHttp => {
            tracing::warn!(%addr, "the hook serves plain HTTP (--hook-insecure-http): callers' bearer tokens travel in clear text");
        }
    }
    let read_timeout = config.read_timeout;
    let webhook_ca = config.webhook_ca;
    if webhook_ca && self_issued.is_none() {
        tracing::warn!("--scale-webhook-ca keeps the caBundle only with the self-issued hook certificate; with --hook-tls-cert, whoever issues it fills the caBundle (cert-manager's CA injector)");
    }
    let app = router(Arc::new(HookState::new(engine, client, config)));
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        if let Some((client, service, namespace)) = self_issued {
            let Some(issued) =
                tls::self_issued(&client, &service, &namespace, shutdown.clone()).await
            else {
                return;
            };
            tls = Some(issued.acceptor.clone());
            if webhook_ca {
                tokio::spawn(super::webhook_ca::keep_current(
                    client.clone(),
                    service.clone(),
                    namespace.clone(),
                    issued.ca_cert().to_string(),
                    shutdown.clone(),
                ));
            }
            tokio::spawn(issued.renew(shutdown.clone()));
        }
        tracing::info!(%addr, tls = tls.is_some(), "serving the pre-scale-down hook (POST /v1/prescale)");
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "hook accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "hook: too many open connections, closing a new one");
                continue;
            };
            let (app, tls) = (app.clone(), tls.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let service = TowerToHyperService::new(app);
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(read_timeout);
                let result = match tls {
                    Some(acceptor) => {
                        match tokio::time::timeout(read_timeout, acceptor.accept(stream)).await {
                            Ok(Ok(s)) => builder.serve_connection(TokioIo::new(s), service).await,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "hook TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "hook TLS handshake timed out");
                                return;
                            }
                        }
                    }
                    None => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "hook connection ended");
                }
            });
        }
    }))
}
