//! Spawning our gateway on loopback, for the contract cases and the gateway's own tests.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use cloud_gateway::{GatewayConfig, server::Handles};
use cloudgateway_conformance::{Clients, Target};
use provider::Provider;
use token_bucket::Limit;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

/// A gateway serving on 127.0.0.1 until dropped or [`RunningGateway::stop`]ped.
pub struct RunningGateway {
    /// gRPC address.
    pub grpc_addr: SocketAddr,
    /// HTTP side port address (`/healthz`, `/metrics`, provider admin routes).
    pub http_addr: SocketAddr,
    /// Metrics and scheduler of the running gateway.
    pub handles: Handles,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), cloud_gateway::ServeError>>>,
}

impl RunningGateway {
    /// Starts a gateway over `provider` on ephemeral loopback ports.
    pub async fn start(
        config: GatewayConfig,
        provider: Arc<dyn Provider>,
        extra_http: Option<axum::Router>,
    ) -> Self {
        let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind gRPC port");
        let http = TcpListener::bind("127.0.0.1:0").await.expect("bind HTTP port");
        Self::start_on(config, provider, extra_http, grpc, http).await
    }

    /// [`RunningGateway::start`] with the default configuration but the gateway's own read and
    /// write limits out of the way (1000 calls/s): a contract run's subject is the contract.
    pub async fn start_for_contract(provider: Arc<dyn Provider>) -> Self {
        let unlimited = Limit {
            rate: 1000.0,
            burst: 1000.0,
        };
        let config = GatewayConfig {
            read_limit: unlimited,
            write_limit: unlimited,
            ..GatewayConfig::default()
        };
        Self::start(config, provider, None).await
    }

    /// [`RunningGateway::start`] on listeners bound by the caller (e.g. to tell replicas each
    /// other's addresses first).
    pub async fn start_on(
        config: GatewayConfig,
        provider: Arc<dyn Provider>,
        extra_http: Option<axum::Router>,
        grpc: TcpListener,
        http: TcpListener,
    ) -> Self {
        let grpc_addr = grpc.local_addr().expect("gRPC address");
        let http_addr = http.local_addr().expect("HTTP address");
        let (stop, stopped) = oneshot::channel::<()>();
        let (handles_tx, handles_rx) = oneshot::channel();
        let task = tokio::spawn(cloud_gateway::serve_with_handles(
            config,
            provider,
            extra_http,
            grpc,
            http,
            async {
                let _ = stopped.await;
            },
            move |handles| {
                let _ = handles_tx.send(handles);
            },
        ));
        let handles = handles_rx.await.expect("the gateway failed to start");
        Self {
            grpc_addr,
            http_addr,
            handles,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://127.0.0.1:PORT` of the gRPC port.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// The gateway as the contract cases see it: its gRPC address, and its `/metrics`.
    pub fn target(&self) -> Target {
        Target::plaintext(&self.endpoint()).with_metrics_url(format!("http://{}/metrics", self.http_addr))
    }

    /// Clients that name themselves `caller`.
    pub async fn clients(&self, caller: &str) -> Clients {
        Clients::connect(&self.endpoint(), caller).await
    }

    /// Signals shutdown and waits for the drain to finish.
    pub async fn stop(mut self) {
        self.stop_inner().await;
    }

    async fn stop_inner(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(Duration::from_secs(30), task).await {
                Ok(Ok(Ok(()))) => {}
                other => panic!("gateway did not stop cleanly: {other:?}"),
            }
        }
    }
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
