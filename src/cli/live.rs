//! Live reads, kubectl style: the cluster through the kubeconfig
//! (`--kubeconfig`, `--context`, else the usual `KUBECONFIG` rules),
//! read-only (get and list only). What it reads is written out as
//! `kubectl get -o json` prints it and read by the same [`SnapshotReader`] a
//! snapshot file goes through, with `/version` as the version a snapshot
//! would carry: `plan`, `predict` and `explain` then run their pure code on
//! it and answer as they do from a saved snapshot of the same objects.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::CliError;
use crate::input::{parse_objects, InputLimits, RawObject, ServerVersion, SnapshotReader};
use crate::plan::Snapshot;

/// The flags that say which cluster and which namespaces to read.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Namespace to read (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Read every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Kubeconfig file (default: the files in $KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// Whether any of these flags was given.
    pub fn any(&self) -> bool {
        self.namespace.is_some()
            || self.all_namespaces
            || self.kubeconfig.is_some()
            || self.context.is_some()
    }

    /// Whether a flag that only a live read uses (`--kubeconfig`,
    /// `--context`) was given: wrong with a file input.
    pub fn connection(&self) -> Option<&'static str> {
        if self.kubeconfig.is_some() {
            Some("--kubeconfig")
        } else if self.context.is_some() {
            Some("--context")
        } else {
            None
        }
    }
}

/// What a command needs from the cluster besides pods and `/version`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wants {
    /// Nodes (the policy's billing-class and node signals).
    pub nodes: bool,
    /// The DeletionCostPolicy objects of the namespaces read.
    pub policies: bool,
    /// With `policies`: a cluster without the CRD has no policies, not an
    /// error.
    pub policies_optional: bool,
    /// The command works on the live cluster only (no `--snapshot` to
    /// suggest when there is no kubeconfig).
    pub live_only: bool,
}

/// What a live read gave.
pub struct LiveRead {
    /// `the cluster (context NAME)`: the input's name in notes and errors.
    pub source: String,
    /// The namespace read; `None` under `-A`.
    pub namespace: Option<String>,
    /// Pods, ReplicaSets, Deployments (and nodes, when wanted).
    pub snapshot: Snapshot,
    /// The API server's `/version`, read as a snapshot's version is.
    pub version: Option<ServerVersion>,
    /// The policies, as objects read from a file are (when wanted).
    pub policies: Vec<RawObject>,
}

/// The policy CRD, read as untyped objects: the same strict checks as a
/// `--policy` file then judge them.
fn policy_resource() -> ApiResource {
    ApiResource {
        group: "deletioncost.dev".into(),
        version: "v1alpha1".into(),
        api_version: "deletioncost.dev/v1alpha1".into(),
        kind: "DeletionCostPolicy".into(),
        plural: "deletioncostpolicies".into(),
    }
}

/// How a read's error begins when the cluster lacks the policy CRD.
const NO_CRD: &str = "the cluster has no DeletionCostPolicy resource";

/// How long a connection may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one list may take.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// Objects per list page, as kubectl asks for them.
const PAGE: u32 = 500;

/// Reads the cluster: `/version`, pods, ReplicaSets and Deployments of the
/// namespace (or all, `-A`), and what `wants` adds. Errors name the
/// kubeconfig, the server, or the verb and resource refused.
pub fn read(args: &ClusterArgs, wants: Wants, limits: InputLimits) -> Result<LiveRead, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("starting the runtime: {e}")))?;
    runtime.block_on(read_async(args, wants, limits))
}

async fn read_async(
    args: &ClusterArgs,
    wants: Wants,
    limits: InputLimits,
) -> Result<LiveRead, CliError> {
    read_connected(args, wants, limits)
        .await
        .map(|(_, read)| read)
}

