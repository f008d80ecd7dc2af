//! `deletion-cost run`: the operator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::source::read_source_limited;
use super::CliError;
use crate::engine::{Pricing, SharedPrices};
use crate::hook::{HookConfig, HookTls, TlsFiles};
use crate::input::{parse_prices, Expect};
use crate::operator::{self, RunConfig};

/// Flags of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Watch and write only this namespace, so the operator can run with a
    /// Role instead of a ClusterRole (nodes are still read cluster-wide).
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        env = "DELETION_COST_NAMESPACE"
    )]
    pub namespace: Option<String>,
    /// Prometheus base URL for utilisation signals.
    #[arg(long, value_name = "URL")]
    pub prometheus_url: Option<String>,
    /// Timeout of one Prometheus query, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub prometheus_timeout: f64,
    /// Listen address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Operator-wide sustained writes per second to the API server.
    #[arg(long, default_value_t = 5.0)]
    pub qps: f64,
    /// Operator-wide writes allowed at once.
    #[arg(long, default_value_t = 10)]
    pub burst: u32,
    /// Pod writes a scale-in's correction may send beyond --qps/--burst,
    /// refilled over ten minutes (0: every write within --qps/--burst).
    #[arg(long, value_name = "WRITES", default_value_t = crate::writes::DEFAULT_SCALE_IN_ALLOWANCE)]
    pub scale_in_allowance: u32,
    /// Compute and report (logs, metrics), write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Kubeconfig file; by default the in-cluster config (or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "deletion-cost")]
    pub lease_name: String,
    /// Run without leader election (a single replica only).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Seconds a leader's term lasts without renewal (the Lease's
    /// leaseDurationSeconds): how long a follower waits before taking over
    /// from a leader that stopped renewing.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds after its last recorded renewal a leader still writes; must
    /// be below --lease-duration, so a leader that cannot renew stops writing
    /// before another replica may take over.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub renew_deadline: f64,
    /// Seconds between attempts to take or renew the Lease.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub retry_period: f64,
    /// The cluster's feature gates.
    #[command(flatten)]
    pub gates: super::cluster_flags::GateFlags,
    /// Seconds SIGTERM waits for in-flight writes.
    #[arg(long, value_name = "SECONDS", default_value_t = 20)]
    pub shutdown_grace: u64,
    /// Listen address of the pre-scale-down hook (POST /v1/prescale); no hook when unset.
    #[arg(long, value_name = "ADDR")]
    pub hook_addr: Option<SocketAddr>,
    /// Serve the hook over TLS with this certificate chain (PEM, e.g. from
    /// cert-manager); needs --hook-tls-key. Without it the operator issues its
    /// own certificate and publishes the CA in the ConfigMap <service>-ca.
    // the help text names a ConfigMap <service>-ca, not an HTML tag
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long, value_name = "FILE", requires = "hook_tls_key")]
    pub hook_tls_cert: Option<PathBuf>,
    /// Private key (PEM) for --hook-tls-cert.
    #[arg(long, value_name = "FILE", requires = "hook_tls_cert")]
    pub hook_tls_key: Option<PathBuf>,
    /// Name of the hook's Service: the self-issued certificate is valid for
    /// its DNS names in $POD_NAMESPACE (else the lease namespace), and names
    /// the CA's Secret and ConfigMap (<service>-ca).
    // the help text names a ConfigMap <service>-ca, not an HTML tag
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long, value_name = "NAME", default_value = crate::hook::DEFAULT_SERVICE)]
    pub hook_service_name: String,
    /// Serve the hook over plain HTTP: callers' bearer tokens travel in clear
    /// text. Only for tests or behind a TLS-terminating proxy on the pod.
    #[arg(long, conflicts_with_all = ["hook_tls_cert", "hook_tls_key"])]
    pub hook_insecure_http: bool,
    /// Audience the callers' tokens must be valid for (repeatable; default:
    /// the API server's own audience).
    #[arg(long, value_name = "AUDIENCE")]
    pub hook_token_audience: Vec<String>,
    /// Seconds between seeing the patches and setting the scale (`scale: true`).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub hook_settle_delay: f64,
    /// Prescale requests worked on at once; more get 429.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub hook_max_concurrent: usize,
    /// Seconds the scale-in webhook (POST /v1/admit-scale-in, on the hook's
    /// listener or --scale-webhook-addr) spends making costs fresh before it
    /// allows anyway; keep it under the webhook's timeoutSeconds (3), the
    /// longest a frozen leader may hold a scale-in.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.5)]
    pub scale_webhook_budget: f64,
    /// With the self-issued hook certificate, keep the caBundle of the
    /// scale-in webhook (`deletion-cost-scale-in.<namespace>`) equal to the
    /// hook's CA; the scale-webhook component sets it and grants the access.
    #[arg(long)]
    pub scale_webhook_ca: bool,
    /// Serve the scale-in webhook on its own listener (POST
    /// /v1/admit-scale-in, with the hook's TLS); the hook's listener then
    /// answers POST /v1/prescale only, so a NetworkPolicy can admit only the
    /// API server to this port. Needs --hook-addr.
    #[arg(long, value_name = "ADDR", requires = "hook_addr")]
    pub scale_webhook_addr: Option<SocketAddr>,
    /// Answer the scale-in webhook only for callers that present a TLS client
    /// certificate issued by a CA in this PEM file: the API server, given
    /// that certificate in its AdmissionConfiguration. Read at start.
    #[arg(long, value_name = "FILE", conflicts_with = "hook_insecure_http")]
    pub scale_webhook_client_ca: Option<PathBuf>,
    /// With --scale-webhook-client-ca: the client certificate must carry this
    /// name as its subject's common name or a DNS name (repeatable: any of them).
    #[arg(long, value_name = "NAME", requires = "scale_webhook_client_ca")]
    pub scale_webhook_client_name: Vec<String>,
    /// Calls a second one source address may make to the hook and the
    /// scale-in webhook; over it the hook answers 429 and the webhook allows
    /// the scale-in without making costs fresh, with a warning. Webhook calls
    /// with the client certificate of --scale-webhook-client-ca are not
    /// counted. 0: no limit.
    #[arg(long, value_name = "QPS", default_value_t = crate::hook::DEFAULT_PER_SOURCE.0)]
    pub hook_source_qps: f64,
    /// Calls one source address may make at once (see --hook-source-qps).
    #[arg(long, value_name = "N", default_value_t = crate::hook::DEFAULT_PER_SOURCE.1)]
    pub hook_source_burst: u32,
    /// Hourly node prices (`plan --prices`'s format: YAML or JSON,
    /// billingClasses, optionally instanceTypes and currency): every
    /// scale-in the webhook or the hook makes is priced, the policy's
    /// victims against the default order's, in metrics, its Event and the
    /// policy's status. Read again when it changes (checked every 30 s; a
    /// file that no longer reads keeps the prices before it); the prices
    /// component mounts it from a ConfigMap.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<String>,
    /// Seconds after a scale-in frees a node within which the Node object
    /// going away counts as removed by the autoscaler (with --prices).
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    pub node_removal_window: u64,
}

