//! The CLI reference (docs/cli.md) against the binary's real flags, the
//! README's quick start and length, every relative link of the docs, and
//! every documented console session against what the binary prints.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use deletion_cost::cli::Cli;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn cli_doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap()
}

fn reference_row(doc: &str, command: &str) -> String {
    let section = doc
        .split("## CLI reference")
        .nth(1)
        .expect("docs/cli.md has a CLI reference")
        .split("\n## ")
        .next()
        .unwrap_or_default()
        .to_string();
    section
        .lines()
        .find(|l| l.starts_with(&format!("| `deletion-cost {command}`")))
        .unwrap_or_else(|| panic!("no CLI reference row for {command}"))
        .to_string()
}

#[test]
fn every_flag_is_documented_and_every_documented_flag_exists() {
    let doc = cli_doc();
    let cli = Cli::command();
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        let row = reference_row(&doc, sub.get_name());
        let real: Vec<String> = sub
            .get_arguments()
            .filter(|a| !a.is_global_set() && a.get_id() != "help")
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for flag in &real {
            assert!(
                row.contains(flag.as_str()),
                "{} {flag} missing from docs/cli.md",
                sub.get_name()
            );
        }
        for word in row.split(['`', ' ', ',', '/']) {
            if let Some(flag) = word.strip_prefix("--") {
                let flag = flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
                assert!(
                    real.iter().any(|r| r == &format!("--{flag}")),
                    "docs/cli.md documents --{flag} for {}, which does not exist",
                    sub.get_name()
                );
            }
        }
    }
}

#[test]
fn quick_start_files_exist() {
    let readme = readme();
    assert!(readme.contains("cargo run -- plan"));
    assert!(readme.contains("./scripts/test.sh"));
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    assert!(ci.contains("scripts/test.sh"));
    for f in ["combined.yaml", "cluster.yaml", "samples.json"] {
        assert!(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples"))
                .join(f)
                .exists(),
            "{f}"
        );
    }
}

#[test]
fn readme_is_short() {
    let lines = readme().lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines; at most 150 (the detail goes to docs/)"
    );
}

/// The markdown files whose links are checked: the top level's and docs/'s.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [Path::new(ROOT).to_path_buf(), Path::new(ROOT).join("docs")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("README.md")));
    assert!(files.iter().any(|f| f.ends_with("docs/cli.md")));
    files
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The anchors GitHub gives a file's headings: lower case, spaces to
/// hyphens, punctuation dropped, "-1", "-2" for repeats.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.push(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// Every `](target)` outside code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest
                .find(')')
                .expect("a link without its closing parenthesis");
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            targets.push(target.to_string());
            rest = &rest[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_resolves() {
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(ROOT).unwrap().display().to_string();
        for target in link_targets(&text) {
            assert!(!target.is_empty(), "{name}: an empty link");
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            assert!(
                resolved.exists(),
                "{name}: the link {target} names {}, which does not exist",
                resolved.display()
            );
            if let Some(anchor) = anchor {
                assert!(
                    resolved.extension().is_some_and(|e| e == "md"),
                    "{name}: the link {target} has an anchor into a file that is not markdown"
                );
                let linked = std::fs::read_to_string(&resolved).unwrap();
                let known = anchors(&linked);
                assert!(
                    known.iter().any(|a| a == anchor),
                    "{name}: the link {target}: no heading makes #{anchor}; there are {known:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 20,
        "only {checked} links found: is the parser broken?"
    );
}

#[test]
fn anchors_follow_the_headings() {
    let text = "# The `deletion-cost` command\n```sh\n# not a heading\n```\n## Input files and stderr (CLI)\n## The cluster's version\n## Notes\n## Notes\n#hashtag\n";
    assert_eq!(
        anchors(text),
        [
            "the-deletion-cost-command",
            "input-files-and-stderr-cli",
            "the-clusters-version",
            "notes",
            "notes-1"
        ]
    );
    assert_eq!(
        link_targets("[a](docs/a.md) and [`b`](#b)\n```\n[c](nowhere.md)\n```\n"),
        ["docs/a.md", "#b"]
    );
}

/// The ```console blocks of a markdown text: each block's lines.
fn console_blocks(text: &str) -> Vec<Vec<&str>> {
    let mut blocks = Vec::new();
    let mut open: Option<Vec<&str>> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) if line.trim_start() == "```console" => open = Some(Vec::new()),
            (Some(_), true) => blocks.extend(open.take()),
            (Some(lines), false) => lines.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// A block's commands (`$ ` lines, with `\` continuations joined) and the
/// lines shown under each.
fn commands<'b>(block: &[&'b str]) -> Vec<(String, Vec<&'b str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    let mut continued = false;
    for line in block {
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.push((cmd.to_string(), Vec::new()));
        } else if continued {
            if let Some((cmd, _)) = out.last_mut() {
                cmd.push(' ');
                cmd.push_str(line.trim());
            }
        } else if let Some((_, shown)) = out.last_mut() {
            shown.push(line);
        } else {
            panic!("a console block whose first line is no `$ ` command: {line:?}");
        }
        continued = line.ends_with('\\');
        if let Some((cmd, _)) = out.last_mut().filter(|_| continued) {
            cmd.truncate(cmd.trim_end_matches('\\').trim_end().len());
        }
    }
    out
}

