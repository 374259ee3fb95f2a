//! The rustls configuration of every connection to the cloud: ring, explicitly (never a process
//! default); the system's roots, or `ca-file` (else `cafilecontents`) instead of them; an optional client certificate;
//! `tls-insecure` as a verifier that accepts anything.
//!
//! A server certificate that does not chain to a trusted CA fails with a message naming the
//! server, TLS and where the trusted CAs came from (`ca-file` or the system's store): rustls
//! alone says `invalid peer certificate: UnknownIssuer`, which names no setting to look at.

use std::{path::Path, sync::Arc};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
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
        let verifier = Trusted::new(roots(tls)?, &roots_source(tls), provider)?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
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
    pem_certs(&pem, &format!("TLS {}", path.display()))
}

/// The certificates of a PEM text; `what` names it in errors.
fn pem_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no PEM certificate in it"));
    }
    Ok(certs)
}

/// Where the trusted roots come from, for messages.
fn roots_source(tls: &Tls) -> String {
    match (&tls.ca_file, &tls.ca_pem) {
        (Some(path), _) => format!("ca-file {}", path.display()),
        (None, Some(_)) => "[Global] cafilecontents".to_owned(),
        (None, None) => "the system's trust store (no ca-file is set)".to_owned(),
    }
}

fn roots(tls: &Tls) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let given = match (&tls.ca_file, &tls.ca_pem) {
        (Some(path), _) => Some((read_certs(path)?, format!("TLS ca-file {}", path.display()))),
        (None, Some(pem)) => Some((
            pem_certs(pem.as_bytes(), "TLS [Global] cafilecontents")?,
            "TLS [Global] cafilecontents".to_owned(),
        )),
        (None, None) => None,
    };
    match given {
        Some((certs, what)) => {
            for cert in certs {
                store.add(cert).map_err(|e| format!("{what}: {e}"))?;
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

/// The verification of `with_root_certificates` (webpki against the roots, no revocation),
/// with `UnknownIssuer` said in words.
#[derive(Debug)]
struct Trusted {
    /// `None` when there is no root at all (webpki refuses to build on none): every certificate
    /// is then untrusted, as it would be with an empty store.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
    /// Where the roots come from, for messages.
    roots: String,
}

impl Trusted {
    fn new(roots: RootCertStore, source: &str, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let webpki = if roots.is_empty() {
            None
        } else {
            Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("TLS: {e}"))?,
            )
        };
        Ok(Self {
            webpki,
            provider,
            roots: source.to_owned(),
        })
    }

    fn untrusted(&self, server_name: &ServerName<'_>) -> rustls::Error {
        let message = format!(
            "TLS: the certificate of {} is not trusted: it does not chain to a CA of {} (UnknownIssuer)",
            server_name.to_str(),
            self.roots,
        );
        rustls::Error::Other(OtherError(Arc::from(
            Box::<dyn std::error::Error + Send + Sync>::from(message),
        )))
    }
}

impl ServerCertVerifier for Trusted {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Err(self.untrusted(server_name));
        };
        webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map_err(|e| match e {
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
                    self.untrusted(server_name)
                }
                e => e,
            })
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
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
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
        // cafilecontents: read inline, and only without a ca-file (OCCM's order).
        let e = client_config(&Tls {
            ca_pem: Some("not a certificate\n".into()),
            ..Tls::default()
        })
        .unwrap_err();
        assert!(
            e.contains("cafilecontents") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = client_config(&Tls {
            ca_file: Some(empty.clone()),
            ca_pem: Some("not read\n".into()),
            ..Tls::default()
        })
        .unwrap_err();
        assert!(e.contains(&empty.display().to_string()), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// With no root at all (a system without CA certificates) every server certificate is
    /// untrusted, said as for any other unknown issuer (tests/tls.rs covers the rest on a real
    /// handshake).
    #[test]
    fn no_roots_means_nothing_is_trusted() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            Trusted::new(RootCertStore::empty(), &roots_source(&Tls::default()), provider).unwrap();
        let e = verifier
            .verify_server_cert(
                &CertificateDer::from(vec![0u8; 4]),
                &[],
                &ServerName::try_from("keystone.example").unwrap(),
                &[],
                UnixTime::now(),
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TLS: the certificate of keystone.example is not trusted")
                && e.contains("no ca-file is set"),
            "{e}"
        );
    }
}
