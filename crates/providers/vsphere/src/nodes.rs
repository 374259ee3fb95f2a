//! A node's answer from what vCenter said about its VM, as CPI's `DiscoverNode` and
//! `InstanceExistsByProviderID` decide it (reference §2.4, §3.3), pure and table-tested.
//!
//! **Never a wrong deletion**: a node is reported gone ([`ProviderError::InstanceNotFound`])
//! only when it was looked up by providerID (a BIOS UUID), every vCenter and datacenter answered
//! "no such VM" for both byte orders of the UUID, and the VM this provider had seen for it (if
//! any) answered ManagedObjectNotFound. A login failure, a timeout, a 503, an unreadable VM and
//! a miss by name (VMware Tools may not have reported the hostname yet, CPI PR #387) are
//! errors, which no controller deletes on.
//!
//! Where this differs from CPI, on purpose: a powered-off VM whose tools data is gone is
//! reported existing and shut down (CPI fails InstanceExists for it, so its node is never
//! tainted); a VM found whose properties cannot be read is an error (CPI turns it into "no VM
//! found").

use provider::{InstanceInfo, InstanceMetadata, ProviderError};

use crate::{
    addresses::{self, GuestNic, IpFamily, Selection},
    guestinfo,
    instance_type::instance_type,
    provider_id,
    soap::{SoapError, methods::ObjectContent, xml::Element},
};

/// The properties read of every VM, in one RetrievePropertiesEx per batch.
pub const PROPERTIES: &[&str] = &[
    "summary.config.uuid",
    "summary.config.numCpu",
    "summary.config.memorySizeMB",
    "summary.config.guestId",
    "guest.hostName",
    "guest.ipAddress",
    "guest.net",
    "runtime.powerState",
    "config.extraConfig",
];

/// Also read with [`PROPERTIES`] when zones are looked up: where the walks up start (CPI's
/// order: the host, the resource pool, the VM's folder).
pub const PLACEMENT: &[&str] = &["runtime.host", "resourcePool", "parent"];

/// How a node is looked up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// By the BIOS UUID in its providerID (lower-case).
    Uuid(String),
    /// By its name, as VMware Tools report it (`guest.hostName`), or as an IP.
    Name(String),
}

/// The key of a node: its providerID's UUID when it has one, else its name.
///
/// # Errors
/// A providerID that is not this provider's or holds no UUID (k3s's `vsphere://hostname`,
/// CPI #506): CPI searches it as a UUID and finds nothing; we refuse it by name.
pub fn key(name: &str, provider_id: &str) -> Result<Key, ProviderError> {
    if provider_id.trim().is_empty() {
        return Ok(Key::Name(name.trim().to_ascii_lowercase()));
    }
    if !provider_id.trim().starts_with(provider_id::PREFIX) {
        return Err(ProviderError::InvalidArgument(format!(
            "providerID {provider_id:?} is not vSphere's (vsphere://<BIOS UUID>)"
        )));
    }
    let uuid = provider_id::uuid_from_provider_id(provider_id);
    if !provider_id::is_uuid(&uuid) {
        return Err(ProviderError::InvalidArgument(format!(
            "providerID {provider_id:?} holds no BIOS UUID"
        )));
    }
    Ok(Key::Uuid(uuid))
}

/// What the searches said about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Search {
    /// Found (in vCenter number `.0`).
    Found(usize, crate::soap::Moref),
    /// Every vCenter and datacenter answered "no such VM" (both UUID byte orders).
    Absent,
    /// Several VMs report this hostname (CPI #87, #560).
    Ambiguous(usize),
    /// A search failed: nothing is known.
    Failed(SoapError),
    /// No VM has the UUID, but this many VMs' UUIDs could not be read: one could be the node's.
    Unidentified(usize),
}

/// The error a failed call becomes: never InstanceNotFound.
pub fn unknown(e: &SoapError) -> ProviderError {
    match e {
        SoapError::Decode(_) => ProviderError::Internal(format!("vSphere: {e}")),
        _ => ProviderError::Unavailable(format!("vSphere: {e}")),
    }
}

