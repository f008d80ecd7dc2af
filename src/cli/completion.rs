//! `deletion-cost completion bash|zsh|fish`: a shell completion script,
//! generated from the same clap definitions as the parser.

use clap::CommandFactory;

use super::{Cli, CliError};

/// A shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// `source <(deletion-cost completion bash)`
    Bash,
    /// `deletion-cost completion zsh > "${fpath[1]}/_deletion-cost"`
    Zsh,
    /// `deletion-cost completion fish | source`
    Fish,
}

/// Flags of `completion`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "Load it in the current shell:\n\n  \
bash: source <(deletion-cost completion bash)\n  \
zsh:  source <(deletion-cost completion zsh)\n  \
fish: deletion-cost completion fish | source")]
pub struct CompletionArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The script for `shell`.
pub fn script(shell: Shell) -> String {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "deletion-cost", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `completion`.
pub fn run(args: CompletionArgs) -> Result<(), CliError> {
    super::print_out(&script(args.shell))
}
