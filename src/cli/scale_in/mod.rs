//! `deletion-cost scale-in WORKLOAD --remove POD[,POD…]`: makes exactly the
//! pods named the next to go, scales in by their number, waits for the
//! controller's deletions and reports which pods it deleted.
//!
//! Under a policy the pods get its scale-down marker and the scale goes
//! through the scale subresource like any scaler's: the operator's scale-in
//! webhook then writes what the marker asks for. Without one, the command
//! writes costs on the named pods itself. Either way as the kubeconfig's
//! user, and refused (exit 2, nothing written) when no write can make the
//! removal exact.

mod apply;
mod decide;

use std::collections::BTreeSet;
use std::time::Duration;

use clap::ValueEnum;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

pub use decide::{decide, CostWrite, Decision, Via};

use super::live::{ClusterArgs, Wants};
use super::{print_out, CliError};
use crate::comparator::Comparator;
use crate::input::InputLimits;
use crate::plan::workload::{Target, TargetKind};

/// Output format of `scale-in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScaleInOutput {
    /// Readable lines.
    Text,
    /// One JSON object.
    Json,
}

/// Flags of `scale-in`.
#[derive(Debug, clap::Args)]
pub struct ScaleInArgs {
    /// The workload: deployment/NAME or replicaset/NAME (a bare NAME is a
    /// Deployment).
    #[arg(value_name = "WORKLOAD")]
    pub workload: String,
    /// The pods to remove, comma-separated: the scale-in is by their number.
    #[arg(
        long,
        value_name = "POD[,POD…]",
        value_delimiter = ',',
        required = true
    )]
    pub remove: Vec<String>,
    /// Namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: the files in $KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Say what would be written and scaled, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait for the controller's deletions, in seconds (and, at
    /// most 15 of them, for the operator to write marked pods' costs).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
    /// The controller-manager's feature gates (as `plan`'s flag).
    #[command(flatten)]
    pub gates: super::cluster_flags::GateFlags,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = ScaleInOutput::Text)]
    pub output: ScaleInOutput,
}

/// `deployment/NAME`, `replicaset/NAME`, or a bare NAME (a Deployment).
pub fn parse_workload(given: &str) -> Result<Target, CliError> {
    let target = if given.contains('/') {
        given.parse::<Target>().map_err(CliError::bad_input)?
    } else {
        Target {
            kind: TargetKind::Deployment,
            name: given.to_string(),
        }
    };
    if target.kind == TargetKind::Pod || target.name.is_empty() {
        return Err(CliError::bad_input(format!(
            "{given:?}: expected deployment/NAME or replicaset/NAME"
        )));
    }
    Ok(target)
}

/// The pod names of `--remove`, each once; an empty name is refused.
pub fn parse_remove(given: &[String]) -> Result<BTreeSet<String>, CliError> {
    let mut names = BTreeSet::new();
    for n in given {
        let n = n.trim();
        let n = n.strip_prefix("pod/").unwrap_or(n);
        if n.is_empty() {
            return Err(CliError::bad_input(
                "--remove: an empty pod name (expected POD[,POD…])",
            ));
        }
        names.insert(n.to_string());
    }
    if names.is_empty() {
        return Err(CliError::bad_input("--remove: no pod named"));
    }
    Ok(names)
}

/// Runs the command.
pub fn run(args: ScaleInArgs) -> Result<(), CliError> {
    let workload = parse_workload(&args.workload)?;
    let named = parse_remove(&args.remove)?;
    args.gates.resolve()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("starting the runtime: {e}")))?;
    let text = runtime.block_on(run_async(&args, &workload, &named))?;
    print_out(&text)
}

