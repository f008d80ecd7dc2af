//! `deletion-cost explain pod/NAME`: one pod's place in its ReplicaSet's
//! deletion order (position k of n), the comparator rule that puts it after
//! the pod before it and before the pod after it, and its cost with where
//! that cost came from (a policy's signals, a foreign value, none). Reads
//! the live cluster or a snapshot, as `predict` does; the policies are the
//! cluster's (or `--policy FILE`).

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::predict::{human_age, predict, GroupPrediction, PodPrediction, Settings};
use super::source::read_source_limited;
use super::{print_out, CliError};
use crate::annotations::KARPENTER_MANAGED_COST;
use crate::comparator::{Rule, SlimPod};
use crate::input::{Expect, InputLimits, RawObject};
use crate::plan::blockers::{node_blockers, pod_blocker};
use crate::plan::workload::{select, Query, Target, TargetKind};
use crate::plan::{self, BlockedNode, PlanOptions, Snapshot};
use crate::pod::PodRecord;
use crate::policy::overlap_order;
use crate::signals::SignalSamples;

/// Output format of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    /// Readable lines.
    Text,
    /// The explanation as JSON.
    Json,
}

/// Flags of `explain`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Reads the live cluster through the kubeconfig (read-only), or a \
saved snapshot with --snapshot (what `kubectl get pods,nodes,replicasets,deployments -o yaml` \
prints). The order is the one the ReplicaSet controller uses now, with the costs the pods \
carry; the pod's related pods (rule 5) are those of every ReplicaSet of its Deployment.\n\n\
The cost's origin comes from the policy that selects the pod (the cluster's policies, or \
--policy FILE; with --snapshot, only --policy): its signals, what it would write, or that it \
leaves a foreign value alone."
)]
pub struct ExplainArgs {
    /// The pod: `pod/NAME` (or NAME).
    #[arg(value_name = "pod/NAME")]
    pub pod: String,
    /// Read a saved cluster snapshot (file or directory) instead of the
    /// live cluster.
    #[arg(long, value_name = "FILE|DIR", conflicts_with_all = ["kubeconfig", "context"])]
    pub snapshot: Option<String>,
    /// Policy file to judge the cost by (default: the cluster's policies;
    /// none with --snapshot).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<String>,
    /// Utilisation samples for the policy's utilization signals (as `plan`).
    #[arg(long, value_name = "FILE")]
    pub samples: Option<String>,
    /// The controller's `now` for the log2 time buckets (RFC 3339; default: now).
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// The cluster's feature gates.
    #[command(flatten)]
    pub gates: super::cluster_flags::GateFlags,
    /// The pod's namespace (default: the kubeconfig context's, else
    /// `default`; with --snapshot, `default`): a pod's name is looked up in
    /// one namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: the files in $KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Stop with exit 2 on an input larger than this: bytes, or with a unit.
    // hyphen values allowed so `-5` is reported as a bad size, not an unknown flag
    #[arg(long, value_name = "SIZE", default_value = crate::input::DEFAULT_MAX_INPUT, allow_hyphen_values = true, value_parser = crate::input::parse_size)]
    pub max_input_bytes: u64,
    /// Stop with exit 2 on an input holding more pods than this.
    #[arg(long, value_name = "N", default_value_t = crate::input::DEFAULT_MAX_PODS, allow_hyphen_values = true, value_parser = super::cluster_flags::parse_pod_limit)]
    pub max_pods: u64,
    /// Print no notes on stderr (warnings and errors still go out).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = ExplainFormat::Text)]
    pub output: ExplainFormat,
}

/// A neighbour in the order and the rule between it and the pod.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Neighbour {
    /// Its name.
    pub name: String,
    /// Its 1-based position.
    pub position: usize,
    /// The first rule that differs between the two (`tie`: none).
    pub rule: Rule,
    /// `rule` in words.
    pub rule_description: &'static str,
}

