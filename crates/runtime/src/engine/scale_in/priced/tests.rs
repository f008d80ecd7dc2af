//! The priced scale-ins' totals: what one scale-in adds, what becomes of
//! the nodes it freed, and that a restart (the status read back, what was
//! priced meanwhile added to it) changes no total.

use proptest::prelude::*;

use super::*;

fn money(s: &str) -> Money {
    Money::parse_amount(s).unwrap()
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn freed(name: &str, uid: &str, hourly: Option<&str>) -> FreedRef {
    FreedRef {
        name: name.into(),
        uid: Some(uid.into()),
        hourly: hourly.map(money),
    }
}

fn choice(victims: usize, nodes: Vec<FreedRef>) -> ChoiceFreed {
    let hourly = nodes.iter().filter_map(|n| n.hourly).sum();
    ChoiceFreed {
        victims,
        nodes,
        hourly,
    }
}

fn scale_in(when: &str, policy: ChoiceFreed, default: ChoiceFreed) -> PricedScaleIn {
    PricedScaleIn {
        at: at(when),
        workload: "Deployment shop/web".into(),
        by: FreshBy::Webhook,
        from: 4,
        to: 2,
        currency: Some("USD".into()),
        with_policy: policy,
        by_default: default,
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn a_scale_in_adds_both_choices_and_watches_what_the_policy_freed() {
    let s = scale_in(
        "2026-11-25T10:00:00Z",
        choice(
            2,
            vec![
                freed("spot-1", "u1", Some("0.0416")),
                freed("odd", "u2", None),
            ],
        ),
        choice(2, vec![]),
    );
    assert_eq!(
        s.summary(),
        "with the policy 2 victim(s) free 2 node(s) (spot-1, odd), 0.0416 USD/h (1 unpriced); \
         by the default order 2 victim(s) would free 0 node(s), 0.00 USD/h"
    );
    let mut t = Totals::default();
    assert!(t.add(&s, HOUR).is_empty());
    assert_eq!(t.priced, 1);
    assert_eq!(
        t.with_policy,
        FreedSum {
            victims: 2,
            nodes: 2,
            unpriced: 1,
            hourly: money("0.0416")
        }
    );
    assert_eq!(t.by_default.victims, 2);
    assert_eq!(t.by_default.nodes, 0);
    let watched: Vec<(&str, Timestamp)> = t
        .awaiting
        .iter()
        .map(|a| (a.node.as_str(), a.until))
        .collect();
    let until = at("2026-11-25T11:00:00Z");
    assert_eq!(watched, [("spot-1", until), ("odd", until)]);
    let last = t.last.clone().unwrap();
    assert_eq!(last.by, "webhook");
    assert_eq!(last.with_policy.freed_nodes, ["spot-1", "odd"]);
    assert_eq!(last.with_policy.hourly, "0.0416");
    assert_eq!(last.by_default.nodes, 0);
}

#[test]
fn many_freed_nodes_are_named_by_the_first_few() {
    let nodes = (0..7)
        .map(|i| freed(&format!("n{i}"), "u", Some("1")))
        .collect();
    let s = scale_in("2026-11-25T10:00:00Z", choice(7, nodes), choice(7, vec![]));
    assert!(
        s.summary()
            .starts_with("with the policy 7 victim(s) free 7 node(s) (n0, n1, n2, n3, n4 and 2 more), 7.00 USD/h;"),
        "{}",
        s.summary()
    );
    let without_currency = PricedScaleIn {
        currency: None,
        ..s
    };
    assert!(without_currency.summary().contains(", 7.00/h;"));
}

#[test]
fn a_watched_node_is_removed_when_gone_or_replaced_and_not_after_its_window() {
    let a = Awaiting {
        node: "spot-1".into(),
        uid: Some("u1".into()),
        hourly: Some(money("0.04")),
        freed_at: at("2026-11-25T10:00:00Z"),
        until: at("2026-11-25T10:30:00Z"),
    };
    let during = at("2026-11-25T10:10:00Z");
    assert_eq!(fate(&a, during, Some(Some("u1"))), None, "still there");
    assert_eq!(fate(&a, during, None), Some(true), "gone");
    assert_eq!(fate(&a, during, Some(Some("u9"))), Some(true), "replaced");
    // a node without a UID on either side is the same node
    assert_eq!(fate(&a, during, Some(None)), None);
    // the window is checked first: gone only after it is not claimed
    assert_eq!(fate(&a, a.until, None), Some(false));
    assert_eq!(fate(&a, a.until, Some(Some("u1"))), Some(false));
}

#[test]
fn settling_counts_removed_and_not_removed_with_their_prices() {
    let mut t = Totals::default();
    t.add(
        &scale_in(
            "2026-11-25T10:00:00Z",
            choice(
                3,
                vec![
                    freed("a", "ua", Some("0.10")),
                    freed("b", "ub", Some("0.20")),
                    freed("c", "uc", None),
                ],
            ),
            choice(3, vec![freed("d", "ud", Some("0.5"))]),
        ),
        HOUR,
    );
    // a is gone, b is still there, c was replaced
    let nodes: HashMap<&str, &str> = [("b", "ub"), ("c", "uc-new")].into_iter().collect();
    let current = |n: &str| nodes.get(n).map(|u| Some(*u));
    let settled = t.settle(at("2026-11-25T10:05:00Z"), current);
    let names: Vec<(&str, bool)> = settled
        .iter()
        .map(|s| (s.node.as_str(), s.removed))
        .collect();
    assert_eq!(names, [("a", true), ("c", true)]);
    assert_eq!(
        t.removed,
        NodeSum {
            nodes: 2,
            hourly: money("0.10")
        }
    );
    assert_eq!(t.awaiting.len(), 1);
    // the window ends with b still there
    let settled = t.settle(at("2026-11-25T11:00:00Z"), current);
    assert_eq!(settled.len(), 1);
    assert!(!settled[0].removed);
    assert_eq!(
        t.not_removed,
        NodeSum {
            nodes: 1,
            hourly: money("0.20")
        }
    );
    assert!(t.awaiting.is_empty());
    // the default's nodes are never watched
    assert_eq!(t.by_default.nodes, 1);
}

#[test]
fn the_status_holds_the_totals_exactly() {
    let mut t = Totals::default();
    t.add(
        &scale_in(
            "2026-11-25T10:00:00Z",
            choice(1, vec![freed("a", "ua", Some("0.000001"))]),
            choice(1, vec![freed("b", "ub", Some("123456.5"))]),
        ),
        HOUR,
    );
    let status = t.to_status();
    assert_eq!(status.with_policy.hourly, "0.000001");
    assert_eq!(status.by_default.hourly, "123456.50");
    assert_eq!(status.awaiting_removal[0].until, "2026-11-25T11:00:00Z");
    // through the API server's JSON and back
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["withPolicy"]["nodes"], 1);
    assert!(json["withPolicy"].get("unpricedNodes").is_none());
    let back: PricedScaleIns = serde_json::from_value(json).unwrap();
    let (read, warnings) = Totals::from_status(&back);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(read, t);
}

#[test]
fn a_status_edited_by_hand_reads_as_zero_naming_the_field() {
    let mut status = Totals::default().to_status();
    status.priced = 3;
    status.with_policy.hourly = "lots".into();
    status.awaiting_removal.push(AwaitingRemoval {
        node: "x".into(),
        uid: None,
        hourly: Some("0.5".into()),
        freed_at: "yesterday".into(),
        until: "2026-11-25T11:00:00Z".into(),
    });
    let (t, warnings) = Totals::from_status(&status);
    assert_eq!(t.priced, 3);
    assert_eq!(t.with_policy.hourly, Money::ZERO);
    assert!(t.awaiting.is_empty());
    assert_eq!(
        t.not_removed,
        NodeSum {
            nodes: 1,
            hourly: money("0.5")
        }
    );
    assert_eq!(
        warnings,
        [
            "status.pricedScaleIns.withPolicy.hourly: \"lots\" is not an amount; counted as 0",
            "status.pricedScaleIns.awaitingRemoval[0]: freedAt or until is not a time; node x counted as not removed",
        ]
    );
}

#[test]
fn past_the_cap_the_oldest_watched_node_is_given_up_as_not_removed() {
    let mut t = Totals::default();
    for i in 0..MAX_AWAITING {
        let when = format!("2026-11-25T10:{:02}:{:02}Z", i / 60, i % 60);
        assert!(t
            .add(
                &scale_in(
                    &when,
                    choice(1, vec![freed(&format!("n{i}"), "u", Some("1"))]),
                    choice(1, vec![])
                ),
                HOUR
            )
            .is_empty());
    }
    let dropped = t.add(
        &scale_in(
            "2026-11-25T10:59:00Z",
            choice(1, vec![freed("late", "u", Some("1"))]),
            choice(1, vec![]),
        ),
        HOUR,
    );
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].node, "n0");
    assert_eq!(t.awaiting.len(), MAX_AWAITING);
    assert_eq!(t.not_removed.nodes, 1);
}

