//! `deletion-cost prescale`: the pre-scale-down hook's client.

use std::path::PathBuf;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use clap::ValueEnum;
use serde_json::{json, Value};

use super::{print_out, table, CliError};

/// Where a pod's ServiceAccount token is mounted.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Output format of `prescale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrescaleOutput {
    /// A readable summary.
    Table,
    /// The hook's JSON answer.
    Json,
}

/// Flags of `prescale`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("workload").required(true).args(["deployment", "replicaset"])))]
pub struct PrescaleArgs {
    /// Namespace of the workload.
    #[arg(long, short = 'n')]
    pub namespace: String,
    /// The Deployment about to scale in.
    #[arg(long, value_name = "NAME")]
    pub deployment: Option<String>,
    /// The ReplicaSet about to scale in.
    #[arg(long, value_name = "NAME")]
    pub replicaset: Option<String>,
    /// Target replica count.
    #[arg(long, value_name = "N")]
    pub replicas: u32,
    /// Also let the operator set the scale and report which pods went.
    #[arg(long)]
    pub scale: bool,
    /// The hook's base URL (the operator's `hook` Service port), `https://`;
    /// `http://` only with --insecure-http.
    #[arg(
        long,
        default_value = "https://127.0.0.1:8443",
        env = "DELETION_COST_HOOK_URL"
    )]
    pub url: String,
    /// File with the bearer token (default: this pod's ServiceAccount token).
    #[arg(long, value_name = "FILE", default_value = SERVICE_ACCOUNT_TOKEN)]
    pub token_file: PathBuf,
    /// CA certificate(s) (PEM) to trust for the https URL, instead of the
    /// system's roots: the operator's ConfigMap <service>-ca (key ca.crt)
    /// mounted in the pod, or cert-manager's ca.crt.
    // the help text names a ConfigMap <service>-ca, not an HTML tag
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long, value_name = "FILE", env = "DELETION_COST_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Allow an `http://` URL: the bearer token then travels in clear text.
    #[arg(long)]
    pub insecure_http: bool,
    /// Time budget of the request, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub timeout: u64,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = PrescaleOutput::Table)]
    pub output: PrescaleOutput,
}

/// The request body for these flags (pure).
pub fn request_body(args: &PrescaleArgs) -> Value {
    let (kind, name) = match (&args.deployment, &args.replicaset) {
        (Some(d), _) => ("Deployment", d.as_str()),
        (None, Some(r)) => ("ReplicaSet", r.as_str()),
        (None, None) => ("Deployment", ""),
    };
    json!({
        "namespace": args.namespace,
        "workload": {"kind": kind, "name": name},
        "replicas": args.replicas,
        "scale": args.scale,
        "timeoutSeconds": args.timeout,
    })
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A readable summary of the hook's answer (pure).
pub fn render_table(answer: &Value) -> String {
    let mut out = String::new();
    let w = &answer["workload"];
    out.push_str(&format!(
        "{} {}/{}: {} -> {} replicas (scale-in by {}), policy {}\n",
        s(&w["kind"]),
        s(&answer["namespace"]),
        s(&w["name"]),
        s(&answer["currentReplicas"]),
        s(&answer["targetReplicas"]),
        s(&answer["scaleDownBy"]),
        s(&answer["policy"]),
    ));
    let p = &answer["patches"];
    out.push_str(&format!(
        "patches: {} planned, {} applied, {} gone, {} failed",
        s(&p["planned"]),
        s(&p["applied"]),
        s(&p["gone"]),
        p["failed"].as_array().map_or(0, Vec::len)
    ));
    if let Some(secs) = p["observedAfterSeconds"].as_f64() {
        out.push_str(&format!(", observed after {secs:.2}s"));
    }
    out.push('\n');
    if answer["dryRun"] == json!(true) || !p["held"].is_null() {
        out.push_str(&format!("held: {}\n", s(&p["held"])));
    }
    out.push_str(&format!("verdict: {}\n", s(&answer["verdict"])));
    render_victims(&mut out, answer);
    for rs in answer["replicaSets"].as_array().into_iter().flatten() {
        for m in rs["mismatches"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "mismatch in {}: {} goes before {} ({})\n",
                s(&rs["name"]),
                s(&m["pod"]),
                s(&m["before"]),
                s(&m["reason"])
            ));
        }
    }
    let sc = &answer["scale"];
    if !sc.is_null() {
        render_scale(&mut out, sc);
    }
    for w in answer["warnings"].as_array().into_iter().flatten() {
        out.push_str(&format!("warning: {}\n", s(w)));
    }
    out
}

