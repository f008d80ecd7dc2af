//! `deletion-cost plan`: an offline dry run of a policy over a cluster
//! snapshot. With no arguments it runs the bundled example.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use clap::ValueEnum;

use super::source::{
    embedded_within_limit, open_within_limit, read_embedded_limited, read_source_limited,
};
use super::{print_out, table, CliError};
use crate::comparator::parse_deletion_cost;
use crate::input::{
    missing_uid_warning, parse_objects, Expect, InputLimits, RawObject, ServerVersion,
};
use crate::input::{parse_prices, policies_from, PolicyFileError, SnapshotReader};
use crate::owner;
use crate::plan::prices::Prices;
use crate::plan::savings::{
    cores, freed_list, memory, plan_savings, signed, Choice, Difference, Savings,
};
use crate::plan::{self, CostOwner, NamedPolicy, Plan, PlanOptions, Snapshot, Verdict};
use crate::policy::overlap;
use crate::policy::selector::selects;
use crate::policy::{DeletionCostPolicy, Writes};
use crate::report::{Report, Section};
use crate::signals::SignalSamples;
use crate::text::{capped_list, shortened, LISTED};

/// The bundled example (also in `config/examples/`), embedded so the command
/// works wherever the binary is installed.
const EXAMPLE_POLICY: (&str, &str) = (
    "config/examples/combined.yaml",
    include_str!("../../config/examples/combined.yaml"),
);
const EXAMPLE_CLUSTER: (&str, &str) = (
    "config/examples/cluster.yaml",
    include_str!("../../config/examples/cluster.yaml"),
);
const EXAMPLE_SAMPLES: (&str, &str) = (
    "config/examples/samples.json",
    include_str!("../../config/examples/samples.json"),
);
/// The moment the bundled example records: its samples were taken then, so
/// it is planned as of then unless `--now` says otherwise (as of the current
/// time every sample would be stale, and the example would plan nothing).
pub const EXAMPLE_NOW: &str = "2026-11-22T03:00:00Z";

/// Output format of `plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// A readable table per policy.
    Table,
    /// The full plan as JSON.
    Json,
    /// One self-contained HTML page: the plan as a picture, a section per policy.
    Html,
}

/// Flags of `plan`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "With no --policy and no --snapshot, runs the bundled example, the \
same as `--policy config/examples/combined.yaml --snapshot config/examples/cluster.yaml \
--samples config/examples/samples.json --scale-down-by 2 --now 2026-11-22T03:00:00Z` \
(the moment its samples were taken).\n\n\
The snapshot is what `kubectl get pods,nodes,replicasets,deployments -A -o yaml` \
prints (JSON works too); a directory means every .yaml/.yml/.json file in it.\n\n\
The comparator's gates follow the cluster's version: --kubernetes-version, else the \
version the snapshot carries (what `kubectl version -o json|yaml` prints, as one more \
YAML document or file of the directory), else the newest defaults (a note says so)."
)]
pub struct PlanArgs {
    /// Policy file (YAML or JSON; several policies may be listed).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<String>,
    /// Cluster snapshot file or directory.
    #[arg(long, value_name = "FILE|DIR")]
    pub snapshot: Option<String>,
    /// Utilisation samples: a saved Prometheus query response, or the
    /// documented JSON/CSV forms.
    #[arg(long, value_name = "FILE", conflicts_with = "prometheus")]
    pub samples: Option<String>,
    /// Query this Prometheus for utilisation signals.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Predict the victims of scaling each ReplicaSet down by N.
    // hyphen values allowed so `-1` is reported as a bad N, not an unknown flag
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = super::cluster_flags::parse_pod_count)]
    pub scale_down_by: Option<usize>,
    /// Hourly node prices (YAML or JSON: billingClasses, optionally
    /// instanceTypes): with --scale-down-by, show what the nodes the
    /// victims empty are worth, against upstream's choice without the
    /// policy's costs.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<String>,
    /// Time used for the comparator's log2 buckets (RFC 3339; default: now).
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// The cluster's feature gates.
    #[command(flatten)]
    pub gates: super::cluster_flags::GateFlags,
    /// Stop with exit 2 on an input larger than this (each file of --policy,
    /// --snapshot, --samples and --prices, and stdin):
    /// bytes, or with a unit (512Mi, 2Gi, 500M).
    // hyphen values allowed so `-5` is reported as a bad size, not an unknown flag
    #[arg(long, value_name = "SIZE", default_value = crate::input::DEFAULT_MAX_INPUT, allow_hyphen_values = true, value_parser = crate::input::parse_size)]
    pub max_input_bytes: u64,
    /// Stop with exit 2 on an input holding more pods than this in --snapshot
    /// (its files together).
    #[arg(long, value_name = "N", default_value_t = crate::input::DEFAULT_MAX_PODS, allow_hyphen_values = true, value_parser = super::cluster_flags::parse_pod_limit)]
    pub max_pods: u64,
    /// Print no notes on stderr (warnings and errors still go out).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = PlanFormat::Table)]
    pub output: PlanFormat,
    /// The cluster to read (without --snapshot: its pods, nodes,
    /// ReplicaSets, Deployments and, without --policy, its policies) and
    /// its namespaces; with --snapshot, -n plans only that namespace's
    /// policies.
    #[command(flatten)]
    pub cluster: super::live::ClusterArgs,
}

