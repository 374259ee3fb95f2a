//! The `cloudgateway.v1` contract between the controllers and the cloud-gateway.
//!
//! # Layout
//! - [`v1`]: the prost messages and tonic clients/servers generated from `proto/cloudgateway/v1`
//!   at build time (by protox, so no system `protoc` is needed).
//! - [`error`]: the typed error carried in a gRPC status: encode on the server, decode on the
//!   client, so that nobody ever parses a message string.
//! - [`CALLER_HEADER`]: the metadata key a client names itself with, for fair queueing;
//!   [`caller::NameCaller`] sets it on every request of a client.

pub mod caller;
pub mod error;

/// Generated code for package `cloudgateway.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("cloudgateway.v1");
}

/// gRPC metadata key carrying the calling controller's identity (e.g. `service-controller`).
/// The gateway queues each identity fairly against the others.
pub const CALLER_HEADER: &str = "x-cloudgateway-caller";

/// Response metadata key naming the provider that answered (`simulator`, `aws`, ...): a client
/// notices a gateway swapped for another vendor on the first answer after it reconnects.
pub const PROVIDER_HEADER: &str = "x-cloudgateway-provider";

/// The identity used when a call carries no [`CALLER_HEADER`].
pub const ANONYMOUS_CALLER: &str = "anonymous";
