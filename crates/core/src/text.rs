//! Text helpers shared by the core's messages and the readers' errors: a
//! line stays short whatever the input's size, and says what a reader needs.

/// How many items a line on stderr names before "and K more": a line stays
/// short whatever the input's size.
pub const LISTED: usize = 10;

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

/// What serde_json says is wrong, without the position (said apart) and
/// with its depth limit in words.
pub fn json_problem(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    // serde_json's name for its depth limit, in the words of RELIABILITY.md
    if message == "recursion limit exceeded" {
        "nested too deeply (more than 128 levels of lists and maps)".to_string()
    } else {
        message.to_string()
    }
}

/// `text` without the ` (os error N)` std appends to an OS error's message:
/// the number says nothing to a reader that the words before it do not.
pub fn without_os_error(text: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..at]);
        if digits > 0 && after[digits..].starts_with(')') {
            rest = &after[digits + 1..];
        } else {
            out.push_str(MARK);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod os_error_tests {
    #[test]
    fn os_error_numbers_are_left_out() {
        use super::without_os_error as w;
        assert_eq!(
            w("tcp connect error: Connection refused (os error 111)"),
            "tcp connect error: Connection refused"
        );
        assert_eq!(w("a (os error 2): b (os error 13)"), "a: b");
        assert_eq!(w("kept (os error x)"), "kept (os error x)");
        assert_eq!(w("no number"), "no number");
    }
}
