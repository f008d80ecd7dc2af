//! `deletion-cost crd`.

use super::CliError;

/// Flags of `crd`.
#[derive(Debug, clap::Args)]
pub struct CrdArgs {}

/// Runs `crd`.
pub fn run(_args: CrdArgs) -> Result<(), CliError> {
    Err(CliError::failure("crd is not built yet"))
}
