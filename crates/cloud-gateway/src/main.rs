//! `cloud-gateway`: flags and wiring only; the work is in the library.

use clap::Parser;
use cloud_gateway::cli::{Args, flag_of_a_provider_not_built};

#[tokio::main]
async fn main() {
    let args = Args::try_parse().unwrap_or_else(|err| match flag_of_a_provider_not_built(&err) {
        Some(not_built) => {
            eprintln!("cloud-gateway: {not_built}");
            std::process::exit(64)
        }
        None => err.exit(),
    });
    let settings = telemetry::Settings {
        service: "cloud-gateway",
        version: env!("CARGO_PKG_VERSION"),
        format: args.gateway.log_format,
        default_filter: "info",
    };
    let telemetry = telemetry::init(settings, &args.gateway.traces);
    let result = run(args).await;
    // The last calls' spans go out before the process exits.
    telemetry.shutdown().await;
    if let Err(code) = result {
        std::process::exit(code);
    }
}

/// Returns the exit code on failure: 64 for unusable configuration (EX_USAGE), 1 otherwise.
async fn run(args: Args) -> Result<(), i32> {
    let config = args.gateway_config().map_err(|err| fail(&err, 64))?;
    let (provider, extra_http) = args.provider().await.map_err(|err| fail(&err, 64))?;
    let (grpc_listen, http_listen) = (args.gateway.grpc_listen, args.gateway.http_listen);
    let grpc = tokio::net::TcpListener::bind(grpc_listen)
        .await
        .map_err(|err| fail(&format!("cannot listen on {grpc_listen}: {err}"), 1))?;
    let http = tokio::net::TcpListener::bind(http_listen)
        .await
        .map_err(|err| fail(&format!("cannot listen on {http_listen}: {err}"), 1))?;
    tracing::info!(grpc = %grpc_listen, http = %http_listen, provider = args.gateway.provider, "starting");
    cloud_gateway::serve(
        config,
        provider,
        extra_http,
        grpc,
        http,
        telemetry::shutdown_signal(),
    )
    .await
    .map_err(|err| fail(&err, 1))
}

fn fail(err: &dyn std::fmt::Display, code: i32) -> i32 {
    tracing::error!("{err}");
    eprintln!("cloud-gateway: {err}");
    code
}