/// [`read`] in a runtime of the caller's, with the client it read through
/// (for a command that then writes as the same user).
pub async fn read_connected(
    args: &ClusterArgs,
    wants: Wants,
    limits: InputLimits,
) -> Result<(Client, LiveRead), CliError> {
    let (client, context, server, default_ns) = connect(args, wants.live_only).await?;
    let namespace = if args.all_namespaces {
        None
    } else {
        Some(args.namespace.clone().unwrap_or(default_ns))
    };
    let ns = namespace.as_deref();
    let source = format!("the cluster (context {context})");
    let at = Where {
        context: &context,
        server: &server,
        namespace: ns,
    };
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| at.error(e, "get", "/version"))?;
    let mut items: Vec<Value> = Vec::new();
    list::<Pod>(&client, ns, &at, "pods", &mut items).await?;
    list::<ReplicaSet>(&client, ns, &at, "replicasets", &mut items).await?;
    list::<Deployment>(&client, ns, &at, "deployments", &mut items).await?;
    if wants.nodes {
        list_nodes(&client, &at, &mut items).await?;
    }
    let mut policies = Vec::new();
    if wants.policies {
        policies = match list_policies(&client, ns, &at, &source).await {
            Err(e) if wants.policies_optional && e.message.starts_with(NO_CRD) => Vec::new(),
            other => other?,
        };
    }
    let (snapshot, version) = read_snapshot(&source, items, &info, limits)?;
    Ok((
        client,
        LiveRead {
            source,
            namespace,
            snapshot,
            version,
            policies,
        },
    ))
}

/// Adds the cluster's nodes to `items`; a user who may not list them gets
/// a warning and the read goes on without them.
async fn list_nodes(
    client: &Client,
    at: &Where<'_>,
    items: &mut Vec<Value>,
) -> Result<(), CliError> {
    let context = at.context;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut found = Vec::new();
    match pages(&nodes, at, "nodes", &mut found).await {
        Ok(()) => items.append(&mut found),
        // a namespace's user often may not list nodes (cluster-scoped):
        // the plan goes on without them and says what that changes
        Err(e) if e.message.starts_with("forbidden:") => super::stderr::warn(&format!(
            "the kubeconfig's user (context {context}) may not list nodes: planned without \
             nodes, so billing classes and node signals read them as nodes missing from a \
             snapshot (no labels)"
        )),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// The DeletionCostPolicy objects of namespace `ns` (`None`: all), read as
/// a policy file's objects are.
async fn list_policies(
    client: &Client,
    ns: Option<&str>,
    at: &Where<'_>,
    source: &str,
) -> Result<Vec<RawObject>, CliError> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &policy_resource()),
        None => Api::all_with(client.clone(), &policy_resource()),
    };
    let mut found = Vec::new();
    pages(&api, at, "deletioncostpolicies", &mut found).await?;
    let resource = policy_resource();
    let objects: Vec<Value> = found
        .into_iter()
        .map(|mut v| {
            // list items carry no kind; kubectl adds it, and so do we
            if let Some(o) = v.as_object_mut() {
                o.insert("apiVersion".into(), resource.api_version.clone().into());
                o.insert("kind".into(), resource.kind.clone().into());
            }
            v
        })
        .collect();
    let text = list_text(objects)?;
    parse_objects(source, &text).map_err(CliError::bad_input)
}

/// The objects listed and `/version`, read as a snapshot file and the
/// version it carries.
fn read_snapshot(
    source: &str,
    items: Vec<Value>,
    info: &k8s_openapi::apimachinery::pkg::version::Info,
    limits: InputLimits,
) -> Result<(Snapshot, Option<ServerVersion>), CliError> {
    let mut reader = SnapshotReader::new(limits);
    let text = list_text(items)?;
    reader
        .read(source, text.as_bytes(), text.len() as u64)
        .map_err(CliError::bad_input)?;
    let version_text = serde_json::to_string(info)
        .map_err(|e| CliError::failure(format!("encoding /version: {e}")))?;
    reader
        .read_text(&format!("{source}: /version"), &version_text)
        .map_err(CliError::bad_input)?;
    let read = reader.finish().map_err(CliError::bad_input)?;
    Ok((read.snapshot, read.version))
}

