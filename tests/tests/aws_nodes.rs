//! AWS nodes end to end, through the real binaries: fake-apiserver, `cloud-gateway --provider
//! aws` on moto behind a recording proxy, cloud-node-controller and node-route-controller. A
//! dual-stack instance registered as a Node named `node-a` (as kops and kubelet
//! `--hostname-override` name nodes: not the instance's private DNS name) with its providerID:
//! it initializes with its zone-ID label and its IPv6 address first (`--aws-node-ip-families
//! ipv6,ipv4`), its pod CIDR is routed to its instance, and later reconciles recognise the route
//! (listed under the instance's DNS name, matched by providerID): no second CreateRoute.

use std::time::Duration;

use aws_fixture::{Cloud, FaultProxy, INSTANCE_TYPE};
use e2e::{Cluster, ClusterSpec, MOTO_ENV, aws_gateway_args, binary, nodes::label, start_moto, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// Controllers' default `--cluster-name`: the network is tagged for it.
const CLUSTER: &str = "kubernetes";
const POD_CIDR: &str = "10.244.1.0/24";

/// A dual-stack subnet in the network's VPC and an instance in it with one IPv6 address:
/// `(instance ID, zone, IPv6 address in canonical form)`.
async fn dual_stack_instance(cloud: &Cloud, vpc_id: &str) -> (String, String, String) {
    cloud
        .ec2
        .associate_vpc_cidr_block()
        .vpc_id(vpc_id)
        .amazon_provided_ipv6_cidr_block(true)
        .send()
        .await
        .expect("AssociateVpcCidrBlock");
    let subnet = cloud
        .ec2
        .create_subnet()
        .vpc_id(vpc_id)
        .cidr_block("10.0.60.0/24")
        .ipv6_cidr_block("2600:1f18:6a:3c00::/64")
        .availability_zone("us-east-1a")
        .send()
        .await
        .expect("CreateSubnet")
        .subnet()
        .and_then(|s| s.subnet_id())
        .expect("subnet ID")
        .to_owned();
    let out = cloud
        .ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(INSTANCE_TYPE.into())
        .min_count(1)
        .max_count(1)
        .subnet_id(&subnet)
        .ipv6_address_count(1)
        .send()
        .await
        .expect("RunInstances");
    let i = &out.instances()[0];
    let ipv6: std::net::Ipv6Addr = i.network_interfaces()[0].ipv6_addresses()[0]
        .ipv6_address()
        .expect("an IPv6 address")
        .parse()
        .expect("moto's IPv6 address");
    (
        i.instance_id().expect("ID").to_owned(),
        "us-east-1a".to_owned(),
        ipv6.to_string(),
    )
}

fn route_created(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "NetworkUnavailable"
                && c.status == "False"
                && c.reason.as_deref() == Some("RouteCreated")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_node_named_otherwise_initializes_and_keeps_its_route_without_recreating_it() {
    let moto_dir = tempfile::tempdir().unwrap();
    let (_moto, moto) = start_moto(moto_dir.path()).await;
    let cloud = Cloud::connect(&format!("http://{moto}")).await;
    let network = cloud.network(CLUSTER).await;
    let (id, zone, ipv6) = dual_stack_instance(&cloud, &network.vpc_id).await;
    let zone_id = cloud
        .ec2
        .describe_availability_zones()
        .zone_names(&zone)
        .send()
        .await
        .expect("DescribeAvailabilityZones")
        .availability_zones()[0]
        .zone_id()
        .expect("zone ID")
        .to_owned();
    let proxy = FaultProxy::start(&format!("http://{moto}")).await;

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let args = aws_gateway_args(
        &proxy.endpoint,
        &network.vpc_id,
        &[
            "--aws-route-table-id",
            &network.route_table_id,
            "--aws-node-ip-families",
            "ipv6,ipv4",
        ],
    );
    cluster
        .swap_gateway(&binary("cloud-gateway"), &args, &MOTO_ENV)
        .await;

    // kubelet --cloud-provider=external --hostname-override=node-a --provider-id=aws:///…
    let provider_id = format!("aws:///{zone}/{id}");
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": "node-a", "labels": { "kubernetes.io/hostname": "node-a" } },
        "spec": {
            "providerID": provider_id,
            "taints": [{
                "key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"
            }],
        },
    }))
    .unwrap();
    let nodes = cluster.nodes();
    nodes.create(&PostParams::default(), &node).await.expect("node-a");
    cluster.set_ready("node-a", true).await;
    let cidrs = json!({"spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]}});
    nodes
        .patch("node-a", &PatchParams::default(), &Patch::Merge(&cidrs))
        .await
        .expect("pod CIDRs");

    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller(
        "node-route-controller",
        "node-route-controller",
        &[
            "--cluster-cidr",
            "10.244.0.0/16",
            "--route-reconciliation-period",
            "1s",
        ],
    );

    let initialized = wait_for("node-a initialized from AWS", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get("node-a").await.ok()?;
            let tainted = node
                .spec
                .as_ref()?
                .taints
                .iter()
                .flatten()
                .any(|t| t.key == "node.cloudprovider.kubernetes.io/uninitialized");
            (!tainted && node.status.as_ref()?.addresses.is_some()).then_some(node)
        }
    })
    .await;
    assert_eq!(
        label(&initialized, "topology.k8s.aws/zone-id"),
        Some(zone_id.as_str())
    );
    assert_eq!(
        label(&initialized, "topology.kubernetes.io/zone"),
        Some(zone.as_str())
    );
    let addresses = initialized.status.as_ref().unwrap().addresses.clone().unwrap();
    assert_eq!(
        (addresses[0].type_.as_str(), addresses[0].address.as_str()),
        ("InternalIP", ipv6.as_str()),
        "ipv6,ipv4: the IPv6 address first: {addresses:?}"
    );
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address.starts_with("10.0.60.")),
        "and the IPv4 one: {addresses:?}"
    );

    wait_for("node-a's route created", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move { route_created(&nodes.get("node-a").await.ok()?).then_some(()) }
    })
    .await;
    let table = cloud
        .ec2
        .describe_route_tables()
        .route_table_ids(&network.route_table_id)
        .send()
        .await
        .expect("DescribeRouteTables");
    let routed: Vec<(String, String)> = table.route_tables()[0]
        .routes()
        .iter()
        .filter_map(|r| {
            Some((
                r.destination_cidr_block()?.to_owned(),
                r.instance_id()?.to_owned(),
            ))
        })
        .collect();
    assert_eq!(routed, [(POD_CIDR.to_owned(), id.clone())]);

    // Several resyncs (every second) later: each listed the routes, none created or deleted one.
    let listed = proxy.count("DescribeRouteTables");
    let creates = proxy.count("CreateRoute");
    assert_eq!(creates, 1, "{:?}", proxy.actions());
    wait_for("three more reconciles", Duration::from_secs(30), || {
        let more = proxy.count("DescribeRouteTables") >= listed + 3;
        async move { more.then_some(()) }
    })
    .await;
    assert_eq!(proxy.count("CreateRoute"), 1, "no create on later reconciles");
    assert_eq!(proxy.count("ReplaceRoute") + proxy.count("DeleteRoute"), 0);
    assert!(route_created(&nodes.get("node-a").await.unwrap()));
}
