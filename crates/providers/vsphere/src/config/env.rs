//! CPI's environment overrides (`FromEnv`, `FromCPIEnv`; reference §7.4), applied after the file
//! is read and checked, as CPI applies them:
//!
//! - `VSPHERE_LABEL_ZONE`, `VSPHERE_LABEL_REGION`, `VSPHERE_NODES_*` and
//!   `VSPHERE_SECRETS_DIRECTORY` replace the file's values;
//! - `VSPHERE_VCENTER_<ID>=<server>` with `VCENTER_<ID>_{USERNAME,PASSWORD,SERVER,PORT,INSECURE,
//!   DATACENTERS,CAFILE,THUMBPRINT,SECRET_NAME,SECRET_NAMESPACE,IP_FAMILY}` adds (or replaces) a
//!   vCenter;
//! - the global connection variables (`VSPHERE_VCENTER`, `VSPHERE_USER`, `VSPHERE_PASSWORD`, …)
//!   reach no vCenter in CPI (its vCenters are built before they are read): ignored here too,
//!   each named in a notice.
//!
//! Where this differs from CPI, on purpose: CPI reads `VCENTER_<ID>_INSECURE` and
//! `VCENTER_<ID>_IP_FAMILY` only when they are absent (an inverted check, so such a vCenter has
//! no IP family and finds no addresses) and takes `VSPHERE_VCENTER_PORT` for a vCenter named
//! after the port; here they are read when set, and the port variable is not a vCenter.

use std::path::PathBuf;

use super::{Config, ConfigError, Environment, SecretRef, VCenter};
use crate::addresses::IpFamily;

/// The global variables CPI reads after its vCenters are built: they change none.
const NO_EFFECT: &[&str] = &[
    "VSPHERE_VCENTER",
    "VSPHERE_VCENTER_PORT",
    "VSPHERE_USER",
    "VSPHERE_PASSWORD",
    "VSPHERE_DATACENTER",
    "VSPHERE_SECRET_NAME",
    "VSPHERE_SECRET_NAMESPACE",
    "VSPHERE_ROUNDTRIP_COUNT",
    "VSPHERE_INSECURE",
    "VSPHERE_CAFILE",
    "VSPHERE_THUMBPRINT",
];

/// Applies the variables of `env` to `config`.
///
/// # Errors
/// A variable whose value cannot be used (a port, a CIDR, an IP family), named.
pub fn apply(
    config: &mut Config,
    env: Environment<'_>,
    notices: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let var = |name: &str| (env.var)(name).filter(|v| !v.is_empty());
    if let Some(zone) = var("VSPHERE_LABEL_ZONE") {
        config.labels.zone = Some(zone);
    }
    if let Some(region) = var("VSPHERE_LABEL_REGION") {
        config.labels.region = Some(region);
    }
    if let Some(dir) = var("VSPHERE_SECRETS_DIRECTORY") {
        config.secrets_directory = Some(PathBuf::from(dir));
    }
    let cidrs = |name: &str, text: String| {
        list(&text)
            .map(|item| {
                item.parse::<ipnet::IpNet>().map_err(|_| {
                    ConfigError::new(format!("environment variable {name}: {item:?} is not a CIDR"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let nodes = &mut config.nodes;
    for (name, list) in [
        (
            "VSPHERE_NODES_INTERNAL_NETWORK_SUBNET_CIDR",
            &mut nodes.internal_cidrs,
        ),
        (
            "VSPHERE_NODES_EXTERNAL_NETWORK_SUBNET_CIDR",
            &mut nodes.external_cidrs,
        ),
    ] {
        if let Some(text) = var(name) {
            *list = cidrs(name, text)?;
        }
    }
    if let Some(network) = var("VSPHERE_NODES_INTERNAL_VM_NETWORK_NAME") {
        nodes.internal_network = Some(network);
    }
    if let Some(network) = var("VSPHERE_NODES_EXTERNAL_VM_NETWORK_NAME") {
        nodes.external_network = Some(network);
    }
    for name in NO_EFFECT.iter().filter(|n| var(n).is_some()) {
        notices.push(format!(
            "environment variable {name}: no effect (CPI reads it after its vCenters are built, so it changes none); set it in vsphere.conf or as VSPHERE_VCENTER_<ID>"
        ));
    }
    let mut ids: Vec<String> = (env.names)()
        .into_iter()
        .filter_map(|n| n.strip_prefix("VSPHERE_VCENTER_").map(str::to_owned))
        .filter(|id| id != "PORT")
        .collect();
    ids.sort();
    for id in ids {
        let Some(tenant) = var(&format!("VSPHERE_VCENTER_{id}")) else {
            continue;
        };
        let vc = vcenter(&id, &tenant, &var)?;
        match config.vcenters.iter_mut().find(|v| v.tenant == tenant) {
            Some(existing) => *existing = vc,
            None => config.vcenters.push(vc),
        }
    }
    Ok(())
}

/// The vCenter `VSPHERE_VCENTER_<id>` names, from its `VCENTER_<id>_*` variables.
fn vcenter(id: &str, tenant: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<VCenter, ConfigError> {
    let key = |field: &str| var(&format!("VCENTER_{id}_{field}"));
    let bad = |field: &str, why: String| {
        ConfigError::new(format!("environment variable VCENTER_{id}_{field}: {why}"))
    };
    let port = match key("PORT") {
        None => 443,
        Some(p) => p
            .parse()
            .map_err(|e| bad("PORT", format!("{p:?} is not a port: {e}")))?,
    };
    let insecure = match key("INSECURE").as_deref() {
        None => false,
        Some(v) => gcfg::parse_bool(v).ok_or_else(|| bad("INSECURE", format!("{v:?} is not a boolean")))?,
    };
    let ip_families = match key("IP_FAMILY") {
        None => vec![IpFamily::V4],
        Some(v) => list(&v)
            .map(|f| {
                IpFamily::parse(f)
                    .ok_or_else(|| bad("IP_FAMILY", format!("{f:?} is not an IP family (ipv4, ipv6)")))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let secret = key("SECRET_NAME").map(|name| SecretRef {
        name,
        namespace: key("SECRET_NAMESPACE").unwrap_or_default(),
    });
    Ok(VCenter {
        tenant: tenant.to_owned(),
        server: key("SERVER").unwrap_or_else(|| tenant.to_owned()),
        port,
        user: key("USERNAME").unwrap_or_default(),
        password: super::Secret(key("PASSWORD").unwrap_or_default()),
        insecure,
        ca_file: key("CAFILE").map(PathBuf::from),
        thumbprint: key("THUMBPRINT"),
        datacenters: key("DATACENTERS")
            .map(|d| list(&d).map(str::to_owned).collect())
            .unwrap_or_default(),
        secret,
        ip_families,
    })
}

/// A comma-separated value's items, trimmed, empty ones dropped.
fn list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}
