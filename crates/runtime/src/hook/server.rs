//! The hook's listeners: their own accept loop so the time to read request
//! headers is bounded (slow clients), the number of open connections is
//! capped, and TLS is the default (plain HTTP only when asked). The
//! pre-scale-down hook and the scale-in webhook share one listener, or the
//! webhook has its own (`--scale-webhook-addr`). Every call is counted
//! against its source address's budget ([`PerSource`]); the webhook answers
//! only callers with a client certificate from `--scale-webhook-client-ca`
//! when that is set.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Extension;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::DynamicObject;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::error::HookError;
use super::handler::{handle, HookState};
use super::limit::PerSource;
use super::tls::ClientAuth;
use super::{cert, tls, HookConfig, HookTls, WebhookClients};
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

/// Open connections at most (both listeners); more are closed at once.
const MAX_CONNECTIONS: usize = 256;

/// How often the budgets of sources that stopped calling are forgotten.
const FORGET_IDLE_EVERY: Duration = Duration::from_secs(60);

/// Who is on the other end of a connection: its address, and the names of
/// the TLS client certificate it presented (verified against
/// `--scale-webhook-client-ca` by the handshake).
#[derive(Debug, Clone)]
struct Caller {
    addr: SocketAddr,
    certificate: Option<Arc<Vec<String>>>,
}

/// What the handlers share: the hook's state and the per-source budgets.
struct Shared {
    hook: HookState,
    per_source: Option<PerSource>,
}

type AppState = Arc<Shared>;

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

/// Takes a call from the caller's budget; `Err` with the seconds to wait.
fn over_budget(st: &Shared, caller: &Caller) -> Result<(), u64> {
    let Some(limits) = &st.per_source else {
        return Ok(());
    };
    limits.check(caller.addr.ip()).map_err(|wait| {
        tracing::debug!(source = %caller.addr.ip(), wait_ms = wait.as_millis() as u64, "hook: a source over its budget of calls");
        wait.as_secs_f64().ceil().max(1.0) as u64
    })
}

async fn prescale(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(seconds) = over_budget(&st, &caller) {
        return error_response(&st.hook, &HookError::RateLimited { seconds });
    }
    let st = &st.hook;
    match handle(st, &headers, body).await {
        Ok(answer) => match serde_json::to_value(&answer) {
            Ok(v) => {
                st.engine.metrics().hook_request("ok");
                json_response(200, &v, None)
            }
            Err(e) => error_response(
                st,
                &HookError::Internal(format!("encoding the answer: {e}")),
            ),
        },
        Err(err) => {
            tracing::info!(status = err.status(), error = %err, "prescale refused");
            error_response(st, &err)
        }
    }
}

/// Why the webhook refuses a caller before reading its review (pure):
/// without a verified client certificate, or with one that carries none of
/// the names asked for.
fn refuse_caller(clients: &WebhookClients, certificate: Option<&[String]>) -> Option<HookError> {
    let Some(names) = certificate else {
        return Some(HookError::Unauthenticated(
            "the scale-in webhook answers only the API server: present a TLS client certificate from the CA of --scale-webhook-client-ca".into(),
        ));
    };
    if clients.names.is_empty() || names.iter().any(|n| clients.names.contains(n)) {
        return None;
    }
    Some(HookError::Forbidden(format!(
        "the client certificate names {} (subject CN and DNS names), none of {} (--scale-webhook-client-name)",
        if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        },
        clients.names.join(", ")
    )))
}

/// An allowing answer that ran nothing (the caller is over its budget),
/// with `warning` for the API server to hand to whoever scaled in.
fn allow_untouched(body: &[u8], warning: String) -> AdmissionReview<DynamicObject> {
    let req: Result<AdmissionRequest<DynamicObject>, String> =
        serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
            .map_err(|e| format!("not an AdmissionReview: {e}"))
            .and_then(|r| r.try_into().map_err(|e| format!("{e}")));
    match req {
        Ok(req) => {
            let mut resp = AdmissionResponse::from(&req);
            resp.warnings = Some(vec![warning]);
            resp.into_review()
        }
        Err(e) => AdmissionResponse::invalid(e).into_review(),
    }
}

