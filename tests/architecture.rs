//! The layering of `src/`, enforced: every path a source file names (its
//! `use` trees, flattened, and the paths written inline in code) is checked
//! against the rules of ARCHITECTURE.md, so an import across a layer fails
//! here instead of slipping in.
//!
//! - the pure core (`annotations`, `comparator`, `policy`, `plan`, `signals`,
//!   `report`, `input`, `pod`, `owner`) names nothing from the shell and no I/O
//!   or runtime crate (the Prometheus client's `response` types, plain data,
//!   excepted);
//! - `writes` names only the core;
//! - `metrics` and `prometheus` name only the core and `writes`;
//! - `engine` names those; `hook` names them and the engine, never the
//!   operator;
//! - `operator` names the engine and the hook, and only its `run` (which
//!   starts the hook), `config` (which carries its settings) and `error`
//!   (which maps its errors) name `crate::hook`;
//! - only `cli` (and `main.rs`) names `cli`; nothing in `src/` names the
//!   fake API server (`testing`).
//!
//! Comments and string literals are skipped; `super::`/`self::` paths and a
//! `mod.rs`'s child modules are resolved to full paths.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top-level modules of the pure core.
const CORE: &[&str] = &[
    "annotations",
    "comparator",
    "policy",
    "plan",
    "signals",
    "report",
    "input",
    "pod",
    "owner",
];

/// Crates that do I/O or run async work: the core names none of them.
const IO_CRATES: &[&str] = &[
    "tokio",
    "futures",
    "reqwest",
    "prometheus_http_query",
    "prometheus_client",
    "axum",
    "hyper",
    "hyper_util",
    "tower",
    "http",
    "rustls",
    "tokio_rustls",
    "rcgen",
    "governor",
    "libc",
    "json_patch",
    "clap",
    "tracing_subscriber",
];

/// Parts of `kube` that talk to an API server: the core may use its
/// derive and schema types (`CustomResource`, `CustomResourceExt`,
/// `KubeSchema`, `core`), never these.
const KUBE_IO: &[&str] = &[
    "api", "Api", "client", "Client", "config", "Config", "runtime", "Error",
];

/// The operator's run/reconcile side, which the hook must not reach.
struct Source {
    /// Relative to the crate root, e.g. `src/operator/round.rs`.
    file: String,
    /// The file's module path, e.g. `["operator", "round"]`.
    module: Vec<String>,
    /// Every path it names, fully resolved (`crate::...` or `extern::...`).
    paths: BTreeSet<String>,
}

