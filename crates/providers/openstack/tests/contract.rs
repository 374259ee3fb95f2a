//! The cloudgateway.v1 contract suite, run against a gateway on the OpenStack provider over the
//! real test cloud (`openstack-fixture`: Keystone, Nova, Neutron of Zed).
//!
//! Each case gets a fresh fixture: a gateway on an [`OpenStackProvider`] built from the test
//! cloud's `cloud.conf` (as the `ccm` user, `[Route] router-id` = the shared `router1`), its own
//! cluster name, and servers booted only when the case asks for one (deleted when the fixture is
//! dropped). The provider talks to the cloud through [`CloudProxy`] (`openstack-fixture`), a small HTTP proxy in
//! front of Keystone, Nova, Neutron and Octavia (it rewrites the catalog to point at itself) that answers
//! 429 to everything once `throttle_everything` turns it on: the test cloud never throttles.
//!
//! Every case runs, as `contract_suite!` runs them, except two that must skip, each for its
//! stated reason (`contract_suite!` fails every skip, so this file expands the cases itself):
//! - `implemented_elsewhere_is_typed`: OCCM has no annotation that hands a Service to another
//!   controller (`spec.loadBalancerClass` is the service controller's to honour);
//! - `missing_capabilities_answer_unimplemented`: the provider has every capability.
//!
//! [`the_suite_expands_every_case`] checks that every case of `cases::ALL` is expanded.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
};

use async_trait::async_trait;
use contract_tests::{
    CloudFixture, ExpectedCapabilities, RunningGateway, Skip, Target, TestInstance, cases, runner,
};
use openstack_fixture::{TestCloud, User, proxy::CloudProxy};
use provider_openstack::{
    OpenStackProvider,
    client::{Client, Service},
    cloud_config,
};
use serde_json::Value;

const FLAVOR: &str = "m1.tiny";
const ZONE: &str = "nova";

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

// ---------------------------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------------------------

struct OpenStackFixture {
    target: Target,
    _gateway: RunningGateway,
    proxy: CloudProxy,
    /// The ccm user's own client (straight to the cloud): boots, stops and deletes servers.
    client: Client,
    cluster: String,
    /// Servers this fixture booted and did not delete yet.
    servers: Mutex<Vec<String>>,
}

async fn start() -> OpenStackFixture {
    let cloud = cloud();
    let proxy = CloudProxy::start(cloud).await;
    let text = std::fs::read_to_string(cloud.dir.join("cloud.conf")).expect("cloud.conf");
    let ids = &cloud.info.ids;
    let text = format!(
        "{text}\n[Route]\nrouter-id = {}\n[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {}\n",
        ids.router1, ids.subnet_private, ids.network_public
    );
    let mut config = cloud_config::parse(&text)
        .expect("cloud.conf parses")
        .to_config(false)
        .expect("cloud.conf is valid");
    config.credentials.auth_url = proxy.auth_url.clone();
    let provider = OpenStackProvider::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("provider: {e}"));
    let gateway = RunningGateway::start_for_contract(provider).await;
    OpenStackFixture {
        target: gateway.target(),
        _gateway: gateway,
        proxy,
        client: cloud.client(User::Ccm).await,
        cluster: cloud.unique_name("contract"),
        servers: Mutex::new(Vec::new()),
    }
}

