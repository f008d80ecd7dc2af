//! The hook's own certificates when no files are given (pure: no I/O).
//!
//! A small CA (ECDSA P-256, ten years) issues each replica's serving
//! certificate (one year, renewed while the replica runs). The CA is kept as
//! PEM so it can be stored in a Secret and shared by every replica; its
//! certificate alone is what callers trust.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// Common name of the CA. A loaded CA key is re-issued under this name, so
/// a stored CA certificate must carry it (checked by [`issue`]).
const CA_NAME: &str = "deletion-cost hook CA";
/// How long a new CA is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 86_400);
/// How long a serving certificate is valid.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(365 * 86_400);
/// Validity starts this much in the past (clocks of callers lag).
const BACKDATE: Duration = Duration::from_secs(3600);

/// A CA certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CaPem {
    /// The CA certificate (what callers trust).
    pub cert: String,
    /// The CA's private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for CaPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaPem")
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A serving certificate chain and its key, ready for rustls.
#[derive(Debug)]
pub struct Serving {
    /// The leaf certificate (the CA is what callers already have).
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
    /// The leaf as PEM (tests, logs).
    pub pem: String,
}

/// The names a caller may use for the hook: the Service's DNS names in
/// `namespace`, and loopback.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_string(),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ]
}

fn ca_params(now: SystemTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now.checked_sub(BACKDATE).unwrap_or(now).into();
    params.not_after = (now + CA_VALIDITY).into();
    params
}

/// Makes a new CA.
pub fn new_ca(now: SystemTime) -> Result<CaPem, String> {
    let key = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
    let cert = ca_params(now)
        .self_signed(&key)
        .map_err(|e| format!("signing the CA certificate: {e}"))?;
    Ok(CaPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Issues a serving certificate for `names` (the first is the subject) from
/// `ca`, valid from `now` for `validity`, and checks that it verifies against
/// the CA certificate (a stored CA whose key and certificate do not belong
/// together is refused here, not by every caller).
pub fn issue(
    ca: &CaPem,
    names: &[String],
    now: SystemTime,
    validity: Duration,
) -> Result<Serving, String> {
    let first = names
        .first()
        .ok_or_else(|| "a serving certificate needs at least one name".to_string())?;
    let ca_key = KeyPair::from_pem(&ca.key).map_err(|e| format!("the CA key: {e}"))?;
    let issuer = Issuer::new(ca_params(now), ca_key);
    let mut params = CertificateParams::new(names.to_vec())
        .map_err(|e| format!("serving certificate names {names:?}: {e}"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, first.as_str());
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now.checked_sub(BACKDATE).unwrap_or(now).into();
    params.not_after = (now + validity).into();
    let key = KeyPair::generate().map_err(|e| format!("generating the serving key: {e}"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing the serving certificate: {e}"))?;
    let serving = Serving {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| format!("the serving key: {e}"))?,
        pem: cert.pem(),
    };
    verify(&ca.cert, &serving.chain, first, now)?;
    Ok(serving)
}

/// The names a client certificate (DER) carries: its subject's common
/// names, then its DNS subject alternative names. What the scale-in webhook
/// compares with `--scale-webhook-client-name` (rustls has checked the
/// chain already).
pub fn client_names(der: &[u8]) -> Result<Vec<String>, String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push((*dns).to_string());
            }
        }
    }
    Ok(names)
}

/// Checks `chain` against the CA certificate(s) in `ca_pem` for `name` at `now`,
/// as a caller would.
pub fn verify(
    ca_pem: &str,
    chain: &[CertificateDer<'static>],
    name: &str,
    now: SystemTime,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("the CA certificate: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the CA certificate: no certificate in the PEM".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("the CA certificate: {e}"))?;
    let (leaf, rest) = chain
        .split_first()
        .ok_or_else(|| "empty certificate chain".to_string())?;
    let server_name =
        ServerName::try_from(name.to_string()).map_err(|e| format!("name {name:?}: {e}"))?;
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| format!("clock before 1970: {e}"))?;
    verifier
        .verify_server_cert(
            leaf,
            rest,
            &server_name,
            &[],
            UnixTime::since_unix_epoch(secs),
        )
        .map(|_| ())
        .map_err(|e| format!("the serving certificate does not verify against the CA: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        service_names("deletion-cost", "ops")
    }

    #[test]
    fn a_client_certificate_names_its_subject_and_dns_names() {
        let now = SystemTime::now();
        let ca = new_ca(now).unwrap();
        let s = issue(
            &ca,
            &[
                "kube-apiserver".to_string(),
                "apiserver.example".to_string(),
            ],
            now,
            SERVING_VALIDITY,
        )
        .unwrap();
        assert_eq!(
            client_names(&s.chain[0]).unwrap(),
            ["kube-apiserver", "kube-apiserver", "apiserver.example"]
        );
        assert!(client_names(b"not a certificate")
            .unwrap_err()
            .contains("does not parse"));
    }

    #[test]
    fn names_cover_the_service_and_loopback() {
        let n = names();
        for want in [
            "deletion-cost.ops.svc",
            "deletion-cost.ops.svc.cluster.local",
            "deletion-cost",
            "localhost",
            "127.0.0.1",
        ] {
            assert!(n.iter().any(|x| x == want), "{want} missing: {n:?}");
        }
        assert_eq!(n[0], "deletion-cost.ops.svc");
    }

    #[test]
    fn a_serving_certificate_verifies_against_its_ca_for_every_name() {
        let now = SystemTime::now();
        let ca = new_ca(now).unwrap();
        assert!(ca.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(ca.key.contains("PRIVATE KEY"));
        let s = issue(&ca, &names(), now, SERVING_VALIDITY).unwrap();
        for name in names() {
            verify(&ca.cert, &s.chain, &name, now).unwrap();
        }
        // the CA reloaded from its PEM issues certificates that verify too
        let again = issue(&ca.clone(), &names(), now, SERVING_VALIDITY).unwrap();
        verify(&ca.cert, &again.chain, "localhost", now).unwrap();
        assert!(!format!("{ca:?}").contains("PRIVATE"), "key in Debug");
    }

    #[test]
    fn another_ca_other_names_and_expiry_are_refused() {
        let now = SystemTime::now();
        let (ca, other) = (new_ca(now).unwrap(), new_ca(now).unwrap());
        let s = issue(&ca, &names(), now, SERVING_VALIDITY).unwrap();
        // every such CA has the same name: found by name, refused by signature
        let e = verify(&other.cert, &s.chain, "localhost", now).unwrap_err();
        assert!(e.contains("BadSignature"), "{e}");
        let e = verify(&ca.cert, &s.chain, "example.com", now).unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        let later = now + SERVING_VALIDITY + Duration::from_secs(60);
        let e = verify(&ca.cert, &s.chain, "localhost", later).unwrap_err();
        assert!(e.to_lowercase().contains("expired"), "{e}");
    }

    #[test]
    fn a_stored_ca_whose_key_and_certificate_differ_is_refused() {
        let now = SystemTime::now();
        let (a, b) = (new_ca(now).unwrap(), new_ca(now).unwrap());
        let mixed = CaPem {
            cert: a.cert,
            key: b.key,
        };
        let e = issue(&mixed, &names(), now, SERVING_VALIDITY).unwrap_err();
        assert!(e.contains("does not verify"), "{e}");
        let garbage = CaPem {
            cert: "x".into(),
            key: "y".into(),
        };
        assert!(issue(&garbage, &names(), now, SERVING_VALIDITY).is_err());
    }
}
