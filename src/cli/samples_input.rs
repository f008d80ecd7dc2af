//! Signal samples for `plan`: from a saved file or a live Prometheus.

use std::time::Duration;

use super::CliError;
use crate::plan::{ResolvedPolicy, SignalSpec};
use crate::policy::LabelSelector;
use crate::signals::prometheus::{render_query, FetchOptions, PrometheusClient, DEFAULT_TIMEOUT};
use crate::signals::samples::{read_samples, SignalSpec as SampleSignal};
use crate::signals::SignalSamples;

fn utilization_signals(policy: &ResolvedPolicy) -> Vec<(usize, &SignalSpec)> {
    policy
        .signals
        .iter()
        .enumerate()
        .filter(|(_, (s, _))| matches!(s, SignalSpec::Utilization { .. }))
        .map(|(i, (s, _))| (i, s))
        .collect()
}

/// Reads a samples file for every utilisation signal of the policy. Saved
/// samples are judged stale against `now_secs` only when the file carries
/// sample times.
pub fn load(
    source: &str,
    text: &str,
    policy: &ResolvedPolicy,
    now_secs: Option<f64>,
) -> Result<SignalSamples, CliError> {
    let specs: Vec<SampleSignal> = utilization_signals(policy)
        .into_iter()
        .filter_map(|(index, s)| match s {
            SignalSpec::Utilization {
                pod_label,
                max_age_secs,
                ..
            } => Some(SampleSignal {
                index,
                pod_label: pod_label.clone(),
                max_age_secs: Some(*max_age_secs),
            }),
            _ => None,
        })
        .collect();
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
pub fn query(url: &str, policy: &ResolvedPolicy) -> Result<SignalSamples, CliError> {
    let client = PrometheusClient::new(url).map_err(CliError::bad_input)?;
    let labels = match &policy.target {
        crate::plan::Target::Selector(LabelSelector { match_labels, .. }) => match_labels.clone(),
        crate::plan::Target::Workload { .. } => Default::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("starting the async runtime: {e}")))?;
    let mut out = SignalSamples::default();
    for (index, s) in utilization_signals(policy) {
        let SignalSpec::Utilization {
            query,
            pod_label,
            max_age_secs,
            ..
        } = s
        else {
            continue;
        };
        let rendered = render_query(query, &policy.namespace, &labels).map_err(|e| {
            CliError::bad_input(format!(
                "spec.signals[{index}].utilization.prometheus.query: {e}"
            ))
        })?;
        let opts = FetchOptions {
            timeout: DEFAULT_TIMEOUT,
            max_age: Some(Duration::from_secs_f64(*max_age_secs)),
            ..Default::default()
        };
        let fetched = runtime
            .block_on(client.fetch_utilization(&rendered, pod_label, &opts))
            .map_err(|e| CliError::failure(format!("--prometheus {url}: {e}")))?;
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
