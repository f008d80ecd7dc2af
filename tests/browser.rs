//! The plan page in a real browser: `deletion-cost plan -o html
//! --scale-down-by 2` on the bundled example, opened from disk in headless
//! Chromium. Checks, over the DevTools protocol (on a pipe, no port): every
//! pod of the plan is drawn, the victims carry their mark, the page makes no
//! request but its own file and logs no error; then saves a screenshot
//! (`target/tmp/plan.png`; `DELETION_COST_PLAN_PNG=docs/plan.png` writes it
//! there instead, which is how the README's picture is made). The picture
//! records a digest of the page it shows, and a check that runs everywhere
//! compares it with today's page, so docs/plan.png cannot fall behind it.
//!
//! Without Chromium (Debian's `chromium`; `scripts/test.sh` installs it)
//! the browser checks are reported as ignored, never as passed. The static
//! check of the page runs everywhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use serde_json::Value;

const NOW: &str = "--now=2026-11-22T03:00:00Z";
/// Why the browser checks are ignored.
const NO_CHROMIUM: &str =
    "chromium not found: install Debian's chromium (scripts/test.sh does) or set CHROMIUM";
/// Width of the window the page is laid out and shot at.
const WIDTH: u32 = 1200;

/// `deletion-cost plan ARGS` on the bundled example: stdout.
fn plan(args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .arg("plan")
        .args([NOW, "--scale-down-by", "2"])
        .args(args)
        .output()
        .map_err(|e| format!("running deletion-cost plan: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "deletion-cost plan {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("plan output is not UTF-8: {e}"))
}

/// What the plan says: every pod, and the victims.
struct Expected {
    pods: BTreeSet<String>,
    victims: BTreeSet<String>,
}

fn expected() -> Result<Expected, String> {
    let v: Value =
        serde_json::from_str(&plan(&["-o", "json"])?).map_err(|e| format!("plan -o json: {e}"))?;
    let names = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()
    };
    let p = &v[0];
    let pods = p["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["name"].as_str().map(String::from))
        .collect();
    let victims = p["replicaSets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|rs| names(&rs["victims"]))
        .collect();
    Ok(Expected { pods, victims })
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let chromium = find_chromium();
    if chromium.is_none() {
        eprintln!("browser: {NO_CHROMIUM}: the browser checks are ignored");
    }
    let mut trials = vec![
        Trial::test("page_references_nothing_outside_itself", || {
            static_check().map_err(Failed::from)
        }),
        Trial::test("docs_plan_png_shows_the_page_of_this_build", || {
            docs_picture_is_current().map_err(Failed::from)
        }),
    ];
    let rendered: Arc<OnceLock<Result<Rendered, String>>> = Arc::new(OnceLock::new());
    type Check = fn(&Rendered) -> Result<(), String>;
    let checks: [(&str, Check); 5] = [
        ("chromium_draws_every_pod", every_pod_drawn),
        ("chromium_shows_the_victims_marked", victims_marked),
        ("chromium_makes_no_external_request", no_external_request),
        ("chromium_logs_no_console_error", no_console_error),
        ("chromium_screenshot_is_saved", screenshot_saved),
    ];
    for (name, check) in checks {
        let (rendered, path) = (rendered.clone(), chromium.clone());
        trials.push(
            // ignored at run time, so the report says why
            Trial::ignorable_test(name, move || {
                let Some(chromium) = path else {
                    return Ok(Completion::ignored_with(NO_CHROMIUM));
                };
                match rendered.get_or_init(|| browser::render(&chromium)) {
                    Ok(r) => check(r)
                        .map(|()| Completion::Completed)
                        .map_err(Failed::from),
                    Err(e) => Err(Failed::from(format!("rendering the page: {e}"))),
                }
            }),
        );
    }
    libtest_mimic::run(&args, trials).exit_code()
}

/// `CHROMIUM`, else `chromium` on PATH.
fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------------------
// The checks

/// The page itself: no URL, no reference a browser would fetch.
fn static_check() -> Result<(), String> {
    let page = plan(&["-o", "html"])?;
    for bad in [
        "http://", "https://", "src=", "href=", "srcset=", "url(/", "url(h", "@import", "<link",
        "<script", "<iframe", "<object", "<embed", "<img",
    ] {
        if let Some(at) = page.find(bad) {
            let around = &page[at.saturating_sub(60)..(at + 60).min(page.len())];
            return Err(format!("the page holds {bad:?}: ...{around}..."));
        }
    }
    // every url() points into the page itself
    for (at, _) in page.match_indices("url(") {
        if !page[at..].starts_with("url(#") {
            return Err(format!("a url() outside the page at byte {at}"));
        }
    }
    if !page.contains("default-src 'none'") {
        return Err("no Content-Security-Policy meta".into());
    }
    Ok(())
}

/// Issue 55, item 7: docs/plan.png is a screenshot of the page this build
/// makes (its legend once said "foreign cost" where the page says "foreign
/// or Karpenter's cost"): the digest it records is today's page's.
fn docs_picture_is_current() -> Result<(), String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plan.png");
    let png = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let shown = png_text(&png, PAGE_DIGEST)?;
    let page = page_digest(&plan(&["-o", "html"])?);
    if shown.as_deref() == Some(page.as_str()) {
        return Ok(());
    }
    Err(format!(
        "docs/plan.png shows the page of digest {shown:?}, this build makes {page}: \
         make it again with DELETION_COST_PLAN_PNG=docs/plan.png cargo test --test browser"
    ))
}

/// The PNG text key under which a screenshot records the page it shows.
const PAGE_DIGEST: &str = "deletion-cost-page";

/// FNV-1a (64 bits) of the page, in hex: enough to tell two pages apart.
fn page_digest(page: &str) -> String {
    let hash = page.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// A PNG chunk: its type and its data.
type Chunk<'a> = (&'a [u8], &'a [u8]);

/// The PNG's chunks, after the signature.
fn png_chunks(png: &[u8]) -> Result<Vec<Chunk<'_>>, String> {
    if png.get(..8) != Some(b"\x89PNG\r\n\x1a\n".as_slice()) {
        return Err("not a PNG".into());
    }
    let mut chunks = Vec::new();
    let mut at = 8;
    while at < png.len() {
        let len = png
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or("a PNG chunk cut short")?;
        let kind = png.get(at + 4..at + 8).ok_or("a PNG chunk cut short")?;
        let data = png
            .get(at + 8..at + 8 + len)
            .ok_or("a PNG chunk cut short")?;
        chunks.push((kind, data));
        at += 12 + len;
    }
    Ok(chunks)
}

/// The text of the PNG's `tEXt` chunk `key`, if it has one.
fn png_text(png: &[u8], key: &str) -> Result<Option<String>, String> {
    Ok(png_chunks(png)?.into_iter().find_map(|(kind, data)| {
        let (k, text) = data.split_at(data.iter().position(|&b| b == 0)?);
        (kind == b"tEXt" && k == key.as_bytes())
            .then(|| String::from_utf8_lossy(&text[1..]).into_owned())
    }))
}

/// `png` with a `tEXt` chunk `key` = `text` right after its header.
fn with_png_text(png: &[u8], key: &str, text: &str) -> Result<Vec<u8>, String> {
    png_chunks(png)?;
    let mut body = b"tEXt".to_vec();
    body.extend_from_slice(key.as_bytes());
    body.push(0);
    body.extend_from_slice(text.as_bytes());
    // the header chunk: signature, length, type, 13 bytes, CRC
    let after_header = 8 + 12 + 13;
    let mut out = png[..after_header].to_vec();
    out.extend_from_slice(&((body.len() - 4) as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32(&body).to_be_bytes());
    out.extend_from_slice(&png[after_header..]);
    Ok(out)
}

/// The CRC-32 PNG chunks carry (ISO 3309, as zlib's).
fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
        c
    })
}

