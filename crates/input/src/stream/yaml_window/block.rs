//! One item of a block-style YAML List written out as JSON, for the plain
//! YAML that `kubectl get -o yaml` and most YAML writers print: block
//! mappings and sequences, plain and quoted scalars on one line, literal
//! (`|`, `|-`) and folded (`>`, `>-`) blocks, `{}` and `[]`. Anything else,
//! or anything the YAML reader could read otherwise (a plain scalar that
//! might be a number, a repeated key, deep nesting), is [`Miss::Unsure`]:
//! the caller leaves the item to the YAML reader, so answers and errors
//! stay the reader's. What it writes parses to the value the YAML reader
//! gives the item.

/// Why an item was not written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// The text ends inside the item (or right after it, before the line
    /// that says where it ends): more text is needed.
    Cut,
    /// Not for this path: the YAML reader reads it.
    Unsure,
}

type Step<T = ()> = Result<T, Miss>;

/// How deep an item may nest here: well below the YAML reader's limit, so
/// that deeper text reaches the reader and its error.
const MAX_DEPTH: usize = 40;

/// What follows an item written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Item {
    /// Bytes the item took, with the blank and comment lines after it.
    pub len: usize,
    /// The line after them (`None`: the text ended): its indentation, and
    /// whether it starts a sequence entry.
    pub next: Option<(usize, bool)>,
}

/// Writes the sequence entry at the start of `text` (a line `- ...`
/// indented by `indent`) to `out` as JSON. `complete`: `text` runs to the
/// end of the input (else a line left unfinished, or the text's end before
/// the item's, is [`Miss::Cut`]).
pub(crate) fn entry_to_json(
    text: &str,
    indent: usize,
    complete: bool,
    out: &mut String,
) -> Result<Item, Miss> {
    let mut t = Transcoder {
        text: text.as_bytes(),
        src: text,
        pos: 0,
        complete,
        out,
        keys: Vec::new(),
        depth: 0,
        last: None,
    };
    let line = t.content_line()?.ok_or(Miss::Unsure)?;
    if line.indent != indent || !line.is_dash(t.text) {
        return Err(Miss::Unsure);
    }
    t.entry(indent, line)?;
    let next = t.content_line()?;
    Ok(Item {
        len: t.pos,
        next: next.map(|l| (l.indent, l.is_dash(t.text))),
    })
}

/// A line of the text, by offsets.
#[derive(Debug, Clone, Copy)]
struct Line {
    start: usize,
    indent: usize,
    /// The first byte after the indentation.
    content: usize,
    /// The line's `\n` (or the text's end).
    end: usize,
    /// It holds a tab or a carriage return.
    odd: bool,
}

impl Line {
    /// `- ...` or a lone `-`.
    fn is_dash(&self, text: &[u8]) -> bool {
        text[self.content] == b'-'
            && (self.content + 1 == self.end || text[self.content + 1] == b' ')
    }

    /// Past the `\n`.
    fn next(&self) -> usize {
        self.end + 1
    }
}

struct Transcoder<'t, 'o> {
    text: &'t [u8],
    src: &'t str,
    /// The start of the next line not yet read.
    pos: usize,
    complete: bool,
    out: &'o mut String,
    /// The keys of the mappings being written, as written out (a repeated
    /// key is left to the reader, which refuses it), by offsets in `out`.
    keys: Vec<(usize, usize)>,
    depth: usize,
    /// The line read last.
    last: Option<Line>,
}