/// Reads a snapshot file, stdin (`-`), or every manifest in a directory
/// (sorted by name), streaming JSON as it arrives ([`SnapshotReader`]). A
/// snapshot without pods, a Pod without a name, and a pod listed twice (same
/// namespace and name, or same UID, across all its files) are bad input.
pub(crate) fn load_snapshot(
    path: &str,
    limits: InputLimits,
) -> Result<(Snapshot, Option<ServerVersion>), CliError> {
    let mut reader = SnapshotReader::new(limits);
    let p = Path::new(path);
    if path == "-" {
        reader
            .read("<stdin>", super::source::stdin(), 0)
            .map_err(CliError::bad_input)?;
    } else if p.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(p)
            .map_err(|e| {
                CliError::bad_input(format!(
                    "{path}: cannot read directory: {}",
                    crate::input::io_error_text(&e)
                ))
            })?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|f| {
                matches!(
                    f.extension().and_then(|x| x.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(CliError::bad_input(format!(
                "{path}: no .yaml, .yml or .json files"
            )));
        }
        for f in files {
            read_file(&mut reader, &f.to_string_lossy(), limits.bytes)?;
        }
    } else {
        read_file(&mut reader, path, limits.bytes)?;
    }
    checked_snapshot(if path == "-" { "<stdin>" } else { path }, reader)
}

fn read_file(reader: &mut SnapshotReader, path: &str, max_bytes: u64) -> Result<(), CliError> {
    let (file, size) = open_within_limit(path, max_bytes).map_err(CliError::bad_input)?;
    reader.read(path, file, size).map_err(CliError::bad_input)
}

/// The snapshot read from `source`, once checked; a warning for pods
/// without a UID.
pub(crate) fn checked_snapshot(
    source: &str,
    reader: SnapshotReader,
) -> Result<(Snapshot, Option<ServerVersion>), CliError> {
    let read = reader.finish().map_err(CliError::bad_input)?;
    if read.snapshot.pods.is_empty() {
        return Err(CliError::bad_input(format!(
            "no pods in {source} ({}; use `kubectl get pods,nodes,replicasets,deployments -A -o yaml`)",
            read.held
        )));
    }
    if let Some(w) = missing_uid_warning(source, &read.snapshot.pods) {
        super::stderr::warn(&w);
    }
    Ok((read.snapshot, read.version))
}

/// One policy of the `--policy` file, as planned.
pub struct FilePolicy {
    /// The checked, resolved policy.
    pub named: NamedPolicy,
    /// The object as read: its metadata decides overlaps, as in the operator.
    pub object: DeletionCostPolicy,
    /// Warnings about the file itself (a policy given twice).
    pub warnings: Vec<String>,
}

/// Decodes, checks (strictly, as the API server) and resolves every policy
/// in the objects read from `source`; errors name the file, the policy and
/// the field. A policy given twice (same namespace and name) is kept once,
/// as `kubectl apply -f` leaves it: the last one, with a warning naming the
/// earlier.
pub(crate) fn policies(source: &str, objects: &[RawObject]) -> Result<Vec<FilePolicy>, CliError> {
    let found = policies_from(objects).map_err(CliError::bad_input)?;
    if found.is_empty() {
        return Err(CliError::bad_input(PolicyFileError::NoPolicy {
            source_name: source.to_string(),
            found: crate::input::held_kinds(objects),
        }));
    }
    let mut out: Vec<(String, FilePolicy)> = Vec::new();
    for p in found {
        let spec = p.validate().map_err(CliError::bad_input)?;
        let named = NamedPolicy {
            name: p.name().to_string(),
            namespace: p
                .policy
                .metadata
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "default".into()),
            spec,
        };
        let mut warnings = Vec::new();
        if let Some(i) = out
            .iter()
            .position(|(_, f)| f.named.namespace == named.namespace && f.named.name == named.name)
        {
            let (earlier, _) = out.remove(i);
            warnings.push(format!(
                "{source}: {} and {earlier} are both DeletionCostPolicy {}: the API server \
                 holds one object per name, so `kubectl apply -f {source}` keeps the last; \
                 it is the one planned, {earlier} is left out",
                p.location,
                named.key()
            ));
        }
        out.push((
            p.location.clone(),
            FilePolicy {
                named,
                object: p.policy,
                warnings,
            },
        ));
    }
    Ok(out.into_iter().map(|(_, f)| f).collect())
}

/// For the policy `i` of `all`: the pods it leaves to older policies that
/// also select them, and a warning saying which policy wins which pods, as
/// the operator decides ([`overlap`]: older creationTimestamp, then
/// smaller name); the operator marks the loser `Conflict`.
fn overlaps(
    i: usize,
    all: &[FilePolicy],
    selected: &[Option<BTreeSet<String>>],
) -> (BTreeSet<String>, Vec<String>) {
    let me = &all[i];
    let Some(mine) = &selected[i] else {
        return (BTreeSet::new(), Vec::new());
    };
    let others = all
        .iter()
        .zip(selected)
        .enumerate()
        .filter(|(j, _)| *j != i)
        .filter_map(|(_, (other, theirs))| Some((other, &other.object, theirs.as_ref()?)));
    let found = overlap::overlaps(&me.object, mine, others);
    let describe = |list: &[(&FilePolicy, usize)], winner_first: bool| -> Vec<String> {
        list.iter()
            .map(|(other, shared)| {
                let why = if winner_first {
                    overlap::why_wins(&other.object, &me.object)
                } else {
                    overlap::why_wins(&me.object, &other.object)
                };
                format!("{} ({shared} pod(s); {why})", other.named.key())
            })
            .collect()
    };
    let (lost, won) = (
        describe(&found.lost_to, true),
        describe(&found.won_from, false),
    );
    let mut warnings = Vec::new();
    if !lost.is_empty() {
        warnings.push(format!(
            "shares pods with policies that win them, as the operator decides (it marks this \
             policy Conflict); those pods are planned under the winner only: {}",
            capped_list(&lost, LISTED)
        ));
    }
    if !won.is_empty() {
        warnings.push(format!(
            "wins the pods it shares with {}, as the operator decides; those policies leave \
             them alone",
            capped_list(&won, LISTED)
        ));
    }
    (found.excluded, warnings)
}

