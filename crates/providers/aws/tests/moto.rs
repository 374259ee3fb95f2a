//! The AWS provider's instances and routes against moto_server, through a fault-injecting proxy
//! that also counts API calls (load balancers: `load_balancers.rs`). Needs
//! `scripts/moto/setup.sh`.

mod support;

use provider::{
    AddressType, Instances, LoadBalancers, NodeRef, Protocol, ProviderError, Route, Routes, ServicePort,
    ServiceSpec,
};
use support::{Harness, INSTANCE_TYPE, Instance, REGION};

fn service(uid: &str) -> ServiceSpec {
    ServiceSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![
            ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            },
            ServicePort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 53,
                node_port: 30053,
            },
        ],
        ..Default::default()
    }
}

fn uid(n: u32) -> String {
    format!("7e3a{n:04x}-1b2c-4d5e-8f90-0123456789ab")
}

fn node(i: &Instance) -> NodeRef {
    NodeRef::new(i.node_name.clone(), i.provider_id.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_give_a_definite_answer_per_node() {
    let h = Harness::start("lookups", |_| {}).await;
    let running = h.cloud.run_instance(&h.network, 0).await;
    let stopped = h.cloud.run_instance(&h.network, 1).await;
    let terminated = h.cloud.run_instance(&h.network, 0).await;
    h.cloud.stop(&stopped).await;
    h.cloud.terminate(&terminated).await;

    let nodes = vec![
        node(&terminated),
        node(&running),
        NodeRef::new("ghost", "aws:///us-east-1a/i-00000000000000dead"),
        node(&stopped),
        NodeRef::new("other-cloud", "gce://project/zone/vm"),
        NodeRef::by_name(running.node_name.clone()),
        NodeRef::new("ghost-2", "aws:///us-east-1a/i-0000000000000beef0"),
    ];
    let answers = h.provider.lookup_instances(&nodes).await.expect("lookup");
    assert_eq!(answers.len(), nodes.len());
    assert!(
        matches!(answers[0], Err(ProviderError::InstanceNotFound(_))),
        "terminated: {:?}",
        answers[0]
    );
    let found = answers[1].as_ref().expect("running");
    assert!(!found.shutdown);
    assert_eq!(found.metadata.provider_id, running.provider_id);
    assert!(
        matches!(answers[2], Err(ProviderError::InstanceNotFound(_))),
        "unknown: {:?}",
        answers[2]
    );
    assert!(answers[3].as_ref().expect("stopped exists").shutdown);
    assert!(
        matches!(answers[4], Err(ProviderError::InvalidArgument(_))),
        "{:?}",
        answers[4]
    );
    assert_eq!(
        answers[5].as_ref().expect("by name").metadata.provider_id,
        running.provider_id
    );
    assert!(matches!(answers[6], Err(ProviderError::InstanceNotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_describes_the_instance() {
    let h = Harness::start("metadata", |_| {}).await;
    let i = h.cloud.run_instance(&h.network, 1).await;
    let answer = h.provider.lookup_instances(&[node(&i)]).await.expect("lookup");
    let m = &answer[0].as_ref().expect("found").metadata;
    assert_eq!(m.provider_id, i.provider_id);
    assert_eq!(m.instance_type, INSTANCE_TYPE);
    assert_eq!(m.zone, i.zone);
    assert_eq!(m.region, REGION);
    let has =
        |kind: AddressType, value: &str| m.addresses.iter().any(|a| a.kind == kind && a.address == value);
    assert!(has(AddressType::InternalIP, &i.internal_ip), "{:?}", m.addresses);
    assert!(has(AddressType::InternalDNS, &i.node_name), "{:?}", m.addresses);
    assert!(has(AddressType::Hostname, &i.node_name), "{:?}", m.addresses);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_are_batched_up_to_the_limit() {
    let h = Harness::start("batches", |c| c.max_instance_batch = 2).await;
    let mut nodes = Vec::new();
    for n in 0..5 {
        nodes.push(node(&h.cloud.run_instance(&h.network, n).await));
    }
    h.proxy.reset_counts();
    let answers = h.provider.lookup_instances(&nodes).await.expect("lookup");
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(h.proxy.count("DescribeInstances"), 3, "5 IDs in batches of 2");

    // Unknown IDs fail AWS's whole call: they are taken out and the rest asked again.
    h.proxy.reset_counts();
    let mut mixed = nodes[..2].to_vec();
    mixed.insert(1, NodeRef::new("ghost", "aws:///us-east-1a/i-00000000000000dead"));
    let h2 = Harness::start("batches-mixed", |_| {}).await;
    let answers = h2.provider.lookup_instances(&mixed).await.expect("lookup");
    assert!(answers[0].is_ok() && answers[2].is_ok(), "{answers:?}");
    assert!(matches!(answers[1], Err(ProviderError::InstanceNotFound(_))));
    assert_eq!(
        h2.proxy.count("DescribeInstances"),
        2,
        "one failed call, one without the unknown ID"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_named_by_instance_id_or_resource_name_resolve_to_the_instance() {
    let h = Harness::start("id-names", |_| {}).await;
    let named = h.cloud.run_instance(&h.network, 1).await;
    let by_dns = h.cloud.run_instance(&h.network, 0).await;
    let by_provider_id = h.cloud.run_instance(&h.network, 0).await;
    // kubelet with `--cloud-provider=external` names the node after its hostname: the instance ID
    // (kops), or the resource-name hostname (`<id>.ec2.internal` in us-east-1).
    let nodes = vec![
        NodeRef::by_name(named.id.clone()),
        NodeRef::by_name(format!("{}.ec2.internal", named.id)),
        NodeRef::by_name(by_dns.node_name.clone()),
        NodeRef::by_name("i-00000000000000dead"),
        node(&by_provider_id),
    ];
    assert!(by_dns.node_name.starts_with("ip-"), "{}", by_dns.node_name);
    h.proxy.reset_counts();
    let answers = h.provider.lookup_instances(&nodes).await.expect("lookup");
    let provider_id = |n: usize| {
        answers[n]
            .as_ref()
            .unwrap_or_else(|e| panic!("node {:?}: {e:?}", nodes[n].name))
            .metadata
            .provider_id
            .clone()
    };
    assert_eq!(provider_id(0), named.provider_id, "named by instance ID");
    assert_eq!(provider_id(1), named.provider_id, "named by resource name");
    assert_eq!(provider_id(2), by_dns.provider_id, "named by private DNS name");
    assert!(
        matches!(answers[3], Err(ProviderError::InstanceNotFound(_))),
        "unknown instance ID as a name: {:?}",
        answers[3]
    );
    assert_eq!(provider_id(4), by_provider_id.provider_id);
    // Names by ID join the by-ID call: one failing on the unknown ID, one without it, and one
    // `private-dns-name` filter call for the IP-based name.
    assert_eq!(h.proxy.count("DescribeInstances"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_reaches_the_caller_without_sdk_retries() {
    // Three SDK attempts allowed: throttling must still not be retried.
    let h = Harness::start("throttle", |c| c.max_attempts = 3).await;
    let i = h.cloud.run_instance(&h.network, 0).await;
    h.proxy.throttle(true);
    h.proxy.reset_counts();
    let err = h.provider.lookup_instances(&[node(&i)]).await.unwrap_err();
    assert!(err.is_throttled(), "{err:?}");
    assert!(err.to_string().contains("RequestLimitExceeded"), "{err}");
    assert_eq!(
        h.proxy.count("DescribeInstances"),
        1,
        "the SDK must not retry throttling"
    );

    let err = h
        .provider
        .get_load_balancer(h.cluster(), &service(&uid(1)))
        .await
        .unwrap_err();
    assert!(err.is_throttled(), "{err:?}");
    assert!(err.to_string().contains("Throttling"), "{err}");
    assert_eq!(h.proxy.count("DescribeLoadBalancers"), 1);

    let err = h.provider.list_routes(h.cluster()).await.unwrap_err();
    assert!(err.is_throttled(), "{err:?}");

    h.proxy.throttle(false);
    assert!(h.provider.lookup_instances(&[node(&i)]).await.expect("lookup")[0].is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_are_listed_created_and_deleted_in_the_clusters_table() {
    let h = Harness::start("routes", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let target = h.cloud.run_instance(&h.network, 0).await;
    assert!(h.provider.list_routes(&cluster).await.expect("list").is_empty());
    let route = Route {
        name: String::new(),
        target_node: target.node_name.clone(),
        destination_cidr: "100.96.1.0/24".into(),
        blackhole: false,
        target_node_addresses: Vec::new(),
        target_provider_id: String::new(),
    };
    h.provider
        .create_route(&cluster, "uid", &route)
        .await
        .expect("create");
    h.proxy.reset_counts();
    h.provider
        .create_route(&cluster, "uid", &route)
        .await
        .expect("create again");
    assert_eq!(h.proxy.count("CreateRoute"), 0);
    assert_eq!(
        h.proxy.count("ModifyInstanceAttribute"),
        0,
        "source/dest check is already off"
    );

    let listed = h.provider.list_routes(&cluster).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].destination_cidr, "100.96.1.0/24");
    assert_eq!(listed[0].target_node, target.node_name);
    assert!(!listed[0].blackhole);

    // The target goes away: its route is a blackhole for the route controller to delete.
    h.cloud.terminate(&target).await;
    let listed = h.provider.list_routes(&cluster).await.expect("list");
    assert!(listed[0].blackhole, "{listed:?}");
    h.provider
        .delete_route(&cluster, &listed[0])
        .await
        .expect("delete");
    h.provider
        .delete_route(&cluster, &listed[0])
        .await
        .expect("delete again");
    assert!(h.provider.list_routes(&cluster).await.expect("list").is_empty());

    // A route table without the cluster's tag is refused.
    let other = h.cluster().replace("routes", "stranger");
    let err = h.provider.list_routes(&other).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidArgument(m) if m.contains("not tagged")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_unknown_to_the_cloud_gets_no_route() {
    let h = Harness::start("routes-unknown", |_| {}).await;
    let route = Route {
        name: String::new(),
        target_node: "ip-10-9-9-9.ec2.internal".into(),
        destination_cidr: "100.96.2.0/24".into(),
        blackhole: false,
        target_node_addresses: Vec::new(),
        target_provider_id: String::new(),
    };
    assert!(matches!(
        h.provider.create_route(h.cluster(), "uid", &route).await,
        Err(ProviderError::InstanceNotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_unknown_ids_fall_back_to_the_instance_id_filter() {
    let h = Harness::start("unknown-ids", |_| {}).await;
    let known = h.cloud.run_instance(&h.network, 0).await;
    let mut nodes: Vec<NodeRef> = (1..=5)
        .map(|n| NodeRef::new(format!("ghost-{n}"), format!("aws:///us-east-1a/i-{n:017x}")))
        .collect();
    nodes.insert(2, node(&known));
    h.proxy.reset_counts();
    let answers = h.provider.lookup_instances(&nodes).await.expect("lookup");
    for (n, answer) in answers.iter().enumerate() {
        if n == 2 {
            assert_eq!(
                answer.as_ref().expect("known").metadata.provider_id,
                known.provider_id
            );
        } else {
            assert!(
                matches!(answer, Err(ProviderError::InstanceNotFound(_))),
                "{n}: {answer:?}"
            );
        }
    }
    // moto names one unknown ID per error: four rounds, then one filtered call.
    assert_eq!(h.proxy.count("DescribeInstances"), 5);
}

/// The zone's ID as moto describes it.
async fn zone_id(h: &Harness, zone: &str) -> String {
    h.cloud
        .ec2
        .describe_availability_zones()
        .zone_names(zone)
        .send()
        .await
        .expect("DescribeAvailabilityZones")
        .availability_zones()[0]
        .zone_id()
        .expect("zone ID")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_their_zone_id_from_one_description_of_the_zones() {
    let h = Harness::start("zone-id", |_| {}).await;
    let a = h.cloud.run_instance(&h.network, 0).await;
    let b = h.cloud.run_instance(&h.network, 1).await;
    assert_ne!(a.zone, b.zone);
    h.proxy.reset_counts();
    let answers = h
        .provider
        .lookup_instances(&[node(&a), node(&b)])
        .await
        .expect("lookup");
    for (i, answer) in [&a, &b].into_iter().zip(&answers) {
        let labels = &answer.as_ref().expect("found").metadata.additional_labels;
        assert_eq!(
            labels.get("topology.k8s.aws/zone-id"),
            Some(&zone_id(&h, &i.zone).await),
            "{labels:?}"
        );
        assert_eq!(labels.len(), 1, "{labels:?}");
    }
    assert_eq!(
        h.proxy.count("DescribeAvailabilityZones"),
        1,
        "one call for all zones"
    );
    // Known for the process's life: later lookups (and subnet discovery) ask no more.
    h.provider.lookup_instances(&[node(&b)]).await.expect("lookup");
    assert_eq!(h.proxy.count("DescribeAvailabilityZones"), 1);
}

/// A dual-stack subnet in the test's VPC and an instance in it with one IPv6 address.
async fn dual_stack_instance(h: &Harness) -> (Instance, String) {
    let ec2 = &h.cloud.ec2;
    ec2.associate_vpc_cidr_block()
        .vpc_id(&h.network.vpc_id)
        .amazon_provided_ipv6_cidr_block(true)
        .send()
        .await
        .expect("AssociateVpcCidrBlock");
    let subnet = ec2
        .create_subnet()
        .vpc_id(&h.network.vpc_id)
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
    let out = ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::from(INSTANCE_TYPE))
        .min_count(1)
        .max_count(1)
        .subnet_id(&subnet)
        .ipv6_address_count(1)
        .send()
        .await
        .expect("RunInstances");
    let i = &out.instances()[0];
    let id = i.instance_id().expect("ID").to_owned();
    let ipv6 = i.network_interfaces()[0].ipv6_addresses()[0]
        .ipv6_address()
        .expect("an IPv6 address")
        .to_owned();
    let instance = Instance {
        provider_id: format!("aws:///us-east-1a/{id}"),
        node_name: i.private_dns_name().expect("DNS name").to_owned(),
        internal_ip: i.private_ip_address().expect("IPv4").to_owned(),
        zone: "us-east-1a".into(),
        id,
    };
    (instance, ipv6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_only_and_dual_stack_nodes_get_their_addresses_in_the_families_order() {
    use provider_aws::config::IpFamily::{V4, V6};
    let h = Harness::start("ipv6", |_| {}).await;
    let (i, ipv6) = dual_stack_instance(&h).await;
    let ipv6: std::net::Ipv6Addr = ipv6.parse().expect("moto's IPv6 address");
    let ipv6 = ipv6.to_string();
    let v4 = [
        format!("InternalIP {}", i.internal_ip),
        format!("InternalDNS {}", i.node_name),
        format!("Hostname {}", i.node_name),
    ];
    let v6 = [format!("InternalIP {ipv6}")];
    let cases: [(&[_], Vec<String>); 4] = [
        (&[V4], v4.to_vec()),
        (&[V6], v6.to_vec()),
        (&[V4, V6], [&v4[..], &v6[..]].concat()),
        (&[V6, V4], [&v6[..], &v4[..]].concat()),
    ];
    for (families, want) in cases {
        let provider = h.fresh_provider(|c| c.node_ip_families = families.to_vec()).await;
        let answer = provider.lookup_instances(&[node(&i)]).await.expect("lookup");
        let got: Vec<String> = answer[0]
            .as_ref()
            .expect("found")
            .metadata
            .addresses
            .iter()
            // moto answers a public DNS name "None" for an instance without a public IP.
            .filter(|a| a.kind != AddressType::ExternalDNS)
            .map(|a| format!("{:?} {}", a.kind, a.address))
            .collect();
        assert_eq!(got, want, "{families:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_named_otherwise_is_routed_by_its_provider_id() {
    let h = Harness::start("routes-by-id", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let target = h.cloud.run_instance(&h.network, 0).await;
    // kops / kubelet --hostname-override: the Node's name is not the private DNS name.
    let route = Route {
        target_node: "node-a".into(),
        target_provider_id: target.provider_id.clone(),
        destination_cidr: "100.96.7.0/24".into(),
        ..Route::default()
    };
    h.provider
        .create_route(&cluster, "uid-a", &route)
        .await
        .expect("create");
    let listed = h.provider.list_routes(&cluster).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].target_provider_id, target.provider_id);
    assert_eq!(listed[0].target_node, target.node_name, "the instance's DNS name");
    assert!(!listed[0].blackhole);
    h.proxy.reset_counts();
    h.provider
        .create_route(&cluster, "uid-a", &route)
        .await
        .expect("create again");
    assert_eq!(h.proxy.count("CreateRoute") + h.proxy.count("ReplaceRoute"), 0);

    // The provider ID is definite: no fallback to the name or the addresses.
    let gone = h.cloud.run_instance(&h.network, 0).await;
    h.cloud.terminate(&gone).await;
    let to_gone = Route {
        target_node: gone.node_name.clone(),
        target_provider_id: gone.provider_id.clone(),
        destination_cidr: "100.96.8.0/24".into(),
        ..Route::default()
    };
    let err = h
        .provider
        .create_route(&cluster, "uid-g", &to_gone)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InstanceNotFound(_)), "{err:?}");
    let foreign = Route {
        target_provider_id: "gce://p/z/vm".into(),
        ..route.clone()
    };
    let err = h
        .provider
        .create_route(&cluster, "uid-a", &foreign)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InvalidArgument(_)), "{err:?}");
    // Without one, "node-a" is no private DNS name: not found.
    let by_name = Route {
        target_provider_id: String::new(),
        destination_cidr: "100.96.9.0/24".into(),
        ..route
    };
    let err = h
        .provider
        .create_route(&cluster, "uid-a", &by_name)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InstanceNotFound(_)), "{err:?}");
}
