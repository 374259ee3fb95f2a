//! `cloud-gateway`: flags and wiring only; the work is in the library.

use clap::Parser;
use cloud_gateway::cli::Args;

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let settings = telemetry::Settings {
        service: "cloud-gateway",
        version: env!("CARGO_PKG_VERSION"),
        format: args.log_format,
        default_filter: "info",
    };
    let telemetry = telemetry::init(settings, &args.traces);
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
    let grpc = tokio::net::TcpListener::bind(args.grpc_listen)
        .await
        .map_err(|err| fail(&format!("cannot listen on {}: {err}", args.grpc_listen), 1))?;
    let http = tokio::net::TcpListener::bind(args.http_listen)
        .await
        .map_err(|err| fail(&format!("cannot listen on {}: {err}", args.http_listen), 1))?;
    tracing::info!(grpc = %args.grpc_listen, http = %args.http_listen, provider = ?args.provider, "starting");
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
