//! The authenticated OpenStack HTTP client: Keystone v3 tokens, the catalog, JSON requests to
//! Nova, Neutron, Octavia and Keystone, typed errors. hyper 1 with rustls (ring).
//!
//! ```no_run
//! # async fn f(creds: &provider_openstack::auth::Credentials) -> Result<(), provider_openstack::client::ApiError> {
//! use provider_openstack::client::{Client, Service};
//! let client = Client::connect(creds).await?; // authenticates now: bad credentials fail start-up
//! let servers: serde_json::Value = client
//!     .get(Service::Compute, "/servers/detail")
//!     .query(&[("name", "^web$")])
//!     .microversion("2.47")
//!     .send_json()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Tokens
//! One token at a time, in memory only. It is renewed on the first request that finds less than
//! max(60 s, 10 % of its life) left (never more than half of it), and on a 401: the request is
//! then sent once more with the new token. Either way one re-authentication serves every caller
//! waiting at that moment (callers holding the same token wait for it; a caller whose 401 came
//! from an older token just takes the new one). A failed early renewal keeps the still-valid
//! token and is not tried again for [`RENEW_RETRY`]. There is no background task: nothing to
//! start, stop or leak with the client, no token fetched for an idle gateway, and the renewal
//! margin keeps requests from ever carrying an expired token; the price is one request, once
//! per token life, that waits for Keystone.
//!
//! # Endpoints
//! From the token's catalog: the service type, `credentials.region` and
//! `credentials.interface`. An empty region is settled at connect: the catalog's region when it
//! lists one only ([`settle_region`]); with several, connect fails naming them. Paths are relative to the API version: Nova's catalog URL carries
//! `/v2.1`; Neutron's usually has no version, so `/v2.0` is appended (`/ports`, not
//! `/v2.0/ports`); Octavia gets `/v2` (`/lbaas/loadbalancers`); Keystone `/v3`; Barbican `/v1`.

pub mod error;
pub mod keystone;
mod tls;

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::TokioExecutor,
};
use serde::{Serialize, de::DeserializeOwned};

pub use error::{ApiError, ErrorKind};
pub use keystone::TokenInfo;

/// What a path segment leaves as is: unreserved characters and `:` (route tags carry colons).
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':');

/// A value (an ID, a tag) as one URL path segment: the rest percent-encoded.
pub fn path_segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, PATH_SEGMENT).to_string()
}

use crate::auth::{Credentials, Secret};

/// After a failed early renewal (the token still valid), how long the old token is used
/// before Keystone is asked again.
pub const RENEW_RETRY: Duration = Duration::from_secs(5);
/// The request timeout when the credentials give none.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer body read (a bigger one is a [`ErrorKind::Decode`] error).
const MAX_BODY: usize = 64 << 20;
/// A token this close to its expiry is not used any more, even when renewing failed.
const EXPIRY_GUARD: Duration = Duration::from_secs(5);

/// An OpenStack service the client calls, by its catalog type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    /// Nova (`compute`).
    Compute,
    /// Neutron (`network`).
    Network,
    /// Octavia (`load-balancer`).
    LoadBalancer,
    /// Keystone (`identity`).
    Identity,
    /// Barbican (`key-manager`): TLS containers and secrets, read only to check a reference.
    KeyManager,
}

impl Service {
    /// The catalog's service type.
    pub fn catalog_type(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Network => "network",
            Self::LoadBalancer => "load-balancer",
            Self::Identity => "identity",
            Self::KeyManager => "key-manager",
        }
    }

    /// The project's name, for messages.
    pub fn project_name(self) -> &'static str {
        match self {
            Self::Compute => "Nova",
            Self::Network => "Neutron",
            Self::LoadBalancer => "Octavia",
            Self::Identity => "Keystone",
            Self::KeyManager => "Barbican",
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.catalog_type())
    }
}

type Http = HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The authenticated client. Cheap to clone (one `Arc`); every clone shares the token, the
/// connection pool and the counters.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("auth_url", &self.inner.creds.auth_url)
            .field("region", &self.inner.creds.region)
            .field("interface", &self.inner.creds.interface)
            .finish_non_exhaustive()
    }
}

struct Inner {
    http: Http,
    creds: Credentials,
    tokens_url: String,
    timeout: Duration,
    session: RwLock<Arc<Session>>,
    /// Held while authenticating: one re-authentication at a time.
    auth_lock: tokio::sync::Mutex<()>,
    /// The last failed renewal: the generation it tried to replace, when, and why.
    last_failure: Mutex<Option<(u64, Instant, ApiError)>>,
    tokens_issued: AtomicU64,
    counts: Mutex<BTreeMap<(Service, String), u64>>,
}

/// One token and what came with it.
struct Session {
    token: Secret,
    generation: u64,
    received: Instant,
    info: TokenInfo,
    endpoints: HashMap<Service, Result<String, String>>,
}