/// The scale-in admission webhook: the API server's AdmissionReview in,
/// an allowing AdmissionReview out (see [`super::admission`]).
async fn admit_scale_in(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let started = tokio::time::Instant::now();
    let metrics = st.hook.engine.metrics().clone();
    // the API server, known by its certificate, is not counted: it is the
    // one legitimate caller, and calls for every scale-in of the cluster
    let mut known = false;
    if let Some(clients) = &st.hook.config.webhook_clients {
        if let Some(err) = refuse_caller(clients, caller.certificate.as_deref().map(Vec::as_slice))
        {
            tracing::warn!(source = %caller.addr, status = err.status(), error = %err, "scale-in webhook: caller refused");
            metrics.scale_webhook_call(err.outcome(), started.elapsed().as_secs_f64());
            return json_response(err.status(), &err.body(), None);
        }
        known = true;
    }
    let budget = if known {
        Ok(())
    } else {
        over_budget(&st, &caller)
    };
    let review = if let Err(seconds) = budget {
        metrics.scale_webhook_call("rate_limited", started.elapsed().as_secs_f64());
        allow_untouched(
            &body,
            format!("deletion-cost: costs not made fresh for this scale-in: {} is over its budget of calls (--hook-source-qps); retry in {seconds} s", caller.addr.ip()),
        )
    } else {
        super::admission::admit(&st.hook, &body).await
    };
    match serde_json::to_value(&review) {
        Ok(v) => json_response(200, &v, None),
        Err(e) => error_response(
            &st.hook,
            &HookError::Internal(format!("encoding the admission answer: {e}")),
        ),
    }
}

/// What a listener answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routes {
    /// `/v1/prescale` and `/v1/admit-scale-in`.
    Both,
    /// `/v1/prescale` only (the webhook has its own listener).
    Prescale,
    /// `/v1/admit-scale-in` only.
    Webhook,
}

fn router(state: AppState, routes: Routes) -> axum::Router {
    let served = match routes {
        Routes::Both | Routes::Prescale => "the hook serves POST /v1/prescale",
        Routes::Webhook => "this listener serves the scale-in webhook, POST /v1/admit-scale-in",
    };
    let not_allowed = {
        let st = state.clone();
        move || {
            let st = st.clone();
            async move {
                error_response(
                    &st.hook,
                    &HookError::NoRoute("use POST /v1/prescale".into()),
                )
            }
        }
    };
    let no_route = {
        let st = state.clone();
        move || {
            let st = st.clone();
            async move {
                error_response(
                    &st.hook,
                    &HookError::NoRoute(format!("unknown path; {served}")),
                )
            }
        }
    };
    let mut app = axum::Router::new();
    if routes != Routes::Webhook {
        app = app.route("/v1/prescale", post(prescale).fallback(not_allowed));
    }
    if routes != Routes::Prescale {
        app = app.route("/v1/admit-scale-in", post(admit_scale_in));
    }
    app.fallback(no_route).with_state(state)
}

/// A bound listener, what it serves, and its TLS client rule.
struct Listener {
    socket: TcpListener,
    addr: SocketAddr,
    routes: Routes,
    app: axum::Router,
    clients: ClientAuth,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).await.map_err(|e| ServeError::Bind {
        addr,
        message: e.to_string(),
    })
}

/// Where the hook's certificate comes from once serving starts: files read
/// now, or one the operator issues itself (its client, Service and
/// namespace), or none (plain HTTP).
struct Certificate {
    resolver: Option<Arc<dyn rustls::server::ResolvesServerCert>>,
    self_issued: Option<(kube::Client, String, String)>,
}