#[test]
fn the_pure_core_names_no_shell_module_and_no_io_crate() {
    let mut violations = Vec::new();
    for src in sources() {
        if !CORE.contains(&top(&src)) {
            continue;
        }
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            let shell = seg[0] == "crate" && seg.len() > 1 && !CORE.contains(&seg[1]);
            // the Prometheus client's answer types are plain data
            let answer_types = seg[0] == "prometheus_http_query" && seg.get(1) == Some(&"response");
            let io_crate = IO_CRATES.contains(&seg[0]) && !answer_types;
            let kube_io = seg[0] == "kube" && seg.len() > 1 && KUBE_IO.contains(&seg[1]);
            // the CLI opens files and stdin (`cli::source`); the core reads
            // what it is handed
            let opens = path.starts_with("std::fs") || path.starts_with("std::io::stdin");
            if shell || io_crate || kube_io || opens {
                violations.push(format!("{}: {path}", src.file));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the pure core (annotations, comparator, policy, plan, signals, report, input, pod, owner) must name only \
         itself and non-I/O crates:\n{}",
        violations.join("\n")
    );
}

#[test]
fn each_shell_layer_names_only_the_layers_below_it() {
    let mut violations = Vec::new();
    for src in sources() {
        let top = top(&src);
        // what each layer may name inside the crate, besides the core and
        // the crate root's items (USER_AGENT, MANAGER, error_chain)
        let allowed: &[&str] = match top {
            "writes" => &[],
            "metrics" | "prometheus" => &["writes"],
            "engine" => &["writes", "metrics", "prometheus"],
            "hook" => &["writes", "metrics", "prometheus", "engine"],
            "operator" => &["writes", "metrics", "prometheus", "engine", "hook"],
            "cli" | "main.rs" => &[
                "writes",
                "metrics",
                "prometheus",
                "engine",
                "operator",
                "hook",
                "cli",
            ],
            _ => continue,
        };
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            if seg[0] != "crate" || seg.len() < 2 {
                continue;
            }
            let module_named = is_module(seg[1]);
            let own = seg[1] == top;
            if module_named && !own && !CORE.contains(&seg[1]) && !allowed.contains(&seg[1]) {
                violations.push(format!("{}: {path}", src.file));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layer rules (writes -> core; metrics, prometheus -> writes; engine -> those; \
         hook -> engine; operator -> engine, hook; cli -> all) broken:\n{}",
        violations.join("\n")
    );
}

/// The operator and the hook both build on the engine; within the operator
/// only the run wiring (and the settings and errors it carries) knows the
/// hook, and the engine knows neither (the layer rule above).
#[test]
fn only_the_run_wiring_knows_both_the_operator_and_the_hook() {
    let mut violations = Vec::new();
    for src in sources() {
        if top(&src) != "operator" {
            continue;
        }
        let file_module = src.module.get(1).map(String::as_str).unwrap_or("");
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            let names_hook = seg.len() >= 2 && seg[0] == "crate" && seg[1] == "hook";
            if names_hook && !["run", "config", "error"].contains(&file_module) {
                violations.push(format!(
                    "{}: {path} (only operator::run, config and error name the hook)",
                    src.file
                ));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn nothing_in_src_names_the_cli_or_the_fake_api_server() {
    let mut violations = Vec::new();
    for src in sources() {
        let top = top(&src);
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            if seg.len() < 2 || seg[0] != "crate" {
                continue;
            }
            let cli = seg[1] == "cli" && top != "cli" && top != "main.rs";
            let testing = seg[1] == "testing" && top != "testing";
            if cli || testing {
                violations.push(format!("{}: {path}", src.file));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "only the CLI names crate::cli, and no product module names crate::testing:\n{}",
        violations.join("\n")
    );
}

/// The CLI's reads of the cluster are one thin shell: of `src/cli/`, only
/// `live.rs` names kube's client side (`Api`, `Client`, `Config`, `config`,
/// `api`...); the commands hand it flags and get back the snapshot a file
/// would give, so their answers from a file and from the cluster agree.
#[test]
fn only_the_cli_s_live_module_talks_to_the_api_server() {
    let mut violations = Vec::new();
    for src in sources() {
        if top(&src) != "cli" || src.file == "src/cli/live.rs" {
            continue;
        }
        for path in &src.paths {
            let seg: Vec<&str> = path.split("::").collect();
            if seg[0] == "kube" && seg.len() > 1 && KUBE_IO.contains(&seg[1]) {
                violations.push(format!("{}: {path}", src.file));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "only src/cli/live.rs reads the cluster for the CLI:\n{}",
        violations.join("\n")
    );
    let live = sources()
        .into_iter()
        .find(|s| s.file == "src/cli/live.rs")
        .expect("src/cli/live.rs scanned");
    assert!(live.paths.iter().any(|p| p.starts_with("kube::")));
}

/// The scanner sees what it must: the known imports are found, so the rules
/// above are not passing on an empty scan.
#[test]
fn the_scan_finds_the_known_imports() {
    let all = sources();
    assert!(all.len() > 50, "only {} source files found", all.len());
    let names = |file: &str, path: &str| {
        all.iter()
            .find(|s| s.file == file)
            .unwrap_or_else(|| panic!("{file} not scanned"))
            .paths
            .contains(path)
    };
    assert!(names("src/hook/handler.rs", "crate::engine::Engine"));
    // a `super::` path in a nested module, resolved
    assert!(names(
        "src/engine/round.rs",
        "crate::engine::caches::Caches"
    ));
    // a bare child module in a mod.rs, resolved
    assert!(names(
        "src/operator/mod.rs",
        "crate::operator::run::run_with_client"
    ));
    // an inline path in code, not in a `use`
    assert!(names("src/operator/run.rs", "crate::hook::serve"));
}

#[test]
fn use_trees_are_flattened_and_comments_and_strings_skipped() {
    let code = strip(
        r##"
        //! crate::cli::in_a_doc_comment
        use crate::operator::{round::{self, Rounds}, leadership::*};
        use kube::{Api as KubeApi, ResourceExt};
        pub(crate) use super::x;
        /* crate::cli::in_a_block_comment */
        fn f() -> char {
            let _ = "crate::cli::in_a_string \" still";
            let _ = r#"crate::testing::in_a_raw_string"#;
            let _: &'static str = "x";
            let _ = tokio::time::sleep;
            '"'
        }
        "##,
    );
    let module = vec!["hook".to_string(), "handler".to_string()];
    let paths = paths_of(&code, &module, false, Path::new("."));
    let expected: BTreeSet<String> = [
        "crate::operator::round",
        "crate::operator::round::Rounds",
        "crate::operator::leadership::*",
        "kube::Api",
        "kube::ResourceExt",
        "crate::hook::x",
        "tokio::time::sleep",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(paths, expected);
}

// ---- the scanner ----

fn top(src: &Source) -> &str {
    src.module.first().map(String::as_str).unwrap_or("")
}

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `name` is a top-level module of the crate (not an item of
/// lib.rs such as `USER_AGENT` or `error_chain`).
fn is_module(name: &str) -> bool {
    let src = crate_root().join("src");
    src.join(format!("{name}.rs")).is_file() || src.join(name).join("mod.rs").is_file()
}

fn sources() -> Vec<Source> {
    let root = crate_root();
    let mut files = Vec::new();
    collect(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            let module = module_of(&rel);
            let text =
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
            let is_mod_root = rel.ends_with("/mod.rs") || rel == "src/lib.rs";
            let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
            let paths = paths_of(&strip(&text), &module, is_mod_root, &dir);
            Source {
                file: rel,
                module,
                paths,
            }
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/operator/round.rs` -> `[operator, round]`; `src/operator/mod.rs` ->
/// `[operator]`; `src/main.rs` -> `[main.rs]` (the binary, its own crate).
fn module_of(rel: &str) -> Vec<String> {
    let inner = rel.trim_start_matches("src/");
    if inner == "main.rs" {
        return vec!["main.rs".into()];
    }
    if inner == "lib.rs" {
        return Vec::new();
    }
    let inner = inner.trim_end_matches(".rs");
    let mut parts: Vec<String> = inner.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code without comments, string literals and char literals (each
/// replaced by a space), so only real paths remain.
fn strip(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // raw string: r"..." or r#"..."#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push(' ');
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else if c == '\'' {
            // a char literal ('x', '\n', '\u{1F600}', '"'), else a lifetime
            if next == Some('\\') {
                // skip the escaped char, then up to the closing quote
                let mut j = i + 3;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push(' ');
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push(' ');
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Every path named in `code` (already stripped), resolved against the
/// file's `module` (and the inline `mod x { .. }` around it): `use` trees
/// flattened, then inline `a::b::c` paths.
fn paths_of(code: &str, module: &[String], is_mod_root: bool, dir: &Path) -> BTreeSet<String> {
    let chars: Vec<char> = code.chars().collect();
    let inline = inline_mods(&chars);
    // the module at a position, and whether it is the file's own
    let module_at = |pos: usize| {
        let mut m = module.to_vec();
        let nested: Vec<String> = inline
            .iter()
            .filter(|(start, end, _)| *start < pos && pos < *end)
            .map(|(_, _, name)| name.clone())
            .collect();
        let top_level = nested.is_empty();
        m.extend(nested);
        (m, top_level)
    };
    let mut paths = BTreeSet::new();
    let word_at = |k: usize, w: &str| {
        let n = w.chars().count();
        (k == 0 || !is_ident(chars[k - 1]))
            && chars
                .get(k..k + n)
                .is_some_and(|s| s.iter().copied().eq(w.chars()))
    };
    let mut k = 0;
    while k < chars.len() {
        if word_at(k, "use ") {
            // a `use` item, up to its `;`
            let end = (k..chars.len())
                .find(|&e| chars[e] == ';')
                .unwrap_or(chars.len());
            let tree: String = chars[k + 4..end].iter().collect();
            let (m, top_level) = module_at(k);
            for p in flatten(tree.trim()) {
                paths.insert(resolve(&p, &m, is_mod_root && top_level, dir));
            }
            k = end + 1;
            continue;
        }
        // an inline path: ident(::ident)+
        let starts = is_ident(chars[k])
            && !chars[k].is_ascii_digit()
            && (k == 0 || !(is_ident(chars[k - 1]) || chars[k - 1] == ':'));
        if !starts {
            k += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = k;
        loop {
            let s = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            segs.push(chars[s..j].iter().collect::<String>());
            if chars.get(j) == Some(&':')
                && chars.get(j + 1) == Some(&':')
                && chars.get(j + 2).is_some_and(|c| is_ident(*c))
            {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            let (m, top_level) = module_at(k);
            paths.insert(resolve(&segs.join("::"), &m, is_mod_root && top_level, dir));
        }
        k = j.max(k + 1);
    }
    paths
}

/// Inline modules (`mod tests { .. }`): (start, end, name) in char positions.
fn inline_mods(chars: &[char]) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for k in 0..chars.len() {
        let is_mod =
            chars[k..].starts_with(&['m', 'o', 'd', ' ']) && (k == 0 || !is_ident(chars[k - 1]));
        if !is_mod {
            continue;
        }
        let mut j = k + 4;
        while chars.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        let name_start = j;
        while chars.get(j).is_some_and(|c| is_ident(*c)) {
            j += 1;
        }
        let name: String = chars[name_start..j].iter().collect();
        while chars.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        if name.is_empty() || chars.get(j) != Some(&'{') {
            continue; // `mod x;`
        }
        let mut depth = 0;
        let mut end = chars.len();
        for (e, c) in chars.iter().enumerate().skip(j) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = e;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((j, end, name));
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `a::{b, c::{d as e, self}, f::*}` -> `a::b`, `a::c::d`, `a::c`, `a::f::*`.
fn flatten(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim().trim_start_matches("::");
    match tree.find('{') {
        None => {
            let path = tree.split(" as ").next().unwrap_or("").trim();
            if path.is_empty() {
                Vec::new()
            } else {
                vec![path.replace(' ', "")]
            }
        }
        Some(open) => {
            let prefix = tree[..open].trim().trim_end_matches("::").replace(' ', "");
            let close = tree.rfind('}').unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let mut out = Vec::new();
            for part in split_top(inner) {
                for sub in flatten(&part) {
                    if sub == "self" {
                        out.push(prefix.clone());
                    } else if prefix.is_empty() {
                        out.push(sub);
                    } else {
                        out.push(format!("{prefix}::{sub}"));
                    }
                }
            }
            out
        }
    }
}

/// Splits on commas outside braces.
fn split_top(s: &str) -> Vec<String> {
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in s.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// `super::x` / `self::x` / a `mod.rs`'s `child::x` -> `crate::...`.
fn resolve(path: &str, module: &[String], is_mod_root: bool, dir: &Path) -> String {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = module.to_vec();
    if base.first().is_some_and(|m| m == "main.rs") {
        // the binary names the library as `deletion_cost::`
        base.clear();
    }
    let mut relative = false;
    while let Some(first) = segs.first() {
        match *first {
            "super" => {
                base.pop();
                relative = true;
            }
            "self" => relative = true,
            _ => break,
        }
        segs.remove(0);
    }
    let first = segs.first().copied().unwrap_or("");
    if first == "deletion_cost" {
        segs[0] = "crate";
        return segs.join("::");
    }
    let child_module = is_mod_root
        && !relative
        && (dir.join(format!("{first}.rs")).is_file() || dir.join(first).join("mod.rs").is_file());
    if relative || child_module {
        let mut full = vec!["crate".to_string()];
        full.extend(base);
        full.extend(segs.iter().map(|s| s.to_string()));
        return full.join("::");
    }
    segs.join("::")
}
