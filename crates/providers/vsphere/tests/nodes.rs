//! Nodes on vcsim through the provider, as the gateway calls it: by UUID, byte-swapped UUID,
//! tools hostname and IP; CPI's address rules end to end; power states; a destroyed VM gone; a
//! login failure, a miss by name and a forgotten session deleting nothing; the calls a batch costs.

use std::sync::Arc;

use provider::{AddressType, Instances, NodeAddress, NodeRef, ProviderError};
use provider_vsphere::{
    VsphereProvider,
    config::{Environment, parse},
    provider_id::{provider_id, swap_bytes},
};
use vsphere_fixture::{Nic, Vcsim, Vm};

fn provider(vcsim: &Vcsim, extra: &str) -> Arc<VsphereProvider> {
    let read = parse(&vcsim.conf(extra), Environment::process()).expect("vsphere.conf");
    VsphereProvider::new(&read.config).expect("provider")
}

fn calls(p: &VsphereProvider) -> u64 {
    p.clients().map(|c| c.calls()).sum()
}

#[tokio::test]
async fn nodes_by_uuid_swapped_uuid_hostname_and_ip() {
    let vcsim = Vcsim::shared();
    let a = Vm::ubuntu("node-a", "10.30.0.1");
    let b = Vm::ubuntu("node-b", "10.30.0.2");
    let ip_c = vcsim.unique_ipv4();
    let mut c = Vm::ubuntu("node-c", &ip_c);
    c.guest.host_name = String::new(); // tools report no hostname: found by IP only
    let d = Vm::ubuntu("node-d", "10.30.0.4");
    for vm in [&a, &b, &c, &d] {
        vcsim.create_vm(vm);
    }
    let p = provider(vcsim, "");
    let nodes = [
        NodeRef::new(&a.name, provider_id(&a.uuid)),
        NodeRef::by_name(b.guest.host_name.to_uppercase()),
        NodeRef::new(&ip_c, ""),
        NodeRef::new(&d.name, provider_id(&swap_bytes(&d.uuid))),
    ];
    let answers = p.lookup_instances(&nodes).await.unwrap();
    let info = answers[0].as_ref().unwrap();
    assert_eq!(info.metadata.provider_id, provider_id(&a.uuid));
    assert_eq!(info.metadata.instance_type, "vsphere-vm.cpu-2.mem-4gb.os-ubuntu");
    assert_eq!(
        info.metadata.addresses,
        vec![
            NodeAddress::new(AddressType::Hostname, &a.name),
            NodeAddress::new(AddressType::InternalIP, "10.30.0.1"),
            NodeAddress::new(AddressType::ExternalIP, "10.30.0.1"),
        ]
    );
    assert!(!info.shutdown);
    let info = answers[1].as_ref().unwrap();
    assert_eq!(
        info.metadata.provider_id,
        provider_id(&b.uuid),
        "found by tools hostname"
    );
    // by IP: found, but its tools report no hostname, so CPI's discovery fails it (not "gone")
    assert!(
        matches!(&answers[2], Err(ProviderError::Unavailable(m)) if m.contains("hostname is empty")),
        "{:?}",
        answers[2]
    );
    let info = answers[3].as_ref().unwrap();
    assert_eq!(
        info.metadata.provider_id,
        provider_id(&swap_bytes(&d.uuid)),
        "the node's providerID kept"
    );

    // the same nodes again: no search, one RetrievePropertiesEx
    let before = calls(&p);
    let again = p.lookup_instances(&nodes[..2]).await.unwrap();
    assert!(again.iter().all(Result::is_ok));
    assert_eq!(calls(&p) - before, 1);
    assert_eq!(
        p.clients().map(|c| c.logins()).sum::<u64>(),
        1,
        "one login for everything"
    );
}

#[tokio::test]
async fn cpi_address_rules_end_to_end() {
    let vcsim = Vcsim::shared();
    let mut vm = Vm::ubuntu("node-addr", "10.0.0.100");
    let mut cni = Nic::new("cni", &["10.244.1.1"]);
    cni.device_config_id = Some(-1);
    vm.guest.nics = vec![
        cni,
        Nic::new("VM Network", &["fe80::1", "10.0.0.100", "10.0.0.11"]),
        Nic::new("public", &["203.0.113.7"]),
    ];
    vcsim.create_vm(&vm);
    let node = [NodeRef::new(&vm.name, provider_id(&vm.uuid))];
    // CPI's default: the first address (here a keepalived VIP, CPI #614)
    let plain = provider(vcsim, "").lookup_instances(&node).await.unwrap();
    assert_eq!(
        plain[0].as_ref().unwrap().metadata.addresses[1].address,
        "10.0.0.100"
    );
    // the VIP excluded; both by network name (one name alone leaves the other kind unset, as CPI)
    let p = provider(
        vcsim,
        "[Nodes]\nexclude-internal-network-subnet-cidr = 10.0.0.100/32\ninternal-vm-network-name = VM Network\nexternal-vm-network-name = public\n",
    );
    let answers = p.lookup_instances(&node).await.unwrap();
    assert_eq!(
        answers[0].as_ref().unwrap().metadata.addresses[1..],
        [
            NodeAddress::new(AddressType::InternalIP, "10.0.0.11"),
            NodeAddress::new(AddressType::ExternalIP, "203.0.113.7"),
        ]
    );
}

