//! `deletion-cost predict`: the embedded comparator as a tool. Reads pods,
//! groups them by controlling ReplicaSet, and prints the order the ReplicaSet
//! controller deletes them in, with the rule that decided each place.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::source::read_pods_slim;
use super::{print_out, table, CliError};
use crate::comparator::key::go_time;
use crate::comparator::{
    rank_slim, victims_in_syncs, Comparator, CostProblem, FeatureGates, GoTime, KubeVersion,
    PodsOnNode, RankKey, Ranking, Rule, SlimPod, Syncs, BURST_REPLICAS,
};
use crate::input::{merge_versions, InputError, InputLimits, ServerVersion, EMPTY_LIST};
use crate::plan::workload::{parse_selector, select, Family, Query, Target, TargetKind};
use crate::text::{capped_list, shortened, LISTED};

/// Long help of `predict` (`--help`).
pub const LONG_ABOUT: &str = "\
Print the order in which the ReplicaSet controller deletes pods on scale-in, and why.

Pods come from the live cluster through the kubeconfig (read-only), kubectl style:
`predict deployment/web -n shop`, `replicaset/NAME`, `-l SELECTOR`, `-n`, `-A`,
`--kubeconfig`, `--context`; or from a saved snapshot with --snapshot (as `plan` reads
it), which answers alike. Each Deployment's pods are ordered with its own related pods.

Or from a file: what `kubectl get pods -o json|yaml` prints: a List/PodList, a single
Pod, an array of Pods, or several YAML documents. `-f -` reads stdin, as does a call
with none of the flags above.

Pods are grouped by their controller ownerReference (the one with `controller: true`);
each group is one ReplicaSet and is ordered on its own, as the controller does.
Groups are printed sorted by owner kind, then owner name, then owner UID; pods with
no controller ownerReference form one group, printed last. Inactive pods (phase
Succeeded or Failed, or deletionTimestamp set) are left out, as upstream does, and
listed on stderr.

The colocation rank (rule 5) counts the active related pods on each pod's node.
Upstream's related pods are all pods of the ReplicaSets that share the owner
Deployment; from a file, give them with --related. Without it, all input pods are the
related pods: with pods of several Deployments in the input, pass one Deployment's pods per
call (or --related) so ranks do not count other Deployments' pods.

The rules, first that differs decides: 1 unassigned first, 2 Pending < Unknown <
Running, 3 not Ready first, 4 lower pod-deletion-cost first (gate PodDeletionCost),
5 more related pods on the node first, 6 ready more recently first (log2 buckets of
age and then UID under LogarithmicScaleDown), 7 more restarts first (then sidecar
restarts), 8 created more recently first (log2 buckets, then UID).

Gates follow the cluster's Kubernetes version: --kubernetes-version, else the version the
input carries (what `kubectl version -o json|yaml` or `kubectl get --raw /version` prints,
as one more YAML document or array item), else the newest defaults, with a note on
stderr. --feature-gates applies on top.

An input without pods (empty, blank, an empty List), an item that is not a Pod or has
no name, and a pod listed twice (same namespace and name, or same UID) are bad input.
Pods without a UID are ordered with a warning: upstream breaks the last ties by UID.

Each input is read as it arrives and refused at its first byte that no JSON or YAML
text holds (binary data such as /dev/zero), or past --max-input-bytes (default 2Gi).

Exit status: 0 on success, 2 on bad input (file, field or flag named in the message).";

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One pod name per line, first deleted first.
    Names,
    /// The full prediction as JSON.
    Json,
    /// A human-readable table.
    Table,
}

/// Flags of `predict`.
#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// The pods of `deployment/NAME` or `replicaset/NAME` (read live, or
    /// from --snapshot).
    #[arg(value_name = "KIND/NAME")]
    pub target: Option<String>,
    /// Pods to order (JSON or YAML); `-` reads stdin (the default without
    /// KIND/NAME, -l, -n, -A, --snapshot, --kubeconfig or --context).
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE",
        conflicts_with_all = ["target", "selector", "snapshot", "namespace", "all_namespaces", "kubeconfig", "context"]
    )]
    pub file: Option<String>,
    /// Pods used for the colocation rank (default: the input pods); `-` reads stdin.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["target", "selector", "snapshot", "namespace", "all_namespaces", "kubeconfig", "context"])]
    pub related: Option<String>,
    /// Only pods with these labels (kubectl's `-l` syntax).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Read a saved cluster snapshot (file or directory, as `plan` reads
    /// it) instead of the live cluster.
    #[arg(long, value_name = "FILE|DIR", conflicts_with_all = ["kubeconfig", "context"])]
    pub snapshot: Option<String>,
    /// The cluster to read and its namespaces.
    #[command(flatten)]
    pub cluster: super::live::ClusterArgs,
    /// The controller's `now` for the log2 time buckets (default: current time).
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// The cluster's feature gates.
    #[command(flatten)]
    pub gates: super::cluster_flags::GateFlags,
    /// Only the first N pods of each ReplicaSet: the victims of scaling in by N.
    // hyphen values allowed so `-1` is reported as a bad N, not an unknown flag
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = super::cluster_flags::parse_pod_count)]
    pub scale_down_by: Option<usize>,
    /// Stop with exit 2 on an input larger than this (each file, and stdin):
    /// bytes, or with a unit (512Mi, 2Gi, 500M).
    // hyphen values allowed so `-5` is reported as a bad size, not an unknown flag
    #[arg(long, value_name = "SIZE", default_value = crate::input::DEFAULT_MAX_INPUT, allow_hyphen_values = true, value_parser = crate::input::parse_size)]
    pub max_input_bytes: u64,
    /// Stop with exit 2 on an input holding more pods than this (each
    /// source; a snapshot's files together).
    #[arg(long, value_name = "N", default_value_t = crate::input::DEFAULT_MAX_PODS, allow_hyphen_values = true, value_parser = super::cluster_flags::parse_pod_limit)]
    pub max_pods: u64,
    /// Print no notes on stderr (warnings and errors still go out).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Names)]
    pub output: OutputFormat,
}

