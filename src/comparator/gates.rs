//! The two feature gates the comparator reads, and their defaults per
//! Kubernetes minor version.

use std::fmt;

/// Feature gates that change the deletion order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FeatureGates {
    /// Rule 4: compare `controller.kubernetes.io/pod-deletion-cost`.
    pub pod_deletion_cost: bool,
    /// Rules 6 and 8: compare ready/creation times in log2 buckets, UID within a bucket.
    pub logarithmic_scale_down: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            pod_deletion_cost: true,
            logarithmic_scale_down: true,
        }
    }
}

/// Errors reading `--feature-gates` or `--kubernetes-version`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    /// A `Name=value` pair that is not one of ours or not a bool.
    #[error("feature gate {0:?}: expected PodDeletionCost=BOOL or LogarithmicScaleDown=BOOL")]
    Malformed(String),
    /// A version string that is not `MAJOR.MINOR`.
    #[error("kubernetes version {0:?}: expected MAJOR.MINOR such as 1.33")]
    BadVersion(String),
    /// Turning off a gate that the given version locks on.
    #[error("LogarithmicScaleDown is GA and locked on since Kubernetes 1.31; it cannot be disabled for {0}")]
    Locked(String),
}

/// A Kubernetes `MAJOR.MINOR` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for KubeVersion {
    type Err = GateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().trim_start_matches('v');
        let mut it = t.split('.');
        let major = it.next().and_then(|x| x.parse().ok());
        // accept "1.33", "1.33.2", "v1.33.2-eks-1"
        let minor = it.next().and_then(|x| {
            let digits: String = x.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        });
        match (major, minor) {
            (Some(major), Some(minor)) => Ok(Self { major, minor }),
            _ => Err(GateError::BadVersion(s.to_string())),
        }
    }
}

impl FeatureGates {
    /// Defaults of a given server version: both gates alpha (off) in 1.21,
    /// beta (on) from 1.22; `LogarithmicScaleDown` GA and locked on from 1.31.
    /// Before 1.21 neither feature exists, which behaves as off.
    pub fn defaults_for(v: KubeVersion) -> Self {
        let on = v
            >= KubeVersion {
                major: 1,
                minor: 22,
            };
        Self {
            pod_deletion_cost: on,
            logarithmic_scale_down: on,
        }
    }

    /// Applies a `--feature-gates` string (`Name=bool,Name=bool`) on top of `self`.
    pub fn apply_overrides(
        mut self,
        spec: &str,
        version: Option<KubeVersion>,
    ) -> Result<Self, GateError> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| GateError::Malformed(part.to_string()))?;
            let value: bool = match value.trim().to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(GateError::Malformed(part.to_string())),
            };
            match name.trim() {
                "PodDeletionCost" => self.pod_deletion_cost = value,
                "LogarithmicScaleDown" => {
                    if let Some(v) = version {
                        if !value
                            && v >= (KubeVersion {
                                major: 1,
                                minor: 31,
                            })
                        {
                            return Err(GateError::Locked(v.to_string()));
                        }
                    }
                    self.logarithmic_scale_down = value
                }
                _ => return Err(GateError::Malformed(part.to_string())),
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(s: &str) -> KubeVersion {
        s.parse().unwrap()
    }

    #[test]
    fn version_defaults() {
        assert_eq!(
            FeatureGates::defaults_for(kv("1.21")),
            FeatureGates {
                pod_deletion_cost: false,
                logarithmic_scale_down: false
            }
        );
        assert_eq!(
            FeatureGates::defaults_for(kv("1.22")),
            FeatureGates::default()
        );
        assert_eq!(
            FeatureGates::defaults_for(kv("v1.33.4-eks-1")),
            FeatureGates::default()
        );
        assert!("x".parse::<KubeVersion>().is_err());
    }

    #[test]
    fn overrides() {
        let g = FeatureGates::default()
            .apply_overrides("PodDeletionCost=false, LogarithmicScaleDown=FALSE", None)
            .unwrap();
        assert!(!g.pod_deletion_cost && !g.logarithmic_scale_down);
        assert!(FeatureGates::default()
            .apply_overrides("Foo=true", None)
            .is_err());
        assert!(FeatureGates::default()
            .apply_overrides("PodDeletionCost", None)
            .is_err());
        assert!(FeatureGates::default()
            .apply_overrides("PodDeletionCost=yes", None)
            .is_err());
        assert_eq!(
            FeatureGates::default().apply_overrides("LogarithmicScaleDown=false", Some(kv("1.31"))),
            Err(GateError::Locked("1.31".into()))
        );
        assert!(FeatureGates::default()
            .apply_overrides("LogarithmicScaleDown=false", Some(kv("1.30")))
            .is_ok());
    }
}
