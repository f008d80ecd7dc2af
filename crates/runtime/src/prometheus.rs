//! The Prometheus HTTP client: utilisation from Prometheus, one instant
//! query per policy per refresh, answered for all the policy's pods at once,
//! mapped to pods by a label. The query template (`$namespace`, `$selector`)
//! is rendered by the pure [`crate::signals::query`]; the answer is parsed
//! and mapped to pods by the pure [`crate::signals::samples`]. This module
//! only sends the query and classifies what went wrong.
//!
//! Staleness: an instant query answers with the evaluation time, and
//! Prometheus itself drops series with no sample in its lookback window
//! (5 minutes by default), which then count as missing. The answer's time is
//! still compared with `maxAge` against the caller's clock, which catches
//! evaluation at an old time and clock skew between the operator and
//! Prometheus.
//!
//! Building a client needs a process-wide rustls crypto provider: call
//! [`install_crypto_provider`] first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::signals::query::{render_query, QueryTemplateError};
use crate::signals::samples::{
    map_series, parse_query_response, snippet, QueryResponse, ResponseError,
};
use crate::signals::UtilizationSamples;

/// Label used to find the pod when the policy names none.
pub const DEFAULT_POD_LABEL: &str = "pod";

/// Timeout of one query when the caller sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Installs ring as the process-wide rustls crypto provider (kube and the
/// Prometheus client share it). Safe to call more than once.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why one utilisation signal could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SignalFetchError {
    /// The policy's query template does not render (unknown placeholder).
    #[error("prometheus.query: {0}")]
    Query(QueryTemplateError),
    /// Prometheus could not answer it.
    #[error(transparent)]
    Prometheus(PromError),
}

/// A failed utilisation query.
#[derive(Debug, thiserror::Error)]
pub enum PromError {
    /// The URL cannot be used.
    #[error("Prometheus URL {url:?} is invalid: {message}")]
    InvalidUrl {
        /// URL as given.
        url: String,
        /// Why.
        message: String,
    },
    /// The HTTP client could not be built (e.g. no TLS provider installed).
    #[error("cannot build the HTTP client for Prometheus: {message}")]
    Client {
        /// Why.
        message: String,
    },
    /// Nothing answered: connection refused, DNS failure, reset.
    #[error("Prometheus at {url} is unreachable: {message}")]
    Unreachable {
        /// Base URL.
        url: String,
        /// The underlying error chain.
        message: String,
    },
    /// No full answer within the per-query timeout.
    #[error("Prometheus at {url} did not answer within {after:?}")]
    Timeout {
        /// Base URL.
        url: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// A non-success HTTP status without a Prometheus error body (e.g. a proxy's 502).
    #[error("Prometheus at {url} answered HTTP {status}: {body}")]
    HttpStatus {
        /// Base URL.
        url: String,
        /// HTTP status code.
        status: u16,
        /// Start of the body.
        body: String,
    },
    /// Prometheus rejected the query (bad PromQL, execution error, ...).
    #[error(
        "Prometheus at {url} rejected the query {query:?} (HTTP {status}, {error_type}): {message}"
    )]
    Api {
        /// Base URL.
        url: String,
        /// The rendered query.
        query: String,
        /// HTTP status code.
        status: u16,
        /// Prometheus's `errorType`, e.g. `bad_data`.
        error_type: String,
        /// Prometheus's message.
        message: String,
    },
    /// The query returned a matrix, scalar or string.
    #[error("the query {query:?} returned a {result_type} result; it must return an instant vector with one series per pod")]
    UnexpectedResultType {
        /// The rendered query.
        query: String,
        /// What came back.
        result_type: String,
    },
    /// The body is not a Prometheus API answer.
    #[error("Prometheus at {url} sent an invalid answer: {problem}")]
    InvalidBody {
        /// Base URL.
        url: String,
        /// What is wrong (JSON path and value).
        problem: String,
    },
}

impl PromError {
    /// Short stable name of the error kind, for metrics and events.
    pub fn kind(&self) -> &'static str {
        match self {
            PromError::InvalidUrl { .. } => "invalid_url",
            PromError::Client { .. } => "client",
            PromError::Unreachable { .. } => "unreachable",
            PromError::Timeout { .. } => "timeout",
            PromError::HttpStatus { .. } => "http_status",
            PromError::Api { .. } => "api",
            PromError::UnexpectedResultType { .. } => "result_type",
            PromError::InvalidBody { .. } => "invalid_body",
        }
    }
}

