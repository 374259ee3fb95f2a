//! The contract cases. Each takes a fresh fixture and panics with a clear message on a breach.

use std::time::Duration;

use gateway_api::{
    error::GatewayError,
    v1::{self as pb, instance_lookup::Result as LookupResult},
};
use tonic::{Code, Request};

use crate::{CloudFixture, TestInstance};

const CALLER: &str = "contract-test";

fn node(instance: &TestInstance) -> pb::NodeRef {
    pb::NodeRef {
        name: instance.node_name.clone(),
        provider_id: instance.provider_id.clone(),
    }
}

fn by_provider_id(provider_id: &str) -> pb::NodeRef {
    pb::NodeRef {
        name: "some-node".into(),
        provider_id: provider_id.into(),
    }
}

fn err(status: tonic::Status) -> GatewayError {
    GatewayError::from(status)
}

fn service(uid: &str) -> pb::Service {
    pb::Service {
        uid: uid.into(),
        namespace: "default".into(),
        name: format!("svc-{}", &uid[..8.min(uid.len())]),
        ports: vec![
            pb::ServicePort {
                name: "http".into(),
                protocol: pb::Protocol::Tcp as i32,
                port: 80,
                node_port: 30080,
            },
            pb::ServicePort {
                name: "dns".into(),
                protocol: pb::Protocol::Udp as i32,
                port: 53,
                node_port: 30053,
            },
        ],
        external_traffic_policy: pb::ExternalTrafficPolicy::Cluster as i32,
        ..Default::default()
    }
}

fn lb_node(instance: &TestInstance) -> pb::LoadBalancerNode {
    pb::LoadBalancerNode {
        name: instance.node_name.clone(),
        provider_id: instance.provider_id.clone(),
        addresses: vec![pb::NodeAddress {
            r#type: pb::AddressType::InternalIp as i32,
            address: instance.internal_ip.clone(),
        }],
    }
}

fn uid(n: u32) -> String {
    format!("5f2c{n:04x}-7d1e-4b7a-9c3e-0123456789ab")
}

/// Capabilities name the provider and claim all three capabilities.
pub async fn capabilities_describe_the_provider(f: &dyn CloudFixture) {
    let mut c = f.gateway().clients(CALLER).await;
    let caps = c
        .identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .expect("GetCapabilities")
        .into_inner();
    assert_eq!(caps.provider_name, f.provider_name());
    assert!(caps.instances && caps.load_balancers && caps.routes, "{caps:?}");
    let limits = caps.limits.expect("limits");
    assert!(
        limits.max_instance_batch >= 1 && limits.read_rate_per_second > 0.0,
        "{limits:?}"
    );
}