/// Where the pod's cost came from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum CostOrigin {
    /// No annotation: upstream reads 0.
    None,
    /// Written for this policy, from its signals.
    Policy {
        /// namespace/name.
        policy: String,
    },
    /// Set by someone else (a person, a tool, another policy).
    Foreign {
        /// The policy it was written for, when the operator wrote it.
        written_for: Option<String>,
    },
    /// Karpenter's deletion-cost controller (the pod carries
    /// `karpenter.sh/managed-deletion-cost`): no policy overwrites it.
    Karpenter,
}

/// One signal of the policy, as it reads for this pod.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalReading {
    /// Signal kind.
    pub signal: &'static str,
    /// What it read (class, utilisation, pods on node).
    pub detail: String,
    /// The value it feeds to the combination.
    pub value: Option<i64>,
}

/// What the policy that selects the pod does with it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyView {
    /// namespace/name.
    pub policy: String,
    /// Its signals for this pod.
    pub signals: Vec<SignalReading>,
    /// The cost it wants (`None`: it keeps the current one).
    pub wanted: Option<i32>,
    /// `unchanged`, `set 20`, `keep (not ours)`...
    pub action: String,
    /// Its scale-down marker and what it does, when it carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marked: Option<String>,
}

/// Everything `explain` says about one pod.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `Kind/name` of its controller, if any.
    pub owner: Option<String>,
    /// Why it is in no order (inactive, no controller).
    pub not_ordered: Option<String>,
    /// Its place: 1 is deleted first.
    pub position: Option<usize>,
    /// Active pods in its ReplicaSet's order.
    pub of: Option<usize>,
    /// The pod just before it, deleted earlier.
    pub after: Option<Neighbour>,
    /// The pod just after it, deleted later.
    pub before: Option<Neighbour>,
    /// The prediction's row for the pod (cost, rank, readiness...).
    pub pod: Option<PodPrediction<'static>>,
    /// The cost upstream reads.
    pub cost: i32,
    /// The annotation as written.
    pub cost_annotation: Option<String>,
    /// Where it came from.
    pub cost_origin: CostOrigin,
    /// Why no autoscaler may remove the pod's node, when none may.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_removal: Option<BlockedNode>,
    /// The policy that selects the pod, if one of those read does.
    pub policy: Option<PolicyView>,
    /// Why no policy plans the pod, when none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_policy: Option<String>,
    /// The `now` used.
    pub now: String,
    /// The Kubernetes version whose gate defaults apply.
    pub kubernetes_version: Option<String>,
}

/// Runs `explain`.
pub fn run(args: ExplainArgs) -> Result<(), CliError> {
    super::stderr::set_quiet(args.quiet);
    let target = parse_pod(&args.pod)?;
    // whole seconds: the clock's nanoseconds only clutter what is printed
    let clock =
        Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now());
    let now = super::cluster_flags::parse_now(args.now.as_deref(), clock)?;
    args.gates.resolve()?;
    let read = read_input(&args)?;
    let namespace = read.namespace.clone().unwrap_or_default();
    let families = select(
        &read.snapshot,
        &Query {
            namespace: read.namespace.as_deref(),
            target: Some(&target),
            selector: None,
        },
    )
    .map_err(CliError::bad_input)?;
    let Some(family) = families.first() else {
        return Err(CliError::bad_input(format!(
            "{target} not found in namespace {namespace} ({})",
            read.source
        )));
    };
    let Some(&pod) = family.pods.first() else {
        return Err(CliError::bad_input(format!("{target}: no such pod")));
    };
    let choice = args.gates.choose(read.version.as_ref())?;
    let settings = Settings {
        now,
        gates: choice.gates,
        kubernetes_version: choice.version,
        scale_down_by: None,
    };
    if let Some(note) = super::cluster_flags::default_gates_note(&choice, &read.source) {
        super::stderr::note(&note);
    }
    let (policy_source, policy_objects) = read_policies(&args, &read)?;
    let view = policy_view(
        &args,
        &policy_source,
        &policy_objects,
        &read.snapshot,
        pod,
        &settings,
    )?;
    let no_policy = view
        .is_none()
        .then(|| why_no_policy(&policy_source, &policy_objects));
    let mut explanation = explain(&settings, pod, &family.related, view);
    explanation.no_policy = no_policy;
    explanation.node_removal = blocked_node(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        &read.snapshot,
    );
    let text = render(&explanation, args.output)?;
    print_out(&text)
}

