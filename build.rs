//! Build script: records the git commit the binary is built from, for
//! `deletion-cost version`, as `DELETION_COST_GIT_COMMIT`. It never fails
//! the build: without git, or outside a git checkout (a source archive, an
//! image build whose context leaves `.git` out), the commit is `unknown`.
//! A `DELETION_COST_GIT_COMMIT` set in the environment wins over git.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DELETION_COST_GIT_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = std::env::var("DELETION_COST_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&dir, &["rev-parse", "--short=12", "HEAD"]))
        .filter(|c| c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-'))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=DELETION_COST_GIT_COMMIT={commit}");
    // built again when HEAD moves: HEAD itself, the branch it points to,
    // and packed-refs (only the files that exist: a missing one would make
    // every build run this script again)
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&dir, &["rev-parse", "--git-path", &name]) {
            let path = dir.join(path);
            if path.is_file() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}

/// The trimmed output of `git ARGS` run in `dir`, or `None` when git is
/// missing, fails or prints nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}
