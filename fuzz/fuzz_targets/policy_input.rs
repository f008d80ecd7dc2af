//! The policy file reader: any text in; every policy that validates must
//! resolve and plan over the bundled example cluster without a panic.

#![no_main]

use std::sync::OnceLock;

use deletion_cost::comparator::FeatureGates;
use deletion_cost::input::{parse_policies, InputLimits, SnapshotReader};
use deletion_cost::plan::{self, NamedPolicy, PlanOptions, Snapshot};
use deletion_cost::policy::ValidatedSignal;
use deletion_cost::signals::samples::{read_samples, SignalSpec};
use deletion_cost::signals::SignalSamples;
use libfuzzer_sys::fuzz_target;

const CLUSTER: &str = include_str!("../../config/examples/cluster.yaml");
const SAMPLES: &str = include_str!("../../config/examples/samples.json");
/// 2023-11-14T22:13:20Z.
const NOW: i128 = 1_700_000_000 * 1_000_000_000;

fn snapshot() -> &'static Snapshot {
    static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let mut reader = SnapshotReader::new(InputLimits::NONE);
        reader
            .read_text("cluster.yaml", CLUSTER)
            .and_then(|()| reader.finish())
            .expect("bundled cluster is a snapshot")
            .snapshot
    })
}

/// The bundled samples, assigned to the policy's utilisation signals when they fit.
fn samples(policy: &NamedPolicy) -> SignalSamples {
    let specs: Vec<SignalSpec> = policy
        .spec
        .signals
        .iter()
        .enumerate()
        .filter_map(|(index, s)| match s {
            ValidatedSignal::Utilization(u) => Some(SignalSpec {
                index,
                pod_label: u.pod_label.clone(),
                max_age_secs: Some(u.max_age.as_secs_f64()),
            }),
            _ => None,
        })
        .collect();
    if specs.is_empty() {
        return SignalSamples::default();
    }
    read_samples("samples.json", SAMPLES, &specs, None)
        .map(|l| l.samples)
        .unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let policies = match parse_policies("fuzz", text) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let snapshot = snapshot();
    for p in &policies {
        let _ = p.qualified_name();
        if let Err(e) = p.validate() {
            let _ = e.to_string();
            continue;
        }
        let ns = p.policy.metadata.namespace.as_deref().unwrap_or("default");
        // plan in the policy's own namespace and in the example's, where the pods are
        let mut namespaces = vec![ns];
        if ns != "shop" {
            namespaces.push("shop");
        }
        for ns in namespaces {
            let resolved = NamedPolicy::validate(p.name(), ns, &p.policy.spec)
                .expect("a spec that validates also resolves");
            let _ = resolved.spec.combined_range();
            let samples = samples(&resolved);
            let opts = PlanOptions {
                gates: FeatureGates::default(),
                now: Some(NOW),
                scale_down_by: Some(2),
                assume_patches_applied: true,
                chunks: Default::default(),
            };
            let first = plan::plan(&resolved, snapshot, &samples, &Default::default(), &opts);
            let _ = serde_json::to_string(&first).expect("a plan encodes");
            let _ = deletion_cost::cli::plan::render_table(&first, &resolved, &opts);
            // a second round with the first's values exercises hysteresis
            let opts = PlanOptions {
                scale_down_by: None,
                assume_patches_applied: false,
                ..opts
            };
            let second = plan::plan(&resolved, snapshot, &samples, &first.values, &opts);
            let _ = serde_json::to_string(&second).expect("a plan encodes");
        }
    }
});
