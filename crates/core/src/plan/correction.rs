//! The minimal correction at a scale-in: the fewest cost writes that make
//! the ReplicaSet controller delete exactly the pods the policy wants, with
//! every other cost left as it stands.
//!
//! The comparator's first three rules (unassigned, phase, readiness) do not
//! read the cost, so they order the pods into classes no write can change:
//! the policy's victims are every pod of the classes before the one the cut
//! falls in, plus some of that class (the deciding class). Only there do
//! costs matter. Walking the deciding class by cost, any cut where the cost
//! rises splits it in two: wanted pods after the cut are written below every
//! pod kept, kept pods before it are written above every wanted one, so
//! every wanted pod's cost ends up below every kept pod's and the cut holds
//! whatever the later rules say (they can tie, and need not form a strict
//! weak order). The cut with the fewest writes (then the fewest raised)
//! wins; a scale-in by k writes at most k values unless a cost it may not
//! touch (a foreign one, int32's ends) forces a raise.
//!
//! With `LogarithmicScaleDown` the later rules read ages in power-of-two
//! buckets, which move with the clock: a cut only they decide is not taken
//! as right, and is written to a cost boundary like any other.
//!
//! Values that may still land (writes in flight) are read pessimistically:
//! a wanted pod at the higher of its cost and the value on its way, a kept
//! pod at the lower. Lowering a wanted pod's cost or raising a kept pod's
//! only moves them further apart, so what holds for those costs holds for
//! whichever lands.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::comparator::{
    rank_pods, victims_in_syncs, Comparator, ParsedCost, RankKey, Ranking, Syncs, BURST_REPLICAS,
};

/// One pod of a ReplicaSet as the correction reads it, beside its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCosts {
    /// The cost the policy intends for it (its live cost when the policy
    /// leaves it alone).
    pub intended: i32,
    /// Whether the policy may write its cost (not a foreign value, not a
    /// pod the policy does not manage).
    pub writable: bool,
    /// A value on its way to the pod (a write in flight), if any.
    pub in_flight: Option<i32>,
}

/// Why no writes can make the controller delete exactly the wanted pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Unreachable {
    /// `PodDeletionCost` is off: the controller ignores costs.
    FeatureGateOff,
    /// Costs the policy may not write (foreign ones, pods it does not
    /// manage, int32's ends) sit where only a write would help.
    Unwritable,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unreachable::FeatureGateOff => "the PodDeletionCost feature gate is off",
            Unreachable::Unwritable => {
                "costs the policy may not write (foreign, unmanaged or at int32's ends) decide the cut"
            }
        })
    }
}

/// Whether a write lowers a wanted pod or raises a kept one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Direction {
    /// A pod the policy wants deleted, written below every kept pod.
    Lower,
    /// A pod the policy keeps, written above every wanted pod.
    Raise,
}

/// One cost to write: an index into the keys given, and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// Index of the pod in the keys given.
    pub pod: usize,
    /// The cost to write.
    pub cost: i32,
    /// Why.
    pub direction: Direction,
}

/// The correction of one ReplicaSet for a scale-in by `k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correction {
    /// The pods the policy wants deleted (indices into the keys), in the
    /// order it intends; at a tie at the cut, the tied pods that go first
    /// now.
    pub wanted: Vec<usize>,
    /// The pods the controller deletes with the costs as they stand (read
    /// pessimistically), in its order.
    pub as_they_stand: Vec<usize>,
    /// Whether those are pods the policy accepts (no write needed).
    pub already_right: bool,
    /// The writes, wanted pods first (in intended order), then any kept
    /// pod that must be raised.
    pub writes: Vec<Write>,
    /// The pods the controller deletes once every write landed.
    pub after: Vec<usize>,
    /// Set when no set of writes makes `after` the wanted pods; `writes`
    /// then holds the best effort (the wanted pods that can be lowered).
    pub unreachable: Option<Unreachable>,
}

impl Correction {
    /// The pods the controller deletes once `writes` landed on `keys`.
    pub fn victims_after(
        cmp: &Comparator,
        keys: &[RankKey],
        writes: &[Write],
        k: usize,
    ) -> Vec<usize> {
        victims_after_writes(cmp, keys, writes, k).victims
    }
}

