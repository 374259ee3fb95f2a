//! [`VcsimProxy`]: an HTTPS proxy in front of vcsim that injects what vcsim never does on its
//! own, chosen per request from a seed and counted by kind ([`VcsimProxy::counts`]):
//! - a 503 (a load balancer in front of vCenter, or vpxd restarting);
//! - a NotAuthenticated SOAP fault on a call made in a session (vCenter forgot it: a restart,
//!   an idle timeout); the session itself stays valid at vcsim, as after a vpxd failover;
//! - a dropped connection: closed without an answer, before the call reached vcsim or after
//!   vcsim carried it out (its answer lost);
//! - a slow answer, held back a few seconds.
//!
//! It terminates TLS with a certificate of its own (a private CA made with rcgen, written to
//! [`VcsimProxy::ca_file`] for the gateway's `ca-file`) and calls vcsim over TLS trusting
//! vcsim's `ca.pem`: faults at the SOAP level need the request in the clear.
//!
//! # Why hand-written
//! No crate injects faults into SOAP traffic; hyper and rustls do the HTTP and TLS, and the rest
//! is choosing a fault per request.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client as HttpClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::{
    ClientConfig, RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_rustls::TlsAcceptor;

use crate::Vcsim;

/// A fault kind, as [`VcsimProxy::counts`] counts it.
pub const UNAVAILABLE: &str = "vCenter 503";
/// See [`UNAVAILABLE`].
pub const NOT_AUTHENTICATED: &str = "NotAuthenticated fault";
/// See [`UNAVAILABLE`].
pub const DROPPED_BEFORE: &str = "connection dropped, call not made";
/// See [`UNAVAILABLE`].
pub const DROPPED_AFTER: &str = "connection dropped, answer lost";
/// See [`UNAVAILABLE`].
pub const SLOW: &str = "slow answer";

/// What the proxy injects, each in percent of the SOAP calls; all zero: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Answered 503 without reaching vcsim.
    pub unavailable: u64,
    /// Answered NotAuthenticated without reaching vcsim (calls made in a session only: vCenter
    /// answers Login and RetrieveServiceContent without one).
    pub not_authenticated: u64,
    /// The connection closed without an answer: half before the call reached vcsim, half after.
    pub dropped: u64,
    /// Answered after [`Faults::slow_for`] more.
    pub slow: u64,
    /// How long a slow answer is held: between these two.
    pub slow_for: (Duration, Duration),
}

/// What a request meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Unavailable,
    NotAuthenticated,
    Dropped { landed: bool },
    Slow(Duration),
}

impl Fault {
    fn kind(self) -> &'static str {
        match self {
            Self::Unavailable => UNAVAILABLE,
            Self::NotAuthenticated => NOT_AUTHENTICATED,
            Self::Dropped { landed: false } => DROPPED_BEFORE,
            Self::Dropped { landed: true } => DROPPED_AFTER,
            Self::Slow(_) => SLOW,
        }
    }
}

struct Chooser {
    faults: Faults,
    rng: u64,
    counts: BTreeMap<&'static str, u64>,
}

impl Chooser {
    /// xorshift64*, its high half.
    fn roll(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }

    /// The fault of a SOAP call (`in_session`: it carries a session cookie), counted.
    fn choose(&mut self, in_session: bool) -> Option<Fault> {
        let (roll, extra) = (self.roll(), self.roll());
        let fault = decide(&self.faults, roll, extra, in_session)?;
        *self.counts.entry(fault.kind()).or_default() += 1;
        Some(fault)
    }
}

/// The fault `roll` picks (`roll % 100` against the percentages, in the order of [`Faults`]'
/// fields); `extra` picks the side of a drop and the length of a slow answer.
fn decide(faults: &Faults, roll: u64, extra: u64, in_session: bool) -> Option<Fault> {
    let mut at = roll % 100;
    if at < faults.unavailable {
        return Some(Fault::Unavailable);
    }
    at -= faults.unavailable;
    if at < faults.not_authenticated {
        return in_session.then_some(Fault::NotAuthenticated);
    }
    at -= faults.not_authenticated;
    if at < faults.dropped {
        return Some(Fault::Dropped {
            landed: extra % 2 == 1,
        });
    }
    at -= faults.dropped;
    if at < faults.slow {
        let (lo, hi) = faults.slow_for;
        let span = hi.saturating_sub(lo).as_millis() as u64;
        return Some(Fault::Slow(lo + Duration::from_millis(extra % (span + 1))));
    }
    None
}

