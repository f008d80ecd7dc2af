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
    // a note: samples given to a policy without a utilisation signal
    let plan = [
        "plan",
        "--policy",
        "config/examples/spot-first.yaml",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--samples",
        "config/examples/samples.json",
        "--now=2026-11-22T03:00:00Z",
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

/// Issue 55, item 8: a negative size or pod limit is named as such (clap
/// read `-5` as an unknown flag: "unexpected argument '-5'"); `explain`
/// says why no policy plans a pod in words.
#[test]
fn negative_limits_and_a_pod_no_policy_plans_are_said_plainly() {
    let pods = "tests/fixtures/predict/pods.json";
    for cmd in [
        vec!["plan"],
        vec!["predict", "-f", pods],
        vec!["explain", "pod/web-a", "--snapshot", pods],
    ] {
        for (flag, said) in [
            ("--max-input-bytes", "\"-5\": a size is not negative"),
            (
                "--max-pods",
                "expected a number of pods, a whole number from 0 up; found \"-5\"",
            ),
        ] {
            let o = run(&[&cmd[..], &[flag, "-5"]].concat());
            assert_eq!(o.status.code(), Some(2), "{cmd:?} {flag}");
            let err = stderr(&o);
            assert!(
                err.contains(&format!("invalid value '-5' for '{flag}")),
                "{err}"
            );
            assert!(err.contains(said), "{cmd:?} {flag}: {err}");
            assert!(!err.contains("unexpected argument"), "{err}");
        }
    }
    // no policy read at all, then one that selects other pods
    let o = run(&[
        "explain",
        "pod/web-a",
        "-n",
        "shop",
        "--snapshot",
        pods,
        "--now=2025-01-01T12:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "  policy:     none: {pods} holds no DeletionCostPolicy (give one with --policy FILE)\n"
        )),
        "{}",
        stdout(&o)
    );
    let o = run(&[
        "explain",
        "pod/checkout-6f5d8b7c9-r4kzd",
        "--snapshot",
        "config/examples/cluster.yaml",
        "--policy",
        "config/examples/combined.yaml",
        "-n",
        "shop",
        "--now=2026-11-22T03:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(
            "  policy:     none: no DeletionCostPolicy in config/examples/combined.yaml selects this pod\n"
        ),
        "{}",
        stdout(&o)
    );
    let json: serde_json::Value = serde_json::from_slice(
        &run(&[
            "explain",
            "pod/web-a",
            "-n",
            "shop",
            "--snapshot",
            pods,
            "-o",
            "json",
        ])
        .stdout,
    )
    .unwrap();
    assert!(json["noPolicy"]
        .as_str()
        .unwrap()
        .ends_with("holds no DeletionCostPolicy (give one with --policy FILE)"));
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

/// A plain-HTTP server on loopback that answers every request with a web
/// server's HTML error page, as `python3 -m http.server` answers a POST.
fn html_server() -> (u16, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        // two connections: the https attempt, then the http one
        for stream in listener.incoming().take(2) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let page = "<!DOCTYPE HTML>\n<html><body><h1>Error response</h1><p>Error code: 501</p></body></html>\n";
            let _ = write!(
                s,
                "HTTP/1.1 501 Unsupported method ('POST')\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    (port, handle)
}

/// Issue 30, item 9: an https:// URL on a plain-HTTP port fails at once with
/// a hint (no retries for the whole --timeout), naming the URL once; a web
/// server's 501 page is described, not printed.
#[test]
fn prescale_says_when_the_server_is_no_tls_hook() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let token = token.to_string_lossy();
    let (port, server) = html_server();
    let args = |url: &str| {
        vec![
            "prescale".to_string(),
            "-n".into(),
            "shop".into(),
            "--deployment".into(),
            "web".into(),
            "--replicas".into(),
            "1".into(),
            "--url".into(),
            url.into(),
            "--token-file".into(),
            token.to_string(),
            "--insecure-http".into(),
        ]
    };
    let https = format!("https://127.0.0.1:{port}");
    let a = args(&https);
    let o = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("does not speak TLS"), "{err}");
    assert!(!err.contains("trying again"), "retried: {err}");
    assert_eq!(
        err.matches(&format!("127.0.0.1:{port}")).count(),
        1,
        "{err}"
    );

    let http = format!("http://127.0.0.1:{port}");
    let a = args(&http);
    let o = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("501 Not Implemented"), "{err}");
    assert!(
        err.contains("HTML page, not the deletion-cost hook"),
        "{err}"
    );
    assert!(!err.contains('<'), "markup printed: {err}");
    server.join().unwrap();
}