impl Session {
    fn usable(&self, now: Instant) -> bool {
        now + EXPIRY_GUARD < self.received + self.info.lifetime
    }
}

/// An answer with a 2xx status.
#[derive(Debug, Clone)]
pub struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    service: Service,
    method: Method,
    path: String,
}

impl Response {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// One header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body as JSON of type `T`; a malformed body is a [`ErrorKind::Decode`] error.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            let mut err = ApiError::local(
                self.service,
                self.method.clone(),
                &self.path,
                ErrorKind::Decode,
                format!("unexpected answer ({e}): {}", snippet(&self.body)),
            );
            err.status = Some(self.status);
            err
        })
    }

    /// The body's `key` object as `T` (`{"loadbalancer": {…}}`: Octavia's and Neutron's
    /// single-object answers); a missing key or a malformed object is a [`ErrorKind::Decode`]
    /// error.
    pub fn json_field<T: DeserializeOwned>(&self, key: &str) -> Result<T, ApiError> {
        let mut body: serde_json::Value = self.json()?;
        serde_json::from_value(body[key].take()).map_err(|e| {
            let mut err = ApiError::local(
                self.service,
                self.method.clone(),
                &self.path,
                ErrorKind::Decode,
                format!("unexpected {key:?} in the answer ({e}): {}", snippet(&self.body)),
            );
            err.status = Some(self.status);
            err
        })
    }
}

/// A 404 as `None`: for reads and deletes where "not there" is an answer, not a failure.
pub fn absent_ok<T>(result: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// `e` and its sources, `: `-joined (hyper's top-level errors say little alone).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    if text.contains("CertificateRequired") || text.contains("certificate required") {
        text.push_str(
            " (TLS: the server requires a client certificate: set cert-file and key-file in [Global])",
        );
    }
    text
}

struct RawResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// Each service's base URL in `catalog` for `creds`' region and interface, or why there is none.
fn endpoints(
    catalog: &[keystone::CatalogEntry],
    creds: &Credentials,
) -> HashMap<Service, Result<String, String>> {
    [
        Service::Compute,
        Service::Network,
        Service::LoadBalancer,
        Service::Identity,
        Service::KeyManager,
    ]
    .into_iter()
    .map(|s| {
        let url = keystone::select_endpoint(catalog, s, &creds.region, creds.interface);
        // Keystone itself: the auth URL serves when the catalog has no identity entry.
        let url = match (s, url) {
            (Service::Identity, Err(_)) => Ok(keystone::identity_base(&creds.auth_url)),
            (_, url) => url,
        };
        (s, url)
    })
    .collect()
}

/// The region of a cloud.conf without `region`, from the catalog's regions for the interface:
/// the only one; `None` when there is none (connect then says the catalog has no endpoint).
///
/// # Errors
/// Several regions: which one is meant cannot be guessed (OCCM would take whichever the catalog
/// lists first, and could manage another region's servers).
pub fn settle_region(regions: &[String]) -> Result<Option<String>, String> {
    match regions {
        [] => Ok(None),
        [only] => Ok(Some(only.clone())),
        several => Err(format!(
            "[Global] region is not set and the catalog lists several regions ({}): set region to the cluster's",
            several.join(", ")
        )),
    }
}

impl Client {
    /// Authenticates with Keystone now and checks that the catalog has endpoints in the region
    /// for the interface: bad credentials or a wrong region fail here, as they fail OCCM's
    /// start-up. Without a region, the catalog's only one is used ([`Client::credentials`]
    /// then names it).
    pub async fn connect(credentials: &Credentials) -> Result<Client, ApiError> {
        let config_err = |m: String| {
            ApiError::local(
                Service::Identity,
                Method::POST,
                "/auth/tokens",
                ErrorKind::Config,
                m,
            )
        };
        keystone::auth_body(credentials).map_err(config_err)?;
        let tls = tls::client_config(&credentials.tls).map_err(config_err)?;
        let timeout = if credentials.request_timeout.is_zero() {
            DEFAULT_REQUEST_TIMEOUT
        } else {
            credentials.request_timeout
        };
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        let placeholder = Session {
            token: Secret(String::new()),
            generation: 0,
            received: Instant::now(),
            info: TokenInfo {
                user_id: None,
                user_name: None,
                project_id: None,
                project_name: None,
                domain_id: None,
                expires_at: chrono::Utc::now(),
                lifetime: Duration::ZERO,
            },
            endpoints: HashMap::new(),
        };
        let client = Client {
            inner: Arc::new(Inner {
                http,
                creds: credentials.clone(),
                tokens_url: keystone::tokens_url(&credentials.auth_url),
                timeout,
                session: RwLock::new(Arc::new(placeholder)),
                auth_lock: tokio::sync::Mutex::new(()),
                last_failure: Mutex::new(None),
                tokens_issued: AtomicU64::new(0),
                counts: Mutex::new(BTreeMap::new()),
            }),
        };
        let catalog = client.authenticate(1).await?;
        let mut client = client;
        if credentials.region.is_empty() {
            let regions = keystone::catalog_regions(&catalog, credentials.interface);
            if let Some(region) = settle_region(&regions).map_err(config_err)? {
                client.settle(region, &catalog).map_err(config_err)?;
            }
        }
        let credentials = client.inner.creds.clone();
        let (region, interface) = (&credentials.region, credentials.interface);
        let in_region = catalog.iter().flat_map(|s| &s.endpoints).any(|e| {
            e.interface == interface.as_str()
                && (region.is_empty()
                    || e.region_id.as_ref() == Some(region)
                    || e.region.as_ref() == Some(region))
        });
        if !in_region {
            let regions = keystone::catalog_regions(&catalog, interface);
            let message = if catalog.is_empty() {
                "the token has no catalog: scope it to a project (tenant-id or tenant-name)".to_owned()
            } else {
                format!(
                    "no endpoint in region {region:?} with interface {} in the catalog; its regions for that interface: {}",
                    interface.as_str(),
                    if regions.is_empty() {
                        "none".to_owned()
                    } else {
                        regions.join(", ")
                    },
                )
            };
            return Err(ApiError::local(
                Service::Identity,
                Method::POST,
                "/auth/tokens",
                ErrorKind::NoEndpoint,
                message,
            ));
        }
        Ok(client)
    }