/// Warnings for a plan that does nothing although it exits 0: no pod in the
/// policy's namespace (naming the namespaces where its target does select
/// pods), no pod selected (unless others win them all: `excluded`, said
/// apart), or a utilisation signal without samples.
pub fn idle_warnings(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    plan: &Plan,
    has_samples: bool,
    excluded: &BTreeSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let ns = policy.namespace.as_str();
    let in_ns = snapshot
        .pods
        .iter()
        .filter(|p| p.identity.namespace.as_deref().unwrap_or_default() == ns)
        .count();
    let target = describe_target(policy);
    if in_ns == 0 {
        let elsewhere = namespaces_selected(policy, snapshot);
        let hint = if elsewhere.is_empty() {
            format!("no namespace in the snapshot has pods {target} selects")
        } else {
            let list: Vec<String> = elsewhere
                .iter()
                .map(|(ns, n)| format!("{ns} ({n})"))
                .collect();
            format!(
                "{target} selects pods in other namespaces: {} (is metadata.namespace right?)",
                list.join(", ")
            )
        };
        out.push(format!(
            "no pods in namespace {ns} in the snapshot: nothing to plan; {hint}"
        ));
    } else if plan.pods.is_empty() && excluded.is_empty() {
        let inactive = if plan.inactive.is_empty() {
            String::new()
        } else {
            format!(" ({} inactive left out)", plan.inactive.len())
        };
        out.push(format!(
            "{target} selects no active pod among the {in_ns} pod(s) of namespace {ns}{inactive}: nothing to plan"
        ));
    }
    if !has_samples {
        for (index, _) in policy.spec.utilization_signals() {
            out.push(format!(
                "spec.signals[{index}] (utilization) has no samples: give --samples FILE or \
                 --prometheus URL; without them every pod reads \"no sample\" and is handled \
                 by onSignalMissing: {}",
                on_missing_name(policy.spec.on_signal_missing)
            ));
        }
    }
    out
}

fn on_missing_name(o: crate::policy::OnSignalMissing) -> &'static str {
    match o {
        crate::policy::OnSignalMissing::KeepLastValue => "keepLastValue",
        crate::policy::OnSignalMissing::Skip => "skip",
        crate::policy::OnSignalMissing::UseDefault => "useDefault",
    }
}

/// `selector app=web` or `targetRef Deployment/web`.
fn describe_target(policy: &NamedPolicy) -> String {
    use crate::policy::validate::Target;
    match &policy.spec.target {
        Target::Selector(sel) => {
            let mut parts: Vec<String> = sel
                .match_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            parts.extend(sel.match_expressions.iter().map(|e| {
                if e.values.is_empty() {
                    format!("{} {}", e.key, e.operator)
                } else {
                    format!("{} {} ({})", e.key, e.operator, e.values.join(", "))
                }
            }));
            format!("selector {}", parts.join(","))
        }
        Target::Workload(t) => format!("targetRef {:?}/{}", t.kind, t.name),
    }
}

/// Other namespaces where the policy's target selects active pods, with
/// how many, sorted by namespace: as if the policy lived there.
fn namespaces_selected(policy: &NamedPolicy, snapshot: &Snapshot) -> Vec<(String, usize)> {
    use crate::policy::validate::Target;
    fn ns_of(namespace: &Option<String>) -> &str {
        namespace.as_deref().unwrap_or_default()
    }
    // candidates first (one pass), so a large snapshot is not planned per namespace
    let mut namespaces: Vec<&str> = match &policy.spec.target {
        Target::Selector(sel) => {
            let sel = sel.to_selector();
            snapshot
                .pods
                .iter()
                .filter(|p| selects(&sel, p.labels()))
                .map(|p| ns_of(&p.identity.namespace))
                .collect()
        }
        Target::Workload(t) => snapshot
            .replica_sets
            .iter()
            .filter(|rs| {
                rs.metadata.name.as_deref() == Some(t.name.as_str())
                    || owner::of_deployment(rs, &t.name)
            })
            .map(|rs| ns_of(&rs.metadata.namespace))
            .collect(),
    };
    namespaces.retain(|ns| *ns != policy.namespace);
    namespaces.sort_unstable();
    namespaces.dedup();
    namespaces
        .into_iter()
        .filter_map(|ns| {
            let moved = NamedPolicy {
                namespace: ns.to_string(),
                ..policy.clone()
            };
            let n = plan::selected_pods(&moved, snapshot).len();
            (n > 0).then(|| (ns.to_string(), n))
        })
        .collect()
}

/// Reads and checks `--prices`, which needs a scale-down: `--scale-down-by`,
/// or the bundled example's.
fn load_prices(args: &PlanArgs, bundled: bool) -> Result<Option<Prices>, CliError> {
    let Some(path) = &args.prices else {
        return Ok(None);
    };
    if args.scale_down_by.is_none() && !bundled {
        return Err(CliError::bad_input(
            "--prices needs --scale-down-by N: what is priced are the nodes that scaling \
             each ReplicaSet down by N would empty",
        ));
    }
    let (name, text) = read_source_limited(path, args.max_input_bytes, Expect::Text)
        .map_err(CliError::bad_input)?;
    parse_prices(&name, &text)
        .map(Some)
        .map_err(CliError::bad_input)
}

