//! Shared helpers for the integration tests: a server per test and a raw HTTP client for
//! checking status codes and bodies exactly.
#![allow(dead_code)]

use std::time::Duration;

use fake_apiserver::{Config, FakeApiServer, RunningServer};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub async fn start() -> RunningServer {
    start_with(Config::default()).await
}

pub async fn start_with(cfg: Config) -> RunningServer {
    FakeApiServer::start(cfg).await.expect("start fake-apiserver")
}

/// One HTTP/1.1 request with `Connection: close`; returns status, headers and JSON body.
pub async fn raw(
    server: &RunningServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String, Value) {
    let mut s = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.addr(),
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = serde_json::from_str(body).unwrap_or(Value::Null);
    (code, head.to_string(), json)
}

pub async fn get(server: &RunningServer, path: &str) -> (u16, Value) {
    let (c, _, v) = raw(server, "GET", path, "application/json", "").await;
    (c, v)
}

/// Asserts a `Status` failure with this code and reason.
pub fn assert_status(v: &Value, code: u16, reason: &str) {
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["apiVersion"], "v1", "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
}

/// Polls `f` until it returns Some, within a deadline.
pub async fn eventually<T, F, Fut>(within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn node(name: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("node")
}
