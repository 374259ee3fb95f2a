//! Property test of the gateway's request handling over a real socket: random but well-formed
//! cloudgateway.v1 messages (any strings, negative ports, unknown enum values, empty and
//! missing fields), random bytes in place of a message, and random `traceparent` and caller
//! headers, to every method. The gateway answers each with a status, never panics, and keeps
//! serving. A panic in the gateway would take every controller's cloud access down with it.
//!
//! 256 cases by default; `PROPTEST_CASES=100000` (what `make fuzz` sets) for the full run.

use std::{
    sync::{
        LazyLock, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::{Buf as _, BufMut as _};
use cloud_gateway::GatewayConfig;
use contract_tests::RunningGateway;
use gateway_api::v1 as pb;
use proptest::prelude::*;
use prost::Message as _;
use provider_simulator::{Knobs, NewInstance, Simulator, SimulatorConfig};
use token_bucket::Limit;
use tonic::{
    Code, Request, Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    metadata::MetadataValue,
};

/// Every panic of the process, the gateway's tasks included.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// A gateway on the simulator (a few machines, limits out of the way), on a runtime of its own
/// that the cases drive.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    gateway: RunningGateway,
    /// One connection for every case.
    channel: tonic::transport::Channel,
    /// A provider ID the simulator knows, so that some lookups find a machine.
    known: String,
}

static FIXTURE: LazyLock<Mutex<Fixture>> = LazyLock::new(|| {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (gateway, known) = runtime.block_on(async {
        let sim = Simulator::open(SimulatorConfig {
            knobs: Knobs::default(),
            durable_writes: false,
            ..Default::default()
        })
        .expect("simulator");
        let known = sim
            .add_instance(NewInstance::named("known"))
            .expect("instance")
            .provider_id();
        let unlimited = Limit::new(1e6, 1e6).expect("limit");
        let config = GatewayConfig {
            read_limit: unlimited,
            write_limit: unlimited,
            ..GatewayConfig::default()
        };
        (RunningGateway::start(config, sim, None).await, known)
    });
    let channel = runtime.block_on(gateway.clients("fuzz")).channel;
    Mutex::new(Fixture {
        runtime,
        gateway,
        channel,
        known,
    })
});

/// Sends and receives messages as they are: bytes in, bytes out.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}

const METHODS: &[&str] = &[
    "/cloudgateway.v1.Identity/GetCapabilities",
    "/cloudgateway.v1.Instances/InstanceExists",
    "/cloudgateway.v1.Instances/InstanceShutdown",
    "/cloudgateway.v1.Instances/InstanceMetadata",
    "/cloudgateway.v1.Instances/BatchLookupInstances",
    "/cloudgateway.v1.LoadBalancers/GetLoadBalancer",
    "/cloudgateway.v1.LoadBalancers/GetLoadBalancerName",
    "/cloudgateway.v1.LoadBalancers/EnsureLoadBalancer",
    "/cloudgateway.v1.LoadBalancers/UpdateLoadBalancer",
    "/cloudgateway.v1.LoadBalancers/EnsureLoadBalancerDeleted",
    "/cloudgateway.v1.Routes/ListRoutes",
    "/cloudgateway.v1.Routes/CreateRoute",
    "/cloudgateway.v1.Routes/DeleteRoute",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("kubernetes".to_owned()),
        Just("simulator://sim-east-1a/i-0000000000000001".to_owned()),
        Just("aws:///us-east-1a/i-1".to_owned()),
        Just("10.244.1.0/24".to_owned()),
        Just("fd00::/64".to_owned()),
        Just("203.0.113.7".to_owned()),
        "[a-z0-9./:_-]{0,24}",
        ".{0,16}",
    ]
}

fn number() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(0),
        Just(80),
        Just(30080),
        Just(65535),
        Just(65536),
        Just(-1),
        any::<i32>()
    ]
}

fn node_ref(known: String) -> impl Strategy<Value = pb::NodeRef> {
    (text(), prop_oneof![text(), Just(known)])
        .prop_map(|(name, provider_id)| pb::NodeRef { name, provider_id })
}