impl Transcoder<'_, '_> {
    /// The line at `at` (not moved past): `None` at the text's end.
    fn line_at(&mut self, at: usize) -> Step<Option<Line>> {
        // the line after a scalar is looked at again by its parent
        if let Some(line) = self.last.filter(|l| l.start == at) {
            return Ok(Some(line));
        }
        if at >= self.text.len() {
            return if self.complete {
                Ok(None)
            } else {
                Err(Miss::Cut)
            };
        }
        // one scan finds the line's end, or first a tab or carriage return
        let (end, odd) = match memchr::memchr3(b'\n', b'\t', b'\r', &self.text[at..]) {
            Some(k) if self.text[at + k] == b'\n' => (at + k, false),
            found => {
                let from = at + found.unwrap_or(self.text.len() - at);
                match memchr::memchr(b'\n', &self.text[from..]) {
                    Some(k) => (from + k, found.is_some()),
                    None if self.complete => (self.text.len(), found.is_some()),
                    None => return Err(Miss::Cut),
                }
            }
        };
        let indent = self.text[at..end]
            .iter()
            .position(|&b| b != b' ')
            .unwrap_or(end - at);
        let line = Line {
            start: at,
            indent,
            content: at + indent,
            end,
            odd,
        };
        self.last = Some(line);
        Ok(Some(line))
    }

    fn consume(&mut self, line: Line) {
        self.pos = line.next().min(self.text.len());
    }

    /// The next line with content (blank and comment lines read past),
    /// not moved past. Tabs and carriage returns outside scalars are left
    /// to the reader.
    fn content_line(&mut self) -> Step<Option<Line>> {
        loop {
            let Some(line) = self.line_at(self.pos)? else {
                return Ok(None);
            };
            let rest = &self.text[line.content..line.end];
            if rest.is_empty() || rest[0] == b'#' {
                if line.odd && memchr::memchr(b'\r', rest).is_some() {
                    return Err(Miss::Unsure);
                }
                self.consume(line);
                continue;
            }
            if line.odd {
                return Err(Miss::Unsure);
            }
            return Ok(Some(line));
        }
    }

