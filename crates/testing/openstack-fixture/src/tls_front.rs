//! HTTPS in front of the test cloud, whose services speak plain HTTP: a private CA
//! ([`Ca`], made with rcgen), TLS-terminating fronts ([`TlsFront`], rustls with ring) that
//! forward the decrypted bytes to one service each, and a catalog region whose endpoints and
//! auth URL are those fronts ([`TestCloud::add_tls_region`]). A client configured with that
//! region and auth URL then speaks TLS to Keystone, Nova and Neutron, as it does to a cloud
//! behind a TLS-terminating load balancer, while everything else keeps using `RegionOne`.
//!
//! A front may require a client certificate ([`FrontTls::client_ca`]); it records why each
//! refused handshake failed ([`TlsFront::failed_handshakes`]), so a test can tell "refused at the TLS
//! handshake" from any other failure.

use std::{
    collections::BTreeMap,
    io,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use provider_openstack::client::Client;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::{
    RootCertStore, ServerConfig, SupportedProtocolVersion,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};
use tokio_rustls::TlsAcceptor;

use crate::{Region, TestCloud};

/// How long a front keeps reading from a client whose handshake it refused, so that its alert
/// reaches the client before the socket closes (closing with unread data sends a reset, which
/// can overtake the alert).
const DRAIN_AFTER_REFUSAL: Duration = Duration::from_secs(2);

/// The catalog types [`TestCloud::add_tls_region`] fronts: Keystone, Nova and Neutron, what the
/// provider calls today (each more costs Keystone four calls per region).
pub const TLS_SERVICES: [&str; 3] = ["identity", "compute", "network"];

/// A private certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The certificate.
    pub cert_pem: String,
    /// Its PKCS#8 private key.
    pub key_pem: String,
}

