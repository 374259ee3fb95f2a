//! TLS to the cloud as OCCM's users configure it (`[Global] ca-file`, `tls-insecure`,
//! `cert-file`, `key-file`), against the real test cloud: Keystone, Nova and Neutron behind
//! TLS-terminating fronts with certificates of a private CA (`openstack_fixture::tls_front`),
//! reached through a catalog region of their `https://` URLs and an `https://` auth URL. Every
//! provider here is built the way the gateway builds it: the text of a `cloud.conf`, parsed,
//! turned into the config, then `OpenStackProvider::connect`.

use std::{future::Future, path::PathBuf, sync::Arc, time::Duration};

use openstack_fixture::{
    TestCloud,
    tls_front::{Ca, FrontTls, TlsRegion},
};
use provider_openstack::{
    OpenStackProvider,
    client::{ApiError, ErrorKind, Service},
    cloud_config,
    provider::SetupError,
};
use serde_json::Value;

/// How long a front may take to record its side of a failed handshake after the client saw
/// its own.
const FRONT_DEADLINE: Duration = Duration::from_secs(10);

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

/// The certificates of a test, as files a `cloud.conf` names.
struct Pki {
    dir: tempfile::TempDir,
    /// The private CA of the fronts' server certificates.
    server_ca: Ca,
}

impl Pki {
    fn new() -> Self {
        let pki = Self {
            dir: tempfile::tempdir().expect("temporary directory"),
            server_ca: Ca::new("test cloud CA"),
        };
        pki.write("ca.pem", &pki.server_ca.pem());
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, pem: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, pem).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }

    /// What the fronts present: a certificate of the private CA for 127.0.0.1 and localhost.
    fn front(&self) -> FrontTls {
        FrontTls::new(self.server_ca.server_cert(&["127.0.0.1", "localhost"]))
    }
}

