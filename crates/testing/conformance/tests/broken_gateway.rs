//! The conformance binary against a small gateway written here, once as it should be and once
//! with each of two bugs a hand-written gateway easily has: NOT_FOUND without the typed
//! `ErrorDetail` (a controller cannot tell a gone instance from a proxy's 404), and a batch
//! answer one node short. The tool must pass the first and name the failing case for the others.

use std::{net::SocketAddr, path::Path, process::Output, time::Duration};

use gateway_api::{
    PROVIDER_HEADER,
    error::GatewayError,
    v1::{
        self as pb,
        identity_server::{Identity, IdentityServer},
        instances_server::{Instances, InstancesServer},
    },
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// NOT_FOUND without the ErrorDetail for an instance that is gone.
    BareNotFound,
    /// BatchLookupInstances drops the last node.
    ShortBatch,
}

/// An instance-only gateway over three instances.
#[derive(Clone, Copy)]
struct Gateway(Bug);

const RUNNING: &str = "tiny://zone-a/i-running";
const STOPPED: &str = "tiny://zone-a/i-stopped";

impl Gateway {
    /// (metadata, shutdown) of the node, or why not.
    fn lookup(self, node: Option<pb::NodeRef>) -> Result<(pb::InstanceMetadata, bool), Status> {
        let node = node.ok_or_else(|| GatewayError::InvalidArgument("node is required".into()))?;
        let id = match (node.provider_id.as_str(), node.name.as_str()) {
            ("", "") => {
                return Err(
                    GatewayError::InvalidArgument("node needs a name or a provider_id".into()).into(),
                );
            }
            ("", "running") => RUNNING,
            ("", "stopped") => STOPPED,
            (id, _) => id,
        };
        let shutdown = match id {
            RUNNING => false,
            STOPPED => true,
            _ if self.0 == Bug::BareNotFound => return Err(Status::not_found("no such instance")),
            _ => return Err(GatewayError::InstanceNotFound(id.to_owned()).into()),
        };
        let metadata = pb::InstanceMetadata {
            provider_id: id.to_owned(),
            instance_type: "tiny.small".into(),
            zone: "zone-a".into(),
            region: "region".into(),
            addresses: vec![pb::NodeAddress {
                r#type: pb::AddressType::InternalIp as i32,
                address: "10.0.0.1".into(),
            }],
            ..Default::default()
        };
        Ok((metadata, shutdown))
    }
}

/// Names the provider on an answer or an error, as the contract asks.
fn named<T>(answer: Result<T, Status>) -> Result<Response<T>, Status> {
    let name = tonic::metadata::MetadataValue::from_static("tiny");
    match answer {
        Ok(answer) => {
            let mut response = Response::new(answer);
            response.metadata_mut().insert(PROVIDER_HEADER, name);
            Ok(response)
        }
        Err(mut status) => {
            status.metadata_mut().insert(PROVIDER_HEADER, name);
            Err(status)
        }
    }
}

#[tonic::async_trait]
impl Identity for Gateway {
    async fn get_capabilities(
        &self,
        _: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        named(Ok(pb::Capabilities {
            provider_name: "tiny".into(),
            instances: true,
            load_balancers: false,
            routes: false,
            dry_run: false,
            unavailable: Default::default(),
            limits: Some(pb::ProviderLimits {
                max_instance_batch: 10,
                read_rate_per_second: 10.0,
                write_rate_per_second: 10.0,
            }),
            ..pb::Capabilities::default()
        }))
    }
}

#[tonic::async_trait]
impl Instances for Gateway {
    async fn instance_exists(
        &self,
        request: Request<pb::InstanceRequest>,
    ) -> Result<Response<pb::InstanceExistsResponse>, Status> {
        named(match self.lookup(request.into_inner().node) {
            Ok(_) => Ok(pb::InstanceExistsResponse { exists: true }),
            Err(status) if status.code() == tonic::Code::NotFound => {
                Ok(pb::InstanceExistsResponse { exists: false })
            }
            Err(status) => Err(status),
        })
    }

    async fn instance_shutdown(
        &self,
        request: Request<pb::InstanceRequest>,
    ) -> Result<Response<pb::InstanceShutdownResponse>, Status> {
        named(
            self.lookup(request.into_inner().node)
                .map(|(_, shutdown)| pb::InstanceShutdownResponse { shutdown }),
        )
    }

    async fn instance_metadata(
        &self,
        request: Request<pb::InstanceRequest>,
    ) -> Result<Response<pb::InstanceMetadataResponse>, Status> {
        named(
            self.lookup(request.into_inner().node)
                .map(|(metadata, _)| pb::InstanceMetadataResponse {
                    metadata: Some(metadata),
                }),
        )
    }