/// Binds the hook's listener (and the scale-in webhook's, when it has its
/// own) and serves until `shutdown`: requests plan and write through
/// `engine`, and call the API server (TokenReview, SubjectAccessReview, the
/// scale) with `client`.
pub async fn serve(
    addr: SocketAddr,
    config: HookConfig,
    client: kube::Client,
    engine: Arc<Engine>,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    let hook_socket = bind(addr).await?;
    let webhook_socket = match config.webhook_addr {
        Some(webhook) => Some((bind(webhook).await?, webhook)),
        None => None,
    };
    let client_roots = webhook_client_roots(&config)?;
    // with a self-issued certificate the accept loops start once it is
    // ready; the listeners are bound already, so callers wait in their queue
    let certificate = certificate(&config, &engine, &client, addr)?;
    let read_timeout = config.read_timeout;
    let webhook_ca = config.webhook_ca;
    if webhook_ca && certificate.self_issued.is_none() {
        tracing::warn!("--scale-webhook-ca keeps the caBundle only with the self-issued hook certificate; with --hook-tls-cert, whoever issues it fills the caBundle (cert-manager's CA injector)");
    }
    let per_source = config.per_source.map(PerSource::new);
    let state = Arc::new(Shared {
        hook: HookState::new(engine, client, config),
        per_source,
    });
    let listeners = listeners(&state, (hook_socket, addr), webhook_socket, client_roots);
    Ok(tokio::spawn(async move {
        let Certificate {
            mut resolver,
            self_issued,
        } = certificate;
        if let Some((client, service, namespace)) = self_issued {
            let Some(issued) =
                tls::self_issued(&client, &service, &namespace, shutdown.clone()).await
            else {
                return;
            };
            resolver = Some(issued.resolver());
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
        if state.per_source.is_some() {
            tokio::spawn(forget_idle_sources(state.clone(), shutdown.clone()));
        }
        let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let mut loops = Vec::new();
        for listener in listeners {
            let Some(acceptor) = acceptor_for(&listener, resolver.as_ref()) else {
                continue;
            };
            loops.push(tokio::spawn(accept_loop(
                listener,
                acceptor,
                connections.clone(),
                read_timeout,
                shutdown.clone(),
            )));
        }
        for l in loops {
            let _ = l.await;
        }
    }))
}

/// The CA whose client certificates the webhook asks for
/// (`--scale-webhook-client-ca`), which needs TLS.
fn webhook_client_roots(
    config: &HookConfig,
) -> Result<Option<Arc<rustls::RootCertStore>>, ServeError> {
    let Some(clients) = &config.webhook_clients else {
        return Ok(None);
    };
    if config.tls == HookTls::PlainHttp {
        return Err(ServeError::Tls(
            "--scale-webhook-client-ca needs TLS: it cannot be used with --hook-insecure-http"
                .into(),
        ));
    }
    tls::client_roots(&clients.ca)
        .map(Some)
        .map_err(ServeError::Tls)
}

/// The hook's certificate as `config` names it (files are read now).
fn certificate(
    config: &HookConfig,
    engine: &Engine,
    client: &kube::Client,
    addr: SocketAddr,
) -> Result<Certificate, ServeError> {
    let mut certificate = Certificate {
        resolver: None,
        self_issued: None,
    };
    match &config.tls {
        HookTls::Files(files) => {
            certificate.resolver =
                Some(tls::resolver_from_files(&files.cert, &files.key).map_err(ServeError::Tls)?);
        }
        HookTls::SelfIssued { service, namespace } => {
            let namespace = namespace
                .clone()
                .unwrap_or_else(|| engine.leadership().lease().namespace.clone());
            certificate.self_issued = Some((client.clone(), service.clone(), namespace));
        }
        HookTls::PlainHttp => {
            tracing::warn!(%addr, "the hook serves plain HTTP (--hook-insecure-http): callers' bearer tokens travel in clear text");
        }
    }
    Ok(certificate)
}

/// One listener serving both routes, or the hook's and the webhook's each
/// on its own.
fn listeners(
    state: &Arc<Shared>,
    (hook_socket, addr): (TcpListener, SocketAddr),
    webhook_socket: Option<(TcpListener, SocketAddr)>,
    client_roots: Option<Arc<rustls::RootCertStore>>,
) -> Vec<Listener> {
    let Some((socket, webhook)) = webhook_socket else {
        return vec![Listener {
            socket: hook_socket,
            addr,
            routes: Routes::Both,
            app: router(state.clone(), Routes::Both),
            // the hook's callers present no certificate: asked, not required
            clients: client_roots.map_or(ClientAuth::None, ClientAuth::Optional),
        }];
    };
    vec![
        Listener {
            socket: hook_socket,
            addr,
            routes: Routes::Prescale,
            app: router(state.clone(), Routes::Prescale),
            clients: ClientAuth::None,
        },
        Listener {
            socket,
            addr: webhook,
            routes: Routes::Webhook,
            app: router(state.clone(), Routes::Webhook),
            clients: client_roots.map_or(ClientAuth::None, ClientAuth::Required),
        },
    ]
}

/// Forgets idle sources' budgets now and then, until `shutdown`.
async fn forget_idle_sources(state: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(FORGET_IDLE_EVERY) => {}
        }
        if let Some(limits) = &state.per_source {
            limits.forget_idle();
        }
    }
}

