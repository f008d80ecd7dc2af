//! Nodes read from the API server ahead of the node watch
//! ([`FresherNodes`]), and the scale-in's read of its workload's nodes
//! ([`ExactScaleIn::read_nodes_now`]).
//!
//! A scale-in plans on the billing class its pods' nodes carry now. The
//! node watch delivers a label change a few milliseconds after it is
//! written, and a scale request can arrive within those milliseconds (a
//! node relabelled, then the workload scaled in at once): planned on the
//! watch's nodes, the scale-in would name the pods the old labels made
//! cheapest. So a scale-in reads its workload's nodes (metadata only, a
//! quorum read: one list selecting them by hostname label, whatever their
//! number) and plans on them where they are newer than the cache's; each
//! stays until the watch shows it as new.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::Api;
use tokio::time::{timeout_at, Instant};

use super::ExactScaleIn;
use crate::engine::trim::trim_node;
use crate::engine::Managed;

/// How long a node read here serves when the watch never shows it as new
/// (the node deleted, the watch down): a scale-in reads it again anyway.
const KEPT_FOR: Duration = Duration::from_secs(60);

/// Nodes read at once.
const READS_AT_ONCE: usize = 16;

/// The longest a scale-in spends reading its nodes (a quarter of what is
/// left of its budget at most); past it, the nodes not read yet come from
/// the watch.
const READ_BUDGET: Duration = Duration::from_millis(500);

/// Nodes read from the API server that may be newer than the node watch's.
#[derive(Default)]
pub struct FresherNodes {
    by_name: Mutex<HashMap<String, (Arc<Node>, Instant)>>,
}

impl FresherNodes {
    /// Keeps `node`, read now.
    pub fn keep(&self, node: Node) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        if let Ok(mut by_name) = self.by_name.lock() {
            by_name.insert(name, (Arc::new(node), Instant::now()));
        }
    }

    /// `watched` with every node read here that is newer in its place (and
    /// nodes read here the watch has not shown yet added); forgets those
    /// the watch has caught up with.
    pub fn over(&self, mut watched: Vec<Arc<Node>>) -> Vec<Arc<Node>> {
        let Ok(mut by_name) = self.by_name.lock() else {
            return watched;
        };
        if by_name.is_empty() {
            return watched;
        }
        let now = Instant::now();
        by_name.retain(|_, (_, at)| now.saturating_duration_since(*at) < KEPT_FOR);
        // the reads the watch shows, by name: a round looks at every node,
        // so no set of all of them is made
        let mut shown = BTreeSet::new();
        for node in &mut watched {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            let Some((read, _)) = by_name.get(name) else {
                continue;
            };
            shown.insert(name.to_string());
            if newer(read, node) {
                *node = read.clone();
            } else {
                by_name.remove(name);
            }
        }
        let unseen: Vec<Arc<Node>> = by_name
            .iter()
            .filter(|(name, _)| !shown.contains(name.as_str()))
            .map(|(_, (n, _))| n.clone())
            .collect();
        watched.extend(unseen);
        watched
    }

    /// `watched` (one node of the watch), or the node read here when newer.
    /// Whether the node exists is the watch's to say: one it no longer
    /// shows is gone (the freed nodes a priced scale-in follows are seen
    /// removed at once), even if a scale-in read it moments before.
    pub fn one(&self, name: &str, watched: Option<Arc<Node>>) -> Option<Arc<Node>> {
        let watched = watched?;
        let read = self
            .by_name
            .lock()
            .ok()
            .and_then(|by_name| by_name.get(name).map(|(n, _)| n.clone()));
        match read {
            Some(read) if newer(&read, &watched) => Some(read),
            _ => Some(watched),
        }
    }
}

/// Whether `read` is newer than `watched`: a greater resourceVersion when
/// both are numbers (etcd's revisions, as every API server in use hands
/// out), else a different one.
fn newer(read: &Node, watched: &Node) -> bool {
    let (r, w) = (
        read.metadata.resource_version.as_deref(),
        watched.metadata.resource_version.as_deref(),
    );
    match (
        r.and_then(|v| v.parse::<u64>().ok()),
        w.and_then(|v| v.parse::<u64>().ok()),
    ) {
        (Some(r), Some(w)) => r > w,
        _ => r != w,
    }
}

/// The label every kubelet puts on its node: the selector of a scale-in's
/// one node list.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// How a scale-in reads its nodes: one list selecting them by their
/// hostname label (as the watch shows it), and a GET for each node the
/// list cannot select (no such label, or one that is not a label value).
#[derive(Debug, Default, PartialEq, Eq)]
struct NodeReads {
    /// The selector's values.
    hostnames: BTreeSet<String>,
    /// Nodes read one by one.
    one_by_one: Vec<String>,
}