fn address() -> impl Strategy<Value = pb::NodeAddress> {
    (any::<i32>(), text()).prop_map(|(r#type, address)| pb::NodeAddress { r#type, address })
}

fn service() -> impl Strategy<Value = pb::Service> {
    let port = (text(), number(), number(), number()).prop_map(|(name, protocol, port, node_port)| {
        pb::ServicePort {
            name,
            protocol,
            port,
            node_port,
        }
    });
    (
        (text(), text(), text()),
        proptest::collection::vec(port, 0..4),
        (number(), number()),
        proptest::collection::vec(text(), 0..3),
        text(),
        proptest::collection::hash_map(
            prop_oneof![
                Just("simulator.cloudgateway.io/load-balancer-type".to_owned()),
                text()
            ],
            text(),
            0..3,
        ),
        (any::<bool>(), proptest::collection::vec(number(), 0..4)),
    )
        .prop_map(
            |((uid, namespace, name), ports, (policy, hc), ranges, ip, annotations, (affinity, families))| {
                pb::Service {
                    uid,
                    namespace,
                    name,
                    ports,
                    external_traffic_policy: policy,
                    health_check_node_port: hc,
                    load_balancer_source_ranges: ranges,
                    load_balancer_ip: ip,
                    annotations,
                    session_affinity_client_ip: affinity,
                    ip_families: families,
                }
            },
        )
}

fn lb_nodes() -> impl Strategy<Value = Vec<pb::LoadBalancerNode>> {
    proptest::collection::vec(
        (
            text(),
            text(),
            proptest::collection::vec(address(), 0..3),
            proptest::collection::btree_map(text(), text(), 0..3),
        )
            .prop_map(|(name, provider_id, addresses, labels)| pb::LoadBalancerNode {
                name,
                provider_id,
                addresses,
                labels: labels.into_iter().collect(),
            }),
        0..4,
    )
}

fn route() -> impl Strategy<Value = pb::Route> {
    (
        text(),
        text(),
        text(),
        any::<bool>(),
        proptest::collection::vec(address(), 0..2),
        text(),
    )
        .prop_map(
            |(name, target_node, destination_cidr, blackhole, target_node_addresses, target_provider_id)| {
                pb::Route {
                    name,
                    target_node,
                    destination_cidr,
                    blackhole,
                    target_node_addresses,
                    target_provider_id,
                }
            },
        )
}

/// A well-formed message for `METHODS[method]`, with any content.
fn message(method: usize, known: String) -> BoxedStrategy<Vec<u8>> {
    let cluster = prop_oneof![Just("kubernetes".to_owned()), text()];
    let optional_service = proptest::option::of(service());
    match method {
        0 => Just(pb::GetCapabilitiesRequest {}.encode_to_vec()).boxed(),
        1..=3 => proptest::option::of(node_ref(known))
            .prop_map(|node| pb::InstanceRequest { node }.encode_to_vec())
            .boxed(),
        4 => proptest::collection::vec(node_ref(known), 0..6)
            .prop_map(|nodes| pb::BatchLookupInstancesRequest { nodes }.encode_to_vec())
            .boxed(),
        5 => (cluster, optional_service)
            .prop_map(|(cluster_name, service)| {
                pb::GetLoadBalancerRequest {
                    cluster_id: String::new(),
                    cluster_name,
                    service,
                }
                .encode_to_vec()
            })
            .boxed(),
        6 => (cluster, optional_service)
            .prop_map(|(cluster_name, service)| {
                pb::GetLoadBalancerNameRequest {
                    cluster_name,
                    service,
                }
                .encode_to_vec()
            })
            .boxed(),
        7 => (cluster, optional_service, lb_nodes())
            .prop_map(|(cluster_name, service, nodes)| {
                pb::EnsureLoadBalancerRequest {
                    cluster_id: String::new(),
                    cluster_name,
                    service,
                    nodes,
                }
                .encode_to_vec()
            })
            .boxed(),
        8 => (cluster, optional_service, lb_nodes())
            .prop_map(|(cluster_name, service, nodes)| {
                pb::UpdateLoadBalancerRequest {
                    cluster_id: String::new(),
                    cluster_name,
                    service,
                    nodes,
                }
                .encode_to_vec()
            })
            .boxed(),
        9 => (cluster, optional_service)
            .prop_map(|(cluster_name, service)| {
                pb::EnsureLoadBalancerDeletedRequest {
                    cluster_id: String::new(),
                    cluster_name,
                    service,
                }
                .encode_to_vec()
            })
            .boxed(),
        10 => cluster
            .prop_map(|cluster_name| pb::ListRoutesRequest { cluster_name }.encode_to_vec())
            .boxed(),
        11 => (cluster, text(), proptest::option::of(route()))
            .prop_map(|(cluster_name, name_hint, route)| {
                pb::CreateRouteRequest {
                    cluster_name,
                    name_hint,
                    route,
                }
                .encode_to_vec()
            })
            .boxed(),
        _ => (cluster, proptest::option::of(route()))
            .prop_map(|(cluster_name, route)| pb::DeleteRouteRequest { cluster_name, route }.encode_to_vec())
            .boxed(),
    }
}

/// Header values a caller could send: well-formed trace contexts, near misses, any text.
fn traceparent() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        Just("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
        Just("00-00000000000000000000000000000000-0000000000000000-00".to_owned()),
        Just("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra".to_owned()),
        "[0-9a-f-]{0,60}",
        "[ -~]{0,20}",
    ])
}

