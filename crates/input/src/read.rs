//! Reading text from a reader with bounds: the size limit, and the first sign
//! that the bytes are not the JSON or YAML a user meant to give (binary data,
//! UTF-16, a run of `y`).

use std::io::Read;

use super::{json_syntax, InputError};

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
pub(super) const HEAD_CHECK_BYTES: usize = 1 << 20;

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
    if t.starts_with('-') {
        return Err(format!(
            "{s:?}: a size is not negative; expected a number of bytes such as 2Gi or 1048576"
        ));
    }
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
pub(super) fn check_text(
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
pub(super) fn first_control(bytes: &[u8]) -> Option<usize> {
    let is_control = |b: u8| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r');
    // eight bytes at a time: a word without a byte below 0x20 is passed
    // whole (bytes from 0x80 have their high bit set, so never count)
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let w = u64::from_ne_bytes(w);
        if w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0 {
            if let Some(k) = word.iter().position(|&b| is_control(b)) {
                return Some(at + k);
            }
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| is_control(b))
        .map(|k| at + k)
}

pub(super) fn control_message(b: u8) -> String {
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
pub(super) fn utf16_hint(head: &[u8]) -> Option<String> {
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
pub(super) fn line_column(buf: &[u8], at: usize) -> (u64, u64) {
    let before = &buf[..at.min(buf.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() as u64 + 1;
    (line, column)
}

/// The early look at a large manifest's first bytes: JSON whose syntax is
/// already wrong, or YAML whose first document is a plain scalar (which no
/// later line can turn into an object), fails now rather than at the end.
pub(super) fn head_check(source_name: &str, checked: &[u8]) -> Result<(), InputError> {
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
pub(super) fn yaml_scalar_head(text: &str) -> Option<&str> {
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
    use proptest::prelude::*;

    use super::first_control;

    proptest! {
        /// Eight bytes at a time finds the byte that one at a time does.
        #[test]
        fn first_control_is_the_first_such_byte(
            bytes in prop::collection::vec(prop_oneof![
                4 => 0x20u8..=0x7e,
                1 => 0u8..0x20,
                1 => 0x80u8..=0xff,
            ], 0..80),
        ) {
            let one_by_one = bytes
                .iter()
                .position(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'));
            prop_assert_eq!(first_control(&bytes), one_by_one);
        }
    }
}
