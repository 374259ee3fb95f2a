//! The cloudgateway.v1 contract, run against a gateway on the simulator.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
};

use async_trait::async_trait;
use contract_tests::{CloudFixture, RunningGateway, Skip, Target, TestInstance, contract_suite};
use provider_simulator::{KnobsPatch, NewInstance, RateLimit, Simulator, SimulatorConfig};

struct SimulatorFixture {
    sim: Arc<Simulator>,
    target: Target,
    _gateway: RunningGateway,
    next: AtomicU32,
}

async fn start() -> SimulatorFixture {
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..Default::default()
    })
    .expect("simulator");
    let gateway = RunningGateway::start_for_contract(sim.clone()).await;
    SimulatorFixture {
        sim,
        target: gateway.target(),
        _gateway: gateway,
        next: AtomicU32::new(0),
    }
}

impl SimulatorFixture {
    fn launch(&self) -> TestInstance {
        let name = format!("node-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let i = self
            .sim
            .add_instance(NewInstance::named(name))
            .expect("add instance");
        TestInstance {
            node_name: i.name.clone(),
            provider_id: i.provider_id(),
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            region: self.sim.info().region,
            internal_ip: i.private_ip.to_string(),
        }
    }

    fn id_of(&self, instance: &TestInstance) -> String {
        instance
            .provider_id
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

#[async_trait]
impl CloudFixture for SimulatorFixture {
    fn target(&self) -> &Target {
        &self.target
    }

    fn provider_name(&self) -> &str {
        "simulator"
    }

    fn cluster_name(&self) -> String {
        "contract".into()
    }

    async fn running_instance(&self) -> Result<TestInstance, Skip> {
        Ok(self.launch())
    }

    async fn stopped_instance(&self) -> Result<TestInstance, Skip> {
        let i = self.launch();
        self.sim.stop_instance(&self.id_of(&i)).expect("stop");
        Ok(i)
    }

    async fn terminated_instance(&self) -> Result<TestInstance, Skip> {
        let i = self.launch();
        self.sim.terminate_instance(&self.id_of(&i)).expect("terminate");
        Ok(i)
    }

    fn unknown_provider_id(&self) -> Result<String, Skip> {
        Ok(format!(
            "simulator://{}/i-0123456789abcdef0",
            self.sim.info().zones[0]
        ))
    }

    async fn load_balancer_count(&self, cluster: &str) -> Option<usize> {
        Some(
            self.sim
                .load_balancers()
                .iter()
                .filter(|lb| lb.cluster == cluster)
                .count(),
        )
    }

    async fn load_balancer_backends(&self, name: &str) -> Option<Vec<String>> {
        Some(
            self.sim
                .load_balancers()
                .into_iter()
                .filter(|lb| lb.name == name)
                .flat_map(|lb| lb.backends.into_iter().map(|b| b.provider_id))
                .collect(),
        )
    }

    fn implemented_elsewhere_annotations(&self) -> Result<BTreeMap<String, String>, Skip> {
        Ok([(
            "simulator.cloudgateway.io/load-balancer-type".to_owned(),
            "external".to_owned(),
        )]
        .into())
    }

    fn invalid_service(&self) -> Result<(BTreeMap<String, String>, String), Skip> {
        // An address outside the load balancer pool.
        Ok((BTreeMap::new(), "192.0.2.77".into()))
    }

    async fn slow_provisioning(&self, seconds: u64) -> Result<(), Skip> {
        let patch: KnobsPatch =
            serde_json::from_value(serde_json::json!({ "lb_provision_delay": format!("{seconds}s") }))
                .expect("knobs patch");
        self.sim.update_knobs(&patch).expect("knobs");
        Ok(())
    }

    async fn throttle_everything(&self) -> Result<(), Skip> {
        let mut knobs = self.sim.knobs();
        knobs.rate_limit = Some(RateLimit::closed());
        self.sim.set_knobs(knobs);
        Ok(())
    }

    async fn route_target(&self) -> Result<(String, TestInstance), Skip> {
        Ok(("10.244.7.0/24".into(), self.launch()))
    }
}

contract_suite!(start());