/// Issue 30, item 9: SIGTERM before the caches synced is logged and ends the
/// process at once, not at the end of the grace period.
#[cfg(unix)]
#[test]
fn run_stops_at_once_when_sigterm_comes_before_the_caches_sync() {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    // nothing listens on the discard port: the caches never sync
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster: {server: \"http://127.0.0.1:9\"}\n\
         users:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context: {cluster: dead, user: u}\ncurrent-context: c\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(["run", "--no-leader-election", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--metrics-addr", "127.0.0.1:0", "--shutdown-grace", "60"])
        .env("RUST_LOG", "info")
        .env_remove("DELETION_COST_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let asked = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if asked.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("still running 60 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("shutdown asked: stopping"), "{err}");
    assert!(
        err.contains("stopping before the caches synced"),
        "waited for the grace period instead: {err}"
    );
}

/// What no message may show: the libraries' own words and Rust's Debug text.
const INTERNALS: [&str; 12] = [
    "failed to infer config",
    "incluster",
    "os error",
    "client error (Connect)",
    "tcp connect error",
    "budget breached",
    "RecordedAnchorEvents",
    "Nodes {",
    "four digit integer",
    "invalid digit",
    "kubeconfig: (",
    "in-cluster: (",
];

fn no_internals(what: &str, err: &str) {
    for word in INTERNALS {
        assert!(!err.contains(word), "{what}: {word:?} in {err}");
    }
}

/// Issue 41, item 3: the messages a newcomer met, said in the user's words.
#[test]
fn messages_name_no_library_internals() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();

    // `run` with no kubeconfig and not in a pod
    let o = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args([
            "run",
            "--no-leader-election",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .env("HOME", dir.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("DELETION_COST_LOG_FORMAT")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("error: no cluster to connect to: no kubeconfig (no KUBECONFIG set, and ")
            && err.contains("not in a pod (KUBERNETES_SERVICE_HOST is unset); pass --kubeconfig PATH or set KUBECONFIG"),
        "{err}"
    );
    no_internals("run", &err);

    // `prescale` with nothing listening: said once, then the final error
    let token = path("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://127.0.0.1:{port}");
    let o = run(&[
        "prescale",
        "-n",
        "shop",
        "--deployment",
        "web",
        "--replicas",
        "1",
        "--url",
        &url,
        "--token-file",
        &token,
        "--timeout",
        "3",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("connection refused: nothing listens there"),
        "{err}"
    );
    assert!(err.matches("note: ").count() <= 1, "{err}");
    no_internals("prescale", &err);

    // files that are not there
    let missing = path("nowhere.yaml");
    for args in [
        vec![
            "plan",
            "--policy",
            missing.as_str(),
            "--snapshot",
            "config/examples/cluster.yaml",
        ],
        vec!["predict", "-f", missing.as_str()],
        vec![
            "prescale",
            "-n",
            "shop",
            "--deployment",
            "web",
            "--replicas",
            "1",
            "--token-file",
            missing.as_str(),
        ],
        vec!["run", "--kubeconfig", missing.as_str()],
    ] {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("No such file or directory"), "{args:?}: {err}");
        no_internals(&format!("{args:?}"), &err);
    }

    // --now in other words than RFC 3339
    for (now, why) in [
        ("yesterday", "not a date and time"),
        ("2026-11-22", "a date without a time of day"),
        ("2026-11-22T03:00:00", "no UTC offset (add Z for UTC"),
    ] {
        for cmd in [
            vec!["plan"],
            vec!["predict", "-f", "tests/fixtures/predict/pods.json"],
        ] {
            let mut args = cmd.clone();
            args.extend(["--now", now]);
            let o = run(&args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("--now {now:?}: {why}"))
                    && err.contains("expected an RFC 3339 time such as 2025-01-31T12:00:00Z"),
                "{args:?}: {err}"
            );
            no_internals(&format!("{args:?}"), &err);
        }
    }

    // a samples file cut short: its position once
    let cut = path("cut.json");
    std::fs::write(&cut, "{\"samples\": [{\"pod\": \"web-1\",").unwrap();
    let o = run(&["plan", "--samples", &cut]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("line ").count(), 1, "{err}");
    assert!(
        err.contains(&format!("{cut}: not valid JSON at line 1 column ")),
        "{err}"
    );

    // a YAML alias bomb on every reader, from a file and from a pipe
    let mut bomb = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let refs = vec![format!("*l{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
    }
    let bomb_file = path("bomb.yaml");
    std::fs::write(&bomb_file, &bomb).unwrap();
    let cluster = "config/examples/cluster.yaml";
    let policy = "config/examples/combined.yaml";
    for args in [
        vec!["predict", "-f", bomb_file.as_str()],
        vec![
            "predict",
            "-f",
            "tests/fixtures/predict/pods.json",
            "--related",
            bomb_file.as_str(),
        ],
        vec![
            "plan",
            "--policy",
            bomb_file.as_str(),
            "--snapshot",
            cluster,
        ],
        vec!["plan", "--policy", policy, "--snapshot", bomb_file.as_str()],
        vec![
            "plan",
            "--prices",
            bomb_file.as_str(),
            "--scale-down-by",
            "1",
        ],
    ] {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("refused as a possible alias bomb"),
            "{args:?}: {err}"
        );
        no_internals(&format!("{args:?}"), &err);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .arg("predict")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _ = std::io::Write::write_all(&mut child.stdin.take().unwrap(), bomb.as_bytes());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("<stdin>: not valid YAML") && err.contains("alias bomb"),
        "{err}"
    );
    no_internals("predict < bomb", &err);
}

