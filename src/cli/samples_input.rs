//! Signal samples for `plan`: from a saved file or a live Prometheus.

use super::CliError;
use crate::plan::NamedPolicy;
use crate::policy::validate::Utilization;
use crate::prometheus::{PrometheusClient, SignalFetchError, DEFAULT_TIMEOUT};
use crate::signals::samples::{read_samples, SignalSpec as SampleSignal};
use crate::signals::SignalSamples;

fn utilization_signals(policy: &NamedPolicy) -> Vec<(usize, &Utilization)> {
    policy.spec.utilization_signals()
}

/// Reads a samples file for every utilisation signal of the policy. Saved
/// samples are judged stale against `now_secs` only when the file carries
/// sample times.
pub fn load(
    source: &str,
    text: &str,
    policy: &NamedPolicy,
    now_secs: Option<f64>,
) -> Result<SignalSamples, CliError> {
    let specs: Vec<SampleSignal> = utilization_signals(policy)
        .into_iter()
        .map(|(index, u)| SampleSignal {
            index,
            pod_label: u.pod_label.clone(),
            max_age_secs: Some(u.max_age.as_secs_f64()),
        })
        .collect();
    if specs.is_empty() {
        tracing::info!(policy = %policy.key(), "{source}: policy has no utilization signal; samples not used");
        return Ok(SignalSamples::default());
    }
    let loaded = read_samples(source, text, &specs, now_secs).map_err(CliError::bad_input)?;
    for (index, n) in &loaded.without_pod_label {
        tracing::warn!(
            signal = index,
            series = n,
            "{source}: series without the pod label ignored"
        );
    }
    Ok(loaded.samples)
}

/// Queries Prometheus once per utilisation signal of the policy.
pub fn query(url: &str, policy: &NamedPolicy) -> Result<SignalSamples, CliError> {
    let client = PrometheusClient::new(url).map_err(CliError::bad_input)?;
    let labels = policy.spec.selector_labels();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("starting the async runtime: {e}")))?;
    let mut out = SignalSamples::default();
    for (index, u) in utilization_signals(policy) {
        let fetched = runtime
            .block_on(client.fetch_signal(u, &policy.namespace, &labels, DEFAULT_TIMEOUT))
            .map_err(|e| match e {
                SignalFetchError::Query(e) => CliError::bad_input(format!(
                    "spec.signals[{index}].utilization.prometheus.query: {e}"
                )),
                SignalFetchError::Prometheus(e) => {
                    CliError::failure(format!("--prometheus {url}: {e}"))
                }
            })?;
        tracing::info!(
            signal = index,
            series = fetched.meta.series,
            elapsed_ms = fetched.meta.elapsed.as_millis() as u64,
            "queried Prometheus"
        );
        out.utilization.insert(index, fetched.samples);
    }
    Ok(out)
}
