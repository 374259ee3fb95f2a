//! Mutual TLS between the controllers' gateway client and the gateway: a client with a
//! certificate from the trusted CA is served; no certificate, another CA's certificate, or
//! plain text are refused.

use std::time::Duration;

use cloud_gateway::{GatewayConfig, ServerTls};
use contract_tests::RunningGateway;
use controller_kit::gateway::{GatewayArgs, GatewayClient};
use provider_simulator::{Simulator, SimulatorConfig};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

struct Pki {
    dir: tempfile::TempDir,
}

/// A CA and a certificate it signs for `names`; returns (ca pem, cert pem, key pem).
fn issue(names: &[&str]) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

impl Pki {
    fn write(&self, name: &str, pem: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    }
}

async fn gateway_with_mtls(server: (&str, &str), client_ca: &str) -> RunningGateway {
    let sim = Simulator::open(SimulatorConfig {
        durable_writes: false,
        ..Default::default()
    })
    .unwrap();
    let config = GatewayConfig {
        tls: Some(ServerTls {
            cert_pem: server.0.as_bytes().to_vec(),
            key_pem: server.1.as_bytes().to_vec(),
            client_ca_pem: Some(client_ca.as_bytes().to_vec()),
        }),
        ..GatewayConfig::default()
    };
    RunningGateway::start(config, sim, None).await
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
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = Pki {
        dir: tempfile::tempdir().unwrap(),
    };
    let (server_ca, server_cert, server_key) = issue(&["localhost"]);
    let (client_ca, client_cert, client_key) = issue(&["node-controller"]);
    let (_, stranger_cert, stranger_key) = issue(&["node-controller"]);
    let gateway = gateway_with_mtls((&server_cert, &server_key), &client_ca).await;
    let https = format!("https://localhost:{}", gateway.grpc_addr.port());

    let trusted = GatewayArgs {
        tls_ca_file: Some(pki.write("server-ca.pem", &server_ca)),
        tls_cert_file: Some(pki.write("client.pem", &client_cert)),
        tls_key_file: Some(pki.write("client-key.pem", &client_key)),
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

    let stranger = GatewayArgs {
        tls_cert_file: Some(pki.write("stranger.pem", &stranger_cert)),
        tls_key_file: Some(pki.write("stranger-key.pem", &stranger_key)),
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
}
