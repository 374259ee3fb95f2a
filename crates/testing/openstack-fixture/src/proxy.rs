//! [`CloudProxy`]: an HTTP proxy in front of the test cloud's Keystone, Nova, Neutron and Octavia
//! (one port each; it rewrites Keystone's catalog to point at itself, so a client given its
//! `auth_url` reaches every service through it) that injects what the test cloud never does:
//! - 429 with `Retry-After` on every request while throttling is on (Nova's and Neutron's rate
//!   limiting middlewares answer so);
//! - a crash at the nth write (POST, PUT, PATCH, DELETE) from now: the write never reaches the
//!   cloud, or it does and only its answer is lost (a 500), as when a process dies around a call;
//! - chaos ([`CloudProxy::chaos`]): a share of Octavia's and Neutron's writes failed (a 409 as
//!   Octavia answers a write to a busy load balancer and Neutron one to a floating IP it cannot
//!   allocate or associate, or a 500 before or after the write reached the cloud), and a share of
//!   the load balancers Octavia has made ACTIVE reported `PENDING_UPDATE` a while longer (a slow
//!   worker), each fault counted by kind ([`CloudProxy::faults`]);
//! - a late write ([`CloudProxy::land_late`]): the next matching write held back a while, then
//!   sent to the cloud whether or not its client still waits, as a loaded cloud carries out a
//!   request after its client timed out.
//!
//! Neutron's 409 is injected on floating IPs only: on a security-group rule Neutron's 409 means
//! "that rule exists", which a client rightly takes as success, so a fake one there would hide a
//! missing rule rather than test anything.

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::{Client as HttpClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use serde_json::Value;
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

/// What [`CloudProxy::chaos`] injects; all zero: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Chaos {
    /// Percent of Octavia's writes failed: a third each a 409 (never reaching Octavia), a 500
    /// before Octavia, a 500 after it.
    pub octavia_percent: u64,
    /// Percent of Neutron's writes failed: a 500 before or after Neutron, and on floating IPs
    /// also a 409 (never reaching Neutron), in equal shares.
    pub neutron_percent: u64,
    /// Percent of Octavia's successful writes after which their load balancer is reported
    /// `PENDING_UPDATE` for [`Chaos::slow_for`] more (a slow ACTIVE).
    pub slow_percent: u64,
    /// How much longer a slow load balancer stays pending: between these two.
    pub slow_for: (Duration, Duration),
}

/// A fault kind, as [`CloudProxy::faults`] counts it.
pub const OCTAVIA_409: &str = "Octavia 409";
/// See [`OCTAVIA_409`].
pub const OCTAVIA_500_BEFORE: &str = "Octavia 500, write not landed";
/// See [`OCTAVIA_409`].
pub const OCTAVIA_500_AFTER: &str = "Octavia 500, write landed";
/// See [`OCTAVIA_409`].
pub const NEUTRON_409: &str = "Neutron 409";
/// See [`OCTAVIA_409`].
pub const NEUTRON_500_BEFORE: &str = "Neutron 500, write not landed";
/// See [`OCTAVIA_409`].
pub const NEUTRON_500_AFTER: &str = "Neutron 500, write landed";
/// See [`OCTAVIA_409`].
pub const SLOW_ACTIVE: &str = "Octavia slow ACTIVE";

/// The chaos in force and its state.
struct ChaosState {
    chaos: Chaos,
    /// xorshift64* state choosing the faults.
    rng: u64,
    /// Load balancer id → until when it reads `PENDING_UPDATE`.
    slow: HashMap<String, Instant>,
    /// Faults injected so far, by kind.
    counts: BTreeMap<&'static str, u64>,
    /// The names of the load balancers whose create reached Octavia (its answer lost or not).
    created: Vec<String>,
}

impl ChaosState {
    fn roll(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }
}

/// Which cloud service a listener of the proxy fronts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    Identity,
    Compute,
    Network,
    LoadBalancer,
}

