//! The JSON fast path: the input read into a window of bytes, 64 KiB at a
//! time, and each item of the top-level array or List decoded straight from
//! that window (serde_json on a slice, not byte by byte from a reader). It
//! reads only the plain shapes `[item, ...]` and `{"key": value, ...,
//! "items": [item, ...] ...}` with object items; at anything else (another
//! shape, a syntax error, a read that failed, the end of the items) it stops
//! at the last point whose parser state a short opening reproduces, and
//! [`Takeover`] says where: the reader path (`stream_items`' serde_json on a
//! reader) goes on from there with the same bytes, so answers and errors,
//! positions included, are those of the reader path on the whole input.

use std::io::Read;

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::{ItemAt, ItemSink, Prefix, TextReader};
use crate::InputError;

/// How much the window asks of the reader at a time: what the reader
/// path's `BufReader` asks, so the checks of the bytes (control
/// characters, UTF-8, the byte limit) stop at the same reads.
pub(super) const CHUNK: usize = 64 << 10;

/// The most bytes of one value read again from its start as more arrive:
/// past it the reader path takes over, which reads every byte once.
const MAX_RETRIED: usize = 1 << 20;

/// The input's bytes not yet handed on, and where the first of them is.
pub(super) struct Window<'s, R> {
    pub(super) text: TextReader<'s, R>,
    /// Text: the text reader hands on only whole UTF-8 characters.
    pub(super) buf: String,
    /// Where a read lands before it joins `buf`.
    scratch: Vec<u8>,
    /// 1-based line and column (in bytes) of `buf[0]` in the input.
    line: u64,
    column: u64,
    /// The reader is at its end, or failed (its error kept in `text`).
    pub(super) done: bool,
}

/// A List's fields by name, as raw text.
pub(super) type Fields = Vec<(String, Box<RawValue>)>;

/// Where the reader path takes over, in what state.
pub(super) struct Takeover {
    /// Offset in the window's bytes of the first byte it reads.
    pub(super) at: usize,
    pub(super) state: State,
    /// The List's fields before `items`, as raw text (empty for an array).
    pub(super) fields: Fields,
}

impl Takeover {
    /// The reader path from the input's first byte.
    pub(super) fn start() -> Self {
        Self {
            at: 0,
            state: State::Start,
            fields: Vec::new(),
        }
    }
}

/// The parser's state at a [`Takeover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Nothing read yet: the reader path reads the whole input.
    Start,
    /// Inside the items, before the first (`index` 0).
    Before { list: bool },
    /// Inside the items, right after item `index` (handed on).
    After { list: bool, index: usize },
    /// Right after the items' closing bracket.
    End { list: bool },
}

impl State {
    /// The opening that puts serde_json in this state: a List's `items` or
    /// an array, and for `After` one item of its own, which the reader path
    /// skips.
    pub(super) fn opening(self) -> &'static [u8] {
        match self {
            State::Start => b"",
            State::Before { list: false } => b"[",
            // the space ends the number: what follows the item (`.5`, `e1`,
            // a digit) must not carry on the skipped one
            State::After { list: false, .. } => b"[0 ",
            State::End { list: false } => b"[]",
            State::Before { list: true } => b"{\"items\":[",
            State::After { list: true, .. } => b"{\"items\":[0 ",
            State::End { list: true } => b"{\"items\":[]",
        }
    }
}

/// What the fast path came to.
pub(super) enum Outcome {
    /// The reader path goes on from here.
    Takeover(Takeover),
    /// A limit the sink keeps was passed: reading stops.
    Fatal(InputError),
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// 1-based line and column of the byte after `bytes`, the first at `(line, column)`.
fn advance((line, column): (u64, u64), bytes: &[u8]) -> (u64, u64) {
    match memchr::memrchr(b'\n', bytes) {
        Some(last) => (
            line + memchr::memchr_iter(b'\n', bytes).count() as u64,
            (bytes.len() - last) as u64,
        ),
        None => (line, column + bytes.len() as u64),
    }
}

impl<'s, R: Read> Window<'s, R> {
    pub(super) fn new(text: TextReader<'s, R>) -> Self {
        Self {
            text,
            buf: String::with_capacity(2 * CHUNK),
            scratch: vec![0; CHUNK],
            line: 1,
            column: 1,
            done: false,
        }
    }