impl OpenStackFixture {
    /// Boots a server as the ccm user on `private` and describes it as its Node would.
    async fn boot(&self, prefix: &str) -> (String, TestInstance) {
        let cloud = cloud();
        let name = cloud.unique_name(prefix);
        let id = cloud.boot_server(&self.client, &name, FLAVOR, "private").await;
        self.servers.lock().unwrap().push(id.clone());
        let ports: Value = self
            .client
            .get(Service::Network, "/ports")
            .query(&[("device_id", id.as_str())])
            .send_json()
            .await
            .expect("the server's ports");
        let internal_ip = ports["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["network_id"].as_str() == Some(cloud.info.ids.network_private.as_str()))
            .flat_map(|p| p["fixed_ips"].as_array().cloned().unwrap_or_default())
            .filter_map(|ip| ip["ip_address"].as_str().map(str::to_owned))
            .find(|ip| !ip.contains(':'))
            .unwrap_or_else(|| panic!("server {id} has no IPv4 address on private: {ports}"));
        let instance = TestInstance {
            node_name: name,
            provider_id: format!("openstack:///{id}"),
            instance_type: FLAVOR.into(),
            zone: ZONE.into(),
            region: cloud.info.region.clone(),
            internal_ip,
        };
        (id, instance)
    }
}

impl Drop for OpenStackFixture {
    fn drop(&mut self) {
        let servers = std::mem::take(&mut *self.servers.lock().unwrap());
        if servers.is_empty() {
            return;
        }
        // The test's runtime is going away: delete on a runtime of our own (no waiting for 404).
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async {
                let client = cloud().client(User::Ccm).await;
                for id in servers {
                    let _ = client
                        .delete(Service::Compute, &format!("/servers/{id}"))
                        .send_empty()
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

#[async_trait]
impl CloudFixture for OpenStackFixture {
    fn target(&self) -> &Target {
        &self.target
    }

    fn provider_name(&self) -> &str {
        "openstack"
    }

    fn capabilities(&self) -> ExpectedCapabilities {
        ExpectedCapabilities {
            instances: true,
            load_balancers: true,
            routes: true,
        }
    }

    fn cluster_name(&self) -> String {
        self.cluster.clone()
    }

    async fn running_instance(&self) -> Result<TestInstance, Skip> {
        Ok(self.boot("ct-run").await.1)
    }

    async fn stopped_instance(&self) -> Result<TestInstance, Skip> {
        let (id, i) = self.boot("ct-stop").await;
        cloud().stop_server(&self.client, &id).await;
        Ok(i)
    }

    async fn terminated_instance(&self) -> Result<TestInstance, Skip> {
        let (id, i) = self.boot("ct-gone").await;
        cloud().delete_server(&self.client, &id).await;
        self.servers.lock().unwrap().retain(|s| *s != id);
        Ok(i)
    }

    fn unknown_provider_id(&self) -> Result<String, Skip> {
        Ok(format!("openstack:///{}", uuid::Uuid::new_v4()))
    }

    async fn load_balancer_count(&self, cluster: &str) -> Option<usize> {
        let lbs: Value = self
            .client
            .get(Service::LoadBalancer, "/lbaas/loadbalancers")
            .send_json()
            .await
            .expect("list load balancers");
        let prefix = format!("kube_service_{cluster}_");
        Some(
            lbs["loadbalancers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|lb| lb["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
                .filter(|lb| lb["provisioning_status"] != "DELETED")
                .count(),
        )
    }

    /// The servers behind the members of every pool of the load balancer `name`.
    async fn load_balancer_backends(&self, name: &str) -> Option<Vec<String>> {
        let c = &self.client;
        let lbs: Value = c
            .get(Service::LoadBalancer, "/lbaas/loadbalancers")
            .query(&[("name", name)])
            .send_json()
            .await
            .expect("find the load balancer");
        let id = lbs["loadbalancers"][0]["id"].as_str()?.to_owned();
        let pools: Value = c
            .get(Service::LoadBalancer, "/lbaas/pools")
            .query(&[("loadbalancer_id", id.as_str())])
            .send_json()
            .await
            .expect("pools");
        let mut servers = Vec::new();
        for pool in pools["pools"].as_array().into_iter().flatten() {
            let pool_id = pool["id"].as_str().unwrap_or_default();
            let members: Value = c
                .get(Service::LoadBalancer, &format!("/lbaas/pools/{pool_id}/members"))
                .send_json()
                .await
                .expect("members");
            for m in members["members"].as_array().into_iter().flatten() {
                let address = m["address"].as_str().unwrap_or_default();
                let ports: Value = c
                    .get(Service::Network, "/ports")
                    .query(&[("fixed_ips", format!("ip_address={address}").as_str())])
                    .send_json()
                    .await
                    .expect("the member's port");
                servers.extend(
                    ports["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p["device_id"].as_str().map(str::to_owned)),
                );
            }
        }
        Some(servers)
    }

    fn implemented_elsewhere_annotations(&self) -> Result<std::collections::BTreeMap<String, String>, Skip> {
        Err(Skip::because(NOT_ELSEWHERE))
    }

    fn invalid_service(&self) -> Result<(std::collections::BTreeMap<String, String>, String), Skip> {
        // Below Octavia's range: its API refuses OCCM's write; this provider refuses it by name
        // before any write.
        Ok((
            [(
                "loadbalancer.openstack.org/connection-limit".to_owned(),
                "-2".to_owned(),
            )]
            .into(),
            String::new(),
        ))
    }

    /// Nothing to do: Octavia provisions every load balancer in the background, and a create
    /// answers RETRY_AFTER until Octavia reports it ACTIVE.
    async fn slow_provisioning(&self, _seconds: u64) -> Result<(), Skip> {
        Ok(())
    }

    async fn throttle_everything(&self) -> Result<(), Skip> {
        self.proxy.throttle(true);
        Ok(())
    }

    async fn route_target(&self) -> Result<(String, TestInstance), Skip> {
        // router1 is shared by every test: a destination from this fixture's cluster name.
        let mut h = DefaultHasher::new();
        self.cluster.hash(&mut h);
        let h = h.finish();
        let cidr = format!("10.{}.{}.0/24", 200 + h % 50, (h >> 8) % 256);
        Ok((cidr, self.boot("ct-route").await.1))
    }
}

// ---------------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------------

/// The cases that make Octavia load balancers.
const MAKE_LOAD_BALANCERS: &[&str] = &[
    "load_balancer_lifecycle",
    "ensure_twice_creates_one_load_balancer",
    "update_changes_backends",
    "retry_after_is_typed",
];

/// Why `implemented_elsewhere_is_typed` skips.
const NOT_ELSEWHERE: &str = "OCCM has no annotation that hands a Service to another controller";

macro_rules! must_pass {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = start().await;
                // Octavia's turn (see `TestCloud::octavia_turn`) for the cases that make load balancers.
                let _turn = match MAKE_LOAD_BALANCERS.contains(&stringify!($case)) {
                    true => Some(cloud().octavia_turn().await),
                    false => None,
                };
                runner::must_pass(stringify!($case), cases::$case(&fixture).await);
            }
        )*
        const MUST_PASS: &[&str] = &[$(stringify!($case)),*];
    };
}

macro_rules! must_skip {
    ($($case:ident: $why:expr),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = start().await;
                contract_tests::must_skip(stringify!($case), cases::$case(&fixture).await, $why);
            }
        )*
        const SKIPPED: &[&str] = &[$(stringify!($case)),*];
    };
}

must_pass!(
    capabilities_describe_the_provider,
    every_answer_names_the_provider,
    running_instance_exists_and_is_not_shut_down,
    stopped_instance_exists_and_is_shut_down,
    terminated_instance_does_not_exist,
    unknown_provider_id_does_not_exist,
    metadata_describes_the_instance,
    lookup_by_name_when_provider_id_is_empty,
    batch_lookup_answers_each_node_in_order,
    throttled_is_typed,
    gateway_validation_rejects_bad_requests,
    garbage_bytes_get_a_status_and_the_gateway_lives_on,
    an_unknown_caller_header_is_served_as_anonymous,
    an_unknown_caller_header_reaches_no_metric,
    // CreateRoute with the target's name only: the provider finds the server by name and routes
    // to its port's address.
    routes_lifecycle,
    // As the route controller sends it: the target's providerID and the addresses the gateway
    // reports for the server.
    routes_lifecycle_as_the_route_controller_sends,
    load_balancer_lifecycle,
    ensure_twice_creates_one_load_balancer,
    update_changes_backends,
    provider_invalid_argument_is_typed,
    retry_after_is_typed,
);

must_skip!(
    implemented_elsewhere_is_typed: NOT_ELSEWHERE,
    missing_capabilities_answer_unimplemented: "every capability",
);

#[test]
fn the_suite_expands_every_case() {
    let got: Vec<&str> = MUST_PASS.iter().chain(SKIPPED).copied().collect();
    contract_tests::assert_covers(&got, &[]);
}