    fn deeper(&mut self) -> Step {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Miss::Unsure);
        }
        Ok(())
    }

    /// The node of a sequence entry `line` (its dash at `indent`).
    fn entry(&mut self, indent: usize, line: Line) -> Step {
        let after = line.content + 1;
        let at = skip_spaces(self.text, after, line.end);
        if at == line.end || self.text[at] == b'#' {
            self.consume(line);
            return self.node_below(indent, false);
        }
        if self.text[at] == b'-' && (at + 1 == line.end || self.text[at + 1] == b' ') {
            return Err(Miss::Unsure); // a sequence in an entry
        }
        match self.key(at, line.end)? {
            Some((key, colon)) => self.mapping(at - line.start, Some((key, colon, line))),
            None => self.scalar(at, line, indent),
        }
    }

    /// The node on the lines after a key or dash at `indent` with nothing
    /// after it: a mapping or sequence indented deeper (or, after a key, a
    /// sequence at the same indentation), else null.
    fn node_below(&mut self, indent: usize, after_key: bool) -> Step {
        match self.content_line()? {
            Some(l) if l.indent > indent => {
                if l.is_dash(self.text) {
                    self.sequence(l.indent)
                } else {
                    self.mapping(l.indent, None)
                }
            }
            Some(l) if after_key && l.indent == indent && l.is_dash(self.text) => {
                self.sequence(indent)
            }
            _ => {
                self.out.push_str("null");
                Ok(())
            }
        }
    }

    fn sequence(&mut self, indent: usize) -> Step {
        self.deeper()?;
        self.out.push('[');
        let mut first = true;
        while let Some(line) = self.content_line()? {
            if line.indent < indent || (line.indent == indent && !line.is_dash(self.text)) {
                break;
            }
            if line.indent > indent {
                return Err(Miss::Unsure);
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            self.entry(indent, line)?;
        }
        self.out.push(']');
        self.depth -= 1;
        Ok(())
    }

    /// A mapping whose keys are at `indent`; `first`: its first key, met
    /// on a line already read (after a dash).
    fn mapping(&mut self, indent: usize, first: Option<(Key, usize, Line)>) -> Step {
        self.deeper()?;
        self.out.push('{');
        let base = self.keys.len();
        let mut sorted = true;
        if let Some((key, colon, line)) = first {
            self.pair((base, &mut sorted), key, colon, line, indent)?;
        }
        while let Some(line) = self.content_line()? {
            if line.indent < indent || (line.indent == indent && line.is_dash(self.text)) {
                break;
            }
            if line.indent > indent {
                return Err(Miss::Unsure);
            }
            let (key, colon) = self.key(line.content, line.end)?.ok_or(Miss::Unsure)?;
            if self.keys.len() > base {
                self.out.push(',');
            }
            self.pair((base, &mut sorted), key, colon, line, indent)?;
        }
        self.keys.truncate(base);
        self.out.push('}');
        self.depth -= 1;
        Ok(())
    }

    /// One key and its value (from after the `:` at `colon` on `line`).
    /// `sorted`: the mapping's keys so far came in increasing order.
    fn pair(
        &mut self,
        (base, sorted): (usize, &mut bool),
        key: Key,
        colon: usize,
        line: Line,
        indent: usize,
    ) -> Step {
        let start = self.out.len();
        match key {
            Key::Plain(s, e) | Key::Quoted(s, e) => push_json_str(self.out, &self.src[s..e]),
            Key::SingleQuoted(s, e) => self.single_quoted_text(s, e),
        }
        let written = (start, self.out.len());
        let new = &self.out[start..];
        // writers sort keys: past the last of increasing keys, a key
        // repeats none
        let past_last = self.keys[base..]
            .last()
            .is_none_or(|&(s, e)| &self.out[s..e] < new);
        *sorted &= past_last;
        if !*sorted
            && self.keys[base..]
                .iter()
                .any(|&(s, e)| &self.out[s..e] == new)
        {
            return Err(Miss::Unsure);
        }
        self.keys.push(written);
        self.out.push(':');
        let at = skip_spaces(self.text, colon + 1, line.end);
        if at == line.end || self.text[at] == b'#' {
            self.consume(line);
            return self.node_below(indent, true);
        }
        self.scalar(at, line, indent)
    }

    /// The key at `at` on a line ending at `end`, and its `:`; `None` when
    /// the line is not `key: ...` or `key:`.
    fn key(&self, at: usize, end: usize) -> Step<Option<(Key, usize)>> {
        let text = self.text;
        let after_colon = |c: usize| c + 1 == end || text[c + 1] == b' ';
        match text[at] {
            q @ (b'\'' | b'"') => {
                let Some(close) = memchr::memchr(q, &text[at + 1..end]).map(|k| at + 1 + k) else {
                    return Ok(None);
                };
                let colon = skip_spaces(text, close + 1, end);
                if colon == end || text[colon] != b':' || !after_colon(colon) {
                    return Ok(None);
                }
                let inner = &text[at + 1..close];
                // an escape or a doubled quote: the reader's to read
                if inner.contains(&b'\\') || q == b'\'' && close + 1 < end && text[close + 1] == q {
                    return Err(Miss::Unsure);
                }
                let key = if q == b'"' {
                    Key::Quoted(at + 1, close)
                } else {
                    Key::SingleQuoted(at + 1, close)
                };
                Ok(Some((key, colon)))
            }
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'/' || b == b'.' => {
                let mut from = at;
                let colon = loop {
                    match memchr::memchr(b':', &text[from..end]) {
                        Some(k) if after_colon(from + k) => break from + k,
                        Some(k) => from += k + 1,
                        None => return Ok(None),
                    }
                };
                let mut key_end = colon;
                while key_end > at && text[key_end - 1] == b' ' {
                    key_end -= 1;
                }
                let key = &text[at..key_end];
                if has_comment(key) || is_null_word(key) {
                    return Err(Miss::Unsure);
                }
                Ok(Some((Key::Plain(at, key_end), colon)))
            }
            _ => Ok(None),
        }
    }

    /// A scalar starting at `at` on `line`, whose parent is at `indent`.
    fn scalar(&mut self, at: usize, line: Line, indent: usize) -> Step {
        let text = self.text;
        match text[at] {
            b'\'' => {
                let close = single_quote_end(text, at + 1, line.end).ok_or(Miss::Unsure)?;
                self.only_comment_after(close + 1, line.end)?;
                self.single_quoted_text(at + 1, close);
                self.consume(line);
                Ok(())
            }
            b'"' => {
                let close = double_quote_end(text, at + 1, line.end)?;
                self.only_comment_after(close + 1, line.end)?;
                // its escapes are JSON's (checked): the text is copied as is
                self.out.push_str(&self.src[at..=close]);
                self.consume(line);
                Ok(())
            }
            b'{' | b'[' => {
                let close = if text[at] == b'{' { b'}' } else { b']' };
                if at + 1 >= line.end || text[at + 1] != close {
                    return Err(Miss::Unsure);
                }
                self.only_comment_after(at + 2, line.end)?;
                self.out.push_str(if close == b'}' { "{}" } else { "[]" });
                self.consume(line);
                Ok(())
            }
            b'|' | b'>' => {
                let folded = text[at] == b'>';
                let strip = match &text[at + 1..line.end] {
                    b"" => false,
                    b"-" => true,
                    rest if rest[0] == b' ' => {
                        self.only_comment_after(at + 1, line.end)?;
                        false
                    }
                    rest if rest[0] == b'-' => {
                        self.only_comment_after(at + 2, line.end)?;
                        true
                    }
                    _ => return Err(Miss::Unsure),
                };
                self.consume(line);
                self.block_scalar(indent, strip, folded)
            }
            b'&' | b'*' | b'!' | b'%' | b'@' | b'`' | b'?' | b',' | b']' | b'}' | b'#' | b':' => {
                Err(Miss::Unsure)
            }
            // a dash and a space: a sequence where a scalar was
            b'-' if at + 1 == line.end || text[at + 1] == b' ' => Err(Miss::Unsure),
            _ => {
                let end = plain_end(text, at, line.end)?;
                self.consume(line);
                // a deeper line that is not a comment would carry the
                // scalar on (a multi-line plain scalar)
                let mut next = self.pos;
                while let Some(l) = self.line_at(next)? {
                    if l.content < l.end {
                        if l.indent > indent && text[l.content] != b'#' {
                            return Err(Miss::Unsure);
                        }
                        break;
                    }
                    next = l.next();
                }
                self.plain(at, end)
            }
        }
    }

    /// A plain scalar: a string, or `true`, `false`, `null` or an integer
    /// as the YAML reader reads them; anything it might read as another
    /// number or boolean is left to it.
    fn plain(&mut self, at: usize, end: usize) -> Step {
        let value = &self.text[at..end];
        match value {
            b"true" | b"false" | b"null" => {
                self.out.push_str(&self.src[at..end]);
                return Ok(());
            }
            b"~" => {
                self.out.push_str("null");
                return Ok(());
            }
            _ => {}
        }
        let first = value[0];
        if first.is_ascii_alphabetic() {
            if is_bool_or_null_word(value) {
                return Err(Miss::Unsure);
            }
        } else if first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.') {
            if is_decimal_integer(value) {
                self.out.push_str(&self.src[at..end]);
                return Ok(());
            }
            if may_be_number(value) {
                return Err(Miss::Unsure);
            }
        }
        push_json_str(self.out, &self.src[at..end]);
        Ok(())
    }

    /// Nothing but spaces and a comment from `at` to `end`.
    fn only_comment_after(&self, at: usize, end: usize) -> Step {
        let k = skip_spaces(self.text, at, end);
        if k == end || (k > at && self.text[k] == b'#') {
            Ok(())
        } else {
            Err(Miss::Unsure)
        }
    }

    /// A single-quoted scalar's text `text[at..close]` as a JSON string.
    fn single_quoted_text(&mut self, at: usize, close: usize) {
        let inner = &self.src[at..close];
        if inner.contains('\'') {
            push_json_str(self.out, &inner.replace("''", "'"));
        } else {
            push_json_str(self.out, inner);
        }
    }

    /// A literal or folded block (`|`, `|-`, `>`, `>-`, read past its
    /// header line) under a parent at `indent`, as a JSON string. In a
    /// folded one, a line break between two lines is a space and each blank
    /// line between them a line break; a more-indented line, which keeps
    /// its breaks, is the reader's.
    fn block_scalar(&mut self, indent: usize, strip: bool, folded: bool) -> Step {
        let text = self.text;
        let mut content_indent: Option<usize> = None;
        let mut newlines = 0usize;
        let mut started = false;
        self.out.push('"');
        while let Some(l) = self.line_at(self.pos)? {
            if l.odd && memchr::memchr(b'\r', &text[l.start..l.end]).is_some() {
                return Err(Miss::Unsure);
            }
            if l.content == l.end {
                // a blank line: spaces past the content's indentation
                // would be content
                if l.indent > 0 && content_indent.is_none_or(|n| l.indent > n) {
                    return Err(Miss::Unsure);
                }
                newlines += 1;
                self.consume(l);
                continue;
            }
            let n = match content_indent {
                Some(n) if l.indent < n => break,
                Some(n) if folded && (l.indent > n || text[l.content] == b'\t') => {
                    return Err(Miss::Unsure)
                }
                Some(n) => n,
                None if l.indent <= indent => break,
                None => {
                    if text[l.content] == b'\t' {
                        return Err(Miss::Unsure);
                    }
                    content_indent = Some(l.indent);
                    l.indent
                }
            };
            if folded && started && newlines == 1 {
                self.out.push(' ');
            } else {
                let folded_break = usize::from(folded && started);
                for _ in folded_break..newlines {
                    self.out.push_str("\\n");
                }
            }
            push_json_text(self.out, &self.src[l.start + n..l.end]);
            started = true;
            newlines = 1;
            self.consume(l);
        }
        if started && !strip {
            self.out.push_str("\\n");
        }
        self.out.push('"');
        Ok(())
    }
}