/// Issue 41, item 4: `run` takes `-n` as every other command does; `explain`
/// offers no `-A`, which it would refuse (a pod's name needs one namespace).
#[test]
fn run_takes_n_and_explain_offers_no_all_namespaces() {
    use clap::Parser;
    use deletion_cost::cli::{Cli, Command as Sub};
    let cli = Cli::try_parse_from(["deletion-cost", "run", "-n", "shop"]).unwrap();
    match cli.command {
        Sub::Run(args) => assert_eq!(args.namespace.as_deref(), Some("shop")),
        other => panic!("parsed as {other:?}"),
    }
    let help = stdout(&run(&["explain", "--help"]));
    assert!(help.contains("-n, --namespace"), "{help}");
    assert!(
        !help.contains("-A") && !help.contains("--all-namespaces"),
        "{help}"
    );
    let o = run(&["explain", "pod/web-1", "-A"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unexpected argument '-A'"),
        "{}",
        stderr(&o)
    );
}

/// Issue 41, item 7: `--metrics-addr 127.0.0.1:0` logs the port it bound,
/// which then answers.
#[cfg(unix)]
#[test]
fn run_logs_the_metrics_port_it_bound() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    // nothing listens on the discard port: the operator starts, never syncs
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster: {server: \"http://127.0.0.1:9\"}\n\
         users:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context: {cluster: dead, user: u}\ncurrent-context: c\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(["run", "--no-leader-election", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--metrics-addr", "127.0.0.1:0", "--shutdown-grace", "1"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("DELETION_COST_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("stderr ended without the metrics line:\n{seen}");
        }
        seen.push_str(&line);
        if line.contains("serving /metrics") {
            let addr = line
                .split("addr=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("no addr= in {line}"))
                .to_string();
            break addr;
        }
    };
    let socket: std::net::SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
    assert_ne!(socket.port(), 0, "{line}");
    let mut s = std::net::TcpStream::connect(socket).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let _ = child.wait();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}"
    );
}
