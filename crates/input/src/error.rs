//! Why an input could not be read, and the syntax errors of JSON and YAML
//! said with the source's name and position.

use super::{json_problem, show_size, without_os_error};

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or stdin could not be read.
    #[error("{source_name}: cannot read: {}", io_error_text(error))]
    Io {
        /// File path or `<stdin>`.
        source_name: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// Not valid JSON or YAML: one line naming the source, line and column.
    #[error("{source_name}: not valid {format}{}: {message}", at_position(*position))]
    Syntax {
        /// File path or `<stdin>`.
        source_name: String,
        /// "JSON" or "YAML".
        format: &'static str,
        /// 1-based line and column, when the parser knows them.
        position: Option<(u64, u64)>,
        /// The parser's message, without position, snippet or Debug text.
        message: String,
    },
    /// A document of the wrong shape (a scalar, an object that is not a Kubernetes object).
    #[error("{source_name}: {location}: {message}")]
    Shape {
        /// File path or `<stdin>`.
        source_name: String,
        /// Where in the input (`items[3]`, `document 2`).
        location: String,
        /// What is wrong.
        message: String,
    },
    /// An object whose field has the wrong type or value.
    #[error("{context}: field `{field}`: {message}")]
    Field {
        /// Source, location, kind and name: `pods.json: items[3] (Pod "web-1")`.
        context: String,
        /// Path of the offending field, e.g. `status.conditions[0].status`.
        field: String,
        /// What serde said.
        message: String,
    },
    /// The input holds no pod at all: an empty file, an empty List, `/dev/null`.
    #[error("no pods in {source_name} ({detail})")]
    NoPods {
        /// File path or `<stdin>`.
        source_name: String,
        /// What the input held instead.
        detail: String,
    },
    /// The input goes on past `--max-input-bytes`.
    #[error(
        "{source_name}: larger than --max-input-bytes {}{}: stopped reading \
         (raise --max-input-bytes for a larger input)",
        show_size(*limit),
        size.map(|s| format!(" (the file has {s} bytes)")).unwrap_or_default()
    )]
    TooLarge {
        /// File path or `<stdin>`.
        source_name: String,
        /// The limit in bytes.
        limit: u64,
        /// The file's size, when known before reading.
        size: Option<u64>,
    },
    /// The input holds more pods than `--max-pods`.
    #[error(
        "{source_name}: more than --max-pods {limit} pods: stopped reading (Kubernetes supports \
         150,000 in a cluster; raise --max-pods for a larger input)"
    )]
    TooManyPods {
        /// File path or `<stdin>`.
        source_name: String,
        /// The limit.
        limit: u64,
    },
    /// Two versions of Kubernetes in what should describe one cluster.
    #[error("{second}: another Kubernetes version than {first}; the input describes one cluster")]
    Versions {
        /// Where the first was read, and its version.
        first: String,
        /// Where the second was read, and its version.
        second: String,
    },
    /// Two items are the same pod: the same namespace and name, or the same UID.
    #[error("{second} repeats {first}: the same {what}; each pod may appear once")]
    Duplicate {
        /// The first item: `pods.json: items[0] (Pod shop/web-a)`.
        first: String,
        /// The second item, same form.
        second: String,
        /// `name shop/web-a` or `uid 1234`.
        what: String,
    },
}

pub(super) fn at_position(position: Option<(u64, u64)>) -> String {
    position
        .map(|(line, column)| format!(" at line {line} column {column}"))
        .unwrap_or_default()
}

/// A JSON syntax error as one clean line.
pub(crate) fn json_syntax(source_name: &str, e: &serde_json::Error) -> InputError {
    InputError::Syntax {
        source_name: source_name.to_string(),
        format: "JSON",
        position: (e.line() > 0).then_some((e.line() as u64, e.column() as u64)),
        message: json_problem(e),
    }
}

/// What the YAML reader says of a depth past its limits.
const YAML_TOO_DEEP: &str = "nested too deeply (more than 64 levels of lists and maps)";

/// A YAML syntax error as one clean line: the message without the source
/// snippet, the `error: ` prefix or the position (given apart), and the
/// reader's limits said in words rather than Rust's Debug text.
pub(crate) fn yaml_syntax(source_name: &str, e: &serde_saphyr::Error) -> InputError {
    use serde_saphyr::budget::BudgetBreach;
    use serde_saphyr::MessageFormatter as _;
    // the error itself, under the snippet and alias wrappers (an error met
    // while an alias was expanded comes wrapped in one)
    let mut inner = e;
    let mut through_alias = false;
    loop {
        let next = match inner {
            serde_saphyr::Error::AliasError { error, .. } => {
                through_alias = true;
                &**error
            }
            other => other.without_snippet(),
        };
        if std::ptr::eq(next, inner) {
            break;
        }
        inner = next;
    }
    let message = match inner {
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            BudgetBreach::Depth { .. } => YAML_TOO_DEEP.to_string(),
            BudgetBreach::Aliases { .. } | BudgetBreach::AliasAnchorRatio { .. } => {
                "too many aliases (`*name`): refused as a possible alias bomb".to_string()
            }
            BudgetBreach::RecordedAnchorEvents { .. } | BudgetBreach::RecordedAnchorBytes { .. } => {
                "an anchor (`&name`) holds more than the YAML reader keeps for its aliases \
                 (100,000 items, fewer in a small text, or 64 MiB): refused as a possible \
                 alias bomb; write that part out without `&` and `*`"
                    .to_string()
            }
            BudgetBreach::Documents { documents } => {
                format!("more than {} YAML documents: too many to read", documents.saturating_sub(1))
            }
            _ if through_alias => "an alias (`*name`) expands past the YAML reader's limits \
                 (nodes, events or bytes): refused as a possible alias bomb; write that part \
                 out without `&` and `*`"
                .to_string(),
            _ => "too large for the YAML reader's limits (documents, nodes or bytes)".to_string(),
        },
        serde_saphyr::Error::NonFiniteFloat { value, .. } => format!(
            "`{value}` is not a finite number: JSON and Kubernetes objects hold no NaN or \
             infinity (YAML's `.nan`, `.inf`, `-.inf`); write a number, or quote it to keep it as text"
        ),
        // the library's words name its own options ("set DuplicateKeyPolicy
        // in Options"); JSON input says "given twice"
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => match key {
            Some(k) => format!(
                "{}: given twice (a key may appear once in a map)",
                super::shortened(k)
            ),
            None => "a key is given twice (a key may appear once in a map)".to_string(),
        },
        // the parser's own nesting limit (past 255 levels, where the depth
        // budget has not looked yet): the same words as the budget's
        serde_saphyr::Error::ExternalMessage { msg, .. } if msg == "recursion limit exceeded" => {
            YAML_TOO_DEEP.to_string()
        }
        other => serde_saphyr::DefaultMessageFormatter
            .format_message(other)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect(),
    };
    let position = e
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| (l.line(), l.column()));
    InputError::Syntax {
        source_name: source_name.to_string(),
        format: "YAML",
        position,
        message,
    }
}

/// An I/O error in words: std's text without the `(os error N)` it appends
/// ("No such file or directory", "Permission denied").
pub fn io_error_text(e: &std::io::Error) -> String {
    without_os_error(&e.to_string())
}
