//! A fault-injecting HTTP proxy in front of moto: forwards every request, or answers AWS's
//! throttling errors (EC2: `RequestLimitExceeded`, 503; ELBv2: `Throttling`, 400) while
//! throttling is on (or while a flag file exists, for a process outside the test to switch), a
//! given error for a given action, or fails a chosen write as a crash would. It records the
//! `Action` and the body of each request, to count and inspect API calls.

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use tokio::{net::TcpListener, task::JoinHandle};

const EC2_THROTTLED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"#;
const ELB_THROTTLED: &str = r#"<ErrorResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"#;

const EC2_INTERNAL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InternalError</Code><Message>fault proxy: a crash</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"#;

/// A write the proxy fails: the `nth` write from now (1 = the next one). `landed`: the write
/// reaches moto and only its answer is lost (a crash after the call); otherwise it never does
/// (a crash before it).
#[derive(Debug, Clone, Copy)]
struct Crash {
    nth: usize,
    landed: bool,
}

/// An error answered for every request with a given action.
#[derive(Debug, Clone)]
struct Failure {
    action: String,
    code: String,
}

#[derive(Default)]
struct State {
    throttle: AtomicBool,
    throttle_file: Mutex<Option<PathBuf>>,
    actions: Mutex<Vec<String>>,
    bodies: Mutex<Vec<String>>,
    crash: Mutex<Option<Crash>>,
    failures: Mutex<Vec<Failure>>,
}

/// The proxy; stops when dropped.
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`, the endpoint URL to give the provider.
    pub endpoint: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`http://127.0.0.1:PORT`) on an ephemeral loopback port.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let addr: SocketAddr = listener.local_addr().expect("proxy address");
        let state = Arc::new(State::default());
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let upstream: Arc<str> = upstream.trim_end_matches('/').into();
        let task = {
            let state = state.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let (state, client, upstream) = (state.clone(), client.clone(), upstream.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            handle(req, state.clone(), client.clone(), upstream.clone())
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Self {
            endpoint: format!("http://{addr}"),
            state,
            task,
        }
    }

    /// Turns throttling of every request on or off.
    pub fn throttle(&self, on: bool) {
        self.state.throttle.store(on, Ordering::SeqCst);
    }

    /// Throttles every request while `flag` exists (a hook of `cloudgateway-conformance`
    /// creates and removes it).
    pub fn throttle_while_exists(&self, flag: PathBuf) {
        *self.state.throttle_file.lock().expect("flag lock") = Some(flag);
    }

    /// How many requests carried `Action=<action>` so far.
    pub fn count(&self, action: &str) -> usize {
        self.state
            .actions
            .lock()
            .expect("actions lock")
            .iter()
            .filter(|a| *a == action)
            .count()
    }

    /// Makes the `nth` write from now fail as a crash would: before it reaches moto, or
    /// (`landed`) after, losing only its answer. Each write counts, whatever its service.
    pub fn crash_at_write(&self, nth: usize, landed: bool) {
        *self.state.crash.lock().expect("crash lock") = Some(Crash { nth, landed });
    }

    /// Answers every request with action `action` with the AWS error `code` (an EC2-style error
    /// body, status 400), until [`FaultProxy::heal`].
    pub fn fail(&self, action: &str, code: &str) {
        self.state.failures.lock().expect("failures lock").push(Failure {
            action: action.into(),
            code: code.into(),
        });
    }

    /// Stops every injected failure and crash.
    pub fn heal(&self) {
        self.state.failures.lock().expect("failures lock").clear();
        *self.state.crash.lock().expect("crash lock") = None;
    }

    /// The raw (form-encoded) body of every recorded request, in order.
    pub fn bodies(&self) -> Vec<String> {
        self.state.bodies.lock().expect("bodies lock").clone()
    }

    /// Every recorded action, in order.
    pub fn actions(&self) -> Vec<String> {
        self.state.actions.lock().expect("actions lock").clone()
    }

    /// The recorded actions that change something (anything but Describe*, Get*, List*).
    pub fn writes(&self) -> Vec<String> {
        self.actions()
            .into_iter()
            .filter(|a| !(a.starts_with("Describe") || a.starts_with("Get") || a.starts_with("List")))
            .collect()
    }

    /// Forgets the recorded actions.
    pub fn reset_counts(&self) {
        self.state.actions.lock().expect("actions lock").clear();
        self.state.bodies.lock().expect("bodies lock").clear();
    }
}

/// The signing service in the SigV4 credential scope: `.../<region>/<service>/aws4_request`.
fn service_of(req: &Request<Incoming>) -> String {
    req.headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .and_then(|c| c.split(['/', ',']).nth(3))
        .unwrap_or_default()
        .to_owned()
}

fn action_of(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .unwrap_or_default()
        .to_owned()
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "text/xml".parse().expect("header value"),
    );
    resp
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: Arc<str>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let service = service_of(&req);
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(reply(StatusCode::BAD_REQUEST, format!("unreadable body: {e}"))),
    };
    let action = action_of(&body);
    state.actions.lock().expect("actions lock").push(action.clone());
    state
        .bodies
        .lock()
        .expect("bodies lock")
        .push(String::from_utf8_lossy(&body).into_owned());
    if let Some(f) = state
        .failures
        .lock()
        .expect("failures lock")
        .iter()
        .find(|f| f.action == action)
    {
        let body = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{}</Code><Message>fault proxy</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"#,
            f.code
        );
        return Ok(reply(StatusCode::BAD_REQUEST, body));
    }
    let is_write =
        !(action.starts_with("Describe") || action.starts_with("Get") || action.starts_with("List"));
    let crash = if is_write {
        let mut crash = state.crash.lock().expect("crash lock");
        match crash.as_mut() {
            Some(c) if c.nth == 1 => crash.take(),
            Some(c) => {
                c.nth -= 1;
                None
            }
            None => None,
        }
    } else {
        None
    };
    if crash.is_some_and(|c| !c.landed) {
        return Ok(reply(StatusCode::INTERNAL_SERVER_ERROR, EC2_INTERNAL));
    }
    let flagged = state
        .throttle_file
        .lock()
        .expect("flag lock")
        .as_ref()
        .is_some_and(|flag| flag.exists());
    if flagged || state.throttle.load(Ordering::SeqCst) {
        return Ok(if service == "ec2" {
            reply(StatusCode::SERVICE_UNAVAILABLE, EC2_THROTTLED)
        } else {
            reply(StatusCode::BAD_REQUEST, ELB_THROTTLED)
        });
    }
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut forward = Request::builder()
        .method(parts.method)
        .uri(format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        forward = forward.header(name, value);
    }
    let Ok(forward) = forward.body(Full::new(body)) else {
        return Ok(reply(StatusCode::BAD_REQUEST, "bad request"));
    };
    match client.request(forward).await {
        Ok(_) if crash.is_some() => Ok(reply(StatusCode::INTERNAL_SERVER_ERROR, EC2_INTERNAL)),
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            Ok(Response::from_parts(parts, Full::new(body)))
        }
        Err(e) => Ok(reply(StatusCode::BAD_GATEWAY, format!("moto unreachable: {e}"))),
    }
}