/// The victims' table, after a blank line; nothing when there are none.
fn render_victims(out: &mut String, answer: &Value) {
    let victims = answer["victims"].as_array().cloned().unwrap_or_default();
    if !victims.is_empty() {
        let header = ["RANK", "POD", "REPLICASET", "COST", "INTENDED"].map(String::from);
        let rows = victims.iter().enumerate().map(|(i, v)| {
            let marked = if v["marked"].is_string() {
                " (marked)"
            } else {
                ""
            };
            [
                (i + 1).to_string(),
                format!("{}{marked}", s(&v["pod"])),
                s(&v["replicaSet"]),
                s(&v["cost"]),
                s(&v["intendedCost"]),
            ]
        });
        out.push('\n');
        out.push_str(&table::aligned(std::iter::once(header).chain(rows), "", 2));
    }
}

/// What became of the `--scale` asked for: the pods deleted against those
/// predicted, or why it was not scaled.
fn render_scale(out: &mut String, sc: &Value) {
    if sc["performed"] == json!(true) {
        let c = &sc["comparison"];
        let list = |v: &Value| {
            v.as_array()
                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        };
        out.push_str(&format!(
            "\nscaled to {}: deleted [{}], predicted [{}], as predicted: {}{}\n",
            s(&sc["replicas"]),
            list(&c["deleted"]),
            list(&c["predicted"]),
            s(&c["asPredicted"]),
            if c["complete"] == json!(true) {
                ""
            } else {
                " (not all deletions seen yet)"
            }
        ));
    } else {
        out.push_str(&format!("\nnot scaled: {}\n", s(&sc["skipped"])));
    }
}

/// The message of a non-2xx answer (pure).
pub fn error_message(status: u16, body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v["error"].is_string() => {
            let mut m = format!("hook answered {status}: {}", s(&v["error"]));
            if let Some(leader) = v["leader"].as_str() {
                m.push_str(&format!(" (leader: {leader})"));
            }
            m
        }
        _ => {
            let reason = reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .map(|r| format!(" {r}"))
                .unwrap_or_default();
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.starts_with('<') {
                // a web server's error page: its markup says nothing useful
                format!(
                    "{status}{reason} from a server that answered with an HTML page, not the deletion-cost hook (check --url)"
                )
            } else {
                format!(
                    "hook answered {status}{reason}: {}",
                    text.chars().take(500).collect::<String>()
                )
            }
        }
    }
}

/// Why a connection could not be made, in words: what the OS said (refused,
/// timed out, unreachable) or the name that did not resolve, without the
/// HTTP stack's layers ("client error (Connect): tcp connect error: ...").
fn connect_problem(e: &reqwest::Error) -> String {
    use std::io::ErrorKind as K;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            let words = match io.kind() {
                K::ConnectionRefused => {
                    "connection refused: nothing listens there (is --url the hook's address, \
                     and does the operator run with --hook-addr?)"
                }
                K::TimedOut => "no answer to the connection within 10 s",
                K::HostUnreachable | K::NetworkUnreachable => "the host cannot be reached",
                _ => "",
            };
            if !words.is_empty() {
                return words.to_string();
            }
        }
        if s.to_string().starts_with("dns error") {
            return "the host name does not resolve (check --url)".to_string();
        }
        source = s.source();
    }
    // unknown: the innermost cause says most
    let chain = crate::error_chain(e);
    let last = chain.rsplit(": ").next().unwrap_or(&chain);
    format!("cannot connect: {last}")
}

/// A hint when the TLS handshake failed in a way a retry cannot mend: the
/// server does not speak TLS, or its certificate is not trusted.
fn tls_problem(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(tls) = as_rustls(s) {
            return Some(tls_hint(tls));
        }
        source = s.source();
    }
    None
}

/// The rustls error `e` is or wraps: the HTTP stack passes it on inside
/// `io::Error`s, one in another.
fn as_rustls<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        return as_rustls(inner);
    }
    None
}

