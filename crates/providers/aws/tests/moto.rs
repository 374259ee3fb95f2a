//! The AWS provider against moto_server: every operation, through a fault-injecting proxy that
//! also counts API calls. Needs `scripts/moto/setup.sh`.

mod support;

use provider::{
    AddressType, ExternalTrafficPolicy, Instances, LoadBalancerNode, LoadBalancers, NodeRef, Protocol,
    ProviderError, Route, Routes, ServicePort, ServiceSpec,
};
use provider_aws::{
    naming::{LbProtocol, target_group_name},
    plan::{ANNOTATION_INTERNAL, ANNOTATION_TYPE},
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

fn lb_node(i: &Instance) -> LoadBalancerNode {
    LoadBalancerNode {
        name: i.node_name.clone(),
        provider_id: i.provider_id.clone(),
        addresses: Vec::new(),
    }
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
async fn load_balancer_ensure_is_idempotent_update_changes_what_differs_delete_leaves_nothing() {
    let h = Harness::start("lb", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let b = h.cloud.run_instance(&h.network, 1).await;
    let mut svc = service(&uid(2));
    let name = h.provider.load_balancer_name(&cluster, &svc);
    assert_eq!(name.len(), 32);

    assert_eq!(
        h.provider.get_load_balancer(&cluster, &svc).await.expect("get"),
        None
    );
    let status = h
        .provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    let hostname = &status.ingress[0].hostname;
    assert!(hostname.contains(&name), "{status:?}");
    assert_eq!(
        h.provider.get_load_balancer(&cluster, &svc).await.expect("get"),
        Some(status.clone())
    );
    let (lbs, tgs) = h.cloud.tagged_resources(&cluster).await;
    assert_eq!((lbs.len(), tgs.len()), (1, 2), "one NLB, a target group per port");
    assert_eq!(h.cloud.backends(&name).await, vec![a.id.clone()]);

    // Twice: nothing new, nothing changed.
    h.proxy.reset_counts();
    let again = h
        .provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure again");
    assert_eq!(again, status);
    for write in [
        "CreateLoadBalancer",
        "CreateTargetGroup",
        "CreateListener",
        "ModifyListener",
        "ModifyTargetGroup",
        "RegisterTargets",
        "DeregisterTargets",
        "AddTags",
    ] {
        assert_eq!(h.proxy.count(write), 0, "{write} on a converged load balancer");
    }
    assert_eq!(h.cloud.tagged_resources(&cluster).await.0.len(), 1);

    // Update: only the backends change.
    h.proxy.reset_counts();
    h.provider
        .update_load_balancer(&cluster, &svc, &[lb_node(&b)])
        .await
        .expect("update");
    assert_eq!(h.cloud.backends(&name).await, vec![b.id.clone()]);
    assert_eq!(h.proxy.count("RegisterTargets"), 2);
    assert_eq!(h.proxy.count("DeregisterTargets"), 2);
    assert_eq!(
        h.proxy.count("CreateListener") + h.proxy.count("ModifyListener"),
        0
    );

    // Local traffic policy: health checks move to the healthCheckNodePort.
    svc.external_traffic_policy = ExternalTrafficPolicy::Local;
    svc.health_check_node_port = 31999;
    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&b)])
        .await
        .expect("ensure Local");
    assert_eq!(h.proxy.count("ModifyTargetGroup"), 2);
    let groups = h
        .cloud
        .elb
        .describe_target_groups()
        .names(target_group_name(&name, 80, LbProtocol::Tcp, 30080))
        .send()
        .await
        .expect("target group");
    let group = &groups.target_groups()[0];
    assert_eq!(group.health_check_port(), Some("31999"));
    assert_eq!(group.health_check_path(), Some("/healthz"));

    // A port changes: its listener points at a new target group, the old group goes.
    svc.ports[0].node_port = 30081;
    svc.ports.truncate(1);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&b)])
        .await
        .expect("ensure new ports");
    let (_, tgs) = h.cloud.tagged_resources(&cluster).await;
    assert_eq!(tgs.len(), 1, "the stale groups are deleted");

    // Delete: listeners, target groups and the load balancer; twice is fine.
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert_eq!(
        h.provider.get_load_balancer(&cluster, &svc).await.expect("get"),
        None
    );
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete again");
    assert_eq!(h.cloud.tagged_resources(&cluster).await, (vec![], vec![]));
    // An update of a deleted load balancer is refused, not a silent re-creation.
    assert!(matches!(
        h.provider
            .update_load_balancer(&cluster, &svc, &[lb_node(&b)])
            .await,
        Err(ProviderError::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_and_unknown_nodes_are_left_out_of_targets() {
    let h = Harness::start("targets", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let up = h.cloud.run_instance(&h.network, 0).await;
    let down = h.cloud.run_instance(&h.network, 1).await;
    h.cloud.stop(&down).await;
    let by_name = h.cloud.run_instance(&h.network, 1).await;
    let svc = service(&uid(3));
    let nodes = [
        lb_node(&up),
        lb_node(&down),
        LoadBalancerNode {
            name: by_name.node_name.clone(),
            provider_id: String::new(),
            addresses: Vec::new(),
        },
        LoadBalancerNode {
            name: "elsewhere".into(),
            provider_id: "gce://p/z/n".into(),
            addresses: Vec::new(),
        },
    ];
    h.provider
        .ensure_load_balancer(&cluster, &svc, &nodes)
        .await
        .expect("ensure");
    let name = h.provider.load_balancer_name(&cluster, &svc);
    let mut want = vec![up.id.clone(), by_name.id.clone()];
    want.sort();
    assert_eq!(h.cloud.backends(&name).await, want);
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_annotation_gives_an_internal_nlb_and_a_change_replaces_it() {
    let h = Harness::start("internal", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let mut svc = service(&uid(4));
    svc.annotations.insert(ANNOTATION_INTERNAL.into(), "true".into());
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[])
        .await
        .expect("ensure");
    let name = h.provider.load_balancer_name(&cluster, &svc);
    let scheme = |h: &Harness| {
        let elb = h.cloud.elb.clone();
        let name = name.clone();
        async move {
            elb.describe_load_balancers()
                .names(name)
                .send()
                .await
                .expect("describe")
                .load_balancers()[0]
                .scheme()
                .map(|s| s.as_str().to_owned())
        }
    };
    assert_eq!(scheme(&h).await.as_deref(), Some("internal"));
    svc.annotations.insert(ANNOTATION_INTERNAL.into(), "false".into());
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[])
        .await
        .expect("ensure");
    assert_eq!(scheme(&h).await.as_deref(), Some("internet-facing"));
    assert_eq!(h.cloud.tagged_resources(&cluster).await.0.len(), 1);
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert_eq!(h.cloud.tagged_resources(&cluster).await, (vec![], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_typed_and_touch_nothing() {
    let h = Harness::start("refusals", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let mut elsewhere = service(&uid(5));
    elsewhere
        .annotations
        .insert(ANNOTATION_TYPE.into(), "external".into());
    let mut bad = service(&uid(6));
    bad.annotations.insert(ANNOTATION_INTERNAL.into(), "maybe".into());
    let mut with_ip = service(&uid(7));
    with_ip.requested_ip = "10.0.0.10".into();
    h.proxy.reset_counts();
    assert!(matches!(
        h.provider.ensure_load_balancer(&cluster, &elsewhere, &[]).await,
        Err(ProviderError::ImplementedElsewhere(_))
    ));
    assert!(matches!(
        h.provider.update_load_balancer(&cluster, &elsewhere, &[]).await,
        Err(ProviderError::ImplementedElsewhere(_))
    ));
    for svc in [&bad, &with_ip] {
        assert!(matches!(
            h.provider.ensure_load_balancer(&cluster, svc, &[]).await,
            Err(ProviderError::InvalidArgument(_))
        ));
    }
    assert_eq!(h.proxy.count("CreateLoadBalancer"), 0);
    // Deleting never answers ImplementedElsewhere.
    h.provider
        .ensure_load_balancer_deleted(&cluster, &elsewhere)
        .await
        .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_of_someone_else_is_never_touched() {
    let h = Harness::start("foreign", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let svc = service(&uid(8));
    let name = h.provider.load_balancer_name(&cluster, &svc);
    // Same name, no cluster tag: someone else's.
    h.cloud
        .elb
        .create_load_balancer()
        .name(&name)
        .r#type(aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum::Network)
        .set_subnets(Some(h.network.subnets.clone()))
        .send()
        .await
        .expect("create a foreign load balancer");
    assert_eq!(
        h.provider.get_load_balancer(&cluster, &svc).await.expect("get"),
        None
    );
    assert!(matches!(
        h.provider.ensure_load_balancer(&cluster, &svc, &[]).await,
        Err(ProviderError::InvalidArgument(m)) if m.contains("not tagged")
    ));
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete leaves it alone");
    assert!(
        h.cloud
            .elb
            .describe_load_balancers()
            .names(&name)
            .send()
            .await
            .is_ok(),
        "the foreign load balancer must survive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_group_left_by_a_crash_is_reused() {
    let h = Harness::start("crash", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let svc = service(&uid(9));
    let name = h.provider.load_balancer_name(&cluster, &svc);
    // An earlier attempt created the port-80 group and died before the listener.
    let group = target_group_name(&name, 80, LbProtocol::Tcp, 30080);
    h.cloud
        .elb
        .create_target_group()
        .name(&group)
        .protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .port(30080)
        .vpc_id(&h.network.vpc_id)
        .target_type(aws_sdk_elasticloadbalancingv2::types::TargetTypeEnum::Instance)
        .tags(
            aws_sdk_elasticloadbalancingv2::types::Tag::builder()
                .key(format!("kubernetes.io/cluster/{cluster}"))
                .value("owned")
                .build(),
        )
        .send()
        .await
        .expect("a leftover target group");
    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[])
        .await
        .expect("ensure");
    assert_eq!(h.proxy.count("CreateTargetGroup"), 1, "only the UDP group is new");
    assert_eq!(h.cloud.tagged_resources(&cluster).await.1.len(), 2);
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert_eq!(h.cloud.tagged_resources(&cluster).await, (vec![], vec![]));
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
