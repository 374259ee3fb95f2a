//! The OpenStack gateway degrades per capability, never as a whole (issue 38, item 2): the real
//! `cloud-gateway --provider openstack` on the test cloud, started with each `cloud.conf` setting
//! OCCM accepts and we used to refuse (exit 64). For each: the gateway stays up, serves what the
//! setting does not concern (a real Nova lookup, a real Neutron router read; UNIMPLEMENTED for
//! routes switched off), and names the reason in `GetCapabilities`, in its
//! log (one line per capability off) and in `cloudgateway_capability`.

mod openstack_support;

use std::{net::SocketAddr, path::Path, time::Duration};

use e2e::{binary, free_port, http_get, spawn, wait_for};
use gateway_api::v1 as pb;
use openstack_fixture::{CloudConf, TestCloud};
use tonic::transport::Channel;

/// What a started gateway must serve.
#[derive(Debug, Clone, Copy)]
struct Want {
    load_balancers: bool,
    routes: bool,
}

const ALL: Want = Want {
    load_balancers: true,
    routes: true,
};

/// The test cloud's cloud.conf (router1, load balancers), then `extra`.
fn cloud_conf(cloud: &TestCloud, extra: &str) -> String {
    let base = cloud.cloud_conf(&CloudConf {
        routes: true,
        load_balancers: true,
        ..CloudConf::default()
    });
    format!("{base}\n{extra}")
}

/// Starts the gateway on `text` (written in `dir`), checks it stays up and serves `want`, with
/// `reasons` (capability, words of its reason) in GetCapabilities, the log and the metrics.
async fn check(dir: &Path, name: &str, text: &str, want: Want, reasons: &[(&str, &str)]) {
    let conf = dir.join(format!("{name}.conf"));
    std::fs::write(&conf, text).unwrap();
    let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let args: Vec<String> = [
        "--insecure-plaintext",
        "--grpc-listen",
        &grpc.to_string(),
        "--http-listen",
        &http.to_string(),
        "--provider",
        "openstack",
        "--cloud-config",
        &conf.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut gateway = spawn(dir, &format!("gateway-{name}"), &binary("cloud-gateway"), &args);
    let ready = wait_for(
        &format!("{name}: the gateway ready"),
        Duration::from_secs(60),
        || {
            let exited = gateway.exited();
            async move {
                if let Some(status) = exited {
                    return Some(Err(status));
                }
                matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(Ok(()))
            }
        },
    )
    .await;
    let log = gateway.log();
    assert!(ready.is_ok(), "{name}: the gateway exited ({ready:?}):\n{log}");

    let channel = Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let caps = pb::identity_client::IdentityClient::new(channel.clone())
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(caps.instances, "{name}: {caps:?}");
    assert_eq!(
        (caps.load_balancers, caps.routes),
        (want.load_balancers, want.routes),
        "{name}: {caps:?}\n{log}"
    );
    assert_eq!(caps.unavailable.len(), reasons.len(), "{name}: {caps:?}");
    let (_, metrics) = http_get(http, "/metrics").await.expect("metrics");
    for (capability, words) in reasons {
        let reason = caps
            .unavailable
            .get(*capability)
            .unwrap_or_else(|| panic!("{name}: no reason for {capability}: {caps:?}"));
        assert!(reason.contains(words), "{name}: {capability}: {reason}");
        let line = format!("capability switched off: {capability} (");
        assert_eq!(
            gateway.log().lines().filter(|l| l.contains(&line)).count(),
            1,
            "{name}: one log line for {capability}:\n{}",
            gateway.log()
        );
        assert!(
            metrics.lines().any(|l| l.starts_with(&format!(
                "cloudgateway_capability{{capability=\"{capability}\",reason="
            )) && l.contains(words)
                && l.ends_with(" 0")),
            "{name}: {capability} in the metrics:\n{metrics}"
        );
    }

    // Served: a real Nova lookup (an unknown server: definitely gone), a real router read.
    let exists = pb::instances_client::InstancesClient::new(channel.clone())
        .instance_exists(pb::InstanceRequest {
            node: Some(pb::NodeRef {
                name: "e2e-degraded-none".into(),
                provider_id: "openstack:///00000000-0000-4000-8000-000000000000".into(),
            }),
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: instances are served: {e}"))
        .into_inner();
    assert!(!exists.exists, "{name}");
    let routes = pb::routes_client::RoutesClient::new(channel.clone())
        .list_routes(pb::ListRoutesRequest {
            cluster_name: format!("e2e-degraded-{name}"),
        })
        .await;
    match (want.routes, routes) {
        (true, Ok(_)) => {}
        (false, Err(status)) => assert_eq!(status.code(), tonic::Code::Unimplemented, "{name}: {status}"),
        (served, answer) => panic!("{name}: routes served {served}, ListRoutes answered {answer:?}"),
    }
    gateway.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_that_concerns_one_capability_switches_off_that_capability_alone() {
    let cloud = TestCloud::shared();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let no_lb = Want {
        load_balancers: false,
        routes: true,
    };
    for (name, extra, want, reasons) in [
        // Served now: a Service is refused by name only if the catalog has no Barbican.
        (
            "tls",
            "[LoadBalancer]\ndefault-tls-container-ref = https://barbican/v1/containers/x\n",
            Want {
                load_balancers: true,
                routes: true,
            },
            &[][..],
        ),
        (
            "cascade",
            "[LoadBalancer]\ncascade-delete = false\n",
            no_lb,
            &[("load_balancers", "cascade-delete")][..],
        ),
        (
            "lb-version",
            "[LoadBalancer]\nlb-version = v1\n",
            no_lb,
            &[("load_balancers", "lb-version")][..],
        ),
        (
            "floating-subnet",
            "[LoadBalancer]\nfloating-subnet = ~public-(\n",
            no_lb,
            &[("load_balancers", "floating-subnet")][..],
        ),
        (
            "router",
            "[Route]\nrouter-id = 00000000-0000-4000-8000-000000000000\n",
            Want {
                load_balancers: true,
                routes: false,
            },
            &[("routes", "00000000-0000-4000-8000-000000000000")][..],
        ),
    ] {
        check(dir, name, &cloud_conf(cloud, extra), want, reasons).await;
    }
}

/// OpenShift's cloud.conf: every credential in clouds.yaml (`use-clouds`, `clouds-file`,
/// `cloud`), and an inline CA (`cafilecontents`, unused on the test cloud's plain HTTP but read):
/// everything served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clouds_yaml_and_cafilecontents_are_read() {
    let cloud = TestCloud::shared();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let clouds = dir.join("clouds.yaml");
    let ca = inline_ca_pem();
    let (text, clouds_yaml) = openstack_support::with_clouds_yaml(
        &cloud_conf(cloud, ""),
        &clouds.display().to_string(),
        &format!("cafilecontents = \"{}\"\n", ca.replace('\n', "\\n")),
    );
    std::fs::write(&clouds, clouds_yaml).unwrap();
    check(dir, "clouds-yaml", &text, ALL, &[]).await;
}

/// A CA certificate in PEM (the test cloud speaks plain HTTP: it is read and parsed, not used).
fn inline_ca_pem() -> String {
    openstack_fixture::tls_front::Ca::new("e2e inline CA").pem()
}
