//! The operator: the kube-runtime shell around the pure planner.
//!
//! Data flows one way: watch (trimmed objects into the engine's caches) ->
//! snapshot -> plan (pure, `crate::plan`, run by `crate::engine`) -> apply (the rate-limited patcher,
//! `crate::writes`) -> observe (status, Events, metrics) -> check (the next
//! round). Only the lease holder writes.
//!
//! | module | job |
//! |---|---|
//! | [`run`](mod@run) | the wiring: watches and caches, leader election, listeners, the Controller, shutdown |
//! | [`config`] | what `run` is told; the client and the comparator's gates derived at start |
//! | [`reconcile`] | one policy's reconcile: apply, finalizer cleanup, error policy and backoff |
//! | [`status`] | the policy status and its Events |
//! | [`lease`] | the election on a Lease |
//! | [`sync`] | which caches have synced (`/readyz`) |
//! | [`server`] | `/metrics`, `/healthz`, `/readyz` and the policy pages ([`page`]) |
//! | [`prices`] | `--prices` read again when the file changes |
//! | [`shutdown`] | one deadline for every stage of a shutdown |
//! | [`error`] | the shell's error enum |
//!
//! The rounds themselves, the caches and the leadership handle are
//! `crate::engine`'s, which the hook (`crate::hook`) uses too; only [`run`](mod@run)
//! knows both. `tests/architecture.rs` holds every layer to its imports.

pub mod config;
pub mod error;
pub mod lease;
pub mod listener_state;
pub mod page;
pub mod prices;
pub mod reconcile;
pub mod run;
pub mod server;
pub mod shutdown;
pub mod status;
pub mod sync;
pub mod throttle;

pub use crate::MANAGER;
pub use config::LeaseTimings;
pub use config::{client, RunConfig};
pub use error::OperatorError;
pub use reconcile::FINALIZER;
pub use run::{run, run_with_client};