/// Why no policy plans the pod: none was read from `source`, or none of
/// those read selects it.
fn why_no_policy(source: &str, objects: &[RawObject]) -> String {
    if objects.iter().any(|o| o.kind == "DeletionCostPolicy") {
        format!("no DeletionCostPolicy in {source} selects this pod")
    } else {
        format!("{source} holds no DeletionCostPolicy (give one with --policy FILE)")
    }
}

/// Reads `--snapshot`, else the live cluster, in the pod's namespace; the
/// cluster's policies too when no policy file replaces them.
fn read_input(args: &ExplainArgs) -> Result<super::predict::Selected, CliError> {
    let limits = InputLimits {
        bytes: args.max_input_bytes,
        pods: args.max_pods,
    };
    let cluster = super::live::ClusterArgs {
        namespace: args.namespace.clone(),
        all_namespaces: false,
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    super::predict::read_selected(
        args.snapshot.as_deref(),
        &cluster,
        true,
        limits,
        super::live::Wants {
            nodes: true,
            policies: args.snapshot.is_none() && args.policy.is_none(),
            ..Default::default()
        },
    )
}

/// The policies to judge the cost by, with their source's name: `--policy
/// FILE`, else those read with the pods.
fn read_policies(
    args: &ExplainArgs,
    read: &super::predict::Selected,
) -> Result<(String, Vec<RawObject>), CliError> {
    Ok(match &args.policy {
        Some(path) => {
            let (name, text) = read_source_limited(path, args.max_input_bytes, Expect::Manifest)
                .map_err(CliError::bad_input)?;
            let objects = crate::input::parse_objects(&name, &text).map_err(CliError::bad_input)?;
            (name, objects)
        }
        None => (read.source.clone(), read.policies.clone()),
    })
}

/// The explanation in the asked format, ending in a newline.
fn render(explanation: &Explanation, format: ExplainFormat) -> Result<String, CliError> {
    Ok(match format {
        ExplainFormat::Text => render_text(explanation),
        ExplainFormat::Json => {
            let mut s = serde_json::to_string_pretty(explanation)
                .map_err(|e| CliError::failure(format!("encoding JSON: {e}")))?;
            s.push('\n');
            s
        }
    })
}

/// `pod/NAME`, or a bare NAME.
fn parse_pod(given: &str) -> Result<Target, CliError> {
    let target = if given.contains('/') {
        given.parse::<Target>().map_err(CliError::bad_input)?
    } else {
        Target {
            kind: TargetKind::Pod,
            name: given.to_string(),
        }
    };
    if target.kind != TargetKind::Pod || target.name.is_empty() {
        return Err(CliError::bad_input(format!(
            "{given:?}: explain takes one pod, pod/NAME (for a workload's order: \
             `deletion-cost predict {given}`)"
        )));
    }
    Ok(target)
}

/// The plan of the policy that selects `pod` (the winner, as the operator
/// decides, when several do), for this pod.
fn policy_view(
    args: &ExplainArgs,
    source: &str,
    objects: &[RawObject],
    snapshot: &Snapshot,
    pod: &PodRecord,
    settings: &Settings,
) -> Result<Option<PolicyView>, CliError> {
    if objects.is_empty() {
        return Ok(None);
    }
    let name = pod.identity.name.as_deref().unwrap_or_default();
    let ns = pod.identity.namespace.as_deref().unwrap_or_default();
    let all = super::plan::policies(source, objects)?;
    let Some(winner) = winning_policy(&all, ns, name, snapshot) else {
        return Ok(None);
    };
    let policy = &winner.named;
    let now = settings.now.as_nanosecond();
    let samples = load_samples(args, policy, settings)?;
    let opts = PlanOptions {
        gates: settings.gates,
        now: Some(now),
        scale_down_by: None,
        assume_patches_applied: false,
        chunks: Default::default(),
    };
    // as the policy writes: under OnScaleIn nothing in the background
    let p = plan::plan_as_written(
        policy,
        snapshot,
        &samples,
        &Default::default(),
        &opts,
        &Default::default(),
    );
    Ok(p.pods
        .iter()
        .find(|pp| &*pp.name == name)
        .map(|pp| PolicyView {
            policy: policy.key(),
            signals: pp
                .signals
                .iter()
                .map(|s| SignalReading {
                    signal: s.signal,
                    detail: s.detail.to_string(),
                    value: s.value,
                })
                .collect(),
            wanted: pp.desired,
            action: pp.action.to_string(),
            marked: pp.marked.map(|m| match m.first_anyway {
                None => format!("{m}: goes before every unmarked pod of the policy"),
                Some(_) => m.to_string(),
            }),
        }))
}

/// Of the policies in namespace `ns` that select pod `name`, the one the
/// operator lets win.
pub(crate) fn winning_policy<'a>(
    all: &'a [super::plan::FilePolicy],
    ns: &str,
    name: &str,
    snapshot: &Snapshot,
) -> Option<&'a super::plan::FilePolicy> {
    let selecting: Vec<&super::plan::FilePolicy> = all
        .iter()
        .filter(|f| {
            f.named.namespace == ns && plan::selected_pods(&f.named, snapshot).contains(name)
        })
        .collect();
    selecting
        .into_iter()
        .min_by(|a, b| overlap_order(&a.object, &b.object))
}

