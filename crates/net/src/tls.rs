//! rustls configuration: PEM loading, server configs with ALPN, client configs with system roots,
//! a private CA, or (only on explicit request) no verification. The crypto provider is chosen here
//! and nowhere else (`ring`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// ALPN protocol id for HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN protocol id for HTTP/1.1.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or held nothing usable.
    #[error("{path}: {problem}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        problem: String,
    },
    /// rustls refused the material (for example a key that does not match the certificate).
    #[error("TLS configuration rejected: {0}")]
    Rustls(rustls::Error),
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(rcgen::Error),
}

// The causes above are part of the message and not also a `source()`, so a printed error chain
// names each of them once; `From` by hand, because `#[from]` would make them sources.
impl From<rustls::Error> for TlsError {
    fn from(e: rustls::Error) -> Self {
        Self::Rustls(e)
    }
}

impl From<rcgen::Error> for TlsError {
    fn from(e: rcgen::Error) -> Self {
        Self::Generate(e)
    }
}

/// The one crypto provider every PMS TLS config uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate from a PEM file (leaf first, then intermediates).
///
/// # Errors
/// When the file cannot be read or contains no certificate.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_err = |problem: String| TlsError::Pem {
        path: path.to_owned(),
        problem,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(format!("bad certificate PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_err("no CERTIFICATE block found".into()));
    }
    Ok(certs)
}

/// Reads the first private key (PKCS#8, PKCS#1 or SEC1) from a PEM file.
///
/// # Errors
/// When the file cannot be read or holds no private key.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        problem: format!("no usable private key: {e}"),
    })
}

/// Builds a server config from a PEM certificate chain and key, offering `alpn` in order.
///
/// # Errors
/// When a file is unreadable or the key does not fit the certificate.
pub fn server_config(
    cert: &Path,
    key: &Path,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig, TlsError> {
    let certs = load_certs(cert)?;
    let key = load_key(key)?;
    server_config_from_der(certs, key, alpn)
}

/// Like [`server_config`], from material already in memory.
///
/// # Errors
/// When rustls rejects the certificate or key.
pub fn server_config_from_der(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig, TlsError> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// Which servers a client config trusts.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// The operating system's roots plus, optionally, a private CA.
    #[default]
    System,
    /// The operating system's roots plus this CA file (PEM).
    SystemAnd(PathBuf),
    /// Only this CA file (used by tests and dev set-ups).
    Only(PathBuf),
    /// Accept any certificate. Only ever on explicit request; the caller logs it.
    InsecureSkipVerify,
    /// Trust no server at all: for clients that never speak TLS (cleartext upstreams), so they
    /// skip loading the system root store, which costs tens of milliseconds at start-up.
    Nothing,
}

/// Builds a client config with the given trust and ALPN list.
///
/// # Errors
/// When the CA file is unreadable or holds no certificate.
pub fn client_config(trust: &Trust, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let mut cfg = match trust {
        Trust::InsecureSkipVerify => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(insecure::AcceptAnything(provider())))
            .with_no_client_auth(),
        Trust::System | Trust::SystemAnd(_) | Trust::Only(_) | Trust::Nothing => {
            let mut roots = rustls::RootCertStore::empty();
            if matches!(trust, Trust::System | Trust::SystemAnd(_)) {
                let native = rustls_native_certs::load_native_certs();
                for err in &native.errors {
                    tracing::debug!(error = %err, "skipping unreadable system root");
                }
                roots.add_parsable_certificates(native.certs);
            }
            if let Trust::SystemAnd(ca) | Trust::Only(ca) = trust {
                for cert in load_certs(ca)? {
                    roots.add(cert).map_err(|e| TlsError::Pem {
                        path: ca.clone(),
                        problem: format!("not a usable CA certificate: {e}"),
                    })?;
                }
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// The verifier behind [`Trust::InsecureSkipVerify`]: checks signatures are well formed, trusts any
/// chain. Kept private so the only way in is the explicit enum variant.
mod insecure {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    pub(crate) struct AcceptAnything(pub(crate) Arc<CryptoProvider>);

    impl ServerCertVerifier for AcceptAnything {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_variants_build_and_set_alpn() {
        let dev = crate::dev::DevCerts::generate().unwrap();
        let dir = std::env::temp_dir().join(format!("pms-net-tls-{}", std::process::id()));
        dev.write_to(&dir).unwrap();
        let ca = dir.join(crate::dev::CA_FILE);
        for trust in [
            Trust::Nothing,
            Trust::Only(ca.clone()),
            Trust::SystemAnd(ca.clone()),
            Trust::InsecureSkipVerify,
        ] {
            let cfg = client_config(&trust, &[ALPN_H2]).unwrap();
            assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec()], "{trust:?}");
        }
        let err = client_config(&Trust::Only(dir.join("missing.pem")), &[]).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let server = server_config(
            &dir.join(crate::dev::CERT_FILE),
            &dir.join(crate::dev::KEY_FILE),
            &[ALPN_H2, ALPN_HTTP11],
        )
        .unwrap();
        assert_eq!(server.alpn_protocols.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
