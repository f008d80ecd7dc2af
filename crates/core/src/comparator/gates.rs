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
    /// Turning off a gate that no longer exists in the given version.
    #[error("LogarithmicScaleDown no longer exists in Kubernetes {0}: it was removed in 1.37, where the log2 rule is always on, so it cannot be turned off")]
    Removed(String),
}

/// A Kubernetes `MAJOR.MINOR` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl KubeVersion {
    /// Both gates beta and on by default.
    pub const V1_22: Self = Self::new(1, 22);
    /// `LogarithmicScaleDown` GA, locked on.
    pub const V1_31: Self = Self::new(1, 31);
    /// `LogarithmicScaleDown` removed (always on).
    pub const V1_37: Self = Self::new(1, 37);

    /// `major.minor`.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
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
    /// beta (on) from 1.22; `PodDeletionCost` is still beta (on, may be
    /// turned off); `LogarithmicScaleDown` GA and locked on from 1.31 and
    /// gone (always on) from 1.37. Before 1.21 neither feature exists, which
    /// behaves as off.
    pub fn defaults_for(v: KubeVersion) -> Self {
        let on = v >= KubeVersion::V1_22;
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
                    match version {
                        Some(v) if !value && v >= KubeVersion::V1_37 => {
                            return Err(GateError::Removed(v.to_string()))
                        }
                        Some(v) if !value && v >= KubeVersion::V1_31 => {
                            return Err(GateError::Locked(v.to_string()))
                        }
                        _ => {}
                    }
                    self.logarithmic_scale_down = value
                }
                _ => return Err(GateError::Malformed(part.to_string())),
            }
        }
        Ok(self)
    }
}

impl KubeVersion {
    /// The version an API server reports (`/version`, or `serverVersion` of
    /// `kubectl version`): its `gitVersion` (`v1.36.2`, `v1.33.4-eks-1`)
    /// when that parses, else `major` and `minor` (managed services write
    /// minors such as `"33+"`).
    pub fn from_server(major: &str, minor: &str, git_version: &str) -> Result<Self, GateError> {
        git_version.parse().or_else(|_| {
            let digits =
                |s: &str| -> String { s.trim().chars().take_while(char::is_ascii_digit).collect() };
            format!("{}.{}", digits(major), digits(minor))
                .parse()
                .map_err(|_| {
                    GateError::BadVersion(format!(
                        "gitVersion {git_version:?}, major {major:?}, minor {minor:?}"
                    ))
                })
        })
    }
}

impl KubeVersion {
    /// The emulated version an API server reports beside its binary version
    /// (`emulationMajor`, `emulationMinor`, Kubernetes 1.31 and later):
    /// versioned feature gates take their defaults from it.
    pub fn emulated(major: Option<&str>, minor: Option<&str>) -> Option<Self> {
        let number = |s: Option<&str>| s?.trim().parse::<u32>().ok();
        Some(Self::new(number(major)?, number(minor)?))
    }
}

/// Where the comparator's gates came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GateSource {
    /// `--kubernetes-version` or `--feature-gates` was given.
    Flag,
    /// The cluster's version: read from the API server, or carried by the snapshot.
    Detected,
    /// No version known: the newest defaults.
    Default,
}

impl GateSource {
    /// `flag`, `detected` or `default` (log field and metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            GateSource::Flag => "flag",
            GateSource::Detected => "detected",
            GateSource::Default => "default",
        }
    }
}

/// The gates the comparator uses, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateChoice {
    /// The version whose defaults apply (`None`: the newest defaults).
    pub version: Option<KubeVersion>,
    /// Where the choice came from.
    pub source: GateSource,
    /// The gates in force.
    pub gates: FeatureGates,
}