/// The `--samples` file read for `policy` (none given: no samples), warning
/// of stale samples.
fn load_samples(
    args: &ExplainArgs,
    policy: &plan::NamedPolicy,
    settings: &Settings,
) -> Result<SignalSamples, CliError> {
    let now = settings.now.as_nanosecond();
    Ok(match &args.samples {
        Some(path) => {
            let (name, text) = read_source_limited(path, args.max_input_bytes, Expect::Text)
                .map_err(CliError::bad_input)?;
            let samples = super::samples_input::load(
                &name,
                &text,
                policy,
                Some((now / 1_000_000_000) as f64),
            )?;
            // as `plan` says it, so the two never disagree in silence
            let now_from = match args.now {
                Some(_) => super::samples_input::NowFrom::Flag,
                None => super::samples_input::NowFrom::Clock,
            };
            let now_text = settings.now.to_string();
            for w in
                super::samples_input::stale_warnings(&name, policy, &samples, &now_text, now_from)
            {
                super::stderr::warn(&format!("policy {}: {w}", policy.key()));
            }
            samples
        }
        None => SignalSamples::default(),
    })
}

/// Why no autoscaler may remove the node `name` of the snapshot: its own
/// annotations, and the pods on it of every namespace the snapshot holds.
fn blocked_node(name: Option<&str>, snapshot: &Snapshot) -> Option<BlockedNode> {
    let name = name.filter(|n| !n.is_empty())?;
    let mut out = BlockedNode::new(name);
    let on_node = |n: Option<&str>| n == Some(name);
    for node in snapshot
        .nodes
        .iter()
        .filter(|n| on_node(n.metadata.name.as_deref()))
    {
        node_blockers(node).into_iter().for_each(|b| out.push(b));
    }
    for pod in &snapshot.pods {
        if on_node(pod.spec.as_ref().and_then(|s| s.node_name.as_deref())) {
            pod_blocker(pod).into_iter().for_each(|b| out.push(b));
        }
    }
    (!out.blockers.is_empty()).then_some(out)
}