/// Runs `plan`.
pub fn run(args: PlanArgs) -> Result<(), CliError> {
    super::stderr::set_quiet(args.quiet);
    let live = args.snapshot.is_none() && args.cluster.any();
    let bundled = args.policy.is_none() && args.snapshot.is_none() && !live;
    let prices = load_prices(&args, bundled)?;
    // bad flags fail before any input is read
    args.gates.resolve()?;
    if let (Some(_), Some(flag)) = (&args.snapshot, args.cluster.connection()) {
        return Err(CliError::bad_input(format!(
            "--snapshot and {flag} go apart: read a saved snapshot, or the live cluster"
        )));
    }
    let inputs = match (live, bundled) {
        (true, _) => read_live(&args)?,
        (false, true) => read_bundled(&args)?,
        (false, false) => read_files(&args)?,
    };
    let mut file_policies = policies(&inputs.policy_source, &inputs.policy_objs)?;
    if let (Some(ns), false) = (&args.cluster.namespace, live) {
        file_policies.retain(|f| &f.named.namespace == ns);
        if file_policies.is_empty() {
            return Err(CliError::bad_input(format!(
                "-n {ns}: no DeletionCostPolicy of namespace {ns} in {}",
                inputs.policy_source
            )));
        }
    }
    let snapshot_name = match (args.snapshot.as_deref(), &inputs.live_source) {
        (Some("-"), _) => "<stdin>",
        (Some(path), _) => path,
        (None, Some(source)) => source.as_str(),
        (None, None) => EXAMPLE_CLUSTER.0,
    };
    let moment = Moment::of(&args, bundled)?;
    let choice = args.gates.choose(inputs.version.as_ref())?;
    if let Some(note) = super::cluster_flags::default_gates_note(&choice, snapshot_name) {
        super::stderr::note(&note);
    }
    let opts = PlanOptions {
        gates: choice.gates,
        now: Some(moment.now),
        scale_down_by: args.scale_down_by.or(bundled.then_some(2)),
        assume_patches_applied: true,
        chunks: Default::default(),
    };
    let snapshot = inputs.snapshot;
    let plans = plan_each(
        &args,
        bundled,
        &file_policies,
        &snapshot,
        &moment,
        &opts,
        prices.as_ref(),
    )?;
    let policies: Vec<NamedPolicy> = file_policies.into_iter().map(|f| f.named).collect();
    for line in warning_lines(&plans) {
        super::stderr::warn(&line);
    }
    for (kind, n) in &snapshot.ignored {
        tracing::debug!(kind = %kind, count = n, "snapshot objects not read");
    }
    let source = format!(
        "deletion-cost plan: {} over {}",
        inputs.policy_source, snapshot_name
    );
    write_plans(
        args.output,
        &plans,
        &policies,
        snapshot,
        &opts,
        source,
        &moment.text,
    )
}

/// What `plan` reads: the policies and the cluster.
struct Inputs {
    policy_source: String,
    policy_objs: Vec<RawObject>,
    snapshot: Snapshot,
    version: Option<ServerVersion>,
    /// The live cluster's name, when it was read.
    live_source: Option<String>,
}

/// Refuses more than one of `flags` reading stdin (`-`).
fn one_stdin_reader(flags: &[(&str, Option<&str>)]) -> Result<(), CliError> {
    let readers: Vec<&str> = flags
        .iter()
        .filter(|(_, path)| *path == Some("-"))
        .map(|(flag, _)| *flag)
        .collect();
    if readers.len() > 1 {
        return Err(CliError::bad_input(format!(
            "{} cannot all read stdin (-): give files for all but one",
            readers.join(" and ")
        )));
    }
    Ok(())
}

/// The live cluster, and the policies of `--policy` or of the cluster.
fn read_live(args: &PlanArgs) -> Result<Inputs, CliError> {
    one_stdin_reader(&[
        ("--policy", args.policy.as_deref()),
        ("--samples", args.samples.as_deref()),
        ("--prices", args.prices.as_deref()),
    ])?;
    let read = super::live::read(
        &args.cluster,
        super::live::Wants {
            nodes: true,
            policies: args.policy.is_none(),
            ..Default::default()
        },
        InputLimits {
            bytes: args.max_input_bytes,
            pods: args.max_pods,
        },
    )?;
    let (policy_source, policy_objs) = match &args.policy {
        Some(policy) => read_policy_file(policy, args.max_input_bytes)?,
        None if read.policies.is_empty() => {
            let place = read.namespace.as_deref().map_or_else(
                || "any namespace".to_string(),
                |ns| format!("namespace {ns}"),
            );
            return Err(CliError::bad_input(format!(
                "no DeletionCostPolicy in {place} of {}: nothing to plan; give one with \
                 --policy FILE to try it before applying it",
                read.source
            )));
        }
        None => (read.source.clone(), read.policies),
    };
    Ok(Inputs {
        policy_source,
        policy_objs,
        snapshot: read.snapshot,
        version: read.version,
        live_source: Some(read.source),
    })
}

/// The bundled example: its policy and its cluster, read as the same
/// files given with --policy and --snapshot are (the same limits, in the
/// same order).
fn read_bundled(args: &PlanArgs) -> Result<Inputs, CliError> {
    let policy = read_embedded_limited(EXAMPLE_POLICY, args.max_input_bytes, Expect::Manifest)
        .map_err(CliError::bad_input)?;
    let policy_objs = parse_objects(EXAMPLE_POLICY.0, &policy).map_err(CliError::bad_input)?;
    let (name, text) = EXAMPLE_CLUSTER;
    embedded_within_limit(name, text, args.max_input_bytes).map_err(CliError::bad_input)?;
    let mut reader = SnapshotReader::new(InputLimits {
        bytes: args.max_input_bytes,
        pods: args.max_pods,
    });
    reader
        .read(name, text.as_bytes(), text.len() as u64)
        .map_err(CliError::bad_input)?;
    let (snapshot, version) = checked_snapshot(name, reader)?;
    Ok(Inputs {
        policy_source: EXAMPLE_POLICY.0.to_string(),
        policy_objs,
        snapshot,
        version,
        live_source: None,
    })
}

