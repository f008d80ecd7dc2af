//! The plan page: one self-contained HTML file (inline CSS and SVG; no
//! script, nothing fetched, and a Content-Security-Policy that says so). Per
//! policy: the nodes grouped by billing class and zone with each pod as a box
//! on its node, coloured by its place in its ReplicaSet's deletion order; the
//! order itself as a strip with the scale-down cut; the verdicts; and a table
//! with each pod's cost breakdown (also on hover, as SVG `<title>`).
//!
//! The markup is written with `maud`'s `html!`, which escapes every value
//! it is given; only constant markup goes in as [`PreEscaped`]. The page is
//! made in pieces (the head, each node card, each table row) that are
//! handed to a `Page`, which passes them on 1 MiB at a time, so a 100k-pod
//! page is never held whole: an element that holds many pods (a zone, the
//! table) is opened and closed by constant markup around its pieces.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use maud::{html, Markup, PreEscaped, DOCTYPE};

mod nodes_first;

use super::{Report, Section};
use crate::plan::prices::Money;
use crate::plan::savings::{freed_list, signed};
use crate::plan::{CostAction, CostOwner, Mismatch, MismatchReason, PodPlan, Verdict};
use crate::policy::Writes;

/// Width of a pod box on a node.
const POD_W: u32 = 284;
/// Height of a pod box on a node.
const POD_H: u32 = 44;
/// Space between pod boxes.
const GAP: u32 = 6;
/// Node card header height.
const NODE_HEAD: u32 = 26;
/// Pod box in the order strip.
const STRIP_W: u32 = 124;
/// Height of a pod box in the order strip.
const STRIP_H: u32 = 40;
/// Pods per row of the order strip.
const STRIP_PER_ROW: usize = 10;
/// Pods shown in the order strip.
const STRIP_MAX: usize = 50;

/// Colour ramp from first to go (red) to last to go (blue): ColorBrewer
/// RdYlBu, readable for the common colour-vision deficiencies.
const RAMP: [(u8, u8, u8); 5] = [
    (215, 48, 39),
    (252, 141, 89),
    (254, 224, 144),
    (145, 191, 219),
    (69, 117, 180),
];
/// Fill of a pod that has no place in an order.
const NO_PLACE: (u8, u8, u8) = (200, 200, 200);

