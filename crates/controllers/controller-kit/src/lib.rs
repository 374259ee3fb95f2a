//! What the four controllers share.
//!
//! # Layout
//! - [`names`]: controller IDs, client identities, taints, labels, annotations, finalizers.
//! - [`kube_client`]: the Kubernetes client with a client-side QPS limit.
//! - [`leader`]: leader election through a Lease.
//! - [`cluster_identity`]: the cluster's identity (the `kube-system` Namespace's UID), carried by
//!   load-balancer calls so a provider leaves alone what another cluster made.
//! - [`gateway`]: the typed cloud-gateway client (retries, reconnects, caller identity).
//! - [`gateway_balance`]: calls spread over every gateway replica the name resolves to.
//! - [`gateway_batching`]: concurrent one-node lookups merged into `BatchLookupInstances` calls,
//!   each looking ahead at the nodes about to be looked up.
//! - [`gateway_provider`]: which provider the gateway serves, as its answers say.
//! - [`gateway_tls`]: mutual TLS to the gateway with certificate files that may rotate.
//! - [`load_balancers`]: the cloud's load balancers behind a trait, Services in, statuses out.
//! - [`routes`]: the cloud's pod-CIDR routes behind a trait.
//! - [`metrics`]: metric helpers (the side port and its registry are the `side-port` crate).
//! - [`dry_run`]: shadow mode: every write planned, reported and not made.
//! - [`events`]: best-effort Kubernetes events.
//! - [`node`]: reading Nodes: readiness, taints, provider references.
//! - [`node_watch`]: a Node watch into a cache that signals when what a controller derives from
//!   the nodes changed.
//! - [`patch`]: resourceVersion-guarded merge patches, fenced by leadership, retried on conflict.
//! - [`relist`]: a relist's objects reach a Controller once its store holds them.
//! - [`shards`]: scale-out: shards of the work, each owned through a Lease of its own.
//! - [`runner`]: the common start-up of a controller binary.
//! - [`spans`]: one trace per reconcile: its root span and how it ended.
//! - [`validation`]: label key and value rules, as the API server checks them.
//! - [`watch_backoff`]: how a failing watch waits: a few seconds at most.
//! - [`workqueue`]: upstream's `workqueue_*` metrics for a kube-runtime controller's queue.

pub mod cluster_identity;
pub mod dry_run;
pub mod events;
pub mod gateway;
pub mod gateway_balance;
pub mod gateway_batching;
pub mod gateway_provider;
pub mod gateway_tls;
pub mod kube_client;
pub mod leader;
pub mod load_balancers;
pub mod metrics;
pub mod names;
pub mod node;
pub mod node_watch;
pub mod patch;
pub mod relist;
pub mod routes;
pub mod runner;
pub mod shards;
pub mod spans;
pub mod validation;
pub mod watch_backoff;
pub mod workqueue;
