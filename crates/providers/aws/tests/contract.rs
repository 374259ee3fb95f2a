//! The cloudgateway.v1 contract suite, run against a gateway on the AWS provider over moto
//! (the same suite the simulator passes). Needs `scripts/moto/setup.sh`.

mod support;

use std::collections::BTreeMap;

use async_trait::async_trait;
use cloud_gateway::GatewayConfig;
use contract_tests::{CloudFixture, RunningGateway, TestInstance, contract_suite};
use provider_aws::plan::{ANNOTATION_INTERNAL, ANNOTATION_TYPE};
use support::{Cloud, FaultProxy, Harness, INSTANCE_TYPE, Instance, Network, REGION};
use token_bucket::Limit;

struct AwsFixture {
    gateway: RunningGateway,
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
    } = Harness::start("contract", |_| {}).await;
    let unlimited = Limit {
        rate: 1000.0,
        burst: 1000.0,
    };
    let config = GatewayConfig {
        read_limit: unlimited,
        write_limit: unlimited,
        ..GatewayConfig::default()
    };
    let gateway = RunningGateway::start(config, provider, None).await;
    AwsFixture {
        gateway,
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
    fn gateway(&self) -> &RunningGateway {
        &self.gateway
    }

    fn provider_name(&self) -> &str {
        "aws"
    }

    fn cluster_name(&self) -> String {
        self.network.cluster.clone()
    }

    async fn running_instance(&self) -> TestInstance {
        test_instance(self.cloud.run_instance(&self.network, 0).await)
    }

    async fn stopped_instance(&self) -> TestInstance {
        let i = self.cloud.run_instance(&self.network, 1).await;
        self.cloud.stop(&i).await;
        test_instance(i)
    }

    async fn terminated_instance(&self) -> TestInstance {
        let i = self.cloud.run_instance(&self.network, 0).await;
        self.cloud.terminate(&i).await;
        test_instance(i)
    }

    fn unknown_provider_id(&self) -> String {
        "aws:///us-east-1a/i-0123456789abcdef0".into()
    }

    async fn load_balancer_count(&self, cluster: &str) -> usize {
        self.cloud.tagged_resources(cluster).await.0.len()
    }

    async fn load_balancer_backends(&self, name: &str) -> Vec<String> {
        self.cloud.backends(name).await
    }

    fn implemented_elsewhere_annotations(&self) -> BTreeMap<String, String> {
        [(ANNOTATION_TYPE.to_owned(), "external".to_owned())].into()
    }

    fn invalid_service(&self) -> (BTreeMap<String, String>, String) {
        // Not a boolean, and an NLB cannot take a requested IP.
        (
            [(ANNOTATION_INTERNAL.to_owned(), "maybe".to_owned())].into(),
            "10.0.0.10".into(),
        )
    }

    async fn slow_provisioning(&self, _seconds: u64) -> Option<()> {
        // moto provisions at once and injects no delay; NLB listeners and targets can be set up
        // while AWS still provisions, so the provider never needs RETRY_AFTER for that.
        None
    }

    async fn throttle_everything(&self) -> Option<()> {
        self.proxy.throttle(true);
        Some(())
    }

    async fn route_target(&self) -> (String, TestInstance) {
        (
            "100.96.7.0/24".into(),
            test_instance(self.cloud.run_instance(&self.network, 0).await),
        )
    }
}

contract_suite!(
    start(),
    slow_provisioning: unsupported("moto provisions load balancers at once, and the AWS provider never answers RETRY_AFTER for an NLB")
);
