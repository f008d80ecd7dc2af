//! Streamed input: parsed as the bytes arrive, each item of a List or array
//! handed as JSON text to an [`ItemSink`] and decoded at once, so neither the
//! text nor a tree of it is ever held. JSON items are taken as raw text; a
//! YAML input whose first line starts a block mapping (`kubectl get -o
//! yaml`) has each item written out as JSON, by a line reader
//! ([`yaml_window`]) or, for what it is not sure of, by the YAML reader.
//! Other YAML (and JSON after anything but ASCII whitespace) is handed back
//! whole.
//! Two sinks: `predict`'s, here, which keeps [`SlimPod`]s, and `plan`'s
//! `SnapshotReader`.
//!
//! `predict` answers as [`super::parse_pods_slim_versioned`] on the whole text does,
//! errors included, with two exceptions: fields the comparator does not read
//! (labels, container specs, IPs...) are skipped unchecked, and in a streamed
//! YAML input of several documents the first document's items are named as
//! in a single document (`items[2]`, not `document 1.items[2]`).

use std::borrow::Cow;
use std::io::{BufReader, Read};
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{
    control_message, control_message_at, first_control, flatten, is_version_object, item_label,
    json_syntax, not_utf8_message, read_bounded, Expect, InputError, InputLimits, RawObject,
    ServerVersion,
};
use crate::comparator::slim::SlimPod;

mod fast;
mod window;
mod yaml_window;

/// The pods of a `predict` input read from `reader` (a file or stdin, opened
/// by the CLI); `size_hint` is a regular file's length.
pub fn pods_from_reader(
    source_name: &str,
    reader: impl Read,
    limits: InputLimits,
    size_hint: u64,
) -> Result<(Vec<SlimPod>, Option<ServerVersion>), InputError> {
    pods_by(source_name, reader, limits, size_hint, Path::Window)
}

fn pods_by(
    source_name: &str,
    reader: impl Read,
    limits: InputLimits,
    size_hint: u64,
    path: Path,
) -> Result<(Vec<SlimPod>, Option<ServerVersion>), InputError> {
    let mut collect = Collect::new(source_name, size_hint, limits);
    let streamed = stream_items_by(
        source_name,
        reader,
        limits.bytes,
        size_hint,
        &mut collect,
        path,
    )?;
    match streamed {
        Streamed::Items => collect.finish(),
        Streamed::Text(text) => {
            let (pods, version) = super::parse_pods_slim_versioned(source_name, &text)?;
            if pods.len() as u64 > limits.pods {
                return Err(InputError::TooManyPods {
                    source_name: source_name.to_string(),
                    limit: limits.pods,
                });
            }
            Ok((pods, version))
        }
    }
}

/// What receives a streamed JSON input: each item of its top-level array or
/// List as raw text, or the one object it is.
pub(crate) trait ItemSink {
    /// One item of the top-level array or List, as raw JSON, with where it
    /// was (`items[3]`, `[0]`).
    fn item(&mut self, raw: &str, location: String);
    /// One object item at the start of `text`, which goes on past the item
    /// (to the end of what was read so far): the sink keeps it and says how
    /// long it was, or says the text ends inside it, or leaves it to
    /// [`ItemSink::item`]. An item it takes is valid JSON.
    fn item_prefix(&mut self, _text: &str, _at: ItemAt) -> Prefix {
        Prefix::Other
    }
    /// The input's one object (not a List), or what a single item held.
    fn value(&mut self, value: Value, location: String);
    /// Forgets everything handed so far (a repeated `items` key: the last
    /// one counts, as in a parsed object).
    fn reset(&mut self);
    /// Whether a shape error was kept (later items are then not read).
    fn has_shape(&self) -> bool;
    /// Keeps a shape error for the input.
    fn set_shape(&mut self, e: InputError);
    /// An error that stops reading at once (a limit passed), taken once.
    fn take_fatal(&mut self) -> Option<InputError>;
    /// Whether reading must stop.
    fn stopped(&self) -> bool;
}

