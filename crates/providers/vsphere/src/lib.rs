//! vSphere as cloud-provider-vsphere (CPI) serves it on the node side: `cloud-gateway --provider
//! vsphere --cloud-config vsphere.conf`.
//!
//! # Layout
//! - [`config`]: CPI's `vsphere.conf`, YAML or INI, read unchanged; [`credentials`]: CPI's
//!   Secret layouts.
//! - [`provider_id`], [`addresses`], [`instance_type`], [`guestinfo`]: CPI's rules, pure,
//!   table-tested with CPI's own cases.
//! - [`soap`]: the SOAP client of our own (one long-lived session per vCenter); [`tagging`]:
//!   the tagging REST API beside it (one session too).
//! - [`zones`]: zones and regions from tags, CPI's walk up the inventory, over tags read once
//!   per period.
//! - [`inventory`]: which VM a node is, over one read of every VM's identity per batch;
//!   [`nodes`]: what a VM found answers, and when a VM is definitely gone.
//! - [`provider`]: the [`provider::Provider`] the gateway serves; [`gateway_args`] its
//!   registration.

pub mod addresses;
pub mod config;
pub mod credentials;
pub mod gateway_args;
pub mod guestinfo;
pub mod instance_type;
pub mod inventory;
pub mod nodes;
pub mod provider;
pub mod provider_id;
pub mod soap;
pub mod tagging;
pub mod zones;

pub use provider::VsphereProvider;