struct ProxyState {
    throttle: AtomicBool,
    chaos: Mutex<ChaosState>,
    crash: Mutex<Option<Crash>>,
    /// The next write whose path contains `.0` reaches the cloud `.1` late.
    late: Mutex<Option<(String, Duration)>>,
    writes: AtomicUsize,
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
            chaos: Mutex::new(ChaosState {
                chaos: Chaos::default(),
                rng: 0x9e37_79b9_7f4a_7c15,
                slow: HashMap::new(),
                counts: BTreeMap::new(),
                created: Vec::new(),
            }),
            crash: Mutex::new(None),
            late: Mutex::new(None),
            writes: AtomicUsize::new(0),
            rewrites,
            http: HttpClient::builder(TokioExecutor::new()).build_http(),
        });
        let kinds = [
            Upstream::Identity,
            Upstream::Compute,
            Upstream::Network,
            Upstream::LoadBalancer,
        ];
        let tasks = listeners
            .into_iter()
            .zip(upstreams.iter().cloned())
            .zip(kinds)
            .map(|((listener, upstream), kind)| tokio::spawn(serve(listener, upstream, kind, state.clone())))
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

    /// Holds the next write whose path contains `path_part` for `hold` before sending it to the
    /// cloud, which then carries it out even if its client gave up meanwhile.
    pub fn land_late(&self, path_part: &str, hold: Duration) {
        *self.state.late.lock().expect("late lock") = Some((path_part.to_owned(), hold));
    }

    /// Whether the write set by [`CloudProxy::land_late`] has reached the proxy.
    pub fn late_pending(&self) -> bool {
        self.state.late.lock().expect("late lock").is_some()
    }

    /// Injects `chaos` from now (`Chaos::default()`: nothing), its faults chosen from `seed`.
    /// Load balancers already slow stay so until their time is up.
    pub fn chaos(&self, chaos: Chaos, seed: u64) {
        let mut state = self.state.chaos.lock().expect("chaos lock");
        state.chaos = Chaos {
            octavia_percent: chaos.octavia_percent.min(100),
            neutron_percent: chaos.neutron_percent.min(100),
            slow_percent: chaos.slow_percent.min(100),
            slow_for: chaos.slow_for,
        };
        state.rng = seed | 1;
    }

    /// The faults [`CloudProxy::chaos`] injected so far, by kind ([`OCTAVIA_409`] and the
    /// others).
    pub fn faults(&self) -> BTreeMap<&'static str, u64> {
        self.state.chaos.lock().expect("chaos lock").counts.clone()
    }

    /// The names of the load balancers whose create reached Octavia through the proxy, in
    /// order (one whose answer the proxy lost included): a name twice is a load balancer made
    /// twice.
    pub fn load_balancers_created(&self) -> Vec<String> {
        self.state.chaos.lock().expect("chaos lock").created.clone()
    }

    /// The load balancers reported pending beyond Octavia's time right now.
    pub fn slow_now(&self) -> usize {
        let now = Instant::now();
        let state = self.state.chaos.lock().expect("chaos lock");
        state.slow.values().filter(|until| **until > now).count()
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

async fn serve(listener: TcpListener, upstream: String, kind: Upstream, state: Arc<ProxyState>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let upstream = upstream.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| forward(req, upstream.clone(), kind, state.clone()));
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
    /// A 409 (Octavia: the load balancer is busy; Neutron: no address); nothing written.
    Conflict(Upstream),
    /// A 500 before (`landed: false`) or after the write reached the cloud.
    Crash(Crash),
}

fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// Whether this write fails, and how; counts it.
fn fault_now(state: &ProxyState, method: &Method, path: &str, kind: Upstream) -> Option<Fault> {
    if !is_write(method) || path.contains("/auth/tokens") {
        return None;
    }
    state.writes.fetch_add(1, Ordering::SeqCst);
    let mut chaos = state.chaos.lock().expect("chaos lock");
    let percent = match kind {
        Upstream::LoadBalancer => chaos.chaos.octavia_percent,
        Upstream::Network => chaos.chaos.neutron_percent,
        Upstream::Identity | Upstream::Compute => 0,
    };
    if percent > 0 {
        let roll = chaos.roll();
        if roll % 100 < percent {
            // Neutron answers 409 to a write of a floating IP it cannot allocate or associate;
            // elsewhere its 409 means "exists" (see the module's comment).
            let conflicts = kind == Upstream::LoadBalancer || path.contains("/floatingips");
            let choice = if conflicts {
                roll / 100 % 3
            } else {
                1 + roll / 100 % 2
            };
            let octavia = kind == Upstream::LoadBalancer;
            let (fault, name) = match choice {
                0 => (
                    Fault::Conflict(kind),
                    if octavia { OCTAVIA_409 } else { NEUTRON_409 },
                ),
                1 => (
                    Fault::Crash(Crash {
                        nth: 0,
                        landed: false,
                    }),
                    if octavia {
                        OCTAVIA_500_BEFORE
                    } else {
                        NEUTRON_500_BEFORE
                    },
                ),
                _ => (
                    Fault::Crash(Crash { nth: 0, landed: true }),
                    if octavia {
                        OCTAVIA_500_AFTER
                    } else {
                        NEUTRON_500_AFTER
                    },
                ),
            };
            *chaos.counts.entry(name).or_default() += 1;
            return Some(fault);
        }
    }
    drop(chaos);
    crash_now(state).map(Fault::Crash)
}

fn conflict(kind: Upstream) -> Response<Full<Bytes>> {
    let body = if kind == Upstream::LoadBalancer {
        r#"{"faultcode": "Client", "faultstring": "Load Balancer is immutable and cannot be updated (test proxy).", "debuginfo": null}"#
    } else {
        r#"{"NeutronError": {"type": "IpAddressGenerationFailure", "message": "No more IP addresses available on network (test proxy).", "detail": ""}}"#
    };
    let mut r = plain(StatusCode::CONFLICT, body.into());
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
    kind: Upstream,
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
    let crash = match fault_now(&state, &parts.method, &path, kind) {
        Some(Fault::Conflict(kind)) => return Ok(conflict(kind)),
        Some(Fault::Crash(c)) if !c.landed => return Ok(crashed()),
        Some(Fault::Crash(c)) => Some(c),
        None => None,
    };
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, format!("request body: {e}"))),
    };
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            out = out.header(name, value);
        }
    }
    let write = is_write(&parts.method);
    let out = out.body(Full::new(body.clone())).expect("proxied request");
    let late = if write {
        let mut late = state.late.lock().expect("late lock");
        match late.take() {
            Some((part, hold)) if path.contains(&part) => Some(hold),
            other => {
                *late = other;
                None
            }
        }
    } else {
        None
    };
    let http = state.http.clone();
    let exchange = async move {
        if let Some(hold) = late {
            tokio::time::sleep(hold).await;
        }
        let resp = http.request(out).await.map_err(|e| format!("upstream: {e}"))?;
        let (parts, answer) = resp.into_parts();
        let answer = answer
            .collect()
            .await
            .map_err(|e| format!("upstream body: {e}"))?
            .to_bytes();
        Ok::<_, String>((parts, answer))
    };
    // A late write is sent on its own task: it lands even when its client has gone.
    let exchanged = match late {
        Some(_) => tokio::spawn(exchange)
            .await
            .unwrap_or_else(|e| Err(format!("late write: {e}"))),
        None => exchange.await,
    };
    let (mut parts, mut answer) = match exchanged {
        Ok(x) => x,
        Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, e)),
    };
    if kind == Upstream::LoadBalancer && parts.status.is_success() {
        if write {
            after_octavia_write(&state, &path, &body, &answer);
        } else if path.contains("/lbaas/loadbalancers") {
            answer = slowed(&state, answer);
        }
    }
    if crash.is_some() {
        return Ok(crashed());
    }
    let mut body = answer;
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

