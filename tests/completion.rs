//! `deletion-cost completion bash|zsh|fish` as a user meets it: each script
//! is loaded into its real shell and asked to complete, through the function
//! the script registers (bash: the `complete -F` function with `COMP_WORDS`;
//! zsh: a TAB typed into an interactive `zsh -f` on a pseudo-terminal, with
//! compinit; fish: `complete -C`). For every subcommand, `SUB --` must offer
//! each of its long flags (clap's own list), and fixed values complete
//! (`plan -o `, `completion `).
//!
//! A shell that is not installed (Debian's `zsh` and `fish`;
//! `scripts/test.sh` installs them) has its checks reported as ignored,
//! never as passed.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::time::Instant;

use clap::CommandFactory;
use deletion_cost::cli::Cli;
use libtest_mimic::{Arguments, Failed, Trial};

const BIN: &str = "deletion-cost";

/// A shell the scripts are generated for.
#[derive(Debug, Clone, Copy)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    fn name(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }
}

/// The shell's executable on PATH.
fn find(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The script `deletion-cost completion SHELL` prints, written to `dir`.
fn script(shell: Shell, dir: &Path) -> Result<PathBuf, String> {
    let o = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(["completion", shell.name()])
        .output()
        .map_err(|e| format!("running deletion-cost completion: {e}"))?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    let file = dir.join(format!("deletion-cost.{}", shell.name()));
    std::fs::write(&file, &o.stdout).map_err(|e| e.to_string())?;
    Ok(file)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What the shell offers for `line` (the cursor at its end): one candidate
/// per entry, without descriptions.
fn complete(shell: Shell, line: &str) -> Result<Vec<String>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = script(shell, dir.path())?;
    let out = match shell {
        Shell::Bash => bash(&file, line, dir.path())?,
        Shell::Zsh => zsh(&file, line, dir.path())?,
        Shell::Fish => fish(&file, line, dir.path())?,
    };
    let mut found: Vec<String> = out
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// bash: the function `complete -p deletion-cost` names, called as bash
/// calls it, with `COMP_WORDS`, `COMP_CWORD`, `COMP_LINE` and `COMP_POINT`.
fn bash(file: &Path, line: &str, cwd: &Path) -> Result<String, String> {
    const DRIVER: &str = r#"
source "$1" || exit 3
spec=$(complete -p deletion-cost) || exit 4
fn=${spec##*-F }
fn=${fn%% *}
COMP_LINE=$2
COMP_POINT=${#COMP_LINE}
shift 2
COMP_WORDS=("$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
"$fn" deletion-cost "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if line.ends_with(' ') {
        words.push("");
    }
    let o = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", DRIVER, "bash"])
        .arg(file)
        .arg(line)
        .args(&words)
        .current_dir(cwd)
        .output()
        .map_err(|e| format!("running bash: {e}"))?;
    if !o.status.success() {
        return Err(format!("bash: {}", text(&o)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// zsh: an interactive `zsh -f` on a pseudo-terminal (zpty) loads compinit
/// and the script, and gets `line` and a TAB; `compadd` is wrapped to write
/// every match it is given to a file, and a post-completion hook says when
/// the completion is over.
fn zsh(file: &Path, line: &str, dir: &Path) -> Result<String, String> {
    const SETUP: &str = r#"
PROMPT=''
RPROMPT=''
autoload -Uz compinit && compinit -u -d "$CAPTURE.zcompdump"
source "$SCRIPT"
compadd() {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
        builtin compadd "$@"
        return $?
    fi
    typeset -a __hits
    builtin compadd -A __hits "$@"
    (( $#__hits )) && print -rl -- $__hits >> "$CAPTURE"
    builtin compadd "$@"
}
_capture_done() { print -r -- done > "$CAPTURE.done" }
comppostfuncs=(_capture_done)
bindkey '^I' complete-word
"#;
    const DRIVER: &str = r#"
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "source ${(q)1}"
zpty -w -n z "$2"$'\t'
for i in {1..400}; do
    [[ -e $CAPTURE.done ]] && break
    sleep 0.05
done
zpty -d z
[[ -e $CAPTURE.done ]] || { print -u2 "zsh completed nothing within 20 s"; exit 4 }
[[ -e $CAPTURE ]] && cat -- $CAPTURE
exit 0
"#;
    let setup = dir.join("setup.zsh");
    std::fs::write(&setup, SETUP).map_err(|e| e.to_string())?;
    let capture = dir.join("capture");
    let started = Instant::now();
    let o = Command::new("zsh")
        .args(["-f", "-c", DRIVER, "zsh"])
        .arg(&setup)
        .arg(line)
        .env("CAPTURE", &capture)
        .env("SCRIPT", file)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("running zsh: {e}"))?;
    if !o.status.success() {
        return Err(format!("zsh (after {:?}): {}", started.elapsed(), text(&o)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// fish: `complete -C LINE` after sourcing the script, no user config.
fn fish(file: &Path, line: &str, cwd: &Path) -> Result<String, String> {
    let o = Command::new("fish")
        .args([
            "--no-config",
            "-c",
            "source $argv[1]; or exit 3; complete -C $argv[2]",
        ])
        .arg(file)
        .arg(line)
        .current_dir(cwd)
        .output()
        .map_err(|e| format!("running fish: {e}"))?;
    if !o.status.success() {
        return Err(format!("fish: {}", text(&o)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `line` completes to at least `want` (and, when given, none of `never`).
fn offers(shell: Shell, line: &str, want: &[&str], never: &[&str]) -> Result<(), String> {
    let got = complete(shell, line)?;
    let missing: Vec<&&str> = want
        .iter()
        .filter(|w| !got.iter().any(|g| g == **w))
        .collect();
    let wrong: Vec<&&str> = never
        .iter()
        .filter(|w| got.iter().any(|g| g == **w))
        .collect();
    if missing.is_empty() && wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: `{line}<TAB>` offers {got:?}; missing {missing:?}; should not offer {wrong:?}",
            shell.name()
        ))
    }
}

/// Every subcommand's every long flag, as clap defines them, for `SUB --`.
fn every_flag_of_every_subcommand(shell: Shell) -> Result<(), String> {
    let cli = Cli::command();
    let mut failures = Vec::new();
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        let flags: Vec<String> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        let want: Vec<&str> = flags.iter().map(String::as_str).collect();
        if let Err(e) = offers(shell, &format!("{BIN} {} --", sub.get_name()), &want, &[]) {
            failures.push(e);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

/// Subcommand names, fixed values of options and of a positional, and
/// the flags a subcommand has (or not) in short form.
fn names_and_values(shell: Shell) -> Result<(), String> {
    offers(shell, &format!("{BIN} pl"), &["plan"], &[])?;
    offers(
        shell,
        &format!("{BIN} plan -o "),
        &["table", "json", "html"],
        &[],
    )?;
    offers(
        shell,
        &format!("{BIN} predict --output "),
        &["names", "json", "table"],
        &[],
    )?;
    offers(
        shell,
        &format!("{BIN} completion "),
        &["bash", "zsh", "fish"],
        &[],
    )?;
    // `run -n` as every other command has it; `explain` takes one pod, so no -A
    offers(shell, &format!("{BIN} run --"), &["--namespace"], &[])?;
    offers(
        shell,
        &format!("{BIN} explain --"),
        &["--namespace", "--snapshot"],
        &["--all-namespaces"],
    )
}

/// One check, run for each shell.
type Check = fn(Shell) -> Result<(), String>;

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let missing = find(shell.name()).is_none();
        if missing {
            eprintln!(
                "completion: {} not found: install Debian's {} (scripts/test.sh does); its checks are ignored",
                shell.name(),
                shell.name()
            );
        }
        let checks: [(&str, Check); 2] = [
            (
                "completes_every_flag_of_every_subcommand",
                every_flag_of_every_subcommand,
            ),
            ("completes_names_and_values", names_and_values),
        ];
        for (name, check) in checks {
            trials.push(
                Trial::test(format!("{}_{name}", shell.name()), move || {
                    check(shell).map_err(Failed::from)
                })
                .with_ignored_flag(missing),
            );
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
