//! A SOAP client of our own for the few vSphere (vim25) methods nodes need: Login,
//! RetrieveServiceContent, FindByUuid, FindAllByDnsName, FindByIp, RetrievePropertiesEx (and
//! its continuation). One long-lived session per vCenter, logged in on first use and again when
//! vCenter answers NotAuthenticated (it forgot the session), never once per lookup.
//!
//! # Why hand-written
//! The one Rust vSphere crate, `vim_rs` 0.7, is generated bindings for the VI **JSON** API
//! (vSphere 8.0U1 and later; vcsim 0.24.2, the simulator the tests run on, has no JSON API):
//! 934,571 lines of Rust in a 41 MB source tree (a 4 MB crate file), plus reqwest, which this
//! tree does not otherwise build; compiling it on the 2-core CI machines would cost more than
//! the rest of this provider. (Its build was not measured: its size alone decided.) What nodes
//! need is six methods, a handful of properties and the fault names; a maintained XML crate
//! (quick-xml) reads and escapes the envelopes ([`xml`]), and [`methods`] writes them.

pub mod methods;
pub mod tls;
pub mod xml;

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::TokioExecutor,
};

use crate::{
    config::VCenter,
    credentials::{self, Credential},
};
pub use methods::{Moref, ServiceContent};
use xml::Element;

/// The vim25 API version the requests are written for (vcsim 0.24.2 reports 6.5; later
/// vCenters serve it too).
pub const API_VERSION: &str = "6.5";
/// How long one call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const COOKIE: &str = "vmware_soap_session";

/// What a call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SoapError {
    /// vCenter answered a fault: its type (`NotAuthenticated`, `InvalidLogin`,
    /// `ManagedObjectNotFound`, …), its message and, for ManagedObjectNotFound, the object.
    #[error("vCenter fault {kind}: {message}")]
    Fault {
        /// The fault's type.
        kind: String,
        /// Its message.
        message: String,
        /// The object a ManagedObjectNotFound names.
        object: Option<Moref>,
    },
    /// An HTTP status other than 200 or 500 (a proxy's 503, an overloaded vCenter).
    #[error("vCenter answered HTTP {status}")]
    Http {
        /// The status.
        status: u16,
    },
    /// No answer: connection refused, TLS, reset.
    #[error("cannot reach vCenter: {0}")]
    Transport(String),
    /// No answer within [`CALL_TIMEOUT`].
    #[error("vCenter did not answer within {0:?}")]
    Timeout(Duration),
    /// An answer this client cannot read.
    #[error("unreadable answer from vCenter: {0}")]
    Decode(String),
    /// No credentials led to a session.
    #[error("cannot log in to vCenter: {0}")]
    Login(String),
}

impl SoapError {
    /// The fault's type, when vCenter answered one.
    pub fn fault(&self) -> Option<&str> {
        match self {
            Self::Fault { kind, .. } => Some(kind),
            _ => None,
        }
    }
}

type Http = HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Debug, Clone)]
struct Session {
    cookie: String,
    generation: u64,
}

/// One vCenter's client: its connection pool and its session.
pub struct Client {
    vc: VCenter,
    secrets_directory: Option<PathBuf>,
    http: Http,
    url: http::Uri,
    content: tokio::sync::OnceCell<ServiceContent>,
    session: std::sync::RwLock<Option<Session>>,
    login: tokio::sync::Mutex<()>,
    calls: AtomicU64,
    logins: AtomicU64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `vc`; no call is made yet. Credentials come from the config, and from the
    /// Secret mounted at `secrets_directory` when those fail or are absent.
    pub fn new(vc: &VCenter, secrets_directory: Option<PathBuf>) -> Result<Arc<Self>, String> {
        let tls = tls::client_config(vc)?;
        let url: http::Uri = vc
            .sdk_url()
            .parse()
            .map_err(|e| format!("vCenter {:?}: {} is no URL: {e}", vc.tenant, vc.sdk_url()))?;
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CALL_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .wrap_connector(connector);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(https);
        Ok(Arc::new(Self {
            vc: vc.clone(),
            secrets_directory,
            http,
            url,
            content: tokio::sync::OnceCell::new(),
            session: std::sync::RwLock::new(None),
            login: tokio::sync::Mutex::new(()),
            calls: AtomicU64::new(0),
            logins: AtomicU64::new(0),
        }))
    }