/// Splits `names` into the one list and the reads one by one, by the
/// hostname label `hostname_of` gives (the node watch's).
fn node_reads(names: &BTreeSet<String>, hostname_of: impl Fn(&str) -> Option<String>) -> NodeReads {
    let mut reads = NodeReads::default();
    for name in names {
        match hostname_of(name).filter(|h| is_label_value(h)) {
            Some(h) => {
                reads.hostnames.insert(h);
            }
            None => reads.one_by_one.push(name.clone()),
        }
    }
    reads
}

/// Whether `v` may stand in a label selector's value list: at most 63
/// characters, alphanumerics with `-`, `_` or `.` between them (one that is
/// not would make the API server refuse the whole list).
fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

impl ExactScaleIn {
    /// Reads the nodes of `managed`'s pods from the API server (metadata
    /// only), so the scale-in plans on the billing classes they carry now
    /// (see the module docs): one list, whatever the number of nodes,
    /// selecting them by their hostname label (a quorum read), then a GET
    /// for each node the list could not select or did not return (a
    /// hostname label changed since the watch showed it). Nodes not read
    /// by its budget, or whose read failed, come from the watch.
    pub(super) async fn read_nodes_now(&self, managed: &Managed) {
        let deadline = self.call.deadline;
        let ns = &managed.workload.namespace;
        let names: BTreeSet<String> = managed
            .pods
            .iter()
            .filter_map(|pod| {
                self.engine
                    .caches
                    .pod(ns, pod)?
                    .spec
                    .as_ref()?
                    .node_name
                    .clone()
            })
            .collect();
        if names.is_empty() {
            return;
        }
        let started = Instant::now();
        let left = deadline.saturating_duration_since(started);
        let until = started + READ_BUDGET.min(left / 4);
        let api: Api<Node> = Api::all(self.engine.leadership.writes());
        let reads = node_reads(&names, |name| {
            self.engine
                .caches
                .node(name)?
                .metadata
                .labels
                .as_ref()?
                .get(HOSTNAME_LABEL)
                .cloned()
        });
        let (mut read, mut failed, mut gets) = (0usize, 0usize, 0usize);
        let keep = |meta: kube::core::ObjectMeta| {
            let mut node = Node {
                metadata: meta,
                ..Node::default()
            };
            trim_node(&mut node);
            self.engine.caches.keep_fresher_node(node);
        };
        let finished = timeout_at(until, async {
            let mut one_by_one = reads.one_by_one;
            if !reads.hostnames.is_empty() {
                let selector = format!(
                    "{HOSTNAME_LABEL} in ({})",
                    reads.hostnames.iter().map(String::as_str).collect::<Vec<_>>().join(",")
                );
                self.engine.metrics().scale_in_node_requests("list", 1);
                match api.list_metadata(&ListParams::default().labels(&selector)).await {
                    Ok(list) => {
                        let mut listed = BTreeSet::new();
                        for item in list.items {
                            let Some(name) = item.metadata.name.clone() else {
                                continue;
                            };
                            if names.contains(&name) {
                                listed.insert(name);
                                keep(item.metadata);
                                read += 1;
                            }
                        }
                        // the nodes the list could not select, and those it
                        // selected by the watch's hostname but did not
                        // return (the label changed, or the node went)
                        one_by_one = names.difference(&listed).cloned().collect();
                    }
                    Err(e) => {
                        failed += 1;
                        tracing::debug!(error = %crate::error_chain(&e), "listing a scale-in's nodes failed: their labels come from the watch");
                        one_by_one.clear();
                    }
                }
            }
            gets = one_by_one.len();
            let mut each = futures::stream::iter(one_by_one)
                .map(|name| {
                    let api = api.clone();
                    async move {
                        // counted as sent: past the budget the rest are not
                        self.engine.metrics().scale_in_node_requests("get", 1);
                        let got = api.get_metadata_opt(&name).await;
                        (name, got)
                    }
                })
                .buffer_unordered(READS_AT_ONCE);
            while let Some((name, got)) = each.next().await {
                match got {
                    Ok(Some(meta)) => {
                        keep(meta.metadata);
                        read += 1;
                    }
                    // gone: the watch's deletion follows
                    Ok(None) => {}
                    Err(e) => {
                        failed += 1;
                        tracing::debug!(node = %name, error = %crate::error_chain(&e), "reading a scale-in's node failed: its labels come from the watch");
                    }
                }
            }
        })
        .await;
        tracing::debug!(
            workload = %managed.workload,
            nodes = names.len(),
            read,
            failed,
            one_by_one = gets,
            all = finished.is_ok(),
            millis = started.elapsed().as_millis() as u64,
            "read the scale-in's nodes"
        );
        if finished.is_err() {
            tracing::warn!(
                workload = %managed.workload,
                nodes = names.len(),
                read,
                "reading the scale-in's nodes took longer than its share of the budget: the rest come from the watch (a label changed moments ago may not count)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, rv: &str, class: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "resourceVersion": rv,
                "labels": {"billing": class}}
        }))
        .unwrap()
    }

    fn classes(nodes: &[Arc<Node>]) -> Vec<(String, String)> {
        let mut out: Vec<_> = nodes
            .iter()
            .map(|n| {
                (
                    n.metadata.name.clone().unwrap(),
                    n.metadata.labels.as_ref().unwrap()["billing"].clone(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[tokio::test]
    async fn a_node_read_ahead_of_the_watch_serves_until_the_watch_shows_it() {
        let fresher = FresherNodes::default();
        fresher.keep(node("a", "12", "spot"));
        fresher.keep(node("new", "13", "spot"));
        let watched = vec![
            Arc::new(node("a", "10", "on-demand")),
            Arc::new(node("b", "11", "on-demand")),
        ];
        // the read is newer: it counts, and a node the watch has not shown
        // yet is added
        let pair = |n: &str, c: &str| (n.to_string(), c.to_string());
        assert_eq!(
            classes(&fresher.over(watched.clone())),
            vec![
                pair("a", "spot"),
                pair("b", "on-demand"),
                pair("new", "spot")
            ]
        );
        assert_eq!(
            fresher
                .one("a", Some(watched[0].clone()))
                .unwrap()
                .metadata
                .labels
                .as_ref()
                .unwrap()["billing"],
            "spot"
        );
        // a node the watch does not show (not yet, or no longer) is not
        // there for a single look, though a snapshot plans with it
        assert!(fresher.one("new", None).is_none());
        // the watch caught up (a later change even): the read is forgotten
        let caught_up = vec![Arc::new(node("a", "14", "on-demand"))];
        assert_eq!(
            classes(&fresher.over(caught_up.clone())),
            vec![pair("a", "on-demand"), pair("new", "spot")]
        );
        assert_eq!(
            classes(&fresher.over(vec![Arc::new(node("a", "12", "spot"))])),
            vec![pair("a", "spot"), pair("new", "spot")]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_the_watch_never_shows_is_forgotten_after_a_while() {
        let fresher = FresherNodes::default();
        fresher.keep(node("gone", "20", "spot"));
        assert_eq!(fresher.over(Vec::new()).len(), 1);
        tokio::time::advance(KEPT_FOR).await;
        assert!(fresher.over(Vec::new()).is_empty());
    }

    #[test]
    fn nodes_are_listed_by_hostname_and_read_one_by_one_only_without_one() {
        let names: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let long = "x".repeat(64);
        let reads = node_reads(&names, |name| match name {
            // the usual: the hostname label is the node's name
            "a" => Some("a".into()),
            // a provider whose hostname differs from the node's name
            "b" => Some("ip-10-0-0-2".into()),
            // no hostname label, or one no selector can hold
            "c" => None,
            "d" => Some(long.clone()),
            "e" => Some("-bad".into()),
            _ => unreachable!(),
        });
        assert_eq!(
            reads,
            NodeReads {
                hostnames: ["a", "ip-10-0-0-2"].map(String::from).into(),
                one_by_one: vec!["c".into(), "d".into(), "e".into()],
            }
        );
    }

    #[test]
    fn label_values_are_what_a_selector_accepts() {
        for ok in [
            "a",
            "node-1",
            "ip-10-0-0-1.ec2.internal",
            "A_b.c",
            &"x".repeat(63),
        ] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            ".a",
            "a b",
            "a,b",
            "a)",
            &"x".repeat(64),
            "nödé",
        ] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn newer_compares_revisions_as_numbers() {
        assert!(newer(&node("a", "100", "x"), &node("a", "99", "x")));
        assert!(!newer(&node("a", "99", "x"), &node("a", "100", "x")));
        assert!(!newer(&node("a", "7", "x"), &node("a", "7", "x")));
        // not numbers: any difference counts as newer
        assert!(newer(&node("a", "b", "x"), &node("a", "c", "x")));
    }
}
