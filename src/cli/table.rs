//! Aligned text tables for the CLI's `-o table` views, laid out by
//! tabwriter (elastic tabstops) as kubectl prints its tables. It keeps only
//! the text and a small record per cell, so a 100k-pod `predict -o table`
//! costs little beyond its output.

use std::borrow::Cow;
use std::io::Write as _;

use tabwriter::TabWriter;

/// `text` as a terminal may show it: every control character but the line
/// break and the tab written as its escape (`\u{1b}`), so a label value or a
/// prices file holding `ESC[41m` is read, not executed by the terminal.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `rows` (a header first, if any) in columns as wide as their widest cell,
/// at least `gap` spaces apart; each line starts with `indent` and has no
/// trailing spaces. Shorter rows leave their last columns empty.
pub fn aligned<R, C>(rows: R, indent: &str, gap: usize) -> String
where
    R: IntoIterator<Item = C>,
    C: IntoIterator,
    C::Item: AsRef<str>,
{
    let mut tw = TabWriter::new(Vec::new()).minwidth(0).padding(gap);
    let mut cell_text = String::new();
    for row in rows {
        for (i, cell) in row.into_iter().enumerate() {
            // a tab or line break inside a cell would end it early; other
            // control characters are escaped before the width is taken
            cell_text.clear();
            for c in cell.as_ref().chars() {
                match c {
                    '\t' | '\n' | '\r' => cell_text.push(' '),
                    c if c.is_control() => cell_text.extend(c.escape_default()),
                    c => cell_text.push(c),
                }
            }
            // writes into a Vec cannot fail
            let _ = tw.write_all(if i == 0 { b"" } else { b"\t" });
            let _ = tw.write_all(cell_text.as_bytes());
        }
        let _ = tw.write_all(b"\n");
    }
    let _ = tw.flush();
    let bytes = tw.into_inner().unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let mut out = String::with_capacity(text.len() + indent.len() * 64);
    for line in text.lines() {
        out.push_str(indent);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_the_widest_cell() {
        let t = aligned(
            vec![
                vec!["NAME", "COST", "NOTE"],
                vec!["web-abcdef", "10", ""],
                vec!["a", "-2147483648", "x"],
            ],
            "  ",
            2,
        );
        assert_eq!(
            t,
            "  NAME        COST         NOTE\n  web-abcdef  10\n  a           -2147483648  x\n"
        );
    }

    #[test]
    fn short_rows_wide_characters_and_tabs_in_cells() {
        let t = aligned(vec![vec!["a", "b", "c"], vec!["ü"]], "", 3);
        assert_eq!(t, "a   b   c\nü\n");
        let t = aligned(vec![vec!["ü", "x"], vec!["ab", "y"]], "", 1);
        assert_eq!(t, "ü  x\nab y\n");
        let t = aligned(vec![vec!["a\tb", "c"], vec!["d", "e\nf"]], "", 1);
        assert_eq!(t, "a b c\nd   e f\n");
        assert_eq!(aligned(Vec::<Vec<String>>::new(), "  ", 2), "");
    }

    /// Issue 55, item 3: control characters from input are shown, never
    /// sent to the terminal, and the columns stay aligned.
    #[test]
    fn control_characters_are_escaped_and_columns_stay_aligned() {
        let t = aligned(vec![vec!["\u{1b}[41mred", "x"], vec!["ab", "y"]], "", 1);
        assert_eq!(t, "\\u{1b}[41mred x\nab            y\n");
        assert_eq!(
            terminal_safe("a\u{1b}[2Jb\u{7}\u{9b}c"),
            "a\\u{1b}[2Jb\\u{7}\\u{9b}c"
        );
        assert_eq!(
            terminal_safe("two\nlines\tand a tab\r"),
            "two\nlines\tand a tab\\r"
        );
        assert!(matches!(terminal_safe("plain ü"), Cow::Borrowed(_)));
    }
}
