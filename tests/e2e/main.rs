//! End-to-end suite: the real `deletion-cost` binary, with the RBAC rendered
//! from `deploy/overlays/cluster-wide`, against the real API server and
//! ReplicaSet controller of the cluster `KUBECONFIG` names (kind, k3d or a
//! bare control plane). Nodes are simulated by the harness (see `kubelet`).
//!
//! Without `KUBECONFIG` every scenario is reported as ignored, never as
//! passed. Run: `KUBECONFIG=... cargo test --test e2e` (add a name to run
//! one scenario). Everything a run creates is removed at its end, also when
//! a scenario fails; objects left by an interrupted run are removed by the
//! next one (they carry the suite's label).

mod cluster;
mod helm;
mod install;
mod kubelet;
mod operator;
mod proxy;
mod rbac;
mod scenarios;
mod service;

use std::process::ExitCode;
use std::sync::Arc;

use futures::FutureExt;
use libtest_mimic::{Arguments, Failed, Trial};

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // one cluster, one operator at a time: scenarios run one after another
    args.test_threads = Some(1);
    let live = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let trials = scenarios::ALL
        .iter()
        .map(|(name, scenario)| {
            let (runtime, scenario) = (runtime.clone(), *scenario);
            Trial::test(*name, move || {
                runtime.block_on(async {
                    let env = cluster::env().await.map_err(Failed::from)?;
                    std::panic::AssertUnwindSafe(scenario(env))
                        .catch_unwind()
                        .await
                        .map_err(|p| Failed::from(panic_text(&p)))
                })
            })
            .with_ignored_flag(!live || scenarios::ON_REQUEST.contains(name))
        })
        .collect();
    if !live {
        eprintln!(
            "e2e: KUBECONFIG is not set: every scenario is ignored (they need a real cluster)"
        );
    }
    let conclusion = libtest_mimic::run(&args, trials);
    runtime.block_on(cluster::teardown());
    conclusion.exit_code()
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "scenario panicked".into())
}