/// Validated settings of one `predict` call.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The controller's `now`.
    pub now: Timestamp,
    /// Gates in force.
    pub gates: FeatureGates,
    /// The server version whose defaults apply (`--kubernetes-version`, else
    /// the input's), if any.
    pub kubernetes_version: Option<KubeVersion>,
    /// Victims per ReplicaSet, if asked.
    pub scale_down_by: Option<usize>,
}

impl Settings {
    /// Checks the flags; `default_now` is used when `--now` is absent.
    pub fn from_args(args: &PredictArgs, default_now: Timestamp) -> Result<Self, CliError> {
        let now = super::cluster_flags::parse_now(args.now.as_deref(), default_now)?;
        let (kubernetes_version, gates) = args.gates.resolve()?;
        Ok(Self {
            now,
            gates,
            kubernetes_version,
            scale_down_by: args.scale_down_by,
        })
    }
}

/// The controller that owns a group of pods.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct OwnerRef {
    /// `kind` of the ownerReference.
    pub kind: String,
    /// `name` of the ownerReference.
    pub name: String,
    /// `uid` of the ownerReference.
    pub uid: String,
}

impl OwnerRef {
    /// The pod's controller ownerReference, if it has one.
    pub fn of(pod: &SlimPod) -> Option<Self> {
        pod.owner.as_deref().map(|o| Self {
            kind: o.kind.to_string(),
            name: o.name.to_string(),
            uid: o.uid.to_string(),
        })
    }

    /// `ReplicaSet/web-6d4f`, or `<none>` for pods without a controller.
    pub fn label(owner: Option<&Self>) -> String {
        owner.map_or_else(
            || "<none>".to_string(),
            |o| format!("{}/{}", o.kind, o.name),
        )
    }
}

/// One pod left out because it is not active.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InactivePod {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Why it does not count.
    pub reason: &'static str,
}

/// Pods whose order upstream cannot settle consistently, by name.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AmbiguityReport {
    /// Names of the pods involved.
    pub pods: Vec<String>,
    /// The UID tie-break that forms the cycle.
    pub rule: Rule,
    /// What that means.
    pub explanation: String,
}

/// One pod's place in its ReplicaSet's order. Borrows the pods it was
/// predicted from: a row per pod of a 100k-pod input costs no allocation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPrediction<'a> {
    /// 1-based place: 1 is deleted first.
    pub position: usize,
    /// `metadata.namespace`.
    pub namespace: Cow<'a, str>,
    /// `metadata.name`.
    pub name: Cow<'a, str>,
    /// `metadata.uid`.
    pub uid: Cow<'a, str>,
    /// `spec.nodeName` (empty: unassigned).
    pub node: Cow<'a, str>,
    /// `status.phase`.
    pub phase: Option<Cow<'a, str>>,
    /// Ready condition is True.
    pub ready: bool,
    /// The deletion cost upstream uses.
    pub cost: i32,
    /// The raw annotation value, if set.
    pub cost_annotation: Option<Cow<'a, str>>,
    /// Why the raw value counts as 0, if it is invalid.
    pub cost_problem: Option<CostProblem>,
    /// Active related pods on the same node (rule 5).
    pub rank: i64,
    /// When the pod became Ready (RFC 3339), for ready pods.
    pub ready_time: Option<Timestamp>,
    /// Seconds between `readyTime` and `now`.
    pub ready_age_seconds: Option<i64>,
    /// Max regular container restarts.
    pub restarts: i64,
    /// Max sidecar (restartable init container) restarts.
    pub sidecar_restarts: i64,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// The rule that puts this pod before the next one (`tie` when none does);
    /// absent for the last pod.
    pub decided_by: Option<Rule>,
    /// `decidedBy` in words.
    pub decided_by_description: Option<&'static str>,
    /// Tie block: pods with equal numbers are equal for upstream.
    pub tie_block: usize,
    /// With `--scale-down-by`: whether this pod is deleted.
    pub victim: Option<bool>,
}