/// The id of the load balancer an Octavia write touched: in its answer (a load balancer, or a
/// listener or pool naming its load balancers), else in its request (`loadbalancer_id`).
fn load_balancer_of(request: &[u8], answer: &[u8]) -> Option<String> {
    let answer: Value = serde_json::from_slice(answer).unwrap_or(Value::Null);
    let request: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
    let object = answer
        .as_object()
        .and_then(|o| o.values().next())
        .unwrap_or(&Value::Null);
    let id = if answer.get("loadbalancer").is_some() {
        object["id"].as_str()
    } else {
        object["loadbalancers"][0]["id"]
            .as_str()
            .or_else(|| object["loadbalancer_id"].as_str())
            .or_else(|| request.as_object().and_then(|o| o.values().next())?["loadbalancer_id"].as_str())
    };
    id.map(str::to_owned)
}

/// After an Octavia write went through: a create's name recorded, and, by chance, its load
/// balancer made slow.
fn after_octavia_write(state: &ProxyState, path: &str, request: &[u8], answer: &[u8]) {
    let mut chaos = state.chaos.lock().expect("chaos lock");
    if path.ends_with("/lbaas/loadbalancers") {
        let body: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
        if let Some(name) = body["loadbalancer"]["name"].as_str() {
            chaos.created.push(name.to_owned());
        }
    }
    if chaos.chaos.slow_percent == 0 {
        return;
    }
    let roll = chaos.roll();
    if roll % 100 >= chaos.chaos.slow_percent {
        return;
    }
    let Some(id) = load_balancer_of(request, answer) else {
        return;
    };
    let (lo, hi) = chaos.chaos.slow_for;
    let span = hi.saturating_sub(lo).as_millis() as u64;
    let extra = lo + Duration::from_millis(chaos.roll() % (span + 1));
    chaos.slow.insert(id, Instant::now() + extra);
    *chaos.counts.entry(SLOW_ACTIVE).or_default() += 1;
}

/// A read of load balancers with each slow one that Octavia has made ACTIVE shown
/// `PENDING_UPDATE`.
fn slowed(state: &ProxyState, answer: Bytes) -> Bytes {
    let now = Instant::now();
    let slow: Vec<String> = {
        let mut chaos = state.chaos.lock().expect("chaos lock");
        chaos.slow.retain(|_, until| *until > now);
        chaos.slow.keys().cloned().collect()
    };
    if slow.is_empty() {
        return answer;
    }
    let Ok(mut json) = serde_json::from_slice::<Value>(&answer) else {
        return answer;
    };
    let mut changed = false;
    let mut pend = |lb: &mut Value| {
        let id = lb["id"].as_str().unwrap_or_default();
        if lb["provisioning_status"] == "ACTIVE" && slow.iter().any(|s| s == id) {
            lb["provisioning_status"] = Value::from("PENDING_UPDATE");
            changed = true;
        }
    };
    if let Some(list) = json.get_mut("loadbalancers").and_then(Value::as_array_mut) {
        list.iter_mut().for_each(&mut pend);
    } else if let Some(lb) = json.get_mut("loadbalancer") {
        pend(lb);
    }
    if changed {
        Bytes::from(json.to_string())
    } else {
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_balancer_of_a_write_is_found_in_its_answer_or_its_request() {
        let cases: [(&str, &str, Option<&str>); 5] = [
            (
                "{}",
                r#"{"loadbalancer": {"id": "lb1", "name": "x"}}"#,
                Some("lb1"),
            ),
            (
                "{}",
                r#"{"listener": {"id": "l1", "loadbalancers": [{"id": "lb2"}]}}"#,
                Some("lb2"),
            ),
            (
                "{}",
                r#"{"member": {"id": "m1", "loadbalancer_id": "lb3"}}"#,
                Some("lb3"),
            ),
            (
                r#"{"pool": {"loadbalancer_id": "lb4"}}"#,
                r#"{"pool": {"id": "p1"}}"#,
                Some("lb4"),
            ),
            ("", "", None),
        ];
        for (request, answer, want) in cases {
            assert_eq!(
                load_balancer_of(request.as_bytes(), answer.as_bytes()).as_deref(),
                want,
                "{request} {answer}"
            );
        }
    }
}