fn cost(value: i32) -> ParsedCost {
    ParsedCost {
        value,
        problem: None,
    }
}

/// The classes rules 1-3 sort by, in the comparator's order.
fn class(k: &RankKey) -> (bool, u8, bool) {
    (!k.node_name.is_empty(), k.phase_ordinal, k.ready)
}

/// The pods at positions before the cut block and in it, when a cut after
/// `k` falls inside a run the comparator ranks equal (else all before).
fn cut(r: &Ranking, k: usize) -> (&[usize], &[usize]) {
    if !r.tie_at_cut(k) {
        return (&r.order[..k], &[]);
    }
    let b = r.block[k - 1];
    let start = r.block.iter().position(|&x| x == b).unwrap_or(k - 1);
    let end = r.block.iter().rposition(|&x| x == b).map_or(k, |e| e + 1);
    (&r.order[..start], &r.order[start..end])
}

/// Whether every victim set `ranking` can give for a scale-in by `k` is
/// one the policy accepts: all of `must`, the rest from `may`.
/// Whether every victim set the costs can give for a scale-in by `k` is one
/// the policy accepts: all of `must`, the rest from `may`. `accept` ranks
/// the accepted pods as late as their values may put them and the others
/// as early, `must_first` the same for the `must` pods alone: each only
/// gets truer as values land.
fn accepted(accept: &Ranking, must_first: &Ranking, k: usize, must: &[bool], may: &[bool]) -> bool {
    // a comparator that is no strict weak order here leaves the cut to the
    // controller's list order: not trusted
    if accept.ambiguity.is_some() || must_first.ambiguity.is_some() {
        return false;
    }
    let (before, tied) = cut(accept, k);
    let only_accepted = before.iter().chain(tied).all(|&i| must[i] || may[i]);
    let (before, _) = cut(must_first, k);
    let n_must = must.iter().filter(|m| **m).count();
    only_accepted && before.iter().filter(|&&i| must[i]).count() == n_must
}

/// Whether the pods either side of the cut after `k` are told apart by a
/// rule the clock moves: with `LogarithmicScaleDown` the ready and creation
/// times count by power-of-two age buckets, which a pod crosses as time
/// passes (about a second wide for a pod a few seconds old), and the rules
/// after them are reached only while the buckets are equal. The controller
/// sorts moments after the answer, so such a cut may fall elsewhere then.
fn moves_with_the_clock(cmp: &Comparator, r: &Ranking, k: usize) -> bool {
    use crate::comparator::Rule;
    cmp.gates.logarithmic_scale_down
        && matches!(
            r.decided_by.get(k.wrapping_sub(1)),
            Some(
                Rule::ReadyTime
                    | Rule::ReadyTimeUid
                    | Rule::Restarts
                    | Rule::SidecarRestarts
                    | Rule::CreationTime
                    | Rule::CreationTimeUid
            )
        )
}

/// `keys` with each value in flight read pessimistically: pods `late`
/// accepts at the higher of their cost and the value on its way (as late
/// as it may put them), the others at the lower.
fn pessimistic<'k>(
    keys: &[RankKey<'k>],
    pods: &[PodCosts],
    late: impl Fn(usize) -> bool,
) -> Vec<RankKey<'k>> {
    keys.iter()
        .zip(pods)
        .enumerate()
        .map(|(i, (key, p))| {
            let live = key.cost.value;
            let c = match p.in_flight {
                Some(f) if late(i) => live.max(f),
                Some(f) => live.min(f),
                None => return key.clone(),
            };
            RankKey {
                cost: cost(c),
                ..key.clone()
            }
        })
        .collect()
}

