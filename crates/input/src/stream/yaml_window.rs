//! The YAML fast path: a List in block style (`kubectl get -o yaml`) read
//! from the window, each item written out as JSON by [`block`] and handed
//! to the sink as a JSON item is. It reads the lines before `items:` only
//! to find it (plain `key: value` lines), then the items a batch at a time
//! (each batch written out on the pool's threads while the one before is
//! handed on, in order); at the items' end, or at anything [`block`] is not
//! sure of, the YAML reader
//! takes over ([`Takeover`]): it reads the lines before `items:` again,
//! then the input from the item it starts at (the last one handed on,
//! skipped, when the items ended), so everything after, and every error,
//! is the reader's as on the whole input.

use std::io::Read;
use std::ops::Range;

use rayon::prelude::*;

use super::window::{Window, CHUNK};
use super::{ItemAt, ItemSink};
use crate::InputError;

mod block;

/// Where the YAML reader takes over: it reads `opening`, then the window's
/// bytes from `at` on, then the rest of the input.
pub(super) struct Takeover {
    pub(super) at: usize,
    /// The document's lines before `items:` and an `items:` line; empty
    /// when the reader reads the input from its start.
    pub(super) opening: String,
    /// Lines of `opening` before its `items:` line.
    pub(super) before_items: u64,
    /// The index of the first item the reader reads, and whether it skips
    /// it (handed on already); `None` from the start.
    pub(super) resume: Option<(usize, bool)>,
}

impl Takeover {
    fn start() -> Self {
        Self {
            at: 0,
            opening: String::new(),
            before_items: 0,
            resume: None,
        }
    }

    /// The input line that line `l` of what the reader read is, the reader
    /// having started at input line `line`.
    pub(super) fn input_line(&self, l: u64, line: u64) -> u64 {
        if self.opening.is_empty() || l <= self.before_items {
            l
        } else {
            // the `items:` line of the opening stands for the one before
            // the item the reader starts at
            (line + l).saturating_sub(self.before_items + 2)
        }
    }
}

/// What the fast path came to.
pub(super) enum Outcome {
    Takeover(Takeover),
    /// A limit the sink keeps was passed: reading stops.
    Fatal(InputError),
}

/// Reads the input as far as the fast path goes (see the module doc),
/// handing each item to `sink`.
pub(super) fn run<R: Read, S: ItemSink>(window: &mut Window<'_, R>, sink: &mut S) -> Outcome {
    let Some((items_line, first)) = find_items(window) else {
        return Outcome::Takeover(Takeover::start());
    };
    let bytes = window.buf.as_bytes();
    let indent = bytes[first..].iter().take_while(|&&b| b == b' ').count();
    let opening_lines = &window.buf[..items_line];
    let mut takeover = Takeover {
        at: 0,
        opening: format!("{opening_lines}items:\n"),
        before_items: memchr::memchr_iter(b'\n', opening_lines.as_bytes()).count() as u64,
        resume: None,
    };
    // as the reader does at an `items` key
    sink.reset();
    let entry_line = format!("\n{}-", " ".repeat(indent));
    let entry_line = memchr::memmem::Finder::new(entry_line.as_bytes());
    let mut at = first;
    let mut index = 0;
    // the batch written out, handed on while the next is written out
    let mut ready: Option<Batch> = None;
    loop {
        // the bytes before the oldest entry still needed are never read again
        let keep = ready.as_ref().map_or(at, |b| b.start);
        if keep >= CHUNK {
            window.forget(keep);
            at -= keep;
            if let Some(b) = ready.as_mut() {
                b.start -= keep;
            }
        }
        // the entries that end in what is read ahead (a MiB)
        while window.more(at) {}
        let text = &window.buf[at..];
        let pieces = entries(text, &entry_line, window.done);
        let (written, stop) = std::thread::scope(|scope| {
            let job = scope.spawn(|| write_out(text, &pieces, indent));
            let stop = ready
                .take()
                .and_then(|batch| hand_on(batch, sink, &mut index));
            (job.join(), stop)
        });
        let stop = match (stop, written) {
            (Some(stop), _) => stop,
            // one entry longer than the window reads ahead
            (None, _) if pieces.is_empty() => Stop::At(at, (index, false)),
            (None, Ok(written)) => {
                let end = pieces.last().map_or(0, |p| p.end);
                ready = Some(Batch {
                    start: at,
                    len: text.len(),
                    pieces,
                    written,
                });
                at += end;
                continue;
            }
            (None, Err(panic)) => std::panic::resume_unwind(panic),
        };
        return match stop {
            Stop::At(start, resume) => {
                takeover.at = start;
                takeover.resume = Some(resume);
                Outcome::Takeover(takeover)
            }
            Stop::Fatal(e) => Outcome::Fatal(e),
        };
    }
}