/// A running instance exists, is not shut down.
pub async fn running_instance_exists_and_is_not_shut_down(f: &dyn CloudFixture) {
    let i = f.running_instance().await;
    let mut c = f.gateway().clients(CALLER).await;
    let exists = c
        .instances
        .instance_exists(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .expect("exists");
    assert!(exists.into_inner().exists);
    let shut = c
        .instances
        .instance_shutdown(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .expect("shutdown");
    assert!(!shut.into_inner().shutdown);
}

/// A stopped instance still exists (never delete its Node) and is shut down.
pub async fn stopped_instance_exists_and_is_shut_down(f: &dyn CloudFixture) {
    let i = f.stopped_instance().await;
    let mut c = f.gateway().clients(CALLER).await;
    let exists = c
        .instances
        .instance_exists(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .expect("exists");
    assert!(exists.into_inner().exists, "a stopped instance must exist");
    let shut = c
        .instances
        .instance_shutdown(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .expect("shutdown");
    assert!(shut.into_inner().shutdown);
}

/// A terminated instance does not exist; metadata and shutdown say INSTANCE_NOT_FOUND.
pub async fn terminated_instance_does_not_exist(f: &dyn CloudFixture) {
    let i = f.terminated_instance().await;
    let mut c = f.gateway().clients(CALLER).await;
    let exists = c
        .instances
        .instance_exists(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .expect("exists");
    assert!(!exists.into_inner().exists);
    let status = c
        .instances
        .instance_metadata(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(matches!(err(status), GatewayError::InstanceNotFound(_)));
    let status = c
        .instances
        .instance_shutdown(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .unwrap_err();
    assert!(matches!(err(status), GatewayError::InstanceNotFound(_)));
}

/// An instance that never existed does not exist.
pub async fn unknown_provider_id_does_not_exist(f: &dyn CloudFixture) {
    let mut c = f.gateway().clients(CALLER).await;
    let req = pb::InstanceRequest {
        node: Some(by_provider_id(&f.unknown_provider_id())),
    };
    assert!(
        !c.instances
            .instance_exists(req)
            .await
            .expect("exists")
            .into_inner()
            .exists
    );
}

/// Metadata carries providerID, type, zone, region and the private IP.
pub async fn metadata_describes_the_instance(f: &dyn CloudFixture) {
    let i = f.running_instance().await;
    let mut c = f.gateway().clients(CALLER).await;
    let m = c
        .instances
        .instance_metadata(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .expect("metadata")
        .into_inner()
        .metadata
        .expect("metadata body");
    assert_eq!(m.provider_id, i.provider_id);
    assert_eq!(m.instance_type, i.instance_type);
    assert_eq!(m.zone, i.zone);
    assert_eq!(m.region, i.region);
    let internal = pb::NodeAddress {
        r#type: pb::AddressType::InternalIp as i32,
        address: i.internal_ip.clone(),
    };
    assert!(
        m.addresses.contains(&internal),
        "{:?} lacks {internal:?}",
        m.addresses
    );
}

/// With an empty providerID the node is found by name.
pub async fn lookup_by_name_when_provider_id_is_empty(f: &dyn CloudFixture) {
    let i = f.running_instance().await;
    let mut c = f.gateway().clients(CALLER).await;
    let by_name = pb::NodeRef {
        name: i.node_name.clone(),
        provider_id: String::new(),
    };
    let m = c
        .instances
        .instance_metadata(pb::InstanceRequest { node: Some(by_name) })
        .await
        .expect("metadata by name")
        .into_inner()
        .metadata
        .expect("metadata body");
    assert_eq!(m.provider_id, i.provider_id);
}

/// A batch answers every node, in order, each with its own result.
pub async fn batch_lookup_answers_each_node_in_order(f: &dyn CloudFixture) {
    let running = f.running_instance().await;
    let stopped = f.stopped_instance().await;
    let terminated = f.terminated_instance().await;
    let nodes = vec![
        node(&terminated),
        node(&running),
        by_provider_id(&f.unknown_provider_id()),
        node(&stopped),
    ];
    let mut c = f.gateway().clients(CALLER).await;
    let results = c
        .instances
        .batch_lookup_instances(pb::BatchLookupInstancesRequest { nodes: nodes.clone() })
        .await
        .expect("batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 4);
    for (result, asked) in results.iter().zip(&nodes) {
        assert_eq!(
            result.node.as_ref(),
            Some(asked),
            "answers must come in request order"
        );
    }
    let not_found = |r: &pb::InstanceLookup| match &r.result {
        Some(LookupResult::Error(e)) => {
            matches!(GatewayError::from_item(e), GatewayError::InstanceNotFound(_))
        }
        _ => false,
    };
    let found = |r: &pb::InstanceLookup| match &r.result {
        Some(LookupResult::Found(found)) => Some(found.clone()),
        _ => None,
    };
    assert!(not_found(&results[0]), "terminated: {:?}", results[0]);
    let r1 = found(&results[1]).expect("running is found");
    assert!(!r1.shutdown);
    assert_eq!(r1.metadata.expect("metadata").provider_id, running.provider_id);
    assert!(not_found(&results[2]), "unknown: {:?}", results[2]);
    assert!(found(&results[3]).expect("stopped is found").shutdown);
}

/// get (absent) → ensure → get (present, same status) → delete → get (absent) → delete again.
pub async fn load_balancer_lifecycle(f: &dyn CloudFixture) {
    let cluster = f.cluster_name();
    let backend = f.running_instance().await;
    let svc = service(&uid(1));
    let mut c = f.gateway().clients(CALLER).await;
    let lbs = &mut c.load_balancers;

    let get = pb::GetLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(svc.clone()),
    };
    assert!(
        !lbs.get_load_balancer(get.clone())
            .await
            .expect("get")
            .into_inner()
            .exists
    );

    let name = lbs
        .get_load_balancer_name(pb::GetLoadBalancerNameRequest {
            cluster_name: cluster.clone(),
            service: Some(svc.clone()),
        })
        .await
        .expect("name")
        .into_inner()
        .name;
    assert!(!name.is_empty() && name.len() <= 32, "{name}");

    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(svc.clone()),
        nodes: vec![lb_node(&backend)],
    };
    let status = ensure_until_ready(lbs, ensure).await;
    let ingress = status.ingress.first().expect("an ingress point");
    assert!(
        !ingress.ip.is_empty() || !ingress.hostname.is_empty(),
        "{status:?}"
    );

    let got = lbs
        .get_load_balancer(get.clone())
        .await
        .expect("get")
        .into_inner();
    assert!(got.exists);
    assert_eq!(
        got.status.as_ref(),
        Some(&status),
        "get must report what ensure returned"
    );
    assert_eq!(f.load_balancer_count(&cluster).await, 1);

    let delete = pb::EnsureLoadBalancerDeletedRequest {
        cluster_name: cluster.clone(),
        service: Some(svc),
    };
    lbs.ensure_load_balancer_deleted(delete.clone())
        .await
        .expect("delete");
    assert!(!lbs.get_load_balancer(get).await.expect("get").into_inner().exists);
    lbs.ensure_load_balancer_deleted(delete)
        .await
        .expect("deleting again succeeds");
    assert_eq!(
        f.load_balancer_count(&cluster).await,
        0,
        "nothing of the cluster may remain"
    );
}

async fn ensure_until_ready(
    lbs: &mut pb::load_balancers_client::LoadBalancersClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            gateway_api::caller::NameCaller,
        >,
    >,
    ensure: pb::EnsureLoadBalancerRequest,
) -> pb::LoadBalancerStatus {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match lbs.ensure_load_balancer(ensure.clone()).await {
            Ok(resp) => return resp.into_inner().status.expect("status"),
            Err(status) => match err(status) {
                GatewayError::RetryAfter { after, .. } if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(after.min(Duration::from_secs(2))).await;
                }
                other => panic!("ensure failed: {other:?}"),
            },
        }
    }
}

/// Ensuring the same service twice leaves exactly one load balancer with the same status.
pub async fn ensure_twice_creates_one_load_balancer(f: &dyn CloudFixture) {
    let cluster = f.cluster_name();
    let backend = f.running_instance().await;
    let mut c = f.gateway().clients(CALLER).await;
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(service(&uid(2))),
        nodes: vec![lb_node(&backend)],
    };
    let first = ensure_until_ready(&mut c.load_balancers, ensure.clone()).await;
    let second = ensure_until_ready(&mut c.load_balancers, ensure.clone()).await;
    assert_eq!(first, second);
    assert_eq!(f.load_balancer_count(&cluster).await, 1);
    let delete = pb::EnsureLoadBalancerDeletedRequest {
        cluster_name: cluster.clone(),
        service: ensure.service,
    };
    c.load_balancers
        .ensure_load_balancer_deleted(delete)
        .await
        .expect("delete");
    assert_eq!(f.load_balancer_count(&cluster).await, 0);
}

/// UpdateLoadBalancer replaces the backend set.
pub async fn update_changes_backends(f: &dyn CloudFixture) {
    let cluster = f.cluster_name();
    let a = f.running_instance().await;
    let b = f.running_instance().await;
    let svc = service(&uid(3));
    let mut c = f.gateway().clients(CALLER).await;
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(svc.clone()),
        nodes: vec![lb_node(&a)],
    };
    ensure_until_ready(&mut c.load_balancers, ensure).await;
    let name = c
        .load_balancers
        .get_load_balancer_name(pb::GetLoadBalancerNameRequest {
            cluster_name: cluster.clone(),
            service: Some(svc.clone()),
        })
        .await
        .expect("name")
        .into_inner()
        .name;
    let backends = f.load_balancer_backends(&name).await;
    assert!(
        backends.iter().any(|id| a.provider_id.contains(id.as_str())),
        "{backends:?} lacks {}",
        a.provider_id
    );

    let update = pb::UpdateLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(svc.clone()),
        nodes: vec![lb_node(&b)],
    };
    c.load_balancers
        .update_load_balancer(update)
        .await
        .expect("update");
    let backends = f.load_balancer_backends(&name).await;
    assert!(
        backends.iter().any(|id| b.provider_id.contains(id.as_str())),
        "{backends:?} lacks {}",
        b.provider_id
    );
    assert!(
        !backends.iter().any(|id| a.provider_id.contains(id.as_str())),
        "{backends:?} still has {}",
        a.provider_id
    );
    let delete = pb::EnsureLoadBalancerDeletedRequest {
        cluster_name: cluster,
        service: Some(svc),
    };
    c.load_balancers
        .ensure_load_balancer_deleted(delete)
        .await
        .expect("delete");
}

/// A service the provider leaves to another controller gets IMPLEMENTED_ELSEWHERE, and nothing is created.
pub async fn implemented_elsewhere_is_typed(f: &dyn CloudFixture) {
    let cluster = f.cluster_name();
    let mut svc = service(&uid(4));
    svc.annotations = f.implemented_elsewhere_annotations().into_iter().collect();
    let mut c = f.gateway().clients(CALLER).await;
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(svc.clone()),
        nodes: vec![],
    };
    let status = c.load_balancers.ensure_load_balancer(ensure).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(matches!(err(status), GatewayError::ImplementedElsewhere(_)));
    assert_eq!(f.load_balancer_count(&cluster).await, 0);
    // Deleting must still work (and never answer ImplementedElsewhere).
    let delete = pb::EnsureLoadBalancerDeletedRequest {
        cluster_name: cluster,
        service: Some(svc),
    };
    c.load_balancers
        .ensure_load_balancer_deleted(delete)
        .await
        .expect("delete");
}

/// A service the provider refuses gets INVALID_ARGUMENT, and nothing is created.
pub async fn provider_invalid_argument_is_typed(f: &dyn CloudFixture) {
    let cluster = f.cluster_name();
    let (annotations, ip) = f.invalid_service();
    let mut svc = service(&uid(5));
    svc.annotations = annotations.into_iter().collect();
    svc.load_balancer_ip = ip;
    let mut c = f.gateway().clients(CALLER).await;
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(svc),
        nodes: vec![],
    };
    let status = c.load_balancers.ensure_load_balancer(ensure).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(matches!(err(status), GatewayError::InvalidArgument(_)));
    assert_eq!(f.load_balancer_count(&cluster).await, 0);
}

