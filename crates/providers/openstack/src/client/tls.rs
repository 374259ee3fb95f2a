//! The rustls configuration of every connection to the cloud: ring, explicitly (never a process
//! default); the system's roots, or `ca-file` instead of them; an optional client certificate;
//! `tls-insecure` as a verifier that accepts anything.

use std::{path::Path, sync::Arc};

use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject},
};

use crate::auth::Tls;

/// The client configuration for `tls`.
pub fn client_config(tls: &Tls) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = if tls.insecure {
        tracing::warn!(
            "tls-insecure is set: the OpenStack endpoints' certificates are not verified; \
             anyone on the path can read the credentials and tokens"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider)))
    } else {
        builder.with_root_certificates(roots(tls.ca_file.as_deref())?)
    };
    match &tls.client_cert {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let certs = read_certs(cert)?;
            let key = std::fs::read(key)
                .map_err(|e| format!("TLS key-file {}: {e}", key.display()))
                .and_then(|pem| {
                    PrivateKeyDer::from_pem_slice(&pem)
                        .map_err(|e| format!("TLS key-file {}: {e}", key.display()))
                })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("TLS cert-file {} with its key: {e}", cert.display()))
        }
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("TLS {}: {e}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("TLS {}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in read_certs(path)? {
                store
                    .add(cert)
                    .map_err(|e| format!("TLS ca-file {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "reading the system's CA certificates");
            }
            let (added, ignored) = store.add_parsable_certificates(found.certs);
            if ignored > 0 {
                tracing::debug!(added, ignored, "system CA certificates rustls cannot use");
            }
        }
    }
    Ok(store)
}

/// `tls-insecure = true`.
#[derive(Debug)]
struct AcceptAnything(Arc<CryptoProvider>);

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
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations() {
        assert!(client_config(&Tls::default()).is_ok());
        assert!(
            client_config(&Tls {
                insecure: true,
                ..Tls::default()
            })
            .is_ok()
        );
        let missing = client_config(&Tls {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Tls::default()
        })
        .unwrap_err();
        assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
        let dir = std::env::temp_dir().join(format!("os-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(&Tls {
            ca_file: Some(empty.clone()),
            ..Tls::default()
        })
        .unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