    /// Makes `region` the client's, right after the first token (no other holder of the
    /// client yet), with the endpoints of `catalog` in it.
    fn settle(&mut self, region: String, catalog: &[keystone::CatalogEntry]) -> Result<(), String> {
        let inner =
            Arc::get_mut(&mut self.inner).ok_or("the client is shared before its region is settled")?;
        inner.creds.region = region;
        let current = inner.session.get_mut().unwrap_or_else(|p| p.into_inner());
        let endpoints = endpoints(catalog, &inner.creds);
        *current = Arc::new(Session {
            token: current.token.clone(),
            generation: current.generation,
            received: current.received,
            info: current.info.clone(),
            endpoints,
        });
        Ok(())
    }

    /// A request; see [`Request`].
    pub fn request(&self, method: Method, service: Service, path: &str) -> Request {
        Request {
            client: self.clone(),
            service,
            method,
            path: path.to_owned(),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: None,
            microversion: None,
            versions: false,
            error: None,
        }
    }

    /// `GET {service endpoint}{path}`.
    pub fn get(&self, service: Service, path: &str) -> Request {
        self.request(Method::GET, service, path)
    }

    /// `POST`.
    pub fn post(&self, service: Service, path: &str) -> Request {
        self.request(Method::POST, service, path)
    }

    /// `PUT`.
    pub fn put(&self, service: Service, path: &str) -> Request {
        self.request(Method::PUT, service, path)
    }

    /// `DELETE`.
    pub fn delete(&self, service: Service, path: &str) -> Request {
        self.request(Method::DELETE, service, path)
    }

    /// `GET` of the service's unversioned root, where it lists its API versions (Octavia's
    /// `GET /`, which names the newest `v2.x` it serves).
    pub fn get_versions(&self, service: Service) -> Request {
        let mut request = self.request(Method::GET, service, "/");
        request.versions = true;
        request
    }

    /// How many tokens Keystone issued to this client (1 after [`Client::connect`]).
    pub fn tokens_issued(&self) -> u64 {
        self.inner.tokens_issued.load(Ordering::Relaxed)
    }

