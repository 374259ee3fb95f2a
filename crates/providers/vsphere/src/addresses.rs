//! A node's addresses from its VM's `guest.net`, by CPI's rules in CPI's order (reference §4,
//! `DiscoverNode`/`discoverIPs`): Hostname first, then per IP family one InternalIP and one
//! ExternalIP, chosen by the `[Nodes]` exclusions, subnets, network names, else the first
//! address. Pure: the table tests are CPI's own cases.
//!
//! Where this differs from CPI, on purpose: CIDR lists are parsed at start (a bad one stops the
//! gateway naming the key, where CPI fails every discovery), and a blank after a comma is
//! allowed (CPI's `net.ParseCIDR(" 10.0.0.0/8")` fails).

use std::net::IpAddr;

use ipnet::IpNet;
use provider::{AddressType, NodeAddress};

/// One entry of `guest.net`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuestNic {
    /// `network`: the port group's name (not always reported, CPI #456).
    pub network: String,
    /// `ipAddress`, as VMware Tools reports them.
    pub ips: Vec<String>,
    /// `deviceConfigId`; -1 for an interface that is no vNIC (a CNI bridge, a VIP's dummy).
    pub device_config_id: i32,
}

/// An IP family of `ip-family`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    /// `ipv4`: Go's `To4() != nil` (an IPv4-mapped IPv6 address counts as IPv4).
    V4,
    /// `ipv6`.
    V6,
}

impl IpFamily {
    /// `ipv4`/`ipv6`, case-insensitive and trimmed (CPI validates case-insensitively and then
    /// matches nothing for `IPv4` or ` ipv4`; we read the evident meaning).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ipv4" => Some(Self::V4),
            "ipv6" => Some(Self::V6),
            _ => None,
        }
    }

    fn matches(self, ip: IpAddr) -> bool {
        let v4 = match ip {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
        };
        v4 == (self == Self::V4)
    }

    /// The name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        }
    }
}

/// CPI's `[Nodes]` section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// `internal-network-subnet-cidr`, in config order.
    pub internal_cidrs: Vec<IpNet>,
    /// `external-network-subnet-cidr`.
    pub external_cidrs: Vec<IpNet>,
    /// `internal-vm-network-name` (matched case-insensitively).
    pub internal_network: Option<String>,
    /// `external-vm-network-name`.
    pub external_network: Option<String>,
    /// `exclude-internal-network-subnet-cidr`.
    pub exclude_internal: Vec<IpNet>,
    /// `exclude-external-network-subnet-cidr`.
    pub exclude_external: Vec<IpNet>,
}

/// Why a node has no usable addresses; CPI's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Both network names set and neither names a NIC's network.
    #[error("unable to find suitable IP address for node: no NIC is on network {internal:?} or {external:?}")]
    NoNetworkMatch {
        /// `internal-vm-network-name`.
        internal: String,
        /// `external-vm-network-name`.
        external: String,
    },
    /// Nothing but loopback, link-local, unspecified or unparsable addresses.
    #[error("unable to find suitable IP address for node after filtering out localhost IPs")]
    OnlyLocal,
    /// A family of `ip-family` has no address left after the exclusions.
    #[error("unable to find suitable IP address for node with IP family {0}")]
    NoAddressOfFamily(&'static str),
}

#[derive(Debug, Clone, Copy)]
struct Candidate<'a> {
    ip: IpAddr,
    text: &'a str,
    network: &'a str,
}

/// Addresses that never identify a node: CPI's "localhost" filter.
fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_unspecified() || v4.is_loopback() || v4.is_link_local() || (v4.octets()[..3] == [224, 0, 0])
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_unspecified()
                || v6.is_loopback()
                || (s[0] & 0xffc0) == 0xfe80
                || s[0] == 0xff02
                || v6.to_ipv4_mapped().is_some_and(|v4| is_local(IpAddr::V4(v4)))
        }
    }
}