type Upstream = HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

struct State {
    chooser: Mutex<Chooser>,
    upstream: Upstream,
    /// `https://127.0.0.1:PORT` of vcsim.
    origin: String,
    calls: AtomicU64,
}

/// The proxy; stops when dropped.
pub struct VcsimProxy {
    state: Arc<State>,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// Its CA certificate (PEM), for the gateway's `ca-file`.
    pub ca_file: PathBuf,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for VcsimProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VcsimProxy")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// The error a dropped connection's service answers with: hyper then closes the connection
/// without writing anything.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the test proxy")
    }
}

impl std::error::Error for Dropped {}

impl VcsimProxy {
    /// Starts the proxy in front of `vcsim`, writing its CA certificate into `dir`.
    pub async fn start(vcsim: &Vcsim, dir: &Path) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "vcsim proxy CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("self-signed CA");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
        params.distinguished_name.push(DnType::CommonName, "vcsim proxy");
        let cert = params.signed_by(&key, &ca).expect("server certificate");
        let ca_file = dir.join("vcsim-proxy-ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap_or_else(|e| panic!("{}: {e}", ca_file.display()));
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("key PEM"),
            )
            .expect("server certificate and key");

        let mut roots = RootCertStore::empty();
        let pem = std::fs::read(vcsim.ca_file()).expect("vcsim's ca.pem");
        for c in CertificateDer::pem_slice_iter(&pem) {
            roots.add(c.expect("vcsim's certificate")).expect("a root");
        }
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client)
            .https_only()
            .enable_http1()
            .build();
        let upstream = HttpClient::builder(TokioExecutor::new()).build(https);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State {
            chooser: Mutex::new(Chooser {
                faults: Faults::default(),
                rng: 1,
                counts: BTreeMap::new(),
            }),
            upstream,
            origin: format!("https://{}:{}", vcsim.info.server, vcsim.info.port),
            calls: AtomicU64::new(0),
        });
        let task = tokio::spawn(serve(
            listener,
            TlsAcceptor::from(Arc::new(server)),
            state.clone(),
        ));
        Self {
            state,
            port,
            ca_file,
            task,
        }
    }

    /// Injects `faults` from now (`Faults::default()`: nothing), chosen from `seed`.
    pub fn faults(&self, faults: Faults, seed: u64) {
        let mut chooser = self.state.chooser.lock().expect("chooser lock");
        chooser.faults = faults;
        chooser.rng = seed | 1;
    }

    /// The faults injected so far, by kind ([`UNAVAILABLE`] and the others).
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.state.chooser.lock().expect("chooser lock").counts.clone()
    }

    /// SOAP calls that reached the proxy so far.
    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::Relaxed)
    }

    /// An INI `vsphere.conf` for vcsim through this proxy (its port and CA), followed by
    /// `extra`.
    pub fn conf(&self, vcsim: &Vcsim, extra: &str) -> String {
        format!(
            "[Global]\nuser = \"{}\"\npassword = \"{}\"\nport = {}\nca-file = {}\n\n[VirtualCenter \"{}\"]\n\n{extra}",
            vcsim.info.username,
            vcsim.info.password,
            self.port,
            self.ca_file.display(),
            vcsim.info.server
        )
    }
}

