//! Spawning a gateway on loopback and connecting to it like a controller does.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use cloud_gateway::{GatewayConfig, server::Handles};
use gateway_api::{
    caller::NameCaller,
    v1::{
        identity_client::IdentityClient, instances_client::InstancesClient,
        load_balancers_client::LoadBalancersClient, routes_client::RoutesClient,
    },
};
use provider::Provider;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::{service::interceptor::InterceptedService, transport::Channel};

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

type Svc = InterceptedService<Channel, NameCaller>;

/// The four service clients on one connection.
#[derive(Clone)]
pub struct Clients {
    /// Identity service.
    pub identity: IdentityClient<Svc>,
    /// Instances service.
    pub instances: InstancesClient<Svc>,
    /// Load balancers service.
    pub load_balancers: LoadBalancersClient<Svc>,
    /// Routes service.
    pub routes: RoutesClient<Svc>,
    /// The raw channel, for hand-made requests.
    pub channel: Channel,
}

impl Clients {
    /// Connects to `endpoint` as `caller`.
    pub async fn connect(endpoint: &str, caller: &str) -> Self {
        let channel = Channel::from_shared(endpoint.to_owned())
            .expect("endpoint URI")
            .connect()
            .await
            .expect("connect to the gateway");
        Self::over(channel, caller)
    }

    /// Clients on `channel` (e.g. a TLS one), naming themselves `caller` in the header.
    pub fn over(channel: Channel, caller: &str) -> Self {
        let name = NameCaller::new(caller).expect("caller is ASCII");
        Self {
            identity: IdentityClient::with_interceptor(channel.clone(), name.clone()),
            instances: InstancesClient::with_interceptor(channel.clone(), name.clone()),
            load_balancers: LoadBalancersClient::with_interceptor(channel.clone(), name.clone()),
            routes: RoutesClient::with_interceptor(channel.clone(), name),
            channel,
        }
    }
}