/// Runs `body` with a region of TLS fronts serving `front`, then removes the region, whether
/// the body passed or panicked (the panic is then resumed).
async fn with_tls_region<F, Fut>(front: FrontTls, body: F)
where
    F: FnOnce(Arc<TlsRegion>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let cloud = cloud();
    let admin = cloud.admin().await;
    let region = Arc::new(
        cloud
            .add_tls_region(&admin, &cloud.unique_name("tls"), &front)
            .await,
    );
    let outcome = tokio::spawn(body(region.clone())).await;
    region.remove(&admin).await;
    if let Err(e) = outcome
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The ccm user's `cloud.conf` for `region`, through its Keystone front, with `tls` lines.
fn cloud_conf(region: &TlsRegion, tls: &str) -> String {
    let ccm = &cloud().info.ccm;
    format!(
        "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\n\
         domain-name = {}\nregion = {}\n{tls}",
        region.auth_url,
        ccm.username,
        ccm.password,
        ccm.project_name,
        ccm.project_domain_name,
        region.id(),
    )
}

/// The gateway's path: the file's text parsed, the config made, the provider connected.
async fn connect(text: &str) -> Result<Arc<OpenStackProvider>, SetupError> {
    let config = cloud_config::parse(text)
        .unwrap_or_else(|e| panic!("cloud.conf does not parse: {e}\n{text}"))
        .to_config(false)
        .unwrap_or_else(|e| panic!("cloud.conf is not valid: {e}\n{text}"));
    OpenStackProvider::connect(&config).await
}

async fn connect_err(text: &str) -> ApiError {
    match connect(text).await {
        Ok(_) => panic!("connected, expected a TLS failure, with:\n{text}"),
        Err(SetupError::Connect(e)) => e,
        Err(e) => panic!("expected a connection error, got: {e}"),
    }
}

/// Authenticated through the Keystone front; servers and ports listed through the Nova and
/// Neutron fronts.
async fn lists_servers_and_ports(provider: &OpenStackProvider, region: &TlsRegion) {
    let client = provider.client();
    for (service, front) in [(Service::Compute, "compute"), (Service::Network, "network")] {
        let endpoint = client.endpoint(service).expect("endpoint");
        let want = format!("https://{}", region.front(front).addr());
        assert!(endpoint.starts_with(&want), "{service}: {endpoint}, not {want}");
    }
    let servers: Vec<Value> = client
        .get(Service::Compute, "/servers/detail")
        .send_paginated("servers", 100)
        .await
        .expect("servers through TLS");
    assert!(servers.iter().all(|s| s["id"].is_string()), "{servers:?}");
    let ports: Value = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", cloud().info.ids.router1.as_str())])
        .send_json()
        .await
        .expect("ports through TLS");
    let ports = ports["ports"].as_array().expect("a port list");
    assert!(!ports.is_empty(), "router1's interfaces are ports of project ccm");
    for front in ["identity", "compute", "network"] {
        let f = region.front(front);
        assert!(f.handshakes() > 0, "nothing went through the {front} front");
        assert_eq!(f.failed_handshakes(), Vec::<String>::new(), "{front}");
    }
}

#[tokio::test]
async fn ca_file_with_the_private_ca_authenticates_and_lists() {
    let pki = Pki::new();
    let ca = pki.path("ca.pem");
    with_tls_region(pki.front(), move |region| async move {
        let text = cloud_conf(&region, &format!("ca-file = {}\n", ca.display()));
        let provider = connect(&text)
            .await
            .unwrap_or_else(|e| panic!("connecting with ca-file: {e}"));
        lists_servers_and_ports(&provider, &region).await;
    })
    .await;
    drop(pki);
}

/// `cafilecontents` (OCCM's inline CA, a quoted value with `\n` escapes) is the CA bundle.
#[tokio::test]
async fn cafilecontents_with_the_private_ca_authenticates_and_lists() {
    let pki = Pki::new();
    let pem = pki.server_ca.pem().replace('\n', "\\n");
    with_tls_region(pki.front(), move |region| async move {
        let text = cloud_conf(&region, &format!("cafilecontents = \"{pem}\"\n"));
        let provider = connect(&text)
            .await
            .unwrap_or_else(|e| panic!("connecting with cafilecontents: {e}"));
        lists_servers_and_ports(&provider, &region).await;
    })
    .await;
    drop(pki);
}

/// A TLS failure at start: the Keystone front's handshake failed on our side (we refused its
/// certificate with an alert), nothing reached Keystone, and the message says, in words, that
/// the certificate is not trusted and by which CAs (`roots`).
async fn assert_untrusted(e: &ApiError, region: &TlsRegion, roots: &str) {
    let text = e.to_string();
    assert_eq!(e.kind, ErrorKind::Transport, "{text}");
    assert_eq!(e.service, Service::Identity, "{text}");
    assert!(
        text.contains("TLS: the certificate of 127.0.0.1 is not trusted"),
        "{text}"
    );
    assert!(text.contains(roots), "{text}");
    let front = region.front("identity");
    assert_eq!(front.handshakes(), 0, "{text}");
    let failed = front.wait_failed_handshakes(1, FRONT_DEADLINE).await;
    assert!(
        failed.iter().all(|f| f.contains("received fatal alert")),
        "the client refused the handshake with an alert: {failed:?}"
    );
}

#[tokio::test]
async fn without_ca_file_the_private_ca_is_not_trusted() {
    let pki = Pki::new();
    with_tls_region(pki.front(), move |region| async move {
        let e = connect_err(&cloud_conf(&region, "")).await;
        eprintln!("without ca-file: {e}");
        assert_untrusted(&e, &region, "the system's trust store (no ca-file is set)").await;
    })
    .await;
}

#[tokio::test]
async fn a_wrong_ca_file_is_not_trusted() {
    let pki = Pki::new();
    let other = pki.write("other-ca.pem", &Ca::new("another CA").pem());
    with_tls_region(pki.front(), move |region| async move {
        let e = connect_err(&cloud_conf(&region, &format!("ca-file = {}\n", other.display()))).await;
        eprintln!("wrong ca-file: {e}");
        assert_untrusted(&e, &region, &format!("ca-file {}", other.display())).await;
    })
    .await;
}

#[tokio::test]
async fn tls_insecure_connects_without_ca_file() {
    let pki = Pki::new();
    with_tls_region(pki.front(), move |region| async move {
        let provider = connect(&cloud_conf(&region, "tls-insecure = true\n"))
            .await
            .unwrap_or_else(|e| panic!("connecting with tls-insecure: {e}"));
        lists_servers_and_ports(&provider, &region).await;
    })
    .await;
}

/// Fronts that require a client certificate of `client_ca`.
struct MutualPki {
    pki: Pki,
    client_ca: Ca,
}

impl MutualPki {
    fn new() -> Self {
        Self {
            pki: Pki::new(),
            client_ca: Ca::new("test cloud client CA"),
        }
    }

    fn front(&self) -> FrontTls {
        self.pki.front().require_client_cert(&self.client_ca)
    }

    /// `ca-file`, and `cert-file`/`key-file` of a certificate of `ca` when given.
    fn conf_lines(&self, client: Option<(&Ca, &str)>) -> String {
        let mut lines = format!("ca-file = {}\n", self.pki.path("ca.pem").display());
        if let Some((ca, name)) = client {
            let (cert, key) = ca.client_cert("kubernetes-ccm").write(self.pki.dir.path(), name);
            lines.push_str(&format!(
                "cert-file = {}\nkey-file = {}\n",
                cert.display(),
                key.display()
            ));
        }
        lines
    }
}

#[tokio::test]
async fn cert_file_and_key_file_authenticate_to_a_front_requiring_them() {
    let pki = MutualPki::new();
    let lines = pki.conf_lines(Some((&pki.client_ca, "ccm")));
    with_tls_region(pki.front(), move |region| async move {
        let provider = connect(&cloud_conf(&region, &lines))
            .await
            .unwrap_or_else(|e| panic!("connecting with cert-file and key-file: {e}"));
        lists_servers_and_ports(&provider, &region).await;
    })
    .await;
    drop(pki);
}

/// Refused at the front's handshake for want of a client certificate: the front says so, and
/// so does the client's error.
async fn assert_no_client_cert(e: &ApiError, region: &TlsRegion) {
    let text = e.to_string();
    assert_eq!(e.kind, ErrorKind::Transport, "{text}");
    assert_eq!(e.service, Service::Identity, "{text}");
    assert!(
        text.contains("received fatal alert: CertificateRequired"),
        "{text}"
    );
    assert!(text.contains("set cert-file and key-file"), "{text}");
    let front = region.front("identity");
    assert_eq!(front.handshakes(), 0);
    assert_eq!(
        front.wait_failed_handshakes(1, FRONT_DEADLINE).await,
        vec!["peer sent no certificates".to_owned()]
    );
}

#[tokio::test]
async fn without_a_client_certificate_the_handshake_is_refused() {
    let pki = MutualPki::new();
    let none = pki.conf_lines(None);
    let stranger = Ca::new("a CA the front does not know");
    let foreign = pki.conf_lines(Some((&stranger, "foreign")));
    with_tls_region(pki.front(), move |region| async move {
        let e = connect_err(&cloud_conf(&region, &none)).await;
        eprintln!("without cert-file: {e}");
        assert_no_client_cert(&e, &region).await;

        // A client certificate the front's CA did not issue: refused too.
        let e = connect_err(&cloud_conf(&region, &foreign)).await;
        let text = e.to_string();
        eprintln!("client certificate of another CA: {text}");
        assert_eq!(e.kind, ErrorKind::Transport, "{text}");
        assert!(text.contains("received fatal alert: UnknownCA"), "{text}");
        let front = region.front("identity");
        assert_eq!(front.handshakes(), 0);
        let failed = front.wait_failed_handshakes(2, FRONT_DEADLINE).await;
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert!(failed[1].contains("UnknownIssuer"), "{failed:?}");
    })
    .await;
    drop(pki);
}

/// TLS 1.2 checks the client certificate inside the handshake (TLS 1.3 after the client has
/// finished, so the refusal arrives with the first answer): refused as clearly.
#[tokio::test]
async fn without_a_client_certificate_a_tls12_handshake_is_refused() {
    let pki = MutualPki::new();
    let none = pki.conf_lines(None);
    let with_cert = pki.conf_lines(Some((&pki.client_ca, "ccm")));
    with_tls_region(pki.front().tls12_only(), move |region| async move {
        let e = connect_err(&cloud_conf(&region, &none)).await;
        eprintln!("TLS 1.2, without cert-file: {e}");
        assert_no_client_cert(&e, &region).await;

        let provider = connect(&cloud_conf(&region, &with_cert))
            .await
            .unwrap_or_else(|e| panic!("TLS 1.2 with cert-file and key-file: {e}"));
        assert!(provider.client().tokens_issued() >= 1);
    })
    .await;
    drop(pki);
}
