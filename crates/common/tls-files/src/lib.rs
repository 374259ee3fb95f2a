//! rustls configurations built from PEM files and rebuilt when the files change, so that a
//! certificate rotated on disk (a renewed Kubernetes Secret, cert-manager) is used by the next
//! connection without restarting either side. Shared by the gateway (server, mutual TLS) and
//! the controllers' gateway client; no Kubernetes in it.
//!
//! Files are checked at each new connection (a `stat` each); a rebuild that fails (a file half
//! written during a rotation) keeps the last good configuration and says why.
//!
//! Why here: tonic's and tokio-rustls' TLS settings are built once from bytes; neither re-reads
//! files, and a restart per rotated Secret is what this avoids.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::SystemTime,
};

use rustls::{
    ClientConfig, RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};

/// A TLS file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsFilesError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong (never the file's content).
        reason: String,
    },
    /// The pieces do not make a configuration (a key that does not match its certificate...).
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(path: &Path, reason: impl std::fmt::Display) -> TlsFilesError {
    TlsFilesError::File {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// Every certificate of a PEM file, in order.
///
/// # Errors
/// The file cannot be read or holds no certificate.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFilesError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The private key of a PEM file.
///
/// # Errors
/// The file cannot be read or holds no private key (its content is never in the message).
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsFilesError> {
    PrivateKeyDer::from_pem_file(path).map_err(|_| file_error(path, "no usable PEM private key in the file"))
}

fn roots(path: &Path) -> Result<RootCertStore, TlsFilesError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| file_error(path, e))?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The files of a server that requires client certificates (mutual TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    /// PEM certificate chain served to clients.
    pub cert: PathBuf,
    /// Its PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle client certificates must chain to.
    pub client_ca: PathBuf,
}

impl ServerFiles {
    fn paths(&self) -> Vec<&Path> {
        vec![&self.cert, &self.key, &self.client_ca]
    }

    /// A server configuration requiring a client certificate signed by the client CA; ALPN h2.
    ///
    /// # Errors
    /// A file is unusable, or the key does not match the certificate.
    pub fn config(&self) -> Result<ServerConfig, TlsFilesError> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots(&self.client_ca)?), provider())
                .build()
                .map_err(|e| TlsFilesError::Config(format!("client CA {}: {e}", self.client_ca.display())))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsFilesError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certificates(&self.cert)?, private_key(&self.key)?)
            .map_err(|e| TlsFilesError::Config(format!("{}: {e}", self.cert.display())))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// The files of a client: the CA that signed the server's certificate, and optionally the
