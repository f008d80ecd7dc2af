//! Command-line interface: clap definitions and dispatch. Each subcommand's
//! module parses its flags, calls the pure core and formats the answer.

pub mod cluster_flags;
pub mod completion;
pub mod crd;
pub mod explain;
pub mod live;
pub mod plan;
pub mod predict;
pub mod prescale;
pub mod run;
pub mod samples_input;
pub mod scale_in;
pub mod source;
pub mod stderr;
pub mod table;
pub mod version;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Exit code for bad input (files, flags, policy fields).
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for failures at run time (network, API server).
pub const EXIT_FAILURE: u8 = 1;

/// Sets `controller.kubernetes.io/pod-deletion-cost` from a per-namespace
/// policy and checks the scale-in order Kubernetes will really use.
#[derive(Debug, Parser)]
#[command(name = "deletion-cost", version, about, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "DELETION_COST_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the order the ReplicaSet controller will delete pods in, and why.
    #[command(long_about = predict::LONG_ABOUT)]
    Predict(predict::PredictArgs),
    /// Dry-run a policy over a cluster snapshot: costs, patches, predicted victims.
    Plan(plan::PlanArgs),
    /// One pod: its place in its ReplicaSet's deletion order, the rule that
    /// places it, its cost and where that came from.
    Explain(explain::ExplainArgs),
    /// Print the DeletionCostPolicy CustomResourceDefinition as YAML.
    Crd(crd::CrdArgs),
    /// Run the operator: watch policies, pods, nodes; write costs; check the order.
    Run(Box<run::RunArgs>),
    /// Before a scale-in: make the operator write fresh costs now and report the victims.
    Prescale(prescale::PrescaleArgs),
    /// Remove the pods named: make them the next to go, scale in by their
    /// number, and report which pods the controller deleted.
    ScaleIn(scale_in::ScaleInArgs),
    /// Print the version, the git commit and the Kubernetes versions covered.
    Version(version::VersionArgs),
    /// Print a shell completion script (bash, zsh or fish).
    Completion(completion::CompletionArgs),
}

/// An error at the CLI edge: a message for the user and an exit code.
#[derive(Debug)]
pub struct CliError {
    /// Exit status.
    pub code: u8,
    /// What to print on stderr.
    pub message: String,
}

impl CliError {
    /// Bad input: exit 2.
    pub fn bad_input(message: impl std::fmt::Display) -> Self {
        Self {
            code: EXIT_BAD_INPUT,
            message: message.to_string(),
        }
    }

    /// Run-time failure: exit 1.
    pub fn failure(message: impl std::fmt::Display) -> Self {
        Self {
            code: EXIT_FAILURE,
            message: message.to_string(),
        }
    }
}

/// Sets up logging to stderr: colour only on a terminal without `NO_COLOR`;
/// the CLI's own notes, warnings and errors ([`stderr`]) follow the same format.
pub fn init_logging(format: LogFormat) {
    stderr::set_format(format);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(stderr::use_colour())
        .with_writer(std::io::stderr);
    // a second init (tests) is harmless
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Writes the whole output at once, so a failure never leaves partial
/// stdout; control characters from input are escaped ([`table::terminal_safe`]).
pub fn print_out(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let text = table::terminal_safe(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        // a closed pipe (`| head`) is not an error worth reporting
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failure(format!("writing stdout: {e}"))),
    }
}

/// Parses arguments, runs the command and maps errors to exit codes. Under
/// `--log-format json` every line on stderr is JSON: clap's usage errors,
/// the CLI's notes and errors, and a panic's message included.
pub fn run() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let early = stderr::format_from_args(
        &args,
        std::env::var("DELETION_COST_LOG_FORMAT").ok().as_deref(),
    );
    if early == LogFormat::Json {
        std::panic::set_hook(Box::new(|info| {
            stderr::set_format(LogFormat::Json);
            stderr::error(&format!("internal error (a bug): {info}"));
        }));
    }
    // no arguments at all: the help, on stdout, exit 0 (as kubectl and helm)
    if args.len() <= 1 {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        return match print_out(&help) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                stderr::error(&e.message);
                ExitCode::from(e.code)
            }
        };
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return clap_error(e, early),
    };
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Predict(args) => predict::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Crd(args) => crd::run(args),
        Command::Run(args) => run::run(*args),
        Command::Prescale(args) => prescale::run(args),
        Command::ScaleIn(args) => scale_in::run(args),
        Command::Version(args) => version::run(args),
        Command::Completion(args) => completion::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            stderr::error(&e.message);
            ExitCode::from(e.code)
        }
    }
}

/// Help and version go to stdout as clap prints them; what clap writes to
/// stderr (usage errors) is one JSON line under `--log-format json`.
fn clap_error(e: clap::Error, format: LogFormat) -> ExitCode {
    let code = u8::try_from(e.exit_code()).unwrap_or(EXIT_BAD_INPUT);
    if format == LogFormat::Json && e.use_stderr() {
        stderr::set_format(LogFormat::Json);
        let text = e.render().to_string();
        let message = text
            .trim_end()
            .strip_prefix("error: ")
            .unwrap_or(text.trim_end());
        stderr::error(message);
        return ExitCode::from(code);
    }
    // clap colours only on a terminal and honours NO_COLOR
    let _ = e.print();
    ExitCode::from(code)
}