/// `--policy FILE --snapshot FILE`.
fn read_files(args: &PlanArgs) -> Result<Inputs, CliError> {
    let (Some(policy), Some(snapshot)) = (&args.policy, &args.snapshot) else {
        return Err(CliError::bad_input(
            "--policy and --snapshot go together (give neither to run the bundled example; \
             -n NAMESPACE or -A reads the live cluster instead of --snapshot)",
        ));
    };
    one_stdin_reader(&[
        ("--policy", Some(policy.as_str())),
        ("--snapshot", Some(snapshot.as_str())),
        ("--samples", args.samples.as_deref()),
        ("--prices", args.prices.as_deref()),
    ])?;
    let (policy_source, policy_objs) = read_policy_file(policy, args.max_input_bytes)?;
    let (snapshot, version) = load_snapshot(
        snapshot,
        InputLimits {
            bytes: args.max_input_bytes,
            pods: args.max_pods,
        },
    )?;
    Ok(Inputs {
        policy_source,
        policy_objs,
        snapshot,
        version,
        live_source: None,
    })
}

/// A policy file's name and objects.
fn read_policy_file(path: &str, max_bytes: u64) -> Result<(String, Vec<RawObject>), CliError> {
    let (name, text) =
        read_source_limited(path, max_bytes, Expect::Manifest).map_err(CliError::bad_input)?;
    let objects = parse_objects(&name, &text).map_err(CliError::bad_input)?;
    Ok((name, objects))
}

/// The moment planned for, and where it came from.
struct Moment {
    /// Nanoseconds since the epoch.
    now: i128,
    /// To the second (the clock's nanoseconds are noise to a reader).
    text: String,
    from: super::samples_input::NowFrom,
}

impl Moment {
    fn of(args: &PlanArgs, bundled: bool) -> Result<Self, CliError> {
        // the bundled example is planned as of the moment it records
        let default_now = match bundled {
            true => EXAMPLE_NOW
                .parse()
                .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()),
            false => k8s_openapi::jiff::Timestamp::now(),
        };
        let now =
            super::cluster_flags::parse_now(args.now.as_deref(), default_now)?.as_nanosecond();
        let from = match (&args.now, bundled) {
            (Some(_), _) => super::samples_input::NowFrom::Flag,
            (None, true) => super::samples_input::NowFrom::Example,
            (None, false) => super::samples_input::NowFrom::Clock,
        };
        let text =
            k8s_openapi::jiff::Timestamp::from_second((now.div_euclid(1_000_000_000)) as i64)
                .map(|t| t.to_string())
                .unwrap_or_default();
        Ok(Self { now, text, from })
    }
}

/// One plan per policy, each with its warnings and savings.
fn plan_each(
    args: &PlanArgs,
    bundled: bool,
    file_policies: &[FilePolicy],
    snapshot: &Snapshot,
    moment: &Moment,
    opts: &PlanOptions,
    prices: Option<&Prices>,
) -> Result<Vec<Plan>, CliError> {
    // the pods each selects, where another policy of its namespace may share them
    let selected: Vec<Option<BTreeSet<String>>> = file_policies
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let shares_namespace = file_policies
                .iter()
                .enumerate()
                .any(|(j, g)| j != i && g.named.namespace == f.named.namespace);
            shares_namespace.then(|| plan::selected_pods(&f.named, snapshot))
        })
        .collect();
    let mut plans = Vec::new();
    for (i, file_policy) in file_policies.iter().enumerate() {
        let policy = &file_policy.named;
        let (excluded, overlap_warnings) = overlaps(i, file_policies, &selected);
        let samples = samples_for(args, bundled, policy, moment)?;
        let mut p = plan::plan_as_written(
            policy,
            snapshot,
            &samples.samples,
            &Default::default(),
            opts,
            &excluded,
        );
        // samples matter only to a plan with pods (one without says why)
        if let Some(source) = samples.file.as_ref().filter(|_| !p.pods.is_empty()) {
            let planned: BTreeSet<&str> = p
                .pods
                .iter()
                .map(|pod| &*pod.name)
                .chain(p.inactive.iter().map(String::as_str))
                .chain(excluded.iter().map(String::as_str))
                .collect();
            let found =
                super::samples_input::content_warnings(source, policy, &samples.samples, &planned);
            p.warnings.extend(found);
        }
        p.warnings.extend(file_policy.warnings.iter().cloned());
        p.warnings.extend(overlap_warnings);
        if !p.pods.is_empty() {
            p.warnings.extend(samples.stale);
        }
        p.warnings.extend(invalid_cost_warning(&p));
        let has_samples = bundled || args.samples.is_some() || args.prometheus.is_some();
        p.warnings
            .extend(idle_warnings(policy, snapshot, &p, has_samples, &excluded));
        if let Some(prices) = prices {
            let (savings, warnings) = plan_savings(policy, snapshot, &p, prices, opts);
            p.warnings.extend(warnings);
            p.savings = Some(savings);
        }
        plans.push(p);
    }
    Ok(plans)
}

/// A policy's signal samples, the file they came from and their staleness.
struct PolicySamples {
    samples: SignalSamples,
    file: Option<String>,
    stale: Vec<String>,
}

