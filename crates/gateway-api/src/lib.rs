//! The `cloudgateway.v1` contract between the controllers and the cloud-gateway.
//!
//! # Layout
//! - [`v1`]: the prost messages and tonic clients/servers generated from `proto/cloudgateway/v1`
//!   at build time (by protox, so no system `protoc` is needed).
//! - [`error`]: the typed error carried in a gRPC status: encode on the server, decode on the
//!   client, so that nobody ever parses a message string.
//! - [`CALLER_HEADER`]: the metadata key a client names itself with, for fair queueing;
//!   [`caller::NameCaller`] sets it on every request of a client.
//! - [`DRY_RUN_HEADER`], [`DRY_RUN_WOULDS_HEADER`]: shadow mode, a write call planned and not
//!   made.
//! - [`NO_LOAD_BALANCER_YET_HEADER`]: an ensure of a Service that shows no sign of a load
//!   balancer, which the gateway may send straight to the provider.

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

/// Request metadata key by which a client asks for a write call in dry-run (value `true`): the
/// gateway plans the call against the cloud as it is, makes no write, and answers as if it had
/// succeeded. Honoured by gateways whose `Capabilities.dry_run` is true; a gateway started with
/// `--dry-run` treats every write call so.
pub const DRY_RUN_HEADER: &str = "cloudgateway-dry-run";

/// Response metadata of a write call answered in dry-run: [`DRY_RUN_HEADER`] carries the number
/// of provider writes the call would have made (`0`: nothing would change), and this key, when
/// that number is not 0, a compact JSON array of them: `[{"provider", "call", "target",
/// "request"}]`, cut to at most [`DRY_RUN_WOULDS_MAX_BYTES`] (whole entries only; the count
/// stays exact).
pub const DRY_RUN_WOULDS_HEADER: &str = "cloudgateway-dry-run-woulds";

/// Most bytes of [`DRY_RUN_WOULDS_HEADER`]'s value (gRPC metadata is kept small: HTTP/2
/// servers refuse header lists beyond a few tens of kilobytes).
pub const DRY_RUN_WOULDS_MAX_BYTES: usize = 8 * 1024;

/// Request metadata key (value `true`) by which the service controller says, on an
/// EnsureLoadBalancer, that the Service shows no sign of a load balancer yet: no
/// `status.loadBalancer.ingress` and no cleanup finalizer before this sync (the finalizer is
/// written before any cloud call, so a load balancer made before a crash always left it). The
/// gateway may then skip the read an ensure starts with, which could only answer "absent" and
/// would cost a call's latency. Only a hint: the provider's own ensure still finds a load
/// balancer of the Service's name (every ensure is idempotent), so a wrong hint costs one write,
/// never a second load balancer. A gateway that ignores it answers the same.
pub const NO_LOAD_BALANCER_YET_HEADER: &str = "cloudgateway-no-load-balancer-yet";

/// The identity used when a call carries no [`CALLER_HEADER`].
pub const ANONYMOUS_CALLER: &str = "anonymous";
