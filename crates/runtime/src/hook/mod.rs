//! The pre-scale-down hook: `POST /v1/prescale`.
//!
//! An autoscaler or a job about to scale a workload in calls it with the
//! target replica count. The leader refreshes the managing policy's signals,
//! writes the workload's costs ahead of background work (still inside the
//! operator-wide limiter), waits until its pod cache shows them, and answers
//! with the predicted victims and the order check; with `scale: true` it then
//! sets the scale subresource and reports which pods went. Callers
//! authenticate with a ServiceAccount token (TokenReview) and must be allowed
//! to update the workload's scale (SubjectAccessReview).
//!
//! The hook serves TLS by default, with a certificate the operator issues
//! itself from a CA shared by all replicas (`tls`), or from files; plain HTTP
//! only when asked.
//!
//! The scale-in webhook (`admission`) is served on the hook's listener, or
//! on its own (`--scale-webhook-addr`) so that a NetworkPolicy can admit
//! only the API server to it. With `--scale-webhook-client-ca` it answers
//! only callers whose TLS client certificate chains to that CA (the API
//! server's, configured in its AdmissionConfiguration). Every source address
//! has its own budget of calls to both (`limit`).
//!
//! `api`, `error` and `cert` are pure; `auth`, `handler`, `tls`,
//! `limit` and `server` are the shell.

pub mod admission;
pub mod api;
mod auth;
pub mod cert;
pub mod error;
mod handler;
mod limit;
mod server;
pub mod tls;
pub mod webhook_ca;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::writes::Rate;

pub use crate::engine::VictimComparison;
pub use api::{PrescaleRequest, PrescaleResponse, Workload, WorkloadKind};
pub use error::HookError;
pub use server::{serve, ServeError};

/// Certificate and key files (PEM) for serving the hook over TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// How the hook's connections are secured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookTls {
    /// TLS with these files (e.g. a cert-manager Secret mounted in the pod).
    Files(TlsFiles),
    /// TLS with a certificate the operator issues itself from a CA shared
    /// through the Secret `<service>-ca` and published in the ConfigMap
    /// `<service>-ca` (key `ca.crt`); see [`tls`].
    SelfIssued {
        /// Name of the hook's Service: the certificate's DNS names and the
        /// CA objects' names derive from it.
        service: String,
        /// Namespace of the Service and of the CA objects (default: the
        /// lease namespace).
        namespace: Option<String>,
    },
    /// Plain HTTP: callers' tokens travel in clear text. Only when asked.
    PlainHttp,
}

/// Name of the hook's Service in the shipped manifests.
pub const DEFAULT_SERVICE: &str = "deletion-cost-hook";

impl Default for HookTls {
    fn default() -> Self {
        HookTls::SelfIssued {
            service: DEFAULT_SERVICE.into(),
            namespace: None,
        }
    }
}

/// Who may call the scale-in webhook: callers presenting a TLS client
/// certificate issued by one of the CA certificates in `ca`
/// (`--scale-webhook-client-ca`), carrying one of `names` as its subject's
/// common name or a DNS name when any are given
/// (`--scale-webhook-client-name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookClients {
    /// PEM file of the CA certificate(s).
    pub ca: PathBuf,
    /// Names the certificate must carry one of (empty: any the CA issued).
    pub names: Vec<String>,
}

/// Calls a second one source address may make to the hook's listeners, and
/// at once.
pub const DEFAULT_PER_SOURCE: (f64, u32) = (10.0, 20);

/// How the hook runs.
#[derive(Debug, Clone, PartialEq)]
pub struct HookConfig {
    /// Wait between the observed patches and setting the scale (`scale: true`),
    /// so the ReplicaSet controller's informer has them too.
    pub settle_delay: Duration,
    /// Requests worked on at once; more get 429.
    pub max_concurrent: usize,
    /// Audiences asked of the TokenReview (empty: the API server's default).
    pub token_audiences: Vec<String>,
    /// How connections are secured (TLS with a self-issued certificate by default).
    pub tls: HookTls,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Time a client gets to send headers (connection closed) and body (408).
    pub read_timeout: Duration,
    /// Time budget of a request that names none.
    pub default_timeout: Duration,
    /// Largest time budget a request may ask for.
    pub max_timeout: Duration,
    /// Time the scale-in webhook spends making costs fresh before it allows
    /// anyway (under the webhook's `timeoutSeconds`).
    pub webhook_budget: Duration,
    /// Keep the scale-in webhook's caBundle equal to the self-issued CA
    /// (`--scale-webhook-ca`).
    pub webhook_ca: bool,
    /// The scale-in webhook's own listener (`--scale-webhook-addr`): the
    /// hook's listener then serves `/v1/prescale` only. `None`: the hook's
    /// listener serves both.
    pub webhook_addr: Option<SocketAddr>,
    /// Callers the scale-in webhook answers (`None`: any).
    pub webhook_clients: Option<WebhookClients>,
    /// Each source address's budget of calls to the hook's listeners
    /// (`None`: unlimited).
    pub per_source: Option<Rate>,
}

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig {
            settle_delay: Duration::from_secs(1),
            max_concurrent: 4,
            token_audiences: Vec::new(),
            tls: HookTls::default(),
            max_body_bytes: 64 * 1024,
            read_timeout: Duration::from_secs(10),
            default_timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(300),
            webhook_budget: Duration::from_millis(2500),
            webhook_ca: false,
            webhook_addr: None,
            webhook_clients: None,
            per_source: Rate::new("per source", DEFAULT_PER_SOURCE.0, DEFAULT_PER_SOURCE.1).ok(),
        }
    }
}