/// Entries written out, not yet handed on.
struct Batch {
    /// Where its text starts in the window, and how long the text was.
    start: usize,
    len: usize,
    /// Its entries, in its text.
    pieces: Vec<Range<usize>>,
    written: Vec<Written>,
}

type Written = Result<(String, block::Item), block::Miss>;

/// Where handing on stopped.
enum Stop {
    /// The reader takes over at this offset in the window, with this resume.
    At(usize, (usize, bool)),
    Fatal(InputError),
}

/// Each of `pieces` of `text` written out as JSON, on the pool's threads.
fn write_out(text: &str, pieces: &[Range<usize>], indent: usize) -> Vec<Written> {
    pieces
        .par_iter()
        .map(|piece| {
            let mut json = String::with_capacity(piece.len() + piece.len() / 4);
            block::entry_to_json(&text[piece.clone()], indent, true, &mut json)
                .map(|item| (json, item))
        })
        .collect()
}

/// Hands a batch's entries to `sink` in order (`index`: the next entry's
/// index); `Some` where the reader takes over, or a limit was passed.
fn hand_on<S: ItemSink>(batch: Batch, sink: &mut S, index: &mut usize) -> Option<Stop> {
    for (piece, written) in batch.pieces.iter().zip(batch.written) {
        let Ok((json, item)) = written else {
            return Some(Stop::At(batch.start + piece.start, (*index, false)));
        };
        sink.item(
            &json,
            ItemAt {
                list: true,
                index: *index,
            }
            .to_string(),
        );
        if sink.stopped() {
            if let Some(e) = sink.take_fatal() {
                return Some(Stop::Fatal(e));
            }
        }
        // another entry right after this one, or the items' end: the
        // reader then reads from this one, skipped
        let followed = item.next.is_none() && item.len == piece.len() && piece.end < batch.len;
        if !followed {
            return Some(Stop::At(batch.start + piece.start, (*index + 1, true)));
        }
        *index += 1;
    }
    None
}

/// The sequence entries of `text`, which starts with one: each runs to the
/// next line that starts an entry at the same indentation (`entry_line`
/// finds its `\n`), the last to the text's end when the input ended there
/// (else it is left for more text).
fn entries(text: &str, entry_line: &memchr::memmem::Finder<'_>, ended: bool) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let dash = entry_line.needle().len();
    let mut pieces = Vec::new();
    let mut start = 0;
    for k in entry_line.find_iter(bytes) {
        // `- ...` or a lone `-`, not `---` or `-5`
        if matches!(bytes.get(k + dash), Some(b' ' | b'\n')) {
            pieces.push(start..k + 1);
            start = k + 1;
        }
    }
    if ended && start < bytes.len() {
        pieces.push(start..bytes.len());
    }
    pieces
}

/// The `items:` line of a document that starts with plain `key: value`
/// lines, and the first item's line (a `- ` entry): `None` for anything
/// else, which the reader then reads from the start.
fn find_items<R: Read>(window: &mut Window<'_, R>) -> Option<(usize, usize)> {
    let mut at = 0;
    let mut items_line = None;
    loop {
        let end = line_end(window, at)?;
        let line = &window.buf.as_bytes()[at..end];
        let content = line.iter().position(|&b| b != b' ');
        let next = (end + 1).min(window.buf.len());
        match (content, items_line) {
            // blank and comment lines
            (None, _) => {}
            (Some(k), _) if line[k] == b'#' => {}
            (Some(k), Some(items)) => {
                let entry = line[k] == b'-' && line.get(k + 1).is_none_or(|&b| b == b' ');
                return entry.then_some((items, at));
            }
            (Some(0), None) => {
                if is_items_key(line) {
                    items_line = Some(at);
                } else if !is_plain_pair(line) {
                    return None;
                }
            }
            (Some(_), None) => return None,
        }
        if next == at || end == window.buf.len() && window.done {
            return None;
        }
        at = next;
    }
}

