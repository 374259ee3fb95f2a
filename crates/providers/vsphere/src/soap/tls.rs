//! The rustls configuration of a vCenter connection, as CPI's (`vclib/connection.go`): the
//! system's roots or `ca-file`; `thumbprint` trusted when the chain is not (SHA-256 or SHA-1 of
//! the server's certificate, `AA:BB:…`); `insecure-flag` accepts anything. Ring, explicitly.

use std::{path::Path, sync::Arc};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use sha1::Digest;

use crate::config::VCenter;

/// The client configuration for `vc`.
pub fn client_config(vc: &VCenter) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous();
    let verifier = Verifier {
        webpki: if vc.insecure {
            None
        } else {
            let roots = roots(vc.ca_file.as_deref())?;
            (!roots.is_empty())
                .then(|| {
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("TLS: {e}"))
                })
                .transpose()?
        },
        insecure: vc.insecure,
        thumbprint: vc.thumbprint.as_deref().map(normalise),
        provider,
    };
    if vc.insecure {
        tracing::warn!(
            server = %vc.server,
            "insecure-flag is set: vCenter's certificate is not verified; anyone on the path can read the credentials"
        );
    }
    Ok(builder
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

fn normalise(thumbprint: &str) -> String {
    thumbprint
        .chars()
        .filter(char::is_ascii_hexdigit)
        .collect::<String>()
        .to_ascii_lowercase()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The roots: `ca-file`'s certificates, else the system's. `ca-file` may list several files
/// separated by `:`, as govmomi's `SetRootCAs` (which CPI calls) reads it; a path that exists
/// as written is one file, colons and all.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let Some(ca_file) = ca_file else {
        let found = rustls_native_certs::load_native_certs();
        store.add_parsable_certificates(found.certs);
        return Ok(store);
    };
    let files: Vec<&Path> = match ca_file.to_str() {
        Some(list) if !ca_file.exists() && list.contains(':') => {
            list.split(':').filter(|p| !p.is_empty()).map(Path::new).collect()
        }
        _ => vec![ca_file],
    };
    for path in files {
        let pem = std::fs::read(path).map_err(|e| format!("ca-file {}: {e}", path.display()))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("ca-file {}: invalid certificate: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "ca-file {}: invalid certificate: no PEM certificate in it",
                path.display()
            ));
        }
        for cert in certs {
            store
                .add(cert)
                .map_err(|e| format!("ca-file {}: invalid certificate: {e}", path.display()))?;
        }
    }
    Ok(store)
}

#[derive(Debug)]
struct Verifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    insecure: bool,
    thumbprint: Option<String>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.insecure {
            return Ok(ServerCertVerified::assertion());
        }
        let chain = match &self.webpki {
            Some(webpki) => {
                webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
            None => Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        };
        match (chain, &self.thumbprint) {
            (Ok(ok), _) => Ok(ok),
            (Err(_), Some(want)) => {
                let sha256 = hex(&sha2::Sha256::digest(end_entity.as_ref()));
                let sha1 = hex(&sha1::Sha1::digest(end_entity.as_ref()));
                if *want == sha256 || *want == sha1 {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(rustls::Error::General(format!(
                        "the certificate of {} does not match thumbprint (its SHA-256 is {sha256})",
                        server_name.to_str()
                    )))
                }
            }
            (Err(e), None) => Err(e),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumbprints_compare_by_their_hex_digits() {
        assert_eq!(normalise("AA:bb:0C"), "aabb0c");
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
    }

    /// CPI's connection tests: a bad CA path and an invalid PEM are errors at set-up.
    #[test]
    fn a_bad_ca_file_is_an_error() {
        assert!(
            roots(Some(Path::new("/nonexistent/ca.pem")))
                .unwrap_err()
                .contains("/nonexistent/ca.pem")
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "not a certificate").unwrap();
        assert!(
            roots(Some(file.path()))
                .unwrap_err()
                .contains("invalid certificate")
        );
    }

    /// govmomi's `SetRootCAs`: `ca-file` lists files separated by `:`; each is read and named
    /// in its error.
    #[test]
    fn a_ca_file_list_reads_every_file() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "not a certificate").unwrap();
        let list = format!("{}:/nonexistent/b.pem", file.path().display());
        let err = roots(Some(Path::new(&list))).unwrap_err();
        assert!(
            err.contains("invalid certificate") && err.contains(&file.path().display().to_string()),
            "{err}"
        );
        let err = roots(Some(Path::new("/nonexistent/a.pem:/nonexistent/b.pem"))).unwrap_err();
        assert!(err.starts_with("ca-file /nonexistent/a.pem:"), "{err}");
    }
}