/// The explanation of `pod`, ordered among the pods of its controller in
/// `related` (its family: every ReplicaSet of its Deployment). Pure.
pub fn explain(
    settings: &Settings,
    pod: &PodRecord,
    related: &[&PodRecord],
    policy: Option<PolicyView>,
) -> Explanation {
    let me = SlimPod::from_pod(pod);
    let related_slim: Vec<SlimPod> = related.iter().map(|p| SlimPod::from_pod(*p)).collect();
    let owner = me.owner.as_ref().map(|o| format!("{}/{}", o.kind, o.name));
    let cost_origin = cost_origin(&me, pod, policy.as_ref());
    let mut out = Explanation {
        namespace: me.namespace.to_string(),
        name: me.name.to_string(),
        owner,
        not_ordered: None,
        position: None,
        of: None,
        after: None,
        before: None,
        pod: None,
        cost: me.cost.value,
        cost_annotation: me.cost_annotation.as_deref().map(str::to_string),
        cost_origin,
        node_removal: None,
        policy,
        no_policy: None,
        now: settings.now.to_string(),
        kubernetes_version: settings.kubernetes_version.map(|v| v.to_string()),
    };
    if let Some(reason) = me.inactive_reason() {
        out.not_ordered = Some(format!(
            "inactive ({reason}): the ReplicaSet controller leaves it out of its order"
        ));
        return out;
    }
    let Some(owner) = me.owner.clone() else {
        out.not_ordered =
            Some("no controller ownerReference: no ReplicaSet deletes it on scale-in".to_string());
        return out;
    };
    place_in_order(&mut out, settings, &owner, &related_slim);
    out
}

/// Where the cost of `me` (the slim view of `pod`) came from, judged
/// against the policy that plans it now.
fn cost_origin(me: &SlimPod, pod: &PodRecord, policy: Option<&PolicyView>) -> CostOrigin {
    let written_for = pod.ours.policy.clone();
    match (&me.cost_annotation, policy) {
        (None, _) => CostOrigin::None,
        (Some(_), _) if pod.ours.autoscaler.karpenter_cost => CostOrigin::Karpenter,
        (Some(_), Some(view)) if written_for.as_deref() == view.policy.split('/').nth(1) => {
            CostOrigin::Policy {
                policy: view.policy.clone(),
            }
        }
        (Some(_), _) => CostOrigin::Foreign { written_for },
    }
}

/// Fills in the pod's position among the active pods of its controller
/// `owner` and its neighbours there (left alone when it is not found).
fn place_in_order(
    out: &mut Explanation,
    settings: &Settings,
    owner: &crate::comparator::ControllerRef,
    related_slim: &[SlimPod],
) {
    let siblings: Vec<SlimPod> = related_slim
        .iter()
        .filter(|p| p.owner.as_deref() == Some(owner))
        .cloned()
        .collect();
    let prediction = predict(settings, &siblings, Some(related_slim));
    let Some((group, i)) = prediction
        .replica_sets
        .iter()
        .find_map(|g: &GroupPrediction| {
            g.slim_pods()
                .position(|p| *p.name == *out.name)
                .map(|i| (g, i))
        })
    else {
        return;
    };
    let neighbour = |j: usize, rule: Option<Rule>| {
        let p = group.pod(j);
        let rule = rule.unwrap_or(Rule::Tie);
        Neighbour {
            name: p.name.to_string(),
            position: p.position,
            rule,
            rule_description: rule.describe(),
        }
    };
    let decided_by = |j: usize| group.pod(j).decided_by;
    out.position = Some(i + 1);
    out.of = Some(group.len());
    out.after = i.checked_sub(1).map(|j| neighbour(j, decided_by(j)));
    out.before = (i + 1 < group.len()).then(|| neighbour(i + 1, decided_by(i)));
    out.pod = Some(group.pod(i).into_owned());
}

/// The readable view.
pub fn render_text(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "pod/{} in namespace {}", e.name, e.namespace);
    let _ = writeln!(
        out,
        "  controller: {}",
        e.owner.as_deref().unwrap_or("<none>")
    );
    render_order(&mut out, e);
    if let Some(p) = &e.pod {
        render_pod_state(&mut out, p);
    }
    let raw = match (
        &e.cost_annotation,
        e.pod.as_ref().and_then(|p| p.cost_problem),
    ) {
        (None, _) => " (no pod-deletion-cost annotation: read as 0)".to_string(),
        (Some(raw), Some(problem)) => format!(" (annotation {raw:?}: {problem}, read as 0)"),
        (Some(_), None) => String::new(),
    };
    let _ = writeln!(out, "  cost:       {}{raw}", e.cost);
    let _ = writeln!(out, "  from:       {}", origin_text(e));
    if let Some(n) = &e.node_removal {
        let _ = writeln!(out, "  autoscaler: {n}");
    }
    render_policy(&mut out, e.policy.as_ref(), e.no_policy.as_deref());
    let _ = writeln!(
        out,
        "\nnow {}{}",
        e.now,
        e.kubernetes_version
            .as_ref()
            .map(|v| format!(" (Kubernetes {v} defaults)"))
            .unwrap_or_default()
    );
    out
}

