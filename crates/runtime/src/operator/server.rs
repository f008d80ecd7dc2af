//! The operator's own HTTP listener (`--metrics-addr`): `/metrics`
//! (OpenMetrics), `/healthz`, `/readyz` (ready once every cache has synced,
//! else 503 naming the caches still listing; a ready body names the caches
//! gone without) and each managed policy's plan page
//! (`/policies/<namespace>/<name>`, see [`super::page`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::error::OperatorError;
use super::listener_state::ServerState;
use super::page;

/// Binds `addr` and serves `/metrics`, `/healthz`, `/readyz` and each
/// policy's page until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<ServerState>,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, OperatorError> {
    let (metrics, health) = (state.engine.metrics().clone(), state.health.clone());
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let (waiting, without) = (health.waiting_for(), health.gone_without());
                async move {
                    if waiting.is_empty() && without.is_empty() {
                        (StatusCode::OK, "ready".to_string())
                    } else if waiting.is_empty() {
                        // ready: the operator plans without what it may not read
                        let body = format!("ready without: {} (list refused)", without.join(", "));
                        (StatusCode::OK, body)
                    } else {
                        let names: Vec<&str> = waiting.iter().map(|w| w.0).collect();
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("caches not synced: {}", names.join(", ")),
                        )
                    }
                }
            }),
        )
        .route("/policies/{namespace}/{name}", get(page::policy_page))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| OperatorError::Serve {
            listener: "metrics server",
            addr,
            message: e.to_string(),
        })?;
    // the port bound, not the one asked for: `:0` picks a free one
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "serving /metrics, /healthz, /readyz, /policies/<namespace>/<name>");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
        {
            tracing::error!(error = %e, "metrics server failed");
        }
    }))
}
