//! The cloudgateway.v1 contract suite, run against a gateway on the vSphere provider over vcsim
//! (`vsphere-fixture`: govmomi's simulator, shared, so every VM is named uniquely).
//!
//! Each case gets a fresh fixture: a gateway on a [`VsphereProvider`] built from vcsim's
//! `vsphere.conf` with `[Labels]` (zone and region tag categories made once per test process,
//! the zone tag on the VMs' cluster, the region tag on their datacenter), and VMs made only when
//! the case asks for one.
//!
//! vSphere serves nodes only, as CPI: the fixture expects no load balancers and no routes, so
//! `missing_capabilities_answer_unimplemented` runs here (the gateway must answer UNIMPLEMENTED
//! for both), and the load balancer and route cases must skip for that reason alone.
//! `throttled_is_typed` must skip too: vCenter has no answer that means "slow down" (its HTTP
//! 503 is the session limit or an overloaded service, reported as unavailable) and vcsim cannot
//! be made to give one. `contract_suite!`'s `instances_only` arm expands the cases so.

use std::{
    collections::BTreeMap,
    sync::{Mutex, OnceLock},
};

use async_trait::async_trait;
use contract_tests::{
    CloudFixture, ExpectedCapabilities, RunningGateway, Skip, Target, TestInstance, contract_suite,
};
use provider_vsphere::{
    VsphereProvider,
    config::{Environment, parse},
};
use vsphere_fixture::{Vcsim, Vm, unique};

const ZONE: &str = "zone-a";
const REGION: &str = "region-1";
const NO_THROTTLING: &str = "vCenter has no throttling answer";

fn vcsim() -> &'static Vcsim {
    Vcsim::shared()
}

/// `[Labels]` of this test process: its zone and region categories, their tags attached to
/// the cluster and datacenter every VM of vcsim's is placed in (`create_vm` places VMs in the
/// cluster's pool).
fn labels() -> &'static str {
    static LABELS: OnceLock<String> = OnceLock::new();
    LABELS.get_or_init(|| {
        let vcsim = vcsim();
        let probe = Vm::ubuntu("ct-probe", &vcsim.unique_ipv4());
        let moref = vcsim.create_vm(&probe);
        let placed = vcsim.placement(&moref);
        vcsim.vm_action(&moref, "destroy");
        let (zones, regions) = (unique("ct-zone"), unique("ct-region"));
        let zone = vcsim.create_tag(&vcsim.create_category(&zones), ZONE);
        let region = vcsim.create_tag(&vcsim.create_category(&regions), REGION);
        vcsim.attach_tag(&zone, &placed["cluster"]);
        vcsim.attach_tag(&region, &placed["datacenter"]);
        format!("[Labels]\nzone = \"{zones}\"\nregion = \"{regions}\"\n")
    })
}

struct VsphereFixture {
    target: Target,
    _gateway: RunningGateway,
    cluster: String,
    /// VMs this fixture made and did not destroy yet (their managed object ids).
    vms: Mutex<Vec<String>>,
}

async fn start() -> VsphereFixture {
    let text = vcsim().conf(labels());
    let read = parse(&text, Environment::process()).expect("vsphere.conf");
    let provider = VsphereProvider::new(&read.config).expect("the provider");
    let gateway = RunningGateway::start_for_contract(provider).await;
    VsphereFixture {
        target: gateway.target(),
        _gateway: gateway,
        cluster: unique("contract"),
        vms: Mutex::new(Vec::new()),
    }
}

impl VsphereFixture {
    /// Makes a powered-on VM and describes it as its Node would; its managed object id.
    fn make(&self, prefix: &str) -> (String, TestInstance) {
        let vcsim = vcsim();
        let vm = Vm::ubuntu(prefix, &vcsim.unique_ipv4());
        let moref = vcsim.create_vm(&vm);
        self.vms.lock().unwrap().push(moref.clone());
        let instance = TestInstance {
            node_name: vm.name.clone(),
            provider_id: format!("vsphere://{}", vm.uuid),
            instance_type: "vsphere-vm.cpu-2.mem-4gb.os-ubuntu".into(),
            zone: ZONE.into(),
            region: REGION.into(),
            internal_ip: vm.guest.ip_address.clone(),
        };
        (moref, instance)
    }
}

impl Drop for VsphereFixture {
    fn drop(&mut self) {
        // vcsim outlives the test process: leave it no VM of ours.
        for moref in std::mem::take(&mut *self.vms.lock().unwrap()) {
            vcsim().vm_action(&moref, "destroy");
        }
    }
}

#[async_trait]
impl CloudFixture for VsphereFixture {
    fn target(&self) -> &Target {
        &self.target
    }

    fn provider_name(&self) -> &str {
        "vsphere"
    }

    fn capabilities(&self) -> ExpectedCapabilities {
        ExpectedCapabilities {
            instances: true,
            load_balancers: false,
            routes: false,
        }
    }

    fn cluster_name(&self) -> String {
        self.cluster.clone()
    }

    async fn running_instance(&self) -> Result<TestInstance, Skip> {
        Ok(self.make("ct-run").1)
    }

    async fn stopped_instance(&self) -> Result<TestInstance, Skip> {
        let (moref, i) = self.make("ct-stop");
        vcsim().vm_action(&moref, "power-off");
        Ok(i)
    }

    async fn terminated_instance(&self) -> Result<TestInstance, Skip> {
        let (moref, i) = self.make("ct-gone");
        vcsim().vm_action(&moref, "destroy");
        self.vms.lock().unwrap().retain(|m| *m != moref);
        Ok(i)
    }

    fn unknown_provider_id(&self) -> Result<String, Skip> {
        // A UUID no VM was made with.
        Ok(format!("vsphere://{}", Vm::ubuntu("never", "192.0.2.1").uuid))
    }

    fn implemented_elsewhere_annotations(&self) -> Result<BTreeMap<String, String>, Skip> {
        Err(Skip::because("vSphere serves no load balancers"))
    }

    fn invalid_service(&self) -> Result<(BTreeMap<String, String>, String), Skip> {
        Err(Skip::because("vSphere serves no load balancers"))
    }

    async fn slow_provisioning(&self, _seconds: u64) -> Result<(), Skip> {
        Err(Skip::because("vSphere serves no load balancers"))
    }

    async fn throttle_everything(&self) -> Result<(), Skip> {
        Err(Skip::because(NO_THROTTLING))
    }

    async fn route_target(&self) -> Result<(String, TestInstance), Skip> {
        Err(Skip::because("vSphere serves no routes"))
    }
}

contract_suite!(start(), instances_only, throttled: skips(NO_THROTTLING));
