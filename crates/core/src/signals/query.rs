//! PromQL query templates of utilisation signals (pure: the HTTP client is
//! the shell's `crate::prometheus`).
//!
//! The query is a template: `$namespace` becomes the policy's namespace and
//! `$selector` a PromQL label-matcher list built from the target's
//! `matchLabels` (`app="web",tier="a"`), so a query such as
//! `avg by (pod) (rate(container_cpu_usage_seconds_total{namespace="$namespace",$selector}[5m]))`
//! serves every policy. `${name}` is accepted too and `$$` is a literal `$`;
//! any other placeholder is an error.

use std::collections::BTreeMap;

/// A query template that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryTemplateError {
    /// `$name` other than `$namespace` / `$selector`.
    #[error("query placeholder ${name} is unknown (known: $namespace, $selector; write $$ for a literal $)")]
    UnknownPlaceholder {
        /// The placeholder without `$`.
        name: String,
    },
    /// `${` without a closing `}`.
    #[error("query placeholder at byte {offset} is not closed: expected ${{name}}")]
    Unclosed {
        /// Byte offset of the `$`.
        offset: usize,
    },
}

/// Renders a query template: `$namespace` -> `namespace`, `$selector` ->
/// [`label_matchers`] of `match_labels`.
pub fn render_query(
    template: &str,
    namespace: &str,
    match_labels: &BTreeMap<String, String>,
) -> Result<String, QueryTemplateError> {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    let mut offset = 0;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or(QueryTemplateError::Unclosed {
                offset: offset + pos,
            })?;
            (&braced[..end], end + 2)
        } else if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            offset += pos + 2;
            rest = stripped;
            continue;
        } else {
            let len = after
                .char_indices()
                .find(|&(i, c)| {
                    !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
                })
                .map_or(after.len(), |(i, _)| i);
            (&after[..len], len)
        };
        match name {
            "namespace" => out.push_str(&escape_value(namespace)),
            "selector" => out.push_str(&label_matchers(match_labels)),
            // A lone `$` (regex anchor in `=~"a$"`) is not a placeholder.
            "" if used == 0 => out.push('$'),
            other => {
                return Err(QueryTemplateError::UnknownPlaceholder {
                    name: other.to_string(),
                })
            }
        }
        offset += pos + 1 + used;
        rest = &after[used..];
    }
    out.push_str(rest);
    Ok(out)
}

/// PromQL label matchers for `match_labels`: `app="web",tier="a"`. Keys that
/// are not valid Prometheus label names (`app.kubernetes.io/name`) are
/// sanitised as Prometheus's Kubernetes discovery does
/// (`app_kubernetes_io_name`); values are escaped.
pub fn label_matchers(match_labels: &BTreeMap<String, String>) -> String {
    match_labels
        .iter()
        .map(|(k, v)| format!("{}=\"{}\"", sanitize_label_name(k), escape_value(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A Kubernetes label key as a Prometheus label name.
pub fn sanitize_label_name(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Escapes a string for a double-quoted PromQL string literal.
fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn renders_placeholders() {
        let l = labels(&[("tier", "a"), ("app", "web")]);
        assert_eq!(
            render_query(
                r#"avg by (pod) (cpu{namespace="$namespace",$selector})"#,
                "shop",
                &l
            )
            .unwrap(),
            r#"avg by (pod) (cpu{namespace="shop",app="web",tier="a"})"#
        );
        assert_eq!(
            render_query("x{namespace=\"${namespace}\"} * $$5", "ns", &l).unwrap(),
            "x{namespace=\"ns\"} * $5"
        );
        // A `$` that starts no name (regex anchor) stays.
        assert_eq!(
            render_query(r#"x{pod=~"web-.*$"}"#, "ns", &l).unwrap(),
            r#"x{pod=~"web-.*$"}"#
        );
        assert_eq!(render_query("up", "ns", &l).unwrap(), "up");
    }

    #[test]
    fn rejects_unknown_placeholders() {
        let l = BTreeMap::new();
        let err = render_query("x{ns=\"$namespce\"}", "ns", &l).unwrap_err();
        assert_eq!(
            err,
            QueryTemplateError::UnknownPlaceholder {
                name: "namespce".into()
            }
        );
        assert!(err.to_string().contains("$namespce"));
        assert_eq!(
            render_query("x{${pod}}", "ns", &l).unwrap_err(),
            QueryTemplateError::UnknownPlaceholder { name: "pod".into() }
        );
        assert_eq!(
            render_query("ab ${namespace", "ns", &l).unwrap_err(),
            QueryTemplateError::Unclosed { offset: 3 }
        );
    }

    #[test]
    fn matchers_escape_and_sanitise() {
        let l = labels(&[("app.kubernetes.io/name", "we\"b\\x"), ("9lives", "a\nb")]);
        assert_eq!(
            label_matchers(&l),
            r#"_9lives="a\nb",app_kubernetes_io_name="we\"b\\x""#
        );
        assert_eq!(label_matchers(&BTreeMap::new()), "");
        assert_eq!(
            render_query("$namespace", "a\"b", &BTreeMap::new()).unwrap(),
            "a\\\"b"
        );
    }
}
