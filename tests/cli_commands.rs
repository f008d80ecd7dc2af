//! The binary's small commands as a user runs them: no arguments, `version`,
//! `completion`, and `--quiet` on `plan` and `predict`.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DELETION_COST_LOG_FORMAT")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn no_arguments_prints_help_on_stdout_and_exits_0() {
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Usage: deletion-cost"), "{out}");
    for sub in ["plan", "predict", "version", "completion"] {
        assert!(out.contains(sub), "{sub} missing from the help:\n{out}");
    }
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

#[test]
fn version_names_the_crate_the_commit_and_the_kubernetes_range() {
    let o = run(&["version"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!("deletion-cost {}\n", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(out.contains("kubernetes: 1.21 to 1.37 and later"), "{out}");
    assert!(out.contains("1.22, 1.31, 1.37"), "{out}");
    let commit = out
        .lines()
        .find_map(|l| l.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit line:\n{out}"));
    // the build's commit is HEAD's when git can tell, else `unknown`
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match (head, std::env::var("DELETION_COST_GIT_COMMIT")) {
        (_, Ok(given)) if !given.trim().is_empty() => assert_eq!(commit, given),
        (Some(head), _) => assert_eq!(commit, head),
        (None, _) => assert_eq!(commit, "unknown"),
    }
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _deletion__cost"),
        ("zsh", "#compdef deletion-cost"),
        ("fish", "complete -c deletion-cost"),
    ] {
        let o = run(&["completion", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(marker), "{shell}:\n{out}");
        assert!(out.contains("scale-down-by"), "{shell}: flags completed");
    }
    let o = run(&["completion", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("tcsh"), "{}", stderr(&o));
}

#[test]
fn bash_completion_is_valid_bash() {
    let o = run(&["completion", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deletion-cost.bash");
    std::fs::write(&file, &o.stdout).unwrap();
    match Command::new("bash").arg("-n").arg(&file).output() {
        Ok(check) => assert!(check.status.success(), "{}", stderr(&check)),
        Err(e) => eprintln!("bash not found ({e}); syntax not checked"),
    }
}

#[test]
fn quiet_leaves_out_the_notes() {
    let pods = "tests/fixtures/predict/pods.json";
    assert!(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(pods)
            .exists(),
        "{pods}"
    );
    let plan = [
        "plan",
        "--policy",
        "config/examples/combined.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
    ];
    for cmd in [plan.to_vec(), vec!["predict", "-f", pods]] {
        let loud = run(&cmd);
        assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
        assert!(
            stderr(&loud).contains("note: "),
            "{cmd:?}: {}",
            stderr(&loud)
        );
        let mut args = cmd.clone();
        args.push("--quiet");
        let quiet = run(&args);
        assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
        assert!(
            !stderr(&quiet).contains("note: "),
            "{cmd:?}: {}",
            stderr(&quiet)
        );
        assert_eq!(quiet.stdout, loud.stdout, "{cmd:?}: the same answer");
    }
}

/// Issue 30, item 7: a CA file that is no certificate, and a kubeconfig that
/// is not there, named by their flags, without the libraries' words.
#[test]
fn bad_ca_file_and_kubeconfig_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nYWJj\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let (token, ca) = (token.to_string_lossy(), ca.to_string_lossy());
    let o = run(&[
        "prescale",
        "-n",
        "shop",
        "--deployment",
        "web",
        "--replicas",
        "1",
        "--url",
        "https://127.0.0.1:9",
        "--token-file",
        &token,
        "--ca-file",
        &ca,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "--ca-file {ca}: a certificate in it is not a valid X.509 CA certificate"
        )),
        "{err}"
    );
    assert!(!err.contains("builder error"), "{err}");

    let missing = dir.path().join("nowhere").to_string_lossy().into_owned();
    let o = run(&["run", "--kubeconfig", &missing]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("--kubeconfig {missing}: cannot read: ")),
        "{err}"
    );
    assert!(!err.contains("'\""), "{err}");
}