/// The fewest writes after which the controller deletes, in a scale-in by
/// `k` of the pods `keys` (live costs, colocation ranks and buckets set),
/// exactly the pods the policy wants (`pods[i]` says what it intends for
/// `keys[i]`).
pub fn correct(cmp: &Comparator, keys: &[RankKey], pods: &[PodCosts], k: usize) -> Correction {
    let n = keys.len();
    if k == 0 || k >= n {
        return nothing_to_choose(n, k);
    }
    let intended_keys: Vec<RankKey> = keys
        .iter()
        .zip(pods)
        .map(|(key, p)| RankKey {
            cost: cost(p.intended),
            ..key.clone()
        })
        .collect();
    let intended = rank_pods(cmp, &intended_keys);
    let live = rank_pods(cmp, keys);
    let WantedCut {
        must,
        may,
        wanted,
        in_wanted,
    } = wanted_cut(&intended, &intended_keys, &live, n, k);

    // values in flight read pessimistically (see the module docs): first
    // whether every victim set the pods can give is one the policy accepts
    // with nothing in flight every pessimistic reading is the live one:
    // the live ranking serves (one sort instead of four)
    let flying = pods.iter().any(|p| p.in_flight.is_some());
    let accept_keys = flying.then(|| pessimistic(keys, pods, |i| must[i] || may[i]));
    let accept_keys = accept_keys.as_deref().unwrap_or(keys);
    let must_keys = flying.then(|| pessimistic(keys, pods, |i| must[i]));
    let must_keys = must_keys.as_deref().unwrap_or(keys);
    let accept_own = flying.then(|| rank_pods(cmp, accept_keys));
    let must_own = flying.then(|| rank_pods(cmp, must_keys));
    let accept = accept_own.as_ref().unwrap_or(&live);
    let must_first = must_own.as_ref().unwrap_or(&live);
    let as_they_stand = victims_of(cmp, accept_keys, accept, k);
    // a cut the clock can move is no cut: the controller sorts moments
    // later; nor is one a later sync ranks again
    let steady = !moves_with_the_clock(cmp, accept, k)
        && !moves_with_the_clock(cmp, must_first, k)
        && k <= BURST_REPLICAS;
    if (steady && accepted(accept, must_first, k, &must, &may))
        || accepted_whatever_follows(
            (accept, accept_keys),
            (must_first, must_keys),
            k,
            &must,
            &may,
        )
    {
        return Correction {
            wanted,
            after: as_they_stand.clone(),
            as_they_stand,
            already_right: true,
            writes: Vec::new(),
            unreachable: None,
        };
    }
    // then the cut, with the wanted pods as high as they may be
    let pessimistic = pessimistic(keys, pods, |i| in_wanted[i]);
    let standing_own = flying.then(|| rank_pods(cmp, &pessimistic));
    let standing = standing_own.as_ref().unwrap_or(&live);
    let mut correction = Correction {
        wanted,
        after: as_they_stand.clone(),
        as_they_stand,
        already_right: false,
        writes: Vec::new(),
        unreachable: None,
    };
    if !cmp.gates.pod_deletion_cost {
        correction.unreachable = Some(Unreachable::FeatureGateOff);
        return correction;
    }
    let deciding = class(&intended_keys[intended.order[k - 1]]);
    let seq = deciding_class(standing, keys, &pessimistic, deciding);
    let plan = best_cut(&seq, &pessimistic, pods, &in_wanted);
    correction.writes = match plan {
        Some(writes) => writes,
        None => {
            correction.unreachable = Some(Unreachable::Unwritable);
            best_effort(&seq, &pessimistic, pods, &in_wanted)
        }
    };
    order_writes_and_predict(cmp, &intended, &pessimistic, n, k, &mut correction);
    correction
}

/// The correction when the controller has nothing to choose: a scale-in by
/// 0, or by all pods (upstream deletes every pod without sorting when k
/// reaches n).
fn nothing_to_choose(n: usize, k: usize) -> Correction {
    let all: Vec<usize> = (0..n.min(k)).collect();
    Correction {
        wanted: all.clone(),
        as_they_stand: all.clone(),
        already_right: true,
        writes: Vec::new(),
        after: all,
        unreachable: None,
    }
}

/// The pods the policy wants deleted, as index sets over the keys.
struct WantedCut {
    /// Before the cut in the intended order: must go.
    must: Vec<bool>,
    /// In a tie at the intended cut: may go.
    may: Vec<bool>,
    /// The `must` pods, then (at a tie at the cut) the tied pods that go
    /// first now.
    wanted: Vec<usize>,
    /// Membership of `wanted`.
    in_wanted: Vec<bool>,
}

