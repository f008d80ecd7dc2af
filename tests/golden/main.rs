//! Golden plans: the planner on generated clusters (`cases.rs`), compared
//! with the plans written down in `tests/golden/plans/`. They were generated
//! by the planner and checked against a second, independent implementation
//! of it before that one was retired, so a difference is a change of
//! behaviour: either a bug, or an intended change to review in the diff.
//!
//! The planner runs here with its production thresholds and chunk sizes
//! (the planner's unit tests set small chunks); the large clusters cross
//! them, which each test checks against the library's own constants.
//!
//! After an intended change, regenerate and read the diff:
//!
//! ```text
//! UPDATE_GOLDEN=1 cargo test --test golden
//! git diff tests/golden/plans
//! ```

use std::collections::BTreeSet;
use std::path::PathBuf;

// The planner's thresholds: from `PARALLEL_FROM` pods in the namespace,
// costing and keying run on the thread pool, and from twice as many in the
// snapshot so does the scan; the scan and the name sort work over chunks of
// `SELECT_CHUNK`, costing over chunks of `COST_CHUNK`.
use deletion_cost::plan::{COST_CHUNK, PARALLEL_FROM, SELECT_CHUNK};
use serde_json::Value;

mod cases;
mod cluster;

/// How a cluster meets the thresholds: namespace on the pool, scan on the
/// pool, scan chunks, and costing and name-sort chunks of its first plan.
#[derive(Debug, PartialEq)]
struct Crossing {
    namespace_parallel: bool,
    scan_parallel: bool,
    scan_chunks: usize,
    cost_chunks: usize,
    sort_chunks: usize,
}

fn expected_crossing(name: &str) -> Crossing {
    let (namespace_parallel, scan_parallel, scan_chunks, cost_chunks, sort_chunks) = match name {
        "small" | "ties" | "shared-uids" | "autoscalers" => (false, false, 1, 1, 1),
        "ns-1500" => (true, false, 1, 1, 1),
        "mixed-2000" => (true, true, 1, 1, 1),
        "shuffled-13k" => (true, true, 2, 3, 2),
        "large-20k" => (true, true, 3, 4, 2),
        other => panic!("no expected crossing for {other}"),
    };
    Crossing {
        namespace_parallel,
        scan_parallel,
        scan_chunks,
        cost_chunks,
        sort_chunks,
    }
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/plans")
        .join(format!("{name}.json"))
}

/// Plans the golden cluster `name` and compares with its file; rewrites the
/// file instead with `UPDATE_GOLDEN=1`.
fn check(name: &'static str) {
    let g = cases::build(name);
    let actual = cases::render(&g);

    let selected = match &actual["plans"][0]["pods"] {
        Value::Array(a) => a.len(),
        listing => listing["count"].as_u64().unwrap() as usize,
    };
    let in_namespace = g
        .snapshot
        .pods
        .iter()
        .filter(|p| p.identity.namespace.as_deref() == Some(cluster::NAMESPACE))
        .count();
    let crossing = Crossing {
        namespace_parallel: in_namespace >= PARALLEL_FROM,
        scan_parallel: g.snapshot.pods.len() >= 2 * PARALLEL_FROM,
        scan_chunks: g.snapshot.pods.len().div_ceil(SELECT_CHUNK),
        cost_chunks: selected.div_ceil(COST_CHUNK),
        sort_chunks: selected.div_ceil(SELECT_CHUNK),
    };
    assert_eq!(crossing, expected_crossing(name), "{name}: {}", g.about);

    let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let expected: Value = match std::fs::read_to_string(&path) {
        Ok(s) => serde_json::from_str(&s).unwrap(),
        Err(e) => panic!(
            "{}: {e}; generate it with UPDATE_GOLDEN=1 cargo test --test golden",
            path.display()
        ),
    };
    if actual != expected {
        let saved = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("golden-{name}.json"));
        std::fs::write(&saved, &text).unwrap();
        panic!(
            "the plans of golden cluster {name} changed ({}):\n{}\nThis run's plans: {}\n\
             If the change is intended: UPDATE_GOLDEN=1 cargo test --test golden, and review \
             git diff tests/golden/plans",
            g.about,
            differences(&expected, &actual),
            saved.display()
        );
    }
}