/// What to check for a TLS handshake error (pure).
fn tls_hint(e: &rustls::Error) -> &'static str {
    match e {
        rustls::Error::InvalidMessage(_) => {
            "the server does not speak TLS (is it a plain-HTTP port? the hook serves TLS on the deletion-cost-hook Service, port 8443)"
        }
        rustls::Error::InvalidCertificate(_) => {
            "the server's certificate is not trusted for this name: pass the hook's CA with --ca-file (the operator publishes it in the deletion-cost-hook-ca ConfigMap)"
        }
        _ => "the TLS handshake failed: check --url and --ca-file",
    }
}

/// Checks the URL's scheme (pure): `https`, or `http` only when allowed,
/// since the request carries a bearer token.
pub fn check_url(url: &str, insecure_http: bool) -> Result<(), String> {
    let scheme = url
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase())
        .unwrap_or_default();
    match scheme.as_str() {
        "https" => Ok(()),
        "http" if insecure_http => Ok(()),
        "http" => Err(format!(
            "--url {url}: refusing to send a bearer token over plain HTTP; use the hook's https:// URL (with --ca-file), or pass --insecure-http"
        )),
        _ => Err(format!("--url {url}: not an https:// URL")),
    }
}

/// Calls the hook and prints its answer.
pub fn run(args: PrescaleArgs) -> Result<(), CliError> {
    if args.timeout == 0 {
        return Err(CliError::bad_input("--timeout must be at least 1 second"));
    }
    check_url(&args.url, args.insecure_http).map_err(CliError::bad_input)?;
    let token = std::fs::read_to_string(&args.token_file).map_err(|e| {
        CliError::bad_input(format!(
            "--token-file {}: {}",
            args.token_file.display(),
            crate::input::io_error_text(&e)
        ))
    })?;
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(CliError::bad_input(format!(
            "--token-file {}: the file is empty",
            args.token_file.display()
        )));
    }
    let url = format!("{}/v1/prescale", args.url.trim_end_matches('/'));
    // the one TLS provider (main installs it too; this serves library callers)
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .user_agent(crate::USER_AGENT)
        .timeout(Duration::from_secs(args.timeout + 10))
        .connect_timeout(Duration::from_secs(10));
    if let Some(ca) = &args.ca_file {
        let pem = std::fs::read(ca).map_err(|e| {
            CliError::bad_input(format!(
                "--ca-file {}: {}",
                ca.display(),
                crate::input::io_error_text(&e)
            ))
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| CliError::bad_input(format!("--ca-file {}: {e}", ca.display())))?;
        if certs.is_empty() {
            return Err(CliError::bad_input(format!(
                "--ca-file {}: no certificate in the file",
                ca.display()
            )));
        }
        // only these CAs, not the system's roots as well
        builder = builder.tls_certs_only(certs);
    }
    let client = builder.build().map_err(|e| {
        // reqwest says only "builder error"; the cause is a level down
        let cause = crate::error_chain(&e);
        let cause = cause.strip_prefix("builder error: ").unwrap_or(&cause);
        match &args.ca_file {
            // the certificates are the one input the builder checks
            Some(ca) => CliError::bad_input(format!(
                "--ca-file {}: a certificate in it is not a valid X.509 CA certificate ({cause})",
                ca.display()
            )),
            None => CliError::failure(format!("building the HTTP client: {cause}")),
        }
    })?;
    let body = request_body(&args).to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("starting the async runtime: {e}")))?;
    let (status, bytes) = runtime.block_on(call(&client, &url, &token, &body, args.timeout))?;
    if !(200..300).contains(&status) {
        return Err(CliError::failure(error_message(status, &bytes)));
    }
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::failure(format!("the hook's answer is not JSON: {e}")))?;
    let text = match args.output {
        PrescaleOutput::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&answer).unwrap_or_else(|_| answer.to_string())
        ),
        PrescaleOutput::Table => render_table(&answer),
    };
    print_out(&text)
}