/// The order of one ReplicaSet's active pods. Its rows are made as they
/// are read ([`GroupPrediction::pods`]): `-o names` on 100k pods makes none.
#[derive(Debug, Clone)]
pub struct GroupPrediction<'a> {
    /// The controller; `null` for pods without a controller ownerReference.
    pub owner: Option<OwnerRef>,
    /// With `--scale-down-by`: the names upstream deletes, in its order.
    pub victims: Option<Vec<String>>,
    /// With `--scale-down-by`: the cut falls inside a tie, so which of the tied
    /// pods go depends on the informer's order.
    pub tie_at_cut: Option<bool>,
    /// Set when the comparator is not a strict weak order on these pods.
    pub ambiguity: Option<AmbiguityReport>,
    members: Vec<&'a SlimPod>,
    ranking: Ranking,
    on_node: Arc<PodsOnNode<'a>>,
    is_victim: Option<Vec<bool>>,
    now_ns: i128,
}

impl<'a> GroupPrediction<'a> {
    /// How many pods the order holds.
    pub fn len(&self) -> usize {
        self.ranking.order.len()
    }

    /// Whether the order holds no pod.
    pub fn is_empty(&self) -> bool {
        self.ranking.order.is_empty()
    }

    /// The pods in deletion order.
    pub fn slim_pods(&self) -> impl ExactSizeIterator<Item = &'a SlimPod> + '_ {
        self.ranking.order.iter().map(|&i| self.members[i])
    }

    /// The row of the pod at 0-based place `pos`.
    pub fn pod(&self, pos: usize) -> PodPrediction<'a> {
        let i = self.ranking.order[pos];
        let p = self.members[i];
        let decided_by = self.ranking.decided_by.get(pos).copied();
        let ready_time = if p.ready { p.ready_time } else { None };
        PodPrediction {
            position: pos + 1,
            namespace: Cow::Borrowed(&p.namespace),
            name: Cow::Borrowed(&p.name),
            uid: Cow::Borrowed(&p.uid),
            node: Cow::Borrowed(&p.node_name),
            phase: p.phase.as_deref().map(Cow::Borrowed),
            ready: p.ready,
            cost: p.cost.value,
            cost_annotation: p.cost_annotation.as_deref().map(Cow::Borrowed),
            cost_problem: p.cost.problem,
            rank: self.on_node.rank(&p.node_name),
            ready_time: timestamp(ready_time),
            ready_age_seconds: ready_time
                .map(|t| i64::try_from((self.now_ns - t) / 1_000_000_000).unwrap_or(i64::MAX)),
            restarts: p.restarts,
            sidecar_restarts: p.sidecar_restarts,
            created: timestamp(p.created),
            decided_by,
            decided_by_description: decided_by.map(Rule::describe),
            tie_block: self.ranking.block[pos],
            victim: self.is_victim.as_ref().map(|v| v[i]),
        }
    }

    /// The rows in deletion order.
    pub fn pods(&self) -> impl ExactSizeIterator<Item = PodPrediction<'a>> + '_ {
        (0..self.len()).map(|pos| self.pod(pos))
    }
}

impl Serialize for GroupPrediction<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        /// The rows, written as they are made.
        struct Rows<'g, 'a>(&'g GroupPrediction<'a>);
        impl Serialize for Rows<'_, '_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.pods())
            }
        }
        let mut st = s.serialize_struct("GroupPrediction", 5)?;
        st.serialize_field("owner", &self.owner)?;
        st.serialize_field("pods", &Rows(self))?;
        st.serialize_field("victims", &self.victims)?;
        st.serialize_field("tieAtCut", &self.tie_at_cut)?;
        st.serialize_field("ambiguity", &self.ambiguity)?;
        st.end()
    }
}

/// Everything `predict` found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prediction<'a> {
    /// The `now` used (RFC 3339).
    pub now: String,
    /// Gates used.
    pub feature_gates: FeatureGates,
    /// The Kubernetes version whose gate defaults apply: `--kubernetes-version`,
    /// else the one the input carries; `null`: the newest defaults.
    pub kubernetes_version: Option<String>,
    /// The `--scale-down-by` given.
    pub scale_down_by: Option<usize>,
    /// One entry per ReplicaSet, in the order described in `--help`.
    pub replica_sets: Vec<GroupPrediction<'a>>,
    /// Pods left out as inactive.
    pub inactive: Vec<InactivePod>,
}

impl PodPrediction<'_> {
    /// The row with its texts copied, outliving the pods it was read from.
    pub fn into_owned(self) -> PodPrediction<'static> {
        let own = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
        PodPrediction {
            namespace: own(self.namespace),
            name: own(self.name),
            uid: own(self.uid),
            node: own(self.node),
            phase: self.phase.map(own),
            cost_annotation: self.cost_annotation.map(own),
            ..self
        }
    }
}

