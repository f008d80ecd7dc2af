//! The annotations this project reads and writes: pure, no I/O. Ours (the
//! cost and the policy that wrote it), and the autoscalers' that say whether
//! a node may be removed and whether a cost is Karpenter's.
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

/// Karpenter's "never disrupt": on a pod (value `"true"`), Karpenter keeps
/// the pod's node while the pod runs (DaemonSet and mirror pods included);
/// on a node, it keeps the node.
pub const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

/// The cluster-autoscaler's pod annotation: `"false"` keeps the pod's node
/// (a DaemonSet pod's aside: the autoscaler drains those with the node).
pub const CA_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// The cluster-autoscaler's node annotation: `"true"` keeps the node.
pub const CA_SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";

/// Marks a pod's deletion cost as written by Karpenter's own deletion-cost
/// controller (`PodDeletionCostManagement`; it writes `"true"` and reads
/// only whether the key is there, as this project does): Karpenter treats
/// an unmarked cost as the customer's and leaves it alone, and every policy
/// leaves a marked one alone, so the two never fight over a pod.
pub const KARPENTER_MANAGED_COST: &str = "karpenter.sh/managed-deletion-cost";