    /// Requests sent, per service and method (Keystone's `POST /auth/tokens` included; a
    /// request retried after a 401 counts twice).
    pub fn request_counts(&self) -> BTreeMap<(Service, String), u64> {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Who the current token says we are (project id, user id, expiry).
    pub fn token_info(&self) -> TokenInfo {
        self.current().info.clone()
    }

    /// A valid token (renewed first when due), for Keystone calls that name a token
    /// (`X-Subject-Token`). Never log it.
    pub async fn token(&self) -> Result<Secret, ApiError> {
        Ok(self.session().await?.token.clone())
    }

    /// The base URL the client uses for `service` (from the current token's catalog).
    pub fn endpoint(&self, service: Service) -> Result<String, ApiError> {
        self.current()
            .endpoints
            .get(&service)
            .cloned()
            .unwrap_or_else(|| Err(String::new()))
            .map_err(|m| ApiError::local(service, Method::GET, "", ErrorKind::NoEndpoint, m))
    }

    /// How long a request waits for its answer before it fails.
    pub fn request_timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The credentials the client was made with.
    pub fn credentials(&self) -> &Credentials {
        &self.inner.creds
    }

    fn current(&self) -> Arc<Session> {
        self.inner
            .session
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn count(&self, service: Service, method: &Method) {
        let mut counts = self.inner.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((service, method.as_str().to_owned())).or_default() += 1;
    }

    /// The session to send a request with, renewed first when due.
    async fn session(&self) -> Result<Arc<Session>, ApiError> {
        let s = self.current();
        let now = Instant::now();
        if !keystone::needs_renewal(now, s.received, s.info.lifetime) {
            return Ok(s);
        }
        // Someone is renewing already: the current token is still good meanwhile.
        if s.usable(now) && self.inner.auth_lock.try_lock().is_err() {
            return Ok(s);
        }
        self.renew(s.generation, false).await
    }

    /// Replaces the session of generation `stale` (unless another caller already did). `forced`
    /// (after a 401) never falls back to the old token.
    async fn renew(&self, stale: u64, forced: bool) -> Result<Arc<Session>, ApiError> {
        let _guard = self.inner.auth_lock.lock().await;
        let current = self.current();
        if current.generation != stale {
            return Ok(current);
        }
        let now = Instant::now();
        let recent_failure = {
            let last = self.inner.last_failure.lock().unwrap_or_else(|p| p.into_inner());
            last.as_ref()
                .filter(|(generation, at, _)| *generation == stale && now.duration_since(*at) < RENEW_RETRY)
                .map(|(_, _, e)| e.clone())
        };
        if let Some(e) = recent_failure {
            return if !forced && current.usable(now) {
                Ok(current)
            } else {
                Err(e)
            };
        }
        match self.authenticate(stale + 1).await {
            Ok(_) => Ok(self.current()),
            Err(e) => {
                *self.inner.last_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((stale, now, e.clone()));
                if !forced && current.usable(Instant::now()) {
                    tracing::warn!(error = %e, "renewing the OpenStack token failed; the current one is still valid");
                    Ok(current)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// `POST /v3/auth/tokens`; stores the new session as `generation` and returns its catalog.
    async fn authenticate(&self, generation: u64) -> Result<Vec<keystone::CatalogEntry>, ApiError> {
        let creds = &self.inner.creds;
        let path = "/auth/tokens";
        let body = keystone::auth_body(creds)
            .map_err(|m| ApiError::local(Service::Identity, Method::POST, path, ErrorKind::Config, m))?;
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let sent_at = Instant::now();
        let raw = self
            .exchange(
                Service::Identity,
                Method::POST,
                path,
                &self.inner.tokens_url,
                headers,
                Some(body),
            )
            .await?;
        if !raw.status.is_success() {
            return Err(ApiError::from_response(
                Service::Identity,
                Method::POST,
                path,
                raw.status,
                &raw.headers,
                &raw.body,
            ));
        }
        let decode = |m: String| {
            let mut e = ApiError::local(Service::Identity, Method::POST, path, ErrorKind::Decode, m);
            e.status = Some(raw.status);
            e
        };
        let token = raw
            .headers
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| decode("Keystone's answer has no X-Subject-Token".into()))?
            .to_owned();
        let answer = keystone::parse_token(&raw.body, chrono::Utc::now()).map_err(decode)?;
        let endpoints = endpoints(&answer.catalog, creds);
        tracing::debug!(
            generation,
            expires_at = %answer.info.expires_at,
            lifetime_s = answer.info.lifetime.as_secs(),
            "OpenStack token issued"
        );
        let session = Session {
            token: Secret(token),
            generation,
            // When the request left: the lifetime is counted from before Keystone issued it.
            received: sent_at,
            info: answer.info,
            endpoints,
        };
        *self.inner.session.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(session);
        self.inner.tokens_issued.fetch_add(1, Ordering::Relaxed);
        Ok(answer.catalog)
    }

    /// One HTTP exchange, body read, within the request timeout.
    async fn exchange(
        &self,
        service: Service,
        method: Method,
        path: &str,
        url: &str,
        mut headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<RawResponse, ApiError> {
        let local = |kind, m: String| ApiError::local(service, method.clone(), path, kind, m);
        let uri: Uri = url
            .parse()
            .map_err(|e| local(ErrorKind::Config, format!("URL {url:?}: {e}")))?;
        headers
            .entry(header::ACCEPT)
            .or_insert(HeaderValue::from_static("application/json"));
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("provider-openstack/", env!("CARGO_PKG_VERSION"))),
        );
        let mut req = http::Request::builder()
            .method(method.clone())
            .uri(uri)
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| local(ErrorKind::Config, e.to_string()))?;
        *req.headers_mut() = headers;
        self.count(service, &method);
        let timeout = self.inner.timeout;
        let exchange = async {
            let resp = self
                .inner
                .http
                .request(req)
                .await
                .map_err(|e| local(ErrorKind::Transport, chain(&e)))?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|e| {
                    let kind = if e.is::<http_body_util::LengthLimitError>() {
                        ErrorKind::Decode
                    } else {
                        ErrorKind::Transport
                    };
                    local(kind, format!("reading the answer: {}", chain(e.as_ref())))
                })?
                .to_bytes();
            Ok(RawResponse {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(local(
                ErrorKind::Transport,
                format!("no answer within {timeout:?}"),
            )),
        }
    }
}

/// A request being built: [`Request::query`], [`Request::header`], [`Request::json`],
/// [`Request::microversion`], then one of the `send*` methods.
#[must_use = "a request does nothing until sent"]
pub struct Request {
    client: Client,
    service: Service,
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    headers: HeaderMap,
    body: Option<Bytes>,
    microversion: Option<String>,
    /// Sent to the endpoint without its API version ([`Client::get_versions`]).
    versions: bool,
    /// A builder step that failed (a bad header, a body that does not serialize).
    error: Option<ApiError>,
}

impl Request {
    /// Adds query parameters; a key may repeat (`device_id=a&device_id=b`).
    pub fn query<K: AsRef<str>, V: AsRef<str>>(mut self, pairs: &[(K, V)]) -> Self {
        self.query.extend(
            pairs
                .iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())),
        );
        self
    }

    /// Adds a header (`If-Match: revision_number=3`).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            (Ok(n), Ok(v)) => {
                self.headers.append(n, v);
            }
            _ => self.fail(format!("invalid header {name:?}")),
        }
        self
    }

    /// A JSON body.
    pub fn json<B: Serialize + ?Sized>(mut self, body: &B) -> Self {
        match serde_json::to_vec(body) {
            Ok(bytes) => {
                self.body = Some(Bytes::from(bytes));
                self.headers
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            Err(e) => self.fail(format!("request body: {e}")),
        }
        self
    }

    /// The API microversion (`"2.47"`): for Nova `OpenStack-API-Version: compute 2.47` and
    /// `X-OpenStack-Nova-API-Version: 2.47`; for the others `OpenStack-API-Version: <type> <v>`.
    /// Without it Nova answers as 2.1.
    pub fn microversion(mut self, version: &str) -> Self {
        self.microversion = Some(version.to_owned());
        self
    }

    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(ApiError::local(
                self.service,
                self.method.clone(),
                &self.path,
                ErrorKind::Config,
                message,
            ));
        }
    }

    /// Sends it; a non-2xx answer is an [`ApiError`]. A 401 re-authenticates (once for every
    /// caller waiting) and sends the request once more.
    pub async fn send(self) -> Result<Response, ApiError> {
        self.send_to(None).await
    }

    /// Sends it and reads the body as JSON.
    pub async fn send_json<T: DeserializeOwned>(self) -> Result<T, ApiError> {
        self.send().await?.json()
    }

    /// Sends it and reads the body's `key` object ([`Response::json_field`]).
    pub async fn send_json_field<T: DeserializeOwned>(self, key: &str) -> Result<T, ApiError> {
        self.send().await?.json_field(key)
    }

    /// Sends it and ignores the body (`DELETE`, `204`).
    pub async fn send_empty(self) -> Result<(), ApiError> {
        self.send().await.map(drop)
    }

    /// Every item of a listing: the answer's `key` array (`"servers"`), following
    /// `{key}_links` `rel=next` (Nova, Neutron with `limit`, Octavia) for at most `max_pages`
    /// pages; more is a [`ErrorKind::TooManyPages`] error (a partial listing is never
    /// returned: callers decide on what is missing).
    pub async fn send_paginated<T: DeserializeOwned>(
        self,
        key: &str,
        max_pages: usize,
    ) -> Result<Vec<T>, ApiError> {
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..max_pages.max(1) {
            let page: serde_json::Value = self.clone_parts().send_to(next.take()).await?.json()?;
            let decode = |m: String| {
                ApiError::local(
                    self.service,
                    self.method.clone(),
                    &self.path,
                    ErrorKind::Decode,
                    m,
                )
            };
            let list = page
                .get(key)
                .and_then(|v| v.as_array())
                .ok_or_else(|| decode(format!("the answer has no {key:?} list")))?;
            for item in list {
                items.push(
                    serde_json::from_value(item.clone())
                        .map_err(|e| decode(format!("an item of {key:?}: {e}")))?,
                );
            }
            let Some(href) = next_link(&page, key) else {
                return Ok(items);
            };
            if !seen.insert(href.clone()) {
                return Err(decode(format!("the next link {href:?} repeats")));
            }
            next = Some(href);
        }
        Err(ApiError::local(
            self.service,
            self.method.clone(),
            &self.path,
            ErrorKind::TooManyPages,
            format!("more than {max_pages} pages of {key:?}"),
        ))
    }

    fn clone_parts(&self) -> Request {
        Request {
            client: self.client.clone(),
            service: self.service,
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
            microversion: self.microversion.clone(),
            versions: self.versions,
            error: self.error.clone(),
        }
    }

    /// Sends to the endpoint and path (or to `next`, a pagination link, which carries its own
    /// query).
    async fn send_to(self, next: Option<String>) -> Result<Response, ApiError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let client = &self.client;
        let mut headers = self.headers;
        if let Some(v) = &self.microversion {
            let name = self.service.catalog_type();
            let value = HeaderValue::try_from(format!("{name} {v}")).map_err(|_| {
                ApiError::local(
                    self.service,
                    self.method.clone(),
                    &self.path,
                    ErrorKind::Config,
                    format!("microversion {v:?}"),
                )
            })?;
            headers.insert("openstack-api-version", value);
            if self.service == Service::Compute
                && let Ok(v) = HeaderValue::try_from(v.as_str())
            {
                headers.insert("x-openstack-nova-api-version", v);
            }
        }
        let mut session = client.session().await?;
        for attempt in 0..2 {
            let base = session
                .endpoints
                .get(&self.service)
                .cloned()
                .unwrap_or_else(|| Err(String::new()))
                .map_err(|m| {
                    ApiError::local(
                        self.service,
                        self.method.clone(),
                        &self.path,
                        ErrorKind::NoEndpoint,
                        m,
                    )
                })?;
            let url = match &next {
                Some(href) => rebase(&base, href),
                None if self.versions => format!("{}/", unversioned(&base)),
                None => join(&base, &self.path, &self.query),
            };
            let mut h = headers.clone();
            let token = HeaderValue::try_from(session.token.0.as_str()).map_err(|_| {
                ApiError::local(
                    self.service,
                    self.method.clone(),
                    &self.path,
                    ErrorKind::Decode,
                    "the token is not a header value",
                )
            })?;
            h.insert("x-auth-token", token);
            let raw = client
                .exchange(
                    self.service,
                    self.method.clone(),
                    &self.path,
                    &url,
                    h,
                    self.body.clone(),
                )
                .await?;
            if raw.status == StatusCode::UNAUTHORIZED && attempt == 0 {
                tracing::info!(service = %self.service, path = %self.path, "401 from OpenStack: re-authenticating");
                session = client.renew(session.generation, true).await?;
                continue;
            }
            if !raw.status.is_success() {
                return Err(ApiError::from_response(
                    self.service,
                    self.method,
                    &self.path,
                    raw.status,
                    &raw.headers,
                    &raw.body,
                ));
            }
            return Ok(Response {
                status: raw.status,
                headers: raw.headers,
                body: raw.body,
                service: self.service,
                method: self.method,
                path: self.path,
            });
        }
        unreachable!("the loop returns on its second attempt")
    }
}