impl std::ops::Drop for VcsimProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, tls: TlsAcceptor, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let tls = tls.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let Ok(stream) = tls.accept(stream).await else {
                return;
            };
            let svc = service_fn(move |req| forward(req, state.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// vCenter's answer to a call in a session it does not know.
const NOT_AUTHENTICATED_FAULT: &str = r#"<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>The session is not authenticated. (test proxy)</faultstring><detail><NotAuthenticatedFault xmlns="urn:vim25" xsi:type="NotAuthenticated"><object type="Folder">group-d1</object><privilegeId>System.View</privilegeId></NotAuthenticatedFault></detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>"#;

fn answer(status: StatusCode, content_type: &'static str, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

async fn forward(req: Request<Incoming>, state: Arc<State>) -> Result<Response<Full<Bytes>>, Dropped> {
    let (parts, body) = req.into_parts();
    let soap = parts.uri.path().starts_with("/sdk");
    let fault = if soap {
        state.calls.fetch_add(1, Ordering::Relaxed);
        let in_session = parts
            .headers
            .get(http::header::COOKIE)
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.contains("vmware_soap_session="));
        state.chooser.lock().expect("chooser lock").choose(in_session)
    } else {
        None
    };
    match fault {
        Some(Fault::Unavailable) => {
            return Ok(answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "Service Unavailable (test proxy)",
            ));
        }
        Some(Fault::NotAuthenticated) => {
            return Ok(answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/xml; charset=utf-8",
                NOT_AUTHENTICATED_FAULT,
            ));
        }
        Some(Fault::Dropped { landed: false }) => return Err(Dropped),
        _ => {}
    }
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(Dropped),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{}{path}", state.origin));
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            out = out.header(name, value);
        }
    }
    let out = out.body(Full::new(body)).expect("proxied request");
    let exchanged = async {
        let resp = state.upstream.request(out).await.ok()?;
        let (parts, answer) = resp.into_parts();
        Some((parts, answer.collect().await.ok()?.to_bytes()))
    };
    // vcsim unreachable: the client sees what it would see of vCenter, a closed connection.
    let Some((mut parts, answer)) = exchanged.await else {
        return Err(Dropped);
    };
    match fault {
        Some(Fault::Dropped { .. }) => return Err(Dropped),
        Some(Fault::Slow(hold)) => tokio::time::sleep(hold).await,
        _ => {}
    }
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    parts.headers.remove(http::header::CONNECTION);
    Ok(Response::from_parts(parts, Full::new(answer)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roll_picks_the_fault_of_its_band() {
        let faults = Faults {
            unavailable: 10,
            not_authenticated: 10,
            dropped: 10,
            slow: 10,
            slow_for: (Duration::from_millis(100), Duration::from_millis(200)),
        };
        let cases: [(u64, u64, bool, Option<Fault>); 9] = [
            (0, 0, true, Some(Fault::Unavailable)),
            (109, 0, false, Some(Fault::Unavailable)),
            (10, 0, true, Some(Fault::NotAuthenticated)),
            // Login and RetrieveServiceContent are never answered NotAuthenticated.
            (19, 0, false, None),
            (20, 2, true, Some(Fault::Dropped { landed: false })),
            (29, 3, true, Some(Fault::Dropped { landed: true })),
            (30, 0, true, Some(Fault::Slow(Duration::from_millis(100)))),
            (39, 100, true, Some(Fault::Slow(Duration::from_millis(200)))),
            (40, 0, true, None),
        ];
        for (roll, extra, in_session, want) in cases {
            assert_eq!(decide(&faults, roll, extra, in_session), want, "{roll} {extra}");
        }
        assert_eq!(decide(&Faults::default(), 0, 0, true), None);
    }

    #[test]
    fn a_chooser_counts_what_it_chose_by_kind() {
        let mut chooser = Chooser {
            faults: Faults {
                unavailable: 25,
                not_authenticated: 25,
                dropped: 25,
                slow: 25,
                slow_for: (Duration::ZERO, Duration::ZERO),
            },
            rng: 7,
            counts: BTreeMap::new(),
        };
        let chosen = (0..400).filter(|_| chooser.choose(true).is_some()).count();
        assert_eq!(chosen, 400, "every call faulted at 100 %");
        assert_eq!(chooser.counts.values().sum::<u64>(), 400);
        for kind in [UNAVAILABLE, NOT_AUTHENTICATED, SLOW] {
            assert!(chooser.counts[kind] > 50, "{kind}: {:?}", chooser.counts);
        }
    }
}