/// The answer for a node whose searches came out `search`. `was_cached_and_gone`: the VM this
/// provider had found before answered ManagedObjectNotFound.
pub fn not_found(key: &Key, search: &Search) -> ProviderError {
    match (key, search) {
        (Key::Uuid(uuid), Search::Absent) => ProviderError::InstanceNotFound(format!(
            "no VM has BIOS UUID {uuid} (nor {}) in any vCenter or datacenter",
            provider_id::swap_bytes(uuid)
        )),
        (Key::Name(name), Search::Absent) => ProviderError::Unavailable(format!(
            "no VM reports hostname or IP {name:?} (yet: VMware Tools may not have reported it); a node is only reported gone by its providerID"
        )),
        (_, Search::Ambiguous(n)) => ProviderError::Unavailable(format!(
            "{n} VMs report this node's hostname: set its providerID or make the hostnames unique"
        )),
        (_, Search::Failed(e)) => unknown(e),
        (_, Search::Unidentified(n)) => ProviderError::Unavailable(format!(
            "no VM readable has this node's UUID, but {n} VMs' UUIDs cannot be read (inaccessible or being created): the node is not reported gone while one of them could be it"
        )),
        (_, Search::Found(..)) => ProviderError::Internal("found VM reported as not found".into()),
    }
}

/// `guest.net`, as NICs.
pub fn guest_nics(net: Option<&Element>) -> Vec<GuestNic> {
    let Some(net) = net else { return Vec::new() };
    net.all("GuestNicInfo")
        .map(|nic| GuestNic {
            network: nic.text_of("network").unwrap_or_default().trim().to_owned(),
            ips: nic.all("ipAddress").map(|ip| ip.text.trim().to_owned()).collect(),
            device_config_id: nic
                .text_of("deviceConfigId")
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0),
        })
        .collect()
}

/// A value of the VM's `config.extraConfig` (`OptionValue`s), by key.
pub fn extra_config<'a>(config: Option<&'a Element>, key: &str) -> Option<&'a str> {
    config?
        .children
        .iter()
        .find(|o| o.text_of("key").is_some_and(|k| k.trim() == key))
        .and_then(|o| o.text_of("value"))
}

/// What the node needs from its config.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// `[Nodes]`.
    pub selection: &'a Selection,
    /// The vCenter's `ip-family`.
    pub families: &'a [IpFamily],
}