/// Options of one fetch.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchOptions {
    /// Deadline for the whole exchange (connect, query, body); also sent to
    /// Prometheus so it stops evaluating.
    pub timeout: Duration,
    /// Samples older than this are [`crate::signals::SampleProblem::Stale`].
    pub max_age: Option<Duration>,
    /// Evaluate at this Unix time instead of Prometheus's now.
    pub eval_at: Option<i64>,
    /// The caller's now (Unix seconds) for staleness; `None` reads the clock.
    pub now_secs: Option<f64>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            max_age: None,
            eval_at: None,
            now_secs: None,
        }
    }
}

/// What a fetch returned besides the samples.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchMeta {
    /// The query as sent.
    pub query: String,
    /// Series in the answer.
    pub series: usize,
    /// Series ignored because they lack the pod label.
    pub without_pod_label: usize,
    /// Latest sample time in the answer (the evaluation time), Unix seconds.
    pub evaluated_at: Option<f64>,
    /// Prometheus's warnings.
    pub warnings: Vec<String>,
    /// Time the exchange took.
    pub elapsed: Duration,
}

/// Samples of one utilisation query.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    /// Pod name -> sample.
    pub samples: UtilizationSamples,
    /// About the exchange.
    pub meta: FetchMeta,
}

/// A Prometheus server to query.
#[derive(Clone)]
pub struct PrometheusClient {
    client: prometheus_http_query::Client,
    url: String,
}

impl PrometheusClient {
    /// A client for the Prometheus at `url` (e.g. `http://prometheus:9090`,
    /// a path prefix is kept). Call [`install_crypto_provider`] first.
    pub fn new(url: &str) -> Result<Self, PromError> {
        let http = reqwest::Client::builder()
            .user_agent(crate::USER_AGENT)
            .build()
            .map_err(|e| PromError::Client {
                message: crate::error_chain(&e),
            })?;
        let client =
            prometheus_http_query::Client::from(http, url).map_err(|e| PromError::InvalidUrl {
                url: url.to_string(),
                message: crate::error_chain(&e),
            })?;
        Ok(Self {
            client,
            url: url.to_string(),
        })
    }

