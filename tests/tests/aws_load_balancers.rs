//! AWS load balancers end to end, through the real binaries: fake-apiserver, `cloud-gateway
//! --provider aws` on moto in a VPC laid out the way cloud-provider-aws and EKS clusters are
//! (public subnets tagged only `kubernetes.io/role/elb`, an internet gateway, the workers in a
//! group tagged for the cluster), and the node and service controllers. A Service without
//! annotations gets a Classic ELB, an NLB Service gets exactly its rules and TLS on one port, and
//! deleting both leaves nothing made for them.

use std::{sync::Arc, time::Duration};

use aws_fixture::{Census, Cloud, Network};
use e2e::{Cluster, ClusterSpec, MOTO_ENV, aws_gateway_args, binary, ingress_hostname, start_moto, wait_for};
use k8s_openapi::api::core::v1::Service;
use kube::{Api, ResourceExt, api::DeleteParams};
use serde_json::json;

/// Controllers' default `--cluster-name`: the network is tagged for it.
const CLUSTER: &str = "kubernetes";
/// An IAM server certificate (moto checks ACM certificates exist, not IAM ones).
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/web";

async fn provisioned(services: &Api<Service>, name: &str) -> (Service, String) {
    wait_for(
        &format!("{name} to get an ingress hostname"),
        Duration::from_secs(60),
        || async move {
            let s = services.get_opt(name).await.ok().flatten()?;
            let h = ingress_hostname(&s)?;
            Some((s, h))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_and_network_load_balancers_come_and_go_with_their_services() {
    let moto_dir = tempfile::tempdir().unwrap();
    let (_moto, moto) = start_moto(moto_dir.path()).await;
    let cloud = Arc::new(Cloud::connect(&format!("http://{moto}")).await);
    let network: Network = cloud.network(CLUSTER).await;
    let a = cloud.run_instance(&network, 0).await;
    let b = cloud.run_instance(&network, 1).await;

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let args = aws_gateway_args(&format!("http://{moto}"), &network.vpc_id, &[]);
    cluster
        .swap_gateway(&binary("cloud-gateway"), &args, &MOTO_ENV)
        .await;
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    for i in [&a, &b] {
        cluster.register_node(&i.node_name, true).await;
    }
    cluster.nodes_initialized(2, "aws://").await;

    // A Service without annotations: a Classic ELB, its own group, the nodes' rule from it.
    let services = cluster.services("default");
    cluster.create_lb_service("default", "web", json!({})).await;
    let (web, web_host) = provisioned(&services, "web").await;
    let web_lb = format!("a{}", web.uid().unwrap().replace('-', ""))[..32].to_owned();
    let elb = cloud
        .classic
        .describe_load_balancers()
        .load_balancer_names(&web_lb)
        .send()
        .await
        .expect("a Classic ELB");
    let elb = &elb.load_balancer_descriptions()[0];
    assert_eq!(elb.dns_name(), Some(web_host.as_str()));
    let own = elb.security_groups()[0].clone();
    let census = cloud.census(&network).await;
    assert_eq!(census.security_groups, vec![format!("{own} k8s-elb-{web_lb}")]);
    assert_eq!(census.node_rules, vec![format!("-1 0-0 {own}")]);
    assert_eq!(cloud.backends(&web_lb).await, {
        let mut v = vec![a.id.clone(), b.id.clone()];
        v.sort();
        v
    });

    // An NLB with source ranges and TLS on 443: exactly its client, health and MTU rules.
    cluster
        .create_lb_service(
            "default",
            "api",
            json!({
                "metadata": { "annotations": {
                    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
                    "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": CERT,
                    "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "443",
                }},
                "spec": {
                    "loadBalancerSourceRanges": ["203.0.113.0/24"],
                    "ports": [
                        { "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                        { "name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP" },
                    ],
                },
            }),
        )
        .await;
    let (api, api_host) = provisioned(&services, "api").await;
    let api_lb = format!("a{}", api.uid().unwrap().replace('-', ""))[..32].to_owned();
    let lbs = cloud
        .elb
        .describe_load_balancers()
        .names(&api_lb)
        .send()
        .await
        .expect("an NLB");
    let nlb = &lbs.load_balancers()[0];
    assert_eq!(nlb.dns_name(), Some(api_host.as_str()));
    let listeners = cloud
        .elb
        .describe_listeners()
        .load_balancer_arn(nlb.load_balancer_arn().unwrap())
        .send()
        .await
        .expect("listeners");
    let mut protocols: Vec<(i32, String)> = listeners
        .listeners()
        .iter()
        .map(|l| (l.port().unwrap(), l.protocol().unwrap().as_str().to_owned()))
        .collect();
    protocols.sort();
    assert_eq!(protocols, vec![(80, "TCP".to_owned()), (443, "TLS".to_owned())]);
    let node_ports: Vec<i32> = api
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.node_port)
        .collect();
    let client = format!("kubernetes.io/rule/nlb/client={api_lb}");
    let health = format!("kubernetes.io/rule/nlb/health={api_lb}");
    let mut want = vec![
        format!("-1 0-0 {own}"),
        "icmp 3-4 203.0.113.0/24 kubernetes.io/rule/nlb/mtu".to_owned(),
    ];
    for p in &node_ports {
        want.push(format!("tcp {p}-{p} 203.0.113.0/24 {client}"));
        for cidr in ["10.0.1.0/24", "10.0.2.0/24"] {
            want.push(format!("tcp {p}-{p} {cidr} {health}"));
        }
    }
    want.sort();
    assert_eq!(cloud.census(&network).await.node_rules, want);

    // Both deleted: nothing made for them is left, and the Services go with their finalizers.
    for name in ["web", "api"] {
        services
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    let census = wait_for("nothing left in AWS", Duration::from_secs(60), || {
        let cloud = cloud.clone();
        let network = network.clone();
        async move { Some(cloud.census(&network).await).filter(Census::is_empty) }
    })
    .await;
    assert!(census.is_empty());
    wait_for("the Services gone", Duration::from_secs(30), || {
        let services = services.clone();
        async move {
            let gone = |name| services.get_opt(name);
            matches!((gone("web").await, gone("api").await), (Ok(None), Ok(None))).then_some(())
        }
    })
    .await;
    cluster.stop().await;
}
