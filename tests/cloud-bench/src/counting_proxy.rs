//! A forwarding HTTP/1 proxy that records each request's method, path and answer status.
//!
//! Headers go through unchanged (the `Host` too), so links an API builds from the request
//! (Nova's and Neutron's `next` pages) point back at the proxy and are counted as well.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

/// Arrival numbers, unique across the proxies of a process.
static NEXT: AtomicU64 = AtomicU64::new(0);

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use tokio::{net::TcpListener, task::JoinHandle};

/// One request as the proxy forwarded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Its arrival order at this proxy.
    pub seq: u64,
    /// `GET`, `POST`, ...
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The query string, empty when none.
    pub query: String,
    /// The upstream's answer (502 when it could not be reached; 0 while none came, or when the
    /// client went away first: the call was made all the same).
    pub status: u16,
}

impl Call {
    /// Whether the call changes something (anything but GET and HEAD).
    pub fn is_write(&self) -> bool {
        !matches!(self.method, Method::GET | Method::HEAD)
    }
}

/// The proxy; stops when dropped.
pub struct CountingProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    calls: Arc<Mutex<Vec<Call>>>,
    task: JoinHandle<()>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CountingProxy {
    /// Starts a proxy to `upstream` (`http://HOST:PORT`, any path is ignored) on an ephemeral
    /// loopback port.
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let upstream: Arc<str> = origin(upstream).into();
        let task = {
            let calls = calls.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (calls, client, upstream) = (calls.clone(), client.clone(), upstream.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            forward(req, calls.clone(), client.clone(), upstream.clone())
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Ok(Self {
            url: format!("http://{addr}"),
            calls,
            task,
        })
    }

    /// Every call since the start or the last [`CountingProxy::take`].
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// Every call since the start or the last take, forgetting them.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("calls lock"))
    }
}

/// `url` with its scheme and authority replaced by the proxy's: an endpoint of the catalog
/// made to go through it.
pub fn through(url: &str, proxy: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    format!("{proxy}{path}")
}

/// `scheme://host:port` of a URL.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}")
}

async fn forward(
    req: Request<Incoming>,
    calls: Arc<Mutex<Vec<Call>>>,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: Arc<str>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let path_and_query = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    // Recorded on arrival: a client that gives up before the answer still made the call.
    let seq = {
        let mut calls = calls.lock().expect("calls lock");
        let seq = NEXT.fetch_add(1, Ordering::Relaxed);
        calls.push(Call {
            seq,
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            status: 0,
        });
        seq
    };
    let mut request = Request::builder()
        .method(parts.method)
        .uri(format!("{upstream}{path_and_query}"));
    for (name, value) in &parts.headers {
        request = request.header(name, value);
    }
    let answer = match request.body(Full::new(body)) {
        Err(e) => status(
            StatusCode::BAD_REQUEST,
            format!("counting proxy: bad request: {e}"),
        ),
        Ok(request) => match client.request(request).await {
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                Response::from_parts(parts, Full::new(body))
            }
            Err(e) => status(
                StatusCode::BAD_GATEWAY,
                format!("counting proxy: {upstream}: {e}"),
            ),
        },
    };
    // A take() since the arrival moved the call out: its status stays unknown there.
    if let Some(call) = calls
        .lock()
        .expect("calls lock")
        .iter_mut()
        .rev()
        .find(|c| c.seq == seq)
    {
        call.status = answer.status().as_u16();
    }
    Ok(answer)
}

fn status(code: StatusCode, message: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(message)));
    *resp.status_mut() = code;
    resp
}

#[cfg(test)]
mod tests {
    use super::{origin, through};

    #[test]
    fn the_origin_drops_the_path() {
        assert_eq!(origin("http://127.0.0.1:15002/v2.1"), "http://127.0.0.1:15002");
        assert_eq!(origin("http://127.0.0.1:15000"), "http://127.0.0.1:15000");
        assert_eq!(origin("127.0.0.1:9/x"), "http://127.0.0.1:9");
    }

    #[test]
    fn endpoints_keep_their_path_behind_the_proxy() {
        assert_eq!(
            through("http://127.0.0.1:15002/v2.1", "http://127.0.0.1:9"),
            "http://127.0.0.1:9/v2.1"
        );
        assert_eq!(
            through("http://127.0.0.1:15001", "http://127.0.0.1:9"),
            "http://127.0.0.1:9"
        );
    }
}