fn timestamp(t: GoTime) -> Option<Timestamp> {
    t.and_then(|ns| Timestamp::from_nanosecond(ns).ok())
}

/// Orders `pods` per ReplicaSet. `related` (default: `pods`) feeds the
/// colocation rank. Pure: no I/O.
pub fn predict<'a>(
    settings: &Settings,
    pods: &'a [SlimPod],
    related: Option<&'a [SlimPod]>,
) -> Prediction<'a> {
    let now = go_time(Some(&Time(settings.now)));
    let cmp = Comparator {
        gates: settings.gates,
        now,
    };
    let on_node = Arc::new(PodsOnNode::count_slim(related.unwrap_or(pods)));
    let mut inactive = Vec::new();
    // key order = output order: owned groups by (kind, name, uid), then the unowned one
    let mut groups: BTreeMap<(bool, Option<&crate::comparator::ControllerRef>), Vec<&SlimPod>> =
        BTreeMap::new();
    for pod in pods {
        if let Some(reason) = pod.inactive_reason() {
            inactive.push(InactivePod {
                namespace: pod.namespace.to_string(),
                name: pod.name.to_string(),
                reason,
            });
            continue;
        }
        let owner = pod.owner.as_deref();
        groups
            .entry((owner.is_none(), owner))
            .or_default()
            .push(pod);
    }
    let replica_sets = groups
        .into_iter()
        .map(|((_, owner), members)| {
            let ranking = rank_slim(&cmp, &members, &on_node);
            let owner = owner.map(|o| OwnerRef {
                kind: o.kind.to_string(),
                name: o.name.to_string(),
                uid: o.uid.to_string(),
            });
            group_prediction(&cmp, settings, owner, members, &on_node, ranking)
        })
        .collect::<Vec<_>>();
    Prediction {
        now: settings.now.to_string(),
        feature_gates: settings.gates,
        kubernetes_version: settings.kubernetes_version.map(|v| v.to_string()),
        scale_down_by: settings.scale_down_by,
        replica_sets,
        inactive,
    }
}

/// The victims of a scale-in by `n` sync by sync ([`victims_in_syncs`]):
/// past one sync's worth the pods are keyed again, with their colocation
/// ranks, to rank what each sync leaves.
fn syncs_of(
    cmp: &Comparator,
    members: &[&SlimPod],
    on_node: &PodsOnNode,
    ranking: &Ranking,
    n: usize,
) -> Syncs {
    if n <= BURST_REPLICAS {
        return Syncs {
            victims: ranking.victims_in_order(n),
            syncs: usize::from(n > 0),
            tie_at_cut: ranking.tie_at_cut(n),
        };
    }
    let mut keys: Vec<RankKey> = members
        .iter()
        .map(|p| RankKey::from_slim(p).with_now(cmp.now))
        .collect();
    on_node.assign(&mut keys);
    victims_in_syncs(cmp, &keys, ranking, n, BURST_REPLICAS)
}

fn group_prediction<'a>(
    cmp: &Comparator,
    settings: &Settings,
    owner: Option<OwnerRef>,
    members: Vec<&'a SlimPod>,
    on_node: &Arc<PodsOnNode<'a>>,
    ranking: Ranking,
) -> GroupPrediction<'a> {
    // as the controller deletes them: in syncs of at most 500
    let syncs = settings
        .scale_down_by
        .map(|n| syncs_of(cmp, &members, on_node, &ranking, n));
    let victims = syncs.as_ref().map(|s| s.victims.clone());
    let is_victim = victims.as_ref().map(|v| {
        let mut is_victim = vec![false; members.len()];
        for &i in v {
            is_victim[i] = true;
        }
        is_victim
    });
    let ambiguity = ranking.ambiguity.as_ref().map(|a| AmbiguityReport {
        pods: a
            .pods
            .iter()
            .map(|&i| members[i].name.to_string())
            .collect(),
        rule: a.rule,
        explanation: format!(
            "the comparator is not a strict weak order on these pods ({}): upstream's \
             order among them depends on the order its informer lists them in",
            a.rule.describe()
        ),
    });
    GroupPrediction {
        owner,
        victims: victims.map(|v| v.iter().map(|&i| members[i].name.to_string()).collect()),
        tie_at_cut: syncs.as_ref().map(|s| s.tie_at_cut),
        ambiguity,
        is_victim,
        now_ns: settings.now.as_nanosecond(),
        members,
        ranking,
        on_node: on_node.clone(),
    }
}

