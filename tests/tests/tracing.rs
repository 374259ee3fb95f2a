//! End-to-end: OpenTelemetry traces from the real binaries, received by a small OTLP collector
//! (the collector's TraceService from `opentelemetry-proto`) run by the test.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use e2e::{
    Cluster, ClusterSpec, binary, counter, ec2_query, http_get, ingress_ips, start_moto, wait_for, xml_value,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::{AnyValue, KeyValue, any_value::Value as Any},
    trace::v1::Span,
};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A span as received, with the `service.name` of the process that sent it.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn name(&self) -> &str {
        &self.span.name
    }

    fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }

    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }
}

fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value {
        AnyValue {
            value: Some(Any::StringValue(s)),
        } => Some(s.clone()),
        AnyValue {
            value: Some(Any::IntValue(i)),
        } => Some(i.to_string()),
        AnyValue {
            value: Some(Any::BoolValue(b)),
        } => Some(b.to_string()),
        AnyValue {
            value: Some(Any::DoubleValue(d)),
        } => Some(d.to_string()),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The test's OTLP/gRPC collector: keeps every span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
    exports: Arc<Mutex<HashMap<String, usize>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|r| attr(&r.attributes, "service.name"))
                .unwrap_or_default();
            *self.exports.lock().unwrap().entry(service.clone()).or_default() += 1;
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(Received {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// Serves on a free loopback port; returns the collector and its `http://` endpoint.
    async fn start() -> (Self, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let collector = Self::default();
        let service = TraceServiceServer::new(collector.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (collector, format!("http://{addr}"))
    }

    /// Serves over TLS only, with a certificate for `localhost` that a CA of the test signed;
    /// returns the collector, its `https://` endpoint and that CA's PEM file (in `dir`).
    async fn start_tls(dir: &std::path::Path) -> (Self, String, std::path::PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let ca_file = dir.join("collector-ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let identity = tonic::transport::Identity::from_pem(cert.pem(), key.serialize_pem());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let collector = Self::default();
        let server = tonic::transport::Server::builder()
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .unwrap()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(server);
        (collector, format!("https://localhost:{port}"), ca_file)
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    fn find(&self, matches: impl Fn(&Received) -> bool) -> Vec<Received> {
        self.spans().into_iter().filter(|s| matches(s)).collect()
    }

    fn trace(&self, trace_id: &str) -> Vec<Received> {
        self.find(|s| s.trace_id() == trace_id)
    }
}

/// The chain of spans from `span` up to its trace's root, within `trace` (`span` first).
fn ancestors<'a>(trace: &'a [Received], span: &'a Received) -> Vec<&'a Received> {
    let mut chain = vec![span];
    let mut current = span;
    while !current.span.parent_span_id.is_empty() {
        let Some(parent) = trace
            .iter()
            .find(|s| s.span.span_id == current.span.parent_span_id)
        else {
            break;
        };
        chain.push(parent);
        current = parent;
    }
    chain
}

fn describe(trace: &[Received]) -> String {
    trace
        .iter()
        .map(|s| {
            format!(
                "{}: {} (span {}, parent {})",
                s.service,
                s.name(),
                hex(&s.span.span_id),
                hex(&s.span.parent_span_id)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn initialized(node: &Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED));
    !tainted && node.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initializing_a_node_is_one_trace_from_the_reconcile_to_the_provider_call() {
    let (collector, endpoint) = Collector::start().await;
    let mut spec = ClusterSpec::with_instances(&["worker-0"]);
    // The gateway by flag, the controller the standard way (environment); the controller's
    // spans go out every 200 ms, the gateway's on the default 5 s.
    spec.gateway_args = vec![
        "--otlp-endpoint".into(),
        endpoint.clone(),
        "--log-format".into(),
        "json".into(),
    ];
    let mut cluster = Cluster::start(spec).await;
    let node_controller = cluster.start_controller_with_env(
        "cloud-node-controller",
        "node-controller",
        &["--log-format", "json"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
    );
    cluster.register_node("worker-0", true).await;
    let nodes = cluster.nodes();
    wait_for("worker-0 initialized", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move { nodes.get_opt("worker-0").await.ok().flatten().filter(initialized) }
    })
    .await;

    let is_initialization = |s: &Received| {
        s.service == "cloud-node-controller"
            && s.name() == "reconcile node"
            && s.attr("node").as_deref() == Some("worker-0")
            && s.attr("action").as_deref() == Some("initialize")
    };
    // The whole trace: the gateway's part arrives within its 5 s export delay.
    let (reconcile, trace) = wait_for("the initialization's trace", Duration::from_secs(30), || {
        let collector = collector.clone();
        async move {
            let reconcile = collector.find(is_initialization).into_iter().next()?;
            let trace = collector.trace(&reconcile.trace_id());
            trace
                .iter()
                .any(|s| s.service == "cloud-gateway" && s.name() == "provider lookup_instances")
                .then_some((reconcile, trace))
        }
    })
    .await;
    let context = describe(&trace);

    // One trace: the node was initialized by one reconcile, the root of its trace.
    assert_eq!(collector.find(is_initialization).len(), 1, "{context}");
    assert!(
        reconcile.span.parent_span_id.is_empty(),
        "the reconcile is the root:\n{context}"
    );
    assert_eq!(reconcile.attr("outcome").as_deref(), Some("ok"), "{context}");
    assert_eq!(
        reconcile.attr("controller").as_deref(),
        Some("cloud-node-controller")
    );

    // The controller's call to the gateway, a client span under the reconcile.
    let one = |service: &str, name: &str, kind: i32| {
        let found: Vec<&Received> = trace
            .iter()
            .filter(|s| s.service == service && s.name() == name && (kind == 0 || s.span.kind == kind))
            .collect();
        assert_eq!(found.len(), 1, "one {name} span of {service} in\n{context}");
        found[0]
    };
    const SERVER: i32 = 2;
    const CLIENT: i32 = 3;
    let method = "cloudgateway.v1.Instances/BatchLookupInstances";
    let client = one("cloud-node-controller", method, CLIENT);
    assert!(
        ancestors(&trace, client)
            .iter()
            .any(|s| s.span.span_id == reconcile.span.span_id),
        "the client call is under the reconcile:\n{context}"
    );
    // The gateway's span of that call: its parent is the client span (W3C trace context).
    let server = one("cloud-gateway", method, SERVER);
    assert_eq!(server.span.parent_span_id, client.span.span_id, "{context}");
    assert_eq!(
        server.attr("caller").as_deref(),
        Some("node-controller"),
        "{context}"
    );
    assert_eq!(
        server.attr("rpc.grpc.status_code").as_deref(),
        Some("0"),
        "{context}"
    );
    // Inside the gateway: the lookup (a cache miss), the batch it started, the wait for a turn
    // and the provider call, each under the call.
    let lookups = one("cloud-gateway", "instance lookups", 0);
    assert_eq!(lookups.attr("cache.misses").as_deref(), Some("1"), "{context}");
    assert_eq!(lookups.attr("batch.size").as_deref(), Some("1"), "{context}");
    let batch = one("cloud-gateway", "lookup batch", 0);
    assert_eq!(batch.attr("batch.size").as_deref(), Some("1"), "{context}");
    assert_eq!(lookups.attr("batch.id"), batch.attr("batch.id"), "{context}");
    let wait = one("cloud-gateway", "fair queue wait", 0);
    let provider = one("cloud-gateway", "provider lookup_instances", 0);
    assert_eq!(provider.attr("outcome").as_deref(), Some("success"), "{context}");
    for span in [lookups, batch, wait, provider] {
        let chain = ancestors(&trace, span);
        assert!(
            chain.iter().any(|s| s.span.span_id == server.span.span_id),
            "{} is under the gateway's call:\n{context}",
            span.name()
        );
        assert!(
            chain.iter().any(|s| s.span.span_id == reconcile.span.span_id),
            "{} is in the reconcile's trace:\n{context}",
            span.name()
        );
    }
    assert_eq!(wait.span.parent_span_id, batch.span.span_id, "{context}");
    assert_eq!(provider.span.parent_span_id, batch.span.span_id, "{context}");

    // The controller's JSON log lines of that reconcile carry its trace id.
    let trace_id = reconcile.trace_id();
    let log = cluster.procs[node_controller].log();
    let joined: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["trace_id"] == trace_id.as_str())
        .collect();
    assert!(
        joined.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("successfully initialized node"))),
        "no log line of the reconcile carries trace_id {trace_id}:\n{log}"
    );
    assert!(
        joined
            .iter()
            .all(|l| l["span_id"].as_str().is_some_and(|s| s.len() == 16))
    );
    // Outside any span, no trace id.
    assert!(
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.contains("exporting traces"))
                && l.get("trace_id").is_none()),
        "{log}"
    );
    cluster.stop().await;
}

/// What a binary logs when the collector does not answer.
const COLLECTOR_DOWN: &str = "cannot export traces to the OpenTelemetry collector";

fn warnings_about_the_collector(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("WARN") && l.contains(COLLECTOR_DOWN))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_collector_is_trusted_through_the_system_roots() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = tempfile::tempdir().unwrap();
    let (collector, endpoint, ca) = Collector::start_tls(pki.path()).await;
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["worker-0"])).await;
    // The collector's CA stands in for the system's roots, as a cluster's private CA would.
    let ca = ca.display().to_string();
    cluster.start_controller_with_env(
        "cloud-node-controller",
        "node-controller",
        &["--otlp-endpoint", &endpoint],
        &[("SSL_CERT_FILE", &ca), ("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    cluster.register_node("worker-0", true).await;
    wait_for(
        "the node controller's reconcile span over TLS",
        Duration::from_secs(60),
        || {
            let collector = collector.clone();
            async move {
                let spans =
                    collector.find(|s| s.service == "cloud-node-controller" && s.name() == "reconcile node");
                (!spans.is_empty()).then_some(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_each_binary_one_warning_and_nothing_else() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let endpoint = format!("http://{closed}");
    let mut spec = ClusterSpec::with_instances(&["worker-0", "worker-1"]);
    spec.gateway_args = vec!["--otlp-endpoint".into(), endpoint.clone()];
    let mut cluster = Cluster::start(spec).await;
    // The controllers try to export every 100 ms: many failed exports within the test.
    let env = [("OTEL_BSP_SCHEDULE_DELAY", "100")];
    let flag = ["--otlp-endpoint", endpoint.as_str()];
    let with =
        |extra: &[&'static str]| -> Vec<&str> { flag.iter().copied().chain(extra.iter().copied()).collect() };
    let node =
        cluster.start_controller_with_env("cloud-node-controller", "node-controller", &with(&[]), &env);
    let lifecycle = cluster.start_controller_with_env(
        "cloud-node-lifecycle-controller",
        "lifecycle-controller",
        &with(&[]),
        &env,
    );
    let service =
        cluster.start_controller_with_env("service-lb-controller", "service-lb-controller", &with(&[]), &env);
    let routes = cluster.start_controller_with_env(
        "node-route-controller",
        "node-route-controller",
        &with(&[
            "--cluster-cidr",
            "10.244.0.0/16",
            "--route-reconciliation-period",
            "5m",
        ]),
        &env,
    );

    // Every binary works: nodes initialized, a load balancer provisioned, routes created, the
    // lifecycle passes running.
    for (name, cidr) in [("worker-0", "10.244.0.0/24"), ("worker-1", "10.244.1.0/24")] {
        cluster.register_node(name, true).await;
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        cluster
            .nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("pod CIDR");
    }
    cluster.create_lb_service("default", "web", json!({})).await;
    let nodes = cluster.nodes();
    for name in ["worker-0", "worker-1"] {
        wait_for(&format!("{name} initialized"), Duration::from_secs(60), || {
            let nodes = nodes.clone();
            async move { nodes.get_opt(name).await.ok().flatten().filter(initialized) }
        })
        .await;
    }
    let services = cluster.services("default");
    wait_for("the load balancer", Duration::from_secs(60), || {
        let services = services.clone();
        async move {
            let web = services.get_opt("web").await.ok().flatten()?;
            (!ingress_ips(&web).is_empty()).then_some(())
        }
    })
    .await;
    wait_for("two routes", Duration::from_secs(60), || {
        let cluster = &cluster;
        async move {
            let list = cluster.sim(&["routes", "list"]).await;
            (list.as_array()?.len() == 2).then_some(())
        }
    })
    .await;
    let lifecycle_http = cluster.procs[lifecycle].http.unwrap();
    wait_for("lifecycle passes", Duration::from_secs(30), || async move {
        let (_, metrics) = http_get(lifecycle_http, "/metrics").await?;
        (counter(&metrics, "cloud_node_lifecycle_controller_reconcile_total", &[]) > 0).then_some(())
    })
    .await;

    // Each binary said once that the collector is down (the gateway exports every 5 s)...
    let gateway = cluster
        .procs
        .iter()
        .position(|p| p.name == "cloud-gateway")
        .unwrap();
    let all = [gateway, node, lifecycle, service, routes];
    wait_for(
        "every binary to notice the collector is down",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            async move {
                all.iter()
                    .all(|&i| warnings_about_the_collector(&cluster.procs[i].log()) > 0)
                    .then_some(())
            }
        },
    )
    .await;
    // ...and not again, however many exports fail meanwhile (a second Service makes spans).
    cluster.create_lb_service("default", "api", json!({})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A SIGTERM still stops each promptly: the last flush gives up on the collector.
    cluster.stop().await;
    for &i in &all {
        let proc = &mut cluster.procs[i];
        let log = proc.log();
        let status = proc.exited();
        assert!(
            status.is_some_and(|s| s.code() == Some(0)),
            "{} did not stop by itself within 5 s of SIGTERM ({status:?}):\n{log}",
            proc.name
        );
        assert_eq!(
            warnings_about_the_collector(&log),
            1,
            "{} must warn exactly once:\n{log}",
            proc.name
        );
        // Nothing else about traces: no SDK error per failed batch.
        let noise: Vec<&str> = log
            .lines()
            .filter(|l| (l.contains("WARN") || l.contains("ERROR")) && l.to_lowercase().contains("export"))
            .filter(|l| !l.contains(COLLECTOR_DOWN))
            .collect();
        assert!(noise.is_empty(), "{}: {noise:?}", proc.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_sdk_operations_are_spans_under_the_provider_call() {
    let (collector, endpoint) = Collector::start().await;
    let moto_dir = tempfile::tempdir().unwrap();
    let (_moto, moto) = start_moto(moto_dir.path()).await;
    let run = ec2_query(
        moto,
        &[
            ("Action", "RunInstances"),
            ("ImageId", "ami-12c6146b"),
            ("MinCount", "1"),
            ("MaxCount", "1"),
            ("InstanceType", "t3.medium"),
        ],
    )
    .await;
    let instance = xml_value(&run, "instanceId").expect("an instance");
    // The gateway on AWS (moto), exporting its spans every 200 ms.
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "aws",
        "--aws-region",
        "us-east-1",
        "--aws-endpoint-url",
        &format!("http://{moto}"),
        "--aws-max-attempts",
        "1",
        "--instance-cache-ttl",
        "0s",
        "--otlp-endpoint",
        &endpoint,
    ]
    .map(str::to_owned)
    .to_vec();
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLETRACE0001"),
        ("AWS_SECRET_ACCESS_KEY", "trace-test-secret-access-key"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ];
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &env).await;
    cluster.start_controller_with_env(
        "cloud-node-controller",
        "node-controller",
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "200")],
    );
    cluster.register_node(&instance, true).await;
    let nodes = cluster.nodes();
    wait_for("the node initialized from AWS", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        let name = instance.clone();
        async move { nodes.get_opt(&name).await.ok().flatten().filter(initialized) }
    })
    .await;

    // The SDK's DescribeInstances span is the child of the gateway's provider call, in the
    // node's reconcile trace.
    let (sdk, trace) = wait_for(
        "the SDK's span in the reconcile's trace",
        Duration::from_secs(30),
        || {
            let collector = collector.clone();
            let name = instance.clone();
            async move {
                let reconcile = collector
                    .find(|s| {
                        s.name() == "reconcile node" && s.attr("node").as_deref() == Some(name.as_str())
                    })
                    .into_iter()
                    .find(|s| s.attr("action").as_deref() == Some("initialize"))?;
                let trace = collector.trace(&reconcile.trace_id());
                let sdk = trace
                    .iter()
                    .find(|s| s.service == "cloud-gateway" && s.name() == "EC2.DescribeInstances")?
                    .clone();
                // A parent ends (and is exported) after its child: wait for the gateway's spans
                // to arrive too, and for the SDK span's parent among them.
                trace.iter().find(|s| s.span.span_id == sdk.span.parent_span_id)?;
                Some((sdk, trace))
            }
        },
    )
    .await;
    let context = describe(&trace);
    let parent = trace
        .iter()
        .find(|s| s.span.span_id == sdk.span.parent_span_id)
        .unwrap_or_else(|| panic!("the SDK span has no parent in the trace:\n{context}"));
    assert_eq!(parent.name(), "provider lookup_instances", "{context}");
    assert_eq!(
        sdk.attr("rpc.method").as_deref(),
        Some("DescribeInstances"),
        "{context}"
    );
    cluster.stop().await;
}