/// cloud-init's VMware datasource network config in `guestinfo.metadata` (CPI PRs #725, #762):
/// the statically configured address is preferred over the first one (a VIP); metadata that
/// cannot be decoded fails the lookup (as CPI), never answers "gone".
#[tokio::test]
async fn a_static_address_from_guestinfo_is_preferred() {
    use base64::Engine as _;
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    let vcsim = Vcsim::shared();
    let mut vm = Vm::ubuntu("node-static", "10.0.0.100");
    vm.guest.nics = vec![Nic::new("VM Network", &["10.0.0.100", "10.0.0.12"])];
    let moref = vcsim.create_vm(&vm);
    let network = "version: 2\nethernets:\n  nics:\n    addresses: [10.0.0.12/24]\n";
    let metadata = format!(
        "instance-id: i-1\nnetwork: {}\nnetwork.encoding: base64\n",
        b64(network)
    );
    vcsim.set_extra_config(
        &moref,
        &[
            ("guestinfo.metadata", &b64(&metadata)),
            ("guestinfo.metadata.encoding", "base64"),
        ],
    );
    let node = [NodeRef::new(&vm.name, provider_id(&vm.uuid))];
    let answers = provider(vcsim, "").lookup_instances(&node).await.unwrap();
    assert_eq!(
        answers[0].as_ref().unwrap().metadata.addresses[1],
        NodeAddress::new(AddressType::InternalIP, "10.0.0.12")
    );
    // Another VM: a second ReconfigVM of the same key on vcsim 0.24.2 is not read back changed.
    let mut bad = Vm::ubuntu("node-bad-metadata", "10.0.0.101");
    bad.guest.nics = vec![Nic::new("VM Network", &["10.0.0.101"])];
    let moref = vcsim.create_vm(&bad);
    vcsim.set_extra_config(
        &moref,
        &[
            ("guestinfo.metadata", &b64("not-valid-yaml this should error")),
            ("guestinfo.metadata.encoding", "base64"),
        ],
    );
    let node = [NodeRef::new(&bad.name, provider_id(&bad.uuid))];
    let answers = provider(vcsim, "").lookup_instances(&node).await.unwrap();
    assert!(
        matches!(&answers[0], Err(ProviderError::Unavailable(m)) if m.contains("cannot unmarshal")),
        "{:?}",
        answers[0]
    );
}

#[tokio::test]
async fn power_states_and_a_destroyed_vm() {
    let vcsim = Vcsim::shared();
    let vm = Vm::ubuntu("node-power", "10.30.1.1");
    let moref = vcsim.create_vm(&vm);
    let p = provider(vcsim, "");
    let node = [NodeRef::new(&vm.name, provider_id(&vm.uuid))];
    assert!(
        !p.lookup_instances(&node).await.unwrap()[0]
            .as_ref()
            .unwrap()
            .shutdown
    );
    vcsim.vm_action(&moref, "power-off");
    assert!(
        p.lookup_instances(&node).await.unwrap()[0]
            .as_ref()
            .unwrap()
            .shutdown
    );
    vcsim.vm_action(&moref, "power-on");
    vcsim.vm_action(&moref, "suspend");
    assert!(
        p.lookup_instances(&node).await.unwrap()[0]
            .as_ref()
            .unwrap()
            .shutdown
    );
    vcsim.vm_action(&moref, "destroy");
    let answer = &p.lookup_instances(&node).await.unwrap()[0];
    assert!(
        matches!(answer, Err(ProviderError::InstanceNotFound(_))),
        "{answer:?}"
    );
    // a UUID no VM has, never seen: both byte orders absent → gone
    let unknown = [NodeRef::new(
        "x",
        "vsphere://11111111-2222-3333-4444-555555555555",
    )];
    assert!(matches!(
        p.lookup_instances(&unknown).await.unwrap()[0],
        Err(ProviderError::InstanceNotFound(_))
    ));
}

/// CPI #479/#642/#680 and PR #387: a login failure, a forgotten session and a miss by name
/// report no node gone.
#[tokio::test]
async fn failures_and_misses_by_name_delete_nothing() {
    let vcsim = Vcsim::shared();
    let vm = Vm::ubuntu("node-safe", "10.30.2.1");
    vcsim.create_vm(&vm);
    let text = vcsim.conf("").replace(&vcsim.info.password, "wrong");
    let read = parse(&text, Environment::process()).unwrap();
    let wrong = VsphereProvider::new(&read.config).unwrap();
    let nodes = [
        NodeRef::new(&vm.name, provider_id(&vm.uuid)),
        NodeRef::new("x", "vsphere://11111111-2222-3333-4444-555555555555"),
    ];
    for answer in wrong.lookup_instances(&nodes).await.unwrap() {
        assert!(matches!(answer, Err(ProviderError::Unavailable(_))), "{answer:?}");
    }
    let p = provider(vcsim, "");
    let by_name = p
        .lookup_instances(&[NodeRef::by_name("no-such-hostname")])
        .await
        .unwrap();
    assert!(
        matches!(&by_name[0], Err(ProviderError::Unavailable(_))),
        "{by_name:?}"
    );
    assert!(p.lookup_instances(&nodes[..1]).await.unwrap()[0].is_ok());
    vcsim.terminate_sessions();
    assert!(
        p.lookup_instances(&nodes[..1]).await.unwrap()[0].is_ok(),
        "logged in again"
    );
    // vsphere://hostname (k3s, CPI #506) is refused, not searched and "not found"
    let k3s = p
        .lookup_instances(&[NodeRef::new("n", "vsphere://n")])
        .await
        .unwrap();
    assert!(matches!(&k3s[0], Err(ProviderError::InvalidArgument(_))));
}