/// How many decimal digits `n` is written with.
fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Where an item of the top-level array or List was: `[3]`, `items[3]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ItemAt {
    /// In a List's `items` (else a top-level array).
    pub list: bool,
    pub index: usize,
}

impl std::fmt::Display for ItemAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.list {
            f.write_str("items")?;
        }
        write!(f, "[{}]", self.index)
    }
}

/// What [`ItemSink::item_prefix`] did with an item.
pub(crate) enum Prefix {
    /// Kept it; it was this many bytes long.
    Taken(usize),
    /// The text ends inside the item: more is needed.
    Cut,
    /// Not for this path: [`ItemSink::item`] takes it.
    Other,
}

/// How [`stream_items`] read its input.
pub(crate) enum Streamed {
    /// Every item handed to the sink (JSON, or YAML that is one mapping).
    Items,
    /// Not JSON (YAML, or JSON after other than ASCII whitespace): the whole
    /// text, checked, for the caller's whole-text path.
    Text(String),
}

/// Streams a JSON input's items into `sink` as the bytes arrive, and a YAML
/// input's when it starts a block mapping (see the module doc); anything
/// else is read whole and handed back. Syntax errors,
/// text that is not UTF-8 and a passed limit are errors; what the items hold
/// is the sink's to judge.
pub(crate) fn stream_items<S: ItemSink>(
    source_name: &str,
    reader: impl Read,
    max_bytes: u64,
    size_hint: u64,
    sink: &mut S,
) -> Result<Streamed, InputError> {
    stream_items_by(
        source_name,
        reader,
        max_bytes,
        size_hint,
        sink,
        Path::Window,
    )
}

/// How JSON is read: the window's fast path (then the reader path from
/// where it stops), or the reader path alone (the tests' reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Window,
    #[cfg(test)]
    Reader,
}

fn stream_items_by<S: ItemSink>(
    source_name: &str,
    mut reader: impl Read,
    max_bytes: u64,
    size_hint: u64,
    sink: &mut S,
    path: Path,
) -> Result<Streamed, InputError> {
    let (head, first) = peek_start(source_name, &mut reader, max_bytes)?;
    let json = matches!(first, Some(b'{' | b'['));
    if !json && !starts_one_block_mapping(&head) {
        return read_whole(source_name, head, reader, max_bytes, size_hint, sink);
    }
    let text = TextReader::new(source_name, head, reader, max_bytes);
    if !json {
        stream_yaml(source_name, text, max_bytes, size_hint, sink)?;
        return Ok(Streamed::Items);
    }
    let mut window = window::Window::new(text);
    let outcome = match path {
        Path::Window => window.run(sink),
        #[cfg(test)]
        Path::Reader => window::Outcome::Takeover(window::Takeover::start()),
    };
    let takeover = match outcome {
        window::Outcome::Takeover(t) => t,
        window::Outcome::Fatal(e) => return Err(e),
    };
    read_after_takeover(source_name, window, takeover, sink)?;
    Ok(Streamed::Items)
}

/// Reads the input's first bytes until the first that is not ASCII
/// whitespace (at most 64 KiB, or past `max_bytes`): the bytes read, kept
/// to be served first, and that byte if found.
fn peek_start(
    source_name: &str,
    reader: &mut impl Read,
    max_bytes: u64,
) -> Result<(Vec<u8>, Option<u8>), InputError> {
    const PEEK: usize = 64 << 10;
    let mut head: Vec<u8> = Vec::new();
    let first = loop {
        if let Some(&b) = head.iter().find(|b| !b" \t\r\n".contains(b)) {
            break Some(b);
        }
        if head.len() >= PEEK || head.len() as u64 > max_bytes {
            break None;
        }
        let start = head.len();
        head.resize(start + 8192, 0);
        let n = super::read_some(reader, &mut head[start..], source_name)?;
        head.truncate(start + n);
        if n == 0 {
            break None;
        }
    };
    Ok((head, first))
}

/// An input that is neither JSON nor starts a block mapping in its first
/// bytes: read whole and handed back, unless it is one mapping after all.
fn read_whole<S: ItemSink>(
    source_name: &str,
    head: Vec<u8>,
    reader: impl Read,
    max_bytes: u64,
    size_hint: u64,
    sink: &mut S,
) -> Result<Streamed, InputError> {
    let rest = std::io::Cursor::new(head).chain(reader);
    let text = read_bounded(source_name, rest, max_bytes, size_hint, Expect::Manifest)?;
    if !is_one_block_mapping(&text) {
        return Ok(Streamed::Text(text));
    }
    // one mapping whose first line came in a later read: its items go
    // to the sink one by one from the text, never held as one tree
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(
        &text,
        super::yaml_options(text.len()),
        |de| Top::<S, Yaml>::new(&mut *sink, source_name).deserialize(de),
    );
    if let Err(e) = parsed {
        if let Some(e) = sink.take_fatal() {
            return Err(e);
        }
        return Err(super::yaml_syntax(source_name, &e));
    }
    Ok(Streamed::Items)
}

/// The reader path from the window's takeover on: an opening that puts
/// serde_json in the same state, then the same bytes; positions in its
/// errors are moved to where those bytes are in the input.
fn read_after_takeover<R: Read, S: ItemSink>(
    source_name: &str,
    window: window::Window<'_, R>,
    takeover: window::Takeover,
    sink: &mut S,
) -> Result<(), InputError> {
    let opening = takeover.state.opening();
    let at = window.position(takeover.at);
    let window::Window { mut text, buf, .. } = window;
    let rest = std::io::Cursor::new(opening)
        .chain(std::io::Cursor::new(&buf.as_bytes()[takeover.at..]))
        .chain(&mut text);
    let resume = match takeover.state {
        window::State::Start => None,
        window::State::Before { .. } | window::State::End { .. } => Some(Resume {
            fields: takeover.fields,
            next: 0,
            skip_first: false,
        }),
        window::State::After { index, .. } => Some(Resume {
            fields: takeover.fields,
            next: index + 1,
            skip_first: true,
        }),
    };
    let parsed = {
        let mut de =
            serde_json::Deserializer::from_reader(BufReader::with_capacity(window::CHUNK, rest));
        let mut top = Top::<S, Json>::new(&mut *sink, source_name);
        top.resume = resume;
        top.deserialize(&mut de).and_then(|()| de.end())
    };
    if let Err(e) = parsed {
        if let Some(e) = sink.take_fatal() {
            return Err(e);
        }
        // the text reader's error when serde_json stopped at it: the
        // window may have read past an error in the text before it
        let read = if e.is_io() { text.error.take() } else { None };
        return Err(read.unwrap_or_else(|| {
            let mut e = json_syntax(source_name, &e);
            if let InputError::Syntax {
                position: Some(p), ..
            } = &mut e
            {
                *p = shifted(*p, at, opening.len() as u64);
            }
            e
        }));
    }
    Ok(())
}

/// Where in the input serde_json's position `(l, c)` is, when it read an
/// opening of `opening` bytes and then the input from `(line, column)` on.
fn shifted((l, c): (u64, u64), (line, column): (u64, u64), opening: u64) -> (u64, u64) {
    if l == 1 {
        (line, (c + column - 1).saturating_sub(opening))
    } else {
        (line + l - 1, c)
    }
}

/// Streams a YAML input that starts a block mapping (see
/// [`starts_one_block_mapping`]): its first document is read as the bytes
/// arrive, each item of a List handed to the sink, by the fast path
/// ([`yaml_window`]) as far as it goes and by the YAML reader from there. A
/// document marker or directive at the start of a line ends it; what
/// follows is read whole and its documents taken as the whole-text path
/// takes them (`document 2` on), though the first document's items keep
/// their single-document names.
fn stream_yaml<R: Read, S: ItemSink>(
    source_name: &str,
    text: TextReader<'_, R>,
    max_bytes: u64,
    size_hint: u64,
    sink: &mut S,
) -> Result<(), InputError> {
    let mut window = window::Window::new(text);
    let takeover = match yaml_window::run(&mut window, sink) {
        yaml_window::Outcome::Takeover(t) => t,
        yaml_window::Outcome::Fatal(e) => return Err(e),
    };
    let (line, _) = window.position(takeover.at);
    let window::Window { mut text, buf, .. } = window;
    let rest = std::io::Cursor::new(takeover.opening.as_bytes())
        .chain(std::io::Cursor::new(&buf.as_bytes()[takeover.at..]))
        .chain(&mut text);
    let mut doc = FirstDocument {
        inner: BufReader::with_capacity(64 << 10, rest),
        line: Vec::new(),
        at: 0,
        stopped_at: None,
        lines: 0,
    };
    let options = streamed_yaml_options(max_bytes, size_hint);
    let parsed =
        serde_saphyr::with_deserializer_from_reader_with_options(&mut doc, options, |de| {
            let mut top = Top::<S, Yaml>::new(&mut *sink, source_name);
            top.resume = takeover.resume.map(|(next, skip_first)| Resume {
                fields: Vec::new(),
                next,
                skip_first,
            });
            top.deserialize(de)
        });
    if let Err(e) = parsed {
        return Err(first_stop(sink, &mut doc).unwrap_or_else(|| {
            let mut e = super::yaml_syntax(source_name, &e);
            if let InputError::Syntax {
                position: Some((l, _)),
                ..
            } = &mut e
            {
                *l = takeover.input_line(*l, line);
            }
            e
        }));
    }
    // lines handed on whole: the marker's line is the next
    doc.lines = takeover.input_line(doc.lines + 1, line) - 1;
    let Some(marker) = doc.stopped_at.take() else {
        return Ok(());
    };
    if marker.starts_with(b"%") {
        // as the YAML reader says of the whole text: a directive needs `...` first
        return Err(InputError::Syntax {
            source_name: source_name.to_string(),
            format: "YAML",
            position: Some((doc.lines + 1, 1)),
            message: "missing explicit document end marker before directive".to_string(),
        });
    }
    stream_later_documents(source_name, marker, doc, sink)
}

/// The YAML reader's options for a streamed input of at most `max_bytes`
/// (`size_hint`: a regular file's length, else 0).
fn streamed_yaml_options(max_bytes: u64, size_hint: u64) -> serde_saphyr::Options {
    // a file's length when known (the budget's anchor limit shrinks with a
    // small text), else the most the input may hold
    let len = match size_hint {
        0 => max_bytes,
        known => known.min(max_bytes),
    };
    let mut options = super::yaml_options(usize::try_from(len).unwrap_or(usize::MAX));
    if let Some(budget) = options.budget.as_mut() {
        // the text reader enforces --max-input-bytes
        budget.max_reader_input_bytes = None;
    }
    // errors are one line without the source snippet: no ring buffer kept
    options.with_snippet = false;
    options
}

/// The error that stopped a streamed YAML read, if any: the sink's (a
/// limit passed), else the text reader's.
fn first_stop<R: Read + KeepsError, S: ItemSink>(
    sink: &mut S,
    doc: &mut FirstDocument<R>,
) -> Option<InputError> {
    sink.take_fatal()
        .or_else(|| doc.inner.get_mut().take_error())
}

/// A reader that keeps the error that stopped it (the text reader, or a
/// chain that ends with it).
trait KeepsError {
    fn take_error(&mut self) -> Option<InputError>;
}

impl<R> KeepsError for TextReader<'_, R> {
    fn take_error(&mut self) -> Option<InputError> {
        self.error.take()
    }
}

impl<T: KeepsError + ?Sized> KeepsError for &mut T {
    fn take_error(&mut self) -> Option<InputError> {
        (**self).take_error()
    }
}

impl<A, T: KeepsError> KeepsError for std::io::Chain<A, T> {
    fn take_error(&mut self) -> Option<InputError> {
        self.get_mut().1.take_error()
    }
}

/// What follows the first document from its end `marker` on (a `---` or
/// `...` line): usually nothing, or small documents, read whole and handed
/// to the sink as `document 2` on.
fn stream_later_documents<R: Read + KeepsError, S: ItemSink>(
    source_name: &str,
    marker: Vec<u8>,
    mut doc: FirstDocument<R>,
    sink: &mut S,
) -> Result<(), InputError> {
    let mut rest = if marker.starts_with(b"...") {
        Vec::new()
    } else {
        marker
    };
    let offset = doc.lines + u64::from(rest.is_empty());
    if doc.inner.read_to_end(&mut rest).is_err() {
        if let Some(e) = first_stop(sink, &mut doc) {
            return Err(e);
        }
    }
    let rest = String::from_utf8_lossy(&rest);
    let docs: Vec<Value> = super::parse_documents(source_name, &rest).map_err(|mut e| {
        if let InputError::Syntax {
            position: Some((line, _)),
            ..
        } = &mut e
        {
            *line += offset;
        }
        e
    })?;
    for (i, v) in docs.into_iter().enumerate() {
        if !v.is_null() {
            sink.value(v, format!("document {}", i + 2));
            if let Some(e) = sink.take_fatal() {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A YAML text's first document, line by line: it ends (reads as the end of
/// input) at the first line that is a document marker or directive, which
/// is kept for the caller.
struct FirstDocument<R> {
    inner: BufReader<R>,
    /// The line being handed on, and how much of it was.
    line: Vec<u8>,
    at: usize,
    stopped_at: Option<Vec<u8>>,
    /// Lines handed on whole.
    lines: u64,
}

impl<R: Read> Read for FirstDocument<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        // as many lines as fit: short reads cost the YAML reader a copy each
        let mut n = 0;
        while n < out.len() {
            if self.at == self.line.len() {
                if self.stopped_at.is_some() {
                    break;
                }
                self.line.clear();
                self.at = 0;
                if self.inner.read_until(b'\n', &mut self.line)? == 0 {
                    break;
                }
                if is_document_marker(&self.line) {
                    self.stopped_at = Some(std::mem::take(&mut self.line));
                    break;
                }
                self.lines += u64::from(self.line.ends_with(b"\n"));
            }
            let k = (self.line.len() - self.at).min(out.len() - n);
            out[n..n + k].copy_from_slice(&self.line[self.at..self.at + k]);
            self.at += k;
            n += k;
        }
        Ok(n)
    }
}

/// A line that starts a document (`---`), ends one (`...`) or is a directive
/// (`%YAML`): YAML reads these at the start of a line, in any context.
fn is_document_marker(line: &[u8]) -> bool {
    line.starts_with(b"%")
        || [&b"---"[..], b"..."].iter().any(|m| {
            line.strip_prefix(*m)
                .is_some_and(|rest| rest.first().is_none_or(|b| b" \t\r\n".contains(b)))
        })
}

/// Whether the first bytes of a YAML input start a block mapping with a
/// plain key on its first line, before any document marker or directive:
/// what `kubectl get -o yaml` writes, streamed by [`stream_yaml`].
fn starts_one_block_mapping(head: &[u8]) -> bool {
    // whole lines of valid text only: the last one may be cut by the read
    let valid = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
    };
    let complete = &valid[..valid.rfind('\n').map_or(0, |i| i + 1)];
    let mut lines = complete.lines().filter(|l| !is_blank_or_comment(l));
    match lines.next() {
        Some(first) => !is_document_marker(first.as_bytes()) && is_plain_key_line(first),
        None => false,
    }
}

fn is_blank_or_comment(line: &str) -> bool {
    line.trim().is_empty() || line.trim_start().starts_with('#')
}

/// `key:` or `key: value` at the start of the line, the key plain.
fn is_plain_key_line(line: &str) -> bool {
    line.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && line
            .split_once(':')
            .is_some_and(|(_, rest)| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// Whether a YAML text is one document whose top is a block mapping with a
/// plain key on its first line (as `kubectl get -o yaml` writes): no
/// document markers or directives, which the whole-text path numbers and
/// reads as it always has.
pub(crate) fn is_one_block_mapping(text: &str) -> bool {
    if text.lines().any(|l| is_document_marker(l.as_bytes())) {
        return false;
    }
    text.lines()
        .find(|l| !is_blank_or_comment(l))
        .is_some_and(is_plain_key_line)
}

/// A reader that hands on only text: it stops at `limit` bytes, and at the
/// first control character or byte that is not UTF-8 (as `read_bounded`
/// does), keeping the error for the caller. A read with such a byte hands
/// on nothing of it.
struct TextReader<'s, R> {
    source_name: &'s str,
    /// Bytes read while looking at the start, served first.
    head: Vec<u8>,
    head_at: usize,
    inner: R,
    total: u64,
    limit: u64,
    /// The start of a UTF-8 sequence cut by the last read.
    carry: [u8; 4],
    carried: usize,
    /// 1-based line and column of the next byte handed on.
    line: u64,
    column: u64,
    error: Option<InputError>,
}

impl<'s, R: Read> TextReader<'s, R> {
    /// The text of `head` (bytes read already), then of `inner`, at most
    /// `limit` bytes in all.
    fn new(source_name: &'s str, head: Vec<u8>, inner: R, limit: u64) -> Self {
        Self {
            source_name,
            head,
            head_at: 0,
            inner,
            total: 0,
            limit,
            carry: [0; 4],
            carried: 0,
            line: 1,
            column: 1,
            error: None,
        }
    }

    fn fail(&mut self, e: InputError) -> std::io::Error {
        self.error = Some(e);
        std::io::Error::other("stopped reading")
    }

    /// 1-based line and column of `data[at]`, `data` starting at the next byte.
    fn position(&self, data: &[u8], at: usize) -> (u64, u64) {
        let before = &data[..at];
        match memchr::memrchr(b'\n', before) {
            Some(nl) => (
                self.line + memchr::memchr_iter(b'\n', before).count() as u64,
                (at - nl) as u64,
            ),
            None => (self.line, self.column + at as u64),
        }
    }

    /// Nothing handed on yet: `data` starts at the input's first byte.
    fn at_start(&self) -> bool {
        self.line == 1 && self.column == 1
    }

    /// The message for control character `b` in `data`, the bytes read now.
    fn control_message(&self, data: &[u8], b: u8) -> String {
        if self.at_start() {
            control_message_at(data, b)
        } else {
            control_message(b)
        }
    }

    fn not_text(&mut self, data: &[u8], at: usize, message: String) -> std::io::Error {
        let position = Some(self.position(data, at));
        let e = InputError::Syntax {
            source_name: self.source_name.to_string(),
            format: "JSON or YAML",
            position,
            message,
        };
        self.fail(e)
    }
}

impl<R: Read> Read for TextReader<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.error.is_some() {
            return Err(std::io::Error::other("stopped reading"));
        }
        if out.len() < 4 {
            // BufReader always asks for its whole buffer
            return Err(std::io::Error::other("read buffer shorter than 4 bytes"));
        }
        loop {
            let c = self.carried;
            out[..c].copy_from_slice(&self.carry[..c]);
            let n = self.fill(out, c)?;
            let data_len = c + n;
            let at_end = n == 0;
            let valid = self.text_end(out, data_len, at_end)?;
            self.carried = data_len - valid;
            let mut carry = [0u8; 4];
            carry[..self.carried].copy_from_slice(&out[valid..data_len]);
            self.carry = carry;
            if valid == 0 && !at_end {
                continue;
            }
            let (line, column) = self.position(&out[..valid], valid);
            self.line = line;
            self.column = column;
            return Ok(valid);
        }
    }
}

impl<R: Read> TextReader<'_, R> {
    /// Reads the next bytes into `out[c..]` (after `c` carried ones): what
    /// is left of the head first, then the inner reader. Passing the limit
    /// is an error; 0 is the end of the input.
    #[inline]
    fn fill(&mut self, out: &mut [u8], c: usize) -> std::io::Result<usize> {
        let n = if self.head_at < self.head.len() {
            let k = (self.head.len() - self.head_at).min(out.len() - c);
            out[c..c + k].copy_from_slice(&self.head[self.head_at..self.head_at + k]);
            self.head_at += k;
            if self.head_at == self.head.len() {
                self.head = Vec::new();
                self.head_at = 0;
            }
            k
        } else {
            // read at most one byte past the limit, to know it was passed
            let room = self.limit.saturating_add(1).saturating_sub(self.total);
            let want = (out.len() - c).min(usize::try_from(room).unwrap_or(usize::MAX));
            loop {
                match self.inner.read(&mut out[c..c + want.max(1)]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(error) => {
                        let e = InputError::Io {
                            source_name: self.source_name.to_string(),
                            error,
                        };
                        return Err(self.fail(e));
                    }
                }
            }
        };
        self.total += n as u64;
        if self.total > self.limit {
            let e = InputError::TooLarge {
                source_name: self.source_name.to_string(),
                limit: self.limit,
                size: None,
            };
            return Err(self.fail(e));
        }
        Ok(n)
    }

    /// How many bytes of `out[..data_len]` are text to hand on: whole UTF-8
    /// characters (a character cut by the read waits for the next, unless
    /// the input ended) with no control character; anything else is an error.
    #[inline]
    fn text_end(&mut self, out: &[u8], data_len: usize, at_end: bool) -> std::io::Result<usize> {
        let valid = match std::str::from_utf8(&out[..data_len]) {
            Ok(_) => data_len,
            Err(e) => {
                let end = e.valid_up_to();
                if e.error_len().is_some() || at_end {
                    let data = out[..data_len].to_vec();
                    if let Some(at) = first_control(&data[..end]) {
                        let message = self.control_message(&data, data[at]);
                        return Err(self.not_text(&data, at, message));
                    }
                    let head: &[u8] = if self.at_start() { &data } else { &[] };
                    let message = not_utf8_message(head, data[end]);
                    return Err(self.not_text(&data, end, message));
                }
                end
            }
        };
        if let Some(at) = first_control(&out[..valid]) {
            let data = out[..data_len].to_vec();
            let message = self.control_message(&data, data[at]);
            return Err(self.not_text(&data, at, message));
        }
        Ok(valid)
    }
}

/// What the items seen so far come to, kept as the general path would
/// report it: the first shape error, then versions, then the first error of
/// a pod, then duplicates.
struct Collect<'s> {
    source_name: &'s str,
    pods: Vec<SlimPod>,
    /// Where each pod was (`items[3]`), for duplicate errors.
    locations: Vec<Location>,
    shape: Option<InputError>,
    version: Option<ServerVersion>,
    version_error: Option<InputError>,
    pod_error: Option<InputError>,
    /// Shared strings: nodes and owners repeat across pods.
    shared: fast::Shared,
    /// About how many bytes the pods take, and the most they may: the byte
    /// limit, so that tiny items (`[{"metadata":{"name":"p"}},...` without
    /// end) cannot hold more memory than the text would have.
    held: u64,
    limit: u64,
    max_pods: u64,
    /// Set when `held` passed `limit`, or the pods `max_pods`: reading stops.
    fatal: Option<InputError>,
}

impl<'s> Collect<'s> {
    fn new(source_name: &'s str, size_hint: u64, limits: InputLimits) -> Self {
        // ~250 bytes of JSON a pod at least (a slim `-o json` item is ~470,
        // a whole one ~1.7 KB): the vectors are never regrown and copied.
        // Only what is filled takes memory: the rest is never touched.
        let guess = usize::try_from(size_hint / 256).unwrap_or(0).min(1 << 20);
        Self {
            source_name,
            pods: Vec::with_capacity(guess),
            locations: Vec::with_capacity(guess),
            shape: None,
            version: None,
            version_error: None,
            pod_error: None,
            shared: Default::default(),
            held: 0,
            limit: limits.bytes,
            max_pods: limits.pods,
            fatal: None,
        }
    }

    fn push(&mut self, pod: SlimPod, location: Location) {
        // the record, its strings and its location, with allocator overhead
        let location_len = match &location {
            // as long as its text (`[3]`, `items[3]`), so both paths count alike
            Location::Item(at) => usize::from(at.list) * 5 + 2 + decimal_digits(at.index),
            Location::Text(text) => text.len(),
        };
        self.held += (std::mem::size_of::<SlimPod>()
            + pod.name.len()
            + pod.uid.len()
            + pod.namespace.len()
            + pod.cost_annotation.as_deref().map_or(0, str::len)
            + location_len
            + 96) as u64;
        if self.held > self.limit && self.fatal.is_none() {
            self.fatal = Some(InputError::TooLarge {
                source_name: self.source_name.to_string(),
                limit: self.limit,
                size: None,
            });
        }
        if self.pods.len() as u64 >= self.max_pods && self.fatal.is_none() {
            self.fatal = Some(InputError::TooManyPods {
                source_name: self.source_name.to_string(),
                limit: self.max_pods,
            });
        }
        self.pods.push(pod);
        self.locations.push(location);
    }

    fn clear(&mut self) {
        self.held = 0;
        self.pods.clear();
        self.locations.clear();
        self.shape = None;
        self.version = None;
        self.version_error = None;
        self.pod_error = None;
    }

    /// One item of the top-level array or List, as raw JSON.
    fn take_item(&mut self, raw: &str, location: String) {
        if self.shape.is_some() {
            return; // only the first shape error is ever reported
        }
        if self.pod_error.is_none() {
            if let Some(pod) = fast::decode(raw, &mut self.shared) {
                self.push(pod, Location::Text(location.into()));
                return;
            }
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(value) => self.general(value, location),
            // raw text is valid JSON already; kept as a syntax error if not
            Err(e) => {
                self.shape
                    .get_or_insert_with(|| json_syntax(self.source_name, &e));
            }
        }
    }

    /// The general path on one value (flattened, then each object checked).
    fn general(&mut self, value: Value, location: String) {
        let mut objects = Vec::new();
        if let Err(e) = flatten(self.source_name, location, value, &mut objects) {
            self.shape = Some(e);
            return;
        }
        for o in objects {
            self.object(o);
        }
    }

    fn object(&mut self, o: RawObject) {
        if is_version_object(&o) {
            super::note_version(&o, &mut self.version, &mut self.version_error);
            return;
        }
        if self.pod_error.is_some() {
            return;
        }
        let pod = super::pods_from(std::slice::from_ref(&o));
        match pod {
            Ok(pods) => {
                for p in &pods {
                    self.push(
                        SlimPod::from_pod(p),
                        Location::Text(o.location.as_str().into()),
                    );
                }
            }
            Err(e) => self.pod_error = Some(e),
        }
    }

    fn finish(self) -> Result<(Vec<SlimPod>, Option<ServerVersion>), InputError> {
        if let Some(e) = self.shape.or(self.version_error).or(self.pod_error) {
            return Err(e);
        }
        check_unique(self.source_name, &self.pods, |i| &self.locations[i])?;
        if self.pods.is_empty() {
            return Err(InputError::NoPods {
                source_name: self.source_name.to_string(),
                detail: super::EMPTY_LIST.to_string(),
            });
        }
        Ok((self.pods, self.version))
    }
}

/// Where a pod was, said when it is listed twice.
enum Location {
    /// An item the fast path read.
    Item(ItemAt),
    /// Any other (`items[3]`, `[0].items[2]`, `document 2`).
    Text(Box<str>),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Item(at) => at.fmt(f),
            Location::Text(text) => f.write_str(text),
        }
    }
}

impl ItemSink for Collect<'_> {
    fn item(&mut self, raw: &str, location: String) {
        self.take_item(raw, location);
    }
    fn item_prefix(&mut self, text: &str, at: ItemAt) -> Prefix {
        if self.shape.is_some() || self.pod_error.is_some() {
            return Prefix::Other;
        }
        match fast::decode_prefix(text, &mut self.shared) {
            Ok((Some(pod), len)) => {
                self.push(pod, Location::Item(at));
                Prefix::Taken(len)
            }
            Ok((None, len)) => match text.get(..len) {
                Some(raw) => {
                    self.take_item(raw, at.to_string());
                    Prefix::Taken(len)
                }
                None => Prefix::Other,
            },
            Err(fast::Miss::Cut) => Prefix::Cut,
            Err(fast::Miss::Unsure) => Prefix::Other,
        }
    }
    fn value(&mut self, value: Value, location: String) {
        self.general(value, location);
    }
    fn reset(&mut self) {
        self.clear();
    }
    fn has_shape(&self) -> bool {
        self.shape.is_some()
    }
    fn set_shape(&mut self, e: InputError) {
        self.shape = Some(e);
    }
    fn take_fatal(&mut self) -> Option<InputError> {
        self.fatal.take()
    }
    fn stopped(&self) -> bool {
        self.fatal.is_some()
    }
}

/// [`super::check_unique_pods`] on slim pods: the first pod that repeats an
/// earlier one by namespace and name, or by UID, with both items named
/// (`location(i)`: where the i-th was, as `items[3]`).
pub(super) fn check_unique<L: std::fmt::Display>(
    source_name: &str,
    pods: &[SlimPod],
    location: impl Fn(usize) -> L,
) -> Result<(), InputError> {
    // the names and the UIDs looked at on both threads: the first pod that
    // repeats either is the first the one loop over both would meet (at one
    // pod, the name is said first)
    let (by_name_at, by_uid) = rayon::join(
        || first_repeat(pods.iter().map(|p| Some((&*p.namespace, &*p.name)))),
        || first_repeat(pods.iter().map(|p| Some(&*p.uid).filter(|u| !u.is_empty()))),
    );
    let who = |i: usize| {
        let p = &pods[i];
        format!(
            "{} (Pod {})",
            item_label(source_name, &location(i).to_string()),
            super::qualified(&p.namespace, &p.name)
        )
    };
    let by_name = |(f, s): (usize, usize)| {
        let p = &pods[s];
        (
            f,
            s,
            format!("name {}", super::qualified(&p.namespace, &p.name)),
        )
    };
    let (first, second, what) = match (by_name_at, by_uid) {
        (Some(n), None) => by_name(n),
        (Some(n), Some((_, u))) if n.1 <= u => by_name(n),
        (_, Some((f, s))) => (f, s, format!("uid {}", pods[s].uid)),
        (None, None) => return Ok(()),
    };
    Err(InputError::Duplicate {
        first: who(first),
        second: who(second),
        what,
    })
}

/// The first key that repeats an earlier one (`None`s left out): where it
/// was first and where again.
fn first_repeat<K: std::hash::Hash + Eq>(
    keys: impl ExactSizeIterator<Item = Option<K>>,
) -> Option<(usize, usize)> {
    use foldhash::{HashMap, HashMapExt};
    let mut seen: HashMap<K, usize> = HashMap::with_capacity(keys.len());
    for (i, key) in keys.enumerate() {
        let Some(key) = key else { continue };
        if let Some(&first) = seen.get(&key) {
            return Some((first, i));
        }
        seen.insert(key, i);
    }
    None
}

/// The top-level value: an array, or an object that is a List (its `items`
/// streamed) or a single object.
struct Top<'c, 'n, S, F: Format> {
    sink: &'c mut S,
    source_name: &'n str,
    /// Where the fast path stopped: its opening's `items` (or array) is the
    /// one it was reading.
    resume: Option<Resume<F::Raw>>,
    format: PhantomData<F>,
}

impl<'c, 'n, S, F: Format> Top<'c, 'n, S, F> {
    fn new(sink: &'c mut S, source_name: &'n str) -> Self {
        Self {
            sink,
            source_name,
            resume: None,
            format: PhantomData,
        }
    }
}

/// What the fast path read before it handed over (see `window`).
struct Resume<R> {
    /// The List's fields before `items`.
    fields: Vec<(String, R)>,
    /// The index of the next item.
    next: usize,
    /// The opening holds an item of its own, the one handed on last.
    skip_first: bool,
}

/// How a format's deserializer hands over an item or a field: JSON as its
/// raw text, YAML as a value written out as JSON, so the sinks read both
/// the same way.
trait Format {
    type Raw: serde::de::DeserializeOwned;
    /// The item as JSON text.
    fn text(raw: &Self::Raw) -> Cow<'_, str>;
    /// The item as a value.
    fn value(raw: Self::Raw) -> Result<Value, serde_json::Error>;
}

/// JSON: items are taken as raw text, never parsed into a tree.
struct Json;

impl Format for Json {
    type Raw = Box<RawValue>;
    fn text(raw: &Box<RawValue>) -> Cow<'_, str> {
        Cow::Borrowed(raw.get())
    }
    fn value(raw: Box<RawValue>) -> Result<Value, serde_json::Error> {
        serde_json::from_str(raw.get())
    }
}

/// YAML: each item is parsed into a value on its own.
struct Yaml;

impl Format for Yaml {
    type Raw = Value;
    fn text(raw: &Value) -> Cow<'_, str> {
        // a `Value` always writes out: its keys are strings
        Cow::Owned(serde_json::to_string(raw).unwrap_or_default())
    }
    fn value(raw: Value) -> Result<Value, serde_json::Error> {
        Ok(raw)
    }
}

impl<'de, S: ItemSink, F: Format> DeserializeSeed<'de> for Top<'_, '_, S, F> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: ItemSink, F: Format> Visitor<'de> for Top<'_, '_, S, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object or array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (mut i, mut skip) = self
            .resume
            .as_ref()
            .map_or((0, false), |r| (r.next, r.skip_first));
        while let Some(raw) = seq.next_element::<F::Raw>()? {
            if std::mem::take(&mut skip) {
                continue;
            }
            self.sink.item(&F::text(&raw), format!("[{i}]"));
            if self.sink.stopped() {
                return Err(serde::de::Error::custom("stopped reading"));
            }
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // every field but `items` as raw text (a List has two or three small
        // ones; a single object has them all); `items` streamed as a List's
        let mut resume = self.resume;
        let mut fields: Vec<(String, F::Raw)> = resume
            .as_mut()
            .map(|r| std::mem::take(&mut r.fields))
            .unwrap_or_default();
        let mut items: Option<ItemsSeen> = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                // the fast path's `items` goes on; a repeated key: the last
                // one counts, as in a parsed object
                let (next, skip_first) = match resume.take() {
                    Some(r) => (r.next, r.skip_first),
                    None => {
                        self.sink.reset();
                        (0, false)
                    }
                };
                items = Some(map.next_value_seed(Items::<S, F> {
                    sink: &mut *self.sink,
                    next,
                    skip_first,
                    format: PhantomData,
                })?);
            } else {
                let raw = map.next_value::<F::Raw>()?;
                fields.retain(|(k, _)| *k != key);
                fields.push((key, raw));
            }
        }
        let source_name = self.source_name;
        let kind_raw = fields.iter().find(|(k, _)| k == "kind").map(|(_, v)| v);
        let kind: String = kind_raw
            .and_then(|v| serde_json::from_str::<Value>(&F::text(v)).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let is_list =
            kind == "List" || kind.ends_with("List") || (kind.is_empty() && items.is_some());
        if is_list {
            match items {
                Some(ItemsSeen::Array) | Some(ItemsSeen::Null) | None => {}
                Some(ItemsSeen::Other(found)) => {
                    if !self.sink.has_shape() {
                        self.sink.reset();
                        self.sink.set_shape(InputError::Shape {
                            source_name: source_name.to_string(),
                            location: "object".to_string(),
                            message: format!("`items` must be an array, found {found}"),
                        });
                    }
                }
            }
            return Ok(());
        }
        // a single object: what `items` held does not matter to it (a Pod
        // ignores the field; only an object without a kind lists its fields,
        // and with `items` and no kind it would be a List)
        self.sink.reset();
        let mut object = serde_json::Map::new();
        for (k, v) in fields {
            match F::value(v) {
                Ok(v) => {
                    object.insert(k, v);
                }
                Err(e) => {
                    self.sink.set_shape(json_syntax(source_name, &e));
                    return Ok(());
                }
            }
        }
        if items.is_some() {
            object.insert("items".to_string(), Value::Array(Vec::new()));
        }
        self.sink.value(Value::Object(object), "object".to_string());
        Ok(())
    }
}

/// What a List's `items` held.
enum ItemsSeen {
    /// An array, its items handed to the collector.
    Array,
    Null,
    /// Something else: its type in words.
    Other(&'static str),
}

struct Items<'c, S, F> {
    sink: &'c mut S,
    /// The index of the first item, and whether to skip it (see [`Resume`]).
    next: usize,
    skip_first: bool,
    format: PhantomData<F>,
}

impl<'de, S: ItemSink, F: Format> DeserializeSeed<'de> for Items<'_, S, F> {
    type Value = ItemsSeen;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<ItemsSeen, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: ItemSink, F: Format> Visitor<'de> for Items<'_, S, F> {
    type Value = ItemsSeen;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ItemsSeen, A::Error> {
        let (mut i, mut skip) = (self.next, self.skip_first);
        while let Some(raw) = seq.next_element::<F::Raw>()? {
            if std::mem::take(&mut skip) {
                continue;
            }
            self.sink.item(&F::text(&raw), format!("items[{i}]"));
            if self.sink.stopped() {
                return Err(serde::de::Error::custom("stopped reading"));
            }
            i += 1;
        }
        Ok(ItemsSeen::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ItemsSeen, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ItemsSeen::Other("an object"))
    }

    fn visit_unit<E>(self) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other("a number"))
    }

    fn visit_str<E>(self, _: &str) -> Result<ItemsSeen, E> {
        Ok(ItemsSeen::Other("a string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole-text answer: `parse_pods_slim_versioned` after `read_bounded`.
    fn whole(text: &str) -> Result<(Vec<SlimPod>, Option<ServerVersion>), String> {
        read_bounded("f.json", text.as_bytes(), 1 << 20, 0, Expect::Manifest)
            .and_then(|t| super::super::parse_pods_slim_versioned("f.json", &t))
            .map_err(|e| e.to_string())
    }

    fn streamed(text: &str) -> Result<(Vec<SlimPod>, Option<ServerVersion>), String> {
        pods_from_reader("f.json", text.as_bytes(), InputLimits::bytes(1 << 20), 0)
            .map_err(|e| e.to_string())
    }

    const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"s","uid":"u","labels":{"x":"y"},"annotations":{"other":"1","controller.kubernetes.io/pod-deletion-cost":"5"},"creationTimestamp":"2025-01-01T00:00:00Z","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r","controller":true}]},"spec":{"nodeName":"n","containers":[{"name":"c","image":"i"}],"initContainers":[{"name":"p","image":"i","restartPolicy":"Always"},{"name":"q","image":"i"}]},"status":{"phase":"Running","podIP":"1.2.3.4","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}],"containerStatuses":[{"name":"c","image":"i","imageID":"x","ready":true,"restartCount":3}],"initContainerStatuses":[{"name":"p","image":"i","imageID":"x","ready":true,"restartCount":1},{"name":"q","image":"i","imageID":"x","ready":true,"restartCount":9}]}}"#;

    /// Every input answers as the whole-text path: the same slim pods and
    /// version, or the same error.
    #[test]
    fn streaming_answers_as_the_whole_text() {
        let version = r#"{"serverVersion":{"major":"1","minor":"33","gitVersion":"v1.33.1"}}"#;
        let other_version = r#"{"gitVersion":"v1.30.0"}"#;
        let list = |items: &[&str]| format!(r#"{{"kind":"List","items":[{}]}}"#, items.join(","));
        let p = |name: &str, extra: &str| {
            format!(r#"{{"metadata":{{"name":"{name}","uid":"{name}"{extra}}}}}"#)
        };
        let cases: Vec<String> = vec![
            POD.into(),
            list(&[POD]),
            format!(r#"{{"items":[{POD}],"kind":"PodList","metadata":{{}}}}"#),
            format!(r#"{{"items":[{POD}]}}"#),
            format!("  \n[{POD},{}]", p("b", "")),
            format!(r#"[{POD},{version}]"#),
            format!(r#"[{version},{POD},{other_version}]"#),
            format!(r#"[{version},{POD},{version}]"#),
            list(&[POD, r#"{"serverVersion":{"major":"x"}}"#]),
            r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#.into(),
            r#"{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[]}"#.into(),
            r#"{"items":[{"metadata":{"name":"a"}}]}"#.into(),
            r#"  [{"metadata":{"name":"a"}},{"kind":"Pod","apiVersion":"v1"}]"#.into(),
            r#"{"kind":"List","items":null}"#.into(),
            r#"{"kind":"List","items":5}"#.into(),
            r#"{"kind":"List","items":{"a":1}}"#.into(),
            r#"{"items":"x","kind":"List"}"#.into(),
            r#"{"items":"x","kind":"Pod","metadata":{"name":"a"}}"#.into(),
            r#"{"items":[3],"kind":"Pod","metadata":{"name":"a"}}"#.into(),
            r#"{"items":[3],"kind":"Node","metadata":{"name":"a"}}"#.into(),
            r#"{"items":[{"metadata":{"name":"a"}}],"items":[{"metadata":{"name":"b"}}]}"#.into(),
            r#"{"kind":"Pod","kind":"List","items":[{"metadata":{"name":"b"}}]}"#.into(),
            r#"{"kind":5,"items":[{"metadata":{"name":"b"}}]}"#.into(),
            r#"{"kind":"List","items":[{"kind":"List","items":[{"metadata":{"name":"n"}}]}]}"#.into(),
            r#"[[{"metadata":{"name":"a"}}]]"#.into(),
            r#"[[{"metadata":{"name":"a"}}], 3]"#.into(),
            r#"[{"kind":"Node"}, 3]"#.into(),
            r#"[{"kind":"Node"}, {"metadata":{"name":"a"},"status":{"phase":5}}]"#.into(),
            r#"[{"kind":"Node"}, {"gitVersion":"nope"}]"#.into(),
            r#"{"kind":"Pod","metadata":{"name":"a"},"items":[]}"#.into(),
            r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x"}}]}"#.into(),
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod"}]}"#.into(),
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod","metadata":{"name":"a"}}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[["Ready","True"]]}}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":["a"]}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a","annotations":{"x":null}}}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a","creationTimestamp":"yesterday"}}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a","name":"b"}}]}"#.into(),
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a\u0062","namespace":null},"spec":null,"status":{"containerStatuses":null}}]}"#.into(),
            r#"{"kind":"List","items":[3]}"#.into(),
            r#"{"kind":"List","items":[]} trailing"#.into(),
            r#"{"kind":"List","items":[]}{"kind":"List"}"#.into(),
            r#"{"kind":"List","items":[{"metadata":{"name":"a"}},]}"#.into(),
            "[\n{\"metadata\":{\"name\":\"a\"}},\n{\"metadata\":{\"name\":\"a\"}}]".into(),
            r#"{"kind":"List","items":[{"metadata":{"name":"a","uid":"u"}},{"metadata":{"name":"b","uid":"u"}}]}"#.into(),
            r#"{"kind":"List","items":[{"metadata":{"name":"a","namespace":"x"}},{"metadata":{"name":"a","namespace":"y"}}]}"#.into(),
            r#"[{}]"#.into(),
            r#"[{"foo":1,"bar":2}]"#.into(),
            r#"[null]"#.into(),
            "[]".into(),
            "{}".into(),
            "[".into(),
            "{\"kind\":\"List\",\"items\":[{\"metadata\":{\"name\":\"a\"}}".into(),
            format!("[{}]", p("caf\u{e9}", "")),
            "[{\"metadata\":{\"name\":\"a\u{1}\"}}]".into(),
            "kind: Pod\nmetadata:\n  name: y\n".into(),
            "\u{feff}[{\"metadata\":{\"name\":\"a\"}}]".into(),
            "\u{a0}[{\"metadata\":{\"name\":\"a\"}}]".into(),
            "".into(),
            "  \n ".into(),
        ];
        for text in &cases {
            assert_eq!(streamed(text), whole(text), "{text}");
        }
        // the same inputs as YAML: a top-level mapping is streamed item by
        // item, anything else read whole
        let mut yaml_cases = 0;
        for text in &cases {
            let Ok(value) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            let yaml = serde_saphyr::to_string(&value).unwrap();
            yaml_cases += usize::from(is_one_block_mapping(&yaml));
            assert_eq!(streamed(&yaml), whole(&yaml), "{yaml}");
        }
        assert!(yaml_cases >= 30, "{yaml_cases} streamed YAML cases");
    }

    /// YAML that only the streamed path reads item by item, and YAML that
    /// goes the whole-text way: each answers as the whole text does.
    #[test]
    fn yaml_streams_one_mapping_and_answers_as_the_whole_text() {
        let pod = |name: &str| {
            format!("- metadata:\n    name: {name}\n    uid: u-{name}\n  spec:\n    nodeName: n1\n")
        };
        let items = format!("{}{}", pod("a"), pod("b"));
        let cases: Vec<(String, bool)> = vec![
            (format!("apiVersion: v1\nitems:\n{items}kind: List\nmetadata:\n  resourceVersion: \"\"\n"), true),
            (format!("# kubectl get pods -o yaml\n\napiVersion: v1\nkind: PodList\nitems:\n{items}"), true),
            (format!("items:\n{items}"), true),
            (format!("items:\n{items}items:\n{}", pod("c")), true),
            (format!("kind: List\nitems:\n{}  status: [oops\n", pod("a")), true),
            (format!("kind: List\nitems:\n{}- 3\n", pod("a")), true),
            (format!("kind: List\nitems:\n{}{}", pod("a"), pod("a")), true),
            ("kind: List\nitems: 5\n".to_string(), true),
            ("kind: List\nitems:\n".to_string(), true),
            ("kind: Pod\nmetadata:\n  name: x\n  creationTimestamp: yesterday\n".to_string(), true),
            ("kind: List\nitems:\n- kind: List\n  items:\n  - metadata: {name: n}\n".to_string(), true),
            (format!("---\nkind: List\nitems:\n{items}"), false),
            (format!("kind: List\nitems:\n{items}---\nkind: List\nitems:\n{}", pod("c")), false),
            (format!("%YAML 1.2\n---\nitems:\n{items}"), false),
            (format!("\"kind\": List\nitems:\n{items}"), false),
            (items.clone(), false),
            ("just text\n".to_string(), false),
            ("# only a comment\n".to_string(), false),
        ];
        for (yaml, streams) in &cases {
            assert_eq!(is_one_block_mapping(yaml), *streams, "{yaml}");
            assert_eq!(streamed(yaml), whole(yaml), "{yaml}");
        }
        // after the first document: whole-text documents, numbered from 2,
        // errors at their lines in the input
        let list = |body: &str| format!("kind: List\nitems:\n{body}");
        let after: Vec<String> = vec![
            format!("{}---\n{}", list(&items), list(&pod("c"))),
            format!("{}...\n---\n{}", list(&items), list(&pod("c"))),
            format!("{}...\n", list(&items)),
            format!("{}---\n", list(&items)),
            format!("{}---\n{}  spec: [\n", list(&items), list(&pod("c"))),
            format!("{}...\n{}  spec: [\n", list(&items), list(&pod("c"))),
            format!("{}---\n{}- 3\n", list(&items), list(&pod("c"))),
            format!(
                "{}---\nkind: Node\nmetadata: {{name: n1}}\n---\n{}",
                list(&items),
                list(&pod("a"))
            ),
            format!("{}%YAML 1.2\n---\n{}", list(&items), list(&pod("c"))),
            format!("{}...\n%YAML 1.2\n---\n{}", list(&items), list(&pod("c"))),
        ];
        for yaml in &after {
            assert!(starts_one_block_mapping(yaml.as_bytes()), "{yaml}");
            assert_eq!(streamed(yaml), whole(yaml), "{yaml}");
        }
        assert_eq!(streamed(&after[0]).map(|(p, _)| p.len()), Ok(3));
        // the one difference: the first document's items keep the names
        // they have in a single-document input
        let first_bad = format!("{}---\n{}", list(&format!("{items}- 3\n")), list(&pod("c")));
        let e = streamed(&first_bad).unwrap_err();
        assert!(e.contains(": items[2]:"), "{e}");
        assert!(whole(&first_bad)
            .unwrap_err()
            .contains(": document 1.items[2]:"));
        // a syntax error deep in the items keeps its line and column
        let bad = format!("kind: List\nitems:\n{}{}  spec: {{\n", pod("a"), pod("b"));
        let e = streamed(&bad).unwrap_err();
        assert!(e.starts_with("f.json: not valid YAML at line 1"), "{e}");
        assert_eq!(Err(e), whole(&bad));
    }

    /// The fast decode gives the slim pod that the whole `Pod` gives.
    #[test]
    fn fast_decode_matches_the_whole_pod() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_str(POD).unwrap();
        let fast = fast::decode(POD, &mut Default::default()).unwrap();
        assert_eq!(fast, SlimPod::from_pod(&pod));
        assert_eq!((fast.restarts, fast.sidecar_restarts), (3, 1));
        assert_eq!(fast.cost_annotation.as_deref(), Some("5"));
    }

    /// A reader that gives at most `.1` bytes a read.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Block-style Lists as `kubectl get -o yaml` prints them, read by the
    /// YAML fast path as far as it goes and by the reader from where it
    /// stops: the answer and every error as on the whole text, however the
    /// reads are cut.
    #[test]
    fn the_yaml_fast_path_answers_as_the_whole_text() {
        let pod = |i: usize, extra: &str| {
            format!(
                "- apiVersion: v1\n  kind: Pod\n  metadata:\n    creationTimestamp: \"2025-01-01T00:00:{:02}Z\"\n    name: p-{i}\n    namespace: s\n    uid: u-{i}\n    ownerReferences:\n    - apiVersion: apps/v1\n      controller: true\n      kind: ReplicaSet\n      name: rs\n      uid: r\n  spec:\n    nodeName: n{}\n  status:\n    conditions:\n    - lastTransitionTime: '2025-01-01T00:01:00Z'\n      status: 'True'\n      type: Ready\n    containerStatuses:\n    - name: c\n      restartCount: {}\n{extra}    phase: Running\n",
                i % 60,
                i % 3,
                i % 5
            )
        };
        let items = |n: usize, odd: &dyn Fn(usize) -> String| -> String {
            (0..n).map(|i| pod(i, &odd(i))).collect()
        };
        let plain = items(24, &|_| String::new());
        // item 17 has what the fast path leaves to the reader
        let unsure = |what: &'static str| {
            items(24, &move |i| {
                if i == 17 {
                    what.to_string()
                } else {
                    String::new()
                }
            })
        };
        let list = |body: &str| {
            format!(
                "apiVersion: v1\nitems:\n{body}kind: List\nmetadata:\n  resourceVersion: \"\"\n"
            )
        };
        let indented = plain
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>();
        let cases: Vec<String> = vec![
            list(&plain),
            format!("# kubectl get pods -o yaml\napiVersion: v1\nkind: List\nitems:\n\n{plain}"),
            format!("items:\n{indented}kind: List\n"),
            list(&unsure("    hostIP: &ip 10.0.0.1\n")),
            list(&unsure("    ready: yes\n")),
            list(&format!(
                "{}{}",
                unsure("    x: &a 1\n"),
                "- metadata: {name: q, uid: *a}\n"
            )),
            list(&unsure("    [oops\n")),
            list(&unsure("    restartPolicy: a: b\n")),
            list(&items(24, &|i| {
                if i == 20 {
                    "    phase: 5\n    phase: 6\n".into()
                } else {
                    String::new()
                }
            })),
            list(&format!("{plain}{}", pod(3, ""))),
            list(&format!("{plain}- 3\n")),
            list(&format!("{plain}  spec: [\n")),
            format!("{}---\nkind: List\nitems:\n{}", list(&plain), pod(99, "")),
            format!("{}%YAML 1.2\n---\n", list(&plain)),
            format!("{}items:\n{}", list(&plain), pod(99, "")),
            format!("kind: List\nitems:\n{plain}- x\n kind: y\n"),
            format!(
                "kind: List\nitems:\n{}",
                plain.replace("restartCount: 4", "restartCount: abc")
            ),
            format!(
                "kind: List\nitems:\n{}",
                plain.replace("  spec:\n", "  spec: !!map\n")
            ),
            format!("kind: List\nmetadata:\n  a: 1\nitems:\n{plain}"),
            format!("kind: List\nitems: []\n"),
            format!("kind: List\nitems:\nkind: List\n"),
        ];
        for (i, text) in cases.iter().enumerate() {
            let whole = whole(text);
            assert_eq!(streamed(text), whole, "case {i}: {text}");
            for step in [3, 4096] {
                let cut = pods_from_reader(
                    "f.json",
                    Trickle(text.as_bytes(), step),
                    InputLimits::bytes(1 << 20),
                    0,
                )
                .map_err(|e| e.to_string());
                assert_eq!(cut, whole, "case {i}, reads of {step}");
            }
        }
        // the errors above are the reader's, at their lines in the input:
        // the flow sequence opened at `[oops` fails at the next line's `:`
        let oops = cases[6]
            .lines()
            .position(|l| l.contains("[oops"))
            .unwrap_or(0)
            + 1;
        let e = streamed(&cases[6]).unwrap_err();
        assert!(
            e.contains(&format!("at line {} column 10:", oops + 1)),
            "{e}"
        );
        assert_eq!(streamed(&cases[0]).map(|(p, _)| p.len()), Ok(24));
        // an entry longer than the fast path reads ahead (a MiB): the
        // reader reads it and the rest
        let long = format!("    note: {}\n", "x".repeat(1 << 20));
        let big = list(&items(3, &|i| {
            if i == 1 {
                long.clone()
            } else {
                String::new()
            }
        }));
        let big = big.replace("    phase: Running\n    note", "    note");
        let limit = 4 << 20;
        let big_whole = read_bounded("f.json", big.as_bytes(), limit, 0, Expect::Manifest)
            .and_then(|t| super::super::parse_pods_slim_versioned("f.json", &t))
            .map_err(|e| e.to_string());
        let big_streamed = pods_from_reader("f.json", big.as_bytes(), InputLimits::bytes(limit), 0)
            .map_err(|e| e.to_string());
        assert_eq!(big_streamed, big_whole);
        assert_eq!(big_streamed.map(|(p, _)| p.len()), Ok(3));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Malformed entries among good ones: the fast path and the reader
        /// give the whole text's answer, errors and lines included.
        #[test]
        fn malformed_yaml_entries_answer_as_the_whole_text(
            a in "[-a-z0-9:#'\" \n|>{}\\[\\]&*!?,.~\t]{0,40}",
            b in "[-a-z0-9:#'\" \n|>{}\\[\\]&*!?,.~\t]{0,40}",
        ) {
            let text = format!(
                "kind: List\nitems:\n- metadata:\n    name: p\n- {a}\n- metadata:\n    name: q\n- {b}\n"
            );
            // a document marker names the first document's items otherwise (see the module doc)
            proptest::prop_assume!(!text.lines().any(|l| l.starts_with("---") || l.starts_with("...")));
            proptest::prop_assert_eq!(streamed(&text), whole(&text), "{}", text);
        }
    }

    /// Bytes cut anywhere by the reader: the same answer as in one piece.
    #[test]
    fn reads_cut_anywhere_give_the_same_answer() {
        let cut = |text: &str, step: usize| {
            pods_from_reader(
                "f.json",
                Trickle(text.as_bytes(), step),
                InputLimits::bytes(1 << 20),
                0,
            )
            .map_err(|e| e.to_string())
        };
        let text = format!("[{POD},\n{{\"metadata\":{{\"name\":\"caf\u{e9}\u{1F600}\"}}}}]");
        // YAML: streamed from the reader when the first read holds the
        // first line, from the text otherwise; the same answer either way
        let yaml = format!("kind: List\nitems:\n- {POD}\n- {{metadata: {{name: b}}}}\n");
        for input in [&text, &yaml] {
            let whole = streamed(input);
            assert!(whole.is_ok());
            for step in (1..12).chain([64, 4096]) {
                assert_eq!(cut(input, step), whole, "step {step}");
            }
        }
        // a control character on line 2, column 3, whatever the cuts
        let bad = "[\n {\u{1}}]";
        for step in 1..6 {
            assert_eq!(cut(bad, step).map(|_| ()), Err("f.json: not valid JSON or YAML at line 2 column 3: control character 0x01 is in no JSON or YAML text (binary data?); stopped reading".to_string()), "step {step}");
        }
    }

    /// The window's fast path answers as the reader path alone does, on
    /// inputs of several windows whatever goes wrong where: syntax errors,
    /// other shapes, bad bytes and limits at points spread over the input,
    /// compact and indented, an array and a List, reads cut anywhere.
    #[test]
    fn the_window_answers_as_the_reader_path() {
        let run = |text: &[u8], limits: InputLimits, step: usize, path: Path| {
            pods_by("f.json", Trickle(text, step), limits, 0, path).map_err(|e| e.to_string())
        };
        let pod = |i: usize| {
            let extra = match i % 7 {
                0 => r#","annotations":{"controller.kubernetes.io/pod-deletion-cost":"7"}"#,
                1 => {
                    r#","ownerReferences":[{"kind":"ReplicaSet","name":"rs","uid":"r","controller":true}]"#
                }
                _ => "",
            };
            format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p{i}","uid":"u{i}"{extra}}},"spec":{{"nodeName":"n{}"}},"status":{{"phase":"Running","conditions":[{{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:{:02}Z"}}]}}}}"#,
                i % 13,
                i % 60
            )
        };
        let items: Vec<String> = (0..900).map(pod).collect();
        let compact = format!(
            r#"{{"apiVersion":"v1","metadata":{{"resourceVersion":"1"}},"items":[{}],"kind":"List"}}"#,
            items.join(",")
        );
        let value: Value = serde_json::from_str(&compact).unwrap();
        let indented = serde_json::to_string_pretty(&value).unwrap();
        let array = format!("[{}]\n", items.join(",\n"));
        assert!(compact.len() > 3 * window::CHUNK, "{}", compact.len());
        let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
        for (name, text) in [
            ("compact", &compact),
            ("indented", &indented),
            ("array", &array),
        ] {
            let bytes = text.as_bytes();
            inputs.push((name.to_string(), bytes.to_vec()));
            // every 19th of the way in, one byte replaced or the rest cut off
            for k in 1..19 {
                let at = bytes.len() * k / 19 + k;
                for b in [&b"x"[..], b",", b"]", b"}", b"\"", b"\x01", b"\xff"] {
                    let mut t = bytes.to_vec();
                    t.splice(at..at + 1, b.iter().copied());
                    inputs.push((format!("{name}, {at} is {b:?}"), t));
                }
                inputs.push((format!("{name}, cut at {at}"), bytes[..at].to_vec()));
            }
            // an error in the text, and a bad byte a window or less after it
            for k in [1, 3] {
                let at = bytes.len() * k / 5;
                for (error, after) in [(&b"1."[..], 3), (b"x", 40_000), (b"1e", 70_000)] {
                    let mut t = bytes.to_vec();
                    t[at + after] = 0x01;
                    t.splice(at..at + 1, error.iter().copied());
                    inputs.push((format!("{name}, {error:?} at {at}, 0x01 {after} on"), t));
                }
            }
            // right after an item and after its comma: a takeover's own line
            let ends: Vec<usize> = text.match_indices("},").map(|(i, _)| i + 1).collect();
            for &at in [ends[2], ends[ends.len() / 2], ends[ends.len() - 1]].iter() {
                for (k, b) in [
                    (0, &b"x"[..]),
                    (0, b"]"),
                    (0, b",,"),
                    // what could carry on a number right after the item
                    (0, b".5"),
                    (0, b"e1"),
                    (0, b"7"),
                    (1, b"]"),
                    (1, b"\x02"),
                ] {
                    let mut t = bytes.to_vec();
                    t.splice(at + k..at + k + 1, b.iter().copied());
                    inputs.push((format!("{name}, {} is {b:?}", at + k), t));
                }
            }
            // other items among the pods
            for other in [
                "3",
                "null",
                "[]",
                r#"{"metadata":{"name":"p5"}}"#,
                r#"{"kind":"Node","metadata":{"name":"n"}}"#,
                r#"{"metadata":{"name":"q","uid":"u"},"status":{"phase":5}}"#,
                r#"{"serverVersion":{"major":"1","minor":"30"}}"#,
            ] {
                let t = text.replacen(
                    r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p600""#,
                    &format!(
                        r#"{other},{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p600""#
                    ),
                    1,
                );
                inputs.push((format!("{name} with {other}"), t.into_bytes()));
            }
            // one item larger than the fast path reads again
            let big = format!(
                r#"{{"metadata":{{"name":"big","annotations":{{"a":"{}"}}}}}},"#,
                "x".repeat(1_200_000)
            );
            let t = text.replacen(
                r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p300""#,
                &format!(r#"{big}{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p300""#),
                1,
            );
            inputs.push((format!("{name} with a big item"), t.into_bytes()));
        }
        for (i, head) in [r#"{"items":[]}"#, r#"{"kind":"List","items":null}"#, r#"{"k\u0069nd":"List","items":[{"metadata":{"name":"a"}}],"items":[{"metadata":{"name":"b"}}]}"#, r#"{"kind":"List","kind":"PodList","items":[{"metadata":{"name":"a"}}]}"#, r#"{"items":[{"metadata":{"name":"a"}}],"items":5}"#, "[{\"metadata\":{\"name\":\"a\"}} , \n {\"metadata\":{\"name\":\"b\"}} \n ] \n"].into_iter().enumerate() {
            inputs.push((format!("small {i}"), head.as_bytes().to_vec()));
        }
        let limits = [
            InputLimits::bytes(1 << 24),
            InputLimits::bytes(100_000),
            InputLimits {
                pods: 500,
                ..InputLimits::bytes(1 << 24)
            },
        ];
        for (n, (name, text)) in inputs.iter().enumerate() {
            // every limit and cut reads for some of the inputs (a debug build reads slowly)
            let some = if n % 8 == 0 { 3 } else { 1 };
            for &limits in &limits[..some] {
                for step in [usize::MAX, 4093].into_iter().take(some.min(2)) {
                    let fast = run(text, limits, step, Path::Window);
                    let reader = run(text, limits, step, Path::Reader);
                    assert_eq!(fast, reader, "{name}, {limits:?}, reads of {step}");
                }
            }
        }
    }

    /// Both paths count a pod against `--max-input-bytes` alike, whatever
    /// the limit: a tiny pod's location weighs as much as its text.
    #[test]
    fn the_window_counts_bytes_as_the_reader_path() {
        let items: Vec<String> = (0..1_000)
            .map(|i| format!(r#"{{"metadata":{{"name":"p{i}"}}}}"#))
            .collect();
        for text in [
            format!(r#"{{"kind":"List","items":[{}]}}"#, items.join(",")),
            format!("[{}]", items.join(",")),
        ] {
            let run = |limit: u64, path: Path| {
                pods_by(
                    "f.json",
                    text.as_bytes(),
                    InputLimits::bytes(limit),
                    0,
                    path,
                )
                .map(|(pods, _)| pods.len())
                .map_err(|e| e.to_string())
            };
            let all = run(1 << 30, Path::Reader);
            assert_eq!(all, Ok(1_000));
            let mut refused = 0;
            for limit in (1_000..400_000).step_by(1_999) {
                let reader = run(limit, Path::Reader);
                refused += usize::from(reader.is_err());
                assert_eq!(run(limit, Path::Window), reader, "limit {limit}");
            }
            assert!(refused > 10, "{refused}");
        }
    }

    #[test]
    fn limits_and_binary_data_stop_the_stream() {
        let fails = |input: &[u8], limits: InputLimits, expected: &str| {
            let e = pods_from_reader("f.json", input, limits, 0).unwrap_err();
            assert!(e.to_string().contains(expected), "{e}");
        };
        let small = InputLimits::bytes(4096);
        let json = format!("[{}]", vec![POD; 50].join(","));
        fails(json.as_bytes(), small, "larger than --max-input-bytes 4Ki");
        fails(b"[{\"a\":\xff}]", small, "byte 0xff is not UTF-8");
        fails(b"[\xe2\x82", small, "is not UTF-8");
        // the same stops on YAML streamed from the reader
        let yaml = format!(
            "kind: List\nitems:\n{}",
            vec![format!("- {POD}\n"); 50].concat()
        );
        fails(yaml.as_bytes(), small, "larger than --max-input-bytes 4Ki");
        fails(
            b"kind: List\nitems:\n- a: \x00\n",
            small,
            "at line 3 column 6: a NUL byte",
        );
        let ten_pods = InputLimits {
            pods: 10,
            ..InputLimits::bytes(1 << 20)
        };
        fails(yaml.as_bytes(), ten_pods, "more than --max-pods 10");
    }

    /// The repeats found on two threads are the ones the one loop over
    /// whole pods reports first (`check_unique_pods`), by name or by UID.
    #[test]
    fn the_first_repeat_is_the_sequential_checks() {
        let pod = |name: &str, uid: &str| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(serde_json::json!(
                {"metadata": {"name": name, "namespace": "s", "uid": uid}}))
            .unwrap()
        };
        let cases: [&[(&str, &str)]; 6] = [
            &[("a", "1"), ("b", "2"), ("c", "3")],
            // a UID repeated before a name is
            &[("a", "1"), ("b", "2"), ("c", "1"), ("b", "4")],
            // a name repeated before a UID is
            &[("a", "1"), ("a", "2"), ("c", "1")],
            // both at one pod: the name is said
            &[("a", "1"), ("b", "2"), ("a", "2")],
            // empty UIDs never repeat
            &[("a", ""), ("b", ""), ("c", "3")],
            &[("a", ""), ("b", "x"), ("c", ""), ("d", "x")],
        ];
        for case in cases {
            let whole: Vec<_> = case.iter().map(|(n, u)| pod(n, u)).collect();
            let slim: Vec<SlimPod> = whole.iter().map(SlimPod::from_pod).collect();
            let reference = super::super::check_unique_pods(
                whole
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (item_label("f.json", &format!("[{i}]")), p)),
            )
            .map_err(|e| e.to_string());
            let got =
                check_unique("f.json", &slim, |i| format!("[{i}]")).map_err(|e| e.to_string());
            assert_eq!(got, reference, "{case:?}");
        }
    }
}
