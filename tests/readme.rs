//! The README's CLI reference against the binary's real flags, and the quick
//! start's files.

use clap::CommandFactory;
use deletion_cost::cli::Cli;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn reference_row(readme: &str, command: &str) -> String {
    let section = readme
        .split("## CLI reference")
        .nth(1)
        .expect("README has a CLI reference")
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
    let readme = readme();
    let cli = Cli::command();
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        let row = reference_row(&readme, sub.get_name());
        let real: Vec<String> = sub
            .get_arguments()
            .filter(|a| !a.is_global_set() && a.get_id() != "help")
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for flag in &real {
            assert!(
                row.contains(flag.as_str()),
                "{} {flag} missing from the README",
                sub.get_name()
            );
        }
        for word in row.split(['`', ' ', ',', '/']) {
            if let Some(flag) = word.strip_prefix("--") {
                let flag = flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
                assert!(
                    real.iter().any(|r| r == &format!("--{flag}")),
                    "README documents --{flag} for {}, which does not exist",
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