/// The pods either side of the cut after `k` in `r` (over `keys`) that the
/// comparator's first four rules (class, then cost) cannot tell apart: the
/// pods before that run, and the run. Every rule after the cost (the
/// colocation rank, which a later sync counts anew; the age buckets, which
/// move with the clock) only orders pods inside such a run, so whatever
/// they say, the first `k` pods are those before it and some of it.
fn cost_cut<'r>(r: &'r Ranking, keys: &[RankKey], k: usize) -> (&'r [usize], &'r [usize]) {
    let at = |pos: usize| {
        let key = &keys[r.order[pos]];
        (class(key), key.cost.value)
    };
    if k == 0 || k >= r.order.len() || at(k - 1) != at(k) {
        return (&r.order[..k.min(r.order.len())], &[]);
    }
    let run = at(k - 1);
    let start = (0..k)
        .rev()
        .take_while(|&p| at(p) == run)
        .last()
        .unwrap_or(k - 1);
    let end = (k..r.order.len())
        .take_while(|&p| at(p) == run)
        .last()
        .map_or(k, |e| e + 1);
    (&r.order[..start], &r.order[start..end])
}

/// Whether the pods the controller deletes in a scale-in by `k` are ones the
/// policy accepts whatever the rules after the cost say: all of `must`, the
/// rest from `may`. `accept` ranks its keys read as late as their values
/// may put the accepted pods and as early as the others; `must_first` the
/// same for the `must` pods alone (each only gets truer as values land).
fn accepted_whatever_follows(
    accept: (&Ranking, &[RankKey]),
    must_first: (&Ranking, &[RankKey]),
    k: usize,
    must: &[bool],
    may: &[bool],
) -> bool {
    // no check for ambiguity: a comparator that is no strict weak order
    // (the UID tie-breaks of the age rules) is one only among pods of equal
    // class, cost and colocation rank, inside the runs this reads as a whole
    let (before, run) = cost_cut(accept.0, accept.1, k);
    let (must_before, _) = cost_cut(must_first.0, must_first.1, k);
    let n_must = must.iter().filter(|m| **m).count();
    before.iter().all(|&i| must[i] || may[i])
        && run.iter().all(|&i| may[i])
        && must_before.iter().filter(|&&i| must[i]).count() == n_must
}

/// The cut after `k` of the `intended` ranking of `n` pods (over
/// `intended_keys`). The policy says nothing about pods its costs tie: at
/// a cut inside a run of pods with one class and one intended cost, any of
/// the run may go, and the live order settles which, so that as few pods as
/// possible need a write.
fn wanted_cut(
    intended: &Ranking,
    intended_keys: &[RankKey],
    live: &Ranking,
    n: usize,
    k: usize,
) -> WantedCut {
    let (before, tied) = cost_cut(intended, intended_keys, k);
    let mut must = vec![false; n];
    let mut may = vec![false; n];
    before.iter().for_each(|&i| must[i] = true);
    tied.iter().for_each(|&i| may[i] = true);
    // at a tie at the cut: the tied pods that go first now
    let mut wanted: Vec<usize> = before.to_vec();
    let need = k - before.len();
    let mut live_pos = vec![0; n];
    live.order
        .iter()
        .enumerate()
        .for_each(|(pos, &i)| live_pos[i] = pos);
    let mut tied_now = tied.to_vec();
    tied_now.sort_by_key(|&i| live_pos[i]);
    wanted.extend(tied_now.into_iter().take(need));
    let mut in_wanted = vec![false; n];
    wanted.iter().for_each(|&i| in_wanted[i] = true);
    WantedCut {
        must,
        may,
        wanted,
        in_wanted,
    }
}

/// The pods of the `deciding` class in the order the controller uses now
/// (`standing`), by cost first: only a cost boundary separates pods
/// whatever the later rules (which need not form a strict weak order) say.
fn deciding_class(
    standing: &Ranking,
    keys: &[RankKey],
    pessimistic: &[RankKey],
    deciding: (bool, u8, bool),
) -> Vec<usize> {
    let mut seq: Vec<usize> = standing
        .order
        .iter()
        .copied()
        .filter(|&i| class(&keys[i]) == deciding)
        .collect();
    seq.sort_by_key(|&i| pessimistic[i].cost.value);
    seq
}