/// What Chromium made of the page.
struct Rendered {
    expected: Expected,
    seen: Inspection,
    /// Where the screenshot went, its bytes and the size its header gives.
    png: (PathBuf, Vec<u8>, u32, u32),
}

/// What the page did in the browser.
struct Inspection {
    /// Pod boxes on the nodes: (pod, victim class, visible VICTIM label, width, height).
    boxes: Vec<(String, bool, bool, f64, f64)>,
    /// Legend text.
    legend: String,
    /// URLs the page requested.
    requests: Vec<String>,
    /// The page's own URL.
    url: String,
    /// Console errors, exceptions and error log entries.
    errors: Vec<String>,
    /// Page height at `WIDTH`.
    height: u32,
}

fn every_pod_drawn(r: &Rendered) -> Result<(), String> {
    let drawn: BTreeSet<String> = r.seen.boxes.iter().map(|b| b.0.clone()).collect();
    if drawn != r.expected.pods {
        return Err(format!(
            "drawn {drawn:?}, the plan has {:?}",
            r.expected.pods
        ));
    }
    if r.seen.boxes.len() != r.expected.pods.len() {
        return Err(format!(
            "{} boxes for {} pods",
            r.seen.boxes.len(),
            r.expected.pods.len()
        ));
    }
    for (pod, _, _, w, h) in &r.seen.boxes {
        if *w < 100.0 || *h < 20.0 {
            return Err(format!("{pod} is drawn {w}x{h}"));
        }
    }
    for words in ["first to go", "last to go", "victim of scale down by 2"] {
        if !r.seen.legend.contains(words) {
            return Err(format!("legend without {words:?}: {}", r.seen.legend));
        }
    }
    Ok(())
}