async fn run_async(
    args: &ScaleInArgs,
    workload: &Target,
    named: &BTreeSet<String>,
) -> Result<String, CliError> {
    let cluster = ClusterArgs {
        namespace: args.namespace.clone(),
        all_namespaces: false,
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let (client, read) = super::live::read_connected(
        &cluster,
        Wants {
            nodes: true,
            policies: true,
            policies_optional: true,
            live_only: true,
        },
        InputLimits::NONE,
    )
    .await?;
    let ns = read.namespace.clone().unwrap_or_else(|| "default".into());
    let choice = args.gates.choose(read.version.as_ref())?;
    let cmp = Comparator {
        gates: choice.gates,
        now: Some(Timestamp::now().as_nanosecond()),
    };
    let policies = if read.policies.is_empty() {
        Vec::new()
    } else {
        super::plan::policies(&read.source, &read.policies)?
    };
    let decision = decide(&read.snapshot, &policies, workload, &ns, named, &cmp)?;
    for w in apply::hpa_warnings(&client, &decision).await {
        super::stderr::warn(&w);
    }
    if args.dry_run {
        return render(&decision, None, args.output);
    }
    let outcome = apply::apply(&client, &decision, &cmp, Duration::from_secs(args.timeout)).await?;
    let text = render(&decision, Some(&outcome), args.output)?;
    let deleted: BTreeSet<&String> = outcome.deleted.iter().collect();
    let asked: BTreeSet<&String> = decision.named.iter().collect();
    if deleted == asked {
        return Ok(text);
    }
    // the report first, then why this is a failure
    print_out(&text)?;
    Err(CliError::failure(if outcome.interrupted {
        format!(
            "interrupted while waiting: {} is scaled to {}; deleted so far: {}",
            decision.workload,
            decision.to,
            list(&outcome.deleted)
        )
    } else if outcome.timed_out {
        format!(
            "after {} s the controller had deleted {} of the {} pod(s) (--timeout to wait longer)",
            args.timeout,
            outcome.deleted.len(),
            decision.named.len()
        )
    } else {
        format!(
            "the controller deleted {}, not {}{}",
            list(&outcome.deleted),
            list(&decision.named),
            match decision.policy() {
                Some(_) => " (is the operator's scale-in webhook installed and running?)",
                None => " (did something else scale or write costs meanwhile?)",
            }
        )
    }))
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The report (pure): what was (or would be) written, the scale, and what
/// the controller deleted.
pub fn render(
    d: &Decision,
    outcome: Option<&apply::Outcome>,
    format: ScaleInOutput,
) -> Result<String, CliError> {
    match format {
        ScaleInOutput::Json => {
            let mut s = serde_json::to_string_pretty(&json_report(d, outcome))
                .map_err(|e| CliError::failure(format!("encoding JSON: {e}")))?;
            s.push('\n');
            Ok(s)
        }
        ScaleInOutput::Text => Ok(text_report(d, outcome)),
    }
}

fn json_report(d: &Decision, outcome: Option<&apply::Outcome>) -> Value {
    let (marked, wrote): (Vec<String>, Vec<Value>) = match (outcome, &d.via) {
        (Some(o), _) => (
            o.marked.clone(),
            o.wrote
                .iter()
                .map(|(p, c)| json!({"pod": p, "cost": c}))
                .collect(),
        ),
        (None, Via::Marker { to_mark, .. }) => (to_mark.clone(), Vec::new()),
        (None, Via::Costs { writes }) => (
            Vec::new(),
            writes
                .iter()
                .map(|w| json!({"pod": w.pod, "cost": w.cost}))
                .collect(),
        ),
    };
    let deleted: Vec<String> = outcome.map(|o| o.deleted.clone()).unwrap_or_default();
    let exact = outcome.map(|o| {
        let a: BTreeSet<&String> = o.deleted.iter().collect();
        a == d.named.iter().collect()
    });
    json!({
        "workload": d.workload.to_string(),
        "namespace": d.namespace,
        "replicaSet": d.replica_set,
        "from": d.from,
        "to": d.to,
        "remove": d.named,
        "policy": d.policy(),
        "marker": match &d.via { Via::Marker { label, .. } => Some(*label), Via::Costs { .. } => None },
        "marked": marked,
        "wrote": wrote,
        "scaleSeconds": outcome.and_then(|o| o.scale_seconds),
        "deleted": deleted,
        "putBack": outcome.map(|o| o.put_back.clone()).unwrap_or_default(),
        "exact": exact,
        "dryRun": outcome.is_none(),
    })
}

fn text_report(d: &Decision, outcome: Option<&apply::Outcome>) -> String {
    let mut out = format!(
        "{} in {}: {} -> {} replicas, removing {}\n",
        d.workload,
        d.namespace,
        d.from,
        d.to,
        d.named.join(", ")
    );
    let would = if outcome.is_some() { "" } else { "would " };
    match &d.via {
        Via::Marker {
            policy,
            label,
            to_mark,
            ..
        } => {
            let marked = outcome.map_or(to_mark.as_slice(), |o| o.marked.as_slice());
            let what = if marked.is_empty() {
                "all already marked".to_string()
            } else {
                format!("{would}mark {}", marked.join(", "))
            };
            out.push_str(&format!(
                "policy {policy}: {what} ({label}); its scale-in webhook puts marked pods first\n"
            ));
        }
        Via::Costs { writes } => {
            let wrote: Vec<(String, i32)> = match outcome {
                Some(o) => o.wrote.clone(),
                None => writes.iter().map(|w| (w.pod.clone(), w.cost)).collect(),
            };
            let what = if wrote.is_empty() {
                "no write needed: the costs already put them first".to_string()
            } else {
                format!(
                    "{} pod-deletion-cost {}",
                    if outcome.is_some() {
                        "wrote"
                    } else {
                        "would write"
                    },
                    wrote
                        .iter()
                        .map(|(p, c)| format!("{c} on {p}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            out.push_str(&format!("no policy: {what}\n"));
        }
    }
    match outcome {
        None => out.push_str(&format!(
            "dry run: nothing written, {} not scaled\n",
            d.workload
        )),
        Some(o) => {
            if let Some(s) = o.scale_seconds {
                out.push_str(&format!("scaled in {:.0} ms\n", s * 1000.0));
            }
            let exact = o.deleted.iter().collect::<BTreeSet<_>>()
                == d.named.iter().collect::<BTreeSet<_>>();
            out.push_str(&format!(
                "deleted: {}{}\n",
                list(&o.deleted),
                if exact { " (the pods named)" } else { "" }
            ));
            if !o.put_back.is_empty() {
                out.push_str(&format!(
                    "put back what was written on {} (not deleted)\n",
                    o.put_back.join(", ")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