    /// 1-based line and column of `buf[at]` in the input.
    pub(super) fn position(&self, at: usize) -> (u64, u64) {
        advance((self.line, self.column), &self.buf.as_bytes()[..at])
    }

    /// More bytes for a value at `at` that the window cuts: false when
    /// none came, or the value is past [`MAX_RETRIED`] already.
    pub(super) fn more(&mut self, at: usize) -> bool {
        self.buf.len() - at <= MAX_RETRIED && self.fill()
    }

    /// Reads one more chunk: false when none came (the end, or a failed
    /// read whose error the text reader keeps).
    fn fill(&mut self) -> bool {
        if self.done {
            return false;
        }
        let n = self.text.read(&mut self.scratch).unwrap_or(0);
        match std::str::from_utf8(&self.scratch[..n]) {
            Ok(text) => self.buf.push_str(text),
            // the text reader hands on none of that: said as it would say it
            Err(e) => {
                let at = e.valid_up_to();
                let message = crate::not_utf8_message(&[], self.scratch[at]);
                let position = Some((self.text.line, self.text.column));
                self.text.error = Some(InputError::Syntax {
                    source_name: self.text.source_name.to_string(),
                    format: "JSON or YAML",
                    position,
                    message,
                });
                self.done = true;
                return false;
            }
        }
        self.done = n == 0;
        n > 0
    }

    /// Forgets the bytes before `at` (handed on, never read again).
    pub(super) fn forget(&mut self, at: usize) {
        (self.line, self.column) = self.position(at);
        self.buf.drain(..at);
    }

    /// The first byte at or after `*at` that is not whitespace, `*at`
    /// moved to it; `None` when the input ends (or fails) first.
    fn peek(&mut self, at: &mut usize) -> Option<u8> {
        loop {
            let bytes = self.buf.as_bytes();
            match bytes[*at..].iter().position(|&b| !is_space(b)) {
                Some(k) => {
                    *at += k;
                    return Some(bytes[*at]);
                }
                None => {
                    *at = self.buf.len();
                    if !self.fill() {
                        return None;
                    }
                }
            }
        }
    }

    /// One JSON value at `at` with its length: `None` at a syntax error,
    /// or when the input ends (or fails) inside it.
    fn raw_value(&mut self, at: usize) -> Option<usize> {
        let mut error_at = None;
        loop {
            let text = self.buf.get(at..)?;
            let mut values = serde_json::Deserializer::from_str(text).into_iter::<IgnoredAny>();
            match values.next() {
                // a number may go on in the next read: only a delimiter ends it
                Some(Ok(_)) if at + values.byte_offset() < self.buf.len() || self.done => {
                    return Some(values.byte_offset())
                }
                // an error that more text does not move is the text's (a
                // number cut after its `.` is called invalid, not cut)
                Some(Err(e)) if !e.is_eof() => {
                    if error_at.replace((e.line(), e.column())) == Some((e.line(), e.column()))
                        || !self.more(at)
                    {
                        return None;
                    }
                }
                _ => {
                    if !self.more(at) {
                        return None;
                    }
                }
            }
        }
    }

    /// A string without escapes at `at` (after its opening quote): its
    /// end, or `None` (an escape, or the input ends first).
    fn plain_string(&mut self, at: usize) -> Option<usize> {
        loop {
            let bytes = self.buf.as_bytes();
            match memchr::memchr2(b'"', b'\\', &bytes[at..]) {
                Some(k) if bytes[at + k] == b'"' => return Some(at + k),
                Some(_) => return None,
                None => {
                    if !self.more(at) {
                        return None;
                    }
                }
            }
        }
    }