#[test]
fn the_ledger_reads_the_status_once_and_adds_what_came_before() {
    let ledger = Ledger::default();
    let key = PolicyKey::new("shop", "web");
    let s = scale_in(
        "2026-11-25T10:00:00Z",
        choice(2, vec![freed("a", "ua", Some("0.1"))]),
        choice(2, vec![]),
    );
    // priced before this term read the status: not shown yet
    ledger.record(&key, &s, HOUR);
    assert!(!ledger.seeded(&key));
    assert_eq!(ledger.view(&key), None);
    let mut before = Totals::default();
    before.add(&s, HOUR);
    before.add(&s, HOUR);
    let status = before.to_status();
    assert!(ledger.seed(&key, Some(&status)).is_empty());
    let shown = ledger.view(&key).unwrap();
    assert_eq!(shown.priced, 3);
    assert_eq!(shown.with_policy.hourly, "0.30");
    assert_eq!(shown.awaiting_removal.len(), 3);
    // once a term: a second read changes nothing
    let mut other = status.clone();
    other.priced = 99;
    ledger.seed(&key, Some(&other));
    assert_eq!(ledger.view(&key).unwrap().priced, 3);
    // a new term reads again
    ledger.clear();
    assert!(!ledger.seeded(&key));
    ledger.seed(&key, Some(&other));
    assert_eq!(ledger.view(&key).unwrap().priced, 99);
    // a policy never priced shows nothing
    let quiet = PolicyKey::new("shop", "quiet");
    ledger.seed(&quiet, None);
    assert_eq!(ledger.view(&quiet), None);
    ledger.forget(&key);
    assert!(!ledger.seeded(&key));
}