/// `base` + `path` + the query (appended to one the path may already have).
fn join(base: &str, path: &str, query: &[(String, String)]) -> String {
    let mut url = format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'));
    if path.is_empty() {
        url.truncate(url.len() - 1);
    }
    if !query.is_empty() {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in query {
            q.append_pair(k, v);
        }
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&q.finish());
    }
    url
}

/// `base` without the API version the client appends or the catalog names (`/v2`, `/v2.0`,
/// `/v2.1`, `/v3`): where the service lists its versions.
fn unversioned(base: &str) -> &str {
    match base.rsplit_once('/') {
        Some((root, last))
            if last.len() > 1
                && last.starts_with('v')
                && last[1..].chars().all(|c| c.is_ascii_digit() || c == '.') =>
        {
            root
        }
        _ => base,
    }
}

/// A pagination link, sent to the endpoint's scheme and host: services build links from their
/// own idea of their address (Nova's `osapi_compute_link_prefix`, a proxy in front), which may
/// not be the endpoint the catalog gave us for our interface.
fn rebase(base: &str, href: &str) -> String {
    let (Ok(b), Ok(h)) = (base.parse::<Uri>(), href.parse::<Uri>()) else {
        return href.to_owned();
    };
    let Some(pq) = h.path_and_query() else {
        return href.to_owned();
    };
    match (b.scheme_str(), b.authority()) {
        (Some(scheme), Some(authority))
            if h.authority() != Some(authority) || h.scheme_str() != Some(scheme) =>
        {
            format!("{scheme}://{authority}{pq}")
        }
        _ => href.to_owned(),
    }
}