/// POSTs `body` to the hook at `url` until it is worked on or `timeout`
/// seconds are spent: while leadership moves, the hook Service's endpoints
/// and the node's proxy rules lag the lease by a second or so, and a
/// refused connection or a follower's 503 means the request was not worked
/// on, so it is sent again (each new reason said once on stderr).
async fn call(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: &str,
    timeout: u64,
) -> Result<(u16, Vec<u8>), CliError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(timeout);
    // the reason last said: the same one is not said again each attempt
    let (mut said, mut retries) = (None::<String>, 0u32);
    let sent = (|| post(client, url, token, body))
        .retry(retry_backoff())
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, Attempt::Again { .. }))
        // no wait that would end past the time budget
        .adjust(|_, wait| wait.filter(|w| std::time::Instant::now() + *w < deadline))
        .notify(|e, _| {
            retries += 1;
            if let Attempt::Again { why, .. } = e {
                if said.as_deref() != Some(why.as_str()) {
                    super::stderr::note(&format!(
                        "{why}; trying again until --timeout ({timeout} s) runs out"
                    ));
                    said = Some(why.clone());
                }
            }
        })
        .await;
    match sent {
        Ok(done)
        | Err(Attempt::Again {
            answer: Some(done), ..
        }) => Ok(done),
        Err(Attempt::Again { why, answer: None }) => Err(CliError::failure(format!(
            "{why}; tried {} time(s) in {timeout} s (--timeout)",
            retries + 1
        ))),
        Err(Attempt::Failed(e)) => Err(e),
    }
}

/// One POST of the hook call: its answer, or why it was not worked on.
async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: &str,
) -> Result<(u16, Vec<u8>), Attempt> {
    let sent = client
        .post(url)
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_owned())
        .send()
        .await;
    let outcome = match sent {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.map_err(|e| {
                Attempt::Failed(CliError::failure(format!(
                    "reading the answer of {url}: {}",
                    crate::error_chain(&e)
                )))
            })?;
            Ok((status, bytes.to_vec()))
        }
        Err(e) => Err(e),
    };
    // reqwest repeats the URL in its message; it is said once here
    match outcome.map_err(reqwest::Error::without_url) {
        Ok((503, bytes)) => Err(Attempt::Again {
            why: error_message(503, &bytes),
            answer: Some((503, bytes)),
        }),
        Ok(done) => Ok(done),
        // the server will not start speaking TLS on a retry
        Err(e) if tls_problem(&e).is_some() => {
            let hint = tls_problem(&e).unwrap_or_default();
            Err(Attempt::Failed(CliError::failure(format!(
                "POST {url}: {}; {hint}",
                crate::error_chain(&e)
            ))))
        }
        Err(e) if e.is_connect() => Err(Attempt::Again {
            why: format!("POST {url}: {}", connect_problem(&e)),
            answer: None,
        }),
        Err(e) => Err(Attempt::Failed(CliError::failure(format!(
            "POST {url}: {}",
            crate::error_chain(&e)
        )))),
    }
}

/// Why one POST of the hook call did not answer it.
enum Attempt {
    /// Not worked on (a refused connection, a follower's 503): sent again
    /// while the time budget lasts; `answer` is the 503's, which is the
    /// result once the budget is spent.
    Again {
        why: String,
        answer: Option<(u16, Vec<u8>)>,
    },
    /// Nothing a retry mends.
    Failed(CliError),
}