/// The samples of `--samples`, the bundled example, `--prometheus`, or none.
fn samples_for(
    args: &PlanArgs,
    bundled: bool,
    policy: &NamedPolicy,
    moment: &Moment,
) -> Result<PolicySamples, CliError> {
    let bundled_samples = bundled && args.samples.is_none() && args.prometheus.is_none();
    if bundled_samples || args.samples.is_some() {
        let (name, text) = match &args.samples {
            Some(path) => read_source_limited(path, args.max_input_bytes, Expect::Text)
                .map_err(CliError::bad_input)?,
            None => (
                EXAMPLE_SAMPLES.0.to_string(),
                read_embedded_limited(EXAMPLE_SAMPLES, args.max_input_bytes, Expect::Text)
                    .map_err(CliError::bad_input)?,
            ),
        };
        // judged as of --now, else of the current time (the bundled
        // example's: its moment), as the same file given with --samples:
        // never silently fresh
        let now_secs = (moment.now / 1_000_000_000) as f64;
        let samples = super::samples_input::load(&name, &text, policy, Some(now_secs))?;
        let stale = super::samples_input::stale_warnings(
            &name,
            policy,
            &samples,
            &moment.text,
            moment.from,
        )
        .into_iter()
        .collect();
        return Ok(PolicySamples {
            samples,
            file: Some(name),
            stale,
        });
    }
    let samples = match &args.prometheus {
        Some(url) => super::samples_input::query(url, policy)?,
        None => SignalSamples::default(),
    };
    Ok(PolicySamples {
        samples,
        file: None,
        stale: Vec::new(),
    })
}

/// Writes the plans in `format`; the snapshot goes as soon as it is not read.
fn write_plans(
    format: PlanFormat,
    plans: &[Plan],
    policies: &[NamedPolicy],
    snapshot: Snapshot,
    opts: &PlanOptions,
    source: String,
    now_text: &str,
) -> Result<(), CliError> {
    let text = match format {
        PlanFormat::Json => {
            // the JSON goes out as it is written (a 100k-pod plan is ~75 MB of it)
            drop(snapshot);
            return print_json(plans);
        }
        PlanFormat::Table => {
            drop(snapshot);
            plans
                .iter()
                .zip(policies)
                .map(|(p, pol)| render_table(p, pol, opts))
                .collect::<Vec<_>>()
                .join("\n")
        }
        PlanFormat::Html => {
            // the page reads the nodes' labels; the pods go now
            let nodes = { snapshot }.nodes;
            let report = Report {
                source,
                now: Some(now_text.to_string()).filter(|t| !t.is_empty()),
                sections: plans
                    .iter()
                    .zip(policies)
                    .map(|(p, pol)| Section::new(pol, p, &nodes, opts))
                    .collect(),
            };
            // written as it is made: a 100k-pod page is ~120 MB
            return write_stdout(|out| crate::report::html::render_to(&report, out));
        }
    };
    print_out(&text)
}

/// One warning for the plan's pods whose current deletion-cost annotation
/// Kubernetes cannot read (`1e3`, `" 5"`, `0x10`, `2147483648`): upstream
/// orders them as 0 until a patch replaces the value (a foreign one is
/// left alone under respectForeignCosts, so it stays 0). The table marks each.
pub fn invalid_cost_warning(p: &Plan) -> Option<String> {
    let invalid: Vec<String> = p
        .pods
        .iter()
        .filter_map(|pod| {
            let raw = pod.current_raw.as_deref()?;
            let problem = parse_deletion_cost(raw).problem?;
            let whose = match pod.action {
                crate::plan::CostAction::Patch(_) => "this plan rewrites it",
                _ => "left as it is",
            };
            Some(format!(
                "{} ({:?}: {problem}; {whose})",
                pod.name,
                shortened(raw)
            ))
        })
        .collect();
    crate::input::invalid_costs_warning(&invalid)
}

/// At most this many warning lines on stderr, then one saying how many more.
const MAX_WARNING_LINES: usize = 20;

/// The plans' warnings for stderr, bounded whatever the input's size: one
/// line per distinct warning, naming the policies that raise it (the first
/// [`LISTED`], then "and K more"), at most `MAX_WARNING_LINES` of them,
/// then how many more; `-o json` carries every one in each plan's
/// `warnings`.
pub fn warning_lines(plans: &[Plan]) -> Vec<String> {
    let mut order: Vec<&str> = Vec::new();
    let mut raised_by: HashMap<&str, Vec<String>> = HashMap::new();
    for p in plans {
        for w in &p.warnings {
            let policies = raised_by.entry(w.as_str()).or_insert_with(|| {
                order.push(w.as_str());
                Vec::new()
            });
            policies.push(p.policy.to_string());
        }
    }
    let mut lines: Vec<String> = order
        .iter()
        .map(|w| match raised_by[w].as_slice() {
            [one] => format!("policy {one}: {w}"),
            many => format!(
                "{} policies ({}): {w}",
                many.len(),
                capped_list(many, LISTED)
            ),
        })
        .collect();
    if lines.len() > MAX_WARNING_LINES {
        let more = lines.len() - MAX_WARNING_LINES;
        lines.truncate(MAX_WARNING_LINES);
        lines.push(format!(
            "and {more} more warning(s) (-o json lists every one in each plan's warnings)"
        ));
    }
    lines
}

/// Writes the plans to stdout as pretty JSON and a newline, without
/// building the text first.
fn print_json(plans: &[Plan]) -> Result<(), CliError> {
    write_stdout(|out| {
        serde_json::to_writer_pretty(&mut *out, plans)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
    })
}

/// Runs `write` on buffered stdout and flushes it.
fn write_stdout(
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    let written = write(&mut out).and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(()),
        // a closed pipe (`| head`) is not an error worth reporting
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failure(format!("writing stdout: {e}"))),
    }
}