fn victims_marked(r: &Rendered) -> Result<(), String> {
    if r.expected.victims.len() != 2 {
        return Err(format!(
            "expected 2 victims, the plan has {:?}",
            r.expected.victims
        ));
    }
    for (pod, victim, label, ..) in &r.seen.boxes {
        let should = r.expected.victims.contains(pod);
        if *victim != should || *label != should {
            return Err(format!(
                "{pod}: victim in the plan {should}, marked {victim}, VICTIM label {label}"
            ));
        }
    }
    Ok(())
}

fn no_external_request(r: &Rendered) -> Result<(), String> {
    let other: Vec<&String> = r
        .seen
        .requests
        .iter()
        .filter(|u| **u != r.seen.url)
        .collect();
    if !other.is_empty() {
        return Err(format!("requests besides {}: {other:?}", r.seen.url));
    }
    if !r.seen.requests.contains(&r.seen.url) {
        return Err(format!(
            "the page's own load was not seen ({:?}): the request log is not working",
            r.seen.requests
        ));
    }
    Ok(())
}

fn no_console_error(r: &Rendered) -> Result<(), String> {
    if r.seen.errors.is_empty() {
        Ok(())
    } else {
        Err(format!("errors: {:#?}", r.seen.errors))
    }
}

fn screenshot_saved(r: &Rendered) -> Result<(), String> {
    let (path, bytes, w, h) = &r.png;
    eprintln!(
        "browser: screenshot {} ({} bytes, {w}x{h})",
        path.display(),
        bytes.len()
    );
    if *w != WIDTH || *h != r.seen.height {
        return Err(format!("{w}x{h}, expected {WIDTH}x{}", r.seen.height));
    }
    // a blank page compresses to a few KB; the README's copy stays small
    if bytes.len() < 20_000 || bytes.len() > 300_000 {
        return Err(format!("{} bytes", bytes.len()));
    }
    Ok(())
}

