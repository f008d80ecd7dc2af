//! Aligned text tables for the CLI's `-o table` views: comfy-table lays the
//! columns out, without borders, as kubectl prints its tables.

use comfy_table::{presets::NOTHING, ContentArrangement, Table};

/// `rows` (a header first, if any) in columns as wide as their widest cell,
/// `gap` spaces apart; each line starts with `indent` and has no trailing
/// spaces. Shorter rows leave their last columns empty.
pub fn aligned<R, C>(rows: R, indent: &str, gap: u16) -> String
where
    R: IntoIterator<Item = C>,
    C: IntoIterator,
    C::Item: Into<comfy_table::Cell>,
{
    let mut table = Table::new();
    table
        .load_style(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    for row in rows {
        table.add_row(row);
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, gap));
    }
    let mut out = String::new();
    for line in table.lines() {
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
    fn short_rows_and_wide_characters() {
        let t = aligned(vec![vec!["a", "b", "c"], vec!["ü"]], "", 3);
        assert_eq!(t, "a   b   c\nü\n");
        assert_eq!(aligned(Vec::<Vec<String>>::new(), "  ", 2), "");
    }
}