/// Notes for stderr: inactive pods, unusual owners, ambiguous orders, cuts
/// inside ties, cross-group ranks. Bounded whatever the input's size: one
/// line per kind of problem (ambiguous orders: one per ReplicaSet for the
/// first [`LISTED`]), each naming the first [`LISTED`] items, then
/// "and K more" (`-o json` has them all).
pub fn notes(p: &Prediction, has_related: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if !p.inactive.is_empty() {
        notes.push(format!(
            "left out {} inactive pod(s): {}",
            p.inactive.len(),
            capped_list(
                p.inactive
                    .iter()
                    .map(|i| format!("{} ({})", i.name, i.reason)),
                LISTED
            )
        ));
    }
    let mut other_owners: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut ambiguous = Vec::new();
    let mut cut_in_tie = Vec::new();
    for g in &p.replica_sets {
        if let Some(o) = &g.owner {
            if o.kind != "ReplicaSet" && o.kind != "ReplicationController" {
                other_owners
                    .entry(o.kind.as_str())
                    .or_default()
                    .push(format!("{}/{}", o.kind, o.name));
            }
        }
        if let Some(a) = &g.ambiguity {
            ambiguous.push((OwnerRef::label(g.owner.as_ref()), a));
        }
        if g.tie_at_cut == Some(true) {
            cut_in_tie.push(OwnerRef::label(g.owner.as_ref()));
        }
    }
    for (kind, owners) in &other_owners {
        notes.push(format!(
            "pods of {}: a {kind} does not scale in with the ReplicaSet order",
            capped_list(owners, LISTED)
        ));
    }
    for (label, a) in ambiguous.iter().take(LISTED) {
        notes.push(format!(
            "{label}: order of {} is ambiguous: {}",
            capped_list(&a.pods, LISTED),
            a.explanation
        ));
    }
    if ambiguous.len() > LISTED {
        notes.push(format!(
            "and {} more ReplicaSets with an ambiguous order: {} (-o json has them all)",
            ambiguous.len() - LISTED,
            capped_list(ambiguous[LISTED..].iter().map(|(l, _)| l), LISTED)
        ));
    }
    if !cut_in_tie.is_empty() {
        notes.push(format!(
            "{}: the cut after {} pod(s) falls inside a tie; which tied pod goes depends on upstream's input order",
            capped_list(&cut_in_tie, LISTED),
            p.scale_down_by.unwrap_or(0)
        ));
    }
    if p.scale_down_by == Some(0) {
        notes.push(
            "--scale-down-by 0: scaling in by 0 deletes no pod, so there is no victim to print"
                .to_string(),
        );
    }
    if !has_related && p.replica_sets.len() > 1 {
        notes.push(format!(
            "{} ReplicaSets in the input: colocation ranks count all input pods as related; \
             pass --related or one Deployment's pods per call if they belong to different Deployments",
            p.replica_sets.len()
        ));
    }
    notes
}

/// One warning for every pod whose deletion-cost annotation Kubernetes
/// cannot read (`1e3`, `" 5"`, `0x10`, `2147483648`): upstream orders it as
/// 0, which `-o names` alone would not show. The table marks each such cost.
pub fn invalid_cost_warning(p: &Prediction) -> Option<String> {
    let invalid: Vec<String> = p
        .replica_sets
        .iter()
        .flat_map(GroupPrediction::slim_pods)
        .filter_map(|pod| {
            let problem = pod.cost.problem?;
            let raw = pod.cost_annotation.as_deref().unwrap_or_default();
            Some(format!("{} ({:?}: {problem})", pod.name, shortened(raw)))
        })
        .collect();
    crate::input::invalid_costs_warning(&invalid)
}

/// `-o names`.
pub fn render_names(p: &Prediction) -> String {
    let mut out = String::new();
    for g in &p.replica_sets {
        match &g.victims {
            Some(v) => v.iter().for_each(|n| {
                out.push_str(n);
                out.push('\n');
            }),
            None => g.slim_pods().for_each(|pod| {
                out.push_str(&pod.name);
                out.push('\n');
            }),
        }
    }
    out
}

/// `-o json`.
pub fn render_json(p: &Prediction) -> Result<String, CliError> {
    let mut s = serde_json::to_string_pretty(p)
        .map_err(|e| CliError::failure(format!("encoding JSON: {e}")))?;
    s.push('\n');
    Ok(s)
}

/// Ages like kubectl prints them: 45s, 12m, 5h3m, 3d4h, 40d.
pub fn human_age(secs: i64) -> String {
    if secs < 0 {
        return "future".into();
    }
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3_600, secs % 3_600 / 60);
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if secs < 3_600 => format!("{}m", secs / 60),
        _ if d == 0 && m == 0 => format!("{h}h"),
        _ if d == 0 => format!("{h}h{m}m"),
        _ if d < 8 && h > 0 => format!("{d}d{h}h"),
        _ => format!("{d}d"),
    }
}

fn cost_cell(pod: &PodPrediction) -> String {
    match (&pod.cost_problem, &pod.cost_annotation) {
        (Some(_), Some(raw)) => format!("{} (invalid {raw:?})", pod.cost),
        _ => pod.cost.to_string(),
    }
}