/// The node's answer from its VM's properties: CPI's DiscoverNode checks in its order, the
/// addresses by CPI's rules, the instance type; shut down = not `poweredOn`.
pub fn instance(
    provider_id_of_node: &str,
    vm: &ObjectContent,
    rules: Rules<'_>,
) -> Result<InstanceInfo, ProviderError> {
    let unreadable: Vec<String> = vm.missing.iter().map(|(p, f)| format!("{p} ({f})")).collect();
    if !unreadable.is_empty() {
        return Err(ProviderError::Unavailable(format!(
            "the VM's properties cannot be read: {}",
            unreadable.join(", ")
        )));
    }
    let uuid = vm.text("summary.config.uuid").to_ascii_lowercase();
    if uuid.is_empty() {
        // config.uuid is briefly empty while a VM is being created (CPI #521)
        return Err(ProviderError::Unavailable("discovered VM UUID is empty".into()));
    }
    let power = vm.text("runtime.powerState");
    if power.is_empty() {
        return Err(ProviderError::Unavailable(
            "the VM's power state is not reported".into(),
        ));
    }
    let shutdown = power != "poweredOn";
    let number = |path: &str| vm.text(path).parse::<i64>().unwrap_or(0);
    let hostname = vm.text("guest.hostName");
    let nics = guest_nics(vm.prop("guest.net"));
    let extra = vm.prop("config.extraConfig");
    let addresses = if hostname.is_empty() {
        Err(ProviderError::Unavailable("VM Guest hostname is empty".into()))
    } else if nics.is_empty() {
        Err(ProviderError::Unavailable("VM GuestNicInfo is empty".into()))
    } else {
        guestinfo::static_addresses(
            extra_config(extra, "guestinfo.metadata"),
            extra_config(extra, "guestinfo.metadata.encoding"),
        )
        .map_err(ProviderError::Unavailable)
        .and_then(|static_first| {
            addresses::node_addresses(hostname, &nics, rules.selection, rules.families, &static_first)
                .map_err(|e| ProviderError::Unavailable(e.to_string()))
        })
    };
    let addresses = match addresses {
        Ok(a) => a,
        // a stopped VM's tools report nothing: it still exists, shut down
        Err(_) if shutdown => Vec::new(),
        Err(e) => return Err(e),
    };
    let provider_id = if provider_id_of_node.trim().is_empty() {
        provider_id::provider_id(&uuid)
    } else {
        provider_id_of_node.to_owned()
    };
    Ok(InstanceInfo {
        metadata: InstanceMetadata {
            provider_id,
            instance_type: instance_type(
                number("summary.config.numCpu"),
                number("summary.config.memorySizeMB"),
                vm.text("summary.config.guestId"),
            ),
            addresses,
            ..InstanceMetadata::default()
        },
        shutdown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soap::{Moref, xml::parse};
    use provider::{AddressType, NodeAddress};

    fn vm(props: &[(&str, &str)], missing: &[(&str, &str)]) -> ObjectContent {
        ObjectContent {
            obj: Some(Moref::new("VirtualMachine", "vm-1")),
            props: props
                .iter()
                .map(|(p, v)| ((*p).to_owned(), parse(&format!("<val>{v}</val>")).unwrap()))
                .collect(),
            missing: missing
                .iter()
                .map(|(p, f)| ((*p).to_owned(), (*f).to_owned()))
                .collect(),
        }
    }

    const NET: &str = "<GuestNicInfo><network>VM Network</network><ipAddress>fe80::1</ipAddress><ipAddress>10.0.0.5</ipAddress><deviceConfigId>4000</deviceConfigId></GuestNicInfo><GuestNicInfo><network>cni</network><ipAddress>10.244.0.1</ipAddress><deviceConfigId>-1</deviceConfigId></GuestNicInfo>";

    fn full(power: &str) -> Vec<(&'static str, String)> {
        vec![
            (
                "summary.config.uuid",
                "422E4956-AD22-1139-6D72-59CC8F26BC90".into(),
            ),
            ("summary.config.numCpu", "2".into()),
            ("summary.config.memorySizeMB", "8192".into()),
            ("summary.config.guestId", "ubuntu64Guest".into()),
            ("guest.hostName", "node-1".into()),
            ("guest.net", NET.into()),
            ("runtime.powerState", power.into()),
        ]
    }

    fn rules() -> Rules<'static> {
        static SEL: std::sync::OnceLock<Selection> = std::sync::OnceLock::new();
        Rules {
            selection: SEL.get_or_init(Selection::default),
            families: &[IpFamily::V4],
        }
    }

    fn answer(props: &[(&str, String)], missing: &[(&str, &str)]) -> Result<InstanceInfo, ProviderError> {
        let props: Vec<(&str, &str)> = props.iter().map(|(p, v)| (*p, v.as_str())).collect();
        instance("", &vm(&props, missing), rules())
    }

    #[test]
    fn a_running_vm_as_cpi_reports_it() {
        let info = answer(&full("poweredOn"), &[]).unwrap();
        assert!(!info.shutdown);
        assert_eq!(
            info.metadata.provider_id,
            "vsphere://422e4956-ad22-1139-6d72-59cc8f26bc90"
        );
        assert_eq!(info.metadata.instance_type, "vsphere-vm.cpu-2.mem-8gb.os-ubuntu");
        assert_eq!(
            info.metadata.addresses,
            vec![
                NodeAddress::new(AddressType::Hostname, "node-1"),
                NodeAddress::new(AddressType::InternalIP, "10.0.0.5"),
                NodeAddress::new(AddressType::ExternalIP, "10.0.0.5"),
            ]
        );
        let kept = instance(
            "vsphere://KEPT",
            &vm(
                &[
                    ("summary.config.uuid", "u"),
                    ("runtime.powerState", "poweredOn"),
                    ("guest.hostName", "h"),
                    ("guest.net", NET),
                ],
                &[],
            ),
            rules(),
        )
        .unwrap();
        assert_eq!(
            kept.metadata.provider_id, "vsphere://KEPT",
            "a node's providerID is kept verbatim, as CPI"
        );
    }

    /// Shut down = not poweredOn (suspended too); a stopped VM without tools data still exists.
    #[test]
    fn power_states() {
        for (power, shutdown) in [("poweredOff", true), ("suspended", true), ("poweredOn", false)] {
            assert_eq!(answer(&full(power), &[]).unwrap().shutdown, shutdown, "{power}");
        }
        let mut off = full("poweredOff");
        off.retain(|(p, _)| !p.starts_with("guest."));
        let info = answer(&off, &[]).unwrap();
        assert!(info.shutdown && info.metadata.addresses.is_empty());
        let mut on = full("poweredOn");
        on.retain(|(p, _)| *p != "guest.hostName");
        assert_eq!(
            answer(&on, &[]).unwrap_err(),
            ProviderError::Unavailable("VM Guest hostname is empty".into())
        );
        let mut on = full("poweredOn");
        on.retain(|(p, _)| *p != "guest.net");
        assert_eq!(
            answer(&on, &[]).unwrap_err(),
            ProviderError::Unavailable("VM GuestNicInfo is empty".into())
        );
    }

    /// A VM found whose properties cannot be read (an inaccessible VM, CPI #642) or whose UUID
    /// is not set yet (CPI #521) is an error, never "not found".
    #[test]
    fn unreadable_vms_are_errors_not_absences() {
        let err = answer(&full("poweredOn"), &[("guest.net", "NoPermission")]).unwrap_err();
        assert!(matches!(err, ProviderError::Unavailable(_)), "{err}");
        let mut no_uuid = full("poweredOn");
        no_uuid.retain(|(p, _)| *p != "summary.config.uuid");
        assert_eq!(
            answer(&no_uuid, &[]).unwrap_err(),
            ProviderError::Unavailable("discovered VM UUID is empty".into())
        );
    }

    /// Only a UUID lookup that every vCenter answered "absent" is a deletion.
    #[test]
    fn only_a_definite_absence_by_uuid_is_not_found() {
        let uuid = Key::Uuid("422e4956-ad22-1139-6d72-59cc8f26bc90".into());
        let name = Key::Name("node-1".into());
        assert!(matches!(
            not_found(&uuid, &Search::Absent),
            ProviderError::InstanceNotFound(_)
        ));
        for (key, search) in [
            (&name, Search::Absent),
            (&uuid, Search::Failed(SoapError::Login("InvalidLogin".into()))),
            (&uuid, Search::Failed(SoapError::Http { status: 503 })),
            (
                &uuid,
                Search::Failed(SoapError::Timeout(std::time::Duration::from_secs(30))),
            ),
            (&name, Search::Ambiguous(2)),
            (&uuid, Search::Unidentified(1)),
        ] {
            let err = not_found(key, &search);
            assert!(
                !matches!(err, ProviderError::InstanceNotFound(_)),
                "{key:?} {search:?}: {err}"
            );
        }
    }

    #[test]
    fn keys() {
        assert_eq!(key("Node-1", ""), Ok(Key::Name("node-1".into())));
        assert_eq!(
            key("n", "vsphere://422E4956-AD22-1139-6D72-59CC8F26BC90"),
            Ok(Key::Uuid("422e4956-ad22-1139-6d72-59cc8f26bc90".into()))
        );
        assert!(matches!(
            key("n", "vsphere://hostname"),
            Err(ProviderError::InvalidArgument(_))
        ));
        assert!(matches!(
            key("n", "aws:///i-1"),
            Err(ProviderError::InvalidArgument(_))
        ));
    }
}
