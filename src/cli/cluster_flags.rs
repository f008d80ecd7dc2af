//! Flags that describe the cluster's controller-manager, shared by `plan`,
//! `predict` and `run`: its clock and its feature gates.

use k8s_openapi::jiff::Timestamp;

use super::CliError;
use crate::comparator::{choose_gates, FeatureGates, GateChoice, KubeVersion};
use crate::input::ServerVersion;

/// `--feature-gates` and `--kubernetes-version`: the gates of the cluster's
/// controller-manager.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GateFlags {
    /// Gate overrides, e.g. `PodDeletionCost=false,LogarithmicScaleDown=true`.
    #[arg(long, value_name = "GATES")]
    pub feature_gates: Option<String>,
    /// Server version whose gate defaults apply (before --feature-gates), e.g. 1.30.
    #[arg(long, value_name = "X.Y")]
    pub kubernetes_version: Option<String>,
}

impl GateFlags {
    /// The parsed version (if given) and the gates in force.
    pub fn resolve(&self) -> Result<(Option<KubeVersion>, FeatureGates), CliError> {
        let version = parse_version(self.kubernetes_version.as_deref())?;
        Ok((version, gates(version, self.feature_gates.as_deref())?))
    }

    /// The gates for a cluster whose version an input carries: the flags
    /// override it.
    pub fn choose(&self, detected: Option<&ServerVersion>) -> Result<GateChoice, CliError> {
        let flag_version = parse_version(self.kubernetes_version.as_deref())?;
        choose_gates(
            flag_version,
            detected.map(|v| v.version),
            self.feature_gates.as_deref(),
        )
        .map_err(|e| {
            let from = match (flag_version, detected) {
                (None, Some(v)) => {
                    format!(" (the cluster's version: {} in {})", v.git_version, v.at)
                }
                _ => String::new(),
            };
            CliError::bad_input(format!("--feature-gates: {e}{from}"))
        })
    }
}

/// The stderr note when no version was known: one short line. The newest
/// defaults are those of every version from 1.22 on, so only an older
/// cluster orders otherwise.
pub fn default_gates_note(choice: &GateChoice, input: &str) -> Option<String> {
    choice.version.is_none().then(|| {
        format!(
            "no Kubernetes version in {input}: 1.22+ gate defaults apply \
             (--kubernetes-version X.Y if older)"
        )
    })
}

/// Parses `--now` (RFC 3339), or returns `default` when absent.
pub fn parse_now(now: Option<&str>, default: Timestamp) -> Result<Timestamp, CliError> {
    match now {
        None => Ok(default),
        Some(s) => s.trim().parse::<Timestamp>().map_err(|_| {
            // the parser's own words name its internals ("four digit
            // integer as year"); say what is missing instead
            use k8s_openapi::jiff::civil;
            let t = s.trim();
            let has_time = t.contains(['T', 't', ' ']);
            let why = if !has_time && t.parse::<civil::Date>().is_ok() {
                "a date without a time of day"
            } else if t.parse::<civil::DateTime>().is_ok() {
                "no UTC offset (add Z for UTC, or one such as +01:00)"
            } else {
                "not a date and time"
            };
            CliError::bad_input(format!(
                "--now {s:?}: {why}; expected an RFC 3339 time such as 2025-01-31T12:00:00Z"
            ))
        }),
    }
}

/// Parses `--kubernetes-version`.
pub fn parse_version(version: Option<&str>) -> Result<Option<KubeVersion>, CliError> {
    version
        .map(str::parse::<KubeVersion>)
        .transpose()
        .map_err(|e| CliError::bad_input(format!("--kubernetes-version: {e}")))
}

/// Gate defaults of the version (current defaults without one), with
/// `--feature-gates` overrides on top.
pub fn gates(
    version: Option<KubeVersion>,
    overrides: Option<&str>,
) -> Result<FeatureGates, CliError> {
    let base = version.map_or_else(FeatureGates::default, FeatureGates::defaults_for);
    match overrides {
        None => Ok(base),
        Some(spec) => base
            .apply_overrides(spec, version)
            .map_err(|e| CliError::bad_input(format!("--feature-gates: {e}"))),
    }
}

/// `--scale-down-by N`, the same for `plan` and `predict`: a whole number
/// of pods, 0 or more.
pub fn parse_pod_count(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .map_err(|_| format!("expected a number of pods, a whole number from 0 up; found {s:?}"))
}

/// `--max-pods N`: a whole number of pods, said as `--scale-down-by`'s.
pub fn parse_pod_limit(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("expected a number of pods, a whole number from 0 up; found {s:?}"))
}