    async fn batch_lookup_instances(
        &self,
        request: Request<pb::BatchLookupInstancesRequest>,
    ) -> Result<Response<pb::BatchLookupInstancesResponse>, Status> {
        let mut nodes = request.into_inner().nodes;
        if self.0 == Bug::ShortBatch {
            nodes.pop();
        }
        let results = nodes
            .into_iter()
            .map(|node| pb::InstanceLookup {
                result: Some(match self.lookup(Some(node.clone())) {
                    Ok((metadata, shutdown)) => pb::instance_lookup::Result::Found(pb::FoundInstance {
                        metadata: Some(metadata),
                        shutdown,
                    }),
                    Err(status) => pb::instance_lookup::Result::Error(GatewayError::from(status).to_item()),
                }),
                node: Some(node),
            })
            .collect();
        named(Ok(pb::BatchLookupInstancesResponse { results }))
    }
}

async fn serve(bug: Bug) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let gateway = Gateway(bug);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IdentityServer::new(gateway))
            .add_service(InstancesServer::new(gateway))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

const FIXTURE: &str = r#"
provider_name: tiny
capabilities: {instances: true, load_balancers: false, routes: false}
instances:
  running:
    - {node_name: running, provider_id: "tiny://zone-a/i-running", instance_type: tiny.small,
       zone: zone-a, region: region, internal_ip: 10.0.0.1}
  stopped:
    - {node_name: stopped, provider_id: "tiny://zone-a/i-stopped"}
  terminated:
    - {node_name: gone, provider_id: "tiny://zone-a/i-gone"}
  unknown_provider_id: "tiny://zone-a/i-never"
"#;

async fn conformance(addr: SocketAddr, dir: &Path) -> (Output, String) {
    let fixture = dir.join("fixture.yaml");
    std::fs::write(&fixture, FIXTURE).expect("write the fixture");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_cloudgateway-conformance"))
        .arg("--address")
        .arg(addr.to_string())
        .arg("--fixture")
        .arg(&fixture)
        .args(["--case-timeout", "20s"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the tool finishes")
        .expect("run the tool");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    // Shown when a test fails (and with --nocapture).
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    (output, stdout)
}

fn line<'a>(stdout: &'a str, verdict: &str, case: &str) -> &'a str {
    let prefix = format!("{verdict} {case}: ");
    stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stdout}"))
}

fn failed_cases(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL "))
        .filter_map(|l| l.split(':').next())
        .collect()
}

#[tokio::test]
async fn a_gateway_that_keeps_the_contract_passes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (output, stdout) = conformance(serve(Bug::None).await, dir.path()).await;
    assert!(output.status.success(), "{:?}\n{stdout}", output.status);
    assert!(failed_cases(&stdout).is_empty(), "{stdout}");
    for case in [
        "capabilities_describe_the_provider",
        "terminated_instance_does_not_exist",
        "batch_lookup_answers_each_node_in_order",
        "gateway_validation_rejects_bad_requests",
        "missing_capabilities_answer_unimplemented",
    ] {
        line(&stdout, "PASS", case);
    }
    assert!(
        line(&stdout, "SKIP", "load_balancer_lifecycle").contains("no load_balancers capability"),
        "{stdout}"
    );
}

#[tokio::test]
async fn not_found_without_the_typed_detail_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (output, stdout) = conformance(serve(Bug::BareNotFound).await, dir.path()).await;
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let fail = line(&stdout, "FAIL", "terminated_instance_does_not_exist");
    assert!(fail.contains("carries no cloudgateway.v1.ErrorDetail"), "{fail}");
    assert_eq!(
        failed_cases(&stdout),
        [
            "terminated_instance_does_not_exist",
            "unknown_provider_id_does_not_exist",
            "batch_lookup_answers_each_node_in_order"
        ],
        "{stdout}"
    );
    line(&stdout, "PASS", "running_instance_exists_and_is_not_shut_down");
}

#[tokio::test]
async fn a_batch_answer_one_node_short_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (output, stdout) = conformance(serve(Bug::ShortBatch).await, dir.path()).await;
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let fail = line(&stdout, "FAIL", "batch_lookup_answers_each_node_in_order");
    assert!(fail.contains("one result per node asked"), "{fail}");
    assert_eq!(
        failed_cases(&stdout),
        ["batch_lookup_answers_each_node_in_order"],
        "{stdout}"
    );
}

#[tokio::test]
async fn an_unknown_case_or_a_bad_fixture_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fixture = dir.path().join("bad.yaml");
    std::fs::write(&fixture, "provider_name: x\ninstance: []\n").expect("write");
    let tool = env!("CARGO_BIN_EXE_cloudgateway-conformance");
    let output = std::process::Command::new(tool)
        .args(["--address", "127.0.0.1:1", "--fixture"])
        .arg(&fixture)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown field `instance`"), "{stderr}");
    std::fs::write(&fixture, "provider_name: x\n").expect("write");
    let output = std::process::Command::new(tool)
        .args(["--address", "127.0.0.1:1", "--case", "nope", "--fixture"])
        .arg(&fixture)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown case \"nope\""));
}