/// Picks the gates: the defaults of `--kubernetes-version` if given, else of
/// the detected version, else the newest; then `--feature-gates` on top,
/// checked against that version. Flags override what was detected.
pub fn choose(
    flag_version: Option<KubeVersion>,
    detected: Option<KubeVersion>,
    overrides: Option<&str>,
) -> Result<GateChoice, GateError> {
    let version = flag_version.or(detected);
    let base = version.map_or_else(FeatureGates::default, FeatureGates::defaults_for);
    let gates = match overrides {
        Some(spec) => base.apply_overrides(spec, version)?,
        None => base,
    };
    let source = if flag_version.is_some() || overrides.is_some() {
        GateSource::Flag
    } else if detected.is_some() {
        GateSource::Detected
    } else {
        GateSource::Default
    };
    Ok(GateChoice {
        version,
        source,
        gates,
    })
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

    #[test]
    fn removed_in_1_37() {
        let off = "LogarithmicScaleDown=false";
        for v in ["1.37", "1.38", "v1.40.1"] {
            let e = FeatureGates::default()
                .apply_overrides(off, Some(kv(v)))
                .unwrap_err();
            assert!(matches!(e, GateError::Removed(_)), "{v}: {e}");
            assert!(e.to_string().contains("no longer exists"), "{e}");
        }
        for v in ["1.31", "1.36"] {
            assert!(matches!(
                FeatureGates::default().apply_overrides(off, Some(kv(v))),
                Err(GateError::Locked(_))
            ));
        }
        // asking for what is always on is harmless
        assert_eq!(
            FeatureGates::default().apply_overrides("LogarithmicScaleDown=true", Some(kv("1.37"))),
            Ok(FeatureGates::default())
        );
        // PodDeletionCost is still beta: either value, any version
        let g = FeatureGates::default()
            .apply_overrides("PodDeletionCost=false", Some(kv("1.37")))
            .unwrap();
        assert!(!g.pod_deletion_cost && g.logarithmic_scale_down);
    }

    #[test]
    fn server_versions() {
        assert_eq!(
            KubeVersion::from_server("1", "36", "v1.36.2"),
            Ok(kv("1.36"))
        );
        // managed services: a suffixed minor, a gitVersion with a build tag
        assert_eq!(KubeVersion::from_server("1", "33+", ""), Ok(kv("1.33")));
        assert_eq!(
            KubeVersion::from_server("1", "33+", "v1.33.4-eks-9f2e1b"),
            Ok(kv("1.33"))
        );
        assert!(KubeVersion::from_server("", "", "").is_err());
        assert!(KubeVersion::from_server("one", "x", "main").is_err());
        assert_eq!(
            KubeVersion::emulated(Some("1"), Some("35")),
            Some(kv("1.35"))
        );
        assert_eq!(KubeVersion::emulated(Some("1"), None), None);
        assert_eq!(KubeVersion::emulated(Some("1"), Some("x")), None);
    }

    #[test]
    fn choices() {
        let v136 = Some(kv("1.36"));
        let c = choose(None, v136, None).unwrap();
        assert_eq!(
            (c.version, c.source, c.gates),
            (v136, GateSource::Detected, FeatureGates::default())
        );
        // nothing known: newest defaults
        let c = choose(None, None, None).unwrap();
        assert_eq!((c.version, c.source), (None, GateSource::Default));
        assert_eq!(c.gates, FeatureGates::default());
        // the flag's version wins over the detected one
        let c = choose(Some(kv("1.21")), v136, None).unwrap();
        assert_eq!((c.version, c.source), (Some(kv("1.21")), GateSource::Flag));
        assert!(!c.gates.pod_deletion_cost && !c.gates.logarithmic_scale_down);
        // overrides apply on the detected version's defaults
        let c = choose(None, Some(kv("1.21")), Some("PodDeletionCost=true")).unwrap();
        assert_eq!(c.source, GateSource::Flag);
        assert!(c.gates.pod_deletion_cost && !c.gates.logarithmic_scale_down);
        // and are checked against it
        assert_eq!(
            choose(None, Some(kv("1.37")), Some("LogarithmicScaleDown=false")),
            Err(GateError::Removed("1.37".into()))
        );
        assert_eq!(
            choose(
                Some(kv("1.30")),
                Some(kv("1.37")),
                Some("LogarithmicScaleDown=false")
            )
            .map(|c| c.gates.logarithmic_scale_down),
            Ok(false)
        );
        assert_eq!(GateSource::Detected.as_str(), "detected");
    }
}
