//! Throwaway certificates for development and tests: a local CA and a leaf for `localhost`,
//! `127.0.0.1` and `::1`. Nothing here is meant for production, and nothing it writes is committed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::tls::TlsError;

/// A local CA and one server certificate it signed, all in PEM.
#[derive(Debug, Clone)]
pub struct DevCerts {
    /// The CA certificate: what clients trust.
    pub ca_pem: String,
    /// The server certificate (leaf).
    pub cert_pem: String,
    /// The server's private key (PKCS#8).
    pub key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl DevCerts {
    /// Generates a fresh CA and a leaf valid for `localhost`, `127.0.0.1` and `::1`.
    ///
    /// # Errors
    /// Only if key generation fails.
    pub fn generate() -> Result<Self, TlsError> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "PMS development CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut leaf = CertificateParams::new(vec!["localhost".to_string()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "PMS development server");
        leaf.subject_alt_names.extend([
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ]);
        let leaf_key = KeyPair::generate()?;
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;

        Ok(Self {
            ca_pem: ca_cert.pem(),
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
            cert_der: leaf_cert.der().clone(),
            key_der: leaf_key.serialize_der(),
        })
    }

    /// The leaf certificate, for building a server config in memory.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert_der.clone()
    }

    /// The leaf key, for building a server config in memory.
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// Writes `ca.pem`, `server.pem` and `server-key.pem` into `dir` (created if missing). The key
    /// file is made readable by its owner only.
    ///
    /// # Errors
    /// When the directory or a file cannot be written.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(CA_FILE), &self.ca_pem)?;
        std::fs::write(dir.join(CERT_FILE), &self.cert_pem)?;
        let key_path = dir.join(KEY_FILE);
        std::fs::write(&key_path, &self.key_pem)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(())
    }
}

/// File name of the CA certificate written by [`DevCerts::write_to`].
pub const CA_FILE: &str = "ca.pem";
/// File name of the server certificate written by [`DevCerts::write_to`].
pub const CERT_FILE: &str = "server.pem";
/// File name of the server key written by [`DevCerts::write_to`].
pub const KEY_FILE: &str = "server-key.pem";
