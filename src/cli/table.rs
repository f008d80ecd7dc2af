//! Aligned text tables for the CLI's `-o table` views, laid out by
//! tabwriter (elastic tabstops) as kubectl prints its tables. It keeps only
//! the text and a small record per cell, so a 100k-pod `predict -o table`
//! costs little beyond its output.

use std::io::Write as _;

use tabwriter::TabWriter;

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
            // a tab or line break inside a cell would end it early
            cell_text.clear();
            cell_text.extend(cell.as_ref().chars().map(|c| match c {
                '\t' | '\n' | '\r' => ' ',
                c => c,
            }));
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
}