/// Waits before sending a request again: 250 ms, doubling, at most 2 s,
/// for as long as `--timeout` lasts.
fn retry_backoff() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .without_max_times()
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        args: PrescaleArgs,
    }

    fn parse(argv: &[&str]) -> Result<PrescaleArgs, clap::Error> {
        T::try_parse_from(std::iter::once("t").chain(argv.iter().copied())).map(|t| t.args)
    }

    #[test]
    fn retries_back_off_to_two_seconds() {
        let waits: Vec<u128> = retry_backoff()
            .build()
            .take(6)
            .map(|w| w.as_millis())
            .collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 2000, 2000]);
        // without end: the time budget stops it
        assert_eq!(
            retry_backoff().build().nth(1000),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn flags_build_the_request() {
        let a = parse(&[
            "-n",
            "shop",
            "--replicaset",
            "web-1",
            "--replicas",
            "2",
            "--scale",
            "--timeout",
            "9",
        ])
        .unwrap();
        assert_eq!(
            request_body(&a),
            json!({"namespace": "shop", "workload": {"kind": "ReplicaSet", "name": "web-1"},
                   "replicas": 2, "scale": true, "timeoutSeconds": 9})
        );
        assert_eq!(a.token_file, PathBuf::from(SERVICE_ACCOUNT_TOKEN));
        let d = parse(&["-n", "shop", "--deployment", "web", "--replicas", "0"]).unwrap();
        assert_eq!(request_body(&d)["workload"]["kind"], "Deployment");
        assert!(!d.scale);
    }

    #[test]
    fn exactly_one_workload_is_required() {
        assert!(parse(&["-n", "shop", "--replicas", "2"]).is_err());
        assert!(parse(&[
            "-n",
            "shop",
            "--deployment",
            "a",
            "--replicaset",
            "b",
            "--replicas",
            "2"
        ])
        .is_err());
        assert!(parse(&["-n", "shop", "--deployment", "a", "--replicas", "-1"]).is_err());
    }

    #[test]
    fn tokens_go_over_https_unless_plain_http_is_asked_for() {
        assert!(check_url("https://deletion-cost.ops.svc:8443", false).is_ok());
        assert!(check_url("HTTPS://x:1", false).is_ok());
        let e = check_url("http://deletion-cost.ops.svc:8443", false).unwrap_err();
        assert!(
            e.contains("plain HTTP") && e.contains("--insecure-http"),
            "{e}"
        );
        assert!(check_url("http://127.0.0.1:8443", true).is_ok());
        assert!(check_url("deletion-cost:8443", true).is_err());
        assert!(check_url("ftp://x", true).is_err());
        let a = parse(&["-n", "shop", "--deployment", "web", "--replicas", "1"]).unwrap();
        assert!(a.url.starts_with("https://"), "{}", a.url);
        assert!(!a.insecure_http);
    }

    #[test]
    fn errors_show_the_servers_message() {
        let m = error_message(
            503,
            br#"{"error":"not the leader","code":503,"leader":"op-1"}"#,
        );
        assert_eq!(m, "hook answered 503: not the leader (leader: op-1)");
        assert_eq!(
            error_message(502, b"bad gateway"),
            "hook answered 502 Bad Gateway: bad gateway"
        );
        let page = error_message(
            501,
            b"<!DOCTYPE HTML>\n<html><body>Unsupported method</body></html>",
        );
        assert!(
            page.starts_with("501 Not Implemented from a server"),
            "{page}"
        );
        assert!(!page.contains('<'), "{page}");
    }

    #[test]
    fn tls_handshake_errors_get_a_hint() {
        use rustls::{CertificateError, InvalidMessage};
        // as hyper-util hands it on: io::Error(Other, io::Error(InvalidData, rustls))
        let not_tls = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(InvalidMessage::InvalidContentType),
        ));
        assert!(tls_problem(&not_tls).is_some_and(|h| h.contains("does not speak TLS")));
        let untrusted = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(tls_problem(&untrusted).is_some_and(|h| h.contains("--ca-file")));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(tls_problem(&refused), None);
    }

    #[test]
    fn the_table_lists_victims_and_the_scale_result() {
        let answer = json!({
            "namespace": "shop", "workload": {"kind": "Deployment", "name": "web"},
            "policy": "shop/web", "currentReplicas": 3, "targetReplicas": 1, "scaleDownBy": 2,
            "dryRun": false,
            "patches": {"planned": 2, "applied": 2, "gone": 0, "failed": [], "observed": true,
                        "observedAfterSeconds": 0.25, "held": null},
            "victims": [{"pod": "web-a", "replicaSet": "web-1", "cost": 0, "intendedCost": 0},
                        {"pod": "web-b", "replicaSet": "web-1", "cost": 10, "intendedCost": 10}],
            "verdict": "AsIntended",
            "replicaSets": [{"name": "web-1", "mismatches": []}],
            "scale": {"performed": true, "replicas": 1,
                      "comparison": {"deleted": ["web-a", "web-b"], "predicted": ["web-a", "web-b"],
                                     "asPredicted": true, "complete": true}},
            "warnings": ["w1"],
        });
        let t = render_table(&answer);
        assert!(
            t.contains("Deployment shop/web: 3 -> 1 replicas (scale-in by 2), policy shop/web"),
            "{t}"
        );
        assert!(t.contains("observed after 0.25s"), "{t}");
        assert!(
            t.contains(
                "RANK  POD    REPLICASET  COST  INTENDED\n\
                 1     web-a  web-1       0     0\n\
                 2     web-b  web-1       10    10\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("deleted [web-a, web-b]") && t.contains("as predicted: true"),
            "{t}"
        );
        assert!(t.contains("warning: w1"), "{t}");
    }
}
