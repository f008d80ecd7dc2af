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
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    match shell {
        clap_complete::Shell::Bash => bash_states_respelled(&text, BIN),
        clap_complete::Shell::Fish => with_fish_positionals(text, &Cli::command()),
        _ => text,
    }
}

/// clap_complete's fish script completes options only ("the fish generator
/// currently only supports named options"): `completion <TAB>` offered file
/// names. A subcommand's positional with a fixed set of values (the shells
/// of `completion`) gets its own line, in the generated script's terms.
fn with_fish_positionals(mut script: String, cli: &clap::Command) -> String {
    let using = format!("__fish_{}_using_subcommand", BIN.replace('-', "_"));
    if !script.contains(&format!("function {using}")) {
        return script;
    }
    for sub in cli.get_subcommands() {
        for arg in sub.get_positionals() {
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if values.is_empty() {
                continue;
            }
            script.push_str(&format!(
                "complete -c {BIN} -n \"{using} {}\" -f -a \"{}\"\n",
                sub.get_name(),
                values.join(" ")
            ));
        }
    }
    script
}

/// The binary's name, as the scripts complete it.
const BIN: &str = "deletion-cost";

/// clap_complete's bash script spells a subcommand's state two ways when
/// the binary's name holds a hyphen (clap-rs/clap#6421, open in 4.6.11): the
/// loop over the words sets `cmd="deletion__cost__subcmd__plan"`, the case
/// that offers the flags matches `deletion__subcmd__cost__subcmd__plan)`,
/// so no flag or value of any subcommand completed. The case labels are
/// respelled the loop's way; once clap spells both alike this changes nothing.
fn bash_states_respelled(script: &str, bin: &str) -> String {
    let wrong = format!("{}__subcmd__", bin.replace('-', "__subcmd__"));
    let right = format!("{}__subcmd__", bin.replace('-', "__"));
    if wrong == right {
        return script.to_string();
    }
    script.replace(&wrong, &right)
}

/// Runs `completion`.
pub fn run(args: CompletionArgs) -> Result<(), CliError> {
    super::print_out(&script(args.shell))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state the bash loop sets has its case in the script, and every
    /// case is a state the loop can reach.
    #[test]
    fn bash_states_set_and_matched_alike() {
        let script = script(Shell::Bash);
        let set: std::collections::BTreeSet<&str> = script
            .lines()
            .filter_map(|l| l.trim().strip_prefix("cmd=\""))
            .filter_map(|l| l.strip_suffix('"'))
            .filter(|state| !state.is_empty())
            .collect();
        let matched: std::collections::BTreeSet<&str> = script
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("deletion__") && l.ends_with(')') && !l.contains(','))
            .map(|l| l.trim_end_matches(')'))
            .collect();
        assert!(set.contains("deletion__cost__subcmd__plan"), "{set:?}");
        assert_eq!(set, matched, "states set by the loop vs. case labels");
    }

    #[test]
    fn respelling_leaves_names_without_a_hyphen_alone() {
        let s = "cmd=\"a__subcmd__b\"\n        a__subcmd__b)";
        assert_eq!(bash_states_respelled(s, "a"), s);
        assert_eq!(
            bash_states_respelled("x__subcmd__y__subcmd__plan)", "x-y"),
            "x__y__subcmd__plan)"
        );
    }
}