/// The listener's TLS acceptor (`Some(None)`: plain HTTP), logging what it
/// serves; `None` when it cannot serve TLS.
fn acceptor_for(
    listener: &Listener,
    resolver: Option<&Arc<dyn rustls::server::ResolvesServerCert>>,
) -> Option<Option<TlsAcceptor>> {
    let acceptor = match resolver {
        Some(resolver) => match tls::acceptor(resolver.clone(), &listener.clients) {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::error!(addr = %listener.addr, error = %e, "the hook's listener cannot serve TLS");
                return None;
            }
        },
        None => None,
    };
    let what = match listener.routes {
        Routes::Webhook => "serving the scale-in webhook (POST /v1/admit-scale-in)",
        Routes::Prescale => "serving the pre-scale-down hook (POST /v1/prescale)",
        Routes::Both => "serving the pre-scale-down hook (POST /v1/prescale) and the scale-in webhook (POST /v1/admit-scale-in)",
    };
    tracing::info!(
        addr = %listener.addr,
        tls = acceptor.is_some(),
        client_certificates = listener.clients.describe(),
        "{what}"
    );
    Some(acceptor)
}

/// Accepts connections until `shutdown`, each served on its own task.
async fn accept_loop(
    listener: Listener,
    tls: Option<TlsAcceptor>,
    connections: Arc<Semaphore>,
    read_timeout: Duration,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.socket.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "hook accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "hook: too many open connections, closing a new one");
            continue;
        };
        let (app, tls) = (listener.app.clone(), tls.clone());
        tokio::spawn(async move {
            let _permit = permit;
            serve_connection(app, tls, stream, peer, read_timeout).await;
        });
    }
}

/// Serves one connection: the TLS handshake (within `read_timeout`) and the
/// caller's certificate names first when it is TLS.
async fn serve_connection(
    app: axum::Router,
    tls: Option<TlsAcceptor>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    read_timeout: Duration,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    let result = match tls {
        Some(acceptor) => match tokio::time::timeout(read_timeout, acceptor.accept(stream)).await {
            Ok(Ok(s)) => {
                let certificate = s
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| {
                        Arc::new(cert::client_names(leaf).unwrap_or_else(|e| {
                            tracing::debug!(%peer, error = %e, "hook: client certificate names unreadable");
                            Vec::new()
                        }))
                    });
                let caller = Caller {
                    addr: peer,
                    certificate,
                };
                let service = TowerToHyperService::new(app.layer(Extension(caller)));
                builder.serve_connection(TokioIo::new(s), service).await
            }
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "hook TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "hook TLS handshake timed out");
                return;
            }
        },
        None => {
            let caller = Caller {
                addr: peer,
                certificate: None,
            };
            let service = TowerToHyperService::new(app.layer(Extension(caller)));
            builder
                .serve_connection(TokioIo::new(stream), service)
                .await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "hook connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients(names: &[&str]) -> WebhookClients {
        WebhookClients {
            ca: "ca.crt".into(),
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn the_webhook_refuses_callers_without_a_certificate() {
        let err = refuse_caller(&clients(&[]), None).unwrap();
        assert_eq!(err.status(), 401);
        assert!(
            err.to_string().contains("--scale-webhook-client-ca"),
            "{err}"
        );
    }

    #[test]
    fn any_certificate_from_the_ca_without_names_asked() {
        assert_eq!(refuse_caller(&clients(&[]), Some(&["x".to_string()])), None);
        assert_eq!(refuse_caller(&clients(&[]), Some(&[])), None);
    }

    #[test]
    fn a_certificate_must_carry_one_of_the_names_asked() {
        let c = clients(&["kube-apiserver", "apiserver.example"]);
        let ok = ["node-1".to_string(), "apiserver.example".to_string()];
        assert_eq!(refuse_caller(&c, Some(&ok)), None);
        let err = refuse_caller(&c, Some(&["system:node:n1".to_string()])).unwrap();
        assert_eq!(err.status(), 403);
        assert!(
            err.to_string().contains("system:node:n1")
                && err
                    .to_string()
                    .contains("kube-apiserver, apiserver.example"),
            "{err}"
        );
        let err = refuse_caller(&c, Some(&[])).unwrap();
        assert!(err.to_string().contains("names nothing"), "{err}");
    }

    #[test]
    fn over_budget_answers_allow_and_say_why() {
        let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-9", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "name": "web", "namespace": "shop", "operation": "UPDATE", "userInfo": {}}});
        let answer = allow_untouched(review.to_string().as_bytes(), "slow down".into());
        let v = serde_json::to_value(&answer).unwrap();
        assert_eq!(v["response"]["uid"], "u-9");
        assert_eq!(v["response"]["allowed"], true);
        assert_eq!(v["response"]["warnings"], serde_json::json!(["slow down"]));
        let bad = serde_json::to_value(allow_untouched(b"{", "x".into())).unwrap();
        assert_eq!(bad["response"]["allowed"], false, "{bad}");
    }
}