/// The plans that differ, each with a line diff of its golden form.
fn differences(expected: &Value, actual: &Value) -> String {
    let (e, a) = (&expected["plans"], &actual["plans"]);
    let (Some(es), Some(as_)) = (e.as_array(), a.as_array()) else {
        return line_diff(&pretty(expected), &pretty(actual));
    };
    let mut out = String::new();
    if expected["about"] != actual["about"] {
        out += &line_diff(&pretty(&expected["about"]), &pretty(&actual["about"]));
    }
    if es.len() != as_.len() {
        out += &format!("{} plans, expected {}\n", as_.len(), es.len());
    }
    let mut shown = 0;
    for (i, (x, y)) in es.iter().zip(as_).enumerate() {
        if x == y {
            continue;
        }
        shown += 1;
        if shown > 3 {
            out += "(more plans differ)\n";
            break;
        }
        out += &format!("--- plan {i}: {}\n", y["case"].as_str().unwrap_or("?"));
        out += &line_diff(&pretty(x), &pretty(y));
    }
    out
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

/// A unified-style diff of two texts (`-` golden, `+` now), three lines of
/// context, at most 150 lines.
fn line_diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    // longest common subsequence of the differing middle (small: one plan)
    let mut ops: Vec<(char, &str)> = Vec::new();
    if am.len() * bm.len() <= 4_000_000 {
        let mut lcs = vec![vec![0u32; bm.len() + 1]; am.len() + 1];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i][j] = if am[i] == bm[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() || j < bm.len() {
            if i < am.len() && j < bm.len() && am[i] == bm[j] {
                ops.push((' ', am[i]));
                (i, j) = (i + 1, j + 1);
            } else if i < am.len() && (j == bm.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
                ops.push(('-', am[i]));
                i += 1;
            } else {
                ops.push(('+', bm[j]));
                j += 1;
            }
        }
    } else {
        ops.extend(am.iter().map(|l| ('-', *l)));
        ops.extend(bm.iter().map(|l| ('+', *l)));
    }
    let context = 3;
    let mut all: Vec<(char, &str)> = a[..head].iter().map(|l| (' ', *l)).collect();
    all.extend(ops);
    all.extend(a[a.len() - tail..].iter().map(|l| (' ', *l)));
    let near_change = |k: usize| {
        let from = k.saturating_sub(context);
        let to = (k + context + 1).min(all.len());
        all[from..to].iter().any(|(op, _)| *op != ' ')
    };
    let mut out = String::new();
    let (mut lines, mut skipped) = (0, false);
    for (k, (op, line)) in all.iter().enumerate() {
        if !near_change(k) {
            skipped = true;
            continue;
        }
        if skipped {
            out += "  ...\n";
            skipped = false;
        }
        lines += 1;
        if lines > 150 {
            out += "  (diff cut)\n";
            break;
        }
        out += &format!("{op} {line}\n");
    }
    out
}

#[test]
fn small() {
    check("small");
}

#[test]
fn ties() {
    check("ties");
}

#[test]
fn shared_uids() {
    check("shared-uids");
}

#[test]
fn autoscalers() {
    check("autoscalers");
}

#[test]
fn ns_1500() {
    check("ns-1500");
}

#[test]
fn mixed_2000() {
    check("mixed-2000");
}

#[test]
fn shuffled_13k() {
    check("shuffled-13k");
}

#[test]
fn large_20k() {
    check("large-20k");
}

/// Every golden file is a cluster's, and together they stay small.
#[test]
fn the_golden_files_are_the_clusters() {
    let dir = golden_path("x");
    let dir = dir.parent().unwrap();
    let mut files: BTreeSet<String> = BTreeSet::new();
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        bytes += entry.metadata().unwrap().len();
        files.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let clusters: BTreeSet<String> = cases::CLUSTERS
        .iter()
        .map(|c| format!("{c}.json"))
        .collect();
    assert_eq!(
        files, clusters,
        "a golden file without its cluster, or the reverse"
    );
    assert!(bytes < 2 << 20, "the golden files take {bytes} bytes");
}

#[test]
fn the_diff_shows_changed_lines_with_context() {
    let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj";
    let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk";
    assert_eq!(
        line_diff(old, new),
        "  ...\n  b\n  c\n  d\n- e\n+ E\n  f\n  g\n  h\n  i\n  j\n+ k\n"
    );
}