/// The addresses of a node whose tools report `hostname` and `nics`: Hostname, then for each
/// family of `families` (CPI's default is `[ipv4]`) its InternalIP and ExternalIP.
/// `static_first` are the addresses the VM's cloud-init network config (`guestinfo.metadata`)
/// assigns statically, in their order: candidates among them are preferred (CPI PRs #725, #762).
pub fn node_addresses(
    hostname: &str,
    nics: &[GuestNic],
    selection: &Selection,
    families: &[IpFamily],
    static_first: &[IpAddr],
) -> Result<Vec<NodeAddress>, AddressError> {
    let nics: Vec<&GuestNic> = nics.iter().filter(|n| n.device_config_id != -1).collect();
    if let (Some(internal), Some(external)) = (&selection.internal_network, &selection.external_network) {
        let on = |name: &str| nics.iter().any(|n| n.network.eq_ignore_ascii_case(name));
        if !on(internal) && !on(external) {
            return Err(AddressError::NoNetworkMatch {
                internal: internal.clone(),
                external: external.clone(),
            });
        }
    }
    let mut candidates: Vec<Candidate<'_>> = nics
        .iter()
        .flat_map(|n| {
            n.ips.iter().filter_map(|text| {
                let ip: IpAddr = text.trim().parse().ok()?;
                (!is_local(ip)).then_some(Candidate {
                    ip,
                    text: text.trim(),
                    network: &n.network,
                })
            })
        })
        .collect();
    if candidates.is_empty() {
        return Err(AddressError::OnlyLocal);
    }
    // Stable: statically configured addresses first, in their order; the rest as they were.
    candidates.sort_by_key(|c| static_first.iter().position(|s| *s == c.ip).unwrap_or(usize::MAX));

    let mut out = vec![NodeAddress::new(AddressType::Hostname, hostname)];
    let default_families = [IpFamily::V4];
    let families = if families.is_empty() {
        &default_families[..]
    } else {
        families
    };
    for &family in families {
        let of_family = candidates.iter().filter(|c| family.matches(c.ip));
        let keep = |exclude: &[IpNet]| -> Vec<Candidate<'_>> {
            of_family
                .clone()
                .filter(|c| !exclude.iter().any(|net| net.contains(&c.ip)))
                .copied()
                .collect()
        };
        let internal_pool = keep(&selection.exclude_internal);
        let external_pool = keep(&selection.exclude_external);
        let (internal, external) = choose(&internal_pool, &external_pool, selection);
        if internal.is_none() && external.is_none() {
            return Err(AddressError::NoAddressOfFamily(family.name()));
        }
        for (kind, chosen) in [
            (AddressType::InternalIP, internal),
            (AddressType::ExternalIP, external),
        ] {
            if let Some(c) = chosen {
                let address = NodeAddress::new(kind, c.text);
                if !out.contains(&address) {
                    out.push(address);
                }
            }
        }
    }
    Ok(out)
}

/// One family's InternalIP and ExternalIP: by subnet (CIDRs in config order), then by network
/// name for a kind still unset, else (neither found) the first of each pool.
fn choose<'a>(
    internal_pool: &[Candidate<'a>],
    external_pool: &[Candidate<'a>],
    selection: &Selection,
) -> (Option<Candidate<'a>>, Option<Candidate<'a>>) {
    let by_subnet = |pool: &[Candidate<'a>], cidrs: &[IpNet]| {
        cidrs
            .iter()
            .find_map(|net| pool.iter().find(|c| net.contains(&c.ip)).copied())
    };
    let by_name = |pool: &[Candidate<'a>], name: &Option<String>| {
        let name = name.as_deref()?;
        pool.iter()
            .find(|c| c.network.eq_ignore_ascii_case(name))
            .copied()
    };
    let mut internal = by_subnet(internal_pool, &selection.internal_cidrs);
    let mut external = by_subnet(external_pool, &selection.external_cidrs);
    if internal.is_none() {
        internal = by_name(internal_pool, &selection.internal_network);
    }
    if external.is_none() {
        external = by_name(external_pool, &selection.external_network);
    }
    if internal.is_none() && external.is_none() {
        internal = internal_pool.first().copied();
        external = external_pool.first().copied();
    }
    (internal, external)
}

#[cfg(test)]
mod tests;
