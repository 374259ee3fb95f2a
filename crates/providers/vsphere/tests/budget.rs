//! The call budget of issue 40, on a vcsim of its own with 2 datacenters and 210 VMs (zone tags
//! on each datacenter's cluster, region tags on the datacenters), counted as vcsim received
//! the calls (SOAP methods and REST paths), through the provider as the gateway calls it (in
//! batches of 100, the gateway's default): 200 nodes join in ≤ 20 calls including the first
//! tag and category reads, 10 nodes joining later in ≤ 10, a refresh of the 200 in ≤ 5, one
//! login of each kind for all of it; a view vCenter forgot is made again; at shutdown both
//! sessions end.

use std::{collections::BTreeMap, sync::Arc};

use provider::{Instances, NodeRef, Provider};
use provider_vsphere::{
    VsphereProvider,
    config::{Environment, parse},
    provider_id::provider_id,
};
use vsphere_fixture::{Vcsim, Vm};

/// The gateway's default `--instance-batch-size`.
const BATCH: usize = 100;

fn total(calls: &BTreeMap<String, u64>) -> u64 {
    calls.values().sum()
}

fn logins(calls: &BTreeMap<String, u64>) -> u64 {
    calls.get("soap Login").copied().unwrap_or(0)
        + calls
            .get("rest POST /rest/com/vmware/cis/session")
            .copied()
            .unwrap_or(0)
}

/// Looks `nodes` up in batches of [`BATCH`]; every answer must be a node with its zone.
async fn lookup(p: &VsphereProvider, nodes: &[NodeRef]) {
    for batch in nodes.chunks(BATCH) {
        for (answer, node) in p.lookup_instances(batch).await.unwrap().iter().zip(batch) {
            let info = answer.as_ref().unwrap_or_else(|e| panic!("{}: {e}", node.name));
            assert!(info.metadata.zone.starts_with("zone-"), "{info:?}");
            assert!(info.metadata.region.starts_with("region-"), "{info:?}");
        }
    }
}

/// What one phase cost, as vcsim counted it; the counts are reset after.
fn phase(vcsim: &Vcsim, what: &str, most: u64) -> BTreeMap<String, u64> {
    let calls = vcsim.calls();
    vcsim.reset_calls();
    eprintln!("{what}: {} calls: {calls:?}", total(&calls));
    assert!(
        total(&calls) <= most,
        "{what}: {} calls, budget {most}: {calls:?}",
        total(&calls)
    );
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_nodes_join_in_twenty_calls_and_refresh_in_five() {
    let dir = tempfile::tempdir().unwrap();
    let vcsim = Vcsim::start_with(dir.path(), 2);
    let vms: Vec<Vm> = (0..210)
        .map(|i| {
            let mut vm = Vm::ubuntu("budget", &format!("10.40.{}.{}", i / 200, i % 200 + 1));
            vm.datacenter = Some(format!("DC{}", i % 2));
            vm
        })
        .collect();
    // The last 10 VMs are made after the 200 joined: not in the snapshot kept.
    let morefs = vcsim.create_vms(&vms[..200]);
    // VMs alternate between the datacenters: the first two are one in each.
    let (zones, regions) = vcsim.tag_zones_and_regions(&morefs, 2);
    let labels = format!("[Labels]\nzone = \"{zones}\"\nregion = \"{regions}\"\n");
    let read = parse(&vcsim.conf(&labels), Environment::process()).unwrap();
    let p: Arc<VsphereProvider> = VsphereProvider::new(&read.config).unwrap();
    // Half by providerID, half by name (kubelet without --provider-id), as nodes join.
    let nodes: Vec<NodeRef> = vms
        .iter()
        .enumerate()
        .map(|(i, vm)| match i % 2 {
            0 => NodeRef::new(&vm.name, provider_id(&vm.uuid)),
            _ => NodeRef::by_name(&vm.name),
        })
        .collect();
    vcsim.reset_calls();

    lookup(&p, &nodes[..200]).await;
    let join = phase(&vcsim, "200 nodes join", 20);
    assert_eq!(logins(&join), 2, "one SOAP and one REST login: {join:?}");

    vcsim.create_vms(&vms[200..]);
    vcsim.reset_calls();
    lookup(&p, &nodes[200..]).await;
    let later = phase(&vcsim, "10 more nodes join", 10);
    assert_eq!(logins(&later), 0, "{later:?}");

    lookup(&p, &nodes[..200]).await;
    let refresh = phase(&vcsim, "a refresh of 200 nodes", 5);
    assert_eq!(logins(&refresh), 0, "{refresh:?}");
    // One property read per batch, nothing else (the tags and inventory from memory), even
    // after the read of every VM would still answer for VMs not asked about since.
    tokio::time::sleep(provider_vsphere::provider::REUSE).await;
    lookup(&p, &nodes[..200]).await;
    let refresh = phase(&vcsim, "a refresh of 200 nodes later", 5);
    assert_eq!(refresh.get("soap RetrievePropertiesEx"), Some(&2), "{refresh:?}");

    // vCenter forgets the session (and the views with it): a node not seen yet is found all
    // the same, over a new login and a new view.
    vcsim.terminate_sessions();
    let mut late = Vm::ubuntu("budget-late", "10.40.9.1");
    late.datacenter = Some("DC1".into());
    vcsim.create_vm(&late);
    vcsim.reset_calls();
    lookup(&p, &[NodeRef::by_name(&late.name)]).await;
    let again = phase(&vcsim, "a node after the session was lost", 10);
    assert_eq!(again.get("soap Login"), Some(&1), "{again:?}");
    // (vcsim answers the forgotten view before the forgotten session: the view is made once
    // refused NotAuthenticated, then again in the new session)
    assert!(again.contains_key("soap CreateContainerView"), "{again:?}");

    // At shutdown: the SOAP session logged out, the REST one deleted.
    assert!(vcsim.sessions() >= 1);
    p.shutdown().await;
    let end = phase(&vcsim, "shutdown", 2);
    assert_eq!(end.get("soap Logout"), Some(&1), "{end:?}");
    assert_eq!(
        end.get("rest DELETE /rest/com/vmware/cis/session"),
        Some(&1),
        "{end:?}"
    );
    assert_eq!(vcsim.sessions(), 0, "no session left at vCenter");
    vcsim.stop();
}