/// The `rel=next` href of `{key}_links`.
fn next_link(page: &serde_json::Value, key: &str) -> Option<String> {
    page.get(format!("{key}_links"))?
        .as_array()?
        .iter()
        .find(|l| l.get("rel").and_then(|r| r.as_str()) == Some("next"))?
        .get("href")?
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Interface;
    use serde_json::json;

    #[test]
    fn tags_and_ids_travel_as_one_path_segment() {
        assert_eq!(
            path_segment("kube-route:prod:10.244.1.0_24:fd00::5"),
            "kube-route:prod:10.244.1.0_24:fd00::5"
        );
        assert_eq!(path_segment("a b/c?d#e%"), "a%20b%2Fc%3Fd%23e%25");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn the_unversioned_root_of_an_endpoint() {
        assert_eq!(unversioned("http://o:9876/v2"), "http://o:9876");
        assert_eq!(
            unversioned("https://cloud/load-balancer/v2.0"),
            "https://cloud/load-balancer"
        );
        assert_eq!(unversioned("http://n/v2.1"), "http://n");
        assert_eq!(unversioned("http://n/octavia"), "http://n/octavia");
        assert_eq!(unversioned("http://n/v"), "http://n/v");
    }

    #[test]
    fn urls() {
        let q = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            join("http://n:9696/v2.0", "/ports", &[]),
            "http://n:9696/v2.0/ports"
        );
        assert_eq!(
            join("http://n:9696/v2.0/", "ports", &[]),
            "http://n:9696/v2.0/ports"
        );
        assert_eq!(join("http://n:9696/v2.0", "", &[]), "http://n:9696/v2.0");
        assert_eq!(
            join(
                "http://n/v2.0",
                "/ports",
                &q(&[("device_id", "a"), ("device_id", "b")])
            ),
            "http://n/v2.0/ports?device_id=a&device_id=b"
        );
        assert_eq!(
            join("http://c/v2.1", "/servers/detail", &q(&[("name", "^web 1$")])),
            "http://c/v2.1/servers/detail?name=%5Eweb+1%24"
        );
        assert_eq!(
            join("http://c/v2.1", "/servers?all_tenants=1", &q(&[("a", "b")])),
            "http://c/v2.1/servers?all_tenants=1&a=b"
        );
    }

    #[test]
    fn a_missing_region_is_the_catalogs_only_one() {
        let r = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert_eq!(settle_region(&r(&[])), Ok(None));
        assert_eq!(settle_region(&r(&["RegionOne"])), Ok(Some("RegionOne".into())));
        let e = settle_region(&r(&["RegionOne", "RegionTwo"])).unwrap_err();
        assert!(
            e.contains("RegionOne, RegionTwo") && e.contains("set region"),
            "{e}"
        );
    }

    #[test]
    fn pagination_links() {
        let page = json!({"servers": [], "servers_links": [
            {"rel": "self", "href": "http://x/self"},
            {"rel": "next", "href": "http://public:8774/v2.1/servers/detail?limit=1&marker=m"}]});
        assert_eq!(
            next_link(&page, "servers").as_deref(),
            Some("http://public:8774/v2.1/servers/detail?limit=1&marker=m")
        );
        assert_eq!(next_link(&page, "ports"), None);
        assert_eq!(
            next_link(&json!({"ports": [], "ports_links": "x"}), "ports"),
            None
        );
        assert_eq!(
            rebase(
                "http://internal:8774/v2.1",
                "http://public:8774/v2.1/servers/detail?limit=1&marker=m"
            ),
            "http://internal:8774/v2.1/servers/detail?limit=1&marker=m"
        );
        assert_eq!(
            rebase("http://n:9696/v2.0", "http://n:9696/v2.0/ports?marker=p"),
            "http://n:9696/v2.0/ports?marker=p"
        );
        assert_eq!(
            rebase("https://n/v2.0", "/v2.0/ports?marker=p"),
            "https://n/v2.0/ports?marker=p"
        );
    }

    #[test]
    fn client_is_send_sync_and_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Client>();
        fn send<T: Send>(_: &T) {}
        let creds = Credentials {
            auth_url: "http://127.0.0.1:1".into(),
            method: crate::auth::Method::Token {
                token: Secret("t".into()),
            },
            scope: crate::auth::Scope::Implied,
            region: String::new(),
            interface: Interface::Public,
            tls: crate::auth::Tls::default(),
            request_timeout: Duration::from_secs(1),
        };
        send(&Client::connect(&creds));
    }

    #[tokio::test]
    async fn unreachable_keystone_is_a_transport_error() {
        let creds = Credentials {
            auth_url: "http://127.0.0.1:9/v3".into(),
            method: crate::auth::Method::Token {
                token: Secret("t".into()),
            },
            scope: crate::auth::Scope::Implied,
            region: "RegionOne".into(),
            interface: Interface::Public,
            tls: crate::auth::Tls::default(),
            request_timeout: Duration::from_secs(2),
        };
        let e = Client::connect(&creds).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transport, "{e}");
        assert_eq!(e.service, Service::Identity);
        assert!(matches!(
            provider::ProviderError::from(e),
            provider::ProviderError::Unavailable(_)
        ));
    }

    /// A Keystone whose catalog lists Nova in each of `regions`.
    async fn keystone_with_regions(regions: &'static [&'static str]) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let svc = hyper::service::service_fn(
                    move |_req: http::Request<hyper::body::Incoming>| async move {
                        let now = chrono::Utc::now();
                        let endpoints: Vec<serde_json::Value> = regions
                        .iter()
                        .map(|r| json!({"interface": "public", "region_id": r, "url": format!("http://{addr}/{r}/compute")}))
                        .collect();
                        let body = json!({"token": {
                        "issued_at": now.to_rfc3339(),
                        "expires_at": (now + chrono::Duration::hours(1)).to_rfc3339(),
                        "project": {"id": "p"},
                        "catalog": [{"type": "compute", "endpoints": endpoints}]}});
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .status(201)
                                .header("x-subject-token", "tok")
                                .body(Full::new(Bytes::from(body.to_string())))
                                .unwrap(),
                        )
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
                );
            }
        });
        addr
    }

    /// No `region`: the catalog's only region is used, endpoints included; with several,
    /// connect fails naming them.
    #[tokio::test]
    async fn without_a_region_the_catalogs_only_region_is_used() {
        let creds = |addr: std::net::SocketAddr| Credentials {
            auth_url: format!("http://{addr}/v3"),
            method: crate::auth::Method::Token {
                token: Secret("t".into()),
            },
            scope: crate::auth::Scope::Implied,
            region: String::new(),
            interface: Interface::Public,
            tls: crate::auth::Tls::default(),
            request_timeout: Duration::from_secs(5),
        };
        let addr = keystone_with_regions(&["RegionOne"]).await;
        let c = Client::connect(&creds(addr)).await.unwrap();
        assert_eq!(c.credentials().region, "RegionOne");
        assert_eq!(
            c.endpoint(Service::Compute).unwrap(),
            format!("http://{addr}/RegionOne/compute")
        );
        let addr = keystone_with_regions(&["RegionOne", "RegionTwo"]).await;
        let e = Client::connect(&creds(addr)).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(e.to_string().contains("RegionOne, RegionTwo"), "{e}");
    }

    /// A Keystone that issues 2-second tokens, in front of a "compute" that accepts only the
    /// newest one: the client renews before expiry (not per call) without ever sending a
    /// stale token.
    #[tokio::test]
    async fn renews_short_tokens_before_expiry() {
        use std::sync::atomic::AtomicUsize;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let issued = Arc::new(AtomicUsize::new(0));
        let rejected = Arc::new(AtomicUsize::new(0));
        let (i2, r2) = (issued.clone(), rejected.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (issued, rejected) = (i2.clone(), r2.clone());
                let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (issued, rejected) = (issued.clone(), rejected.clone());
                    async move {
                        let resp = if req.uri().path() == "/v3/auth/tokens" {
                            let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
                            let now = chrono::Utc::now();
                            let body = json!({"token": {
                                "issued_at": now.to_rfc3339(),
                                "expires_at": (now + chrono::Duration::seconds(2)).to_rfc3339(),
                                "project": {"id": "p"},
                                "catalog": [{"type": "compute", "endpoints": [{"interface": "public",
                                    "region_id": "R", "url": format!("http://{addr}/compute")}]}]}});
                            http::Response::builder()
                                .status(201)
                                .header("x-subject-token", format!("tok-{n}"))
                                .body(Full::new(Bytes::from(body.to_string())))
                        } else {
                            let want = format!("tok-{}", issued.load(Ordering::SeqCst));
                            let ok = req
                                .headers()
                                .get("x-auth-token")
                                .is_some_and(|t| t == want.as_str());
                            if !ok {
                                rejected.fetch_add(1, Ordering::SeqCst);
                            }
                            http::Response::builder()
                                .status(if ok { 200 } else { 401 })
                                .body(Full::new(Bytes::from_static(b"{}")))
                        };
                        Ok::<_, std::convert::Infallible>(resp.unwrap())
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
                );
            }
        });
        let creds = Credentials {
            auth_url: format!("http://{addr}"),
            method: crate::auth::Method::Token {
                token: Secret("t".into()),
            },
            scope: crate::auth::Scope::Implied,
            region: "R".into(),
            interface: Interface::Public,
            tls: crate::auth::Tls::default(),
            request_timeout: Duration::from_secs(5),
        };
        let c = Client::connect(&creds).await.unwrap();
        for _ in 0..5 {
            c.get(Service::Compute, "/x").send_empty().await.unwrap();
        }
        assert_eq!(c.tokens_issued(), 1);
        // Renewal is due once less than half of the 2 s remains.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        c.get(Service::Compute, "/x").send_empty().await.unwrap();
        assert_eq!(c.tokens_issued(), 2);
        assert_eq!(
            rejected.load(Ordering::SeqCst),
            0,
            "never a 401: renewed before expiry"
        );
        assert_eq!(c.request_counts()[&(Service::Compute, "GET".to_owned())], 6);
    }
}
