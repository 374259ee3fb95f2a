//! A kube client for fake-apiserver whose requests a test can delay or answer itself, to play
//! the API server's bad days (a slow events API, a conflict on a lease), recording what went out.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use kube::client::{Body, ConfigExt};
use tower::BoxError;

/// What to do with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Intercept {
    /// Send it on.
    Pass,
    /// Send it on after this long.
    Delay(Duration),
    /// Do not send it; answer this status with this JSON body (e.g. a `Status` object).
    Respond(u16, serde_json::Value),
}

/// A request as it went out (or was answered by the hook).
#[derive(Debug, Clone)]
pub struct Sent {
    /// When the hook saw it (before any delay).
    pub at: Instant,
    /// When it was sent on after its delay (`None` when the hook answered it).
    pub forwarded_at: Option<Instant>,
    /// Its method.
    pub method: Method,
    /// Its path.
    pub path: String,
}

/// Every request a hooked client made.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Sent>>>);

impl Log {
    /// The requests so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The requests with `method` whose path contains `fragment`.
    pub fn matching(&self, method: &Method, fragment: &str) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.method == method && s.path.contains(fragment))
            .collect()
    }

    fn push(&self, sent: Sent) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sent);
    }
}

/// A status `Status` body, as the API server answers errors.
pub fn status(code: u16, reason: &str, message: &str) -> Intercept {
    Intercept::Respond(
        code,
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code,
        }),
    )
}

/// A client for `server` that asks `hook` about every request (method, path) and logs it.
///
/// # Panics
/// When the server's address does not make a URI (never for a running server).
pub fn client<F>(server: &fake_apiserver::RunningServer, hook: F) -> (kube::Client, Log)
where
    F: Fn(&Method, &str) -> Intercept + Send + Sync + 'static,
{
    let config = server.kube_config().expect("fake-apiserver's URL is a URI");
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let hook = Arc::new(hook);
    let log = Log::default();
    let sent = log.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (http, hook, log) = (http.clone(), hook.clone(), sent.clone());
        async move {
            let at = Instant::now();
            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
            let decision = hook(&method, &path);
            let mut entry = Sent {
                at,
                forwarded_at: None,
                method,
                path,
            };
            match decision {
                Intercept::Respond(code, body) => {
                    log.push(entry);
                    let body = Full::new(Bytes::from(body.to_string()))
                        .map_err(|never| match never {})
                        .boxed();
                    return Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(body)
                        .map_err(BoxError::from);
                }
                Intercept::Delay(delay) => tokio::time::sleep(delay).await,
                Intercept::Pass => {}
            }
            entry.forwarded_at = Some(Instant::now());
            log.push(entry);
            let response = http.request(request).await.map_err(BoxError::from)?;
            Ok::<_, BoxError>(
                response.map(|b| -> BoxBody<Bytes, BoxError> { b.map_err(BoxError::from).boxed() }),
            )
        }
    });
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .service(service);
    (kube::Client::new(service, config.default_namespace), log)
}
