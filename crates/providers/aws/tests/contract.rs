//! The cloudgateway.v1 contract suite, run against a gateway on the AWS provider over moto
//! (the same suite the simulator passes). Needs `scripts/moto/setup.sh`.

mod support;

use std::collections::BTreeMap;

use async_trait::async_trait;
use contract_tests::{CloudFixture, RunningGateway, Skip, Target, TestInstance, contract_suite};
use provider_aws::annotations::{HC_INTERVAL, TYPE};
use support::{Cloud, FaultProxy, Harness, INSTANCE_TYPE, Instance, Network, REGION};

struct AwsFixture {
    target: Target,
    _gateway: RunningGateway,
    cloud: Cloud,
    network: Network,
    proxy: FaultProxy,
}

async fn start() -> AwsFixture {
    let Harness {
        provider,
        proxy,
        cloud,
        network,
        ..
    } = Harness::start("contract", |_| {}).await;
    let gateway = RunningGateway::start_for_contract(provider).await;
    AwsFixture {
        target: gateway.target(),
        _gateway: gateway,
        cloud,
        network,
        proxy,
    }
}

fn test_instance(i: Instance) -> TestInstance {
    TestInstance {
        node_name: i.node_name,
        provider_id: i.provider_id,
        instance_type: INSTANCE_TYPE.into(),
        zone: i.zone,
        region: REGION.into(),
        internal_ip: i.internal_ip,
    }
}

#[async_trait]
impl CloudFixture for AwsFixture {
    fn target(&self) -> &Target {
        &self.target
    }

    fn provider_name(&self) -> &str {
        "aws"
    }

    fn cluster_name(&self) -> String {
        self.network.cluster.clone()
    }

    async fn running_instance(&self) -> Result<TestInstance, Skip> {
        Ok(test_instance(self.cloud.run_instance(&self.network, 0).await))
    }

    async fn stopped_instance(&self) -> Result<TestInstance, Skip> {
        let i = self.cloud.run_instance(&self.network, 1).await;
        self.cloud.stop(&i).await;
        Ok(test_instance(i))
    }

    async fn terminated_instance(&self) -> Result<TestInstance, Skip> {
        let i = self.cloud.run_instance(&self.network, 0).await;
        self.cloud.terminate(&i).await;
        Ok(test_instance(i))
    }

    fn unknown_provider_id(&self) -> Result<String, Skip> {
        Ok("aws:///us-east-1a/i-0123456789abcdef0".into())
    }

    async fn load_balancer_count(&self, _cluster: &str) -> Option<usize> {
        let census = self.cloud.census(&self.network).await;
        Some(census.classic.len() + census.nlbs.len())
    }

    async fn load_balancer_backends(&self, name: &str) -> Option<Vec<String>> {
        Some(self.cloud.backends(name).await)
    }

    fn implemented_elsewhere_annotations(&self) -> Result<BTreeMap<String, String>, Skip> {
        Ok([(TYPE.to_owned(), "external".to_owned())].into())
    }

    fn invalid_service(&self) -> Result<(BTreeMap<String, String>, String), Skip> {
        // Not an integer, and an AWS load balancer cannot take a requested IP.
        Ok((
            [(HC_INTERVAL.to_owned(), "often".to_owned())].into(),
            "10.0.0.10".into(),
        ))
    }

    async fn slow_provisioning(&self, _seconds: u64) -> Result<(), Skip> {
        // moto provisions at once and injects no delay; NLB listeners and targets can be set up
        // while AWS still provisions, so the provider never needs RETRY_AFTER for that.
        Err(Skip::because("moto provisions load balancers at once"))
    }

    async fn throttle_everything(&self) -> Result<(), Skip> {
        self.proxy.throttle(true);
        Ok(())
    }

    async fn route_target(&self) -> Result<(String, TestInstance), Skip> {
        Ok((
            "100.96.7.0/24".into(),
            test_instance(self.cloud.run_instance(&self.network, 0).await),
        ))
    }
}

contract_suite!(
    start(),
    slow_provisioning: unsupported("moto provisions load balancers at once")
);
