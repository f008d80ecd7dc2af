//! `GET /policies/<namespace>/<name>[?scaleDownBy=N]` on the metrics port:
//! the plan page of a policy this operator manages (the same page as
//! `deletion-cost plan -o html`). Planned on request, as the policy's next
//! round would plan it ([`crate::engine::Engine::preview`]), so nothing is kept
//! between requests; one page is built at a time.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use super::listener_state::ServerState;
use crate::engine::PreviewError;
use crate::plan::NamedPolicy;
use crate::policy::DeletionCostPolicy;
use crate::report::{html, Report, Section};
use crate::writes::PolicyKey;

/// The page's own policy: inline styles only, nothing fetched, no script.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// Why a page is not served.
#[derive(Debug, thiserror::Error)]
enum PageError {
    #[error("bad query: {0}")]
    BadQuery(String),
    #[error("no DeletionCostPolicy {0} is managed by this operator")]
    UnknownPolicy(String),
    #[error("caches not synced: {0}")]
    NotSynced(String),
    #[error(
        "this replica is not the leader: only the leader plans (ask the pod labelled \
         deletioncost.dev/leader=true)"
    )]
    NotLeader,
    #[error("another page is being built; try again")]
    Busy,
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Preview(#[from] PreviewError),
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = match &self {
            PageError::BadQuery(_) => StatusCode::BAD_REQUEST,
            PageError::UnknownPolicy(_) => StatusCode::NOT_FOUND,
            PageError::Invalid(_) => StatusCode::CONFLICT,
            PageError::Busy => StatusCode::TOO_MANY_REQUESTS,
            PageError::NotSynced(_)
            | PageError::NotLeader
            | PageError::Preview(PreviewError::NotPlannedYet(_)) => StatusCode::SERVICE_UNAVAILABLE,
            PageError::Preview(PreviewError::Planner(..)) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut r = (status, format!("{self}\n")).into_response();
        if matches!(
            status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// The page's query parameters (others are ignored), decoded by axum.
#[derive(Debug, Default, serde::Deserialize)]
pub struct PageQuery {
    /// `scaleDownBy=N`: also show the next N victims.
    #[serde(rename = "scaleDownBy")]
    scale_down_by: Option<String>,
}

/// `scaleDownBy` as a number of pods.
fn scale_down_by(query: &PageQuery) -> Result<Option<usize>, PageError> {
    let Some(v) = &query.scale_down_by else {
        return Ok(None);
    };
    v.parse().map(Some).map_err(|_| {
        PageError::BadQuery(format!(
            "scaleDownBy must be a whole number of pods, found {v:?}"
        ))
    })
}

/// The handler of `/policies/{namespace}/{name}`.
pub async fn policy_page(
    State(state): State<Arc<ServerState>>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<PageQuery>,
) -> Response {
    match page(&state, &namespace, &name, &query).await {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CONTENT_SECURITY_POLICY, CSP),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn page(
    state: &ServerState,
    namespace: &str,
    name: &str,
    query: &PageQuery,
) -> Result<String, PageError> {
    let scale_down_by = scale_down_by(query)?;
    let key = format!("{namespace}/{name}");
    // before the lookup: a policy store still listing knows no policy yet
    let waiting = state.health.waiting_for();
    if !waiting.is_empty() {
        let names: Vec<&str> = waiting.iter().map(|w| w.0).collect();
        return Err(PageError::NotSynced(names.join(", ")));
    }
    let policy: Arc<DeletionCostPolicy> = state
        .engine
        .caches()
        .policy(namespace, name)
        .ok_or(PageError::UnknownPolicy(key))?;
    if !state.engine.leads() {
        return Err(PageError::NotLeader);
    }
    let resolved = NamedPolicy::validate(name, namespace, &policy.spec)
        .map_err(|e| PageError::Invalid(e.to_string()))?;
    let _permit = state.pages.try_acquire().map_err(|_| PageError::Busy)?;
    let source = format!(
        "deletion-cost operator {}: the plan its next round would make over the live pods",
        state.identity
    );
    // the totals this leader counts, else those its status holds
    let priced = state
        .engine
        .priced_scale_ins(&PolicyKey::new(namespace, name))
        .or_else(|| {
            policy
                .status
                .as_ref()
                .and_then(|s| s.priced_scale_ins.clone())
        });
    let body = state
        .engine
        .preview(&policy, &resolved, scale_down_by, move |p| {
            let mut plan = p.plan;
            if let Some(problem) = &p.signals {
                plan.warnings.push(format!(
                    "signals unavailable ({}): {}; writes are held",
                    problem.reason, problem.message
                ));
            }
            for c in &p.conflicts {
                plan.warnings.push(format!(
                    "{} pod(s) left to the older policy {}, which selects them too",
                    c.pods, c.winner
                ));
            }
            let report = Report {
                source,
                now: p
                    .opts
                    .now
                    .and_then(|n| k8s_openapi::jiff::Timestamp::from_nanosecond(n).ok())
                    .map(|t| t.to_string()),
                sections: vec![Section {
                    priced_scale_ins: priced.as_ref(),
                    ..Section::new(p.resolved, &plan, &p.snapshot.nodes, p.opts)
                }],
            };
            html::render(&report)
        })
        .await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_down_by_is_read_from_the_query() {
        let read = |q: &str| {
            let uri: axum::http::Uri = format!("/policies/a/b{q}").parse().unwrap();
            let Query(query) = Query::<PageQuery>::try_from_uri(&uri).unwrap();
            scale_down_by(&query)
        };
        assert_eq!(read("").unwrap(), None);
        assert_eq!(read("?scaleDownBy=3").unwrap(), Some(3));
        assert_eq!(read("?x=1&scaleDownBy=0").unwrap(), Some(0));
        assert_eq!(read("?other=1").unwrap(), None);
        // percent-encoding is decoded, as browsers send it
        assert_eq!(read("?scale%44ownBy=%32").unwrap(), Some(2));
        let e = read("?scaleDownBy=-1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad query: scaleDownBy must be a whole number of pods, found \"-1\""
        );
        assert_eq!(e.into_response().status(), StatusCode::BAD_REQUEST);
    }
}