const CSS: &str = r#"
:root{color-scheme:light}
body{font:14px/1.45 system-ui,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:20px 28px;color:#1a1a1a;background:#fff}
h1{font-size:22px;margin:0 0 2px}
h2{font-size:19px;margin:26px 0 4px;padding-top:10px;border-top:3px solid #333}
h3{font-size:15px;margin:16px 0 6px}
.meta,.k{color:#555}
.k{font-weight:normal;font-size:12px;text-transform:uppercase;letter-spacing:.04em;margin-right:6px}
code,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
.legend{display:flex;flex-wrap:wrap;gap:6px 22px;align-items:center;margin:10px 0 12px;padding:8px 12px;border:1px solid #bbb;border-radius:6px;background:#fafafa}
.legend span{display:inline-flex;align-items:center;gap:6px}
.verdicts{margin:6px 0 10px;padding:0;list-style:none}
.verdicts li{margin:3px 0}
.yes{color:#1a7f37;font-weight:bold}.no{color:#b42318;font-weight:bold}.amb{color:#9a6700;font-weight:bold}
.warn{color:#9a6700}
.cols{display:flex;flex-wrap:wrap;gap:20px;align-items:flex-start}
.map{flex:0 1 auto;min-width:300px}
.classes{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.side{flex:1 1 520px;overflow-x:auto}
.class{border:1px solid #999;border-radius:8px;padding:6px 10px 10px}
.class>h4{margin:2px 0 6px;font-size:16px}
.zones{display:flex;flex-wrap:wrap;gap:10px}
.zone{background:#f2f2f2;border-radius:6px;padding:4px 8px 8px}
.zone>h5{margin:2px 0 4px;font-size:13px}
.nodes{display:flex;flex-wrap:wrap;gap:8px}
svg{display:block}
svg.order{max-width:100%;height:auto}
svg text{font-family:"DejaVu Sans",Arial,sans-serif}
svg .mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace}
table{border-collapse:collapse;font-size:13px}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#eee;position:sticky;top:0}
td.notes{white-space:normal;min-width:160px}
tr.rs td{background:#e4e4e4;font-weight:bold}
tr.victim td{font-weight:bold}
.sw{display:inline-block;min-width:26px;text-align:center;border-radius:3px;padding:0 3px;border:1px solid #555}
.sw.victim{border:3px solid #000}
.tag{display:inline-block;border-radius:3px;padding:0 4px;margin:0 4px 1px 0;font-size:11.5px;font-weight:bold}
.tag.victim{background:#000;color:#fff}
.tag.order{background:#b42318;color:#fff}
.tag.foreign{background:#fff;color:#000;border:1px solid #000}
.tag.missing{background:#fff;color:#000;border:1px dashed #000}
"#;

/// A line break between elements, so the page reads in a source view.
const NL: PreEscaped<&str> = PreEscaped("\n");

/// Where a page is written: a string, handed on to `sink` whenever it
/// passes [`SPILL`] bytes when there is one, so a 100k-pod page (~120 MB)
/// is never held whole.
struct Page<'w> {
    buf: String,
    sink: Option<&'w mut dyn std::io::Write>,
    error: Option<std::io::Error>,
}

/// How much of the page is kept before it is handed on.
const SPILL: usize = 1 << 20;

impl Page<'_> {
    /// A piece of the page.
    fn push(&mut self, piece: Markup) {
        self.push_text(&piece.0);
    }

    /// Constant markup: what opens or closes an element around pieces.
    fn push_str(&mut self, s: &'static str) {
        self.push_text(s);
    }

    fn push_text(&mut self, s: &str) {
        self.buf.push_str(s);
        if self.buf.len() >= SPILL {
            self.spill();
        }
    }

    fn spill(&mut self) {
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        // after a failed write the rest is dropped; the error is reported
        if self.error.is_none() {
            if let Err(e) = sink.write_all(self.buf.as_bytes()) {
                self.error = Some(e);
            }
        }
        self.buf.clear();
    }
}

/// The page for every section of `report`.
pub fn render(report: &Report) -> String {
    let mut page = Page {
        buf: String::with_capacity(16 * 1024),
        sink: None,
        error: None,
    };
    write_page(report, &mut page);
    page.buf
}

/// [`render`] written to `sink` as it is made.
pub fn render_to(report: &Report, sink: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut page = Page {
        buf: String::with_capacity(SPILL + (64 << 10)),
        sink: Some(sink),
        error: None,
    };
    write_page(report, &mut page);
    page.spill();
    match page.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn write_page(report: &Report, out: &mut Page) {
    let title = match report.sections.as_slice() {
        [one] => format!("Deletion-cost plan: {}", one.policy),
        _ => "Deletion-cost plan".to_string(),
    };
    out.push(html! {
        (DOCTYPE) (NL)
        (PreEscaped("<html lang=\"en\">\n"))
        head {
            (NL)
            meta charset="utf-8"; (NL)
            meta http-equiv="Content-Security-Policy"
                content="default-src 'none'; style-src 'unsafe-inline'"; (NL)
            meta name="viewport" content="width=device-width, initial-scale=1"; (NL)
            title { (title) } (NL)
            style { (PreEscaped(CSS)) } (NL)
        }
        (NL)
        (PreEscaped("<body>\n"))
        // shared SVG definitions: the foreign-cost hatch
        svg width="0" height="0" style="position:absolute" aria-hidden="true" {
            defs {
                pattern id="dc-hatch" width="7" height="7" patternUnits="userSpaceOnUse"
                    patternTransform="rotate(45)" {
                    rect width="7" height="7" fill="#fff" {}
                    rect width="3.5" height="7" fill="#000" {}
                }
            }
        }
        (NL)
        header {
            h1 { (title) }
            p.meta {
                (report.source)
                @if let Some(now) = &report.now { " · comparator time " (now) }
            }
        }
        (NL)
        @if report.sections.is_empty() { p { "No policy." } (NL) }
    });
    for s in &report.sections {
        section(out, s);
    }
    out.push_str("</body>\n</html>\n");
}

/// Where a pod stands in its ReplicaSet's deletion order.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// Index into the plan's ReplicaSets.
    rs: usize,
    /// 0 = deleted first.
    pos: usize,
    /// Pods in that order.
    of: usize,
}

/// Everything the page says about one pod.
struct PodRow<'p> {
    name: &'p str,
    /// `None`: in a ReplicaSet's order but not managed by the policy.
    plan: Option<&'p PodPlan>,
    place: Option<Place>,
    live_cost: Option<i32>,
    victim: bool,
    ambiguous: bool,
    out_of_order: Vec<&'p Mismatch>,
}

impl<'p> PodRow<'p> {
    fn new(name: &'p str, plan: Option<&'p PodPlan>) -> Self {
        Self {
            name,
            plan,
            place: None,
            live_cost: None,
            victim: false,
            ambiguous: false,
            out_of_order: Vec::new(),
        }
    }

    /// A cost this policy did not write and leaves alone (Karpenter's too).
    fn foreign(&self) -> bool {
        self.plan
            .is_some_and(|p| matches!(p.owner, CostOwner::Foreign(_) | CostOwner::Karpenter))
    }

    /// A cost Karpenter manages.
    fn karpenter(&self) -> bool {
        self.plan.is_some_and(|p| p.owner == CostOwner::Karpenter)
    }

    fn missing(&self) -> bool {
        self.plan.is_some_and(|p| {
            matches!(p.action, CostAction::KeepLastValue(_)) || p.signals.iter().any(|s| s.missing)
        })
    }

    fn colour(&self) -> (u8, u8, u8) {
        match self.place {
            Some(p) if p.of > 1 => ramp(p.pos as f64 / (p.of - 1) as f64),
            Some(_) => ramp(0.0),
            None => NO_PLACE,
        }
    }

    /// `#3`, or `–` without a place.
    fn rank(&self) -> String {
        self.place
            .map(|p| format!("#{}", p.pos + 1))
            .unwrap_or_else(|| "–".into())
    }
}

/// The pods of a section, managed ones first (in the plan's order), then
/// the ones only the orders hold; and an index by name.
fn pod_rows<'p>(s: &Section<'p>) -> (Vec<PodRow<'p>>, HashMap<&'p str, usize>) {
    let plan = s.plan;
    let mut views: Vec<PodRow<'p>> = plan
        .pods
        .iter()
        .map(|p| PodRow::new(&p.name, Some(p)))
        .collect();
    let mut index: HashMap<&'p str, usize> =
        views.iter().enumerate().map(|(i, v)| (v.name, i)).collect();
    for (rs_i, rs) in plan.replica_sets.iter().enumerate() {
        let of = rs.predicted.len();
        for (pos, name) in rs.predicted.iter().enumerate() {
            let i = *index.entry(&**name).or_insert_with(|| {
                views.push(PodRow::new(name, None));
                views.len() - 1
            });
            let v = &mut views[i];
            v.place = Some(Place { rs: rs_i, pos, of });
            v.live_cost = rs.live_costs.get(pos).copied();
        }
        for name in &rs.victims {
            if let Some(&i) = index.get(&**name) {
                views[i].victim = true;
            }
        }
        for name in &rs.ambiguous {
            if let Some(&i) = index.get(&**name) {
                views[i].ambiguous = true;
            }
        }
        for m in &rs.mismatches {
            if let Some(&i) = index.get(m.pod.as_str()) {
                views[i].out_of_order.push(m);
            }
        }
    }
    (views, index)
}

fn ramp(t: f64) -> (u8, u8, u8) {
    let t = t.clamp(0.0, 1.0) * (RAMP.len() - 1) as f64;
    let i = (t.floor() as usize).min(RAMP.len() - 2);
    let f = t - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (RAMP[i], RAMP[i + 1]);
    (mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// Black or white, whichever reads better on `bg` (WCAG contrast).
fn text_on(bg: (u8, u8, u8)) -> &'static str {
    let lin = |c: u8| {
        let c = f64::from(c) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    let l = 0.2126 * lin(bg.0) + 0.7152 * lin(bg.1) + 0.0722 * lin(bg.2);
    if (l + 0.05) / 0.05 >= 1.05 / (l + 0.05) {
        "#000"
    } else {
        "#fff"
    }
}

/// At most `max` characters: the end of a long name (where pods differ),
/// behind an ellipsis.
fn tail(s: &str, max: usize) -> Cow<'_, str> {
    let n = s.chars().count();
    if n <= max {
        return Cow::Borrowed(s);
    }
    let skip = n - max.saturating_sub(1);
    Cow::Owned(format!("…{}", s.chars().skip(skip).collect::<String>()))
}

/// Short form of a mismatch reason, for badges.
fn short_reason(r: MismatchReason) -> &'static str {
    match r {
        MismatchReason::Unassigned => "unscheduled",
        MismatchReason::NotRunning => "not Running",
        MismatchReason::NotReady => "not Ready",
        MismatchReason::PendingPatch => "patch pending",
        MismatchReason::OnScaleIn => "OnScaleIn",
        MismatchReason::ForeignCost => "foreign cost",
        MismatchReason::KarpenterCost => "Karpenter's cost",
        MismatchReason::SignalMissing => "signal missing",
        MismatchReason::NotManaged => "not managed",
        MismatchReason::FeatureGateOff => "gate off",
        MismatchReason::Ambiguous => "ambiguous",
    }
}

fn cost_now(p: &PodPlan) -> String {
    match (&p.current_raw, &p.owner) {
        (None, CostOwner::Karpenter) => "- (Karpenter's)".into(),
        (None, _) => "-".into(),
        (Some(raw), CostOwner::Karpenter) => format!("{raw} (Karpenter's)"),
        (Some(raw), CostOwner::Foreign(Some(w))) => format!("{raw} (foreign: {w})"),
        (Some(raw), CostOwner::Foreign(None)) => format!("{raw} (foreign)"),
        (Some(raw), _) => raw.to_string(),
    }
}

/// The hover text of a pod: plain text (the markup escapes it).
fn hover(s: &Section, v: &PodRow) -> String {
    let mut t = String::from(v.name);
    if let Some(p) = v.plan {
        let _ = write!(t, "\nnode {}", node_label(s, &p.node));
        if let Some(b) = s.plan.blocked_nodes.iter().find(|b| *b.node == *p.node) {
            let _ = write!(t, "\n{b}");
        }
    }
    if let Some(pl) = v.place {
        let rs = &s.plan.replica_sets[pl.rs];
        let _ = write!(
            t,
            "\n#{} of {} to go in ReplicaSet {}",
            pl.pos + 1,
            pl.of,
            rs.name
        );
    }
    if v.victim {
        let _ = write!(
            t,
            "\nVICTIM of scale down by {}",
            s.scale_down_by.unwrap_or(0)
        );
    }
    match v.plan {
        Some(p) => {
            for sig in &p.signals {
                let value = sig.value.map_or_else(|| "-".to_string(), |x| x.to_string());
                let missing = if sig.missing { " (missing)" } else { "" };
                let _ = write!(t, "\n{}: {} → {value}{missing}", sig.signal, sig.detail);
            }
            let _ = write!(
                t,
                "\ncost now {} · wanted {} · {}",
                cost_now(p),
                p.wanted_text(),
                p.action
            );
            if let Some(m) = p.marked {
                let _ = write!(t, "\n{m}");
            }
        }
        None => t.push_str("\nnot selected by the policy"),
    }
    if let Some(c) = v.live_cost {
        let _ = write!(t, "\ncost the controller reads: {c}");
    }
    for m in &v.out_of_order {
        let _ = write!(
            t,
            "\nout of order: goes before {}: {}",
            m.before,
            m.reason.describe()
        );
    }
    if v.ambiguous {
        t.push_str("\nambiguous: upstream's order among these pods depends on informer order");
    }
    t
}

/// `node (class, zone)`.
fn node_label(s: &Section, node: &str) -> String {
    if node.is_empty() {
        return "(not scheduled)".into();
    }
    let info = s.nodes.get(node);
    format!(
        "{node} ({}, {})",
        info.and_then(|i| i.billing_class.as_deref())
            .unwrap_or("no billing class"),
        info.and_then(|i| i.zone.as_deref()).unwrap_or("no zone")
    )
}

fn section(out: &mut Page, s: &Section) {
    let (views, index) = pod_rows(s);
    let plan = s.plan;
    let writes = match (plan.writes, s.scale_down_by) {
        (Writes::Continuous, _) => String::new(),
        (Writes::OnScaleIn, None) => " (writes: OnScaleIn: nothing in the background)".into(),
        (Writes::OnScaleIn, Some(n)) => {
            format!(" (writes: OnScaleIn: what a scale-in by {n} writes)")
        }
    };
    let order = if s.after_patches {
        "as if the planned patches had landed"
    } else {
        "over the pods as they are now"
    };
    out.push(html! {
        (PreEscaped("<section class=\"policy\" id=\"policy-"))
        (s.policy.replace('/', "-"))
        (PreEscaped("\">\n"))
        h2 { "Policy " (s.policy) } (NL)
        p.meta {
            "signals: " (s.signals.join(", ")) " · combine: " (s.combine)
            " · " (plan.pods.len()) " pods selected · " (plan.patches.len()) " patches" (writes)
            @if !plan.inactive.is_empty() { " · " (plan.inactive.len()) " inactive left out" }
            " · order " (order)
        }
        (NL)
        @for w in &plan.warnings { p.warn { "warning: " (w) } (NL) }
        (blocked_nodes(s))
    });
    // a large section folds its long lists and puts its nodes first
    let large = views.len() >= nodes_first::FROM;
    verdicts(out, s, large);
    out.push(worth(s, large));
    out.push(priced_scale_ins(s));
    out.push(legend(s));
    if large {
        nodes_first::body(out, s, &views, &index);
        out.push_str("</section>\n");
        return;
    }
    // the picture, then the table beside it (below it on a narrow window)
    out.push(html! {
        (PreEscaped("<div class=\"cols\">\n<div class=\"map\">\n"))
        h3 { "Nodes by billing class and zone" } (NL)
    });
    node_map(out, s, &views);
    if !plan.replica_sets.is_empty() {
        out.push(html! { h3 { "Deletion order" } (NL) });
        for (i, _) in plan.replica_sets.iter().enumerate() {
            out.push(strip(s, i, &views, &index));
        }
    }
    out.push(html! {
        (PreEscaped("</div>\n<div class=\"side\">\n"))
        h3 { "Cost breakdown" } (NL)
    });
    table(out, s, &views, &index);
    out.push_str("</div>\n</div>\n</section>\n");
}

/// The nodes of the plan's pods that no autoscaler may remove, and why.
fn blocked_nodes(s: &Section) -> Markup {
    if s.plan.blocked_nodes.is_empty() {
        return html! {};
    }
    let consolidation = if s.signals.contains(&"nodeConsolidation") {
        "; nodeConsolidation drains them last"
    } else {
        ""
    };
    html! {
        p.meta {
            "Nodes no autoscaler may remove (draining them frees nothing" (consolidation) "):"
        }
        (NL)
        ul.verdicts.blocked {
            (NL)
            @for n in &s.plan.blocked_nodes { li.warn { (maud::display(n)) } (NL) }
        }
        (NL)
    }
}

/// Each ReplicaSet's verdict, victims and mismatches; with `fold`, a long
/// list of victims or mismatches folded behind its count. A ReplicaSet's
/// mismatches may be thousands: they go in one at a time.
fn verdicts(out: &mut Page, s: &Section, fold: bool) {
    out.push_str("<ul class=\"verdicts\">\n");
    for rs in &s.plan.replica_sets {
        out.push(html! {
            li {
                "ReplicaSet " b { (rs.name) }
                @if let Some(d) = &rs.deployment { " (Deployment " (d) ")" }
                ": "
                @match rs.verdict {
                    Verdict::AsIntended => span.yes { "order as intended: yes" },
                    Verdict::NotAsIntended => span.no { "order as intended: NO" },
                    Verdict::Ambiguous => {
                        span.amb { "order as intended: ambiguous" }
                        " among " (rs.ambiguous.join(", "))
                    }
                }
                @if let Some(n) = s.scale_down_by {
                    @if fold && rs.victims.len() > nodes_first::FOLD_NAMES {
                        "; scale down by " (n) " deletes " (rs.victims.len()) " pods"
                        @if rs.tie_at_cut { " (tie at the cut)" }
                        (nodes_first::folded_names(
                            &format!("the {} pods it deletes, in order", rs.victims.len()),
                            &rs.victims,
                        ))
                    } @else {
                        "; scale down by " (n) " deletes "
                        @if rs.victims.is_empty() { "nothing" }
                        @for (k, v) in rs.victims.iter().enumerate() {
                            @if k > 0 { ", " }
                            b.mono { (v) }
                        }
                        @if rs.tie_at_cut {
                            " (tie at the cut: upstream picks among equals by informer order)"
                        }
                    }
                }
            }
            (NL)
        });
        let folded = fold && rs.mismatches.len() > nodes_first::FOLD_NAMES;
        if folded {
            out.push(html! {
                (PreEscaped("<li><details class=\"fold\">"))
                summary { (rs.mismatches.len()) " pods deleted before a cheaper one" }
                (PreEscaped("<ul class=\"verdicts\">"))
            });
        }
        for m in &rs.mismatches {
            out.push(mismatch(m));
        }
        if folded {
            out.push_str("</ul></details></li>\n");
        }
    }
    out.push_str("</ul>\n");
}

/// One pod deleted before a cheaper one, as a verdict's list item.
fn mismatch(m: &Mismatch) -> Markup {
    html! {
        li {
            "\u{a0}\u{a0}"
            span.tag.order { "! " (short_reason(m.reason)) }
            span.mono { (m.pod) } " goes before " span.mono { (m.before) } ": "
            (m.reason.describe())
        }
        (NL)
    }
}

/// What the scale-down is worth (`plan --prices`): the policy's choice
/// against upstream's, the nodes each empties and their price; with `fold`,
/// a long list of victims folded behind its count.
fn worth(s: &Section, fold: bool) -> Markup {
    let (Some(w), Some(n)) = (&s.plan.savings, s.scale_down_by) else {
        return html! {};
    };
    let d = &w.difference;
    let class = match d.hourly.cmp(&Money::ZERO) {
        std::cmp::Ordering::Greater => "yes",
        std::cmp::Ordering::Less => "no",
        std::cmp::Ordering::Equal => "",
    };
    html! {
        h3 { "What it is worth: scale down by " (n) } (NL)
        p.meta {
            "prices: " (w.prices_file) " " (w.currency.as_deref().unwrap_or_default())
            "; a month is " (w.hours_per_month) " h; a node counts as freed when no active pod \
             but DaemonSet pods stays on it and no annotation keeps it, and is saved only if \
             the autoscaler removes it"
        }
        (NL)
        table.worth {
            tr { th { "choice" } th { "deletes" } th { "nodes freed" } th { "per hour" } th { "per month" } }
            (NL)
            @for (label, c) in [("policy", &w.policy), ("upstream without the policy", &w.upstream)] {
                tr {
                    td { (label) }
                    td.mono.notes {
                        @if c.victims.is_empty() {
                            "nothing"
                        } @else if fold && c.victims.len() > nodes_first::FOLD_NAMES {
                            (nodes_first::folded_names(&format!("{} pods", c.victims.len()), &c.victims))
                        } @else {
                            (c.victims.join(", "))
                        }
                    }
                    td.mono {
                        @if fold && c.freed_nodes.len() > nodes_first::FOLD_NAMES {
                            (c.freed_nodes.len()) " nodes"
                        } @else {
                            (freed_list(c))
                        }
                    }
                    td { (maud::display(c.hourly)) }
                    td { (maud::display(c.monthly)) }
                }
                (NL)
            }
            tr.rs {
                td { "policy − upstream" } td {} td { (format!("{:+}", d.nodes)) }
                td class=(class) { (signed(d.hourly)) }
                td class=(class) { (signed(d.monthly)) }
            }
            (NL)
        }
        (NL)
        @for (label, c) in [("policy", &w.policy), ("upstream", &w.upstream)] {
            @for n in &c.not_removable {
                p.warn { (label) ": emptied but not freed: " (maud::display(n)) } (NL)
            }
            @if !c.unpriced_nodes.is_empty() {
                p.warn {
                    (label) ": no price for " (c.unpriced_nodes.join(", ")) " (left out of the sums)"
                }
                (NL)
            }
        }
    }
}

/// The scale-ins priced as they happened (the operator's page): what the
/// policy's victims freed against the default order's, and what became of
/// the nodes freed.
fn priced_scale_ins(s: &Section) -> Markup {
    let Some(p) = s.priced_scale_ins else {
        return html! {};
    };
    let unit = p
        .currency
        .as_deref()
        .map_or_else(|| "/h".to_string(), |c| format!(" {c}/h"));
    let nodes = |names: &[String]| {
        html! { @if !names.is_empty() { " (" (names.join(", ")) ")" } }
    };
    html! {
        h3 { "Scale-ins priced as they happened" } (NL)
        p.meta {
            (p.priced) " scale-in(s) priced (the scale-in webhook and the pre-scale-down hook); \
             amounts are the hourly prices of the nodes each left free, summed; a freed node \
             counts as removed when its Node object went away within the removal window"
        }
        (NL)
        table.worth {
            tr { th { "choice" } th { "pods deleted" } th { "nodes freed" } th { "per hour" } }
            (NL)
            @for (label, f) in [("with the policy", &p.with_policy), ("by the default order", &p.by_default)] {
                tr {
                    td { (label) }
                    td { (f.victims) }
                    td { (f.nodes) @if f.unpriced_nodes > 0 { " (" (f.unpriced_nodes) " unpriced)" } }
                    td { (f.hourly) (unit) }
                }
                (NL)
            }
        }
        (NL)
        p {
            "Freed with the policy: " b { (p.removed.nodes) " removed" }
            " (" (p.removed.hourly) (unit) "), " (p.not_removed.nodes) " not removed ("
            (p.not_removed.hourly) (unit) "), " (p.awaiting_removal.len()) " still watched"
        }
        (NL)
        @if let Some(last) = &p.last {
            p.meta {
                "last: " (last.workload) " at " (last.at) ", " (last.from) " → " (last.to)
                " by the " (last.by) ": with the policy " (last.with_policy.nodes) " node(s)"
                (nodes(&last.with_policy.freed_nodes)) " " (last.with_policy.hourly) (unit)
                ", by the default order " (last.by_default.nodes) " node(s)"
                (nodes(&last.by_default.freed_nodes)) " " (last.by_default.hourly) (unit)
            }
            (NL)
        }
    }
}

fn legend(s: &Section) -> Markup {
    let victim = match s.scale_down_by {
        Some(n) => format!("victim of scale down by {n}"),
        None => "victim (none: no scale-down given)".to_string(),
    };
    html! {
        div.legend {
            (NL)
            // the ramp, first to go on the left
            span {
                b { "first to go" }
                svg width="220" height="18" role="img" aria-label="colour ramp" {
                    @for k in 0..22u32 {
                        rect x=(k * 10) y="1" width="10" height="16"
                            fill=(hex(ramp(f64::from(k) / 21.0))) {}
                    }
                    rect x="0.5" y="0.5" width="219" height="17" fill="none" stroke="#555" {}
                }
                b { "last to go" } " "
                span.meta { "(place in its ReplicaSet's deletion order)" }
            }
            (NL)
            span {
                svg width="86" height="22" {
                    rect x="2" y="2" width="82" height="18" rx="3" fill=(hex(RAMP[0]))
                        stroke="#000" stroke-width="3.5" {}
                    rect x="22" y="5" width="44" height="12" rx="2" fill="#000" {}
                    text x="44" y="15" font-size="9.5" font-weight="bold" fill="#fff"
                        text-anchor="middle" { "VICTIM" }
                }
                (victim)
            }
            (NL)
            span { span.tag.order { "! reason" } "deleted before a cheaper pod, and why" }
            (NL)
            span {
                svg width="40" height="22" {
                    rect x="1" y="1" width="38" height="20" rx="3" fill="#ccc" stroke="#555" {}
                    rect x="25" y="1.5" width="13.5" height="19" fill="url(#dc-hatch)" {}
                }
                "foreign or Karpenter's cost (not this policy's; left alone)"
            }
            (NL)
            span {
                svg width="40" height="22" {
                    rect x="1.5" y="1.5" width="37" height="19" rx="3" fill="#ccc" stroke="#000"
                        stroke-width="2" stroke-dasharray="5 3" {}
                    text x="20" y="16" font-size="13" font-weight="bold" text-anchor="middle" { "?" }
                }
                "signal missing"
            }
            (NL)
            span {
                svg width="40" height="22" {
                    rect x="1" y="1" width="38" height="20" rx="3" fill=(hex(NO_PLACE)) stroke="#555" {}
                }
                "not in an order"
            }
            (NL)
            span.meta { "hover a pod for its cost breakdown" }
            (NL)
        }
        (NL)
    }
}

/// Billing class -> zone -> node -> pods (view indices), and the unscheduled pods.
type Groups<'v> =
    BTreeMap<Option<&'v str>, BTreeMap<Option<&'v str>, BTreeMap<&'v str, Vec<usize>>>>;

fn node_map(out: &mut Page, s: &Section, views: &[PodRow]) {
    let mut groups: Groups = BTreeMap::new();
    let mut unscheduled = Vec::new();
    for (i, v) in views.iter().enumerate() {
        let Some(p) = v.plan else { continue };
        if p.node.is_empty() {
            unscheduled.push(i);
            continue;
        }
        let info = s.nodes.get(&*p.node);
        groups
            .entry(info.and_then(|n| n.billing_class.as_deref()))
            .or_default()
            .entry(info.and_then(|n| n.zone.as_deref()))
            .or_default()
            .entry(&p.node)
            .or_default()
            .push(i);
    }
    if groups.is_empty() && unscheduled.is_empty() {
        out.push(html! { p { "No pods selected." } (NL) });
        return;
    }
    out.push_str("<div class=\"classes\">\n");
    // classes in the order the policy means to empty them: by the cheapest
    // intended cost of their pods, then by their first pod to go
    let mut classes: Vec<_> = groups
        .iter()
        .map(|(class, zones)| {
            let pods = || zones.values().flat_map(|n| n.values()).flatten();
            let cheapest = pods()
                .filter_map(|&i| views[i].plan.map(PodPlan::intended))
                .min()
                .unwrap_or(i32::MAX);
            let first = pods()
                .filter_map(|&i| views[i].place.map(|p| p.pos))
                .min()
                .unwrap_or(usize::MAX);
            ((cheapest, first, *class), zones)
        })
        .collect();
    classes.sort_by(|a, b| a.0.cmp(&b.0));
    let classes = classes
        .into_iter()
        .map(|((_, _, class), zones)| (class, zones));
    for (class, zones) in classes {
        let nodes: usize = zones.values().map(BTreeMap::len).sum();
        let pods: usize = zones.values().flat_map(|n| n.values()).map(Vec::len).sum();
        // a class and a zone may hold thousands of pods: their cards go
        // in one at a time between the constant markup that opens and
        // closes them
        out.push(html! {
            (PreEscaped("<div class=\"class\">"))
            h4 {
                span.k { "billing class" } (class.unwrap_or("(no billing class)")) " "
                span.meta style="font-size:12px;font-weight:normal" {
                    (nodes) " node(s), " (pods) " pod(s)"
                }
            }
            (PreEscaped("\n<div class=\"zones\">\n"))
        });
        for (zone, nodes) in zones {
            out.push(html! {
                (PreEscaped("<div class=\"zone\">"))
                h5 { span.k { "zone" } (zone.unwrap_or("(no zone)")) }
                (PreEscaped("<div class=\"nodes\">\n"))
            });
            for (node, pods) in nodes {
                out.push(node_card(s, node, pods, views));
            }
            out.push_str("</div></div>\n");
        }
        out.push_str("</div></div>\n");
    }
    if !unscheduled.is_empty() {
        out.push(html! {
            div.class {
                h4 { "not scheduled" }
                div.nodes { (NL) (node_card(s, "(no node)", &unscheduled, views)) }
            }
            (NL)
        });
    }
    out.push_str("</div>\n");
}

/// One node and its pods, first to go on top.
fn node_card(s: &Section, node: &str, pods: &[usize], views: &[PodRow]) -> Markup {
    let mut pods = pods.to_vec();
    pods.sort_by_key(|&i| (views[i].place.map_or(usize::MAX, |p| p.pos), views[i].name));
    let w = POD_W + 12;
    let h = NODE_HEAD + pods.len() as u32 * (POD_H + GAP) + 4;
    // a node no autoscaler may remove says so, and why on hover
    let blocked = s.plan.blocked_nodes.iter().find(|b| b.node == node);
    let (class, kept, ink) = match blocked {
        Some(_) => ("node blocked", " · cannot be removed", "#b42318"),
        None => ("node", "", "#555"),
    };
    html! {
        svg class=(class) data-node=(node) width=(w) height=(h)
            viewBox=(format_args!("0 0 {w} {h}")) role="img" aria-label=(format_args!("node {node}")) {
            @if let Some(b) = blocked { title { (maud::display(b)) } }
            rect x="0.5" y="0.5" width=(w - 1) height=(h - 1) rx="6" fill="#fff" stroke="#666" {}
            text x="8" y="18" font-size="13" font-weight="bold" {
                (tail(node, if blocked.is_some() { 16 } else { 30 }))
            }
            text x=(w - 8) y="18" font-size="11" fill=(ink) text-anchor="end" {
                (pods.len()) " pod(s)" (kept)
            }
            @for (k, &i) in pods.iter().enumerate() {
                (pod_box(s, &views[i], 6, NODE_HEAD + k as u32 * (POD_H + GAP)))
            }
        }
        (NL)
    }
}

/// How a box is outlined: a victim bold, a pod missing a signal dashed.
struct Outline {
    colour: &'static str,
    width: &'static str,
    dash: Option<&'static str>,
}

/// One pod on its node: rank and name, cost, and its marks.
fn pod_box(s: &Section, v: &PodRow, x: u32, y: u32) -> Markup {
    let fill = v.colour();
    let ink = text_on(fill);
    let outline = if v.victim {
        Outline {
            colour: "#000",
            width: "3.5",
            dash: None,
        }
    } else if v.missing() {
        Outline {
            colour: "#000",
            width: "2",
            dash: Some("6 3"),
        }
    } else {
        Outline {
            colour: "#555",
            width: "1",
            dash: None,
        }
    };
    let right = x + POD_W - 4;
    // the hatch of a foreign cost takes the box's right edge
    let right = if v.foreign() { right - 18 } else { right };
    html! {
        g class=(pod_classes(v)) data-pod=(v.name) {
            title { (hover(s, v)) }
            rect x=(x) y=(y) width=(POD_W) height=(POD_H) rx="4" fill=(hex(fill))
                stroke=(outline.colour) stroke-width=(outline.width)
                stroke-dasharray=[outline.dash] {}
            @if v.foreign() {
                rect x=(right + 3) y=(y + 2) width="16" height=(POD_H - 4) fill="url(#dc-hatch)" {}
            }
            // line 1: rank, name, VICTIM
            text x=(x + 7) y=(y + 17) font-size="13" fill=(ink) {
                tspan font-weight="bold" { (v.rank()) } " "
                tspan.mono font-size="12" { (tail(v.name, if v.victim { 21 } else { 28 })) }
            }
            @if v.victim {
                rect x=(right - 50) y=(y + 5) width="50" height="15" rx="2" fill="#000" {}
                text x=(right - 25) y=(y + 16) font-size="10.5" font-weight="bold" fill="#fff"
                    text-anchor="middle" { "VICTIM" }
            }
            // line 2: cost and marks
            text x=(x + 7) y=(y + 36) font-size="11.5" fill=(ink) { (cost_line(v)) }
            @if let Some(m) = v.out_of_order.first() {
                @let label = format!("! {}", short_reason(m.reason));
                @let width = 8 + label.chars().count() as u32 * 7;
                rect x=(right - width) y=(y + 24) width=(width) height="16" rx="2"
                    fill="#b42318" stroke="#fff" {}
                text x=(right - width + 4) y=(y + 36) font-size="11" font-weight="bold"
                    fill="#fff" { (label) }
            }
        }
    }
}

/// A pod box's CSS classes: `pod`, then one per mark it carries.
fn pod_classes(v: &PodRow) -> String {
    let mut classes = String::from("pod");
    for (on, c) in [
        (v.victim, " victim"),
        (v.foreign(), " foreign"),
        (v.missing(), " missing"),
        (!v.out_of_order.is_empty(), " out-of-order"),
    ] {
        if on {
            classes.push_str(c);
        }
    }
    classes
}

/// A pod box's second line: its cost (and the one wanted, when it differs)
/// and its marks.
fn cost_line(v: &PodRow) -> String {
    let mut line2 = match (v.live_cost, v.plan.and_then(|p| p.desired)) {
        (Some(live), Some(want)) if live != want => format!("cost {live} → {want}"),
        (Some(live), _) => format!("cost {live}"),
        (None, Some(want)) => format!("cost → {want}"),
        (None, None) => String::new(),
    };
    if v.karpenter() {
        line2.push_str(" · Karpenter's");
    } else if v.foreign() {
        line2.push_str(" · foreign");
    }
    if v.missing() {
        line2.push_str(" · ? signal missing");
    }
    if v.plan.and_then(|p| p.marked).is_some_and(|m| m.costed()) {
        line2.push_str(" · marked: goes first");
    }
    if v.plan.is_none() {
        line2.push_str(" · not managed");
    }
    line2
}

/// The cost breakdown: a row per pod, the ReplicaSets' orders first to last.
fn table(out: &mut Page, s: &Section, views: &[PodRow], index: &HashMap<&str, usize>) {
    out.push(html! {
        (PreEscaped("<table class=\"pods\">\n"))
        thead {
            tr {
                th { "#" } th { "pod" } th { "node" }
                @for k in &s.signals { th { (k) } }
                th { "cost now" } th { "wanted" } th { "patch" } th { "notes" }
            }
        }
        (PreEscaped("\n<tbody>\n"))
    });
    let cols = 7 + s.signals.len();
    let mut shown = vec![false; views.len()];
    for rs in &s.plan.replica_sets {
        out.push(html! {
            tr.rs {
                td colspan=(cols) {
                    "ReplicaSet " (rs.name)
                    @if let Some(d) = &rs.deployment { " (Deployment " (d) ")" }
                    ": first to go on top"
                }
            }
            (NL)
        });
        for name in &rs.predicted {
            if let Some(&i) = index.get(&**name) {
                shown[i] = true;
                out.push(row(s, &views[i]));
            }
        }
    }
    // managed pods no order holds (none, in practice): still listed
    for (i, v) in views.iter().enumerate() {
        if !shown[i] {
            out.push(row(s, v));
        }
    }
    out.push_str("</tbody>\n</table>\n");
}

/// One pod's row of the breakdown.
fn row(s: &Section, v: &PodRow) -> Markup {
    let fill = v.colour();
    html! {
        tr class=(if v.victim { "victim" } else { "" }) data-pod=(v.name) {
            td {
                span class=(if v.victim { "sw victim" } else { "sw" })
                    style=(format_args!("background:{};color:{}", hex(fill), text_on(fill))) {
                    (v.rank())
                }
            }
            td.mono { (v.name) }
            (row_values(s, v))
            (row_notes(v))
        }
        (NL)
    }
}

/// A table row's cells from the node to the patch: the plan's values, or
/// the live cost of a pod the policy does not select.
fn row_values(s: &Section, v: &PodRow) -> Markup {
    html! {
        @match v.plan {
            Some(p) => {
                td { (if p.node.is_empty() { "-" } else { &p.node }) }
                @for sig in &p.signals {
                    td {
                        (sig.detail) " "
                        b { "[" @match sig.value { Some(x) => (x), None => "-" } "]" }
                    }
                }
                td { (cost_now(p)) }
                td { (p.wanted_text()) }
                td { (maud::display(&p.action)) }
            }
            None => {
                td colspan=(1 + s.signals.len()) { "not selected by the policy" }
                td { @match v.live_cost { Some(c) => (c), None => "-" } }
                td { "-" } td { "-" }
            }
        }
    }
}

/// A table row's notes cell (victim, out of order, foreign, missing,
/// ambiguous).
fn row_notes(v: &PodRow) -> Markup {
    html! {
        td.notes {
            @if v.victim { span.tag.victim { "VICTIM" } }
            @for m in &v.out_of_order {
                span.tag.order title=(m.reason.describe()) { "! " (short_reason(m.reason)) }
                "before " span.mono { (tail(&m.before, 12)) } " "
            }
            @if v.karpenter() {
                span.tag.foreign { "Karpenter's cost" }
            } @else if v.foreign() {
                span.tag.foreign { "foreign cost" }
            }
            @if v.missing() {
                span.tag.missing title=(match v.plan.map(|p| &p.action) {
                    Some(CostAction::KeepLastValue(why)) => why.as_str(),
                    _ => "a stand-in value (onSignalMissing)",
                }) { "? signal missing" }
            }
            @if v.ambiguous { span.tag { "ambiguous" } }
        }
    }
}

/// One ReplicaSet's deletion order as a strip of boxes, with the cut of the
/// scale-down.
fn strip(s: &Section, rs_i: usize, views: &[PodRow], index: &HashMap<&str, usize>) -> Markup {
    let rs = &s.plan.replica_sets[rs_i];
    let all = rs.predicted.len();
    // a large ReplicaSet's strip shows its head; the table lists every pod
    let n = all.min(STRIP_MAX);
    let per_row = STRIP_PER_ROW.min(n.max(1));
    let rows = n.div_ceil(per_row).max(1);
    let step = (STRIP_W + 8, STRIP_H + 26);
    let w = 16 + per_row as u32 * step.0;
    let more = all > n;
    let h = 22 + rows as u32 * step.1 + if more { 16 } else { 0 };
    let cut = s.scale_down_by.map(|k| k.min(all)).filter(|&k| k <= n);
    html! {
        svg.order data-replicaset=(rs.name) width=(w) height=(h)
            viewBox=(format_args!("0 0 {w} {h}")) role="img"
            aria-label=(format_args!("deletion order of {}", rs.name)) {
            text x="8" y="15" font-size="13" {
                tspan font-weight="bold" { (rs.name) } ": deleted left to right, top to bottom"
            }
            @for (pos, name) in rs.predicted.iter().take(n).enumerate() {
                @if let Some(v) = index.get(&**name).map(|&i| &views[i]) {
                    @let (col, row) = ((pos % per_row) as u32, (pos / per_row) as u32);
                    (strip_step(s, v, pos, 12 + col * step.0, 24 + row * step.1))
                }
            }
            @if let Some(k) = cut.filter(|&k| k > 0) {
                (strip_cut(s, k, per_row, step))
            }
            @if more {
                text x="12" y=(h - 6) font-size="12" {
                    "… " (all - n) " more pods after #" (n) " (all in the table)"
                    @if let Some(k) = s.scale_down_by.filter(|&k| k > n) {
                        "; scale down by " (k) " cuts after #" (k.min(all))
                    }
                }
            }
        }
        (NL)
    }
}

/// One pod's box in a strip, at `(x, y)`: its place (`pos`, from 0), name
/// and marks.
fn strip_step(s: &Section, v: &PodRow, pos: usize, x: u32, y: u32) -> Markup {
    let fill = v.colour();
    let ink = text_on(fill);
    let (stroke, stroke_width) = if v.victim {
        ("#000", Some("3.5"))
    } else {
        ("#555", None)
    };
    html! {
        g class=(if v.victim { "step victim" } else { "step" }) data-pod=(v.name) {
            title { (hover(s, v)) }
            rect x=(x) y=(y) width=(STRIP_W) height=(STRIP_H) rx="4" fill=(hex(fill))
                stroke=(stroke) stroke-width=[stroke_width] {}
            text x=(x + 6) y=(y + 15) font-size="12" font-weight="bold" fill=(ink) {
                "#" (pos + 1) @if v.victim { " VICTIM" }
            }
            text.mono x=(x + 6) y=(y + 32) font-size="11" fill=(ink) { (tail(v.name, 15)) }
        }
        @if !v.out_of_order.is_empty() {
            circle cx=(x + STRIP_W - 10) cy=(y + 11) r="8" fill="#b42318" stroke="#fff" {}
            text x=(x + STRIP_W - 10) y=(y + 15) font-size="12" font-weight="bold" fill="#fff"
                text-anchor="middle" { "!" }
        }
    }
}

/// The strip's cut after the `k`-th pod (`k` > 0), its rows `per_row` boxes
/// long, boxes `step` apart.
fn strip_cut(s: &Section, k: usize, per_row: usize, (step_x, step_y): (u32, u32)) -> Markup {
    // the cut sits after the k-th pod
    let (col, row) = if k.is_multiple_of(per_row) {
        (per_row as u32, (k / per_row) as u32 - 1)
    } else {
        ((k % per_row) as u32, (k / per_row) as u32)
    };
    let x = 12 + col * step_x - 4;
    let y = 24 + row * step_y;
    html! {
        line x1=(x) y1=(y - 4) x2=(x) y2=(y + STRIP_H + 4) stroke="#000" stroke-width="3"
            stroke-dasharray="6 3" {}
        text x=(x.saturating_sub(4)) y=(y + STRIP_H + 17) font-size="11" font-weight="bold" {
            "▲ scale down by " (s.scale_down_by.unwrap_or(k)) " cuts here"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Mismatch, Plan, PodPlan, PreviousValues, ReplicaSetPlan, SignalValue};
    use crate::NodeInfo;
    use std::sync::Arc;

    fn pod(name: &str, node: &str, desired: Option<i32>, owner: CostOwner) -> PodPlan {
        PodPlan {
            name: name.into(),
            uid: format!("uid-{name}").into(),
            node: node.into(),
            replica_set: Some("web-1".into()),
            signals: vec![SignalValue {
                signal: "billingClass",
                value: desired.map(i64::from),
                detail: "spot".into(),
                missing: false,
            }],
            current_raw: None,
            current: 0,
            owner,
            desired,
            action: desired.map_or(CostAction::KeepForeign, CostAction::Patch),
            marked: None,
        }
    }

    fn plan_of(pods: Vec<PodPlan>, victims: usize, mismatches: Vec<Mismatch>) -> Plan {
        let predicted: Vec<Arc<str>> = pods.iter().map(|p| p.name.clone()).collect();
        let costs: Vec<i32> = pods.iter().map(PodPlan::intended).collect();
        Plan {
            policy: "shop/web".into(),
            replica_sets: vec![ReplicaSetPlan {
                name: "web-1".into(),
                deployment: Some("web".into()),
                victims: predicted[..victims].to_vec(),
                predicted,
                intended_costs: costs.clone(),
                live_costs: costs,
                verdict: if mismatches.is_empty() {
                    Verdict::AsIntended
                } else {
                    Verdict::NotAsIntended
                },
                mismatches,
                ambiguous: vec![],
                tie_at_cut: false,
                ties: vec![],
                related_pods: 0,
            }],
            pods,
            patches: vec![],
            savings: None,
            values: PreviousValues::default(),
            inactive: vec![],
            warnings: vec![],
            blocked_nodes: vec![],
            crowded_node_order: None,
            writes: Default::default(),
        }
    }

    fn section_of<'a>(
        plan: &'a Plan,
        nodes: &[(&str, &str, &str)],
        scale_down_by: Option<usize>,
    ) -> Section<'a> {
        Section {
            policy: plan.policy.clone(),
            signals: vec!["billingClass"],
            combine: "lexicographic",
            plan,
            nodes: nodes
                .iter()
                .map(|(n, c, z)| {
                    (
                        n.to_string(),
                        NodeInfo {
                            billing_class: Some(c.to_string()),
                            zone: Some(z.to_string()),
                        },
                    )
                })
                .collect(),
            scale_down_by,
            after_patches: true,
            priced_scale_ins: None,
        }
    }

    fn page(sections: Vec<Section>) -> String {
        render(&Report {
            source: "test".into(),
            now: Some("2026-11-22T03:00:00Z".into()),
            sections,
        })
    }

    /// Written to a sink in pieces, the page is the one `render` makes,
    /// and a sink that fails is reported.
    #[test]
    fn page_written_as_it_is_made_is_the_same_page() {
        // enough pods that the page passes SPILL several times
        let pods: Vec<PodPlan> = (0..6000)
            .map(|i| {
                pod(
                    &format!("web-{i:05}"),
                    &format!("node-{}", i % 300),
                    Some(i % 7),
                    CostOwner::None,
                )
            })
            .collect();
        let plan = plan_of(pods, 10, vec![]);
        let report = Report {
            source: "test".into(),
            now: None,
            sections: vec![section_of(&plan, &[("node-1", "spot", "z")], None)],
        };
        let whole = render(&report);
        assert!(whole.len() > 2 * SPILL, "{} bytes", whole.len());
        let mut written = Vec::new();
        render_to(&report, &mut written).unwrap();
        assert!(written == whole.as_bytes());
        struct Broken;
        impl std::io::Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = render_to(&report, &mut Broken).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn input_strings_are_escaped_everywhere() {
        let evil = "<script>alert('x')</script>";
        let mut p = pod(evil, "node\"><img src=x>", Some(0), CostOwner::None);
        p.signals[0].detail = "<b>class</b>".into();
        let plan = plan_of(vec![p], 1, vec![]);
        let s = section_of(&plan, &[("node\"><img src=x>", "<i>spot", "z&1")], Some(1));
        let html = page(vec![s]);
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>class"), "{html}");
        assert!(!html.contains("<i>spot"), "{html}");
        assert!(html.contains("&lt;script&gt;alert('x')&lt;/script&gt;"));
        assert!(html.contains("node&quot;&gt;&lt;img src=x&gt;"));
        assert!(html.contains("z&amp;1"));
    }

    #[test]
    fn the_operators_page_shows_the_priced_scale_ins() {
        use crate::policy::{
            FreedTotals, LastChoice, LastPricedScaleIn, NodeTotals, PricedScaleIns,
        };
        let plan = plan_of(vec![pod("a", "n1", Some(0), CostOwner::None)], 0, vec![]);
        let priced = PricedScaleIns {
            priced: 5,
            currency: Some("USD".into()),
            with_policy: FreedTotals {
                victims: 7,
                nodes: 3,
                unpriced_nodes: 1,
                hourly: "0.384".into(),
            },
            by_default: FreedTotals {
                victims: 7,
                nodes: 1,
                unpriced_nodes: 0,
                hourly: "0.0416".into(),
            },
            removed: NodeTotals {
                nodes: 1,
                hourly: "0.192".into(),
            },
            last: Some(LastPricedScaleIn {
                at: "2026-11-25T10:00:00Z".into(),
                workload: "Deployment shop/<web>".into(),
                by: "webhook".into(),
                from: 4,
                to: 2,
                with_policy: LastChoice {
                    victims: 2,
                    freed_nodes: vec!["od-1".into()],
                    nodes: 1,
                    hourly: "0.192".into(),
                },
                by_default: LastChoice::default(),
            }),
            ..Default::default()
        };
        let without = page(vec![section_of(&plan, &[("n1", "spot", "z")], None)]);
        assert!(!without.contains("priced as they happened"));
        let html = page(vec![Section {
            priced_scale_ins: Some(&priced),
            ..section_of(&plan, &[("n1", "spot", "z")], None)
        }]);
        for part in [
            "<h3>Scale-ins priced as they happened</h3>",
            "5 scale-in(s) priced",
            "<tr><td>with the policy</td><td>7</td><td>3 (1 unpriced)</td><td>0.384 USD/h</td></tr>",
            "<tr><td>by the default order</td><td>7</td><td>1</td><td>0.0416 USD/h</td></tr>",
            "<b>1 removed</b> (0.192 USD/h), 0 not removed (0.00 USD/h), 0 still watched",
            "last: Deployment shop/&lt;web&gt; at 2026-11-25T10:00:00Z, 4 → 2 by the webhook: with the policy 1 node(s) (od-1) 0.192 USD/h",
        ] {
            assert!(html.contains(part), "missing {part} in the page");
        }
    }

    #[test]
    fn page_is_self_contained() {
        let plan = plan_of(vec![pod("a", "n1", Some(0), CostOwner::None)], 0, vec![]);
        let html = page(vec![section_of(&plan, &[("n1", "spot", "z")], None)]);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("default-src 'none'"));
        for bad in [
            "http://", "https://", "src=", "href=", "<script", "@import", "url(/",
        ] {
            assert!(!html.contains(bad), "{bad} in the page");
        }
    }

    #[test]
    fn every_pod_is_a_box_on_its_node_and_victims_are_marked() {
        let pods = vec![
            pod("web-a", "spot-1", Some(0), CostOwner::None),
            pod("web-b", "spot-1", Some(1), CostOwner::None),
            pod("web-c", "od-1", Some(2), CostOwner::None),
        ];
        let plan = plan_of(pods, 2, vec![]);
        let html = page(vec![section_of(
            &plan,
            &[("spot-1", "spot", "a"), ("od-1", "on-demand", "b")],
            Some(2),
        )]);
        for name in ["web-a", "web-b", "web-c"] {
            assert!(html.contains(&format!("data-pod=\"{name}\"")), "{name}");
        }
        assert!(html.contains("<g class=\"pod victim\" data-pod=\"web-a\">"));
        assert!(html.contains("<g class=\"pod victim\" data-pod=\"web-b\">"));
        assert!(html.contains("<g class=\"pod\" data-pod=\"web-c\">"));
        assert!(html.contains("scale down by 2 deletes"));
        // the spot group (cheaper) comes before the on-demand one
        let spot = html.find("billing class</span>spot").unwrap();
        let od = html.find("billing class</span>on-demand").unwrap();
        assert!(spot < od);
        // first to go is red, last to go blue
        assert!(html.contains(&hex(RAMP[0])) && html.contains(&hex(RAMP[4])));
    }

    #[test]
    fn classes_of_equal_cost_follow_the_deletion_order() {
        // both cost 0: the class of the first pod to go comes first
        let pods = vec![
            pod("web-z", "od-1", Some(0), CostOwner::None),
            pod("web-a", "spot-1", Some(0), CostOwner::None),
        ];
        let plan = plan_of(pods, 0, vec![]);
        let html = page(vec![section_of(
            &plan,
            &[("spot-1", "spot", "a"), ("od-1", "on-demand", "b")],
            None,
        )]);
        let spot = html.find("billing class</span>spot").unwrap();
        let od = html.find("billing class</span>on-demand").unwrap();
        assert!(od < spot);
    }

    #[test]
    fn out_of_order_foreign_and_missing_signal_pods_are_told_apart() {
        let mut missing = pod("web-m", "n1", None, CostOwner::None);
        missing.action = CostAction::KeepLastValue("utilization: no sample".into());
        missing.signals[0].missing = true;
        let pods = vec![
            pod("web-x", "n1", Some(5), CostOwner::None),
            pod("web-f", "n1", None, CostOwner::Foreign(Some("ops".into()))),
            missing,
        ];
        let mismatch = Mismatch {
            pod: "web-x".into(),
            before: "web-f".into(),
            reason: MismatchReason::NotReady,
            rule: deletion_cost_core::comparator::Rule::Readiness,
        };
        let plan = plan_of(pods, 0, vec![mismatch]);
        let html = page(vec![section_of(&plan, &[("n1", "spot", "a")], None)]);
        assert!(html.contains("<g class=\"pod out-of-order\" data-pod=\"web-x\">"));
        assert!(html.contains("! not Ready"));
        assert!(html.contains("not Ready (upstream deletes them before Ready pods)"));
        assert!(html.contains("<g class=\"pod foreign\" data-pod=\"web-f\">"));
        assert!(html.contains("url(#dc-hatch)"));
        assert!(html.contains("<g class=\"pod missing\" data-pod=\"web-m\">"));
        assert!(html.contains("utilization: no sample"));
        assert!(html.contains("order as intended: NO"));
    }

    #[test]
    fn hover_and_table_carry_the_breakdown() {
        let plan = plan_of(
            vec![pod("web-a", "n1", Some(7), CostOwner::None)],
            0,
            vec![],
        );
        let html = page(vec![section_of(&plan, &[("n1", "spot", "a")], None)]);
        // in the SVG title and in the table row
        assert!(html.contains("<title>web-a\nnode n1 (spot, a)\n#1 of 1 to go in ReplicaSet web-1\nbillingClass: spot → 7"));
        assert!(html.contains("<td>spot <b>[7]</b></td>"));
        assert!(html.contains("<td>set 7</td>"));
    }

    #[test]
    fn several_policies_make_one_page_with_a_section_each() {
        let a = plan_of(
            vec![pod("web-a", "n1", Some(0), CostOwner::None)],
            0,
            vec![],
        );
        let mut b = plan_of(
            vec![pod("api-a", "n1", Some(0), CostOwner::None)],
            0,
            vec![],
        );
        b.policy = "shop/api".into();
        let html = page(vec![
            section_of(&a, &[("n1", "spot", "a")], None),
            section_of(&b, &[("n1", "spot", "a")], None),
        ]);
        assert_eq!(html.matches("<section class=\"policy\"").count(), 2);
        assert_eq!(html.matches("<html").count(), 1);
        assert!(html.contains("id=\"policy-shop-web\"") && html.contains("id=\"policy-shop-api\""));
    }

    #[test]
    fn a_large_order_strip_shows_its_head_and_the_cut_beyond_it() {
        let pods: Vec<PodPlan> = (0..120)
            .map(|i| pod(&format!("web-{i:03}"), "n1", Some(i), CostOwner::None))
            .collect();
        let plan = plan_of(pods, 60, vec![]);
        let html = page(vec![section_of(&plan, &[("n1", "spot", "a")], Some(60))]);
        assert_eq!(html.matches("<g class=\"step").count(), STRIP_MAX);
        assert!(html.contains(
            "… 70 more pods after #50 (all in the table); scale down by 60 cuts after #60"
        ));
        // every pod is still on its node and in the table
        assert_eq!(html.matches("<g class=\"pod").count(), 120);
        assert_eq!(html.matches("<tr class=").count(), 120 + 1);
    }

    #[test]
    fn long_names_keep_their_distinct_end() {
        assert_eq!(tail("abc", 5), "abc");
        assert_eq!(tail("checkout-api-7d9f8c6b5-4xk2p", 10), "…6b5-4xk2p");
        assert_eq!(tail("checkout-api-7d9f8c6b5-4xk2p", 10).chars().count(), 10);
    }

    #[test]
    fn the_ramp_runs_from_red_to_blue_and_text_stays_readable() {
        assert_eq!(ramp(0.0), RAMP[0]);
        assert_eq!(ramp(1.0), RAMP[4]);
        assert_eq!(ramp(0.5), RAMP[2]);
        assert_eq!(text_on(RAMP[2]), "#000");
        assert_eq!(text_on(RAMP[4]), "#fff");
    }
}
