//! What the CLI writes to stderr: under `--log-format json` every line is
//! JSON (tracing logs, the CLI's notes and warnings, clap's usage errors and
//! the final error); ANSI colour only when stderr is a terminal and
//! `NO_COLOR` is unset.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const NOW: &str = "--now=2025-01-01T12:00:00Z";

fn fixture(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_deletion-cost"));
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("NO_COLOR")
        .env_remove("DELETION_COST_LOG_FORMAT")
        .env("RUST_LOG", "info");
    c
}

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// Every stderr line as JSON, failing on any line that is not.
fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(!text.is_empty(), "nothing on stderr");
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{text}"))
        })
        .collect()
}

fn messages(lines: &[serde_json::Value], level: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["level"] == level)
        .map(|l| {
            l["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn json_covers_notes_warnings_and_errors() {
    // notes (inactive pods left out) and a warning (a pod without a UID)
    let pods = std::fs::read_to_string(fixture("tests/fixtures/predict/pods.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&pods).unwrap();
    v["items"][0]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("uid");
    let o = run(&["--log-format", "json", "predict", NOW], &v.to_string());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = json_lines(&o);
    assert!(messages(&lines, "INFO")
        .iter()
        .any(|m| m.contains("inactive pod(s)")));
    assert!(messages(&lines, "WARN")
        .iter()
        .any(|m| m.contains("without metadata.uid")));
    for l in &lines {
        assert_eq!(l["target"], "deletion_cost::cli");
        assert!(l["timestamp"].is_string());
    }

    // the final error, also when the format comes from the environment
    let o = command(&["predict", NOW])
        .env("DELETION_COST_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        messages(&lines, "ERROR"),
        ["no pods in <stdin> (the input is empty)"]
    );

    // clap's usage errors: one JSON line, clap's exit code
    let o = run(&["predict", "--log-format=json", "--no-such-flag"], "");
    assert_eq!(o.status.code(), Some(2));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(messages(&lines, "ERROR")[0].contains("--no-such-flag"));
    // --help still goes to stdout as text
    let o = run(&["--log-format", "json", "predict", "--help"], "");
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage"));
}

#[test]
fn json_covers_plan_logs_and_warnings() {
    // a note (samples unused) and a plan warning, both JSON
    let o = run(
        &[
            "plan",
            "--log-format",
            "json",
            NOW,
            "--policy",
            "config/examples/spot-first.yaml",
            "--snapshot",
            "config/examples/cluster.yaml",
            "--samples",
            "config/examples/samples.json",
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = json_lines(&o);
    assert!(
        messages(&lines, "INFO")
            .iter()
            .any(|m| m.contains("samples in config/examples/samples.json are not used")),
        "{lines:?}"
    );
}

/// The example cluster and a Service, which `plan` does not read and logs
/// at debug level: a log line to look at (the CLI's own lines are notes).
fn with_an_unread_service() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("cluster.yaml");
    let cluster = std::fs::read_to_string(fixture("config/examples/cluster.yaml")).unwrap();
    std::fs::write(
        &snapshot,
        format!(
            "{cluster}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: shop}}\n"
        ),
    )
    .unwrap();
    let path = snapshot.to_string_lossy().into_owned();
    (dir, path)
}

#[test]
fn no_colour_when_stderr_is_not_a_terminal() {
    let (_dir, snapshot) = with_an_unread_service();
    let o = command(&[
        "plan",
        NOW,
        "--policy",
        "config/examples/spot-first.yaml",
        "--snapshot",
        &snapshot,
    ])
    .env("RUST_LOG", "debug")
    .stdin(Stdio::null())
    .output()
    .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("snapshot objects not read"), "{err}");
    assert!(!err.contains('\u{1b}'), "ANSI codes in a pipe: {err:?}");
}

/// Runs the command with stdout and stderr on a pseudo-terminal and returns
/// what the terminal received.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn on_a_terminal_with(mut c: Command, no_color: Option<&str>) -> String {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};

    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two new descriptors into the out-pointers; the
    // other pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    for fd in [master, slave] {
        // SAFETY: fcntl on descriptors we own: close them in every other
        // child the test process spawns (tests run in parallel)
        assert_eq!(
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
            0
        );
    }
    // SAFETY: both descriptors were just opened and are owned here only.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    if let Some(v) = no_color {
        c.env("NO_COLOR", v);
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = c.spawn().unwrap();
    // the Command holds our copies of the slave: once they are gone, reading
    // the master ends (EIO) when the child exits
    drop(c);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut file = std::fs::File::from(master);
        let mut buf = [0u8; 4096];
        loop {
            match file.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(out);
    });
    let status = child.wait().unwrap();
    let out = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the terminal output ends when the command exits");
    assert!(status.success(), "{}", String::from_utf8_lossy(&out));
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn colour_on_a_terminal_unless_no_color() {
    let (_dir, snapshot) = with_an_unread_service();
    let args = [
        "plan",
        NOW,
        "--policy",
        "config/examples/spot-first.yaml",
        "--snapshot",
        &snapshot,
    ];
    let on_a_terminal = |no_color| {
        let mut c = command(&args);
        c.env("RUST_LOG", "debug");
        on_a_terminal_with(c, no_color)
    };
    let coloured = on_a_terminal(None);
    assert!(coloured.contains("snapshot objects not read"), "{coloured}");
    assert!(
        coloured.contains('\u{1b}'),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = on_a_terminal(Some("1"));
    assert!(plain.contains("snapshot objects not read"), "{plain}");
    assert!(
        !plain.contains('\u{1b}'),
        "colour despite NO_COLOR: {plain:?}"
    );
}
