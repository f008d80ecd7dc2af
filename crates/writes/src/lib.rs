//! The write path: the only module that writes to the API server.
//!
//! The planner's decisions arrive as [`PatchRequest`]s. The [`Patcher`]
//! coalesces them per pod, shares an operator-wide `governor` rate limit
//! fairly across policies (each also under its own limit), sends
//! metadata-only merge patches through a [`PodWriter`], and retries until a
//! value lands, its pod is gone or its attempts run out; it writes only
//! while the leadership term's [`WriteGate`] is open. The same limit grants
//! every other write (status, Events, the finalizer): [`budgeted_client`]
//! makes each wait for a [`Permit`], after a scale-in's pod writes and in
//! turns with background ones. A scale-in's pod writes draw first on a
//! small allowance of their own (`--scale-in-allowance`), then on the same
//! limit. `queue` and `backoff` are pure; the worker in `patcher` is the
//! thin async shell around them.

// the core's items this crate uses, under the names the modules know them by
use deletion_cost_core::{annotations, MANAGER};

pub mod backoff;
pub mod budget;
pub mod gate;
pub mod kind;
pub mod limits;
pub mod patch;
pub mod patcher;
pub mod queue;
pub mod stats;
pub mod writer;

pub use backoff::BackoffConfig;
pub use budget::{budgeted_client, TermSource};
pub use gate::{Gate, WriteGate};
pub use kind::{BudgetError, WriteKind};
pub use limits::{
    scale_in_allowance, LimitError, Rate, WriteLimits, DEFAULT_SCALE_IN_ALLOWANCE, SCALE_IN_REFILL,
};
pub use patch::{patch_body, PatchRequest, PodRef, PolicyKey};
pub use patcher::{
    Batch, BatchReport, DrainReport, Patcher, PatcherConfig, Permit, Priority, SubmitError,
};
pub use queue::{WriteOutcome, WriteState};
pub use stats::{PatcherStats, StatsSnapshot};
pub use writer::{KubePodWriter, PodWriter, WriteError, FIELD_MANAGER};
