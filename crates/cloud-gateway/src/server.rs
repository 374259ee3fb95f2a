//! Wiring: the gRPC services, gRPC health and the HTTP side port, with graceful shutdown.

use std::{future::Future, sync::Arc};

use futures::FutureExt;
use gateway_api::v1::{
    self as pb, identity_server::IdentityServer, instances_server::InstancesServer,
    load_balancers_server::LoadBalancersServer, routes_server::RoutesServer,
};
use provider::Provider;
use tls_files::ReloadingServer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::{
    auth::Authorizer, auth::Security, config::GatewayConfig, dry_run::DryRunLog, gate::ProviderGate,
    lb_reads::LoadBalancerReads, lookups::InstanceLookups, metrics::Metrics, peers::Membership,
    scheduler::Scheduler, service::GatewayService, tls,
};

/// How long the provider's shutdown ([`Provider::shutdown`]) may take.
pub const PROVIDER_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the gateway stopped other than by its shutdown signal.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The settings are inconsistent.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// The HTTP side port failed.
    #[error("HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
}

/// The gateway's live parts, for tests and the binary.
pub struct Handles {
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// The admission scheduler.
    pub scheduler: Arc<Scheduler>,
}

/// Serves `cloudgateway.v1` on `grpc` and health/metrics (plus `extra_http`, e.g. the
/// simulator's admin API) on `http`, until `shutdown` completes; then stops accepting calls,
/// reports not-ready, and lets in-flight calls finish for up to the configured grace period.
pub async fn serve(
    config: GatewayConfig,
    provider: Arc<dyn Provider>,
    extra_http: Option<axum::Router>,
    grpc: TcpListener,
    http: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with_handles(config, provider, extra_http, grpc, http, shutdown, |_| {}).await
}