/// A key of a mapping, by offsets of its text.
#[derive(Debug, Clone, Copy)]
enum Key {
    Plain(usize, usize),
    /// Double-quoted, without escapes.
    Quoted(usize, usize),
    SingleQuoted(usize, usize),
}

fn skip_spaces(text: &[u8], mut at: usize, end: usize) -> usize {
    while at < end && text[at] == b' ' {
        at += 1;
    }
    at
}

/// The end of a plain scalar from `at` on a line ending at `end`: before
/// a comment (` #`), trailing spaces left out. A `: ` in it (or a `:` at
/// its end) is a mapping the reader refuses there.
fn plain_end(text: &[u8], at: usize, end: usize) -> Step<usize> {
    let mut from = at;
    let mut stop = end;
    while let Some(k) = memchr::memchr2(b':', b'#', &text[from..end]) {
        let k = from + k;
        if text[k] == b'#' {
            if text[k - 1] == b' ' {
                stop = k;
                break;
            }
        } else if k + 1 == end || text[k + 1] == b' ' {
            return Err(Miss::Unsure);
        }
        from = k + 1;
    }
    while stop > at && text[stop - 1] == b' ' {
        stop -= 1;
    }
    if text[stop - 1] == b':' {
        return Err(Miss::Unsure);
    }
    Ok(stop)
}