/// Puts the writes in order (wanted pods first, in the order the policy
/// intends) and sets the pods the controller deletes once they landed
/// (`n` pods, a scale-in by `k`).
fn order_writes_and_predict(
    cmp: &Comparator,
    intended: &Ranking,
    pessimistic: &[RankKey],
    n: usize,
    k: usize,
    correction: &mut Correction,
) {
    let mut intended_pos = vec![0; n];
    intended
        .order
        .iter()
        .enumerate()
        .for_each(|(pos, &i)| intended_pos[i] = pos);
    correction
        .writes
        .sort_by_key(|w| (w.direction == Direction::Raise, intended_pos[w.pod]));
    correction.after = if correction.unreachable.is_none() {
        // by construction every wanted pod of the deciding class now costs
        // less than every kept one, the classes before it are all wanted
        // and those after it all kept: exactly the wanted pods go, with no
        // tie at the cut (the property tests rank it to check)
        let mut after = correction.wanted.clone();
        after.sort_by_key(|&i| intended_pos[i]);
        after
    } else {
        victims_after_writes(cmp, pessimistic, &correction.writes, k).victims
    };
}

/// The pods a scale-in by `k` deletes, sync by sync, from `keys` ranked as `r`.
fn victims_of(cmp: &Comparator, keys: &[RankKey], r: &Ranking, k: usize) -> Vec<usize> {
    victims_in_syncs(cmp, keys, r, k, BURST_REPLICAS).victims
}

/// What a scale-in by `k` deletes once `writes` landed on `keys`.
fn victims_after_writes(cmp: &Comparator, keys: &[RankKey], writes: &[Write], k: usize) -> Syncs {
    let mut keys = keys.to_vec();
    for w in writes {
        keys[w.pod].cost = cost(w.cost);
    }
    let r = rank_pods(cmp, &keys);
    victims_in_syncs(cmp, &keys, &r, k, BURST_REPLICAS)
}

/// The cut of the deciding class (`seq`, by cost) with the fewest writes,
/// then the fewest raises; `None` when every cut needs a write the policy
/// may not make.
fn best_cut(
    seq: &[usize],
    keys: &[RankKey],
    pods: &[PodCosts],
    wanted: &[bool],
) -> Option<Vec<Write>> {
    let m = seq.len();
    let cost_of = |i: usize| keys[i].cost.value;
    // suffix facts (from position t on): wanted pods to lower, whether all
    // may be written, the highest cost they intend; kept pods' lowest cost
    let mut suf_lower = vec![0usize; m + 1];
    let mut suf_lower_ok = vec![true; m + 1];
    let mut suf_intended_max = vec![i32::MIN; m + 1];
    let mut suf_kept_min: Vec<Option<i32>> = vec![None; m + 1];
    for t in (0..m).rev() {
        let i = seq[t];
        suf_lower[t] = suf_lower[t + 1];
        suf_lower_ok[t] = suf_lower_ok[t + 1];
        suf_intended_max[t] = suf_intended_max[t + 1];
        suf_kept_min[t] = suf_kept_min[t + 1];
        if wanted[i] {
            suf_lower[t] += 1;
            suf_lower_ok[t] &= pods[i].writable;
            suf_intended_max[t] = suf_intended_max[t].max(pods[i].intended);
        } else {
            let c = cost_of(i);
            suf_kept_min[t] = Some(suf_kept_min[t].map_or(c, |x| x.min(c)));
        }
    }
    let mut best: Option<(usize, usize, usize)> = None; // (writes, raises, t)
    let (mut raises, mut raise_ok, mut wanted_max): (usize, bool, Option<i32>) = (0, true, None);
    for t in 0..=m {
        if t > 0 {
            let i = seq[t - 1];
            if wanted[i] {
                let c = cost_of(i);
                wanted_max = Some(wanted_max.map_or(c, |x| x.max(c)));
            } else {
                raises += 1;
                raise_ok &= pods[i].writable;
            }
        }
        // only where the cost rises: pods of one cost are split by later
        // rules, which may tie or not be a strict weak order
        let boundary = t == 0 || t == m || cost_of(seq[t - 1]) < cost_of(seq[t]);
        if !boundary || !raise_ok || !suf_lower_ok[t] {
            continue;
        }
        let lowers = suf_lower[t];
        if lowers > 0 && suf_kept_min[t] == Some(i32::MIN) {
            continue;
        }
        let low_max = lowered_max(suf_intended_max[t], suf_kept_min[t], lowers);
        if raises > 0 && (wanted_max == Some(i32::MAX) || low_max == Some(i32::MAX)) {
            continue;
        }
        let score = (lowers + raises, raises, t);
        if best.is_none_or(|b| (score.0, score.1) < (b.0, b.1)) {
            best = Some(score);
        }
    }
    let (_, _, t) = best?;
    Some(writes_at(t, seq, keys, pods, wanted))
}

