//! `fake-apiserver`: serves the in-memory Kubernetes API for the demo and benchmarks.

use std::net::SocketAddr;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "fake-apiserver",
    about = "An in-memory Kubernetes API server for tests and demos"
)]
struct Args {
    /// Address to listen on (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig pointing at this server to PATH.
    #[arg(long, value_name = "PATH")]
    kubeconfig_out: Option<std::path::PathBuf>,
    /// Changes kept per resource for watch resumption (older versions get 410 Gone).
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
    /// CIDR that service cluster IPs are allocated from.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: ipnet::IpNet,
    /// Node port range, e.g. 30000-32767.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
}

fn parse_range(s: &str) -> anyhow::Result<std::ops::RangeInclusive<u16>> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| anyhow::anyhow!("expected LOW-HIGH, got {s:?}"))?;
    let (a, b): (u16, u16) = (a.trim().parse()?, b.trim().parse()?);
    anyhow::ensure!(a <= b, "empty node port range {s:?}");
    Ok(a..=b)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let config = fake_apiserver::Config {
        bind: args.listen,
        watch_history_size: args.watch_history,
        service_cluster_ip_range: args.service_cluster_ip_range,
        node_port_range: parse_range(&args.service_node_port_range)?,
        ..Default::default()
    };
    let server = fake_apiserver::FakeApiServer::start(config).await?;
    if let Some(path) = &args.kubeconfig_out {
        server.write_kubeconfig(path)?;
        tracing::info!(path = %path.display(), "wrote kubeconfig");
    }
    tracing::info!(url = %server.url(), "serving");
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