/// A ` #` in a key: a comment the reader reads otherwise.
fn has_comment(key: &[u8]) -> bool {
    memchr::memchr_iter(b'#', key).any(|k| k > 0 && key[k - 1] == b' ')
}

/// The closing quote of a single-quoted scalar from `at` (after its
/// opening quote) on one line; `None` if it goes on past the line.
fn single_quote_end(text: &[u8], mut at: usize, end: usize) -> Option<usize> {
    loop {
        let k = at + memchr::memchr(b'\'', &text[at..end])?;
        if k + 1 < end && text[k + 1] == b'\'' {
            at = k + 2;
        } else {
            return Some(k);
        }
    }
}

/// The closing quote of a double-quoted scalar on one line whose escapes
/// JSON reads alike (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t` and
/// `\u` outside surrogates); anything else is the reader's.
fn double_quote_end(text: &[u8], mut at: usize, end: usize) -> Step<usize> {
    loop {
        let k = at + memchr::memchr2(b'"', b'\\', &text[at..end]).ok_or(Miss::Unsure)?;
        if text[k] == b'"' {
            return Ok(k);
        }
        match text.get(k + 1).filter(|_| k + 1 < end) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => at = k + 2,
            Some(b'u') => {
                let hex = text.get(k + 2..k + 6).filter(|_| k + 6 <= end);
                let code = hex
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                    .ok_or(Miss::Unsure)?;
                if (0xD800..0xE000).contains(&code) {
                    return Err(Miss::Unsure);
                }
                at = k + 6;
            }
            _ => return Err(Miss::Unsure),
        }
    }
}