    /// Reads the input as far as the fast path goes (see the module doc),
    /// handing each item to `sink`.
    pub(super) fn run<S: ItemSink>(&mut self, sink: &mut S) -> Outcome {
        let start = Takeover::start();
        let mut at = 0;
        let (list, fields) = match self.peek(&mut at) {
            Some(b'[') => (false, Vec::new()),
            Some(b'{') => match self.list_fields(at + 1) {
                Some((fields, items_at)) => {
                    at = items_at;
                    // as the reader path does at each `items` key
                    sink.reset();
                    (true, fields)
                }
                None => return Outcome::Takeover(start),
            },
            _ => return Outcome::Takeover(start),
        };
        at += 1; // the items' `[`
        self.items(sink, list, at, fields)
    }

    /// The fields of a List before its `items`, each a key without escapes
    /// and a valid value, and the offset of the items' `[`; `None` for
    /// anything else (the reader path then reads the whole input).
    fn list_fields(&mut self, mut at: usize) -> Option<(Fields, usize)> {
        let mut fields = Fields::new();
        loop {
            if self.peek(&mut at)? != b'"' {
                return None;
            }
            let end = self.plain_string(at + 1)?;
            let key = self.buf.get(at + 1..end)?.to_string();
            at = end + 1;
            if self.peek(&mut at)? != b':' {
                return None;
            }
            at += 1;
            let first = self.peek(&mut at)?;
            if key == "items" {
                return (first == b'[').then_some((fields, at));
            }
            let len = self.raw_value(at)?;
            let raw = RawValue::from_string(self.buf.get(at..at + len)?.to_string()).ok()?;
            at += len;
            // a repeated key: the last one counts, as in a parsed object
            fields.retain(|(k, _)| *k != key);
            fields.push((key, raw));
            if self.peek(&mut at)? != b',' {
                return None;
            }
            at += 1;
        }
    }

    /// The items from `at` (after the `[`) to the closing bracket.
    fn items<S: ItemSink>(
        &mut self,
        sink: &mut S,
        list: bool,
        mut at: usize,
        fields: Fields,
    ) -> Outcome {
        let takeover = |at, state| Outcome::Takeover(Takeover { at, state, fields });
        // the last point a takeover can start from, and its state
        let mut mark = at;
        let mut state = State::Before { list };
        let mut index = 0;
        loop {
            // between items: `]`, or (after one) `,` and the next
            match (self.peek(&mut at), state) {
                (Some(b']'), _) => {
                    return takeover(at + 1, State::End { list });
                }
                (Some(b','), State::After { .. }) => {
                    at += 1;
                    if self.peek(&mut at) != Some(b'{') {
                        return takeover(mark, state);
                    }
                }
                (Some(b'{'), State::Before { .. }) => {}
                _ => return takeover(mark, state),
            }
            // the bytes before the last mark are never read again
            if mark >= CHUNK {
                self.forget(mark);
                at -= mark;
                mark = 0;
            }
            let item = ItemAt { list, index };
            let len = loop {
                let Some(text) = self.buf.get(at..) else {
                    break None;
                };
                match sink.item_prefix(text, item) {
                    Prefix::Taken(len) => break Some(len),
                    Prefix::Cut if self.more(at) => {}
                    Prefix::Cut => break None,
                    Prefix::Other => {
                        let raw = self.raw_value(at).and_then(|len| {
                            sink.item(self.buf.get(at..at + len)?, item.to_string());
                            Some(len)
                        });
                        break raw;
                    }
                }
            };
            let Some(len) = len else {
                return takeover(mark, state);
            };
            if sink.stopped() {
                if let Some(e) = sink.take_fatal() {
                    return Outcome::Fatal(e);
                }
            }
            at += len;
            mark = at;
            state = State::After { list, index };
            index += 1;
        }
    }
}