/// The client for the kubeconfig's context, its name, the server's URL and
/// the context's namespace.
async fn connect(
    args: &ClusterArgs,
    live_only: bool,
) -> Result<(Client, String, String, String), CliError> {
    let kubeconfig = match &args.kubeconfig {
        Some(path) => Kubeconfig::read_from(path).map_err(|e| {
            CliError::bad_input(format!(
                "--kubeconfig: {}",
                crate::operator::config::kubeconfig_error(&e)
            ))
        })?,
        None => Kubeconfig::read().map_err(|e| {
            CliError::bad_input(format!(
                "no kubeconfig to read the cluster with ({}): pass --kubeconfig PATH{}",
                crate::operator::config::no_kubeconfig(&e),
                if live_only {
                    " or set KUBECONFIG"
                } else {
                    ", set KUBECONFIG, or read saved files instead (--snapshot FILE)"
                }
            ))
        })?,
    };
    let context = args
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .unwrap_or_default();
    if args.context.is_some() && !kubeconfig.contexts.iter().any(|c| c.name == context) {
        let known: Vec<&str> = kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        return Err(CliError::bad_input(format!(
            "--context {context:?}: no such context in the kubeconfig (it has: {})",
            known.join(", ")
        )));
    }
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| {
            CliError::bad_input(format!(
                "kubeconfig context {context:?}: {}",
                crate::error_chain(&e)
            ))
        })?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    // kube sends no User-Agent of its own: name us in audit logs and APF
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(crate::USER_AGENT),
    ));
    let server = config.cluster_url.to_string();
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).map_err(|e| {
        CliError::bad_input(format!(
            "kubeconfig context {context:?}: {}",
            crate::error_chain(&e)
        ))
    })?;
    Ok((client, context, server, namespace))
}

/// Where a read went, for its errors.
struct Where<'a> {
    context: &'a str,
    server: &'a str,
    namespace: Option<&'a str>,
}

impl Where<'_> {
    /// A read's error in the user's words: the verb and resource a 403
    /// refused, the server that could not be reached.
    fn error(&self, e: kube::Error, verb: &str, resource: &str) -> CliError {
        let scope = match (resource, self.namespace) {
            ("/version" | "nodes", _) => String::new(),
            (_, Some(ns)) => format!(" in namespace {ns}"),
            (_, None) => " in all namespaces".into(),
        };
        match &e {
            kube::Error::Api(s) if s.code == 403 => CliError::failure(format!(
                "forbidden: the kubeconfig's user (context {}) may not {verb} {resource}{scope}; \
                 these reads need get and list on pods, replicasets, deployments, nodes and \
                 deletioncostpolicies.deletioncost.dev (the API server said: {})",
                self.context, s.message
            )),
            kube::Error::Api(s) if s.code == 401 => CliError::failure(format!(
                "unauthorized: the API server at {} refused the credentials of context {} \
                 ({}); log in again or check the kubeconfig",
                self.server, self.context, s.message
            )),
            kube::Error::Api(s) if s.code == 404 && resource == "deletioncostpolicies" => {
                CliError::failure(format!(
                    "{NO_CRD} (the CRD is not installed: \
                     `deletion-cost crd | kubectl apply -f -`); to try a policy before \
                     installing, give it with --policy FILE ({})",
                    s.message
                ))
            }
            kube::Error::Api(s) => CliError::failure(format!(
                "{verb} {resource}{scope}: the API server at {} answered {} {}: {}",
                self.server, s.code, s.reason, s.message
            )),
            other => CliError::failure(format!(
                "cannot reach the API server at {} (context {}) to {verb} {resource}: {}",
                self.server,
                self.context,
                crate::error_chain(other)
            )),
        }
    }
}

/// Lists one kind, page by page, into `items` as `kubectl get -o json`
/// prints them (with `kind` and `apiVersion`).
async fn list<K>(
    client: &Client,
    ns: Option<&str>,
    at: &Where<'_>,
    resource: &str,
    items: &mut Vec<Value>,
) -> Result<(), CliError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let api: Api<K> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    pages(&api, at, resource, items).await
}

/// Lists through `api`, page by page; each object as JSON with its kind.
async fn pages<K>(
    api: &Api<K>,
    at: &Where<'_>,
    resource: &str,
    items: &mut Vec<Value>,
) -> Result<(), CliError>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| at.error(e, "list", resource))?;
        for object in page.items {
            let mut v = serde_json::to_value(&object)
                .map_err(|e| CliError::failure(format!("encoding {resource}: {e}")))?;
            // not read by anything here, and often most of an object's bytes
            if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
            items.push(v);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// A `List` of `items` as JSON text.
fn list_text(items: Vec<Value>) -> Result<String, CliError> {
    serde_json::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": items,
    }))
    .map_err(|e| CliError::failure(format!("encoding the objects read: {e}")))
}
