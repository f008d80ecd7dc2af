//! The layering, enforced. The crates are the layers and Cargo keeps them:
//! `deletion-cost-core` (pure) cannot name the write path or the runtime,
//! `deletion-cost-writes` cannot name the runtime. What Cargo does not see
//! is checked here:
//!
//! - the core's and the report's dependencies, direct and transitive, hold
//!   no I/O or async runtime crate (`cargo metadata`);
//! - inside `deletion-cost-runtime`, `metrics` and `prometheus` name none of
//!   `engine`, `hook` and `operator`; the engine names neither the hook nor
//!   the operator; the hook never the operator; within the operator only its
//!   `run` wiring, its `config` and its `error` name the hook;
//! - of the CLI (`src/cli/`), only `live.rs` names kube's client side.
//!
//! Paths are read with `syn` from `use` trees and from code, `super::` and
//! `self::` resolved, so a comment or a string never counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use syn::visit::Visit;

/// Crates that do I/O or run async work: the core depends on none of them.
const IO_CRATES: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "tokio",
    "hyper",
    "hyper-util",
    "reqwest",
    "axum",
    "tower",
    "rustls",
    "tokio-rustls",
    "prometheus-http-query",
    "prometheus-client",
    "governor",
    "futures",
    "clap",
];

/// Parts of `kube` that talk to an API server.
const KUBE_IO: &[&str] = &[
    "api", "Api", "client", "Client", "config", "Config", "runtime", "Error",
];

#[test]
fn the_core_depends_on_no_io_crate() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let graph = |normal_only: bool| -> BTreeMap<&str, Vec<&str>> {
        meta["resolve"]["nodes"]
            .as_array()
            .expect("resolve.nodes")
            .iter()
            .map(|n| {
                let deps = n["deps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|d| {
                        !normal_only
                            || d["dep_kinds"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|k| k["kind"].is_null())
                    })
                    .map(|d| d["pkg"].as_str().unwrap())
                    .collect();
                (n["id"].as_str().unwrap(), deps)
            })
            .collect()
    };
    // the names of the packages `root` reaches in `nodes`
    let reached = |nodes: &BTreeMap<&str, Vec<&str>>, root| -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![root];
        while let Some(id) = todo.pop() {
            if seen.insert(id) {
                todo.extend(nodes.get(id).into_iter().flatten().copied());
            }
        }
        seen.iter().map(|id| name_of[id]).collect()
    };
    // normal dependencies for I/O: the tests of the core may use anything
    let nodes = graph(true);
    // every kind (normal, build, dev) for YAML and HTML: not even the
    // core's tests read or write them
    let all_kinds = graph(false);
    // the core, the readers and the page built from its plans are pure
    for pure in [
        "deletion-cost-core",
        "deletion-cost-input",
        "deletion-cost-report",
    ] {
        let root = name_of
            .iter()
            .find(|(_, name)| **name == pure)
            .map(|(id, _)| *id)
            .unwrap_or_else(|| panic!("{pure} is a workspace member"));
        let names = reached(&nodes, root);
        let io: Vec<&&str> = IO_CRATES.iter().filter(|c| names.contains(**c)).collect();
        assert!(io.is_empty(), "{pure} reaches I/O crates: {io:?}");
        // the check sees the graph: the core's own dependencies are there
        assert!(
            names.contains("kube-core") && names.contains("k8s-openapi"),
            "{pure}"
        );
        // the domain without the tooling: YAML is read by the readers'
        // crate, HTML written by the report's
        if pure == "deletion-cost-core" {
            let every_kind = reached(&all_kinds, root);
            for tooling in ["serde-saphyr", "maud"] {
                assert!(
                    !every_kind.contains(tooling),
                    "the core reaches {tooling} (normal, build or dev)"
                );
            }
        } else if pure == "deletion-cost-input" {
            assert!(
                names.contains("serde-saphyr"),
                "the check sees the readers' YAML"
            );
        } else if pure == "deletion-cost-report" {
            assert!(names.contains("maud"), "the check sees the page's markup");
        }
    }
}

