//! TLS for the hook: certificate files (e.g. from cert-manager), or a
//! serving certificate the operator issues itself.
//!
//! Self-issued: every replica uses the same CA, kept in the Secret
//! `<service>-ca` (`tls.crt`, `tls.key`) in the operator's namespace. The
//! first replica to find it missing creates it; a replica that loses that
//! race (409) reads the winner's. Each replica then issues its own serving
//! certificate from that CA for the Service's names, and applies the CA
//! certificate to the ConfigMap `<service>-ca` (key `ca.crt`), which callers
//! mount. All replicas write the same value there, so they never disagree,
//! and the CA outlives restarts and rollouts: a caller's copy stays valid.
//! Failures are retried in the background; the hook accepts connections
//! once its certificate is ready.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::cert::{self, CaPem};
use crate::MANAGER;

/// Key of the CA certificate in the published ConfigMap.
pub const CA_CONFIGMAP_KEY: &str = "ca.crt";
/// A self-issued serving certificate is replaced this often (it is valid for
/// [`cert::SERVING_VALIDITY`]).
const RENEW_EVERY: Duration = Duration::from_secs(30 * 86_400);
/// First and longest pause between attempts to set up the self-issued certificate.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Name of the Secret holding the CA and of the ConfigMap publishing it.
pub fn ca_object_name(service: &str) -> String {
    format!("{service}-ca")
}

/// Whether a listener asks its callers for a TLS client certificate.
#[derive(Clone)]
pub(crate) enum ClientAuth {
    /// No: callers authenticate otherwise (the hook's bearer tokens).
    None,
    /// Asked for, not required: a certificate presented must chain to the
    /// roots; without one the connection goes on (the hook's callers share
    /// the listener with the scale-in webhook's).
    Optional(Arc<rustls::RootCertStore>),
    /// Required, chaining to the roots: the handshake fails without one.
    Required(Arc<rustls::RootCertStore>),
}

impl ClientAuth {
    /// For the logs.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            ClientAuth::None => "not asked",
            ClientAuth::Optional(_) => "asked (the scale-in webhook requires one)",
            ClientAuth::Required(_) => "required",
        }
    }
}

fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
    clients: &ClientAuth,
) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?;
    let verifier = |roots: &Arc<rustls::RootCertStore>| {
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
    };
    let builder = match clients {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Optional(roots) => builder.with_client_cert_verifier(
            verifier(roots)
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("--scale-webhook-client-ca: {e}"))?,
        ),
        ClientAuth::Required(roots) => builder.with_client_cert_verifier(
            verifier(roots)
                .build()
                .map_err(|e| format!("--scale-webhook-client-ca: {e}"))?,
        ),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A TLS acceptor serving `resolver`'s certificate, with `clients` as the
/// listener's client-certificate rule.
pub(crate) fn acceptor(
    resolver: Arc<dyn ResolvesServerCert>,
    clients: &ClientAuth,
) -> Result<TlsAcceptor, String> {
    Ok(TlsAcceptor::from(Arc::new(server_config(
        resolver, clients,
    )?)))
}

/// The CA certificates (PEM) that issue the clients' certificates.
pub fn client_roots(path: &Path) -> Result<Arc<rustls::RootCertStore>, String> {
    let what = format!("--scale-webhook-client-ca {}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| match e {
            rustls::pki_types::pem::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::NotFound => format!("{what}: no such file"),
                std::io::ErrorKind::PermissionDenied => {
                    format!("{what}: not readable (permission denied)")
                }
                kind => format!("{what}: cannot read: {kind}"),
            },
            other => format!("{what}: not PEM certificates: {other}"),
        })?;
    if certs.is_empty() {
        return Err(format!("{what}: no certificate in the file"));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| format!("{what}: not a usable CA certificate ({e})"))?;
    }
    Ok(Arc::new(roots))
}

fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<CertifiedKey>, String> {
    CertifiedKey::from_der(chain, key, &rustls::crypto::ring::default_provider())
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// The serving certificate, replaceable while connections are accepted.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl Current {
    fn get(&self) -> Arc<CertifiedKey> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, key: Arc<CertifiedKey>) {
        match self.0.write() {
            Ok(mut g) => *g = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// Loads the certificate chain and key (PEM) for serving.
pub(crate) fn resolver_from_files(
    cert: &Path,
    key: &Path,
) -> Result<Arc<dyn ResolvesServerCert>, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--hook-tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--hook-tls-cert {}: no certificate in the file",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--hook-tls-key {}: {e}", key.display()))?;
    let current =
        certified(certs, key).map_err(|e| format!("--hook-tls-cert/--hook-tls-key: {e}"))?;
    let resolver: Arc<dyn ResolvesServerCert> = Arc::new(Current(RwLock::new(current)));
    // fails now, at start, on a key rustls cannot serve with
    server_config(resolver.clone(), &ClientAuth::None)?;
    Ok(resolver)
}

/// A self-issued serving certificate and what renews it.
pub(crate) struct SelfIssued {
    current: Arc<Current>,
    ca: CaPem,
    names: Vec<String>,
}

impl SelfIssued {
    /// The CA certificate (PEM) callers trust.
    pub fn ca_cert(&self) -> &str {
        &self.ca.cert
    }

    /// Serves the current certificate (renewals included).
    pub fn resolver(&self) -> Arc<dyn ResolvesServerCert> {
        self.current.clone()
    }

    /// Issues a serving certificate for `names` from `ca`.
    pub fn new(ca: CaPem, names: Vec<String>) -> Result<SelfIssued, String> {
        let serving = cert::issue(&ca, &names, SystemTime::now(), cert::SERVING_VALIDITY)?;
        let current = Arc::new(Current(RwLock::new(certified(serving.chain, serving.key)?)));
        server_config(current.clone(), &ClientAuth::None)?;
        Ok(SelfIssued { current, ca, names })
    }

    /// Replaces the serving certificate every [`RENEW_EVERY`] until shutdown.
    pub async fn renew(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RENEW_EVERY) => {}
            }
            let renewed = cert::issue(
                &self.ca,
                &self.names,
                SystemTime::now(),
                cert::SERVING_VALIDITY,
            )
            .and_then(|s| certified(s.chain, s.key));
            match renewed {
                Ok(key) => {
                    self.current.set(key);
                    tracing::info!("hook serving certificate renewed");
                }
                Err(e) => {
                    tracing::error!(error = %e, "renewing the hook serving certificate failed")
                }
            }
        }
    }
}

/// Why the CA could not be had.
enum CaError {
    /// The API server refused or failed.
    Api(kube::Error),
    /// The stored CA is unusable, or making one failed.
    Bad(String),
}

impl From<kube::Error> for CaError {
    fn from(e: kube::Error) -> Self {
        CaError::Api(e)
    }
}

fn transient(e: &CaError) -> bool {
    match e {
        CaError::Api(kube::Error::Api(s)) => s.code >= 500 || s.code == 429,
        CaError::Api(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
        _ => false,
    }
}

fn api_error(what: &str, e: &CaError) -> String {
    let e = match e {
        CaError::Bad(m) => return format!("{what}: {m}"),
        CaError::Api(e) => e,
    };
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "{what}: {} (the operator needs get and create on secrets, create and patch on configmaps, in its namespace)",
            s.message
        ),
        kube::Error::Api(s) => format!("{what}: {} {}", s.code, s.message),
        other => format!("{what}: {other}"),
    }
}

fn ca_from_secret(secret: &Secret, name: &str) -> Result<CaPem, String> {
    let field = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| format!("Secret {name} has no {key}; delete it to have a new CA made"))
    };
    Ok(CaPem {
        cert: field("tls.crt")?,
        key: field("tls.key")?,
    })
}

