//! A large section's page, nodes first: one line per node (its pods, its
//! victims, what the scale-in leaves of it and what that is worth), its pod
//! cards folded behind the line, then the deletion orders and the cost
//! breakdown folded behind its count. A page of 1,000 pods then opens on
//! 25 lines, not 1,000 cards; a small section keeps the picture.

use std::collections::{BTreeMap, HashMap};

use maud::{html, Markup, PreEscaped};

use super::{node_card, strip, table, Page, PodRow, Section, NL};

/// From this many pods in a section the page puts its nodes first.
pub(super) const FROM: usize = 100;

/// Above this many names, a list is folded behind its count.
pub(super) const FOLD_NAMES: usize = 10;

/// One node of the section: its pods (view indices) and where they stand.
struct NodeLine<'v> {
    /// Node name (empty: pods not scheduled).
    node: &'v str,
    pods: Vec<usize>,
    victims: usize,
    /// The earliest place of its pods in their ReplicaSet's order.
    first: Option<usize>,
}

/// The section's nodes, the one whose pods go first on top.
fn node_lines<'v>(views: &[PodRow<'v>]) -> Vec<NodeLine<'v>> {
    let mut by_node: BTreeMap<&'v str, NodeLine<'v>> = BTreeMap::new();
    for (i, v) in views.iter().enumerate() {
        let Some(p) = v.plan else { continue };
        let line = by_node.entry(&p.node).or_insert_with(|| NodeLine {
            node: &p.node,
            pods: Vec::new(),
            victims: 0,
            first: None,
        });
        line.pods.push(i);
        line.victims += usize::from(v.victim);
        if let Some(pl) = v.place {
            line.first = Some(line.first.map_or(pl.pos, |f| f.min(pl.pos)));
        }
    }
    let mut lines: Vec<NodeLine> = by_node.into_values().collect();
    // nodes without a placed pod last; a name settles ties
    lines.sort_by_key(|l| (l.first.is_none(), l.first, l.node));
    lines
}

/// What the scale-in leaves of a node whose every pod in the plan goes:
/// freed and its price, kept by an annotation, or kept by other pods. Plain
/// text, and the CSS class to show it in.
fn emptied(s: &Section, node: &str) -> (String, &'static str) {
    let Some(w) = &s.plan.savings else {
        return ("all its pods go".into(), "");
    };
    let unit = w
        .currency
        .as_deref()
        .map(|c| format!(" {c}"))
        .unwrap_or_default();
    if let Some(f) = w.policy.freed_nodes.iter().find(|f| f.name == node) {
        let worth = f.hourly.map_or_else(
            || "no price".to_string(),
            |h| format!("{h}{unit}/h, {}{unit} a month", h.times(w.hours_per_month)),
        );
        return (format!("freed: {worth}"), "yes");
    }
    if let Some(b) = w.policy.not_removable.iter().find(|b| b.node == node) {
        return (format!("emptied but not freed: {b}"), "warn");
    }
    (
        "all its pods in the plan go; other pods keep the node".into(),
        "",
    )
}

/// One node's line, its pod cards folded behind it.
fn node_line(s: &Section, views: &[PodRow], l: &NodeLine) -> Markup {
    let info = s.nodes.get(l.node);
    let (name, place) = if l.node.is_empty() {
        ("(no node)", "not scheduled".to_string())
    } else {
        (
            l.node,
            format!(
                "{} · {}",
                info.and_then(|i| i.billing_class.as_deref())
                    .unwrap_or("no billing class"),
                info.and_then(|i| i.zone.as_deref()).unwrap_or("no zone")
            ),
        )
    };
    let after = s
        .scale_down_by
        .map(|_| match (l.victims, l.pods.len() - l.victims) {
            (0, _) => ("keeps all its pods".to_string(), ""),
            (_, 0) => emptied(s, l.node),
            (_, kept) => (format!("keeps {kept}"), ""),
        });
    html! {
        details.node data-node=(l.node) {
            summary {
                b.mono { (name) } " " span.meta { (place) } " · " (l.pods.len()) " pod(s)"
                @if let Some((after, class)) = after {
                    " · " b { (l.victims) " victim(s)" } " · "
                    @if class.is_empty() { (after) } @else { span class=(class) { (after) } }
                }
                @if s.plan.blocked_nodes.iter().any(|b| *b.node == *l.node) {
                    " · " span.warn { "cannot be removed" }
                }
            }
            (NL)
            (node_card(s, name, &l.pods, views))
        }
        (NL)
    }
}

/// The body of a large section, after its legend.
pub(super) fn body(out: &mut Page, s: &Section, views: &[PodRow], index: &HashMap<&str, usize>) {
    let lines = node_lines(views);
    let scale_down = s.scale_down_by.map(|n| {
        let hit = lines.iter().filter(|l| l.victims > 0).count();
        let emptied = lines
            .iter()
            .filter(|l| l.victims > 0 && l.victims == l.pods.len())
            .count();
        (n, hit, emptied)
    });
    out.push(html! {
        style {
            (PreEscaped("details.node{margin:3px 0}details.node>summary{cursor:pointer;padding:2px 0}\
             details.node>svg{margin:4px 0 8px 18px}details.fold>summary{cursor:pointer}"))
        }
        (NL)
        h3 { "Nodes, the one whose pods go first on top" } (NL)
        p.meta {
            (lines.len()) " node(s); open one for its pods"
            @if let Some((n, hit, emptied)) = scale_down {
                "; scale down by " (n) ": victims on " (hit) " node(s), every pod of the plan gone from "
                (emptied)
                @if s.plan.savings.is_none() {
                    " (with prices, plan --prices, each says whether it is freed and what that is worth)"
                }
            }
        }
        (NL)
    });
    for l in &lines {
        out.push(node_line(s, views, l));
    }
    if !s.plan.replica_sets.is_empty() {
        out.push(html! { h3 { "Deletion order" } (NL) });
        for (i, _) in s.plan.replica_sets.iter().enumerate() {
            out.push(strip(s, i, views, index));
        }
    }
    // a row per pod: the rows go in one at a time inside the fold
    out.push(html! {
        (PreEscaped("<details class=\"fold breakdown\">"))
        summary { b { "Cost breakdown" } ": " (views.len()) " pods, a row each" }
        (NL)
    });
    table(out, s, views, index);
    out.push_str("</details>\n");
}

/// `names` folded behind their count: `<details>` whose summary is
/// `summary`.
pub(super) fn folded_names(summary: &str, names: &[impl AsRef<str>]) -> Markup {
    html! {
        details.fold.victims {
            summary { (summary) }
            p.mono {
                @for (k, n) in names.iter().enumerate() {
                    @if k > 0 { ", " }
                    (n.as_ref())
                }
            }
        }
    }
}