/// The end of the line at `at` (its `\n`, or the input's end), more read
/// as needed; `None` when the input ends (or fails) right there.
fn line_end<R: Read>(window: &mut Window<'_, R>, at: usize) -> Option<usize> {
    loop {
        if let Some(k) = memchr::memchr(b'\n', &window.buf.as_bytes()[at..]) {
            return Some(at + k);
        }
        if !window.more(at) {
            return (window.done && at < window.buf.len()).then_some(window.buf.len());
        }
    }
}

/// `items:`, with nothing but a comment after it.
fn is_items_key(line: &[u8]) -> bool {
    line.strip_prefix(b"items:").is_some_and(|rest| {
        rest.trim_ascii().is_empty()
            || rest.starts_with(b" ") && rest.trim_ascii_start().starts_with(b"#")
    })
}

/// `key: value` with a plain key and a value that ends on its line (no
/// block, flow, quoted, anchored or tagged value), no tab or carriage
/// return: what the reader reads again at a takeover, and what cannot
/// change how the items read.
fn is_plain_pair(line: &[u8]) -> bool {
    if !line[0].is_ascii_alphanumeric() || memchr::memchr2(b'\t', b'\r', line).is_some() {
        return false;
    }
    let Some(colon) = memchr::memmem::find(line, b": ") else {
        return false;
    };
    let value = line[colon + 2..].trim_ascii_start();
    value.first().is_some_and(|&b| {
        !matches!(
            b,
            b'|' | b'>'
                | b'&'
                | b'*'
                | b'!'
                | b'['
                | b'{'
                | b'\''
                | b'"'
                | b'#'
                | b'%'
                | b'@'
                | b'`'
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::TextReader;
    use super::*;

    /// The items handed on, by location.
    #[derive(Default)]
    struct Seen(Vec<String>);

    impl ItemSink for Seen {
        fn item(&mut self, _raw: &str, location: String) {
            self.0.push(location);
        }
        fn value(&mut self, _value: serde_json::Value, location: String) {
            self.0.push(location);
        }
        fn reset(&mut self) {
            self.0.clear();
        }
        fn has_shape(&self) -> bool {
            false
        }
        fn set_shape(&mut self, _e: InputError) {}
        fn take_fatal(&mut self) -> Option<InputError> {
            None
        }
        fn stopped(&self) -> bool {
            false
        }
    }

    /// How far the fast path reads `text`: the items it handed on, and
    /// where the reader takes over (its resume).
    fn fast_path(text: &str) -> (usize, Option<(usize, bool)>) {
        let mut window = Window::new(TextReader::new(
            "f.yaml",
            Vec::new(),
            text.as_bytes(),
            1 << 30,
        ));
        let mut seen = Seen::default();
        match run(&mut window, &mut seen) {
            Outcome::Takeover(t) => (seen.0.len(), t.resume),
            Outcome::Fatal(e) => panic!("{e}"),
        }
    }

    /// The fast path reads plain entries itself, and hands the reader the
    /// first it is not sure of, or the last one (skipped) when the items end.
    #[test]
    fn the_fast_path_reads_what_it_is_sure_of_and_no_further() {
        let pod = |name: &str| format!("- metadata:\n    name: {name}\n    uid: u-{name}\n");
        let many: String = (0..3000).map(|i| pod(&format!("p{i}"))).collect();
        let list = |body: &str| format!("apiVersion: v1\nitems:\n{body}kind: List\n");
        // every entry, across batches of a MiB; the reader reads the last
        // again, skipped, and what follows
        assert_eq!(fast_path(&list(&many)), (3000, Some((3000, true))));
        // entry 2 holds a boolean in another spelling: the reader from there
        let odd = format!(
            "{}{}- metadata:\n    name: yes\n{}",
            pod("a"),
            pod("b"),
            pod("c")
        );
        assert_eq!(fast_path(&list(&odd)), (2, Some((2, false))));
        // nothing to stream: the reader from the start
        assert_eq!(fast_path("kind: Pod\nmetadata:\n  name: a\n"), (0, None));
        assert_eq!(fast_path("apiVersion: &v v1\nitems:\n- a: 1\n"), (0, None));
        assert_eq!(fast_path("kind: List\nitems: []\n"), (0, None));
    }
}