/// The human view of one policy's plan.
pub fn render_table(p: &Plan, policy: &NamedPolicy, opts: &PlanOptions) -> String {
    let mut out = String::new();
    let kinds: Vec<&str> = policy.spec.signals.iter().map(|s| s.kind_name()).collect();
    let max_cost = match (policy.spec.max_cost, policy.spec.ranked_max_cost()) {
        (_, Some(m)) => format!("; maxCost {m}: written as ranks"),
        (Some(m), None) => format!("; maxCost {m}"),
        (None, None) => String::new(),
    };
    let writes = match p.writes {
        Writes::Continuous => "",
        Writes::OnScaleIn => "; writes: OnScaleIn",
    };
    let _ = writeln!(
        out,
        "Policy {}  (signals: {}; combine: {}{max_cost}{writes})",
        p.policy,
        kinds.join(", "),
        match policy.spec.combine {
            crate::policy::Combine::Lexicographic => "lexicographic",
            crate::policy::Combine::Sum => "sum",
        }
    );
    out.push_str(&table::aligned(pod_rows(p, &kinds), "  ", 2));
    render_summary(&mut out, p, &kinds, opts.scale_down_by);
    for rs in &p.replica_sets {
        render_replica_set(&mut out, rs, opts);
    }
    if let (Some(s), Some(n)) = (&p.savings, opts.scale_down_by) {
        out.push_str(&render_savings(s, n));
    }
    out
}

/// The pods table of a plan: a header and a row per pod.
fn pod_rows(p: &Plan, kinds: &[&str]) -> Vec<Vec<String>> {
    let mut header = vec!["POD".to_string(), "NODE".to_string()];
    header.extend(kinds.iter().map(|k| k.to_uppercase()));
    header.extend(["COST NOW", "WANTED", "PATCH"].map(String::from));
    let mut rows = vec![header];
    for pod in &p.pods {
        let mut r = vec![
            pod.name.to_string(),
            if pod.node.is_empty() {
                "-".into()
            } else {
                pod.node.to_string()
            },
        ];
        r.extend(pod.signals.iter().map(|s| match s.value {
            Some(v) => format!("{} [{v}]", s.detail),
            None => format!("{} [-]", s.detail),
        }));
        r.push(cost_now_cell(pod));
        r.push(pod.wanted_text());
        r.push(pod.action.to_string());
        rows.push(r);
    }
    rows
}

/// The cost now of a plan's pod: the annotation as written, whose it is,
/// and whether Kubernetes can read it.
fn cost_now_cell(pod: &crate::plan::PodPlan) -> String {
    let invalid = pod
        .current_raw
        .as_deref()
        .is_some_and(|raw| parse_deletion_cost(raw).problem.is_some());
    match (&pod.current_raw, &pod.owner, invalid) {
        (None, CostOwner::Karpenter, _) => "- (Karpenter's)".into(),
        (None, _, _) => "-".into(),
        (Some(raw), CostOwner::Karpenter, true) => {
            format!("{} (Karpenter's; invalid: read as 0)", shortened(raw))
        }
        (Some(raw), CostOwner::Karpenter, false) => format!("{raw} (Karpenter's)"),
        (Some(raw), CostOwner::Foreign(_), true) => {
            format!("{} (foreign; invalid: read as 0)", shortened(raw))
        }
        (Some(raw), _, true) => format!("{} (invalid: read as 0)", shortened(raw)),
        (Some(raw), CostOwner::Foreign(_), false) => format!("{raw} (foreign)"),
        (Some(raw), _, false) => raw.to_string(),
    }
}

/// The counts under the pods table, and the nodes no autoscaler may remove.
fn render_summary(out: &mut String, p: &Plan, kinds: &[&str], scale_down_by: Option<usize>) {
    let _ = writeln!(
        out,
        "  {} pods selected, {} patches{}{}",
        p.pods.len(),
        p.patches.len(),
        if p.inactive.is_empty() {
            String::new()
        } else {
            format!(", {} inactive left out", p.inactive.len())
        },
        on_scale_in_note(p.writes, scale_down_by)
    );
    if !p.blocked_nodes.is_empty() {
        let _ = writeln!(
            out,
            "\n  Nodes no autoscaler may remove (draining them frees nothing{}):",
            if kinds.contains(&"nodeConsolidation") {
                "; nodeConsolidation drains them last"
            } else {
                ""
            }
        );
        for n in &p.blocked_nodes {
            let _ = writeln!(out, "    {n}");
        }
    }
}

/// What the patches of a `writes: OnScaleIn` plan are, after their count.
pub fn on_scale_in_note(writes: Writes, scale_down_by: Option<usize>) -> String {
    match (writes, scale_down_by) {
        (Writes::Continuous, _) => String::new(),
        (Writes::OnScaleIn, None) => " (writes: OnScaleIn: nothing in the background; \
             --scale-down-by N shows what a scale-in by N writes)"
            .to_string(),
        (Writes::OnScaleIn, Some(n)) => format!(
            " (writes: OnScaleIn: what a scale-in by {n} writes, its minimal correction; \
             nothing in the background)"
        ),
    }
}