    /// The URL this client queries.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Reads one utilisation signal of a policy: renders its query for the
    /// namespace and selector labels, then runs it with the signal's pod
    /// label and `maxAge`.
    pub async fn fetch_signal(
        &self,
        signal: &crate::policy::validate::Utilization,
        namespace: &str,
        match_labels: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<Fetched, SignalFetchError> {
        let query = render_query(&signal.query, namespace, match_labels)
            .map_err(SignalFetchError::Query)?;
        let opts = FetchOptions {
            timeout,
            max_age: Some(signal.max_age),
            ..Default::default()
        };
        self.fetch_utilization(&query, &signal.pod_label, &opts)
            .await
            .map_err(SignalFetchError::Prometheus)
    }

    /// Runs one instant `query` (already rendered, see [`render_query`]) and
    /// maps the answer's series to pods by `pod_label`.
    pub async fn fetch_utilization(
        &self,
        query: &str,
        pod_label: &str,
        opts: &FetchOptions,
    ) -> Result<Fetched, PromError> {
        let started = Instant::now();
        let exchange = self.exchange(query, opts);
        let (status, body) = tokio::time::timeout(opts.timeout, exchange)
            .await
            .map_err(|_| PromError::Timeout {
                url: self.url.clone(),
                after: opts.timeout,
            })??;
        let response = self.read_answer(query, status, &body)?;
        let now = opts.now_secs.unwrap_or_else(unix_now);
        let mapped = map_series(
            &response.series,
            pod_label,
            Some(now),
            opts.max_age.map(|d| d.as_secs_f64()),
        );
        let evaluated_at = response
            .series
            .iter()
            .map(|s| s.timestamp)
            .fold(None, |acc: Option<f64>, t| {
                Some(acc.map_or(t, |a| a.max(t)))
            });
        Ok(Fetched {
            samples: mapped.samples,
            meta: FetchMeta {
                query: query.to_string(),
                series: response.series.len(),
                without_pod_label: mapped.without_pod_label,
                evaluated_at,
                warnings: response.warnings,
                elapsed: started.elapsed(),
            },
        })
    }

    /// Sends the query and reads the answer's status and body (the caller
    /// bounds the whole exchange by the timeout).
    async fn exchange(
        &self,
        query: &str,
        opts: &FetchOptions,
    ) -> Result<(reqwest::StatusCode, String), PromError> {
        let mut request = self
            .client
            .query(query)
            .timeout(i64::try_from(opts.timeout.as_millis()).unwrap_or(i64::MAX));
        if let Some(at) = opts.eval_at {
            request = request.at(at);
        }
        // POST: long selectors must not hit URL length limits.
        let response = request
            .post_raw()
            .await
            .map_err(|e| self.send_error(e, opts))?;
        let status = response.status();
        let body = response.text().await.map_err(|e| {
            if e.is_timeout() {
                self.reqwest_error(&e, opts)
            } else {
                // The server answered, then the body broke off.
                PromError::InvalidBody {
                    url: self.url.clone(),
                    problem: format!("reading the body failed: {}", crate::error_chain(&e)),
                }
            }
        })?;
        Ok((status, body))
    }

    /// The answer to `query` parsed, or what was wrong with it: Prometheus's
    /// own error first, then a bad status, then a body that is not a vector.
    fn read_answer(
        &self,
        query: &str,
        status: reqwest::StatusCode,
        body: &str,
    ) -> Result<QueryResponse, PromError> {
        match parse_query_response(body) {
            Ok(r) if status.is_success() => Ok(r),
            Err(ResponseError::Api {
                error_type,
                message,
            }) => Err(PromError::Api {
                url: self.url.clone(),
                query: query.to_string(),
                status: status.as_u16(),
                error_type,
                message,
            }),
            _ if !status.is_success() => Err(PromError::HttpStatus {
                url: self.url.clone(),
                status: status.as_u16(),
                body: snippet(body),
            }),
            Ok(r) => Ok(r),
            Err(ResponseError::ResultType { result_type }) => {
                Err(PromError::UnexpectedResultType {
                    query: query.to_string(),
                    result_type,
                })
            }
            Err(e @ ResponseError::Body { .. }) => Err(PromError::InvalidBody {
                url: self.url.clone(),
                problem: e.to_string(),
            }),
        }
    }

    fn send_error(&self, e: prometheus_http_query::Error, opts: &FetchOptions) -> PromError {
        match &e {
            prometheus_http_query::Error::Client(c) => match c.inner() {
                Some(inner) => self.reqwest_error(inner, opts),
                None => PromError::Unreachable {
                    url: self.url.clone(),
                    message: crate::error_chain(&e),
                },
            },
            _ => PromError::Unreachable {
                url: self.url.clone(),
                message: crate::error_chain(&e),
            },
        }
    }

    fn reqwest_error(&self, e: &reqwest::Error, opts: &FetchOptions) -> PromError {
        if e.is_timeout() {
            PromError::Timeout {
                url: self.url.clone(),
                after: opts.timeout,
            }
        } else {
            PromError::Unreachable {
                url: self.url.clone(),
                message: crate::error_chain(e),
            }
        }
    }
}

impl std::fmt::Debug for PrometheusClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusClient")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_are_distinct() {
        let kinds = [
            PromError::Unreachable {
                url: "u".into(),
                message: "m".into(),
            }
            .kind(),
            PromError::Timeout {
                url: "u".into(),
                after: Duration::from_secs(1),
            }
            .kind(),
            PromError::HttpStatus {
                url: "u".into(),
                status: 502,
                body: "b".into(),
            }
            .kind(),
            PromError::UnexpectedResultType {
                query: "q".into(),
                result_type: "matrix".into(),
            }
            .kind(),
        ];
        let unique: std::collections::BTreeSet<_> = kinds.iter().collect();
        assert_eq!(unique.len(), kinds.len());
    }

    #[test]
    fn invalid_url() {
        install_crypto_provider();
        let err = PrometheusClient::new("not a url").unwrap_err();
        assert_eq!(err.kind(), "invalid_url");
        assert!(err.to_string().contains("not a url"));
    }
}
