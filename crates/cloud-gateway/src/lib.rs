//! The cloud-gateway: the only component that talks to the cloud.
//!
//! Controllers call it over gRPC (`cloudgateway.v1`); it calls a [`provider::Provider`] on their
//! behalf, and is gentle with the cloud's API limits on everyone's behalf.
//!
//! # Layout
//! - [`capabilities`]: what the provider serves, and why not, said at start (log, metrics).
//! - [`server`]: wiring of the gRPC services, gRPC health and the HTTP side port; graceful shutdown.
//! - [`service`]: the gRPC handlers: authorization, validation, dispatch to the provider.
//! - [`tls`]: the gRPC port's mutual-TLS handshakes, with certificate files that may rotate.
//! - [`trace`]: a span per call, joined to the caller's trace (W3C trace context).
//! - [`auth`]: who calls (client certificate) and what they may call (the policy).
//! - [`convert`]: wire ↔ provider types, and request validation.
//! - [`dry_run`]: shadow mode: write calls planned, the provider's writes recorded, not made.
//! - [`gate`]: the one door to the provider: admission, metrics, adaptive slowdown.
//! - [`scheduler`]: token buckets for reads and writes, shared fairly between callers.
//! - [`adaptive`]: lowers the rate when the cloud throttles, recovers it gradually.
//! - [`clock`]: tokio's clock, so tests with paused time are exact.
//! - [`lookups`]: instance lookups: cache, joining in-flight lookups, batching.
//! - [`lb_reads`]: load-balancer reads (gets, and the check an ensure starts with) batched
//!   across Services.
//! - [`peers`]: replicas that share the provider limits (membership by probing each other).
//! - [`metrics`]: Prometheus metrics, served on the `side-port` crate's `/healthz`, `/readyz`,
//!   `/metrics` port.
//! - [`config`], [`cli`]: settings, and the command line that builds them and the provider;
//!   [`providers`]: the providers it can run (each crate registers its flags and constructor).

pub mod adaptive;
pub mod auth;
#[cfg(test)]
mod bare;
pub mod capabilities;
pub mod cli;
pub mod clock;
pub mod config;
pub mod convert;
pub mod dry_run;
pub mod gate;
pub mod lb_reads;
pub mod lookups;
pub mod metrics;
pub mod peers;
pub mod providers;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod tls;
pub mod trace;

pub use auth::Security;
pub use config::GatewayConfig;
pub use server::{ServeError, serve, serve_with_handles};
pub use tls_files::ServerFiles;