/// The shared CA: read from its Secret, or made and stored when there is none.
/// A Secret that lacks a field is reported, never overwritten: other
/// replicas may serve certificates from it.
async fn shared_ca(secrets: &Api<Secret>, name: &str) -> Result<CaPem, CaError> {
    if let Some(secret) = secrets.get_opt(name).await? {
        return ca_from_secret(&secret, name).map_err(CaError::Bad);
    }
    let ca = cert::new_ca(SystemTime::now()).map_err(CaError::Bad)?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                MANAGER.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                ByteString(ca.cert.clone().into_bytes()),
            ),
            (
                "tls.key".to_string(),
                ByteString(ca.key.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    };
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match secrets.create(&pp, &secret).await {
        Ok(_) => {
            tracing::info!(secret = name, "made the hook's CA");
            Ok(ca)
        }
        // another replica made it first: use theirs
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let secret = secrets.get(name).await?;
            ca_from_secret(&secret, name).map_err(CaError::Bad)
        }
        Err(e) => Err(e.into()),
    }
}

/// Publishes the CA certificate for callers (server-side apply).
async fn publish(configmaps: &Api<ConfigMap>, name: &str, ca: &CaPem) -> Result<(), CaError> {
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name,
                     "labels": {"app.kubernetes.io/managed-by": MANAGER}},
        "data": {CA_CONFIGMAP_KEY: ca.cert},
    });
    configmaps
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await
        .map(|_| ())
        .map_err(CaError::Api)
}

/// One attempt: gets the shared CA, issues this replica's serving
/// certificate from it, then publishes the CA. Errs with whether a retry
/// may succeed without anyone acting.
async fn attempt(
    client: &Client,
    service: &str,
    namespace: &str,
) -> Result<SelfIssued, (bool, String)> {
    let name = ca_object_name(service);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let ca = shared_ca(&secrets, &name).await.map_err(|e| {
        (
            transient(&e),
            api_error(&format!("Secret {namespace}/{name}"), &e),
        )
    })?;
    let issued = SelfIssued::new(ca, cert::service_names(service, namespace)).map_err(|e| {
        (
            false,
            format!("Secret {namespace}/{name}: {e}; delete it to have a new CA made"),
        )
    })?;
    publish(&configmaps, &name, &issued.ca).await.map_err(|e| {
        (
            transient(&e),
            api_error(&format!("ConfigMap {namespace}/{name}"), &e),
        )
    })?;
    tracing::info!(
        names = ?issued.names,
        "hook serving certificate issued; its CA is in ConfigMap {namespace}/{name} (key {CA_CONFIGMAP_KEY})"
    );
    Ok(issued)
}

/// Gets the shared CA, issues this replica's serving certificate for
/// `service` in `namespace` and publishes the CA, retrying until it works
/// (a missing permission granted or a bad Secret deleted heals without a
/// restart) or until shutdown (`None`). Until then the hook accepts no
/// connection: callers wait in the listen queue.
pub(crate) async fn self_issued(
    client: &Client,
    service: &str,
    namespace: &str,
    shutdown: CancellationToken,
) -> Option<SelfIssued> {
    let issued = (|| attempt(client, service, namespace))
        .retry(retry_backoff())
        .sleep(tokio::time::sleep)
        .notify(|(transient, msg), _| {
            if *transient {
                tracing::warn!(error = %msg, "hook TLS not ready yet; retrying")
            } else {
                tracing::error!(error = %msg, "hook TLS: cannot serve the hook; retrying")
            }
        });
    tokio::select! {
        _ = shutdown.cancelled() => None,
        // the retries have no end: only shutdown stops them
        issued = issued => issued.ok(),
    }
}

/// The pauses between attempts: from [`RETRY_FIRST`], doubling, at most
/// [`RETRY_MAX`], without end.
fn retry_backoff() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(RETRY_FIRST)
        .with_max_delay(RETRY_MAX)
        .with_factor(2.0)
        .without_max_times()
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    #[test]
    fn attempts_back_off_from_200_ms_to_30_s_without_end() {
        let pauses: Vec<u128> = retry_backoff()
            .build()
            .take(10)
            .map(|p| p.as_millis())
            .collect();
        assert_eq!(
            pauses,
            [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
        );
        assert_eq!(retry_backoff().build().nth(1000), Some(RETRY_MAX));
    }
}