/// The highest value written to a lowered pod: each gets the lower of its
/// intended cost and one below the lowest kept cost after the cut.
fn lowered_max(intended_max: i32, kept_min: Option<i32>, lowers: usize) -> Option<i32> {
    (lowers > 0).then(|| match kept_min {
        Some(c) => intended_max.min(c.saturating_sub(1)),
        None => intended_max,
    })
}

/// The writes of the cut at `t`.
fn writes_at(
    t: usize,
    seq: &[usize],
    keys: &[RankKey],
    pods: &[PodCosts],
    wanted: &[bool],
) -> Vec<Write> {
    let kept_min = seq[t..]
        .iter()
        .filter(|&&i| !wanted[i])
        .map(|&i| keys[i].cost.value)
        .min();
    let mut out: Vec<Write> = seq[t..]
        .iter()
        .filter(|&&i| wanted[i])
        .map(|&i| Write {
            pod: i,
            cost: match kept_min {
                Some(c) => pods[i].intended.min(c.saturating_sub(1)),
                None => pods[i].intended,
            },
            direction: Direction::Lower,
        })
        .collect();
    let floor = seq[..t]
        .iter()
        .filter(|&&i| wanted[i])
        .map(|&i| keys[i].cost.value)
        .chain(out.iter().map(|w| w.cost))
        .max();
    out.extend(seq[..t].iter().filter(|&&i| !wanted[i]).map(|&i| Write {
        pod: i,
        cost: match floor {
            Some(f) => pods[i].intended.max(f.saturating_add(1)),
            None => pods[i].intended,
        },
        direction: Direction::Raise,
    }));
    // a value equal to the live one changes nothing: not sent
    out.retain(|w| keys[w.pod].cost.value != w.cost || keys[w.pod].cost.problem.is_some());
    out
}

/// When no cut works: lower every wanted pod that may be written below the
/// lowest kept cost (or to int32's least value).
fn best_effort(seq: &[usize], keys: &[RankKey], pods: &[PodCosts], wanted: &[bool]) -> Vec<Write> {
    let kept_min = seq
        .iter()
        .filter(|&&i| !wanted[i])
        .map(|&i| keys[i].cost.value)
        .min();
    seq.iter()
        .filter(|&&i| wanted[i] && pods[i].writable)
        .map(|&i| Write {
            pod: i,
            cost: match kept_min {
                Some(c) => pods[i].intended.min(c.saturating_sub(1)),
                None => pods[i].intended,
            },
            direction: Direction::Lower,
        })
        .filter(|w| keys[w.pod].cost.value != w.cost)
        .collect()
}

/// A scale-in the plan corrects for: the workload's ReplicaSets, by how
/// many pods, and the values in flight to its pods (by pod name; a removal
/// counts as 0, what the controller reads of a pod without a cost).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScaleInTarget {
    /// The ReplicaSets scaled in (each corrected for the whole amount:
    /// during a rollout the Deployment controller splits it between them).
    pub replica_sets: BTreeSet<String>,
    /// Pods to delete.
    pub by: usize,
    /// Values in flight, by pod name.
    pub in_flight: HashMap<String, i32>,
}