/// [`serve`], handing the live parts to `on_start` first (tests read metrics and rates).
pub async fn serve_with_handles(
    config: GatewayConfig,
    provider: Arc<dyn Provider>,
    extra_http: Option<axum::Router>,
    grpc: TcpListener,
    http: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    on_start: impl FnOnce(Handles),
) -> Result<(), ServeError> {
    config.validate().map_err(ServeError::InvalidConfig)?;
    let metrics = Arc::new(Metrics::new());
    let scheduler = Scheduler::start(
        config.read_limit,
        config.write_limit,
        config.adaptive,
        metrics.clone(),
    );
    let gate = Arc::new(ProviderGate::new(scheduler.clone(), metrics.clone()));
    let lookups = InstanceLookups::new(provider.clone(), gate.clone(), metrics.clone(), config.lookups);
    let lb_reads = LoadBalancerReads::new(provider.clone(), gate.clone(), metrics.clone(), config.lb_reads);
    let limits = pb::ProviderLimits {
        max_instance_batch: u32::try_from(
            config
                .lookups
                .batch_size
                .min(provider.limits().max_instance_batch),
        )
        .unwrap_or(u32::MAX),
        read_rate_per_second: config.read_limit.rate,
        write_rate_per_second: config.write_limit.rate,
    };
    crate::capabilities::report(provider.as_ref(), &metrics);
    let authorizer = Authorizer::new(config.security.clone(), metrics.denied.clone());
    let dry_run = DryRunLog::new(config.dry_run, metrics.dry_run_woulds.clone());
    if config.dry_run {
        tracing::warn!(
            "dry-run: write calls are answered from a plan; the provider's writes are recorded (log, \
             cloudgateway_dry_run_woulds_total, /dry-run) and not made"
        );
    }
    let service = GatewayService::new(
        provider.clone(),
        gate,
        lookups,
        lb_reads,
        metrics.clone(),
        limits,
        authorizer,
        dry_run.clone(),
    );
    on_start(Handles {
        metrics: metrics.clone(),
        scheduler: scheduler.clone(),
    });

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<IdentityServer<GatewayService>>()
        .await;
    health_reporter
        .set_serving::<InstancesServer<GatewayService>>()
        .await;
    health_reporter
        .set_serving::<LoadBalancersServer<GatewayService>>()
        .await;
    health_reporter
        .set_serving::<RoutesServer<GatewayService>>()
        .await;

    let readiness = side_port::Readiness::new();
    let mut app = side_port::router(readiness.clone(), metrics.registry()).merge(dry_run.router());
    if let Some(extra) = extra_http {
        app = app.merge(extra);
    }
    let membership = config.peers.clone().map(Membership::new);
    if let Some(membership) = &membership {
        let instance = membership.instance().to_owned();
        app = app.route(
            "/peer",
            axum::routing::get(move || std::future::ready(instance.clone())),
        );
    }
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http_task = tokio::spawn(async move {
        axum::serve(http, app)
            .with_graceful_shutdown(async {
                let _ = http_stop_rx.await;
            })
            .await
    });

    // Sharing the provider limits: counted by every peer before serving a single call.
    let probing = match membership {
        Some(membership) => {
            membership.probe(&scheduler, &metrics).await;
            readiness.set_not_ready("waiting for the other gateway replicas to count this one");
            tokio::time::sleep(membership.warm_up()).await;
            membership.probe(&scheduler, &metrics).await;
            Some(tokio::spawn(membership.run(scheduler.clone(), metrics.clone())))
        }
        None => None,
    };
    readiness.set_ready();
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        .timeout(config.max_call_duration)
        .layer(crate::trace::TraceCallsLayer)
        .add_service(health_service)
        .add_service(IdentityServer::from_arc(service.clone()))
        .add_service(InstancesServer::from_arc(service.clone()))
        .add_service(LoadBalancersServer::from_arc(service.clone()))
        .add_service(RoutesServer::from_arc(service));
    let drained = async {
        let _ = drain_rx.await;
    };
    let grpc_server = match &config.security {
        Security::MutualTls { files, .. } => {
            let tls =
                ReloadingServer::new(files.clone()).map_err(|e| ServeError::InvalidConfig(e.to_string()))?;
            let incoming = tls::incoming(grpc, Arc::new(tls), metrics.clone());
            router.serve_with_incoming_shutdown(incoming, drained).boxed()
        }
        Security::InsecurePlaintext { .. } => router
            .serve_with_incoming_shutdown(TcpListenerStream::new(grpc), drained)
            .boxed(),
    };
    tokio::pin!(grpc_server);
    tracing::info!(provider = provider.name(), "cloud-gateway serving");

    let result = tokio::select! {
        result = &mut grpc_server => result.map_err(ServeError::from),
        () = shutdown => {
            tracing::info!(grace = ?config.shutdown_grace, "shutting down: draining in-flight calls");
            readiness.set_not_ready("shutting down");
            health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
            let _ = drain_tx.send(());
            match tokio::time::timeout(config.shutdown_grace, &mut grpc_server).await {
                Ok(result) => result.map_err(ServeError::from),
                Err(_) => {
                    tracing::warn!("drain grace period over; abandoning the calls still in flight");
                    Ok(())
                }
            }
        }
    };
    scheduler.close();
    // The provider's sessions end with its last call (bounded: a cloud that does not answer
    // does not hold the exit).
    if tokio::time::timeout(PROVIDER_SHUTDOWN, provider.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?PROVIDER_SHUTDOWN, "the provider's shutdown did not finish; exiting anyway");
    }
    if let Some(probing) = probing {
        probing.abort();
    }
    // Last: the side port, whose /peer keeps this replica counted until its calls are done.
    let _ = http_stop_tx.send(());
    match http_task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(ServeError::Http(err)),
        Err(join) => tracing::error!(error = %join, "HTTP server task failed"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bare::Bare;

    /// The provider's shutdown runs when the gateway stops (vSphere logs its sessions out
    /// there), and not before.
    #[tokio::test]
    async fn the_providers_shutdown_runs_when_the_gateway_stops() {
        let provider = Arc::new(Bare::default());
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(serve(
            GatewayConfig::default(),
            provider.clone(),
            None,
            grpc,
            http,
            async {
                let _ = stopped.await;
            },
        ));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!provider.closed(), "not while serving");
        stop.send(()).unwrap();
        serving.await.unwrap().unwrap();
        assert!(provider.closed());
    }
}
