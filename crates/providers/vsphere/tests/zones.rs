//! Zones and regions from vSphere tags on vcsim, through the provider as the gateway calls it
//! (CPI's `[Labels]`): a zone tag on the VM's cluster and a region tag on its datacenter, made
//! with vCenter's own tagging REST API; a cluster's zone over its host's (CPI's walk); a region
//! with no zone tag fails the node's lookup (it stays uninitialized, as in CPI) and deletes
//! nothing; the tags are read once for many lookups, over one REST session.

use std::sync::Arc;

use provider::{Instances, NodeRef, ProviderError};
use provider_vsphere::{
    VsphereProvider,
    config::{Environment, parse},
    provider_id::provider_id,
};
use vsphere_fixture::{Vcsim, Vm, unique};

fn provider(vcsim: &Vcsim, zone: &str, region: &str) -> Arc<VsphereProvider> {
    let labels = format!("[Labels]\nzone = \"{zone}\"\nregion = \"{region}\"\n");
    let read = parse(&vcsim.conf(&labels), Environment::process()).expect("vsphere.conf");
    VsphereProvider::new(&read.config).expect("provider")
}

fn rest(p: &VsphereProvider) -> (u64, u64) {
    p.tagging()
        .fold((0, 0), |(c, l), t| (c + t.calls(), l + t.logins()))
}

#[tokio::test]
async fn zones_and_regions_from_tags_up_the_inventory() {
    // A vcsim of its own: the calls are counted, and no other test adds categories meanwhile.
    let dir = tempfile::tempdir().unwrap();
    let own = Vcsim::start(dir.path());
    let vcsim = &own;
    let a = Vm::ubuntu("zone-a", &vcsim.unique_ipv4());
    let b = Vm::ubuntu("zone-b", &vcsim.unique_ipv4());
    let moref = vcsim.create_vm(&a);
    vcsim.create_vm(&b);
    let placed = vcsim.placement(&moref);
    // Categories of this test's own (vcsim is shared): zones on the cluster and the host, the
    // region on the datacenter.
    let (zones, regions) = (unique("k8s-zone"), unique("k8s-region"));
    let zone_category = vcsim.create_category(&zones);
    let region_category = vcsim.create_category(&regions);
    let on_cluster = vcsim.create_tag(&zone_category, "zone-cluster");
    let on_host = vcsim.create_tag(&zone_category, "zone-host");
    let region = vcsim.create_tag(&region_category, "region-1");
    vcsim.attach_tag(&on_cluster, &placed["cluster"]);
    vcsim.attach_tag(&on_host, &placed["host"]);
    vcsim.attach_tag(&region, &placed["datacenter"]);
    // An unrelated category's tag on the host changes nothing.
    let other = vcsim.create_category(&unique("k8s-other"));
    let other = vcsim.create_tag(&other, "other");
    vcsim.attach_tag(&other, &placed["host"]);

    let categories = vcsim.category_count() as u64;
    let p = provider(vcsim, &zones, &regions);
    let nodes = [
        NodeRef::new(&a.name, provider_id(&a.uuid)),
        NodeRef::new(&b.name, provider_id(&b.uuid)),
    ];
    let answers = p.lookup_instances(&nodes).await.unwrap();
    for answer in &answers {
        let info = answer.as_ref().unwrap();
        // Walking up from the host: its zone, then the cluster's replaces it before the
        // region is met (CPI's LookupZoneByMoref).
        assert_eq!(
            (info.metadata.zone.as_str(), info.metadata.region.as_str()),
            ("zone-cluster", "region-1")
        );
    }
    let (calls, logins) = rest(&p);
    assert_eq!(logins, 1, "one REST session");
    // The login, the categories (a list and one read each), two tag lists, a read per tag of the two categories (3), one read of what
    // they are attached to; none per node.
    assert_eq!(
        calls,
        1 + 1 + categories + 2 + 3 + 1,
        "the first read's REST calls"
    );

    // Again: the tags and the hosts' and clusters' ancestors from memory, no REST call; one
    // SOAP call for the VMs.
    let soap_before: u64 = p.clients().map(|c| c.calls()).sum();
    let again = p.lookup_instances(&nodes).await.unwrap();
    assert!(again.iter().all(Result::is_ok));
    assert_eq!(rest(&p), (calls, logins), "the tags read once");
    assert_eq!(p.clients().map(|c| c.calls()).sum::<u64>() - soap_before, 1);
    own.stop();
}

#[tokio::test]
async fn a_region_without_a_zone_tag_fails_the_lookup_and_deletes_nothing() {
    let vcsim = Vcsim::shared();
    let a = Vm::ubuntu("zoneless", &vcsim.unique_ipv4());
    let moref = vcsim.create_vm(&a);
    let placed = vcsim.placement(&moref);
    let (zones, regions) = (unique("k8s-zone"), unique("k8s-region"));
    vcsim.create_category(&zones);
    let region_category = vcsim.create_category(&regions);
    let region = vcsim.create_tag(&region_category, "region-2");
    vcsim.attach_tag(&region, &placed["datacenter"]);

    let p = provider(vcsim, &zones, &regions);
    let answers = p
        .lookup_instances(&[NodeRef::new(&a.name, provider_id(&a.uuid))])
        .await
        .unwrap();
    match &answers[0] {
        Err(ProviderError::Unavailable(m)) => {
            assert!(m.contains(&format!("zone category {zones}")), "{m}");
        }
        other => panic!("the lookup fails naming the zone category, never gone: {other:?}"),
    }
}
