//! Signals that feed a pod's cost: the node's billing class, utilisation from
//! Prometheus, node consolidation and zone balance. Everything here is pure:
//! `query` renders a signal's PromQL template and `samples` parses saved
//! samples and Prometheus answers; the HTTP client that sends the query is
//! the shell's `crate::prometheus`.

pub mod billing;
pub mod utilization;

use std::collections::BTreeMap;

pub mod query;
pub mod samples;

/// One pod's utilisation sample after validation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "value")]
pub enum Sample {
    /// A usable value.
    Value(f64),
    /// Present but unusable: the policy's `onSignalMissing` applies.
    Unusable(SampleProblem),
}

/// Why a sample cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SampleProblem {
    /// NaN.
    NaN,
    /// +Inf or -Inf.
    Infinite,
    /// Several series for one pod.
    Duplicate,
    /// Older than the policy's `maxAge`.
    Stale,
}

impl std::fmt::Display for SampleProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SampleProblem::NaN => "value is NaN",
            SampleProblem::Infinite => "value is infinite",
            SampleProblem::Duplicate => "several series for the pod",
            SampleProblem::Stale => "sample is stale",
        })
    }
}

/// Utilisation samples of one signal, by pod name (pods absent from the map
/// had no series).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct UtilizationSamples {
    /// Pod name -> sample.
    pub by_pod: BTreeMap<String, Sample>,
}

impl UtilizationSamples {
    /// Builds samples from (pod, value, sample time) triples: duplicates,
    /// NaN, infinities and samples older than `max_age_secs` before `now_secs`
    /// become [`Sample::Unusable`].
    pub fn from_series(
        series: impl IntoIterator<Item = (String, f64, Option<f64>)>,
        now_secs: Option<f64>,
        max_age_secs: Option<f64>,
    ) -> Self {
        let mut by_pod: BTreeMap<String, Sample> = BTreeMap::new();
        for (pod, value, at) in series {
            let sample = if value.is_nan() {
                Sample::Unusable(SampleProblem::NaN)
            } else if value.is_infinite() {
                Sample::Unusable(SampleProblem::Infinite)
            } else if matches!((now_secs, max_age_secs, at), (Some(n), Some(m), Some(t)) if n - t > m)
            {
                Sample::Unusable(SampleProblem::Stale)
            } else {
                Sample::Value(value)
            };
            by_pod
                .entry(pod)
                .and_modify(|s| *s = Sample::Unusable(SampleProblem::Duplicate))
                .or_insert(sample);
        }
        Self { by_pod }
    }
}

/// Signal samples for a plan: one entry per utilisation signal, by its index
/// in the policy's `signals`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SignalSamples {
    /// Signal index -> samples.
    pub utilization: BTreeMap<usize, UtilizationSamples>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_validation() {
        let s = UtilizationSamples::from_series(
            vec![
                ("a".to_string(), 0.5, Some(100.0)),
                ("b".to_string(), f64::NAN, Some(100.0)),
                ("c".to_string(), f64::INFINITY, Some(100.0)),
                ("d".to_string(), 1.0, Some(100.0)),
                ("d".to_string(), 2.0, Some(100.0)),
                ("e".to_string(), 1.0, Some(10.0)),
            ],
            Some(120.0),
            Some(60.0),
        );
        assert_eq!(s.by_pod["a"], Sample::Value(0.5));
        assert_eq!(s.by_pod["b"], Sample::Unusable(SampleProblem::NaN));
        assert_eq!(s.by_pod["c"], Sample::Unusable(SampleProblem::Infinite));
        assert_eq!(s.by_pod["d"], Sample::Unusable(SampleProblem::Duplicate));
        assert_eq!(s.by_pod["e"], Sample::Unusable(SampleProblem::Stale));
    }
}
