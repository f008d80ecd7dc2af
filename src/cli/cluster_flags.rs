//! Flags that describe the cluster's controller-manager, shared by `plan`,
//! `predict` and `run`: its clock and its feature gates.

use k8s_openapi::jiff::Timestamp;

use super::CliError;
use crate::comparator::{FeatureGates, KubeVersion};

/// Parses `--now` (RFC 3339), or returns `default` when absent.
pub fn parse_now(now: Option<&str>, default: Timestamp) -> Result<Timestamp, CliError> {
    match now {
        None => Ok(default),
        Some(s) => s.trim().parse::<Timestamp>().map_err(|e| {
            CliError::bad_input(format!(
                "--now {s:?}: expected an RFC 3339 time such as 2025-01-31T12:00:00Z: {e}"
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

/// `--kubernetes-version` and `--feature-gates` together.
pub fn gates_from_flags(
    version: Option<&str>,
    overrides: Option<&str>,
) -> Result<FeatureGates, CliError> {
    gates(parse_version(version)?, overrides)
}
