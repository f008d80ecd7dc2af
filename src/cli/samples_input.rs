//! Signal samples for `plan`: from a file or a live Prometheus.

use super::CliError;
use crate::plan::{ResolvedPolicy, SignalSpec};
use crate::signals::{SignalSamples, UtilizationSamples};

/// Parses a saved Prometheus instant-query response for every utilisation signal.
pub fn load(source: &str, text: &str, policy: &ResolvedPolicy) -> Result<SignalSamples, CliError> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| CliError::bad_input(format!("{source}: not valid JSON: {e}")))?;
    let result = v
        .pointer("/data/result")
        .and_then(|r| r.as_array())
        .ok_or_else(|| CliError::bad_input(format!("{source}: data.result: missing")))?;
    let series = result.iter().filter_map(|s| {
        let pod = s.pointer("/metric/pod")?.as_str()?.to_string();
        let value = s.pointer("/value/1")?.as_str()?.parse::<f64>().ok()?;
        Some((pod, value, None))
    });
    let samples = UtilizationSamples::from_series(series, None, None);
    let mut out = SignalSamples::default();
    for (i, (s, _)) in policy.signals.iter().enumerate() {
        if matches!(s, SignalSpec::Utilization { .. }) {
            out.utilization.insert(i, samples.clone());
        }
    }
    Ok(out)
}

/// Queries Prometheus (not wired yet).
pub fn query(url: &str, _policy: &ResolvedPolicy) -> Result<SignalSamples, CliError> {
    Err(CliError::failure(format!(
        "--prometheus {url}: querying Prometheus is not wired yet"
    )))
}
