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
/// samples are judged stale against `now_secs` (`None`: never) when the
/// file carries sample times.
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
    // said as notes and warnings, never as log lines: `-q` silences the notes
    if specs.is_empty() {
        super::stderr::note(&format!(
            "policy {}: it has no utilization signal, so the samples in {source} are not used",
            policy.key()
        ));
        return Ok(SignalSamples::default());
    }
    let loaded = read_samples(source, text, &specs, now_secs).map_err(CliError::bad_input)?;
    for (index, n) in &loaded.without_pod_label {
        let label = utilization_signals(policy)
            .into_iter()
            .find(|(i, _)| i == index)
            .map_or("pod", |(_, u)| u.pod_label.as_str());
        super::stderr::warn(&format!(
            "policy {}: spec.signals[{index}] (utilization): {n} series in {source} have no \
             {label} label (podLabel) and are not used",
            policy.key()
        ));
    }
    Ok(loaded.samples)
}

/// Where a command's `now` came from, as its warnings say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NowFrom {
    /// `--now`.
    Flag,
    /// The moment the bundled example records (`plan` with no files).
    Example,
    /// The current time.
    Clock,
}

/// A warning for each utilisation signal whose every sample in `source` is
/// stale as of `now` (RFC 3339): none of them is used, so the plan is not the
/// one the file's time would give.
pub fn stale_warnings(
    source: &str,
    policy: &NamedPolicy,
    samples: &SignalSamples,
    now: &str,
    now_from: NowFrom,
) -> Vec<String> {
    use crate::signals::{Sample, SampleProblem};
    let mut out = Vec::new();
    for (index, u) in utilization_signals(policy) {
        let Some(got) = samples.utilization.get(&index) else {
            continue;
        };
        let all_stale = !got.by_pod.is_empty()
            && got
                .by_pod
                .values()
                .all(|s| *s == Sample::Unusable(SampleProblem::Stale));
        if all_stale {
            let (from, hint) = match now_from {
                NowFrom::Flag => ("--now", "check --now"),
                NowFrom::Example => (
                    "the bundled example's time",
                    "give --now <time> to plan as of when they were taken",
                ),
                NowFrom::Clock => (
                    "the current time",
                    "give --now <time> to plan as of when they were taken",
                ),
            };
            out.push(format!(
                "spec.signals[{index}] (utilization): all {} samples in {source} are older than maxAge ({}s) as of {now} ({from}): none is used and onSignalMissing applies; {hint}",
                got.by_pod.len(),
                u.max_age.as_secs(),
            ));
        }
    }
    out
}

/// Queries Prometheus once per utilisation signal of the policy.
pub fn query(url: &str, policy: &NamedPolicy) -> Result<SignalSamples, CliError> {
    let client = PrometheusClient::new(url).map_err(|e| match e {
        crate::prometheus::PromError::InvalidUrl { message, .. } => {
            let why = message
                .strip_prefix("failed to build Prometheus server base URL: ")
                .unwrap_or(&message);
            CliError::bad_input(format!(
                "--prometheus {url}: not a Prometheus URL such as http://prometheus:9090 ({why})"
            ))
        }
        other => CliError::bad_input(other),
    })?;
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
        super::stderr::note(&format!(
            "policy {}: spec.signals[{index}] (utilization): Prometheus answered {} series in {} ms",
            policy.key(),
            fetched.meta.series,
            fetched.meta.elapsed.as_millis()
        ));
        out.utilization.insert(index, fetched.samples);
    }
    Ok(out)
}

/// Warnings for what a samples file holds that the plan cannot use as the
/// user may think: samples of pods the policy does not select (another
/// namespace or Deployment, or pods gone: not used), and negative values
/// (no utilisation is below 0: they count in the lowest bucket). `planned`
/// names the pods the policy selects. One line per signal and kind, the
/// first ten pods named.
pub fn content_warnings(
    source: &str,
    policy: &NamedPolicy,
    samples: &SignalSamples,
    planned: &std::collections::BTreeSet<&str>,
) -> Vec<String> {
    use crate::signals::Sample;
    use crate::text::{capped_list, LISTED};
    let mut out = Vec::new();
    for (index, _) in utilization_signals(policy) {
        let Some(got) = samples.utilization.get(&index) else {
            continue;
        };
        let unknown: Vec<&str> = got
            .by_pod
            .keys()
            .map(String::as_str)
            .filter(|pod| !planned.contains(pod))
            .collect();
        if !unknown.is_empty() {
            out.push(format!(
                "spec.signals[{index}] (utilization): {} sample(s) in {source} are of pods the \
                 policy does not select, and are not used: {} (another namespace or workload, \
                 or pods gone?)",
                unknown.len(),
                capped_list(&unknown, LISTED)
            ));
        }
        let negative: Vec<String> = got
            .by_pod
            .iter()
            .filter_map(|(pod, s)| match s {
                Sample::Value(v) if *v < 0.0 => Some(format!("{pod} {v:.3e}")),
                _ => None,
            })
            .collect();
        if !negative.is_empty() {
            out.push(format!(
                "spec.signals[{index}] (utilization): {} sample(s) in {source} are negative, \
                 which no utilisation is; they count in the lowest bucket: {}",
                negative.len(),
                capped_list(&negative, LISTED)
            ));
        }
    }
    out
}
