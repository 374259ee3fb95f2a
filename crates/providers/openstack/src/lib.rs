//! The OpenStack provider: a drop-in for `openstack-cloud-controller-manager` (OCCM,
//! kubernetes/cloud-provider-openstack). Nodes from Nova and Neutron with OCCM's providerIDs,
//! addresses and labels; pod-CIDR routes as Neutron router extra routes; Octavia load balancers
//! with their floating IPs and security groups; OCCM's `cloud.conf`.
//!
//! # Why a thin client and not `openstack_sdk`
//! `openstack_sdk` 0.22 (compute, network, load_balancer and identity only) was built and run
//! against Keystone, Nova and Neutron on loopback before this crate was written. It did not fit:
//! - it cannot authenticate with a trust, which OCCM supports (`trust-id`);
//! - it forces aws-lc-rs (C, cmake) through reqwest's `rustls` feature, beside the ring the
//!   whole tree uses, and turns on rustls' aws-lc-rs feature for every crate of the workspace;
//! - it always creates `$HOME/.osc` (a token cache), even with the cache disabled;
//! - as published, its auth plugins never register (a build-script bug; every connect failed
//!   without a request), `os-endpoint-type = internal` fails before authenticating, and an
//!   application credential by name sends the user's domain in the wrong field;
//! - it costs a cold debug build of 6.5 min on 2 cores (207 crates, 56 new to the tree).
//!
//! What we need of it is small: Keystone v3 tokens (password, application credential, token,
//! trust), the catalog, an in-memory token renewed before expiry and on a 401, and JSON over
//! hyper with rustls, which the tree already compiles. That is [`client`].
//!
//! # Layout
//! By API service, then by capability: the API modules hold each resource's one model and the
//! calls on it, and decide nothing; the capabilities decide (pure planners) and call them for
//! their I/O.
//! - [`auth`]: who we are to Keystone and which endpoints we use (plain data).
//! - [`cloud_config`]: OCCM's `cloud.conf`, read as OCCM reads it; [`clouds_yaml`]: the
//!   clouds.yaml it merges with `use-clouds`.
//! - [`client`]: the authenticated HTTP client (Keystone tokens, catalog, typed API errors).
//!   Keystone lives inside it because the client itself needs it to authenticate; the API
//!   modules below are the client's users, beside it at the crate root.
//! - [`nova`]: servers and flavors. [`neutron`]: ports, networks, subnets, routers, floating
//!   IPs, security groups. [`octavia`]: load balancers and what is under them. [`barbican`]:
//!   the one read of a TLS reference.
//! - [`lenient`]: how their answers are read (lenient fields; [`lenient::Strict`] where a
//!   caller writes a value back whole).
//! - [`nodes`]: OCCM's node decisions (providerIDs, addresses, zone, instance type), pure.
//! - [`instances`]: InstancesV2 for a batch of Nodes in a bounded number of calls.
//! - [`routes`]: pod-CIDR routes as the router's extra routes, owned through router tags.
//! - [`load_balancers`]: Octavia load balancers as OCCM builds them.
//! - [`provider`]: [`OpenStackProvider`], what the gateway serves; [`gateway_args`]: its
//!   registration with the gateway's command line.

pub mod auth;
pub mod barbican;
pub mod client;
pub mod cloud_config;
pub mod clouds_yaml;
pub mod gateway_args;
pub mod instances;
pub mod lenient;
pub mod load_balancers;
pub mod neutron;
pub mod nodes;
pub mod nova;
pub mod octavia;
pub mod provider;
pub mod routes;

pub use provider::OpenStackProvider;
