//! What `deletion-cost run` is told ([`RunConfig`]) and what the start
//! derives from it before anything is watched: the checked write limits,
//! the API client, and the comparator's feature gates for the cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube::Client;

use super::error::OperatorError;
use crate::comparator::{choose_gates, FeatureGates, KubeVersion};
use crate::metrics::Metrics;

/// Everything `deletion-cost run` is told.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Watch and write only this namespace (Role instead of ClusterRole).
    pub namespace: Option<String>,
    /// Prometheus for utilisation signals.
    pub prometheus_url: Option<String>,
    /// Per-query Prometheus timeout.
    pub prometheus_timeout: Duration,
    /// `/metrics`, `/healthz`, `/readyz` listener.
    pub metrics_addr: SocketAddr,
    /// Operator-wide write rate.
    pub qps: f64,
    /// Operator-wide burst.
    pub burst: u32,
    /// Pod writes of scale-ins sent beyond `qps`/`burst`, refilled over
    /// ten minutes (`--scale-in-allowance`; 0: none).
    pub scale_in_allowance: u32,
    /// Compute and report, write nothing.
    pub dry_run: bool,
    /// Kubeconfig file (in-cluster or the default kubeconfig when unset).
    pub kubeconfig: Option<PathBuf>,
    /// Take part in leader election (off: always leader).
    pub leader_election: bool,
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace (default: the pod's namespace, or `default`).
    pub lease_namespace: Option<String>,
    /// This replica's identity (pod name).
    pub identity: String,
    /// Lease duration, renew deadline and retry period of the election.
    pub lease_timings: LeaseTimings,
    /// `--kubernetes-version`: its gate defaults apply instead of those of
    /// the API server's version.
    pub kubernetes_version: Option<KubeVersion>,
    /// `--feature-gates`: overrides on top of the version's defaults.
    pub feature_gates: Option<String>,
    /// How long SIGTERM waits for in-flight writes.
    pub shutdown_grace: Duration,
    /// Quiet time before a triggered reconcile runs.
    pub debounce: Duration,
    /// Pre-scale-down hook listener (`--hook-addr`); no hook when unset.
    pub hook_addr: Option<SocketAddr>,
    /// Pre-scale-down hook settings.
    pub hook: crate::hook::HookConfig,
    /// Price every scale-in with these prices (`--prices`), and watch the
    /// nodes it frees (`--node-removal-window`).
    pub pricing: Option<crate::engine::Pricing>,
    /// Where the prices were read (`--prices`): read again when it changes.
    pub prices_file: Option<PathBuf>,
}

impl RunConfig {
    /// Namespace of the leader-election Lease: the flag, else the pod's
    /// namespace, else `default`.
    pub fn lease_namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into())
    }
}

/// Builds the client. kube's own retry layer is off: every write must go
/// through our limiter, retries included.
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client, OperatorError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                OperatorError::Config(format!("--kubeconfig: {}", kubeconfig_error(&e)))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| {
                    OperatorError::Config(format!(
                        "--kubeconfig {}: {}",
                        path.display(),
                        crate::error_chain(&e)
                    ))
                })?
        }
        None => infer().await?,
    };
    config.default_retry = false;
    // kube sends no User-Agent of its own: name us in audit logs and APF.
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(crate::USER_AGENT),
    ));
    Client::try_from(config).map_err(|e| OperatorError::Client(e.to_string()))
}

/// What `kube::Config::infer` does (the kubeconfig, else the pod's
/// in-cluster config), with its failure in words: kube's own message nests
/// both attempts' errors ("failed to infer config: in-cluster: (failed to
/// read an incluster environment variable: ...), kubeconfig: (...)").
async fn infer() -> Result<kube::Config, OperatorError> {
    let kubeconfig = match kube::Config::from_kubeconfig(&Default::default()).await {
        Ok(mut config) => {
            config.apply_debug_overrides();
            return Ok(config);
        }
        Err(e) => e,
    };
    let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty());
    match kube::Config::incluster() {
        Ok(mut config) => {
            config.apply_debug_overrides();
            Ok(config)
        }
        Err(_) if !in_pod => Err(OperatorError::Config(format!(
            "no cluster to connect to: no kubeconfig ({}) and not in a pod \
             (KUBERNETES_SERVICE_HOST is unset); pass --kubeconfig PATH or set KUBECONFIG",
            no_kubeconfig(&kubeconfig)
        ))),
        Err(e) => Err(OperatorError::Config(format!(
            "no cluster to connect to: the pod's in-cluster config: {} (and no kubeconfig: {})",
            crate::error_chain(&e),
            no_kubeconfig(&kubeconfig)
        ))),
    }
}

