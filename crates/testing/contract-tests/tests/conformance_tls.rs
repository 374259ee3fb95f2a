//! The conformance suite over mutual TLS, as `cloudgateway-conformance --tls-*` runs it: our
//! gateway requires client certificates, and a policy grants the conformance identity every
//! call. A certificate the policy does not know fails the run.

use std::{path::PathBuf, sync::Arc, time::Duration};

use cloud_gateway::{
    GatewayConfig, Security, ServerFiles,
    auth::{Caller, Group, Policy},
};
use cloudgateway_conformance::{
    CloudFixture, FileFixture, FixtureFile, Target, TlsFiles, cases,
    runner::{self, Verdict},
};
use contract_tests::RunningGateway;
use provider_simulator::{NewInstance, Simulator, SimulatorConfig};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Self(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    /// (cert, key) PEM for `dns` names and, if given, a URI SAN.
    fn issue(&self, dns: &[&str], uri: Option<&str>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(dns.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
        if let Some(uri) = uri {
            params
                .subject_alt_names
                .push(SanType::URI(uri.try_into().unwrap()));
        }
        let cert = params.signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

struct Setup {
    dir: tempfile::TempDir,
    gateway: RunningGateway,
    client_ca: Ca,
    server_ca_file: PathBuf,
    fixture: FixtureFile,
}

fn write(dir: &tempfile::TempDir, name: &str, pem: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, pem).unwrap();
    path
}

async fn setup() -> Setup {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca) = (Ca::new("gateway CA"), Ca::new("clients CA"));
    let (cert, key) = server_ca.issue(&["gateway.example"], None);
    let files = ServerFiles {
        cert: write(&dir, "server.pem", &cert),
        key: write(&dir, "server-key.pem", &key),
        client_ca: write(&dir, "client-ca.pem", &client_ca.0.pem()),
    };
    let policy = Policy {
        callers: vec![Caller {
            name: "conformance".into(),
            identities: vec!["spiffe://example.org/conformance".into()],
            allow: [
                Group::Identity,
                Group::Instances,
                Group::LoadBalancers,
                Group::Routes,
            ]
            .into(),
        }],
    };
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..Default::default()
    })
    .unwrap();
    let region = sim.info().region;
    let mut running = Vec::new();
    for name in ["tls-a", "tls-b"] {
        let i = sim.add_instance(NewInstance::named(name)).unwrap();
        running.push(format!(
            "    - {{node_name: {name}, provider_id: \"{}\", instance_type: {}, zone: {}, region: {region}, internal_ip: {}}}",
            i.provider_id(),
            i.instance_type,
            i.zone,
            i.private_ip
        ));
    }
    let stopped = sim.add_instance(NewInstance::named("tls-stopped")).unwrap();
    sim.stop_instance(&stopped.id).unwrap();
    let zone = &stopped.zone;
    let fixture = FixtureFile::parse(&format!(
        r#"provider_name: simulator
instances:
  running:
{running}
  stopped:
    - {{node_name: tls-stopped, provider_id: "{stopped}"}}
  terminated:
    - {{node_name: tls-gone, provider_id: "simulator://{zone}/i-0e0e0e0e0e0e0e0e0"}}
  unknown_provider_id: "simulator://{zone}/i-0123456789abcdef0"
load_balancers:
  implemented_elsewhere_annotations: {{simulator.cloudgateway.io/load-balancer-type: external}}
  invalid_service: {{load_balancer_ip: 192.0.2.77}}
routes: {{destination_cidr: 10.244.9.0/24}}
"#,
        running = running.join("\n"),
        stopped = stopped.provider_id(),
    ))
    .unwrap();
    let config = GatewayConfig {
        security: Security::MutualTls { files, policy },
        ..GatewayConfig::default()
    };
    let gateway = RunningGateway::start(config, sim, None).await;
    Setup {
        server_ca_file: write(&dir, "server-ca.pem", &server_ca.0.pem()),
        dir,
        gateway,
        client_ca,
        fixture,
    }
}

impl Setup {
    /// Runs every case as the client holding a certificate for `identity`.
    async fn run(&self, identity: &str) -> Vec<runner::Outcome> {
        let (cert, key) = self.client_ca.issue(&[], Some(identity));
        let tls = TlsFiles {
            ca_file: self.server_ca_file.clone(),
            identity: Some((
                write(&self.dir, "client.pem", &cert),
                write(&self.dir, "client-key.pem", &key),
            )),
            server_name: Some("gateway.example".into()),
        };
        // The certificate names gateway.example; the address is 127.0.0.1.
        let target = Target::tls(&self.gateway.grpc_addr.to_string(), &tls)
            .unwrap()
            .with_metrics_url(format!("http://{}/metrics", self.gateway.http_addr));
        let fixture: Arc<dyn CloudFixture> = Arc::new(FileFixture::new(
            self.fixture.clone(),
            target,
            self.dir.path().into(),
        ));
        let all: Vec<_> = cases::ALL.iter().collect();
        runner::run(&all, fixture, Duration::from_secs(60), |o| println!("{o}")).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_passes_over_mutual_tls() {
    let setup = setup().await;
    let outcomes = setup.run("spiffe://example.org/conformance").await;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.failed())
        .map(ToString::to_string)
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    let passed = outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Pass(_)))
        .count();
    // All but the three that need hooks or a missing capability.
    assert_eq!(passed, cases::ALL.len() - 3, "{outcomes:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_policy_does_not_know_fails() {
    let setup = setup().await;
    let outcomes = setup.run("spiffe://example.org/stranger").await;
    let capabilities = outcomes
        .iter()
        .find(|o| o.case.name == "capabilities_describe_the_provider")
        .unwrap();
    assert!(
        matches!(&capabilities.verdict, Verdict::Fail(reason) if reason.contains("PermissionDenied")),
        "{capabilities}"
    );
}