/// Width and height from a PNG's IHDR.
fn png_size(bytes: &[u8]) -> Result<(u32, u32), String> {
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return Err("not a PNG".into());
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Ok((be(&bytes[16..20]), be(&bytes[20..24])))
}

fn file_url(path: &Path) -> String {
    // the temporary directory's path holds no characters a URL would need escaped
    format!("file://{}", path.display())
}

// ---------------------------------------------------------------------------
// Chromium

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod browser {
    pub fn render(_: &std::path::Path) -> Result<super::Rendered, String> {
        Err("the DevTools pipe is wired up for Linux only".into())
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod browser {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};

    use super::{
        expected, file_url, page_digest, plan, png_size, with_png_text, Inspection, Rendered,
        PAGE_DIGEST, WIDTH,
    };

    /// Longest wait for one answer or for the page to load.
    const STEP: Duration = Duration::from_secs(60);
    /// Quiet time after the load event before the logs are read.
    const SETTLE: Duration = Duration::from_millis(500);

    /// A Chromium process group; stopped (all of it) when dropped.
    struct Browser {
        child: Child,
    }

    impl Browser {
        fn spawn(mut cmd: Command) -> Result<Self, String> {
            // its own process group, so its child processes stop with it; and it dies
            // with the test even when the test is killed
            cmd.process_group(0);
            // SAFETY: prctl is async-signal-safe and touches no Rust state.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            cmd.spawn()
                .map(|child| Browser { child })
                .map_err(|e| format!("starting chromium: {e}"))
        }

        /// Waits up to `limit` for it to exit by itself.
        fn wait(&mut self, limit: Duration) -> Result<std::process::ExitStatus, String> {
            let deadline = Instant::now() + limit;
            loop {
                if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                    return Ok(status);
                }
                if Instant::now() > deadline {
                    return Err(format!("chromium still running after {limit:?}"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    impl Drop for Browser {
        fn drop(&mut self) {
            let group = self.child.id() as i32;
            // SAFETY: kill(2) on the group this test started; no memory involved.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }

    fn base_command(chromium: &Path, profile: &Path) -> Command {
        let mut c = Command::new(chromium);
        c.args([
            "--headless=new",
            "--disable-gpu",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
        c
    }

    /// The DevTools protocol over `--remote-debugging-pipe`: commands on the
    /// browser's fd 3, answers and events from its fd 4, NUL-terminated JSON.
    struct Devtools {
        to: std::io::PipeWriter,
        from: Receiver<Value>,
        next_id: u64,
        /// Events read while waiting for answers.
        events: Vec<Value>,
    }

    impl Devtools {
        fn call(
            &mut self,
            session: Option<&str>,
            method: &str,
            params: Value,
        ) -> Result<Value, String> {
            self.next_id += 1;
            let id = self.next_id;
            let mut msg = json!({"id": id, "method": method, "params": params});
            if let Some(s) = session {
                msg["sessionId"] = s.into();
            }
            let mut bytes = msg.to_string().into_bytes();
            bytes.push(0);
            self.to
                .write_all(&bytes)
                .map_err(|e| format!("{method}: writing to chromium: {e}"))?;
            let deadline = Instant::now() + STEP;
            loop {
                let m = self.next(deadline).map_err(|e| format!("{method}: {e}"))?;
                if m["id"] == id {
                    if let Some(err) = m.get("error") {
                        return Err(format!("{method}: {err}"));
                    }
                    return Ok(m["result"].clone());
                }
                self.events.push(m);
            }
        }

        fn next(&mut self, deadline: Instant) -> Result<Value, String> {
            let left = deadline.saturating_duration_since(Instant::now());
            self.from.recv_timeout(left).map_err(|e| match e {
                RecvTimeoutError::Timeout => "no answer from chromium in time".to_string(),
                RecvTimeoutError::Disconnected => "chromium closed the pipe".to_string(),
            })
        }

        /// Reads events until `method` arrives (kept with the others).
        fn wait_for(&mut self, method: &str) -> Result<(), String> {
            if self.events.iter().any(|e| e["method"] == method) {
                return Ok(());
            }
            let deadline = Instant::now() + STEP;
            loop {
                let m = self
                    .next(deadline)
                    .map_err(|e| format!("waiting for {method}: {e}"))?;
                let done = m["method"] == method;
                self.events.push(m);
                if done {
                    return Ok(());
                }
            }
        }

        /// Reads events until none came for `quiet`.
        fn settle(&mut self, quiet: Duration) {
            while let Ok(m) = self.from.recv_timeout(quiet) {
                self.events.push(m);
            }
        }
    }

    pub fn render(chromium: &Path) -> Result<Rendered, String> {
        let expected = expected()?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let page_path = dir.path().join("plan.html");
        let page = plan(&["-o", "html"])?;
        std::fs::write(&page_path, &page).map_err(|e| e.to_string())?;
        let url = file_url(&page_path);

        let (seen, log) = inspect(chromium, dir.path(), &url)?;
        let png = screenshot(chromium, dir.path(), &url, seen.height, &page)
            .map_err(|e| format!("{e}\nchromium's log of the inspection:\n{log}"))?;
        Ok(Rendered {
            expected,
            seen,
            png,
        })
    }

    /// Opens the page over the DevTools pipe: the requests, the errors, the
    /// pod boxes and the page height. Also returns chromium's stderr.
    fn inspect(chromium: &Path, dir: &Path, url: &str) -> Result<(Inspection, String), String> {
        let (cmd_r, cmd_w) = std::io::pipe().map_err(|e| e.to_string())?;
        let (resp_r, resp_w) = std::io::pipe().map_err(|e| e.to_string())?;
        let log_path = dir.join("chromium-inspect.log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let mut cmd = base_command(chromium, &dir.join("profile-inspect"));
        cmd.args([
            "--remote-debugging-pipe",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--window-size={WIDTH},900"),
            "about:blank",
        ])
        .stderr(log);
        let (fd_in, fd_out) = (cmd_r.as_raw_fd(), resp_w.as_raw_fd());
        // SAFETY: fcntl and dup2 are async-signal-safe; the descriptors stay
        // open in the parent until spawn returns. Copies above 10 first, so
        // a pipe end already numbered 3 or 4 is not clobbered.
        unsafe {
            cmd.pre_exec(move || {
                let a = libc::fcntl(fd_in, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(fd_out, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut browser = Browser::spawn(cmd)?;
        // the browser's ends are its own now: EOF when it exits
        drop((cmd_r, resp_w));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(resp_r);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        let mut dt = Devtools {
            to: cmd_w,
            from: rx,
            next_id: 0,
            events: Vec::new(),
        };
        let result = drive(&mut dt, url);
        // a clean close first; the drop kills whatever is left
        let _ = dt.call(None, "Browser.close", json!({}));
        let _ = browser.wait(Duration::from_secs(10));
        drop(browser);
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        match result {
            Ok(seen) => Ok((seen, log)),
            Err(e) => Err(format!("{e}\nchromium's log:\n{log}")),
        }
    }

    fn drive(dt: &mut Devtools, url: &str) -> Result<Inspection, String> {
        let target = dt.call(None, "Target.createTarget", json!({"url": "about:blank"}))?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or("no targetId")?
            .to_string();
        let attached = dt.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_string();
        let s = Some(session.as_str());
        for domain in ["Page", "Runtime", "Log", "Network"] {
            dt.call(s, &format!("{domain}.enable"), json!({}))?;
        }
        // only what the page does from here on counts
        dt.events.clear();
        let nav = dt.call(s, "Page.navigate", json!({"url": url}))?;
        if let Some(e) = nav.get("errorText") {
            return Err(format!("navigating to {url}: {e}"));
        }
        dt.wait_for("Page.loadEventFired")?;
        dt.settle(SETTLE);

        let probe = r#"JSON.stringify({
            boxes: [...document.querySelectorAll('svg.node g.pod')].map(g => {
                const r = g.getBoundingClientRect();
                const label = [...g.querySelectorAll('text')].some(t => t.textContent.trim() === 'VICTIM');
                return [g.dataset.pod, g.classList.contains('victim'), label, r.width, r.height];
            }),
            legend: (document.querySelector('.legend') || {}).textContent || '',
            height: Math.ceil(document.documentElement.scrollHeight)
        })"#;
        let v = dt.call(
            s,
            "Runtime.evaluate",
            json!({"expression": probe, "returnByValue": true}),
        )?;
        let text = v["result"]["value"]
            .as_str()
            .ok_or_else(|| format!("the probe returned {v}"))?;
        let probed: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let boxes = probed["boxes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                (
                    b[0].as_str().unwrap_or_default().to_string(),
                    b[1].as_bool().unwrap_or(false),
                    b[2].as_bool().unwrap_or(false),
                    b[3].as_f64().unwrap_or(0.0),
                    b[4].as_f64().unwrap_or(0.0),
                )
            })
            .collect();
        let height = probed["height"].as_u64().unwrap_or(0) as u32;

        let mut requests = Vec::new();
        let mut errors = Vec::new();
        for e in &dt.events {
            if e["sessionId"] != session {
                continue;
            }
            let p = &e["params"];
            match e["method"].as_str().unwrap_or_default() {
                "Network.requestWillBeSent" => {
                    requests.push(p["request"]["url"].as_str().unwrap_or_default().to_string())
                }
                "Runtime.consoleAPICalled"
                    if matches!(p["type"].as_str(), Some("error" | "assert")) =>
                {
                    errors.push(format!("console.{}: {}", p["type"], p["args"]))
                }
                "Runtime.exceptionThrown" => {
                    errors.push(format!("exception: {}", p["exceptionDetails"]))
                }
                "Log.entryAdded" if p["entry"]["level"] == "error" => {
                    errors.push(format!("log: {}", p["entry"]["text"]))
                }
                _ => {}
            }
        }
        Ok(Inspection {
            boxes,
            legend: probed["legend"].as_str().unwrap_or_default().to_string(),
            requests,
            url: url.to_string(),
            errors,
            height,
        })
    }

    /// `chromium --screenshot` of the whole page at `WIDTH` x `height`,
    /// recording the digest of `page`, the page it shows.
    fn screenshot(
        chromium: &Path,
        dir: &Path,
        url: &str,
        height: u32,
        page: &str,
    ) -> Result<(PathBuf, Vec<u8>, u32, u32), String> {
        if height < 100 {
            return Err(format!("the page is {height} px high"));
        }
        let out = match std::env::var_os("DELETION_COST_PLAN_PNG").filter(|p| !p.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plan.png"),
        };
        let _ = std::fs::remove_file(&out);
        let log_path = dir.join("chromium-screenshot.log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let mut cmd = base_command(chromium, &dir.join("profile-screenshot"));
        cmd.arg(format!("--screenshot={}", out.display()))
            .arg(format!("--window-size={WIDTH},{height}"))
            .arg(url)
            .stderr(log);
        let mut browser = Browser::spawn(cmd)?;
        let status = browser.wait(STEP);
        drop(browser);
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let status = status.map_err(|e| format!("{e}\n{log}"))?;
        if !status.success() {
            return Err(format!("chromium --screenshot: {status}\n{log}"));
        }
        let bytes = std::fs::read(&out).map_err(|e| format!("{}: {e}\n{log}", out.display()))?;
        let bytes = with_png_text(&bytes, PAGE_DIGEST, &page_digest(page))?;
        std::fs::write(&out, &bytes).map_err(|e| format!("{}: {e}", out.display()))?;
        let (w, h) = png_size(&bytes)?;
        Ok((out, bytes, w, h))
    }
}
