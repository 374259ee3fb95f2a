//! Mutual TLS and authorization at the gateway, over a real socket: only clients with a
//! certificate from the trusted CA are served; the certificate, never a header, says who calls
//! and what it may call; certificate files rotated on disk are used by the next connection.

use std::{path::PathBuf, time::Duration};

use cloud_gateway::{GatewayConfig, Security, ServerFiles, auth::Policy};
use contract_tests::{Clients, RunningGateway};
use controller_kit::{
    gateway::{GatewayArgs, GatewayClient},
    gateway_tls::ReloadingTlsConnector,
};
use gateway_api::v1 as pb;
use provider_simulator::{Simulator, SimulatorConfig};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
use tls_files::{ClientFiles, ReloadingClient};
use tonic::{Code, Request, transport::Endpoint};

/// A certificate authority of the test.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Self {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A certificate for `dns` names and, if given, a SPIFFE ID; (cert pem, key pem).
    fn issue(&self, dns: &[&str], spiffe: Option<&str>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(dns.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
        if let Some(id) = spiffe {
            params
                .subject_alt_names
                .push(SanType::URI(id.try_into().unwrap()));
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn sa(name: &str) -> String {
    format!("spiffe://cluster.local/ns/kube-system/sa/{name}")
}

struct Pki {
    dir: tempfile::TempDir,
    server_ca: Ca,
    client_ca: Ca,
}

impl Pki {
    fn new() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            dir: tempfile::tempdir().unwrap(),
            server_ca: Ca::new("gateway CA"),
            client_ca: Ca::new("controllers CA"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `pem` to `name` the way a Secret volume does: a new file swapped in.
    fn write(&self, name: &str, pem: &str) -> PathBuf {
        let path = self.path(name);
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    }

    /// A client certificate for `identity` (a SPIFFE ID) in `name`.pem / `name`-key.pem.
    fn client(&self, name: &str, identity: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = self.client_ca.issue(&[], Some(identity));
        (
            self.write(&format!("{name}.pem"), &cert),
            self.write(&format!("{name}-key.pem"), &key),
        )
    }

    fn server_files(&self) -> ServerFiles {
        let (cert, key) = self.server_ca.issue(&["localhost"], None);
        ServerFiles {
            cert: self.write("server.pem", &cert),
            key: self.write("server-key.pem", &key),
            client_ca: self.write("client-ca.pem", &self.client_ca.issuer.pem()),
        }
    }

    fn server_ca_file(&self) -> PathBuf {
        self.write("server-ca.pem", &self.server_ca.issuer.pem())
    }
}

async fn gateway(files: ServerFiles) -> RunningGateway {
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..Default::default()
    })
    .unwrap();
    let config = GatewayConfig {
        security: Security::MutualTls {
            files,
            policy: Policy::default(),
        },
        ..GatewayConfig::default()
    };
    RunningGateway::start(config, sim, None).await
}

/// Raw clients over mutual TLS with `identity` files, the header saying `header`.
async fn connect(
    gateway: &RunningGateway,
    ca: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
    header: &str,
) -> Result<Clients, tonic::transport::Error> {
    let tls = ReloadingClient::new(ClientFiles { ca, identity }).unwrap();
    let connector = ReloadingTlsConnector::new(tls, Some("localhost".into()));
    let channel = Endpoint::from_shared(format!("http://localhost:{}", gateway.grpc_addr.port()))
        .unwrap()
        .connect_with_connector(connector)
        .await?;
    Ok(Clients::over(channel, header))
}

fn delete_route() -> Request<pb::DeleteRouteRequest> {
    Request::new(pb::DeleteRouteRequest {
        cluster_name: "kubernetes".into(),
        route: Some(pb::Route {
            destination_cidr: "10.244.1.0/24".into(),
            target_node: "n1".into(),
            ..Default::default()
        }),
    })
}

fn get_load_balancer() -> Request<pb::GetLoadBalancerRequest> {
    Request::new(pb::GetLoadBalancerRequest {
        cluster_id: String::new(),
        cluster_name: "kubernetes".into(),
        service: Some(pb::Service {
            uid: "u-1".into(),
            namespace: "default".into(),
            name: "web".into(),
            ..Default::default()
        }),
    })
}

fn args(address: String) -> GatewayArgs {
    GatewayArgs {
        timeout: Duration::from_secs(5),
        retries: 1,
        ..GatewayArgs::plain(address)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_clients_with_a_trusted_certificate_are_served() {
    let pki = Pki::new();
    let gateway = gateway(pki.server_files()).await;
    let https = format!("https://localhost:{}", gateway.grpc_addr.port());
    let (cert, key) = pki.client("node", &sa("cloud-node-controller"));
    let trusted = GatewayArgs {
        tls_ca_file: Some(pki.server_ca_file()),
        tls_cert_file: Some(cert),
        tls_key_file: Some(key),
        ..args(https.clone())
    };
    let caps = GatewayClient::new(&trusted, "node-controller")
        .unwrap()
        .capabilities()
        .await
        .expect("served over mTLS");
    assert_eq!(caps.provider_name, "simulator");

    let no_cert = GatewayArgs {
        tls_cert_file: None,
        tls_key_file: None,
        ..trusted.clone()
    };
    let err = GatewayClient::new(&no_cert, "node-controller")
        .unwrap()
        .capabilities()
        .await;
    assert!(err.is_err(), "a client without a certificate must be refused");

    let stranger_ca = Ca::new("someone else's CA");
    let (cert, key) = stranger_ca.issue(&[], Some(&sa("cloud-node-controller")));
    let stranger = GatewayArgs {
        tls_cert_file: Some(pki.write("stranger.pem", &cert)),
        tls_key_file: Some(pki.write("stranger-key.pem", &key)),
        ..trusted.clone()
    };
    let err = GatewayClient::new(&stranger, "node-controller")
        .unwrap()
        .capabilities()
        .await;
    assert!(err.is_err(), "a certificate from another CA must be refused");

    let plain = args(format!("http://{}", gateway.grpc_addr));
    let err = GatewayClient::new(&plain, "node-controller")
        .unwrap()
        .capabilities()
        .await;
    assert!(err.is_err(), "plain text must be refused");

    let wrong_scheme = GatewayArgs {
        address: format!("http://{}", gateway.grpc_addr),
        ..trusted
    };
    assert!(
        GatewayClient::new(&wrong_scheme, "node-controller").is_err(),
        "TLS settings with http:// are an error"
    );
    let metrics = gateway.handles.metrics.render();
    let refused = metrics
        .lines()
        .find(|l| l.starts_with("cloudgateway_tls_handshakes_refused_total "))
        .unwrap_or_default();
    assert!(
        !refused.ends_with(" 0"),
        "refused handshakes are counted: {refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_says_who_calls_and_what_it_may_call_whatever_the_header_says() {
    let pki = Pki::new();
    let gateway = gateway(pki.server_files()).await;
    let (cert, key) = pki.client("lb", &sa("service-lb-controller"));
    // The header claims the route controller: it changes nothing.
    let mut lb = connect(
        &gateway,
        pki.server_ca_file(),
        Some((cert, key)),
        "route-controller",
    )
    .await
    .expect("connected");
    let denied = lb.routes.delete_route(delete_route()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("DeleteRoute"), "{}", denied.message());
    lb.load_balancers
        .get_load_balancer(get_load_balancer())
        .await
        .expect("the service controller may read load balancers");

    // An identity our CA signed but the policy does not know: refused, and no state of its own.
    let (cert, key) = pki.client("unknown", &sa("debug-pod"));
    let mut unknown = connect(
        &gateway,
        pki.server_ca_file(),
        Some((cert, key)),
        "node-controller",
    )
    .await
    .expect("the handshake itself succeeds");
    let denied = unknown
        .identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    let metrics = gateway.handles.metrics.render();
    let calls: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("cloudgateway_grpc_calls_total{"))
        .collect();
    assert!(
        calls.iter().all(|l| l.contains("caller=\"service-controller\"")),
        "fairness and metrics follow the certificate: {calls:?}"
    );
    assert!(
        metrics.contains("cloudgateway_denied_calls_total{method=\"DeleteRoute\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("cloudgateway_denied_calls_total{method=\"GetCapabilities\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_caller_names_create_no_state() {
    let pki = Pki::new();
    let gateway = gateway(pki.server_files()).await;
    let (cert, key) = pki.client("node", &sa("cloud-node-controller"));
    let clients = connect(
        &gateway,
        pki.server_ca_file(),
        Some((cert, key)),
        "node-controller",
    )
    .await
    .unwrap();
    let series = |gateway: &RunningGateway| {
        gateway
            .handles
            .metrics
            .render()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count()
    };
    let mut identity = clients.identity.clone();
    identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap();
    let before = series(&gateway);
    for i in 0..10_000 {
        let mut request = Request::new(pb::GetCapabilitiesRequest {});
        request.metadata_mut().insert(
            gateway_api::CALLER_HEADER,
            format!("spoofed-{i}").parse().unwrap(),
        );
        identity.get_capabilities(request).await.unwrap();
    }
    assert_eq!(series(&gateway), before, "no metric series per header value");
    let metrics = gateway.handles.metrics.render();
    assert!(!metrics.contains("spoofed-"), "no header value reaches a label");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_files_are_used_by_the_next_connection() {
    let pki = Pki::new();
    let files = pki.server_files();
    let gateway = gateway(files.clone()).await;
    let server_ca = pki.server_ca_file();

    // Client side: the same connector, its files rotated from the service controller's
    // identity to the route controller's: the next connection is the route controller.
    pki.client("me", &sa("service-lb-controller"));
    let identity = Some((pki.path("me.pem"), pki.path("me-key.pem")));
    let tls = ReloadingClient::new(ClientFiles {
        ca: server_ca.clone(),
        identity: identity.clone(),
    })
    .unwrap();
    let connector = ReloadingTlsConnector::new(tls, Some("localhost".into()));
    let endpoint = Endpoint::from_shared(format!("http://localhost:{}", gateway.grpc_addr.port())).unwrap();
    let first = Clients::over(
        endpoint.connect_with_connector(connector.clone()).await.unwrap(),
        "x",
    );
    let denied = first
        .routes
        .clone()
        .delete_route(delete_route())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    pki.client("me", &sa("node-route-controller"));
    let second = Clients::over(endpoint.connect_with_connector(connector).await.unwrap(), "x");
    second
        .routes
        .clone()
        .delete_route(delete_route())
        .await
        .expect("the rotated certificate is the route controller's");

    // Server side: the gateway's certificate rotated to one from another CA; the next
    // connection is served with it (a client trusting only the old CA is refused, one trusting
    // the new CA is served), without restarting the gateway.
    let new_ca = Ca::new("gateway CA, renewed");
    let (cert, key) = new_ca.issue(&["localhost"], None);
    pki.write("server-key.pem", &key);
    pki.write("server.pem", &cert);
    let new_ca_file = pki.write("server-ca-2.pem", &new_ca.issuer.pem());
    let (cert, key) = pki.client("node", &sa("cloud-node-controller"));
    assert!(
        connect(&gateway, server_ca, Some((cert.clone(), key.clone())), "x")
            .await
            .is_err(),
        "the old CA no longer verifies the gateway"
    );
    let mut renewed = connect(&gateway, new_ca_file, Some((cert, key)), "x")
        .await
        .expect("served with the rotated certificate");
    renewed
        .identity
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap();
}
