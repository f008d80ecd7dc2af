//! The pod annotations this project reads and writes: pure, no I/O.
//!
//! Parsing a deletion cost as upstream does stays with the comparator
//! ([`crate::comparator::parse_deletion_cost`]), which is what it models.

/// The cost the ReplicaSet controller reads when it picks pods to delete
/// (upstream's `controller.kubernetes.io/pod-deletion-cost`).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Marks a cost as written by a policy; its value is the policy's name, so
/// the operator never fights a value it did not set and can remove its own.
/// Written and removed together with [`POD_DELETION_COST`].
pub const POLICY_ANNOTATION: &str = "deletioncost.dev/policy";