/// client's own certificate and key (mutual TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFiles {
    /// PEM CA bundle the server's certificate must chain to.
    pub ca: PathBuf,
    /// PEM client certificate and its key.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientFiles {
    fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.ca.as_path()];
        if let Some((cert, key)) = &self.identity {
            paths.extend([cert.as_path(), key.as_path()]);
        }
        paths
    }

    /// A client configuration trusting the CA, presenting the certificate if any; ALPN h2.
    ///
    /// # Errors
    /// A file is unusable, or the key does not match the certificate.
    pub fn config(&self) -> Result<ClientConfig, TlsFilesError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsFilesError::Config(e.to_string()))?
            .with_root_certificates(roots(&self.ca)?);
        let mut config = match &self.identity {
            Some((cert, key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(|e| TlsFilesError::Config(format!("{}: {e}", cert.display())))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// What identifies a version of the files: each one's modification time, length (and inode:
/// a Kubernetes Secret volume swaps a symlink to new files).
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

fn stamp(paths: &[&Path]) -> Stamp {
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::metadata(p).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = 0;
            Some((meta.modified().ok()?, meta.len(), inode))
        })
        .collect()
}

/// A configuration of type `C` built from files `F`, rebuilt when they change.
pub struct Reloading<F, C> {
    files: F,
    build: fn(&F) -> Result<C, TlsFilesError>,
    paths: fn(&F) -> Vec<&Path>,
    current: Mutex<(Stamp, Arc<C>)>,
}

impl<F, C> Reloading<F, C> {
    fn with(
        files: F,
        build: fn(&F) -> Result<C, TlsFilesError>,
        paths: fn(&F) -> Vec<&Path>,
    ) -> Result<Self, TlsFilesError> {
        let stamp = stamp(&paths(&files));
        let config = Arc::new(build(&files)?);
        Ok(Self {
            files,
            build,
            paths,
            current: Mutex::new((stamp, config)),
        })
    }

    /// The configuration for a new connection: rebuilt first if a file changed; the last good
    /// one when the rebuild fails (logged).
    pub fn current(&self) -> Arc<C> {
        let now = stamp(&(self.paths)(&self.files));
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.0 != now {
            match (self.build)(&self.files) {
                Ok(config) => {
                    tracing::info!("TLS files changed; new connections use them");
                    *current = (now, Arc::new(config));
                }
                Err(err) => {
                    // Keep the stamp old so the next connection tries again.
                    tracing::warn!(error = %err, "TLS files changed but cannot be used yet; keeping the previous ones");
                }
            }
        }
        current.1.clone()
    }

    /// The files.
    pub fn files(&self) -> &F {
        &self.files
    }
}

/// A server configuration that follows its files.
pub type ReloadingServer = Reloading<ServerFiles, ServerConfig>;
/// A client configuration that follows its files.
pub type ReloadingClient = Reloading<ClientFiles, ClientConfig>;

impl ReloadingServer {
    /// Built from `files` now (an error if they are unusable at start-up).
    ///
    /// # Errors
    /// See [`ServerFiles::config`].
    pub fn new(files: ServerFiles) -> Result<Self, TlsFilesError> {
        Self::with(files, ServerFiles::config, ServerFiles::paths)
    }
}

impl ReloadingClient {
    /// Built from `files` now (an error if they are unusable at start-up).
    ///
    /// # Errors
    /// See [`ClientFiles::config`].
    pub fn new(files: ClientFiles) -> Result<Self, TlsFilesError> {
        Self::with(files, ClientFiles::config, ClientFiles::paths)
    }
}

/// Who a client certificate names: its first URI subject alternative name (a SPIFFE ID such
/// as `spiffe://cluster.local/ns/kube-system/sa/service-lb-controller`), else its subject's
/// common name. `None` when it names neither or does not parse.
pub fn identity_of(cert: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let uri = cert.subject_alternative_name().ok().flatten().and_then(|san| {
        san.value.general_names.iter().find_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) => Some((*uri).to_owned()),
            _ => None,
        })
    });
    uri.or_else(|| {
        cert.subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned)
    })
    .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    use super::*;

    fn self_signed(params: CertificateParams) -> Vec<u8> {
        params
            .self_signed(&KeyPair::generate().unwrap())
            .unwrap()
            .der()
            .to_vec()
    }

    #[test]
    fn the_identity_is_the_uri_san_else_the_common_name() {
        let spiffe = "spiffe://cluster.local/ns/kube-system/sa/service-lb-controller";
        let mut both = CertificateParams::new(vec!["gw.example".to_owned()]).unwrap();
        both.subject_alt_names
            .push(SanType::URI(spiffe.try_into().unwrap()));
        both.distinguished_name = DistinguishedName::new();
        both.distinguished_name.push(DnType::CommonName, "someone-else");
        assert_eq!(identity_of(&self_signed(both)).as_deref(), Some(spiffe));

        let mut cn_only = CertificateParams::new(Vec::<String>::new()).unwrap();
        cn_only.distinguished_name = DistinguishedName::new();
        cn_only
            .distinguished_name
            .push(DnType::CommonName, "cloud-node-controller");
        assert_eq!(
            identity_of(&self_signed(cn_only)).as_deref(),
            Some("cloud-node-controller")
        );

        let mut nothing = CertificateParams::new(Vec::<String>::new()).unwrap();
        nothing.distinguished_name = DistinguishedName::new();
        assert_eq!(identity_of(&self_signed(nothing)), None);
        assert_eq!(identity_of(b"not a certificate"), None);
    }

    #[test]
    fn a_rewritten_file_is_picked_up_and_a_broken_one_keeps_the_last_good_config() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let write_ca = |cn: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, cn);
            let cert = params.self_signed(&KeyPair::generate().unwrap()).unwrap();
            std::fs::write(&ca, cert.pem()).unwrap();
        };
        write_ca("first");
        let client = ReloadingClient::new(ClientFiles {
            ca: ca.clone(),
            identity: None,
        })
        .unwrap();
        let first = client.current();
        assert!(
            Arc::ptr_eq(&first, &client.current()),
            "unchanged files: the same config"
        );
        // A new file (another inode, another length): the next connection gets a new config.
        std::fs::remove_file(&ca).unwrap();
        write_ca("second, with a longer name");
        let second = client.current();
        assert!(!Arc::ptr_eq(&first, &second));
        // Half written: the last good one stays.
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\ntrunc").unwrap();
        assert!(Arc::ptr_eq(&second, &client.current()));
        assert!(ReloadingClient::new(ClientFiles { ca, identity: None }).is_err());
    }
}
