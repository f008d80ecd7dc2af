//! Feeding a command's stdin without end, as `yes |` or a runaway producer
//! would.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `command` with its stdin fed from a thread: `prefix` once, then
/// `chunk` repeated up to `total` bytes (bounded, so a broken reader cannot
/// fill memory) or until the command stops reading. Waits at most a minute,
/// only so a regression cannot hang CI, then kills it and panics.
pub fn run_fed(
    mut command: Command,
    prefix: &'static [u8],
    chunk: &'static [u8],
    total: usize,
) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let feeder = std::thread::spawn(move || {
        if stdin.write_all(prefix).is_err() {
            return;
        }
        let mut sent = 0;
        while sent < total {
            // the command stops reading and exits: a broken pipe ends the feed
            if stdin.write_all(chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while child
        .try_wait()
        .expect("the command can be waited on")
        .is_none()
    {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?}: still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("the command's output");
    feeder.join().expect("the feeder ends");
    out
}