#[test]
fn inside_the_runtime_each_layer_names_only_the_layers_below_it() {
    let mut violations = Vec::new();
    for src in sources("crates/runtime/src") {
        let top = src.module.first().map(String::as_str).unwrap_or("");
        let forbidden: &[&str] = match top {
            "metrics" | "prometheus" => &["engine", "hook", "operator"],
            "engine" => &["hook", "operator"],
            "hook" => &["operator"],
            // only the run wiring, and the settings and errors it carries
            "operator" if !["run", "config", "error"].contains(&module_at(&src, 1)) => &["hook"],
            _ => continue,
        };
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            if seg[0] == "crate" && seg.len() > 1 && forbidden.contains(&seg[1]) {
                violations.push(format!("{}: {path}", src.file));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "runtime layers (metrics, prometheus -> engine -> hook -> operator; only \
         operator::run, config and error name the hook) broken:\n{}",
        violations.join("\n")
    );
}

/// The CLI's reads of the cluster are one thin shell: the commands hand
/// `live.rs` flags and get back the snapshot a file would give, so their
/// answers from a file and from the cluster agree. The one command that
/// writes (`scale-in --remove`) does so in one file of its own, after
/// deciding over what `live.rs` read.
#[test]
fn only_the_cli_s_live_module_talks_to_the_api_server() {
    const TALK: [&str; 2] = ["src/cli/live.rs", "src/cli/scale_in/apply.rs"];
    let cli = sources("src");
    let mut violations = Vec::new();
    for src in cli.iter().filter(|s| !TALK.contains(&s.file.as_str())) {
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            if seg[0] == "kube" && seg.len() > 1 && KUBE_IO.contains(&seg[1]) {
                violations.push(format!("{}: {path}", src.file));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "only src/cli/live.rs (reads) and src/cli/scale_in/apply.rs (scale-in's writes) talk to \
         the cluster for the CLI:\n{}",
        violations.join("\n")
    );
    let live = cli
        .iter()
        .find(|s| s.file == "src/cli/live.rs")
        .expect("src/cli/live.rs read");
    assert!(live.paths.iter().any(|p| p.starts_with("kube::")));
}

/// The reading sees what it must, so the rules above do not pass on an
/// empty scan.
#[test]
fn the_scan_finds_the_known_paths() {
    let all = sources("crates/runtime/src");
    assert!(all.len() > 30, "only {} source files found", all.len());
    let names = |file: &str, path: &str| {
        all.iter()
            .find(|s| s.file == file)
            .unwrap_or_else(|| panic!("{file} not read"))
            .paths
            .contains(path)
    };
    assert!(names(
        "crates/runtime/src/hook/handler.rs",
        "crate::engine::Engine"
    ));
    // a `super::` path, resolved
    assert!(names(
        "crates/runtime/src/engine/round.rs",
        "crate::engine::caches::Caches"
    ));
    // a path in code, not in a `use`
    assert!(names(
        "crates/runtime/src/operator/run.rs",
        "crate::hook::serve"
    ));
}

#[test]
fn use_trees_and_code_paths_are_resolved_and_strings_skipped() {
    let code = r##"
        //! crate::operator::in_a_doc_comment
        use crate::operator::{round::{self, Rounds}, leadership::*};
        use kube::{Api as KubeApi, ResourceExt};
        pub(crate) use super::x;
        fn f() {
            let _ = "crate::operator::in_a_string";
            let _ = tokio::time::sleep;
            mod inner { use super::super::y; }
        }
    "##;
    let module = vec!["hook".to_string(), "handler".to_string()];
    let paths = paths_of(code, &module);
    for want in [
        "crate::operator::round",
        "crate::operator::round::Rounds",
        "crate::operator::leadership::*",
        "kube::Api",
        "kube::ResourceExt",
        "crate::hook::x",
        "tokio::time::sleep",
    ] {
        assert!(paths.contains(want), "{want} not in {paths:?}");
    }
    assert!(!paths.iter().any(|p| p.contains("in_a_")), "{paths:?}");
}

// ---- reading the sources ----

/// One source file and every path it names, resolved.
struct Source {
    /// Relative to the workspace root, e.g. `crates/runtime/src/hook/handler.rs`.
    file: String,
    /// Its module path below the crate root, e.g. `["hook", "handler"]`.
    module: Vec<String>,
    /// Every path it names: `crate::...` or an outside crate's.
    paths: BTreeSet<String>,
    /// The paths named outside its test modules (`mod tests`).
    product_paths: BTreeSet<String>,
}

fn module_at(src: &Source, depth: usize) -> &str {
    src.module.get(depth).map(String::as_str).unwrap_or("")
}

fn sources(root: &str) -> Vec<Source> {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect(&base.join(root), &mut files);
    files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let in_crate = rel.strip_prefix(root).unwrap().trim_start_matches('/');
            let module = module_of(in_crate);
            let text = std::fs::read_to_string(&path).unwrap();
            let (paths, product_paths) = paths_split(&text, &module);
            Source {
                file: rel,
                module,
                paths,
                product_paths,
            }
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `hook/handler.rs` -> `[hook, handler]`; `hook/mod.rs` -> `[hook]`;
/// `lib.rs` -> `[]`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every path `code` names, resolved against its `module`.
fn paths_of(code: &str, module: &[String]) -> BTreeSet<String> {
    paths_split(code, module).0
}

/// Every path `code` names, and those it names outside `mod tests`.
fn paths_split(code: &str, module: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let file = syn::parse_file(code).unwrap_or_else(|e| panic!("does not parse: {e}"));
    let mut paths = Paths {
        module: module.to_vec(),
        found: BTreeSet::new(),
        product: BTreeSet::new(),
        in_tests: 0,
    };
    paths.visit_file(&file);
    (paths.found, paths.product)
}

struct Paths {
    /// The module the visitor is in (inline `mod x { .. }` pushed).
    module: Vec<String>,
    found: BTreeSet<String>,
    /// What is found outside test modules.
    product: BTreeSet<String>,
    /// How many `mod tests` the visitor is in.
    in_tests: usize,
}

impl Paths {
    /// `super::x` / `self::x` -> `crate::...`; other paths as written.
    fn add(&mut self, segments: Vec<String>) {
        let mut module = self.module.clone();
        let mut rest = segments.as_slice();
        match rest.first().map(String::as_str) {
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    module.pop();
                    rest = &rest[1..];
                }
            }
            _ => {
                self.insert(segments.join("::"));
                return;
            }
        }
        let mut full = vec!["crate".to_string()];
        full.extend(module);
        full.extend(rest.iter().cloned());
        self.insert(full.join("::"));
    }

    fn insert(&mut self, path: String) {
        if self.in_tests == 0 {
            self.product.insert(path.clone());
        }
        self.found.insert(path);
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => self.add(prefix.clone()),
            syn::UseTree::Name(n) => self.add([prefix.clone(), vec![n.ident.to_string()]].concat()),
            syn::UseTree::Rename(r) => {
                self.add([prefix.clone(), vec![r.ident.to_string()]].concat())
            }
            syn::UseTree::Glob(_) => self.add([prefix.clone(), vec!["*".into()]].concat()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let tests = item.ident == "tests";
        self.in_tests += usize::from(tests);
        self.module.push(item.ident.to_string());
        syn::visit::visit_item_mod(self, item);
        self.module.pop();
        self.in_tests -= usize::from(tests);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            self.add(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }
}

/// Data flows one way inside each crate too: no two modules name each
/// other, directly or through others. A module naming its own parent (or
/// a parent its children) is how Rust nests modules and does not count;
/// test modules do not count. Shared types live in leaf modules.
#[test]
fn no_circle_of_modules_inside_a_crate() {
    let mut circles = Vec::new();
    for root in [
        "crates/core/src",
        "crates/input/src",
        "crates/report/src",
        "crates/writes/src",
        "crates/runtime/src",
        "src",
    ] {
        circles.extend(
            module_circles(&sources(root))
                .into_iter()
                .map(|c| format!("{root}: {}", c.join(" -> "))),
        );
    }
    assert!(
        circles.is_empty(),
        "modules that name each other:\n{}",
        circles.join("\n")
    );
}

/// Every circle among `srcs`' modules (each as its modules in order, the
/// first repeated at the end), through the paths they name.
fn module_circles(srcs: &[Source]) -> Vec<Vec<String>> {
    let is_test = |m: &[String]| m.iter().any(|s| s == "tests" || s == "test_support");
    let modules: BTreeSet<Vec<String>> = srcs
        .iter()
        .map(|s| s.module.clone())
        .filter(|m| !is_test(m))
        .collect();
    let ancestor = |a: &[String], b: &[String]| a.len() < b.len() && b.starts_with(a);
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for src in srcs.iter().filter(|s| !is_test(&s.module)) {
        for path in &src.product_paths {
            let seg: Vec<String> = path.split("::").map(String::from).collect();
            if seg.first().map(String::as_str) != Some("crate") {
                continue;
            }
            // the longest module the path goes through
            let Some(target) = (1..seg.len())
                .rev()
                .map(|n| seg[1..=n].to_vec())
                .find(|m| modules.contains(m))
            else {
                continue;
            };
            if target == src.module
                || ancestor(&target, &src.module)
                || ancestor(&src.module, &target)
                || is_test(&target)
            {
                continue;
            }
            edges.entry(src.module.clone()).or_default().insert(target);
        }
    }
    // a circle through each module that can reach itself: the shortest,
    // by breadth-first search; each circle reported once
    let mut seen: BTreeSet<BTreeSet<Vec<String>>> = BTreeSet::new();
    let mut out = Vec::new();
    for start in edges.keys() {
        let mut back: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut found = None;
        while let Some(m) = queue.pop_front() {
            for next in edges.get(&m).into_iter().flatten() {
                if next == start {
                    found = Some(m.clone());
                    break;
                }
                if !back.contains_key(next) {
                    back.insert(next.clone(), m.clone());
                    queue.push_back(next.clone());
                }
            }
            if found.is_some() {
                break;
            }
        }
        let Some(mut last) = found else { continue };
        let mut circle = vec![last.clone()];
        while &last != start {
            last = back[&last].clone();
            circle.push(last.clone());
        }
        circle.reverse();
        let members: BTreeSet<Vec<String>> = circle.iter().cloned().collect();
        if seen.insert(members) {
            circle.push(start.clone());
            out.push(circle.iter().map(|m| m.join("::")).collect());
        }
    }
    out
}

#[test]
fn a_circle_of_modules_is_found() {
    let src = |module: &str, code: &str| {
        let module: Vec<String> = module.split("::").map(String::from).collect();
        let (paths, product_paths) = paths_split(code, &module);
        Source {
            file: module.join("/"),
            paths,
            product_paths,
            module,
        }
    };
    let srcs = [
        src("engine", "use self::a::A; use self::b::B;"),
        src("engine::a", "use super::b::B; use super::Engine;"),
        src("engine::b", "use super::c::C;"),
        src("engine::c", "use crate::engine::a::A;"),
        src("engine::d", "use super::a::A;"),
        src("engine::tests", "use super::d::D;"),
        src(
            "engine::e",
            "use super::a::A; mod tests { use crate::engine::e::E; }",
        ),
        src("engine::f", "mod tests { use super::super::e::E; }"),
    ];
    assert_eq!(
        module_circles(&srcs),
        [vec!["engine::a", "engine::b", "engine::c", "engine::a"]]
    );
}