/// `-o table`.
pub fn render_table(p: &Prediction) -> String {
    let with_victims = p.scale_down_by.is_some();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut footers: Vec<String> = Vec::new();
    for g in &p.replica_sets {
        let label = OwnerRef::label(g.owner.as_ref());
        for pod in g.pods() {
            rows.push(table_row(&label, &pod, with_victims));
        }
        footers.extend(group_footers(&label, g, p.scale_down_by));
    }
    let no_rows = rows.is_empty();
    let header: Vec<String> = table_header(with_victims)
        .iter()
        .map(|h| h.to_string())
        .collect();
    let mut out = table::aligned(std::iter::once(header).chain(rows), "", 3);
    if no_rows {
        out.push_str("(no active pods)\n");
    }
    let gates = p.feature_gates;
    let _ = writeln!(
        out,
        "\nnow {}; PodDeletionCost={}, LogarithmicScaleDown={}{}",
        p.now,
        gates.pod_deletion_cost,
        gates.logarithmic_scale_down,
        p.kubernetes_version
            .as_ref()
            .map(|v| format!(" (Kubernetes {v} defaults)"))
            .unwrap_or_default()
    );
    for f in footers {
        out.push_str(&f);
        out.push('\n');
    }
    out
}

/// The table's columns; VICTIM only with `--scale-down-by`.
fn table_header(with_victims: bool) -> Vec<&'static str> {
    let mut header = vec![
        "REPLICASET",
        "#",
        "POD",
        "NODE",
        "PHASE",
        "READY",
        "COST",
        "RANK",
        "READY-AGE",
        "RESTARTS",
    ];
    if with_victims {
        header.push("VICTIM");
    }
    header.push("DECIDED-BY");
    header
}

/// One pod's row, under its ReplicaSet's `label`.
fn table_row(label: &str, pod: &PodPrediction, with_victims: bool) -> Vec<String> {
    let mut row = vec![
        label.to_string(),
        pod.position.to_string(),
        pod.name.to_string(),
        if pod.node.is_empty() {
            "<none>".into()
        } else {
            pod.node.to_string()
        },
        pod.phase.as_deref().unwrap_or("<none>").to_string(),
        if pod.ready { "True" } else { "False" }.into(),
        cost_cell(pod),
        pod.rank.to_string(),
        pod.ready_age_seconds.map_or_else(|| "-".into(), human_age),
        if pod.sidecar_restarts > 0 {
            format!("{} (+{} sidecar)", pod.restarts, pod.sidecar_restarts)
        } else {
            pod.restarts.to_string()
        },
    ];
    if with_victims {
        row.push(if pod.victim == Some(true) { "yes" } else { "" }.into());
    }
    row.push(pod.decided_by.map_or("-", |r| r.describe()).to_string());
    row
}

/// The lines under the table about one group: an ambiguous order, a cut
/// inside a tie.
fn group_footers(label: &str, g: &GroupPrediction, scale_down_by: Option<usize>) -> Vec<String> {
    let mut footers = Vec::new();
    if let Some(a) = &g.ambiguity {
        footers.push(format!(
            "{label}: AMBIGUOUS order of {}: {}",
            a.pods.join(", "),
            a.explanation
        ));
    }
    if g.tie_at_cut == Some(true) {
        footers.push(format!(
            "{label}: the cut after {} pod(s) falls inside a tie: which of the tied pods upstream deletes depends on its input order",
            scale_down_by.unwrap_or(0)
        ));
    }
    footers
}

/// The prediction in the asked format.
fn render(prediction: &Prediction, format: OutputFormat) -> Result<String, CliError> {
    Ok(match format {
        OutputFormat::Names => render_names(prediction),
        OutputFormat::Json => render_json(prediction)?,
        OutputFormat::Table => render_table(prediction),
    })
}

/// Reads pods; an input without pods, an item that is not a named Pod, or a
/// pod listed twice is bad input. Returns the source's name and the
/// Kubernetes version the input carries, if any.
fn load_pods(
    path: &str,
    limits: InputLimits,
) -> Result<(String, Vec<SlimPod>, Option<ServerVersion>), CliError> {
    read_pods_slim(path, limits).map_err(|e| pods_only(e, path))
}

/// A file read as pods (`-f`, `--related`) that holds other kinds: when it
/// is a cluster snapshot (Nodes, ReplicaSets...), the way to read one.
fn pods_only(e: InputError, path: &str) -> CliError {
    match &e {
        InputError::Shape { message, .. } if message.starts_with("expected a Pod, found kind") => {
            CliError::bad_input(format!(
                "{e}; this reads pods only: a cluster snapshot (pods with their nodes, \
                 ReplicaSets, Deployments) is ordered with `deletion-cost predict --snapshot \
                 {path}` and planned with `deletion-cost plan --snapshot {path}`"
            ))
        }
        _ => CliError::bad_input(e),
    }
}