/// The largest prices file `run` reads: thousands of instance types fit in
/// a fraction of it.
const PRICES_MAX_BYTES: u64 = 16 << 20;

/// Reads and checks `--prices`: exit 2 naming the field when it is wrong.
fn load_pricing(args: &RunArgs) -> Result<Option<Pricing>, CliError> {
    let Some(path) = &args.prices else {
        return Ok(None);
    };
    if args.node_removal_window == 0 {
        return Err(CliError::bad_input(
            "--node-removal-window must be at least 1 second",
        ));
    }
    let (name, text) =
        read_source_limited(path, PRICES_MAX_BYTES, Expect::Text).map_err(CliError::bad_input)?;
    let prices = parse_prices(&name, &text).map_err(CliError::bad_input)?;
    Ok(Some(Pricing {
        prices: SharedPrices::new(prices),
        removal_window: Duration::from_secs(args.node_removal_window),
    }))
}

/// Runs the operator until SIGTERM.
pub fn run(args: RunArgs) -> Result<(), CliError> {
    if !(args.prometheus_timeout.is_finite() && args.prometheus_timeout > 0.0) {
        return Err(CliError::bad_input(
            "--prometheus-timeout must be a positive number of seconds",
        ));
    }
    let pricing = load_pricing(&args)?;
    // checked against --kubernetes-version now, against the cluster's version once connected
    let (kubernetes_version, _) = args.gates.resolve()?;
    let hook = hook_config(&args)?;
    // said here in the flag's words; kube's own message quotes the path twice
    if let Some(path) = &args.kubeconfig {
        if let Err(e) = std::fs::File::open(path) {
            return Err(CliError::bad_input(format!(
                "--kubeconfig {}: cannot read: {}",
                path.display(),
                crate::input::io_error_text(&e)
            )));
        }
    }
    let identity = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{}-{}", operator::MANAGER, std::process::id()));
    let config = RunConfig {
        namespace: args.namespace,
        prometheus_url: args.prometheus_url,
        prometheus_timeout: Duration::from_secs_f64(args.prometheus_timeout),
        metrics_addr: args.metrics_addr,
        qps: args.qps,
        burst: args.burst,
        scale_in_allowance: args.scale_in_allowance,
        dry_run: args.dry_run,
        kubeconfig: args.kubeconfig,
        leader_election: !args.no_leader_election,
        lease_name: args.lease_name,
        lease_namespace: args.leader_election_namespace,
        identity,
        lease_timings: operator::LeaseTimings {
            duration: Duration::from_secs(args.lease_duration),
            renew_deadline: seconds("--renew-deadline", args.renew_deadline)?,
            retry_period: seconds("--retry-period", args.retry_period)?,
        },
        kubernetes_version,
        feature_gates: args.gates.feature_gates,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        debounce: Duration::from_secs(1),
        hook_addr: args.hook_addr,
        hook,
        pricing,
        prices_file: args.prices.map(PathBuf::from),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("starting the async runtime: {e}")))?;
    runtime
        .block_on(operator::run(config))
        .map_err(|e| match e {
            operator::OperatorError::Config(m) => CliError::bad_input(m),
            other => CliError::failure(other),
        })
}