impl Ca {
    /// A self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Self {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
                .expect("self-signed CA"),
        }
    }

    /// The CA's certificate, PEM (what a `ca-file` holds).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (IP addresses become IP SANs, the rest DNS names).
    pub fn server_cert(&self, names: &[&str]) -> Identity {
        self.issue(names, "openstack front", ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate with common name `name`.
    pub fn client_cert(&self, name: &str) -> Identity {
        self.issue(&[], name, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, names: &[&str], common_name: &str, usage: ExtendedKeyUsagePurpose) -> Identity {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("certificate params");
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).expect("signing");
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

impl Identity {
    /// Writes `NAME.crt` and `NAME.key` into `dir`; returns their paths (cert, key).
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap_or_else(|e| panic!("{}: {e}", cert.display()));
        std::fs::write(&key, &self.key_pem).unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        (cert, key)
    }
}

/// What a front presents and asks for.
#[derive(Debug, Clone)]
pub struct FrontTls {
    /// The server certificate and key.
    pub identity: Identity,
    /// When set, a client certificate issued by this CA (PEM) is required.
    pub client_ca: Option<String>,
    /// Only TLS 1.2 (else 1.2 and 1.3, as rustls' defaults).
    pub tls12_only: bool,
}

impl FrontTls {
    /// Serves `identity`, asks for no client certificate.
    pub fn new(identity: Identity) -> Self {
        Self {
            identity,
            client_ca: None,
            tls12_only: false,
        }
    }

    /// Requires a client certificate issued by `ca`.
    pub fn require_client_cert(mut self, ca: &Ca) -> Self {
        self.client_ca = Some(ca.pem());
        self
    }

    /// Speaks TLS 1.2 only (a client certificate is then checked inside the handshake, where
    /// TLS 1.3 checks it after the client finished).
    pub fn tls12_only(mut self) -> Self {
        self.tls12_only = true;
        self
    }

    /// The rustls server configuration (ring, explicitly).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&'static SupportedProtocolVersion] = if self.tls12_only {
            &[&rustls::version::TLS12]
        } else {
            rustls::DEFAULT_VERSIONS
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .expect("protocol versions");
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                    roots.add(cert.expect("client CA PEM")).expect("client CA");
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let certs = CertificateDer::pem_slice_iter(self.identity.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("server certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(self.identity.key_pem.as_bytes()).expect("server key PEM");
        Arc::new(
            builder
                .with_single_cert(certs, key)
                .expect("server certificate and key"),
        )
    }
}

#[derive(Debug)]
struct Stats {
    handshakes: AtomicU64,
    failed: watch::Sender<Vec<String>>,
}

/// A TLS-terminating TCP front on 127.0.0.1 for one plain-HTTP service: every accepted
/// connection is decrypted and its bytes forwarded to `upstream`, both ways. Stops when
/// dropped (it belongs to the tokio runtime it was started on).
#[derive(Debug)]
pub struct TlsFront {
    addr: SocketAddr,
    upstream: SocketAddr,
    stats: Arc<Stats>,
    task: JoinHandle<()>,
}

impl TlsFront {
    /// Listens on an ephemeral port of 127.0.0.1 (bound when this returns).
    pub async fn start(upstream: SocketAddr, tls: &FrontTls) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(tls.server_config());
        let stats = Arc::new(Stats {
            handshakes: AtomicU64::new(0),
            failed: watch::Sender::new(Vec::new()),
        });
        let task = tokio::spawn(serve(listener, acceptor, upstream, stats.clone()));
        Ok(Self {
            addr,
            upstream,
            stats,
            task,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The service it forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Handshakes completed so far.
    pub fn handshakes(&self) -> u64 {
        self.stats.handshakes.load(Ordering::SeqCst)
    }

    /// Why each refused (or failed) handshake failed, as rustls says it, in order.
    pub fn failed_handshakes(&self) -> Vec<String> {
        self.stats.failed.borrow().clone()
    }

    /// [`TlsFront::failed_handshakes`] once there are at least `count`: the peer that sent or
    /// received the alert may see its error before the front has recorded its side. Panics
    /// after `deadline`.
    pub async fn wait_failed_handshakes(&self, count: usize, deadline: Duration) -> Vec<String> {
        let mut failed = self.stats.failed.subscribe();
        match tokio::time::timeout(deadline, failed.wait_for(|f| f.len() >= count)).await {
            Ok(Ok(f)) => f.clone(),
            _ => panic!(
                "the front of {} recorded {:?} after {deadline:?}, expected {count} failed handshakes",
                self.upstream,
                self.failed_handshakes()
            ),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, acceptor: TlsAcceptor, upstream: SocketAddr, stats: Arc<Stats>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, stats) = (acceptor.clone(), stats.clone());
        tokio::spawn(async move {
            let mut tls = match acceptor.accept(stream).into_fallible().await {
                Ok(tls) => tls,
                Err((e, mut tcp)) => {
                    stats.failed.send_modify(|f| f.push(e.to_string()));
                    // The alert is written; close our side and read what the client still
                    // sends until it closes, so that no reset overtakes the alert.
                    let _ = tcp.shutdown().await;
                    let mut sink = [0u8; 4096];
                    let _ = tokio::time::timeout(DRAIN_AFTER_REFUSAL, async {
                        while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
                    })
                    .await;
                    return;
                }
            };
            stats.handshakes.fetch_add(1, Ordering::SeqCst);
            let Ok(mut service) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = service.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut service).await;
        });
    }
}

/// A region of the test cloud whose endpoints are [`TlsFront`]s, and the auth URL through the
/// Keystone front.
#[derive(Debug)]
pub struct TlsRegion {
    /// The catalog region.
    pub region: Region,
    /// `https://127.0.0.1:<port>/v3`: Keystone through its front.
    pub auth_url: String,
    /// The fronts, by catalog type (see [`TLS_SERVICES`]).
    pub fronts: BTreeMap<String, TlsFront>,
}

impl TlsRegion {
    /// The region's id (what `region =` names).
    pub fn id(&self) -> &str {
        &self.region.id
    }

    /// The front of a catalog type.
    pub fn front(&self, service_type: &str) -> &TlsFront {
        self.fronts
            .get(service_type)
            .unwrap_or_else(|| panic!("no TLS front for {service_type}"))
    }

    /// Removes the region from the catalog (the fronts stop when this is dropped).
    pub async fn remove(&self, admin: &Client) {
        self.region.clone().remove(admin).await;
    }
}

/// `http://host:port/path` → (`host:port` as an address, `/path`).
fn split_http_url(url: &str) -> (SocketAddr, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not a plain-HTTP endpoint: {url}"));
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let addr = authority
        .parse()
        .unwrap_or_else(|e| panic!("endpoint {url}: {authority:?} is not an address: {e}"));
    let path = if path.is_empty() {
        String::new()
    } else {
        format!("/{}", path.trim_end_matches('/'))
    };
    (addr, path)
}

impl TestCloud {
    /// Starts one [`TlsFront`] per service of [`TLS_SERVICES`], all with `tls`, and registers
    /// region `id` (through an admin client) with their `https://127.0.0.1:<port>` URLs, each
    /// with its service's path (`/v3`, `/v2.1`). The fronts live on the calling tokio runtime.
    pub async fn add_tls_region(&self, admin: &Client, id: &str, tls: &FrontTls) -> TlsRegion {
        let mut fronts = BTreeMap::new();
        let mut endpoints = BTreeMap::new();
        for service_type in TLS_SERVICES {
            let Some(url) = self.info.endpoints.get(service_type) else {
                continue;
            };
            let (upstream, path) = split_http_url(url);
            let front = TlsFront::start(upstream, tls)
                .await
                .unwrap_or_else(|e| panic!("TLS front for {service_type}: {e}"));
            endpoints.insert(service_type.to_owned(), format!("https://{}{path}", front.addr()));
            fronts.insert(service_type.to_owned(), front);
        }
        let auth_url = endpoints
            .get("identity")
            .cloned()
            .expect("the test cloud has Keystone");
        let region = self.add_region(admin, id, &endpoints).await;
        TlsRegion {
            region,
            auth_url,
            fronts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls() {
        assert_eq!(
            split_http_url("http://127.0.0.1:15000/v3"),
            ("127.0.0.1:15000".parse().unwrap(), "/v3".to_owned())
        );
        assert_eq!(
            split_http_url("http://127.0.0.1:15004"),
            ("127.0.0.1:15004".parse().unwrap(), String::new())
        );
        assert_eq!(
            split_http_url("http://127.0.0.1:15003/v2.1/"),
            ("127.0.0.1:15003".parse().unwrap(), "/v2.1".to_owned())
        );
    }
}
