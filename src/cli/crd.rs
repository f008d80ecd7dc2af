//! `deletion-cost crd`.

use super::CliError;
use crate::input::crd_yaml;

/// Flags of `crd`.
#[derive(Debug, clap::Args)]
pub struct CrdArgs {}

/// Runs `crd`: prints the CustomResourceDefinition generated from the Rust types.
pub fn run(_args: CrdArgs) -> Result<(), CliError> {
    let yaml = crd_yaml().map_err(CliError::failure)?;
    super::print_out(&yaml)
}