/// The hook's and the webhook's settings, each flag checked in the flag's
/// words before the cluster is contacted.
fn hook_config(args: &RunArgs) -> Result<HookConfig, CliError> {
    check_hook_limits(args)?;
    check_service_name(&args.hook_service_name)?;
    let per_source = per_source_rate(args)?;
    check_webhook_flags(args)?;
    Ok(HookConfig {
        webhook_addr: args.scale_webhook_addr,
        webhook_clients: args.scale_webhook_client_ca.clone().map(|ca| {
            crate::hook::WebhookClients {
                ca,
                names: args.scale_webhook_client_name.clone(),
            }
        }),
        per_source,
        settle_delay: Duration::from_secs_f64(args.hook_settle_delay),
        max_concurrent: args.hook_max_concurrent,
        token_audiences: args.hook_token_audience.clone(),
        webhook_budget: Duration::from_secs_f64(args.scale_webhook_budget),
        webhook_ca: args.scale_webhook_ca,
        tls: hook_tls(args),
        ..HookConfig::default()
    })
}

/// Checks the hook's settle delay, the webhook's time budget and the
/// hook's concurrency.
fn check_hook_limits(args: &RunArgs) -> Result<(), CliError> {
    if !(args.hook_settle_delay.is_finite() && args.hook_settle_delay >= 0.0) {
        return Err(CliError::bad_input(
            "--hook-settle-delay must be a number of seconds >= 0",
        ));
    }
    if !(args.scale_webhook_budget.is_finite()
        && args.scale_webhook_budget > 0.0
        && args.scale_webhook_budget <= 30.0)
    {
        return Err(CliError::bad_input(
            "--scale-webhook-budget must be a number of seconds above 0 and at most 30 (the longest webhook timeout)",
        ));
    }
    if args.hook_max_concurrent == 0 {
        return Err(CliError::bad_input(
            "--hook-max-concurrent must be at least 1",
        ));
    }
    Ok(())
}

/// Checks `--hook-service-name` is a DNS label: the self-issued
/// certificate names the Service.
fn check_service_name(service: &str) -> Result<(), CliError> {
    if service.is_empty()
        || service.len() > 63
        || !service
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || service.starts_with('-')
        || service.ends_with('-')
    {
        return Err(CliError::bad_input(format!(
            "--hook-service-name {service:?} is not a Service name (a DNS label: a-z, 0-9, '-')"
        )));
    }
    Ok(())
}

/// The hook's limit per caller; `None` when `--hook-source-qps` is 0.
fn per_source_rate(args: &RunArgs) -> Result<Option<crate::writes::Rate>, CliError> {
    if args.hook_source_qps == 0.0 {
        return Ok(None);
    }
    crate::writes::Rate::new(
        "--hook-source-qps/--hook-source-burst",
        args.hook_source_qps,
        args.hook_source_burst,
    )
    .map(Some)
    .map_err(CliError::bad_input)
}

/// Checks the webhook's own port and its client authentication flags.
fn check_webhook_flags(args: &RunArgs) -> Result<(), CliError> {
    if let (Some(hook), Some(webhook)) = (args.hook_addr, args.scale_webhook_addr) {
        if hook == webhook {
            return Err(CliError::bad_input(format!(
                "--scale-webhook-addr {webhook} is --hook-addr: give the webhook another port, or leave the flag out to serve both on one"
            )));
        }
    }
    if let Some(name) = args
        .scale_webhook_client_name
        .iter()
        .find(|n| n.trim().is_empty())
    {
        return Err(CliError::bad_input(format!(
            "--scale-webhook-client-name {name:?}: a name is needed (the certificate's subject CN or a DNS name)"
        )));
    }
    // a bad CA file stops the start here, before the cluster is contacted
    if let Some(ca) = &args.scale_webhook_client_ca {
        crate::hook::tls::client_roots(ca).map_err(CliError::bad_input)?;
    }
    Ok(())
}

/// How the hook serves: the given certificate, plain HTTP, or a
/// certificate it issues itself for its Service.
fn hook_tls(args: &RunArgs) -> HookTls {
    match (args.hook_tls_cert.clone(), args.hook_tls_key.clone()) {
        (Some(cert), Some(key)) => HookTls::Files(TlsFiles { cert, key }),
        _ if args.hook_insecure_http => HookTls::PlainHttp,
        _ => HookTls::SelfIssued {
            service: args.hook_service_name.clone(),
            namespace: std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty()),
        },
    }
}

/// A flag's seconds as a duration: finite and above zero, else a bad-input
/// error naming the flag.
fn seconds(flag: &str, value: f64) -> Result<Duration, CliError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            CliError::bad_input(format!(
                "{flag}: {value} is not a number of seconds above 0"
            ))
        })
}
