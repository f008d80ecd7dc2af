//! Everything the CLI itself writes to stderr: notes, warnings and the final
//! error. Under `--log-format json` each is one JSON object per line, in the
//! shape of the tracing logs (`timestamp`, `level`, `fields.message`,
//! `target`), so a log pipeline reads stderr as a whole; under `text` they
//! are plain `note: `, `warning: `, `error: ` lines.
//!
//! Colour: the tracing logs carry ANSI codes only when stderr is a terminal
//! and `NO_COLOR` is unset or empty (<https://no-color.org>).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::LogFormat;

static FORMAT: OnceLock<LogFormat> = OnceLock::new();
static QUIET: AtomicBool = AtomicBool::new(false);

/// What a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something worth knowing (inactive pods left out...).
    Note,
    /// The answer may not be what the user expects.
    Warning,
    /// The command failed.
    Error,
}

impl Level {
    fn text_prefix(self) -> &'static str {
        match self {
            Level::Note => "note",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }

    fn json_level(self) -> &'static str {
        match self {
            Level::Note => "INFO",
            Level::Warning => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// Sets the format for the rest of the process (first call wins).
pub fn set_format(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// The format in force (`text` until set).
pub fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or(LogFormat::Text)
}

/// Whether logs on stderr may carry ANSI colour: stderr is a terminal and
/// `NO_COLOR` is unset or empty.
pub fn use_colour() -> bool {
    colour_allowed(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// The colour rule, pure.
pub fn colour_allowed(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// One stderr line (with its newline) in `format`, pure but for the clock.
pub fn render(format: LogFormat, level: Level, message: &str) -> String {
    match format {
        // what input put in a message is shown, not run by the terminal
        LogFormat::Text => format!(
            "{}: {}\n",
            level.text_prefix(),
            super::table::terminal_safe(message)
        ),
        LogFormat::Json => {
            // the keys in the order tracing's JSON lines have them
            let text = |s: &str| serde_json::Value::String(s.to_string());
            format!(
                "{{\"timestamp\":{},\"level\":{},\"fields\":{{\"message\":{}}},\"target\":\"deletion_cost::cli\"}}\n",
                text(&k8s_openapi::jiff::Timestamp::now().to_string()),
                text(level.json_level()),
                text(message),
            )
        }
    }
}

/// Writes one line to stderr in the format in force; an `(os error N)` a
/// library's message carries is left out (the words before it say it).
pub fn emit(level: Level, message: &str) {
    let line = render(format(), level, &crate::text::without_os_error(message));
    // nothing useful can be done when stderr itself is gone
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `note: ...`, unless `--quiet` ([`set_quiet`]).
pub fn note(message: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        emit(Level::Note, message);
    }
}

/// `--quiet`: notes are left out for the rest of the process; warnings and
/// errors still go out.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// `warning: ...`
pub fn warn(message: &str) {
    emit(Level::Warning, message);
}

/// `error: ...`
pub fn error(message: &str) {
    emit(Level::Error, message);
}

/// The `--log-format` the command line asks for, read before clap parses it
/// so that even clap's own errors follow it: the last `--log-format X` or
/// `--log-format=X`, else `DELETION_COST_LOG_FORMAT`, else text.
pub fn format_from_args(args: &[std::ffi::OsString], env: Option<&str>) -> LogFormat {
    let mut found: Option<&str> = None;
    let mut iter = args.iter().skip(1);
    while let Some(a) = iter.next() {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        if let Some(v) = a.strip_prefix("--log-format=") {
            found = Some(v);
        } else if a == "--log-format" {
            found = iter.next().and_then(|v| v.to_str());
        }
    }
    match found.or(env) {
        Some("json") => LogFormat::Json,
        _ => LogFormat::Text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{OsStr, OsString};

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
    }

    #[test]
    fn lines_in_both_formats() {
        assert_eq!(
            render(LogFormat::Text, Level::Warning, "a\nb"),
            "warning: a\nb\n"
        );
        assert_eq!(
            render(LogFormat::Text, Level::Note, "x\u{1b}[41my"),
            "note: x\\u{1b}[41my\n"
        );
        let line = render(LogFormat::Json, Level::Error, "bad \"x\"\nsecond");
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["fields"]["message"], "bad \"x\"\nsecond");
        assert_eq!(v["target"], "deletion_cost::cli");
        assert!(v["timestamp"].is_string());
    }

    #[test]
    fn format_is_read_before_clap() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            format_from_args(&args(&["dc", "plan", "--log-format", "json"]), None),
            LogFormat::Json
        );
        assert_eq!(
            format_from_args(&args(&["dc", "--log-format=json", "x"]), None),
            LogFormat::Json
        );
        assert_eq!(
            format_from_args(&args(&["dc", "--log-format=text"]), Some("json")),
            LogFormat::Text
        );
        assert_eq!(
            format_from_args(&args(&["dc"]), Some("json")),
            LogFormat::Json
        );
        assert_eq!(
            format_from_args(&args(&["dc", "--", "--log-format=json"]), None),
            LogFormat::Text
        );
    }
}