/// One cost the correction writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorrectionWrite {
    /// Pod name.
    pub pod: Arc<str>,
    /// Pod UID.
    pub uid: Arc<str>,
    /// The cost to write.
    pub cost: i32,
    /// Whether it lowers a wanted pod or raises a kept one.
    pub direction: Direction,
}

/// The correction of one ReplicaSet for a scale-in, by pod name, with what
/// it needs to say which pods go once some of its writes landed.
#[derive(Debug, Clone)]
pub struct ReplicaSetCorrection {
    /// The ReplicaSet.
    pub replica_set: String,
    /// Pods deleted from it.
    pub by: usize,
    /// The correction over `names`' indices.
    pub correction: Correction,
    /// The writes, by name, in the order to send them.
    pub writes: Vec<CorrectionWrite>,
    /// Each pod's name, by index.
    names: Vec<Arc<str>>,
    /// Each pod's intended cost, by index.
    intended: Vec<i32>,
    /// The pods' keys with their costs as they stand (pessimistic).
    keys: Vec<RankKey<'static>>,
    cmp: Comparator,
}

impl ReplicaSetCorrection {
    /// Corrects one ReplicaSet: `keys` with live costs, `pods` what the
    /// policy intends for each, `names`/`uids` by index.
    pub fn new(
        replica_set: &str,
        cmp: &Comparator,
        keys: &[RankKey],
        pods: &[PodCosts],
        names: Vec<Arc<str>>,
        uids: &[Arc<str>],
        by: usize,
    ) -> Self {
        let correction = correct(cmp, keys, pods, by);
        let writes = correction
            .writes
            .iter()
            .map(|w| CorrectionWrite {
                pod: names[w.pod].clone(),
                uid: uids[w.pod].clone(),
                cost: w.cost,
                direction: w.direction,
            })
            .collect();
        let keys = keys
            .iter()
            .zip(pods)
            .map(|(k, p)| {
                let mut k = k.clone().into_owned();
                if let Some(f) = p.in_flight {
                    k.cost = cost(f);
                }
                k
            })
            .collect();
        ReplicaSetCorrection {
            replica_set: replica_set.to_string(),
            by,
            correction,
            writes,
            intended: pods.iter().map(|p| p.intended).collect(),
            names,
            keys,
            cmp: *cmp,
        }
    }

    fn named(&self, idx: &[usize]) -> Vec<Arc<str>> {
        idx.iter().map(|&i| self.names[i].clone()).collect()
    }

    /// The pods the policy wants deleted.
    pub fn wanted(&self) -> Vec<Arc<str>> {
        self.named(&self.correction.wanted)
    }

    /// The pods the controller deletes once every write landed.
    pub fn after(&self) -> Vec<Arc<str>> {
        self.named(&self.correction.after)
    }

    /// The pods the controller deletes when only the writes `landed`
    /// accepts are on the pods (values in flight counted as landed).
    pub fn victims_if(&self, landed: impl Fn(&CorrectionWrite) -> bool) -> Vec<Arc<str>> {
        let idx: Vec<Write> = self
            .correction
            .writes
            .iter()
            .zip(&self.writes)
            .filter(|(_, w)| landed(w))
            .map(|(w, _)| *w)
            .collect();
        let v = Correction::victims_after(&self.cmp, &self.keys, &idx, self.by);
        self.named(&v)
    }

    /// Whether, once every write landed, the cut falls inside a run of pods
    /// the comparator ranks equal: the controller then picks among them by
    /// its informer's order, so the victims named are one choice of several
    /// (all of which the policy accepts), not a prediction.
    pub fn tie_at_cut(&self) -> bool {
        (1..self.keys.len()).contains(&self.by)
            && victims_after_writes(&self.cmp, &self.keys, &self.correction.writes, self.by)
                .tie_at_cut
    }

    /// The cost the controller reads of `pod` once the writes landed, and
    /// the cost the policy intends for it.
    pub fn costs_of(&self, pod: &str) -> Option<(i32, i32)> {
        let i = self.names.iter().position(|n| &**n == pod)?;
        let written = self.writes.iter().find(|w| &*w.pod == pod).map(|w| w.cost);
        Some((written.unwrap_or(self.keys[i].cost.value), self.intended[i]))
    }
}

#[cfg(test)]
mod tests;