/// The `order`, `after` and `before` lines: the pod's place and the rules
/// that put it there.
fn render_order(out: &mut String, e: &Explanation) {
    match (&e.not_ordered, e.position, e.of) {
        (Some(why), _, _) => {
            let _ = writeln!(out, "  order:      none: {why}");
        }
        (None, Some(k), Some(n)) => {
            let _ = writeln!(
                out,
                "  order:      {k} of {n} in its ReplicaSet's deletion order (1 is deleted first on scale-in)"
            );
        }
        _ => {}
    }
    if let Some(a) = &e.after {
        let _ = writeln!(
            out,
            "  after:      #{} {}: {}",
            a.position, a.name, a.rule_description
        );
    }
    if let Some(b) = &e.before {
        let _ = writeln!(
            out,
            "  before:     #{} {}: {}",
            b.position, b.name, b.rule_description
        );
    }
}

/// The `node` and `state` lines of the pod's prediction row.
fn render_pod_state(out: &mut String, p: &PodPrediction<'static>) {
    let _ = writeln!(
        out,
        "  node:       {} ({} related pod(s) on it)",
        if p.node.is_empty() { "<none>" } else { &p.node },
        p.rank
    );
    let _ = writeln!(
        out,
        "  state:      {}, Ready={}{}, restarts {}",
        p.phase.as_deref().unwrap_or("<none>"),
        if p.ready { "True" } else { "False" },
        p.ready_age_seconds
            .map(|s| format!(" for {}", human_age(s)))
            .unwrap_or_default(),
        p.restarts
    );
}

/// Where the cost came from, in words (the `from` line).
fn origin_text(e: &Explanation) -> String {
    match &e.cost_origin {
        CostOrigin::None => "none".to_string(),
        CostOrigin::Policy { policy } => format!("policy {policy}, from its signals"),
        CostOrigin::Foreign {
            written_for: Some(p),
        } => match &e.policy {
            Some(v) => format!(
                "foreign: written by the operator for policy {p}, not for {}, which plans it now",
                v.policy
            ),
            None => format!(
                "written by the operator for policy {}/{p}, which is not among the policies read",
                e.namespace
            ),
        },
        CostOrigin::Foreign { written_for: None } => {
            "foreign: set by someone else (not by a policy)".to_string()
        }
        CostOrigin::Karpenter => format!(
            "Karpenter's deletion-cost controller ({KARPENTER_MANAGED_COST}): no policy overwrites it"
        ),
    }
}

/// The `policy`, `signals` and `plan` lines, or why no policy plans the pod.
fn render_policy(out: &mut String, policy: Option<&PolicyView>, why_none: Option<&str>) {
    match policy {
        None => {
            let _ = writeln!(
                out,
                "  policy:     none: {}",
                why_none.unwrap_or("no policy selects this pod")
            );
        }
        Some(v) => {
            let signals: Vec<String> = v
                .signals
                .iter()
                .map(|s| match s.value {
                    Some(x) => format!("{} {} [{x}]", s.signal, s.detail),
                    None => format!("{} {} [-]", s.signal, s.detail),
                })
                .collect();
            let _ = writeln!(out, "  policy:     {}", v.policy);
            let _ = writeln!(out, "  signals:    {}", signals.join("; "));
            let wanted = v.wanted.map_or_else(
                || "keeps the current cost".to_string(),
                |w| format!("wants {w}"),
            );
            let _ = writeln!(out, "  plan:       {wanted}: {}", v.action);
            if let Some(m) = &v.marked {
                let _ = writeln!(out, "  marker:     {m}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_takes_one_pod() {
        assert_eq!(parse_pod("web-1").unwrap().name, "web-1");
        assert_eq!(parse_pod("pod/web-1").unwrap().name, "web-1");
        assert!(parse_pod("deployment/web").is_err());
        assert!(parse_pod("pod/").is_err());
    }
}
