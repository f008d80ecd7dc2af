//! Reading Kubernetes objects from what `kubectl get -o json|yaml` prints:
//! a `List`/`*List`, a single object, an array of objects, or several YAML
//! documents. Errors name the source, the item and the field.

use std::io::Read;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::comparator::KubeVersion;
use crate::pod::PodView;

mod stream;

pub use stream::pods_from_reader;
pub(crate) use stream::{stream_items, ItemSink, Streamed};

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or stdin could not be read.
    #[error("{source_name}: cannot read: {error}")]
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

fn at_position(position: Option<(u64, u64)>) -> String {
    position
        .map(|(line, column)| format!(" at line {line} column {column}"))
        .unwrap_or_default()
}

/// A JSON syntax error as one clean line.
pub(crate) fn json_syntax(source_name: &str, e: &serde_json::Error) -> InputError {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    // serde_json's name for its depth limit, in the words of RELIABILITY.md
    let message = if message == "recursion limit exceeded" {
        "nested too deeply (more than 128 levels of lists and maps)".to_string()
    } else {
        message.to_string()
    };
    InputError::Syntax {
        source_name: source_name.to_string(),
        format: "JSON",
        position: (e.line() > 0).then_some((e.line() as u64, e.column() as u64)),
        message,
    }
}

/// A YAML syntax error as one clean line: the message without the source
/// snippet, the `error: ` prefix or the position (given apart), and the
/// reader's limits said in words rather than Rust's Debug text.
pub(crate) fn yaml_syntax(source_name: &str, e: &serde_saphyr::Error) -> InputError {
    use serde_saphyr::budget::BudgetBreach;
    use serde_saphyr::MessageFormatter as _;
    let mut inner = e;
    loop {
        let next = inner.without_snippet();
        if std::ptr::eq(next, inner) {
            break;
        }
        inner = next;
    }
    let message = match inner {
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            BudgetBreach::Depth { .. } => {
                "nested too deeply (more than 64 levels of lists and maps)".to_string()
            }
            BudgetBreach::Aliases { .. } | BudgetBreach::AliasAnchorRatio { .. } => {
                "too many aliases (`*name`): refused as a possible alias bomb".to_string()
            }
            BudgetBreach::RecordedAnchorEvents { .. } | BudgetBreach::RecordedAnchorBytes { .. } => {
                "an anchor (`&name`) holds more than the YAML reader keeps for its aliases \
                 (a million items or 64 MiB): refused as a possible alias bomb; write that part \
                 out without `&` and `*`"
                    .to_string()
            }
            BudgetBreach::Documents { documents } => {
                format!("more than {} YAML documents: too many to read", documents.saturating_sub(1))
            }
            _ => "too large for the YAML reader's limits (documents, nodes or bytes)".to_string(),
        },
        serde_saphyr::Error::NonFiniteFloat { value, .. } => format!(
            "`{value}` is not a finite number: JSON and Kubernetes objects hold no NaN or \
             infinity (YAML's `.nan`, `.inf`, `-.inf`); write a number, or quote it to keep it as text"
        ),
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

/// One object found in an input, with where it was.
#[derive(Debug, Clone)]
pub struct RawObject {
    /// File path or `<stdin>`.
    pub source_name: String,
    /// `items[3]`, `document 2`, `[0]`, or `object`.
    pub location: String,
    /// `kind`, empty when absent.
    pub kind: String,
    /// The object.
    pub value: Value,
}

impl RawObject {
    /// `metadata.name`, empty when absent.
    pub fn name(&self) -> String {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    /// [`RawObject::decode`], consuming the object: its strings move into
    /// the typed object instead of being copied, and its tree is freed as it
    /// goes (a 100k-pod snapshot holds the tree and the objects otherwise).
    pub fn into_decoded<T: DeserializeOwned>(self, kind: &str) -> Result<T, InputError> {
        let name = self.name();
        serde_path_to_error::deserialize(self.value).map_err(|e| InputError::Field {
            context: format!("{}: {} ({kind} {name:?})", self.source_name, self.location),
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }

    /// Deserializes into a typed object, naming the failing field on error.
    pub fn decode<T: DeserializeOwned>(&self, kind: &str) -> Result<T, InputError> {
        serde_path_to_error::deserialize(&self.value).map_err(|e| InputError::Field {
            context: format!(
                "{}: {} ({kind} {:?})",
                self.source_name,
                self.location,
                self.name()
            ),
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }
}

/// The default of `--max-pods`: twice the 150,000 pods Kubernetes supports
/// in one cluster. Endless valid input (`[{"metadata":{"name":"p"}},...`)
/// stops there, long before the byte limit.
pub const DEFAULT_MAX_PODS: u64 = 300_000;

/// How much one input may hold: `--max-input-bytes` (its text, and about
/// the memory its records take) and `--max-pods`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Bytes.
    pub bytes: u64,
    /// Pods.
    pub pods: u64,
}

impl InputLimits {
    /// No limit (the bundled example, benchmarks).
    pub const NONE: Self = Self {
        bytes: u64::MAX,
        pods: u64::MAX,
    };

    /// `bytes`, and [`DEFAULT_MAX_PODS`].
    pub fn bytes(bytes: u64) -> Self {
        Self {
            bytes,
            pods: DEFAULT_MAX_PODS,
        }
    }
}

/// The default of `--max-input-bytes`: 2 GiB, `kubectl get pods -A -o json`
/// of the 150,000 pods Kubernetes supports in one cluster, at 14 KiB a pod
/// (managedFields included).
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 2 << 30;

/// `2Gi` as clap shows the default of `--max-input-bytes`.
pub const DEFAULT_MAX_INPUT: &str = "2Gi";

/// Past this many bytes, the reader looks at what it has read so far and
/// stops early when that can never be a Kubernetes object (a YAML document
/// that is one long scalar, as `yes` prints; JSON already broken). Looked at
/// again each time the input doubles, so the cost stays linear.
const HEAD_CHECK_BYTES: usize = 1 << 20;

/// What a source must hold, for the early checks of [`read_bounded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// JSON or YAML holding Kubernetes objects (pods, snapshots, policies).
    Manifest,
    /// Any text the caller parses itself (samples: JSON or CSV).
    Text,
}

/// Parses a byte size: `1048576`, `512Mi`, `2Gi`, `64k`, `1G` (`k`, `M`,
/// `G`, `T` are powers of 1000; `Ki`, `Mi`, `Gi`, `Ti` of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let unit_value: u64 = match unit {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (use bytes, or k, M, G, Ki, Mi, Gi)"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected a number of bytes such as 2Gi or 1048576"))?;
    let bytes = n
        .checked_mul(unit_value)
        .ok_or_else(|| format!("{s:?}: too large"))?;
    if bytes == 0 {
        return Err(format!("{s:?}: must be at least 1 byte"));
    }
    Ok(bytes)
}

/// A byte count in the unit a user would write: `2Gi`, `512Mi`, `1000`.
pub fn show_size(bytes: u64) -> String {
    for (unit, size) in [
        ("Ti", 1u64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

/// Reads text from `reader` as it arrives, and stops at the first sign that
/// it is not what a user meant to give:
/// - more than `max_bytes` (`--max-input-bytes`);
/// - a control character (NUL, escape...) or a byte that is not UTF-8: in no
///   JSON or YAML text, so binary data (`/dev/zero`, an image) fails at its
///   first such byte;
/// - for a manifest, past 1 MiB: a first document that is a plain scalar
///   (`y` repeated by `yes`), or JSON with a syntax error already read.
///
/// `size_hint` (a regular file's length) sizes the buffer once.
pub fn read_bounded(
    source_name: &str,
    mut reader: impl Read,
    max_bytes: u64,
    size_hint: u64,
    expect: Expect,
) -> Result<String, InputError> {
    const CHUNK: usize = 64 * 1024;
    let cap = usize::try_from(size_hint.min(max_bytes)).unwrap_or(0);
    let mut buf: Vec<u8> = Vec::with_capacity(cap.saturating_add(1));
    // bytes before this index are checked UTF-8 without control characters
    let mut checked = 0usize;
    let mut next_head_check = HEAD_CHECK_BYTES;
    let limit = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    loop {
        let start = buf.len();
        // read at most one byte past the limit, to know it was passed
        let want = CHUNK
            .min(limit.saturating_add(1).saturating_sub(start))
            .max(1);
        buf.resize(start + want, 0);
        let n = read_some(&mut reader, &mut buf[start..], source_name)?;
        buf.truncate(start + n);
        if buf.len() > limit {
            return Err(InputError::TooLarge {
                source_name: source_name.to_string(),
                limit: max_bytes,
                size: None,
            });
        }
        let at_end = n == 0;
        checked = check_text(source_name, &buf, checked, at_end)?;
        if at_end {
            break;
        }
        if expect == Expect::Manifest && buf.len() >= next_head_check {
            head_check(source_name, &buf[..checked])?;
            next_head_check = buf.len().saturating_mul(2);
        }
    }
    String::from_utf8(buf).map_err(|e| InputError::Io {
        source_name: source_name.to_string(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// Checks `buf[from..]` for control characters and invalid UTF-8; returns
/// how far it is checked (a UTF-8 sequence cut by the read is left for the
/// next one, unless `at_end`).
fn check_text(
    source_name: &str,
    buf: &[u8],
    from: usize,
    at_end: bool,
) -> Result<usize, InputError> {
    let not_text = |at: usize, message: String| {
        let (line, column) = line_column(buf, at);
        InputError::Syntax {
            source_name: source_name.to_string(),
            format: "JSON or YAML",
            position: Some((line, column)),
            message,
        }
    };
    let valid_to = match std::str::from_utf8(&buf[from..]) {
        Ok(_) => buf.len(),
        Err(e) => {
            let end = from + e.valid_up_to();
            if e.error_len().is_some() || at_end {
                // a control character before the bad byte is the better answer
                if let Some(at) = first_control(&buf[from..end]) {
                    return Err(not_text(from + at, control_message_at(buf, buf[from + at])));
                }
                return Err(not_text(end, not_utf8_message(buf, buf[end])));
            }
            end
        }
    };
    if let Some(at) = first_control(&buf[from..valid_to]) {
        return Err(not_text(from + at, control_message_at(buf, buf[from + at])));
    }
    Ok(valid_to)
}

/// The first byte that no JSON or YAML text holds: a C0 control character
/// other than tab, line feed and carriage return.
fn first_control(bytes: &[u8]) -> Option<usize> {
    bytes
        .iter()
        .position(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
}

fn control_message(b: u8) -> String {
    let what = if b == 0 {
        "a NUL byte".to_string()
    } else {
        format!("control character 0x{b:02x}")
    };
    format!("{what} is in no JSON or YAML text (binary data?); stopped reading")
}

/// What `byte`, which is not UTF-8, means; `head` is the input's first
/// bytes (empty when no longer known): UTF-16 text (a byte-order mark, or
/// ASCII with NULs between) gets a hint to convert it; anything else reads
/// as binary data.
pub(crate) fn not_utf8_message(head: &[u8], byte: u8) -> String {
    utf16_hint(head).unwrap_or_else(|| {
        format!("byte 0x{byte:02x} is not UTF-8 text (binary data?); stopped reading")
    })
}

/// The message for a control character `b` at the start of `buf`
/// (`buf` starting at the input's first byte).
pub(crate) fn control_message_at(buf: &[u8], b: u8) -> String {
    utf16_hint(buf).unwrap_or_else(|| control_message(b))
}

/// `Some(message)` when `head`, the input's first bytes, is UTF-16 text.
fn utf16_hint(head: &[u8]) -> Option<String> {
    let bom = head.starts_with(&[0xff, 0xfe]) || head.starts_with(&[0xfe, 0xff]);
    // `{"`, `[{`, `ap` (apiVersion) with a NUL after (little-endian) or before each
    let ascii_with_nuls = head.len() >= 4
        && ((head[0].is_ascii_graphic() && head[1] == 0 && head[2].is_ascii() && head[3] == 0)
            || (head[0] == 0 && head[1].is_ascii_graphic() && head[2] == 0 && head[3].is_ascii()));
    (bom || ascii_with_nuls).then(|| {
        "the input is UTF-16 text, not UTF-8 (as PowerShell's `>` and some editors save it): \
         convert it, e.g. `iconv -f UTF-16 -t UTF-8`; stopped reading"
            .to_string()
    })
}

/// 1-based line and column (in bytes) of `buf[at]`.
fn line_column(buf: &[u8], at: usize) -> (u64, u64) {
    let before = &buf[..at.min(buf.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() as u64 + 1;
    (line, column)
}

/// The early look at a large manifest's first bytes: JSON whose syntax is
/// already wrong, or YAML whose first document is a plain scalar (which no
/// later line can turn into an object), fails now rather than at the end.
fn head_check(source_name: &str, checked: &[u8]) -> Result<(), InputError> {
    // the checked part is valid UTF-8 by construction; be safe anyway
    let text = match std::str::from_utf8(checked) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&checked[..e.valid_up_to()]).unwrap_or_default(),
    };
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let trimmed = body.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // up to just after a `,` `:` `[` `{`, where no number or word is cut
        // in two: what is left can only be short of its end, never wrong
        let Some(cut) = body.rfind([',', ':', '[', '{']) else {
            return Ok(());
        };
        let mut de = serde_json::Deserializer::from_str(&body[..=cut]);
        // one value, then nothing but whitespace (`{...},{...}` is not JSON)
        let parsed = <serde::de::IgnoredAny as serde::Deserialize>::deserialize(&mut de)
            .and_then(|_| de.end());
        if let Err(e) = parsed {
            if !e.is_eof() {
                return Err(json_syntax(source_name, &e));
            }
        }
        return Ok(());
    }
    if let Some(first) = yaml_scalar_head(body) {
        let shown: String = first.chars().take(40).collect();
        let more = if shown.len() < first.len() { "..." } else { "" };
        return Err(InputError::Shape {
            source_name: source_name.to_string(),
            location: "object".to_string(),
            message: format!(
                "expected a Kubernetes object, a List or an array, found text ({shown:?}{more}) \
                 going on for more than {} MiB without a `key:` or `- `; stopped reading",
                (checked.len() >> 20).max(1)
            ),
        });
    }
    Ok(())
}

/// The first content line of a YAML stream when it starts a plain scalar
/// other than null: not a comment, directive, `---`, mapping key, sequence
/// entry, flow collection, quoted scalar, anchor, tag or block scalar.
fn yaml_scalar_head(text: &str) -> Option<&str> {
    // whole lines only: the last one may be cut by the read
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    for raw in complete.lines() {
        let mut line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('%') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("---") {
            if rest.is_empty() || rest.starts_with([' ', '\t']) {
                line = rest.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
            }
        }
        let starts_other = line.starts_with([
            '{', '[', '?', '&', '!', '*', '"', '\'', '|', '>', '.', ']', '}', ',', '@', '`',
        ]) || line == "-"
            || line.starts_with("- ")
            || line.starts_with("-\t");
        let is_key = line.ends_with(':') || line.contains(": ") || line.contains(":\t");
        let is_null = matches!(line, "~" | "null" | "Null" | "NULL");
        return (!starts_other && !is_key && !is_null).then_some(line);
    }
    None
}

/// Parses JSON (text starting with `{` or `[`: one value) or YAML (one
/// value per document, empty documents as null) into `T`; a syntax error is
/// one line naming the source, line and column.
pub fn parse_documents<T: DeserializeOwned>(
    source_name: &str,
    text: &str,
) -> Result<Vec<T>, InputError> {
    documents(source_name, text, serde_saphyr::Options::default())
}

/// [`parse_documents`], except that YAML's `.inf`, `-.inf` and `.nan` reach
/// `T` as floats instead of failing as syntax, so the caller can name the
/// field that holds one.
pub fn parse_documents_keeping_non_finite<T: DeserializeOwned>(
    source_name: &str,
    text: &str,
) -> Result<Vec<T>, InputError> {
    documents(
        source_name,
        text,
        serde_saphyr::options! {
            non_finite_float_policy: serde_saphyr::options::NonFiniteFloatPolicy::PassThrough,
        },
    )
}

fn documents<T: DeserializeOwned>(
    source_name: &str,
    text: &str,
    mut options: serde_saphyr::Options,
) -> Result<Vec<T>, InputError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: T = serde_json::from_str(text).map_err(|e| json_syntax(source_name, &e))?;
        Ok(vec![v])
    } else {
        options.budget = Some(sized_budget(text.len()));
        serde_saphyr::from_multiple_with_options(text, options)
            .map_err(|e| yaml_syntax(source_name, &e))
    }
}

/// The options [`parse_documents`] reads a YAML text of `len` bytes with.
pub(crate) fn yaml_options(len: usize) -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(sized_budget(len));
    options
}

/// serde-saphyr's default budget suits configuration files: 250,000 nodes,
/// 1,000,000 events, 1,024 documents and 64 MiB of scalars, which
/// `kubectl get pods -A -o yaml` passes at about 1,800 pods. The text here is
/// already in memory and bounded by `--max-input-bytes`, so those limits grow
/// with it (a node, an event or a document takes at least a byte or a few of
/// text); the depth and alias limits, which stop a small text from expanding,
/// stay as they are.
fn sized_budget(len: usize) -> serde_saphyr::budget::Budget {
    let mut b = serde_saphyr::budget::Budget::default();
    b.max_nodes = b.max_nodes.max(len);
    b.max_events = b.max_events.max(len.saturating_mul(2));
    b.max_documents = b.max_documents.max(len / 4);
    b.max_total_scalar_bytes = b.max_total_scalar_bytes.max(len);
    b
}

/// Parses JSON or (multi-document) YAML into the objects it holds, flattening
/// lists and arrays.
pub fn parse_objects(source_name: &str, text: &str) -> Result<Vec<RawObject>, InputError> {
    let docs: Vec<Value> = parse_documents(source_name, text)?;
    let many = docs.len() > 1;
    let docs: Vec<(String, Value)> = docs
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_null())
        .map(|(i, v)| {
            let loc = if many {
                format!("document {}", i + 1)
            } else {
                "object".to_string()
            };
            (loc, v)
        })
        .collect();
    let mut out = Vec::new();
    for (loc, doc) in docs {
        flatten(source_name, loc, doc, &mut out)?;
    }
    Ok(out)
}

pub(crate) fn flatten(
    source_name: &str,
    location: String,
    v: Value,
    out: &mut Vec<RawObject>,
) -> Result<(), InputError> {
    let shape = |location: String, message: String| InputError::Shape {
        source_name: source_name.to_string(),
        location,
        message,
    };
    match v {
        Value::Array(items) => {
            for (i, item) in items.into_iter().enumerate() {
                let loc = if location == "object" {
                    format!("[{i}]")
                } else {
                    format!("{location}[{i}]")
                };
                flatten(source_name, loc, item, out)?;
            }
            Ok(())
        }
        Value::Object(mut map) => {
            let kind = map
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if kind == "List"
                || kind.ends_with("List")
                || (kind.is_empty() && map.contains_key("items"))
            {
                let items = match map.remove("items") {
                    Some(Value::Array(items)) => items,
                    Some(Value::Null) | None => Vec::new(),
                    Some(other) => {
                        return Err(shape(
                            location,
                            format!("`items` must be an array, found {}", type_name(&other)),
                        ))
                    }
                };
                for (i, item) in items.into_iter().enumerate() {
                    let loc = if location == "object" {
                        format!("items[{i}]")
                    } else {
                        format!("{location}.items[{i}]")
                    };
                    flatten(source_name, loc, item, out)?;
                }
                return Ok(());
            }
            out.push(RawObject {
                source_name: source_name.to_string(),
                location,
                kind,
                value: Value::Object(map),
            });
            Ok(())
        }
        other => Err(shape(
            location,
            format!(
                "expected a Kubernetes object, a List or an array, found {}",
                type_name(&other)
            ),
        )),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Decodes every object as a Pod. Objects of another kind, objects with
/// neither a kind nor a name (`{}`, `{"foo": 1}`), Pods without a name, and
/// two items that are the same pod (by namespace and name, or by UID) are
/// errors naming the item(s).
pub fn pods_from(
    objects: &[RawObject],
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    let pods = objects
        .iter()
        .map(|o| {
            if !o.kind.is_empty() && o.kind != "Pod" {
                return Err(InputError::Shape {
                    source_name: o.source_name.clone(),
                    location: o.location.clone(),
                    message: format!("expected a Pod, found kind {:?}", o.kind),
                });
            }
            check_pod_name(o)?;
            check_object_limits(o)?;
            o.decode("Pod")
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_unique_pods(
        objects
            .iter()
            .zip(&pods)
            .map(|(o, p)| (item_label(&o.source_name, &o.location), p)),
    )?;
    Ok(pods)
}

/// Kubernetes' limit on an object's name (a DNS subdomain), and on the
/// names that point at objects (`spec.nodeName`, an ownerReference's name).
pub const MAX_NAME_BYTES: usize = 253;
/// Kubernetes' limit on a namespace's name (a DNS label), a label's value
/// and a label key's name part.
pub const MAX_LABEL_BYTES: usize = 63;
/// Kubernetes' limit on an object's annotations, keys and values together
/// (`TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 << 10;

/// What in `metadata` (and a Pod's `spec.nodeName`) breaks a limit the API
/// server enforces on every object it stores, so no object it serves breaks
/// it: `(field, what is wrong)`, or `None`. Reading on would only spend
/// memory on what no cluster holds (a 50 MB name took 680 MB to plan).
pub fn metadata_over_limits(value: &Value) -> Option<(String, String)> {
    let over =
        |len: usize, max: usize| format!("{len} bytes long; Kubernetes allows at most {max}");
    let meta = value.get("metadata");
    let text = |v: Option<&Value>, key: &str| {
        v.and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::len)
    };
    for (field, len, max) in [
        ("metadata.name", text(meta, "name"), MAX_NAME_BYTES),
        (
            "metadata.namespace",
            text(meta, "namespace"),
            MAX_LABEL_BYTES,
        ),
        (
            "spec.nodeName",
            text(value.get("spec"), "nodeName"),
            MAX_NAME_BYTES,
        ),
    ] {
        if let Some(len) = len.filter(|&l| l > max) {
            return Some((field.to_string(), over(len, max)));
        }
    }
    if let Some(Value::Array(owners)) = meta.and_then(|m| m.get("ownerReferences")) {
        for (i, o) in owners.iter().enumerate() {
            if let Some(len) = text(Some(o), "name").filter(|&l| l > MAX_NAME_BYTES) {
                return Some((
                    format!("metadata.ownerReferences[{i}].name"),
                    over(len, MAX_NAME_BYTES),
                ));
            }
        }
    }
    if let Some(Value::Object(labels)) = meta.and_then(|m| m.get("labels")) {
        for (key, v) in labels {
            if let Some(problem) = label_over_limits(key, v.as_str().map_or(0, str::len)) {
                return Some((format!("metadata.labels[{:?}]", shortened(key)), problem));
            }
        }
    }
    if let Some(Value::Object(annotations)) = meta.and_then(|m| m.get("annotations")) {
        let total: usize = annotations
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > MAX_ANNOTATIONS_BYTES {
            return Some((
                "metadata.annotations".to_string(),
                format!(
                    "keys and values together are {total} bytes; Kubernetes allows at most \
                     {MAX_ANNOTATIONS_BYTES} (256 KiB)"
                ),
            ));
        }
    }
    None
}

/// What is wrong with a label of key `key` and a value `value_len` bytes
/// long, or `None`: a value of at most 63 bytes, a key whose name part
/// (after an optional `prefix/`) has at most 63 and whose prefix at most 253.
pub fn label_over_limits(key: &str, value_len: usize) -> Option<String> {
    let over = |what: &str, len: usize, max: usize| {
        format!("{what} is {len} bytes long; Kubernetes allows at most {max}")
    };
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    if value_len > MAX_LABEL_BYTES {
        Some(over("the value", value_len, MAX_LABEL_BYTES))
    } else if name.len() > MAX_LABEL_BYTES {
        Some(over("the key's name part", name.len(), MAX_LABEL_BYTES))
    } else if prefix.len() > MAX_NAME_BYTES {
        Some(over("the key's prefix", prefix.len(), MAX_NAME_BYTES))
    } else {
        None
    }
}

/// Whether a decoded object's metadata (and a Pod's `spec.nodeName`) keeps
/// within Kubernetes' limits on names and labels. The fast readers check
/// this (annotations they do not keep: an item longer than
/// [`MAX_ANNOTATIONS_BYTES`] goes to the general path), and leave an object
/// that does not to the general path, whose [`check_object_limits`] names
/// the field.
pub fn meta_within_limits(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    node_name: Option<&str>,
) -> bool {
    let short = |s: Option<&str>, max: usize| s.is_none_or(|s| s.len() <= max);
    short(meta.name.as_deref(), MAX_NAME_BYTES)
        && short(meta.namespace.as_deref(), MAX_LABEL_BYTES)
        && short(node_name, MAX_NAME_BYTES)
        && meta
            .owner_references
            .iter()
            .flatten()
            .all(|o| o.name.len() <= MAX_NAME_BYTES)
        && meta
            .labels
            .iter()
            .flatten()
            .all(|(k, v)| label_over_limits(k, v.len()).is_none())
}

/// At most 40 characters of `s`, with `...` when cut: an over-long name
/// is named without printing it whole.
pub fn shortened(s: &str) -> String {
    let shown: String = s.chars().take(40).collect();
    if shown.len() < s.len() {
        format!("{shown}...")
    } else {
        shown
    }
}

/// [`metadata_over_limits`] as the error naming the item and the field.
pub fn check_object_limits(o: &RawObject) -> Result<(), InputError> {
    match metadata_over_limits(&o.value) {
        None => Ok(()),
        Some((field, problem)) => {
            let kind = if o.kind.is_empty() { "object" } else { &o.kind };
            Err(InputError::Shape {
                source_name: o.source_name.clone(),
                location: format!("{} ({kind} {:?})", o.location, shortened(&o.name())),
                message: format!(
                    "{field}: {problem}: the API server stores no such object; refused"
                ),
            })
        }
    }
}

/// A Pod must have `metadata.name`; an object with no kind and no name is
/// not taken for a Pod at all.
pub fn check_pod_name(o: &RawObject) -> Result<(), InputError> {
    if !o.name().is_empty() {
        return Ok(());
    }
    let message = if o.kind.is_empty() {
        let fields: Vec<&str> = o
            .value
            .as_object()
            .map(|m| m.keys().map(String::as_str).take(4).collect())
            .unwrap_or_default();
        let found = if fields.is_empty() {
            "an empty object".to_string()
        } else {
            format!("fields {}", fields.join(", "))
        };
        format!("not a Pod: no kind and no metadata.name (found {found})")
    } else {
        "Pod without metadata.name".to_string()
    };
    Err(InputError::Shape {
        source_name: o.source_name.clone(),
        location: o.location.clone(),
        message,
    })
}

/// `pods.json: items[3]`.
pub fn item_label(source_name: &str, location: &str) -> String {
    format!("{source_name}: {location}")
}

/// `shop/web-a`, or `web-a` without a namespace.
fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Fails on the first pod that repeats an earlier one: the same namespace
/// and name, or the same (non-empty) UID. Upstream never sees one pod twice,
/// and a repeated pod would count twice in colocation ranks. Items are
/// `(label, pod)` with labels such as `pods.json: items[3]`.
pub fn check_unique_pods<'a, P: PodView + 'a>(
    items: impl IntoIterator<Item = (String, &'a P)>,
) -> Result<(), InputError> {
    use std::collections::HashMap;
    let mut names: HashMap<(&str, &str), String> = HashMap::new();
    let mut uids: HashMap<&str, String> = HashMap::new();
    for (label, pod) in items {
        let m = pod.meta();
        let ns = m.namespace.as_deref().unwrap_or_default();
        let name = m.name.as_deref().unwrap_or_default();
        let who = format!("{label} (Pod {})", qualified(ns, name));
        if let Some(first) = names.get(&(ns, name)) {
            return Err(InputError::Duplicate {
                first: first.clone(),
                second: who,
                what: format!("name {}", qualified(ns, name)),
            });
        }
        if let Some(uid) = m.uid.as_deref().filter(|u| !u.is_empty()) {
            if let Some(first) = uids.get(uid) {
                return Err(InputError::Duplicate {
                    first: first.clone(),
                    second: who,
                    what: format!("uid {uid}"),
                });
            }
            uids.insert(uid, who.clone());
        }
        names.insert((ns, name), who);
    }
    Ok(())
}

/// Names of the pods without `metadata.uid` (upstream breaks ties by UID, so
/// their order among equals is not upstream's), for a warning.
pub fn pods_without_uid(pods: &[impl PodView]) -> Vec<String> {
    pods.iter()
        .map(PodView::meta)
        .filter(|m| m.uid.as_deref().unwrap_or_default().is_empty())
        .map(|m| {
            qualified(
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
            )
        })
        .collect()
}

/// How many items a line on stderr names before "and K more": a line stays
/// short whatever the input's size.
pub const LISTED: usize = 10;

/// The warning for pods whose cost annotation Kubernetes reads as 0 (each
/// item names a pod and what is wrong with its value), or none.
pub fn invalid_costs_warning(invalid: &[String]) -> Option<String> {
    (!invalid.is_empty()).then(|| {
        format!(
            "{} pod(s) carry a {} annotation that is not a whole number from -2147483648 to \
             2147483647, which Kubernetes reads as 0 and orders so (rule 4): {}",
            invalid.len(),
            crate::annotations::POD_DELETION_COST,
            capped_list(invalid, LISTED)
        )
    })
}

/// `a, b, c and 7 more`: the first `shown` items, `, `-joined, then how many
/// were left out.
pub fn capped_list<I>(items: I, shown: usize) -> String
where
    I: IntoIterator,
    I::Item: std::fmt::Display,
{
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut count = 0usize;
    for item in items {
        if count < shown {
            if count > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{item}");
        }
        count += 1;
    }
    if count > shown {
        let _ = write!(out, " and {} more", count - shown);
    }
    out
}

/// The warning for pods without a UID, or `None` when every pod has one.
pub fn missing_uid_warning(source_name: &str, pods: &[impl PodView]) -> Option<String> {
    uid_warning(source_name, &pods_without_uid(pods))
}

/// The warning for the pods named in `missing` (see [`missing_uid_warning`]).
pub fn uid_warning(source_name: &str, missing: &[String]) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    const SHOWN: usize = 5;
    let more = missing.len().saturating_sub(SHOWN);
    Some(format!(
        "{source_name}: {} pod(s) without metadata.uid ({}{}): upstream breaks the last ties by UID, \
         so among equal pods the order shown may not be upstream's",
        missing.len(),
        missing[..missing.len().min(SHOWN)].join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

/// The Kubernetes version an input carries: what `kubectl version -o
/// json|yaml` prints (its `serverVersion`), or the API server's own answer
/// (`kubectl get --raw /version`), as one more document, array item or file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `major.minor`.
    pub version: KubeVersion,
    /// `gitVersion` as written (`v1.36.2`), or `major.minor` without one.
    pub git_version: String,
    /// Where it was read: `snapshot.yaml: document 1`.
    pub at: String,
}

/// Keys of the objects [`server_version`] reads: `kubectl version` output
/// (`clientVersion`, `serverVersion`) or a `/version` body (`gitVersion`).
const VERSION_KEYS: [&str; 3] = ["serverVersion", "clientVersion", "gitVersion"];

/// Whether `o` is a version rather than a Kubernetes object: no `kind`, and
/// one of `serverVersion`, `clientVersion`, `gitVersion` at its top.
pub fn is_version_object(o: &RawObject) -> bool {
    o.kind.is_empty()
        && o.value
            .as_object()
            .is_some_and(|m| VERSION_KEYS.iter().any(|k| m.contains_key(*k)))
}

/// Reads one version object (see [`is_version_object`]).
fn version_of(o: &RawObject) -> Result<ServerVersion, InputError> {
    let shape = |message: String| InputError::Shape {
        source_name: o.source_name.clone(),
        location: o.location.clone(),
        message,
    };
    let (body, field) = match o.value.get("serverVersion") {
        Some(v) => (v, "serverVersion"),
        None if o.value.get("gitVersion").is_some() => (&o.value, "the version"),
        None => {
            return Err(shape(
                "`kubectl version` output without serverVersion (could kubectl reach the \
                 API server?); give the server's version, or pass --kubernetes-version"
                    .into(),
            ))
        }
    };
    let text = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or_default();
    let (major, minor, git) = (text("major"), text("minor"), text("gitVersion"));
    let version = KubeVersion::from_server(major, minor, git).map_err(|_| {
        shape(format!(
            "{field} is not a Kubernetes version: expected gitVersion such as \"v1.36.2\", or \
             major and minor strings (found {})",
            serde_json::to_string(body).unwrap_or_default()
        ))
    })?;
    Ok(ServerVersion {
        version,
        git_version: if git.is_empty() {
            version.to_string()
        } else {
            git.to_string()
        },
        at: item_label(&o.source_name, &o.location),
    })
}

/// The version carried by `objects`, if any (see [`is_version_object`]).
/// Several are fine when they name the same `major.minor`; two that differ
/// are an error naming both.
pub fn server_version(objects: &[RawObject]) -> Result<Option<ServerVersion>, InputError> {
    let mut found: Option<ServerVersion> = None;
    for o in objects.iter().filter(|o| is_version_object(o)) {
        found = merge_versions(found, Some(version_of(o)?))?;
    }
    Ok(found)
}

/// Takes a version object into what an input carries so far: merged into
/// `version`, or, on a malformed or differing one, the first error kept in
/// `error` (later version objects are then passed over).
pub(crate) fn note_version(
    o: &RawObject,
    version: &mut Option<ServerVersion>,
    error: &mut Option<InputError>,
) {
    if error.is_some() {
        return;
    }
    match version_of(o).and_then(|v| merge_versions(version.take(), Some(v))) {
        Ok(v) => *version = v,
        Err(e) => *error = Some(e),
    }
}

/// One version out of two inputs' (`None` for neither); two that differ in
/// `major.minor` are an error naming both.
pub fn merge_versions(
    a: Option<ServerVersion>,
    b: Option<ServerVersion>,
) -> Result<Option<ServerVersion>, InputError> {
    match (a, b) {
        (Some(a), Some(b)) if a.version != b.version => Err(InputError::Versions {
            first: format!("{} ({})", a.at, a.git_version),
            second: format!("{} ({})", b.at, b.git_version),
        }),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

/// Parses pods from JSON or YAML as [`parse_objects`] + [`pods_from`] do,
/// with the same answers. A JSON List or array of pods (what `kubectl get pods
/// -o json` prints) is first decoded straight into typed pods, without the
/// intermediate `serde_json::Value` tree: several times faster on large lists.
/// The typed decode accepts exactly what the general path accepts (same `Pod`
/// type, which checks `kind` and `apiVersion`); on any failure the general
/// path runs, so errors still name the item and field.
///
/// An input without any pod (empty, blank, an empty List) is an error:
/// `kubectl ... | deletion-cost predict` must not hide a failed `kubectl`.
///
/// For tests and benches: the reference the slim readers are compared with
/// (`parse_pods_slim_matches_parse_pods`), and the comparator bench's
/// `parse_pods` row; the CLI reads with [`parse_pods_slim_versioned`].
#[doc(hidden)]
pub fn parse_pods(
    source_name: &str,
    text: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    checked_pods(source_name, text, typed_pod_list(text), |p| p).map(|(pods, _)| pods)
}

/// The pods of a typed fast-path parse when every one has a name (checked
/// for duplicates), else of the general path (whose errors say whether an
/// item is a Pod at all), each passed through `keep`; none is an error.
/// The general path also returns the version the input carries, if any.
fn checked_pods(
    source_name: &str,
    text: &str,
    typed: Option<(Vec<k8s_openapi::api::core::v1::Pod>, impl std::fmt::Display)>,
    keep: impl Fn(k8s_openapi::api::core::v1::Pod) -> k8s_openapi::api::core::v1::Pod,
) -> Result<(Vec<k8s_openapi::api::core::v1::Pod>, Option<ServerVersion>), InputError> {
    let (pods, version) = match typed {
        Some((pods, prefix))
            if pods
                .iter()
                .all(|p| p.metadata.name.as_deref().is_some_and(|n| !n.is_empty())) =>
        {
            check_unique_pods(
                pods.iter()
                    .enumerate()
                    .map(|(i, p)| (item_label(source_name, &format!("{prefix}[{i}]")), p)),
            )?;
            (pods, None)
        }
        _ => {
            let mut objects = parse_objects(source_name, text)?;
            let version = server_version(&objects)?;
            objects.retain(|o| !is_version_object(o));
            let pods = pods_from(&objects)?.into_iter().map(keep).collect();
            (pods, version)
        }
    };
    if pods.is_empty() {
        return Err(no_pods(source_name, text));
    }
    Ok((pods, version))
}

/// [`parse_pods`] for `predict`, which keeps of each pod only what the
/// comparator reads ([`trim_pod`]): a List of 100,000 pods then takes a
/// fraction of the memory. Each item is still decoded as a whole `Pod` (the
/// same checks, the same errors) and slimmed at once, so only one whole pod
/// is held at a time.
#[cfg(test)]
pub(crate) fn parse_pods_slim(
    source_name: &str,
    text: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    parse_pods_slim_versioned(source_name, text).map(|(pods, _)| pods)
}

/// `parse_pods_slim` (tests only), with the Kubernetes version the input carries (see
/// [`ServerVersion`]): `predict` reads its gates from it.
pub fn parse_pods_slim_versioned(
    source_name: &str,
    text: &str,
) -> Result<(Vec<k8s_openapi::api::core::v1::Pod>, Option<ServerVersion>), InputError> {
    checked_pods(source_name, text, typed_slim_pod_list(text), trim_pod)
}

/// What an input held, for "no ... found" errors: its kinds, or that it is
/// empty.
pub fn held_kinds(objects: &[RawObject]) -> String {
    if objects.is_empty() {
        return "the input is empty".to_string();
    }
    let mut kinds: Vec<&str> = objects
        .iter()
        .map(|o| {
            if o.kind.is_empty() {
                "(no kind)"
            } else {
                o.kind.as_str()
            }
        })
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    format!("found kind {}", kinds.join(", "))
}

/// The fields of a pod that the comparator, the grouping by owner and the
/// checks of the input read: name, namespace, UID, creation and deletion
/// times, the deletion-cost annotation, owner references, node, restartable
/// init containers (name and restart policy), phase, conditions and the
/// containers' restart counts. Labels, container specs, images, IPs and
/// managedFields go.
pub fn trim_pod(pod: k8s_openapi::api::core::v1::Pod) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let m = pod.metadata;
    let annotations = m.annotations.and_then(|mut a| {
        let cost = a.remove(crate::annotations::POD_DELETION_COST)?;
        Some(std::collections::BTreeMap::from([(
            crate::annotations::POD_DELETION_COST.to_string(),
            cost,
        )]))
    });
    let statuses = |list: Option<Vec<ContainerStatus>>| {
        list.map(|l| {
            l.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    restart_count: c.restart_count,
                    ready: c.ready,
                    ..Default::default()
                })
                .collect()
        })
    };
    Pod {
        metadata: ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            annotations,
            owner_references: m.owner_references,
            ..Default::default()
        },
        spec: pod.spec.map(|s| PodSpec {
            node_name: s.node_name,
            init_containers: s.init_containers.map(|l| {
                l.into_iter()
                    .map(|c| Container {
                        name: c.name,
                        restart_policy: c.restart_policy,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        status: pod.status.map(|s| PodStatus {
            phase: s.phase,
            conditions: s.conditions,
            container_statuses: statuses(s.container_statuses),
            init_container_statuses: statuses(s.init_container_statuses),
            ..Default::default()
        }),
    }
}

/// A JSON array of pods decoded one at a time, each slimmed at once.
struct SlimPods(Vec<k8s_openapi::api::core::v1::Pod>);

impl<'de> serde::Deserialize<'de> for SlimPods {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = SlimPods;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of pods")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SlimPods, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(pod) = seq.next_element::<k8s_openapi::api::core::v1::Pod>()? {
                    out.push(trim_pod(pod));
                }
                Ok(SlimPods(out))
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// [`typed_pod_list`], slimming each pod as it is decoded.
fn typed_slim_pod_list(text: &str) -> Option<(Vec<k8s_openapi::api::core::v1::Pod>, &'static str)> {
    #[derive(serde::Deserialize)]
    struct Items {
        kind: Option<String>,
        items: Option<SlimPods>,
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str::<SlimPods>(text)
            .ok()
            .map(|p| (p.0, ""));
    }
    if !trimmed.starts_with('{') {
        return None;
    }
    let list: Items = serde_json::from_str(text).ok()?;
    let kind = list.kind.unwrap_or_default();
    let is_list = kind.ends_with("List") || (kind.is_empty() && list.items.is_some());
    if is_list {
        list.items.map(|p| (p.0, "items"))
    } else {
        None
    }
}

/// [`InputError::NoPods`]'s detail for a List or an array without items.
pub const EMPTY_LIST: &str = "the list is empty";

/// The error for an input without pods, saying what it held.
fn no_pods(source_name: &str, text: &str) -> InputError {
    let detail = if text.trim().is_empty() {
        "the input is empty"
    } else if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---")
    {
        "the input holds only comments"
    } else if text.trim_start().starts_with(['[', '{']) || stream::is_one_block_mapping(text) {
        EMPTY_LIST
    } else {
        "the input holds no object"
    };
    InputError::NoPods {
        source_name: source_name.to_string(),
        detail: detail.to_string(),
    }
}

/// The typed decode of a JSON List or array of pods, with the location
/// prefix of its items (`items` or empty).
fn typed_pod_list(text: &str) -> Option<(Vec<k8s_openapi::api::core::v1::Pod>, &'static str)> {
    use k8s_openapi::api::core::v1::Pod;
    #[derive(serde::Deserialize)]
    struct Items {
        kind: Option<String>,
        items: Option<Vec<Pod>>,
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str::<Vec<Pod>>(text).ok().map(|p| (p, ""));
    }
    if !trimmed.starts_with('{') {
        return None;
    }
    let list: Items = serde_json::from_str(text).ok()?;
    // the same test `flatten` applies to decide that an object is a list
    let kind = list.kind.unwrap_or_default();
    let is_list = kind.ends_with("List") || (kind.is_empty() && list.items.is_some());
    if is_list {
        list.items.map(|p| (p, "items"))
    } else {
        None
    }
}

/// One `read` into `buf`, again after an interrupt; an error names the source.
pub(crate) fn read_some(
    reader: &mut impl std::io::Read,
    buf: &mut [u8],
    source_name: &str,
) -> Result<usize, InputError> {
    loop {
        match reader.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                return Err(InputError::Io {
                    source_name: source_name.to_string(),
                    error,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot past serde-saphyr's default budget (250,000 nodes, 1,024
    /// documents) parses; what guards against a small text expanding (aliases,
    /// depth) still refuses.
    #[test]
    fn yaml_limits_grow_with_the_text_but_not_expansion() {
        let item = |i: usize| {
            format!("- kind: Pod\n  metadata: {{name: p{i}, namespace: s, labels: {{app: web, tier: a, zone: b}}}}\n")
        };
        let list: String = std::iter::once("kind: List\nitems:\n".to_string())
            .chain((0..30_000).map(item))
            .collect();
        assert_eq!(parse_objects("big.yaml", &list).unwrap().len(), 30_000);
        let docs: String = (0..2_000)
            .map(|i| format!("---\nkind: Pod\nmetadata: {{name: p{i}}}\n"))
            .collect();
        assert_eq!(parse_objects("docs.yaml", &docs).unwrap().len(), 2_000);
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().enumerate() {
            let next = ["b", "c", "d", "e", "f", "g", "h", "i"][i];
            bomb.push_str(&format!(
                "{next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let e = parse_objects("bomb.yaml", &bomb).unwrap_err().to_string();
        assert!(e.contains("bomb.yaml: not valid YAML"), "{e}");
        let deep = format!("a: {}{}\n", "[".repeat(70), "]".repeat(70));
        let e = parse_objects("deep.yaml", &deep).unwrap_err().to_string();
        assert!(e.contains("nested too deeply"), "{e}");
    }

    #[test]
    fn forms() {
        let list = r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let objs = parse_objects("f.json", list).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location, "items[1]");
        let pods = pods_from(&objs).unwrap();
        assert_eq!(pods[0].metadata.name.as_deref(), Some("a"));

        let arr = r#"[{"metadata":{"name":"a"}}]"#;
        assert_eq!(parse_objects("f", arr).unwrap()[0].location, "[0]");

        let yaml = "kind: Pod\nmetadata:\n  name: y\n---\nkind: Pod\nmetadata:\n  name: z\n";
        let objs = parse_objects("f.yaml", yaml).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location, "document 2");
    }

    /// The typed fast path answers exactly as the general path, and leaves
    /// every error to it.
    #[test]
    fn parse_pods_matches_the_general_path() {
        let general = |t: &str| {
            parse_objects("f.json", t)
                .and_then(|o| pods_from(&o))
                .and_then(|p| {
                    if p.is_empty() {
                        Err(no_pods("f.json", t))
                    } else {
                        Ok(p)
                    }
                })
        };
        let cases = [
            r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
            r#"{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[]}"#,
            r#"{"items":[{"metadata":{"name":"a"}}]}"#,
            r#"  [{"metadata":{"name":"a"}},{"kind":"Pod","apiVersion":"v1"}]"#,
            r#"{"kind":"List","items":null}"#,
            r#"{"kind":"List","items":[{"kind":"List","items":[{"metadata":{"name":"n"}}]}]}"#,
            r#"[[{"metadata":{"name":"a"}}]]"#,
            r#"{"kind":"Pod","metadata":{"name":"a"},"items":[]}"#,
            r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x"}}]}"#,
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod"}]}"#,
            r#"{"kind":"PodList","items":[{"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#,
            r#"{"kind":"List","items":[3]}"#,
            r#"{"kind":"List","items":[]} trailing"#,
            "kind: Pod\nmetadata:\n  name: y\n",
            r#"[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]"#,
            r#"{"kind":"List","items":[{"metadata":{"name":"a","uid":"u"}},{"metadata":{"name":"b","uid":"u"}}]}"#,
            r#"[{}]"#,
            "",
        ];
        for text in cases {
            match (parse_pods("f.json", text), general(text)) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                (a, b) => panic!("{text}: fast {a:?} vs general {b:?}"),
            }
        }
    }

    /// The slim path answers as the whole one, with slimmed pods.
    #[test]
    fn parse_pods_slim_matches_parse_pods() {
        let full = r#"{"kind":"PodList","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"s","uid":"u","labels":{"x":"y"},"annotations":{"other":"1","controller.kubernetes.io/pod-deletion-cost":"5"},"creationTimestamp":"2025-01-01T00:00:00Z","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r","controller":true}]},"spec":{"nodeName":"n","containers":[{"name":"c","image":"i"}],"initContainers":[{"name":"p","image":"i","restartPolicy":"Always"}]},"status":{"phase":"Running","podIP":"1.2.3.4","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}],"containerStatuses":[{"name":"c","image":"i","imageID":"x","ready":true,"restartCount":3}],"initContainerStatuses":[{"name":"p","image":"i","imageID":"x","ready":true,"restartCount":1}]}}]}"#;
        let slim = parse_pods_slim("f.json", full).unwrap();
        assert_eq!(slim[0].metadata.labels, None);
        assert_eq!(
            slim[0].metadata.annotations.as_ref().map(|a| a.len()),
            Some(1)
        );
        assert!(slim[0].spec.as_ref().unwrap().containers.is_empty());
        let yaml = "kind: Pod\nmetadata: {name: y, annotations: {a: b}}\n";
        for text in [
            full,
            yaml,
            r#"[{"metadata":{"name":"a"}},{"kind":"Pod","apiVersion":"v1"}]"#,
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod"}]}"#,
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#,
            r#"[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]"#,
            r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x"}}]}"#,
            "[]",
            "",
        ] {
            match (parse_pods_slim("f.json", text), parse_pods("f.json", text)) {
                (Ok(a), Ok(b)) => {
                    let b: Vec<_> = b.into_iter().map(trim_pod).collect();
                    assert_eq!(a, b, "{text}");
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                (a, b) => panic!("{text}: slim {a:?} vs whole {b:?}"),
            }
        }
    }

    #[test]
    fn errors_name_source_item_and_field() {
        let bad = r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#;
        let objs = parse_objects("pods.json", bad).unwrap();
        let err = pods_from(&objs).unwrap_err().to_string();
        assert!(err.contains("pods.json"), "{err}");
        assert!(err.contains("items[0]"), "{err}");
        assert!(err.contains("status.conditions[0].status"), "{err}");

        let err = parse_objects("x.json", "{nope").unwrap_err().to_string();
        assert_eq!(
            err,
            "x.json: not valid JSON at line 1 column 2: key must be a string"
        );
        let err = parse_objects("x.yaml", "a: [").unwrap_err().to_string();
        assert_eq!(
            err,
            "x.yaml: not valid YAML at line 1 column 4: unclosed bracket '['"
        );
        let err = parse_objects("x.yaml", "spec:\n  x: 1\n   y: 2\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "x.yaml: not valid YAML at line 3 column 5: mapping values are not allowed in this context"
        );
        let deep = format!("a: {}{}", "[".repeat(70), "]".repeat(70));
        let err = parse_objects("deep.yaml", &deep).unwrap_err().to_string();
        assert_eq!(
            err,
            "deep.yaml: not valid YAML at line 1 column 67: nested too deeply (more than 64 levels of lists and maps)"
        );
        let err = parse_objects("x.yaml", "42").unwrap_err().to_string();
        assert!(err.contains("found a number"), "{err}");
        let objs = parse_objects("x.yaml", "kind: Node\nmetadata: {name: n}").unwrap();
        assert!(pods_from(&objs)
            .unwrap_err()
            .to_string()
            .contains("expected a Pod"));
    }

    fn pods_err(text: &str) -> String {
        parse_pods("in.json", text).unwrap_err().to_string()
    }

    #[test]
    fn no_pods_is_an_error_naming_the_source() {
        for (text, detail) in [
            ("", "the input is empty"),
            ("  \n\t\n", "the input is empty"),
            ("# nothing\n---\n", "the input holds only comments"),
            ("[]", "the list is empty"),
            (r#"{"kind":"PodList","items":[]}"#, "the list is empty"),
            ("null", "the input holds no object"),
        ] {
            assert_eq!(
                pods_err(text),
                format!("no pods in in.json ({detail})"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn items_that_are_not_pods_are_named() {
        for (text, want) in [
            (
                "{}",
                "in.json: object: not a Pod: no kind and no metadata.name (found an empty object)",
            ),
            (
                r#"{"foo":1}"#,
                "in.json: object: not a Pod: no kind and no metadata.name (found fields foo)",
            ),
            (
                "[{}]",
                "in.json: [0]: not a Pod: no kind and no metadata.name (found an empty object)",
            ),
            (
                r#"{"kind":"Pod"}"#,
                "in.json: object: Pod without metadata.name",
            ),
            (
                "a: b",
                "in.json: object: not a Pod: no kind and no metadata.name (found fields a)",
            ),
            (
                r#"{"kind":"List","items":[{"metadata":{"name":"a"}},{"kind":"Pod","metadata":{"namespace":"x"}}]}"#,
                "in.json: items[1]: Pod without metadata.name",
            ),
        ] {
            assert_eq!(pods_err(text), want, "{text:?}");
        }
    }

    #[test]
    fn duplicates_name_both_items() {
        let err = pods_err(
            r#"{"kind":"List","items":[{"metadata":{"name":"a","namespace":"s"}},{"metadata":{"name":"b","namespace":"s"}},{"metadata":{"name":"a","namespace":"s"}}]}"#,
        );
        assert_eq!(
            err,
            "in.json: items[2] (Pod s/a) repeats in.json: items[0] (Pod s/a): the same name s/a; each pod may appear once"
        );
        let err = pods_err(
            r#"[{"metadata":{"name":"a","uid":"u1"}},{"metadata":{"name":"b","uid":"u1"}}]"#,
        );
        assert_eq!(
            err,
            "in.json: [1] (Pod b) repeats in.json: [0] (Pod a): the same uid u1; each pod may appear once"
        );
        // the same name in two namespaces is two pods; so are two pods without a UID
        let pods = parse_pods(
            "in.json",
            r#"[{"metadata":{"name":"a","namespace":"x"}},{"metadata":{"name":"a","namespace":"y"}},{"metadata":{"name":"b","namespace":"y"}}]"#,
        )
        .unwrap();
        assert_eq!(pods.len(), 3);
        let warning = missing_uid_warning("in.json", &pods).unwrap();
        assert!(
            warning.starts_with("in.json: 3 pod(s) without metadata.uid (x/a, y/a, y/b)"),
            "{warning}"
        );
        let yaml =
            "kind: Pod\nmetadata: {name: a, uid: u}\n---\nkind: Pod\nmetadata: {name: a, uid: v}\n";
        assert!(pods_err(yaml)
            .contains("in.json: document 2 (Pod a) repeats in.json: document 1 (Pod a)"));
    }

    /// A reader that hands out `pattern` forever, `step` bytes at a time.
    struct Endless {
        pattern: &'static [u8],
        at: usize,
        step: usize,
        given: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step);
            for b in &mut buf[..n] {
                *b = self.pattern[self.at % self.pattern.len()];
                self.at += 1;
            }
            self.given += n;
            Ok(n)
        }
    }

    fn endless(pattern: &'static [u8], step: usize) -> Endless {
        Endless {
            pattern,
            at: 0,
            step,
            given: 0,
        }
    }

    fn read_text(bytes: &[u8], max: u64) -> Result<String, InputError> {
        read_bounded("in", bytes, max, 0, Expect::Manifest)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512Mi"), Ok(512 << 20));
        assert_eq!(parse_size("2Gi"), Ok(DEFAULT_MAX_INPUT_BYTES));
        assert_eq!(parse_size(DEFAULT_MAX_INPUT), Ok(DEFAULT_MAX_INPUT_BYTES));
        assert_eq!(parse_size("64k"), Ok(64_000));
        assert_eq!(parse_size("1G"), Ok(1_000_000_000));
        for bad in ["", "Mi", "1X", "-1", "0", "1.5Gi", "99999999999Ti"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(show_size(2 << 30), "2Gi");
        assert_eq!(show_size(100 << 10), "100Ki");
        assert_eq!(show_size(1000), "1000 bytes");
    }

    #[test]
    fn binary_input_fails_at_its_first_byte() {
        let mut zero = endless(b"\0", usize::MAX);
        let err = read_bounded("/dev/zero", &mut zero, 1 << 30, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "/dev/zero: not valid JSON or YAML at line 1 column 1: a NUL byte is in no JSON or YAML text (binary data?); stopped reading"
        );
        assert!(zero.given <= 64 * 1024, "read {} bytes", zero.given);
        let err = read_text(b"kind: Pod\nmetadata:\x1b[1m", 1 << 20)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "in: not valid JSON or YAML at line 2 column 10: control character 0x1b is in no JSON or YAML text (binary data?); stopped reading");
        let err = read_text(b"a: \xff\xfe", 1 << 20).unwrap_err().to_string();
        assert!(
            err.contains("line 1 column 4: byte 0xff is not UTF-8"),
            "{err}"
        );
        // a UTF-8 sequence cut at the end of the input
        let err = read_text("a: \u{e9}".as_bytes().split_last().unwrap().1, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not UTF-8"), "{err}");
        // tabs, CR LF, a BOM and multi-byte text are fine, even when reads cut them
        let text = "\u{feff}kind: Pod\r\nmetadata:\t{name: caf\u{e9}-\u{1f600}}\n";
        let got = read_bounded("in", OneByte(text.as_bytes()), 1 << 20, 0, Expect::Manifest);
        assert_eq!(got.unwrap(), text);
    }

    /// Hands out one byte per read.
    struct OneByte<'a>(&'a [u8]);

    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            match buf.first_mut() {
                Some(b) => *b = *first,
                None => return Ok(0),
            }
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn input_past_the_limit_stops() {
        assert_eq!(read_text(b"[]", 2).unwrap(), "[]");
        let err = read_text(b"[ ]", 2).unwrap_err().to_string();
        assert_eq!(err, "in: larger than --max-input-bytes 2 bytes: stopped reading (raise --max-input-bytes for a larger input)");
        let mut list = endless(b"{\"a\": 1},\n", 1000);
        let err = read_bounded("<stdin>", &mut list, 100 << 10, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert!(err.contains("larger than --max-input-bytes 100Ki"), "{err}");
        assert!(list.given <= (100 << 10) + 1, "read {}", list.given);
    }

    #[test]
    fn endless_scalar_text_stops_after_one_mebibyte() {
        let mut yes = endless(b"y\n", 8192);
        let err = read_bounded("<stdin>", &mut yes, 1 << 40, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "<stdin>: object: expected a Kubernetes object, a List or an array, found text (\"y\") going on for more than 1 MiB without a `key:` or `- `; stopped reading");
        assert!(yes.given < 2 << 20, "read {}", yes.given);
        // samples (CSV) are any text: only the limit stops them
        let mut yes = endless(b"y\n", 8192);
        let err = read_bounded("<stdin>", &mut yes, 3 << 20, 0, Expect::Text).unwrap_err();
        assert!(matches!(err, InputError::TooLarge { .. }), "{err}");
        // broken JSON is caught at the same early look
        let mut bad = endless(b"[1 2 ", 8192);
        let err = read_bounded("<stdin>", &mut bad, 1 << 40, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("<stdin>: not valid JSON at line 1 column 4"),
            "{err}"
        );
        let mut objects = endless(b"{\"a\": 1},\n", 8192);
        let err = read_bounded("<stdin>", &mut objects, 1 << 40, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not valid JSON at line 1 column 9: trailing characters"),
            "{err}"
        );
    }

    /// The early look never refuses a good input, wherever the read stops.
    #[test]
    fn head_check_accepts_every_prefix_of_good_input() {
        let json = r#"{"kind":"PodList","items":[{"metadata":{"name":"caf\u00e9 \"x\"","n":-1.5e-3,"t":true,"f":false,"z":null},"a":[1,2.0,{"k":[]}]}, {"x": 12345}]}"#;
        let yaml =
            "# c\n%YAML 1.2\n---\napiVersion: v1\nitems:\n- kind: Pod\n  metadata: {name: a}\n";
        for text in [
            json,
            yaml,
            "--- # c\nkind: Pod\n",
            "- a\n- b\n",
            "\"k\": v\n",
            "null\n---\nkind: Pod\n",
        ] {
            for cut in 0..=text.len() {
                if let Some(prefix) = text.get(..cut) {
                    if let Err(e) = head_check("in", prefix.as_bytes()) {
                        panic!("{prefix:?}: {e}");
                    }
                }
            }
        }
        for scalar in ["y\ny\n", "--- y\n", "# c\n\nhello world\nmore"] {
            assert!(head_check("in", scalar.as_bytes()).is_err(), "{scalar:?}");
        }
    }

    #[test]
    fn versions_are_read_apart_from_objects() {
        let text = "clientVersion: {major: \"1\", minor: \"36\"}\nserverVersion:\n  major: \"1\"\n  minor: \"33+\"\n  gitVersion: v1.33.4-eks-1\n---\nkind: Pod\nmetadata: {name: a}\n---\nmetadata: {name: b}\n";
        let objects = parse_objects("s.yaml", text).unwrap();
        let flags: Vec<bool> = objects.iter().map(is_version_object).collect();
        assert_eq!(flags, [true, false, false]);
        let v = server_version(&objects).unwrap().unwrap();
        assert_eq!(v.version, KubeVersion::new(1, 33));
        assert_eq!(v.git_version, "v1.33.4-eks-1");
        assert_eq!(v.at, "s.yaml: document 1");
        // the raw /version body; none at all
        let raw = parse_objects("v.json", r#"{"major":"1","minor":"30"}"#).unwrap();
        assert!(!is_version_object(&raw[0]), "no version key");
        let raw = parse_objects(
            "v.json",
            r#"{"major":"1","minor":"30","gitVersion":"v1.30.1"}"#,
        )
        .unwrap();
        assert_eq!(
            server_version(&raw).unwrap().map(|v| v.git_version),
            Some("v1.30.1".into())
        );
        assert_eq!(server_version(&objects[1..]).unwrap(), None);
        // the same minor twice is one version; two minors are an error
        let same = [objects[0].clone(), objects[0].clone()];
        assert!(server_version(&same).unwrap().is_some());
        let both = [objects[0].clone(), raw[0].clone()];
        let e = server_version(&both).unwrap_err().to_string();
        assert!(e.contains("v.json: object (v1.30.1): another Kubernetes version than s.yaml: document 1 (v1.33.4-eks-1)"), "{e}");
        // kubectl without a server, a version that is none
        for (text, needle) in [
            (
                r#"{"clientVersion":{"major":"1"}}"#,
                "without serverVersion",
            ),
            (
                r#"{"serverVersion":{"major":"x"}}"#,
                "serverVersion is not a Kubernetes version",
            ),
            (
                r#"{"serverVersion":"v1.30"}"#,
                "serverVersion is not a Kubernetes version",
            ),
        ] {
            let o = parse_objects("k.json", text).unwrap();
            let e = server_version(&o).unwrap_err().to_string();
            assert!(
                e.starts_with("k.json: object: ") && e.contains(needle),
                "{e}"
            );
        }
        // predict's reader leaves it out of the pods and hands it back
        let (pods, v) = parse_pods_slim_versioned("s.yaml", text).unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(v.map(|v| v.version), Some(KubeVersion::new(1, 33)));
    }
}
