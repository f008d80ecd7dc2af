//! `deletion-cost predict`.

use super::CliError;

/// Flags of `predict`.
#[derive(Debug, clap::Args)]
pub struct PredictArgs {}

/// Runs `predict`.
pub fn run(_args: PredictArgs) -> Result<(), CliError> {
    Err(CliError::failure("predict is not built yet"))
}
