//! The controllers' side of mutual TLS to the gateway: each new connection is made with the
//! client configuration of the moment, so a client certificate (or CA) rotated on disk is used
//! by the next connection without a restart.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tls_files::ReloadingClient;
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

/// `https://host:port` as the `http://` URI tonic dials through this connector (which does the
/// TLS); the port defaults to 443 as https's does.
pub fn plain_uri(address: &str) -> String {
    match address.strip_prefix("https://") {
        Some(rest) => {
            let authority = rest.split('/').next().unwrap_or(rest);
            let has_port = authority
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                && !authority.ends_with(']');
            if has_port {
                format!("http://{rest}")
            } else {
                format!("http://{authority}:443")
            }
        }
        None => address.to_owned(),
    }
}

/// How long a connection (TCP and TLS handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A tonic connector dialing the gateway over TLS with the current client configuration,
/// verifying the server's certificate for `server_name` (the address's host when `None`).
#[derive(Clone)]
pub struct ReloadingTlsConnector {
    tls: Arc<ReloadingClient>,
    server_name: Option<String>,
}

impl ReloadingTlsConnector {
    /// Dials with `tls`.
    pub fn new(tls: ReloadingClient, server_name: Option<String>) -> Self {
        Self {
            tls: Arc::new(tls),
            server_name,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for ReloadingTlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.tls.current();
        let name = self.server_name.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("the gateway address has no host")?.to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let server_name =
                ServerName::try_from(name.unwrap_or_else(|| host.trim_matches(['[', ']']).to_owned()))?;
            let connect = async {
                let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
                tcp.set_nodelay(true)?;
                TlsConnector::from(config).connect(server_name, tcp).await
            };
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .map_err(|_| "connecting to the gateway timed out")??;
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::plain_uri;

    #[test]
    fn https_addresses_become_plain_ones_with_their_port() {
        let cases = [
            ("https://cloud-gateway:50051", "http://cloud-gateway:50051"),
            ("https://cloud-gateway", "http://cloud-gateway:443"),
            ("https://[::1]:50051", "http://[::1]:50051"),
            ("https://[::1]", "http://[::1]:443"),
            ("http://cloud-gateway:50051", "http://cloud-gateway:50051"),
        ];
        for (given, want) in cases {
            assert_eq!(plain_uri(given), want, "{given}");
        }
    }
}