/// One step of a policy's life: a scale-in, a look at the nodes, or a
/// restart (the status written, read back by a new term).
#[derive(Debug, Clone)]
enum Step {
    ScaleIn {
        minute: u16,
        policy: Vec<(u8, Option<u32>)>,
        default: Vec<(u8, Option<u32>)>,
        victims: u8,
    },
    Look {
        minute: u16,
        gone: Vec<u8>,
    },
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    let nodes = || prop::collection::vec((0u8..12, prop::option::of(0u32..5_000_000)), 0..4);
    prop_oneof![
        (0u16..240, nodes(), nodes(), 1u8..6).prop_map(|(minute, policy, default, victims)| {
            Step::ScaleIn {
                minute,
                policy,
                default,
                victims,
            }
        }),
        (0u16..300, prop::collection::vec(0u8..12, 0..6))
            .prop_map(|(minute, gone)| Step::Look { minute, gone }),
        Just(Step::Restart),
    ]
}

fn when(minute: u16) -> Timestamp {
    at("2026-11-25T00:00:00Z") + SignedDuration::from_mins(i64::from(minute))
}

fn refs(nodes: &[(u8, Option<u32>)]) -> Vec<FreedRef> {
    nodes
        .iter()
        .map(|(n, micros)| FreedRef {
            name: format!("n{n}"),
            uid: Some(format!("u{n}")),
            hourly: micros.map(|m| Money::from_micros(i128::from(m))),
        })
        .collect()
}

proptest! {
    /// Whatever happens, every node freed with the policy is removed, not
    /// removed or still watched, and so is its price; and restarts (the
    /// totals written to the status and read back) change nothing.
    #[test]
    fn totals_add_up_and_survive_restarts(steps in prop::collection::vec(step(), 1..40)) {
        let window = Duration::from_secs(3600);
        let key = PolicyKey::new("shop", "web");
        let mut straight = Totals::default();
        let ledger = Ledger::default();
        ledger.seed(&key, None);
        let mut stored: Option<PricedScaleIns> = None;
        for s in &steps {
            match s {
                Step::ScaleIn { minute, policy, default, victims } => {
                    let p = PricedScaleIn {
                        at: when(*minute),
                        workload: "Deployment shop/web".into(),
                        by: FreshBy::Hook,
                        from: 10,
                        to: 10 - i32::from(*victims),
                        currency: None,
                        with_policy: choice(usize::from(*victims), refs(policy)),
                        by_default: choice(usize::from(*victims), refs(default)),
                    };
                    straight.add(&p, window);
                    ledger.record(&key, &p, window);
                }
                Step::Look { minute, gone } => {
                    // the nodes not gone are cached with the UID they were freed with
                    let uids: Vec<(String, String)> = (0..12u8)
                        .filter(|i| !gone.contains(i))
                        .map(|i| (format!("n{i}"), format!("u{i}")))
                        .collect();
                    let lookup = |n: &str| {
                        uids.iter()
                            .find(|(name, _)| name == n)
                            .map(|(_, u)| Some(u.as_str()))
                    };
                    let now = when(*minute);
                    straight.settle(now, lookup);
                    ledger.settle(now, lookup);
                }
                Step::Restart => {
                    stored = ledger.view(&key).or(stored.clone());
                    ledger.clear();
                    ledger.seed(&key, stored.as_ref());
                }
            }
            let t = &straight;
            let watched: u64 = t.awaiting.len() as u64;
            prop_assert_eq!(t.with_policy.nodes, t.removed.nodes + t.not_removed.nodes + watched);
            let watched_hourly: Money = t.awaiting.iter().filter_map(|a| a.hourly).sum();
            prop_assert_eq!(t.with_policy.hourly, t.removed.hourly + t.not_removed.hourly + watched_hourly);
            let shown = ledger.view(&key).unwrap_or_default();
            let expected = if *t == Totals::default() { PricedScaleIns::default() } else { t.to_status() };
            prop_assert_eq!(shown, expected);
        }
    }
}
