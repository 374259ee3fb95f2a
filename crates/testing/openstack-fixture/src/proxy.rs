//! [`CloudProxy`]: an HTTP proxy in front of the test cloud's Keystone, Nova, Neutron and Octavia
//! (one port each; it rewrites Keystone's catalog to point at itself, so a client given its
//! `auth_url` reaches every service through it) that injects what the test cloud never does:
//! - 429 with `Retry-After` on every request while throttling is on (Nova's and Neutron's rate
//!   limiting middlewares answer so);
//! - a crash at the nth write (POST, PUT, PATCH, DELETE) from now: the write never reaches the
//!   cloud, or it does and only its answer is lost (a 500), as when a process dies around a call;
//! - a share of Octavia's writes failed (chaos): a 409 as Octavia answers a write to a load
//!   balancer that is busy, or a 500 before or after the write reached Octavia.

use std::{
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::{Client as HttpClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use tokio::{net::TcpListener, task::JoinHandle};

use crate::TestCloud;

/// `http://host:port` of a URL.
fn origin(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url[..after_scheme + i].to_owned(),
        None => url.to_owned(),
    }
}

/// A write the proxy fails: the `nth` from now; `landed`: it reaches the cloud, only its answer
/// is lost.
#[derive(Debug, Clone, Copy)]
struct Crash {
    nth: usize,
    landed: bool,
}

struct ProxyState {
    throttle: AtomicBool,
    /// Percent of Octavia writes failed, and the random state choosing them (xorshift64*).
    octavia_failures: Mutex<(u64, u64)>,
    crash: Mutex<Option<Crash>>,
    writes: AtomicUsize,
    /// Octavia writes failed by [`CloudProxy::fail_octavia_writes`] so far.
    failed: AtomicUsize,
    /// (upstream origin, proxy origin) of each proxied service, to rewrite Keystone's catalog.
    rewrites: Vec<(String, String)>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
}

/// The proxy; stops when dropped.
pub struct CloudProxy {
    state: Arc<ProxyState>,
    /// The Keystone URL to give a client (`auth-url`, through the proxy).
    pub auth_url: String,
    tasks: Vec<JoinHandle<()>>,
}

impl CloudProxy {
    /// Starts the proxy in front of `cloud`'s Keystone, Nova, Neutron and Octavia.
    pub async fn start(cloud: &TestCloud) -> Self {
        let endpoints = &cloud.info.endpoints;
        let upstreams: Vec<String> = ["identity", "compute", "network", "load-balancer"]
            .iter()
            .map(|s| origin(endpoints.get(*s).unwrap_or_else(|| panic!("no {s} endpoint"))))
            .collect();
        let mut listeners = Vec::new();
        let mut rewrites = Vec::new();
        for upstream in &upstreams {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
            let addr = listener.local_addr().expect("proxy address");
            rewrites.push((upstream.clone(), format!("http://{addr}")));
            listeners.push(listener);
        }
        let state = Arc::new(ProxyState {
            throttle: AtomicBool::new(false),
            octavia_failures: Mutex::new((0, 0x9e37_79b9_7f4a_7c15)),
            crash: Mutex::new(None),
            writes: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            rewrites,
            http: HttpClient::builder(TokioExecutor::new()).build_http(),
        });
        let tasks = listeners
            .into_iter()
            .zip(upstreams.iter().cloned())
            .enumerate()
            // The fourth upstream is Octavia's.
            .map(|(i, (listener, upstream))| tokio::spawn(serve(listener, upstream, i == 3, state.clone())))
            .collect();
        let auth_url = cloud
            .info
            .auth_url
            .replacen(&upstreams[0], &state.rewrites[0].1, 1);
        Self {
            state,
            auth_url,
            tasks,
        }
    }

    /// Turns throttling of every request on or off.
    pub fn throttle(&self, on: bool) {
        self.state.throttle.store(on, Ordering::SeqCst);
    }

    /// Makes the `nth` write from now (1: the next) fail as a crash would: before it reaches
    /// the cloud, or (`landed`) after, losing only its answer.
    pub fn crash_at_write(&self, nth: usize, landed: bool) {
        *self.state.crash.lock().expect("crash lock") = Some(Crash { nth, landed });
    }

    /// Fails `percent` % of Octavia's writes from now (0: none), chosen from `seed`: a third
    /// each a 409 (never reaching Octavia), a 500 before Octavia, a 500 after it.
    pub fn fail_octavia_writes(&self, percent: u64, seed: u64) {
        *self.state.octavia_failures.lock().expect("failures lock") = (percent.min(100), seed | 1);
    }

    /// Octavia writes failed on purpose so far ([`CloudProxy::fail_octavia_writes`]).
    pub fn failed_octavia_writes(&self) -> usize {
        self.state.failed.load(Ordering::SeqCst)
    }

    /// Whether the crash set by [`CloudProxy::crash_at_write`] is still to come.
    pub fn crash_pending(&self) -> bool {
        self.state.crash.lock().expect("crash lock").is_some()
    }

    /// Writes (POST, PUT, PATCH, DELETE) that went through so far, Keystone's token requests
    /// left out.
    pub fn writes(&self) -> usize {
        self.state.writes.load(Ordering::SeqCst)
    }
}

impl Drop for CloudProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn serve(listener: TcpListener, upstream: String, octavia: bool, state: Arc<ProxyState>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let upstream = upstream.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| forward(req, upstream.clone(), octavia, state.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn plain(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn crashed() -> Response<Full<Bytes>> {
    let mut r = plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        r#"{"faultstring": "test proxy: a crash around this write"}"#.into(),
    );
    r.headers_mut()
        .insert("content-type", http::HeaderValue::from_static("application/json"));
    r
}

/// How a write fails, if it does.
enum Fault {
    /// Octavia's 409: the load balancer is busy; nothing written.
    Conflict,
    /// A 500 before (`landed: false`) or after the write reached the cloud.
    Crash(Crash),
}

/// Whether this write fails, and how; counts it.
fn fault_now(state: &ProxyState, method: &Method, path: &str, octavia: bool) -> Option<Fault> {
    let write = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if !write || path.contains("/auth/tokens") {
        return None;
    }
    state.writes.fetch_add(1, Ordering::SeqCst);
    if octavia {
        let mut failures = state.octavia_failures.lock().expect("failures lock");
        let (percent, rng) = &mut *failures;
        if *percent > 0 {
            *rng ^= *rng >> 12;
            *rng ^= *rng << 25;
            *rng ^= *rng >> 27;
            let roll = rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
            if roll % 100 < *percent {
                state.failed.fetch_add(1, Ordering::SeqCst);
                return Some(match roll % 3 {
                    0 => Fault::Conflict,
                    1 => Fault::Crash(Crash {
                        nth: 0,
                        landed: false,
                    }),
                    _ => Fault::Crash(Crash { nth: 0, landed: true }),
                });
            }
        }
    }
    crash_now(state).map(Fault::Crash)
}

fn conflict() -> Response<Full<Bytes>> {
    let mut r = plain(
        StatusCode::CONFLICT,
        r#"{"faultcode": "Client", "faultstring": "Load Balancer is immutable and cannot be updated (test proxy).", "debuginfo": null}"#.into(),
    );
    r.headers_mut()
        .insert("content-type", http::HeaderValue::from_static("application/json"));
    r
}

/// Whether this write is the crash set by [`CloudProxy::crash_at_write`].
fn crash_now(state: &ProxyState) -> Option<Crash> {
    let mut crash = state.crash.lock().expect("crash lock");
    let c = crash.as_mut()?;
    c.nth -= 1;
    if c.nth > 0 {
        return None;
    }
    crash.take()
}

async fn forward(
    req: Request<Incoming>,
    upstream: String,
    octavia: bool,
    state: Arc<ProxyState>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if state.throttle.load(Ordering::SeqCst) {
        let mut r = plain(
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"overLimit": {"code": 429, "message": "Rate limit exceeded (test proxy)", "retryAfter": "1"}}"#
                .into(),
        );
        r.headers_mut()
            .insert("retry-after", http::HeaderValue::from_static("1"));
        r.headers_mut()
            .insert("content-type", http::HeaderValue::from_static("application/json"));
        return Ok(r);
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let crash = match fault_now(&state, &parts.method, &path, octavia) {
        Some(Fault::Conflict) => return Ok(conflict()),
        Some(Fault::Crash(c)) if !c.landed => return Ok(crashed()),
        Some(Fault::Crash(c)) => Some(c),
        None => None,
    };
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, format!("request body: {e}"))),
    };
    let mut out = Request::builder()
        .method(parts.method)
        .uri(format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            out = out.header(name, value);
        }
    }
    let out = out.body(Full::new(body)).expect("proxied request");
    let resp = match state.http.request(out).await {
        Ok(r) => r,
        Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, format!("upstream: {e}"))),
    };
    if crash.is_some() {
        return Ok(crashed());
    }
    let (mut parts, body) = resp.into_parts();
    let mut body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, format!("upstream body: {e}"))),
    };
    // Keystone's catalog (and links) name the services: send the provider through us.
    if let Ok(text) = std::str::from_utf8(&body)
        && state
            .rewrites
            .iter()
            .any(|(from, _)| text.contains(from.as_str()))
    {
        let mut text = text.to_owned();
        for (from, to) in &state.rewrites {
            text = text.replace(from.as_str(), to);
        }
        body = Bytes::from(text);
    }
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    parts.headers.remove(http::header::CONNECTION);
    Ok(Response::from_parts(parts, Full::new(body)))
}
