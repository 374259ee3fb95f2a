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