/// A load balancer still provisioning gets RETRY_AFTER with a delay, then becomes ready.
pub async fn retry_after_is_typed(f: &dyn CloudFixture) {
    f.slow_provisioning(2).await.unwrap_or_else(|| {
        panic!(
            "{} cannot be made to provision slowly: declare `slow_provisioning: unsupported(..)` in its contract_suite!",
            f.provider_name()
        )
    });
    let cluster = f.cluster_name();
    let mut c = f.gateway().clients(CALLER).await;
    let ensure = pb::EnsureLoadBalancerRequest {
        cluster_name: cluster.clone(),
        service: Some(service(&uid(6))),
        nodes: vec![],
    };
    let status = c
        .load_balancers
        .ensure_load_balancer(ensure.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    match err(status) {
        GatewayError::RetryAfter { after, .. } => {
            assert!(
                after > Duration::ZERO && after <= Duration::from_secs(2),
                "{after:?}"
            )
        }
        other => panic!("expected RetryAfter, got {other:?}"),
    }
    let ready = ensure_until_ready(&mut c.load_balancers, ensure).await;
    assert!(!ready.ingress.is_empty());
    assert_eq!(
        f.load_balancer_count(&cluster).await,
        1,
        "retrying must not create a second one"
    );
}

/// When the cloud throttles, the caller gets RESOURCE_EXHAUSTED/THROTTLED.
pub async fn throttled_is_typed(f: &dyn CloudFixture) {
    let i = f.running_instance().await;
    f.throttle_everything()
        .await
        .unwrap_or_else(|| panic!("{} cannot be made to throttle", f.provider_name()));
    let mut c = f.gateway().clients(CALLER).await;
    let status = c
        .instances
        .instance_exists(pb::InstanceRequest { node: Some(node(&i)) })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(matches!(err(status), GatewayError::Throttled { .. }));
    let get = pb::GetLoadBalancerRequest {
        cluster_name: f.cluster_name(),
        service: Some(service(&uid(7))),
    };
    let status = c.load_balancers.get_load_balancer(get).await.unwrap_err();
    assert!(matches!(err(status), GatewayError::Throttled { .. }));
}

/// list → create → create again → list → delete → delete again → list.
pub async fn routes_lifecycle(f: &dyn CloudFixture) {
    let cluster = f.cluster_name();
    let (cidr, target) = f.route_target().await;
    let mut c = f.gateway().clients(CALLER).await;
    let list = pb::ListRoutesRequest {
        cluster_name: cluster.clone(),
    };
    assert!(
        c.routes
            .list_routes(list.clone())
            .await
            .expect("list")
            .into_inner()
            .routes
            .is_empty()
    );
    let route = pb::Route {
        target_node: target.node_name.clone(),
        destination_cidr: cidr.clone(),
        ..Default::default()
    };
    let create = pb::CreateRouteRequest {
        cluster_name: cluster.clone(),
        name_hint: "0d6f6c2a-1b1b-4c4c-8d8d-0123456789ab".into(),
        route: Some(route),
    };
    c.routes.create_route(create.clone()).await.expect("create");
    c.routes
        .create_route(create)
        .await
        .expect("creating the same route again succeeds");
    let routes = c
        .routes
        .list_routes(list.clone())
        .await
        .expect("list")
        .into_inner()
        .routes;
    assert_eq!(routes.len(), 1, "{routes:?}");
    assert_eq!(routes[0].destination_cidr, cidr);
    assert_eq!(routes[0].target_node, target.node_name);
    assert!(!routes[0].blackhole);
    let delete = pb::DeleteRouteRequest {
        cluster_name: cluster.clone(),
        route: Some(routes[0].clone()),
    };
    c.routes.delete_route(delete.clone()).await.expect("delete");
    c.routes
        .delete_route(delete)
        .await
        .expect("deleting again succeeds");
    assert!(
        c.routes
            .list_routes(list)
            .await
            .expect("list")
            .into_inner()
            .routes
            .is_empty()
    );
}

/// Requests that can never succeed are refused by the gateway with INVALID_ARGUMENT.
pub async fn gateway_validation_rejects_bad_requests(f: &dyn CloudFixture) {
    let mut c = f.gateway().clients(CALLER).await;
    let cluster = f.cluster_name();
    let codes = [
        c.instances
            .instance_exists(pb::InstanceRequest { node: None })
            .await
            .unwrap_err()
            .code(),
        c.instances
            .instance_exists(pb::InstanceRequest {
                node: Some(pb::NodeRef::default()),
            })
            .await
            .unwrap_err()
            .code(),
        c.load_balancers
            .ensure_load_balancer(pb::EnsureLoadBalancerRequest {
                cluster_name: String::new(),
                service: Some(service(&uid(8))),
                nodes: vec![],
            })
            .await
            .unwrap_err()
            .code(),
        c.load_balancers
            .ensure_load_balancer(pb::EnsureLoadBalancerRequest {
                cluster_name: cluster.clone(),
                service: Some(pb::Service {
                    uid: String::new(),
                    ..service(&uid(8))
                }),
                nodes: vec![],
            })
            .await
            .unwrap_err()
            .code(),
        c.load_balancers
            .ensure_load_balancer(pb::EnsureLoadBalancerRequest {
                cluster_name: cluster.clone(),
                service: Some(pb::Service {
                    ports: vec![pb::ServicePort {
                        protocol: 42,
                        port: 80,
                        ..Default::default()
                    }],
                    ..service(&uid(8))
                }),
                nodes: vec![],
            })
            .await
            .unwrap_err()
            .code(),
        c.routes
            .create_route(pb::CreateRouteRequest {
                cluster_name: cluster.clone(),
                name_hint: "x".into(),
                route: Some(pb::Route {
                    destination_cidr: "not-a-cidr".into(),
                    target_node: "n".into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_err()
            .code(),
    ];
    assert!(codes.iter().all(|c| *c == Code::InvalidArgument), "{codes:?}");
    assert_eq!(f.load_balancer_count(&cluster).await, 0);
}

/// Bytes that are not a protobuf message get an error status, and the gateway keeps serving.
pub async fn garbage_bytes_get_a_status_and_the_gateway_lives_on(f: &dyn CloudFixture) {
    let c = f.gateway().clients(CALLER).await;
    let mut grpc = tonic::client::Grpc::new(c.channel.clone());
    grpc.ready().await.expect("channel ready");
    let path = http::uri::PathAndQuery::from_static("/cloudgateway.v1.Instances/InstanceExists");
    // A field header announcing a 2 GB length-delimited field, then nothing.
    let garbage = bytes::Bytes::from_static(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x07, 0x01]);
    let result = grpc
        .unary::<_, bytes::Bytes, _>(Request::new(garbage), path, RawCodec)
        .await;
    let status = result.expect_err("garbage must be refused");
    assert!(
        matches!(status.code(), Code::Internal | Code::InvalidArgument),
        "{status:?}"
    );
    let mut c = f.gateway().clients(CALLER).await;
    c.identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .expect("still serving");
}

/// The caller header is advisory: a value the gateway does not know (malformed, or a name
/// that is not one of its callers) neither breaks the call nor buys its sender a queue of its
/// own; under mutual TLS the certificate decides and the header is ignored.
pub async fn an_unknown_caller_header_is_served_as_anonymous(f: &dyn CloudFixture) {
    for header in ["UPPER_case", "made-up-caller"] {
        let c = f.gateway().clients(header).await;
        let mut identity = c.identity.clone();
        identity
            .get_capabilities(pb::GetCapabilitiesRequest {})
            .await
            .unwrap_or_else(|status| panic!("{header}: {status:?}"));
    }
    let metrics = f.gateway().handles.metrics.render();
    assert!(
        !metrics.contains("made-up-caller") && !metrics.contains("UPPER_case"),
        "an unknown header value reaches no metric label"
    );
}

/// A codec that sends and receives raw bytes, to put arbitrary bytes on the wire.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Self::Item, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), Self::Error> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
