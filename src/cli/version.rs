//! `deletion-cost version`: the crate version, the git commit it was built
//! from (set at build time by `build.rs`; `unknown` without git), and the
//! Kubernetes versions whose deletion order the comparator knows.

use super::CliError;
use crate::comparator::KubeVersion;

/// The commit the binary was built from, or `unknown`.
pub const COMMIT: &str = match option_env!("DELETION_COST_GIT_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// The first version with `controller.kubernetes.io/pod-deletion-cost`
/// (alpha, off): before it neither gate exists, which the comparator
/// orders as both off.
const FIRST: KubeVersion = KubeVersion::new(1, 21);

/// Flags of `version`.
#[derive(Debug, clap::Args)]
pub struct VersionArgs {}

/// The text `version` prints.
pub fn text() -> String {
    // the versions where the gates' defaults change (crates/core/src/comparator/gates.rs)
    let changes = [KubeVersion::V1_22, KubeVersion::V1_31, KubeVersion::V1_37];
    let newest = KubeVersion::V1_37;
    let changes: Vec<String> = changes.iter().map(ToString::to_string).collect();
    format!(
        "deletion-cost {}\n\
         commit: {COMMIT}\n\
         kubernetes: {FIRST} to {newest} and later (the gates PodDeletionCost and \
         LogarithmicScaleDown take each version's defaults; they change at {}); \
         with no version known, the {newest} defaults\n",
        env!("CARGO_PKG_VERSION"),
        changes.join(", "),
    )
}

/// Runs `version`.
pub fn run(_args: VersionArgs) -> Result<(), CliError> {
    super::print_out(&text())
}