    /// The vCenter this client talks to.
    pub fn vcenter(&self) -> &VCenter {
        &self.vc
    }

    /// SOAP calls made so far (logins included).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Logins made so far.
    pub fn logins(&self) -> u64 {
        self.logins.load(Ordering::Relaxed)
    }

    /// One POST of a method's body; its `…Response` element, or the fault.
    async fn post(&self, body: &str, cookie: Option<&str>) -> Result<(Element, Option<String>), SoapError> {
        let envelope = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><soapenv:Body>{body}</soapenv:Body></soapenv:Envelope>"
        );
        let mut request = http::Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "text/xml; charset=utf-8")
            .header("SOAPAction", format!("urn:vim25/{API_VERSION}"))
            .header(http::header::USER_AGENT, "cloud-gateway-vsphere");
        if let Some(cookie) = cookie {
            request = request.header(http::header::COOKIE, format!("{COOKIE}={cookie}"));
        }
        let request = request
            .body(Full::new(Bytes::from(envelope)))
            .map_err(|e| SoapError::Transport(e.to_string()))?;
        self.calls.fetch_add(1, Ordering::Relaxed);
        let (status, headers, bytes) = self.exchange(request).await?;
        let set_cookie = headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                let first = v.split(';').next()?.trim();
                let (name, value) = first.split_once('=')?;
                (name == COOKIE).then(|| value.to_owned())
            });
        if status != http::StatusCode::OK && status != http::StatusCode::INTERNAL_SERVER_ERROR {
            return Err(SoapError::Http {
                status: status.as_u16(),
            });
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| SoapError::Decode(e.to_string()))?;
        let envelope = xml::parse(text).map_err(SoapError::Decode)?;
        let body = envelope
            .child("Body")
            .and_then(|b| b.children.first())
            .ok_or_else(|| SoapError::Decode("no SOAP body".into()))?;
        if body.name == "Fault" {
            return Err(methods::fault(body));
        }
        Ok((body.clone(), set_cookie))
    }

    /// One request over the connection pool, its answer read whole, within [`CALL_TIMEOUT`]
    /// (the SOAP calls' and the tagging REST API's, [`crate::tagging`]).
    pub(crate) async fn exchange(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<(http::StatusCode, http::HeaderMap, Bytes), SoapError> {
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| SoapError::Transport(error_chain(&e)))?;
            let (parts, body) = response.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|e| SoapError::Transport(e.to_string()))?
                .to_bytes();
            Ok::<_, SoapError>((parts.status, parts.headers, bytes))
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| SoapError::Timeout(CALL_TIMEOUT))?
    }

    /// The service content (fetched once: it never changes while vCenter runs).
    pub async fn content(&self) -> Result<&ServiceContent, SoapError> {
        self.content
            .get_or_try_init(|| async {
                let (body, _) = self.post(&methods::retrieve_service_content(), None).await?;
                methods::service_content(&body)
            })
            .await
    }

    fn current(&self) -> Option<Session> {
        self.session.read().expect("session lock").clone()
    }

    /// Logs in unless another call did since session `stale` was found forgotten.
    async fn ensure_session(&self, stale: Option<u64>) -> Result<Session, SoapError> {
        if let Some(s) = self.current().filter(|s| Some(s.generation) != stale) {
            return Ok(s);
        }
        let _one = self.login.lock().await;
        if let Some(s) = self.current().filter(|s| Some(s.generation) != stale) {
            return Ok(s);
        }
        let content = self.content().await?.clone();
        let mut last = None;
        let mut refused = None;
        for credential in self.credentials()? {
            if let Some(why) = saml_refusal(&credential.user, &self.vc.server) {
                refused = Some(why);
                continue;
            }
            self.logins.fetch_add(1, Ordering::Relaxed);
            match self.post(&methods::login(&content, &credential), None).await {
                Ok((_, Some(cookie))) => {
                    let generation = stale.map_or(1, |g| g + 1);
                    let session = Session { cookie, generation };
                    *self.session.write().expect("session lock") = Some(session.clone());
                    tracing::info!(server = %self.vc.server, user = %credential.user, "logged in to vCenter");
                    return Ok(session);
                }
                Ok((_, None)) => return Err(SoapError::Login("vCenter set no session cookie".into())),
                Err(e) if e.fault() == Some("InvalidLogin") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(SoapError::Login(match (last, refused) {
            (Some(e), _) => format!("{e} (user {:?} on {})", self.vc.user, self.vc.server),
            (None, Some(why)) => why,
            (None, None) => format!("no credentials for {}", self.vc.server),
        }))
    }

    /// The logins to try, in order: the config's, then the mounted Secret's (read anew each
    /// time, so a rotated password is picked up, as CPI re-reads its Secret on InvalidLogin).
    pub(crate) fn credentials(&self) -> Result<Vec<Credential>, SoapError> {
        let mut out = Vec::new();
        if !self.vc.user.is_empty() {
            out.push(Credential {
                user: self.vc.user.clone(),
                password: self.vc.password.clone(),
            });
        }
        if let Some(dir) = &self.secrets_directory {
            match credentials::read_dir(dir) {
                Ok(mut by_server) => {
                    if let Some(c) = by_server.remove(&self.vc.server) {
                        out.push(c);
                    }
                }
                Err(e) if out.is_empty() => return Err(SoapError::Login(e.to_string())),
                Err(e) => tracing::warn!(error = %e, "the mounted credentials Secret cannot be read"),
            }
        }
        if out.is_empty() {
            return Err(SoapError::Login(format!(
                "no credentials for server {:?} in the config or the mounted Secret",
                self.vc.server
            )));
        }
        Ok(out)
    }

    /// Calls a method in the session, logging in first when there is none and once more when
    /// vCenter forgot it.
    pub async fn call(&self, body: &str) -> Result<Element, SoapError> {
        self.call_checked(body, |_| false).await
    }

    /// [`Client::call`], where `forgot` also tells a forgotten session from an answer: the
    /// property collector answers an unauthenticated read with each property "missing" for
    /// NotAuthenticated instead of a fault (vcsim does; govmomi accepts both forms).
    pub async fn call_checked(
        &self,
        body: &str,
        forgot: impl Fn(&Element) -> bool,
    ) -> Result<Element, SoapError> {
        let session = self.ensure_session(None).await?;
        match self.post(body, Some(&session.cookie)).await {
            Ok((answer, _)) if !forgot(&answer) => Ok(answer),
            Ok(_) => self.again(body, session.generation).await,
            Err(e) if e.fault() == Some("NotAuthenticated") => self.again(body, session.generation).await,
            Err(e) => Err(e),
        }
    }

    async fn again(&self, body: &str, generation: u64) -> Result<Element, SoapError> {
        tracing::info!(server = %self.vc.server, "vCenter forgot the session; logging in again");
        let session = self.ensure_session(Some(generation)).await?;
        Ok(self.post(body, Some(&session.cookie)).await?.0)
    }

    /// Logs out (at shutdown), so the session does not count against vCenter's limit.
    pub async fn logout(&self) {
        let Some(session) = self.current() else { return };
        if let Some(content) = self.content.get() {
            let _ = self.post(&methods::logout(content), Some(&session.cookie)).await;
        }
        *self.session.write().expect("session lock") = None;
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// CPI logs in with a SAML token when the user is a PEM certificate (STS `Issue`, then
/// `LoginByToken`); this client does not, so such a login is refused by name rather than sent
/// as a password login vCenter would answer InvalidLogin.
fn saml_refusal(user: &str, server: &str) -> Option<String> {
    user.trim_start().starts_with("-----BEGIN").then(|| {
        format!(
            "the user for vCenter {server} is a PEM certificate: CPI's SAML token login (STS Issue, \
             LoginByToken) is not supported; give a user and password (config or Secret)"
        )
    })
}

#[cfg(test)]
mod saml_tests {
    #[test]
    fn a_pem_user_is_refused_by_name_not_sent_as_a_password() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let why = super::saml_refusal(pem, "vc.example").expect("refused");
        assert!(why.contains("vc.example") && why.contains("SAML"), "{why}");
        assert_eq!(super::saml_refusal("administrator@vsphere.local", "vc"), None);
    }
}