/// Why no kubeconfig was found, in words: which files were looked for.
pub fn no_kubeconfig(e: &kube::config::KubeconfigError) -> String {
    let set = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    let hint = if set {
        "KUBECONFIG names"
    } else {
        "no KUBECONFIG set, and"
    };
    format!("{hint} {}", kubeconfig_error(e))
}

/// A kubeconfig that cannot be read, in words: the path as written and
/// why (not kube's debug-quoted path, nor an `(os error N)`).
pub fn kubeconfig_error(e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as E;
    match e {
        E::ReadConfig(io, path) if io.kind() == std::io::ErrorKind::NotFound => {
            format!("{}: no such file", path.display())
        }
        E::ReadConfig(io, path) => {
            format!("{}: {}", path.display(), crate::input::io_error_text(io))
        }
        E::FindPath => "no home directory to find ~/.kube/config in".to_string(),
        other => crate::error_chain(other),
    }
}

/// How long the start waits for the API server's version before it goes on
/// with the newest defaults.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The comparator's gates for the cluster: the defaults of its version (as
/// the API server reports it, emulated version first), flags on top; the
/// newest defaults, with a warning, when the version cannot be read. Logs
/// the choice and exports it as `deletion_cost_comparator_info`.
pub(super) async fn comparator_gates(
    client: &Client,
    config: &RunConfig,
    metrics: &Metrics,
) -> Result<FeatureGates, OperatorError> {
    let fallback = match config.kubernetes_version {
        Some(v) => format!("--kubernetes-version {v} applies"),
        None => "the comparator uses the newest defaults".into(),
    };
    let detected = match tokio::time::timeout(VERSION_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => {
            let emulated = KubeVersion::emulated(
                info.emulation_major.as_deref(),
                info.emulation_minor.as_deref(),
            );
            match KubeVersion::from_server(&info.major, &info.minor, &info.git_version) {
                Ok(binary) => Some((emulated.unwrap_or(binary), info.git_version)),
                Err(e) => {
                    tracing::warn!(error = %e, "the API server's version does not parse: {fallback}");
                    None
                }
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %crate::error_chain(&e), "cannot read the API server's version: {fallback}");
            None
        }
        Err(_) => {
            tracing::warn!(
                timeout_seconds = VERSION_TIMEOUT.as_secs(),
                "the API server did not tell its version in time: {fallback}"
            );
            None
        }
    };
    let choice = choose_gates(
        config.kubernetes_version,
        detected.as_ref().map(|(v, _)| *v),
        config.feature_gates.as_deref(),
    )
    .map_err(|e| {
        let from = match (&detected, config.kubernetes_version) {
            (Some((_, git)), None) => format!(" (the API server's version: {git})"),
            _ => String::new(),
        };
        OperatorError::Config(format!("--feature-gates: {e}{from}"))
    })?;
    let unknown = || "unknown".to_string();
    tracing::info!(
        detected_version = %detected.as_ref().map_or_else(unknown, |(_, git)| git.clone()),
        kubernetes_version = %choice.version.map_or_else(unknown, |v| v.to_string()),
        source = choice.source.as_str(),
        pod_deletion_cost = choice.gates.pod_deletion_cost,
        logarithmic_scale_down = choice.gates.logarithmic_scale_down,
        "comparator feature gates chosen"
    );
    metrics.comparator_chosen(&choice);
    Ok(choice.gates)
}

pub(super) fn check_limits(config: &RunConfig) -> Result<(), OperatorError> {
    if !(config.qps.is_finite() && config.qps > 0.0) || config.burst == 0 {
        return Err(OperatorError::Config(format!(
            "--qps must be > 0 and --burst >= 1 (got {} and {})",
            config.qps, config.burst
        )));
    }
    Ok(())
}
/// The election's timing (client-go's names and defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a term lasts without renewal (`leaseDurationSeconds`).
    pub duration: Duration,
    /// How long after a renewal was sent the leader may still write; must be
    /// shorter than `duration`.
    pub renew_deadline: Duration,
    /// Time between attempts to take or renew the Lease.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTimings {
    /// Checks the order client-go requires: retry period < renew deadline <
    /// lease duration, the duration in whole seconds of at least 1.
    pub fn check(&self) -> Result<(), String> {
        if self.duration < Duration::from_secs(1) || self.duration.subsec_nanos() != 0 {
            return Err(format!(
                "--lease-duration must be a whole number of seconds, at least 1 (got {:?})",
                self.duration
            ));
        }
        if self.renew_deadline >= self.duration {
            return Err(format!(
                "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?})",
                self.renew_deadline, self.duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "--retry-period ({:?}) must be above 0 and shorter than --renew-deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}