/// Whether `actual` is what `shown` shows: line for line, a line `...`
/// standing for any number of lines.
fn shows(shown: &[&str], actual: &[&str]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| shows(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| a == first && shows(rest, more)),
    }
}

/// What a terminal shows of a documented command: its notes and warnings
/// (written before the answer), then the answer. `deletion-cost ...` and
/// `cargo run -q -- ...` run this build's binary.
fn terminal_output(cmd: &str) -> String {
    assert!(
        !cmd.contains(['"', '\'', '|', '>', '<', '$', '`']),
        "{cmd}: only plain words are run"
    );
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let args = match words.as_slice() {
        ["deletion-cost", args @ ..] => args,
        ["cargo", "run", "-q", "--", args @ ..] => args,
        _ => panic!("{cmd}: not a deletion-cost command"),
    };
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(args)
        .current_dir(ROOT)
        .env_remove("DELETION_COST_LOG_FORMAT")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    )
}

/// Issue 55, item 7: every ```console block of the README and docs/ is this
/// build's output: each `$ ` command runs, and what it prints (stderr's lines
/// first, as a terminal shows them, then stdout) must be the lines shown
/// under it, where a line `...` stands for any lines. An example that drifts
/// from the binary fails here with the output to paste.
#[test]
fn every_console_block_is_what_the_binary_prints() {
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(ROOT).unwrap().display().to_string();
        for block in console_blocks(&text) {
            for (cmd, shown) in commands(&block) {
                let actual = terminal_output(&cmd);
                let lines: Vec<&str> = actual.lines().collect();
                assert!(
                    shows(&shown, &lines),
                    "{name}: `{cmd}` prints\n{actual}\nwhile the block shows\n{}",
                    shown.join("\n")
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 5, "only {checked} documented commands found");
}

#[test]
fn console_blocks_commands_and_elisions_are_read() {
    let text = "```console\n$ deletion-cost a \\\n    --b c\nnote: x\n...\nlast\n$ deletion-cost d\n```\n```sh\n$ not this\n```\n";
    let blocks = console_blocks(text);
    assert_eq!(blocks.len(), 1);
    let cmds = commands(&blocks[0]);
    assert_eq!(cmds[0].0, "deletion-cost a --b c");
    assert_eq!(cmds[0].1, ["note: x", "...", "last"]);
    assert_eq!(cmds[1], ("deletion-cost d".to_string(), vec![]));
    assert!(shows(&["a", "...", "z"], &["a", "b", "c", "z"]));
    assert!(shows(&["a", "  ...", "z"], &["a", "z"]));
    assert!(!shows(&["a", "...", "z"], &["a", "b"]));
    assert!(!shows(&["a"], &["a", "b"]));
    assert!(shows(&["...", "b", "..."], &["a", "b", "c"]));
}

/// Each heading's anchor and the text under it, up to the next heading.
fn sections(text: &str) -> Vec<(String, String)> {
    let anchors = anchors(text);
    let mut out: Vec<(String, String)> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let heading =
            !fenced && line.trim_start_matches('#').starts_with(' ') && line.starts_with('#');
        if heading {
            out.push((anchors[out.len()].clone(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Issue 55, item 7: a line that cites the bound on a scale-in's writes
/// (2k + 4 for a scale-in by k) and links a section for it links one that
/// states it (docs/hook.md linked "the minimal correction", which said
/// only "at most k").
#[test]
fn the_write_bound_a_link_cites_is_in_the_section_it_links() {
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(ROOT).unwrap().display().to_string();
        for line in prose(&text).into_iter().filter(|l| l.contains("2k + 4")) {
            for target in link_targets(line) {
                let Some((path, anchor)) = target.split_once('#') else {
                    continue;
                };
                let linked = if path.is_empty() {
                    text.clone()
                } else {
                    std::fs::read_to_string(file.parent().unwrap().join(path)).unwrap()
                };
                let body = sections(&linked)
                    .into_iter()
                    .find(|(a, _)| a == anchor)
                    .map(|(_, body)| body)
                    .unwrap_or_else(|| panic!("{name}: no section #{anchor}"));
                assert!(
                    body.contains("2k + 4"),
                    "{name}: {line:?} cites 2k + 4 and links #{anchor}, which does not state it"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 1, "no line cites the bound with a link");
}