/// The warning for pods without a UID, or `None` when every pod has one
/// (see [`crate::input::missing_uid_warning`]).
fn missing_uid_warning(source_name: &str, pods: &[SlimPod]) -> Option<String> {
    let missing: Vec<String> = pods
        .iter()
        .filter(|p| p.uid.is_empty())
        .map(|p| {
            if p.namespace.is_empty() {
                p.name.to_string()
            } else {
                format!("{}/{}", p.namespace, p.name)
            }
        })
        .collect();
    crate::input::uid_warning(source_name, &missing)
}

/// Runs `predict`: reads the inputs, orders, renders the whole output, then prints it.
pub fn run(args: PredictArgs) -> Result<(), CliError> {
    super::stderr::set_quiet(args.quiet);
    let mut settings = Settings::from_args(&args, Timestamp::now())?;
    if args.snapshot.is_some()
        || args.target.is_some()
        || args.selector.is_some()
        || args.cluster.any()
    {
        return run_selected(args, settings);
    }
    let file = args.file.as_deref().unwrap_or("-");
    if file == "-" && args.related.as_deref() == Some("-") {
        return Err(CliError::bad_input(
            "-f and --related cannot both read stdin (-)",
        ));
    }
    let limits = InputLimits {
        bytes: args.max_input_bytes,
        pods: args.max_pods,
    };
    // stdin is the default input: on a terminal, say so rather than wait in silence
    if file == "-" && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        super::stderr::note(
            "reading pods from standard input (end with Ctrl-D); or give -f FILE, \
             deployment/NAME -n NAMESPACE (the cluster), or --snapshot FILE",
        );
    }
    let (source, pods, version) = load_pods(file, limits)?;
    let mut empty_related = None;
    let (related, related_version) = match args.related.as_deref() {
        Some(path) => match read_pods_slim(path, limits) {
            Ok((_, pods, v)) => (Some(pods), v),
            // upstream takes an empty related set: every colocation rank is 0
            Err(InputError::NoPods {
                source_name,
                detail,
            }) if detail == EMPTY_LIST => {
                empty_related = Some(source_name);
                (Some(Vec::new()), None)
            }
            Err(e) => return Err(pods_only(e, path)),
        },
        None => (None, None),
    };
    let version = merge_versions(version, related_version).map_err(CliError::bad_input)?;
    let choice = args.gates.choose(version.as_ref())?;
    settings.gates = choice.gates;
    settings.kubernetes_version = choice.version;
    let prediction = predict(&settings, &pods, related.as_deref());
    let text = render(&prediction, args.output)?;
    if let Some(w) = missing_uid_warning(&source, &pods) {
        super::stderr::warn(&w);
    }
    if let Some(note) = super::cluster_flags::default_gates_note(&choice, &source) {
        super::stderr::note(&note);
    }
    if let Some(source) = empty_related {
        super::stderr::note(&format!(
            "--related {source}: the list is empty: no related pods, so every colocation rank (rule 5) is 0"
        ));
    }
    if let Some(w) = invalid_cost_warning(&prediction) {
        super::stderr::warn(&w);
    }
    for n in notes(&prediction, related.is_some()) {
        super::stderr::note(&n);
    }
    print_out(&text)
}

/// Where `predict KIND/NAME`, `-l`, `-n` or `-A` read: a snapshot, or the
/// live cluster.
pub(crate) struct Selected {
    /// The input's name in notes.
    pub source: String,
    /// The namespace asked for; `None`: all.
    pub namespace: Option<String>,
    /// What was read.
    pub snapshot: crate::plan::Snapshot,
    /// The version it carries.
    pub version: Option<ServerVersion>,
    /// The cluster's policies, when asked for (a live read only).
    pub policies: Vec<crate::input::RawObject>,
}

/// Reads `--snapshot`, else the live cluster; the namespace follows `-n`,
/// `-A`, else (a snapshot) every namespace, or `default` for a KIND/NAME,
/// else (live) the kubeconfig context's.
pub(crate) fn read_selected(
    snapshot: Option<&str>,
    cluster: &super::live::ClusterArgs,
    named: bool,
    limits: InputLimits,
    wants: super::live::Wants,
) -> Result<Selected, CliError> {
    match snapshot {
        Some(path) => {
            let (snapshot, version) = super::plan::load_snapshot(path, limits)?;
            let namespace = match (&cluster.namespace, cluster.all_namespaces, named) {
                (Some(ns), _, _) => Some(ns.clone()),
                (None, false, true) => Some("default".to_string()),
                _ => None,
            };
            Ok(Selected {
                source: if path == "-" {
                    "<stdin>".into()
                } else {
                    path.to_string()
                },
                namespace,
                snapshot,
                version,
                policies: Vec::new(),
            })
        }
        None => {
            let read = super::live::read(cluster, wants, limits)?;
            Ok(Selected {
                source: read.source,
                namespace: read.namespace,
                snapshot: read.snapshot,
                version: read.version,
                policies: read.policies,
            })
        }
    }
}