/// One ReplicaSet's deletion order after the patches, its victims and
/// whether the order is the one intended.
fn render_replica_set(out: &mut String, rs: &crate::plan::ReplicaSetPlan, opts: &PlanOptions) {
    let owner = rs
        .deployment
        .as_ref()
        .map(|d| format!(" (Deployment {d})"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "\n  ReplicaSet {}{owner}: deletion order after patches",
        rs.name
    );
    let mut rows = vec![vec![
        "#".to_string(),
        "POD".into(),
        "COST".into(),
        "".into(),
    ]];
    for (i, name) in rs.predicted.iter().enumerate() {
        let victim = if rs.victims.contains(name) {
            "<- deleted"
        } else {
            ""
        };
        rows.push(vec![
            (i + 1).to_string(),
            name.to_string(),
            rs.live_costs[i].to_string(),
            victim.to_string(),
        ]);
    }
    out.push_str(&table::aligned(&rows, "  ", 2));
    if let Some(n) = opts.scale_down_by {
        let _ = writeln!(
            out,
            "  scale down by {n}: deletes {}{}",
            if rs.victims.is_empty() {
                "nothing".to_string()
            } else {
                victim_list(&rs.victims)
            },
            if rs.tie_at_cut {
                " (tie at the cut: upstream picks among equals by informer order)"
            } else {
                ""
            }
        );
    }
    match rs.verdict {
        Verdict::AsIntended => {
            let _ = writeln!(out, "  order as intended: yes");
        }
        Verdict::Ambiguous => {
            let _ = writeln!(
                out,
                "  order as intended: ambiguous among {} (upstream's order depends on informer order)",
                capped_list(&rs.ambiguous, LISTED)
            );
        }
        Verdict::NotAsIntended => {
            let _ = writeln!(out, "  order as intended: NO");
            for m in &rs.mismatches {
                let _ = writeln!(
                    out,
                    "    {} goes before {}: {}",
                    m.pod,
                    m.before,
                    m.reason.describe()
                );
            }
        }
    }
}

/// What the scale-down is worth: per choice the victims, the nodes they
/// empty and their price; the capacity freed per billing class; the
/// difference.
fn render_savings(s: &Savings, scale_down_by: usize) -> String {
    let mut out = String::new();
    let currency = s
        .currency
        .as_deref()
        .map(|c| format!(", {c}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "\n  What it is worth: scale down by {scale_down_by} (prices: {}{currency}; a month is {} h)",
        s.prices_file, s.hours_per_month
    );
    // upstream's choice is what Kubernetes does without the policy's costs
    let choices = [
        ("with the policy", &s.policy),
        ("Kubernetes default", &s.upstream),
    ];
    let rows = choice_rows(&choices, &s.difference);
    out.push_str(&table::aligned(&rows, "  ", 2));
    let rows = capacity_rows(&choices);
    if rows.len() > 1 {
        out.push('\n');
        out.push_str(&table::aligned(&rows, "  ", 2));
    }
    for (label, c) in choices {
        render_choice_notes(&mut out, label, c);
    }
    let _ = writeln!(
        out,
        "  Kubernetes default: the pods the ReplicaSet controller deletes without the policy's costs"
    );
    let _ = writeln!(
        out,
        "  a node counts as freed when no active pod but DaemonSet pods stays on it and no annotation keeps it; the autoscaler decides whether it goes"
    );
    out
}

/// Victims as a line says them: the first [`LISTED`] in deletion order,
/// then how many more (`-o json` and the order above list them all).
fn victim_list<S: std::fmt::Display>(victims: &[S]) -> String {
    capped_list(victims, LISTED)
}

/// The savings table: per choice what it deletes, the nodes it frees and
/// their price, then the difference between the two.
fn choice_rows(choices: &[(&str, &Choice); 2], d: &Difference) -> Vec<Vec<String>> {
    let mut rows = vec![
        ["CHOICE", "DELETES", "NODES FREED", "PER HOUR", "PER MONTH"]
            .map(String::from)
            .to_vec(),
    ];
    for &(label, c) in choices {
        rows.push(vec![
            label.to_string(),
            if c.victims.is_empty() {
                "nothing".into()
            } else {
                victim_list(&c.victims)
            },
            freed_list(c),
            c.hourly.to_string(),
            c.monthly.to_string(),
        ]);
    }
    rows.push(vec![
        "difference (policy - default)".into(),
        String::new(),
        if d.nodes > 0 {
            format!("+{}", d.nodes)
        } else {
            d.nodes.to_string()
        },
        signed(d.hourly),
        signed(d.monthly),
    ]);
    rows
}

/// The capacity table: per choice and billing class the nodes freed, their
/// allocatable cpu and memory and their price (only the header: none freed).
fn capacity_rows(choices: &[(&str, &Choice); 2]) -> Vec<Vec<String>> {
    let mut rows = vec![[
        "CAPACITY FREED",
        "BILLING CLASS",
        "NODES",
        "CPU",
        "MEMORY",
        "PER HOUR",
        "PER MONTH",
    ]
    .map(String::from)
    .to_vec()];
    for &(label, c) in choices {
        for t in &c.by_billing_class {
            rows.push(vec![
                label.to_string(),
                t.billing_class.clone().unwrap_or_else(|| "(none)".into()),
                t.nodes.to_string(),
                t.allocatable_cpu_millicores
                    .map_or_else(|| "-".into(), cores),
                t.allocatable_memory_bytes
                    .map_or_else(|| "-".into(), memory),
                t.hourly.to_string(),
                t.monthly.to_string(),
            ]);
        }
    }
    rows
}

/// The notes on one choice's figures: nodes without a price or without
/// allocatable, a cut inside a tie, nodes emptied but kept.
fn render_choice_notes(out: &mut String, label: &str, c: &Choice) {
    if !c.unpriced_nodes.is_empty() {
        let _ = writeln!(
            out,
            "  {label}: no price for {} (left out of the sums)",
            c.unpriced_nodes.join(", ")
        );
    }
    let unreported: usize = c
        .by_billing_class
        .iter()
        .map(|t| t.nodes_without_allocatable)
        .sum();
    if unreported > 0 {
        let _ = writeln!(
            out,
            "  {label}: {unreported} freed node(s) report no allocatable cpu or memory (not in CPU, MEMORY)"
        );
    }
    if c.tie_at_cut {
        let _ = writeln!(
            out,
            "  {label}: a cut falls inside a tie: upstream may delete other pods it ranks equal, and free other nodes"
        );
    }
    for n in &c.not_removable {
        let _ = writeln!(out, "  {label}: emptied but not freed: {n}");
    }
}