fn caller() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        Just("node-controller".to_owned()),
        Just("service-controller".to_owned()),
        Just("route-controller".to_owned()),
        "[ -~]{0,20}",
    ])
}

/// What one case sends: a method, its payload, headers.
#[derive(Debug, Clone)]
struct Call {
    method: usize,
    /// A message of the method's request type (else any bytes).
    well_formed: bool,
    payload: Vec<u8>,
    traceparent: Option<String>,
    caller: Option<String>,
}

fn call(known: String) -> impl Strategy<Value = Call> {
    (0..METHODS.len())
        .prop_flat_map(move |method| {
            let payload = prop_oneof![
                3 => message(method, known.clone()).prop_map(|m| (true, m)),
                1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| (false, b)),
            ];
            (Just(method), payload, traceparent(), caller())
        })
        .prop_map(|(method, (well_formed, payload), traceparent, caller)| Call {
            method,
            well_formed,
            payload,
            traceparent,
            caller,
        })
}

/// Sends `call` raw; the status code it got.
async fn send(channel: tonic::transport::Channel, call: &Call) -> Code {
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(e) = grpc.ready().await {
        panic!("the gateway stopped serving: {e}");
    }
    let mut request = Request::new(call.payload.clone());
    request.set_timeout(Duration::from_secs(10));
    for (name, value) in [
        ("traceparent", &call.traceparent),
        ("x-cloudgateway-caller", &call.caller),
    ] {
        if let Some(value) = value.as_deref().and_then(|v| MetadataValue::try_from(v).ok()) {
            request.metadata_mut().insert(name, value);
        }
    }
    let path = http::uri::PathAndQuery::from_static(METHODS[call.method]);
    match grpc.unary(request, path, RawCodec).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[test]
fn fuzz_requests_get_a_status_and_never_a_panic() {
    let known = FIXTURE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .known
        .clone();
    proptest!(|(call in call(known))| {
        let fixture = FIXTURE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let code = fixture.runtime.block_on(send(fixture.channel.clone(), &call));
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the gateway panicked on {:?}", call);
        // A well-formed request is answered or refused with a typed error; bytes that are not
        // a message may also be refused when decoded (tonic's INTERNAL for a decode failure).
        let typed = matches!(
            code,
            Code::Ok
                | Code::InvalidArgument
                | Code::NotFound
                | Code::FailedPrecondition
                | Code::Unavailable
                | Code::ResourceExhausted
                | Code::PermissionDenied
        ) || (!call.well_formed && code == Code::Internal);
        prop_assert!(typed, "{:?} for {:?}", code, call);
    });
    // Still serving.
    let fixture = FIXTURE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut clients = fixture
        .runtime
        .block_on(fixture.gateway.clients("node-controller"));
    let capabilities = fixture
        .runtime
        .block_on(clients.identity.get_capabilities(pb::GetCapabilitiesRequest {}));
    assert!(capabilities.is_ok(), "{capabilities:?}");
}
