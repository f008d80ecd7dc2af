//! `deletion-cost plan`.

use super::CliError;

/// Flags of `plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {}

/// Runs `plan`.
pub fn run(_args: PlanArgs) -> Result<(), CliError> {
    Err(CliError::failure("plan is not built yet"))
}