/// Each family's pods and related pods as slim records, for
/// [`predict_families`].
pub fn slim_families(families: &[Family]) -> Vec<(Vec<SlimPod>, Vec<SlimPod>)> {
    let slim = |pods: &[&_]| pods.iter().map(|p| SlimPod::from_pod(*p)).collect();
    families
        .iter()
        .map(|f| (slim(&f.pods), slim(&f.related)))
        .collect()
}

/// Orders each family's pods on its own, its related pods feeding the
/// colocation rank, and joins the answers in the order of `--help`. Pure.
pub fn predict_families<'a>(
    settings: &Settings,
    families: &'a [(Vec<SlimPod>, Vec<SlimPod>)],
) -> Prediction<'a> {
    let mut all: Option<Prediction<'a>> = None;
    for (pods, related) in families {
        let p = predict(settings, pods, Some(related));
        match &mut all {
            None => all = Some(p),
            Some(a) => {
                a.replica_sets.extend(p.replica_sets);
                a.inactive.extend(p.inactive);
            }
        }
    }
    let mut all = all.unwrap_or_else(|| predict(settings, &[], Some(&[][..])));
    // the same key order as one call's groups: owned by (kind, name, uid), then unowned
    all.replica_sets
        .sort_by(|a, b| (a.owner.is_none(), &a.owner).cmp(&(b.owner.is_none(), &b.owner)));
    all.inactive
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    all
}

/// `predict KIND/NAME`, `-l`, `-n`, `-A`: the pods named, from a snapshot
/// or the live cluster, each family ordered with its own related pods.
fn run_selected(args: PredictArgs, mut settings: Settings) -> Result<(), CliError> {
    let target = parse_workload(args.target.as_deref())?;
    let selector = args
        .selector
        .as_deref()
        .map(parse_selector)
        .transpose()
        .map_err(CliError::bad_input)?;
    let limits = InputLimits {
        bytes: args.max_input_bytes,
        pods: args.max_pods,
    };
    let read = read_selected(
        args.snapshot.as_deref(),
        &args.cluster,
        target.is_some(),
        limits,
        super::live::Wants::default(),
    )?;
    let families = select(
        &read.snapshot,
        &Query {
            namespace: read.namespace.as_deref(),
            target: target.as_ref(),
            selector: selector.as_ref(),
        },
    )
    .map_err(CliError::bad_input)?;
    let choice = args.gates.choose(read.version.as_ref())?;
    settings.gates = choice.gates;
    settings.kubernetes_version = choice.version;
    let slim = slim_families(&families);
    let prediction = predict_families(&settings, &slim);
    let text = render(&prediction, args.output)?;
    let pods: Vec<SlimPod> = families
        .iter()
        .flat_map(|f| &f.pods)
        .map(|p| SlimPod::from_pod(*p))
        .collect();
    if let Some(w) = missing_uid_warning(&read.source, &pods) {
        super::stderr::warn(&w);
    }
    if let Some(note) = super::cluster_flags::default_gates_note(&choice, &read.source) {
        super::stderr::note(&note);
    }
    if pods.is_empty() {
        note_no_pods(target.as_ref(), &read, args.selector.as_deref());
    }
    if let Some(w) = invalid_cost_warning(&prediction) {
        super::stderr::warn(&w);
    }
    for n in notes(&prediction, true) {
        super::stderr::note(&n);
    }
    print_out(&text)
}

/// The `KIND/NAME` given, if any; a pod is refused (`explain` places one).
fn parse_workload(given: Option<&str>) -> Result<Option<Target>, CliError> {
    let target = given
        .map(str::parse::<Target>)
        .transpose()
        .map_err(CliError::bad_input)?;
    if let Some(t) = target.as_ref().filter(|t| t.kind == TargetKind::Pod) {
        return Err(CliError::bad_input(format!(
            "{t}: predict orders the pods of a deployment/NAME or replicaset/NAME; for one pod's \
             place use `deletion-cost explain {t}`"
        )));
    }
    Ok(target)
}

/// Notes that what was asked for holds no pods: nothing to order.
fn note_no_pods(target: Option<&Target>, read: &Selected, selector: Option<&str>) {
    let what = match (target, &read.namespace) {
        (Some(t), Some(ns)) => format!("{t} in namespace {ns}"),
        (_, Some(ns)) => format!("namespace {ns}"),
        (_, None) => "any namespace".to_string(),
    };
    let labels = selector
        .map(|s| format!(" with labels {s}"))
        .unwrap_or_default();
    super::stderr::note(&format!(
        "no pods in {what}{labels} ({}): nothing to order",
        read.source
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(600), "10m");
        assert_eq!(human_age(3 * 3600), "3h");
        assert_eq!(human_age(3 * 3600 + 120), "3h2m");
        assert_eq!(human_age(2 * 86_400 + 3600), "2d1h");
        assert_eq!(human_age(40 * 86_400), "40d");
        assert_eq!(human_age(-1), "future");
    }
}
