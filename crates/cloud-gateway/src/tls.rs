//! The gRPC port under mutual TLS: each accepted connection is handshaken with the server
//! configuration of the moment (rotated certificate files are used by the next connection),
//! off the accept loop, so a slow or hostile client never holds up the others.

use std::{sync::Arc, time::Duration};

use futures::Stream;
use tls_files::ReloadingServer;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_stream::wrappers::ReceiverStream;

use crate::metrics::Metrics;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS connections of `listener`, each one handshaken with `tls`'s current configuration.
/// A refused handshake (no client certificate, another CA's, garbage) is counted and dropped.
/// Stops accepting once the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ReloadingServer>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (tx, metrics, tls) = (tx.clone(), metrics.clone(), tls.clone());
            tokio::spawn(async move {
                // Reading the certificate files (when they changed) is off the accept loop too.
                let acceptor = TlsAcceptor::from(tls.current());
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(err)) => {
                        metrics.tls_refused.inc();
                        tracing::debug!(%peer, error = %err, "TLS handshake refused");
                    }
                    Err(_) => {
                        metrics.tls_refused.inc();
                        tracing::debug!(%peer, "TLS handshake timed out");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