/// `text` as a JSON string, quotes included.
fn push_json_str(out: &mut String, text: &str) {
    out.push('"');
    push_json_text(out, text);
    out.push('"');
}

/// `text` escaped for a JSON string.
fn push_json_text(out: &mut String, mut text: &str) {
    while let Some(k) = memchr::memchr3(b'"', b'\\', b'\t', text.as_bytes()) {
        out.push_str(&text[..k]);
        out.push_str(match text.as_bytes()[k] {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            _ => "\\t",
        });
        text = &text[k + 1..];
    }
    out.push_str(text);
}

/// `null` or `~` as a key: the reader refuses it (a key must be a string).
fn is_null_word(key: &[u8]) -> bool {
    key == b"~" || key.eq_ignore_ascii_case(b"null")
}

/// A word the YAML reader reads as a boolean or null in some spelling
/// (`True`, `yes`, `Off`, `y`, `NULL`...).
fn is_bool_or_null_word(value: &[u8]) -> bool {
    value.len() <= 5
        && [
            &b"y"[..],
            b"n",
            b"yes",
            b"no",
            b"on",
            b"off",
            b"true",
            b"false",
            b"null",
        ]
        .iter()
        .any(|w| value.eq_ignore_ascii_case(w))
}

/// An integer in decimal as JSON writes it, small enough for any reader:
/// no sign but `-`, no leading zero, at most 18 digits, not `-0`.
fn is_decimal_integer(value: &[u8]) -> bool {
    let digits = value.strip_prefix(b"-").unwrap_or(value);
    !digits.is_empty()
        && digits.len() <= 18
        && digits.iter().all(u8::is_ascii_digit)
        && (digits == b"0" && value.len() == 1 || digits[0] != b'0')
}

/// Whether the YAML reader might read a plain scalar starting with a digit,
/// sign or dot as a number (or a non-finite one): a superset of its forms
/// (`0x1F`, `0o17`, `1_000`, `1.5e3`, `.inf`...).
fn may_be_number(value: &[u8]) -> bool {
    let body = match value.first() {
        Some(b'-' | b'+') => &value[1..],
        _ => value,
    };
    if body.len() >= 2
        && body[0] == b'0'
        && matches!(body[1], b'x' | b'X' | b'o' | b'O' | b'b' | b'B')
        && body[2..]
            .iter()
            .all(|b| b.is_ascii_hexdigit() || *b == b'_')
    {
        return true;
    }
    if body.first() == Some(&b'.') && body.get(1).is_some_and(u8::is_ascii_alphabetic) {
        return true; // .inf, .nan
    }
    // digits and underscores, one dot, an exponent
    let mut i = 0;
    let digits = |i: &mut usize| {
        while *i < body.len() && (body[*i].is_ascii_digit() || body[*i] == b'_') {
            *i += 1;
        }
    };
    digits(&mut i);
    if i < body.len() && body[i] == b'.' {
        i += 1;
        digits(&mut i);
    }
    if i < body.len() && matches!(body[i], b'e' | b'E') {
        i += 1;
        if i < body.len() && matches!(body[i], b'+' | b'-') {
            i += 1;
        }
        digits(&mut i);
    }
    i == body.len()
}

#[cfg(test)]
mod tests;
