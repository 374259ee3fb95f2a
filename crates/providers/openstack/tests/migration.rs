//! Switching from OCCM (openstack-cloud-controller-manager) on the real test cloud: load
//! balancers built with OCCM's own calls are taken over with no write.
//!
//! [`occm`] (openstack-fixture) replays OCCM's call sequence for a new Service (`createOctaviaLoadBalancer`, then
//! `ensureFloatingIP`, then the annotations it writes on the Service), with its bodies as its code
//! builds them (`pkg/openstack/loadbalancer.go`): the load balancer created fully populated (its
//! name, description, provider and tag; per port a listener with OCCM's connection limit,
//! timeouts and tag, a pool with its members named by node, and a monitor when health monitors
//! are on), polled until ACTIVE, then a floating IP on the VIP port with OCCM's description. The
//! Services: one 1-port, one 2-port with health monitors, and one sharing the first one's load
//! balancer through `load-balancer-id` (OCCM's shared load balancers: its listener, pool and
//! members added to the first one's load balancer, its name among that load balancer's tags).

use std::time::Duration;

use openstack_fixture::{TestCloud, User, lb, occm};
use provider::{
    AddressType, ExternalTrafficPolicy, LoadBalancerNode, LoadBalancerStatus, LoadBalancers, NodeAddress,
    ProviderError, ServiceSpec, dry_run,
};
use provider_openstack::{
    client::{Client, Service},
    cloud_config::LoadBalancerSettings,
    load_balancers::OpenStackLoadBalancers,
};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(90);
const IDENTITY: &str = "0d000000-0000-4000-8000-00000000000d";

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

/// Two nodes: no providerID needed, OCCM and this provider take a node's InternalIP.
fn nodes() -> Vec<LoadBalancerNode> {
    [("node-a", "10.0.0.201"), ("node-b", "10.0.0.202")]
        .into_iter()
        .map(|(name, ip)| LoadBalancerNode {
            name: name.into(),
            provider_id: String::new(),
            addresses: vec![NodeAddress {
                kind: AddressType::InternalIP,
                address: ip.into(),
            }],
            labels: Default::default(),
        })
        .collect()
}

fn service(name: &str, ports: u16, monitors: bool) -> ServiceSpec {
    let mut svc = lb::service(cloud(), "default", ports, IDENTITY);
    svc.name = name.into();
    if monitors {
        svc = lb::with(svc, lb::ENABLE_HEALTH_MONITOR);
    }
    svc
}

async fn load_balancers(client: &Client) -> OpenStackLoadBalancers {
    lb::provider(cloud(), client, lb::settings(cloud()))
        .await
        .expect("the provider's load balancers")
}

fn address(status: &LoadBalancerStatus) -> &str {
    &status.ingress[0].ip
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_occm_built_are_taken_over_with_no_write() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("occm");
    let nodes = nodes();
    // Two annotations OCCM reads other than written: a bool written "yes" (its default, false)
    // and the key older OCCM docs spelled (ignored). OCCM serves the Service; so do we.
    let mut web = service("web", 1, false);
    web.annotations
        .insert("loadbalancer.openstack.org/keep-floatingip".into(), "yes".into());
    web.annotations.insert(
        "loadbalancer.openstack.org/floating-subnet-tag".into(),
        "public".into(),
    );
    let mut monitored = service("monitored", 2, true);
    let built = [
        occm::build(cloud(), &client, &cluster, &mut web, &nodes).await,
        occm::build(cloud(), &client, &cluster, &mut monitored, &nodes).await,
    ];
    // OCCM's shared load balancer: a second Service naming the first one's.
    let mut shared = service("shared", 1, false);
    shared.ports[0].port = 8080;
    shared.annotations.insert(
        "loadbalancer.openstack.org/load-balancer-id".into(),
        built[0].id.clone(),
    );
    occm::join(cloud(), &client, &cluster, &shared, &built[0].id, &nodes).await;
    shared.annotations.insert(
        "loadbalancer.openstack.org/load-balancer-address".into(),
        built[0].floating_ip.clone(),
    );
    let served = [(&web, &built[0]), (&monitored, &built[1]), (&shared, &built[0])];

    // The shadow run first: nothing would be written.
    let shadow = load_balancers(&client).await;
    for (svc, built) in served {
        let (status, woulds) = dry_run::scope(shadow.ensure_load_balancer(&cluster, svc, &nodes)).await;
        let status = status.unwrap_or_else(|e| panic!("{}: {e}", svc.name));
        assert_eq!(address(&status), built.floating_ip, "{}", svc.name);
        assert!(
            woulds.is_empty(),
            "{}: the shadow would write {woulds:?}",
            svc.name
        );
        // The annotations OCCM wrote back are answered as they are: the service controller
        // writes nothing at the switch.
        for key in [
            "loadbalancer.openstack.org/load-balancer-id",
            "loadbalancer.openstack.org/load-balancer-address",
        ] {
            assert_eq!(
                status.annotations.get(key),
                svc.annotations.get(key),
                "{}: {key}",
                svc.name
            );
        }
    }
    // What OCCM reads other than written is told, naming each annotation; nothing else is.
    let notices = shadow.service_notices(&cluster, &web);
    let named: Vec<(&str, bool)> = notices
        .iter()
        .map(|n| (n.reason.as_str(), n.message.contains("keep-floatingip: \"yes\"")))
        .collect();
    assert_eq!(
        named,
        [("AnnotationIgnored", false), ("AnnotationValueIgnored", true)],
        "{notices:?}"
    );
    assert!(notices[0].message.contains("floating-subnet-tag "), "{notices:?}");
    assert_eq!(shadow.service_notices(&cluster, &monitored), []);
    // One edited Service: exactly one planned write (the claim that precedes a change; the
    // change itself is planned by the sync after it).
    let mut edited = web.clone();
    edited
        .annotations
        .insert("loadbalancer.openstack.org/connection-limit".into(), "100".into());
    let (answer, woulds) = dry_run::scope(shadow.ensure_load_balancer(&cluster, &edited, &nodes)).await;
    assert!(
        matches!(answer, Err(ProviderError::RetryAfter { .. })),
        "{answer:?}"
    );
    assert_eq!(woulds.len(), 1, "{woulds:?}");

    // The switch: the same addresses, the same VIPs, no write.
    let ours = load_balancers(&client).await;
    for (svc, built) in served {
        let status = ours
            .ensure_load_balancer(&cluster, svc, &nodes)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", svc.name));
        assert_eq!(address(&status), built.floating_ip);
        ours.update_load_balancer(&cluster, svc, &nodes)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", svc.name));
        let lb: Value = client
            .get(
                Service::LoadBalancer,
                &format!("/lbaas/loadbalancers/{}", built.id),
            )
            .send_json_field("loadbalancer")
            .await
            .expect("the load balancer");
        assert_eq!(lb["vip_address"].as_str(), Some(built.vip_address.as_str()));
    }
    assert_eq!(ours.writes(), 0, "taken over with no write");

    // The owner of the shared one deleted first: only its listener and its tag go; the other
    // Service keeps the load balancer and the floating IP, with no write.
    lb::delete(&ours, &cluster, &web, DEADLINE)
        .await
        .expect("the owner deleted");
    let lb: Value = client
        .get(
            Service::LoadBalancer,
            &format!("/lbaas/loadbalancers/{}", built[0].id),
        )
        .send_json_field("loadbalancer")
        .await
        .expect("the shared load balancer stays");
    let owner = format!("kube_service_{cluster}_default_web");
    assert!(!lb::tags(&lb).contains(&owner), "the owner's tag gone: {lb}");
    let listeners: Vec<&str> = lb["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_str())
        .collect();
    assert_eq!(listeners.len(), 1, "the other Service's listener only: {lb}");
    let writes = ours.writes();
    let status = ours
        .ensure_load_balancer(&cluster, &shared, &nodes)
        .await
        .expect("still served");
    assert_eq!(
        (address(&status), ours.writes()),
        (built[0].floating_ip.as_str(), writes)
    );

    // The last Service on it takes it and OCCM's floating IP along (OCCM made them).
    for (svc, built) in [(&shared, &built[0]), (&monitored, &built[1])] {
        lb::delete(&ours, &cluster, svc, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", svc.name));
        let fip = client
            .get(
                Service::Network,
                &format!("/floatingips/{}", built.floating_ip_id),
            )
            .send_json::<Value>()
            .await;
        assert!(fip.is_err(), "{}: OCCM's floating IP deleted", svc.name);
    }
}

/// With `manage-security-groups`, OCCM's group (its rules, its member ports) is taken over with
/// no write either, and goes with the Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_occm_security_group_is_taken_over_with_no_write() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("occm-sg");
    let (server, node) = lb::server_node(cloud(), &client, &cloud().unique_name("occm-sg-node")).await;
    let nodes = vec![node];
    let mut svc = service("guarded", 2, false);
    svc.external_traffic_policy = ExternalTrafficPolicy::Local;
    svc.health_check_node_port = 32200;
    let built = occm::build(cloud(), &client, &cluster, &mut svc, &nodes).await;
    let group = occm::security_group(cloud(), &client, &cluster, &svc, &nodes).await;
    let settings = LoadBalancerSettings {
        manage_security_groups: true,
        ..lb::settings(cloud())
    };

    let shadow = lb::provider(cloud(), &client, settings.clone())
        .await
        .expect("shadow");
    let (status, woulds) = dry_run::scope(shadow.ensure_load_balancer(&cluster, &svc, &nodes)).await;
    assert_eq!(address(&status.expect("the shadow's ensure")), built.floating_ip);
    assert!(woulds.is_empty(), "the shadow would write {woulds:?}");

    let ours = lb::provider(cloud(), &client, settings).await.expect("ours");
    let status = ours
        .ensure_load_balancer(&cluster, &svc, &nodes)
        .await
        .expect("taken over");
    assert_eq!(address(&status), built.floating_ip);
    assert_eq!(ours.writes(), 0, "taken over with no write");

    lb::delete(&ours, &cluster, &svc, DEADLINE)
        .await
        .expect("deleted");
    let gone = client
        .get(Service::Network, &format!("/security-groups/{group}"))
        .send_json::<Value>()
        .await;
    assert!(
        gone.is_err_and(|e| e.is_not_found()),
        "OCCM's group deleted with the Service"
    );
    cloud().delete_server(&client, &server).await;
}

/// OCCM's TLS load balancer (TERMINATED_HTTPS with a real certificate container in Barbican,
/// an HTTP pool): the shadow run plans nothing, the switch writes nothing and reads nothing of
/// Barbican (the reference is checked only before it is written); deleting the Service leaves the
/// user's container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_load_balancer_occm_built_is_taken_over_with_no_write() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let cluster = cloud().unique_name("occmtls");
    let nodes = nodes();
    let reference = openstack_fixture::barbican::create_certificate_container(&client, &cluster)
        .await
        .expect("a certificate container");
    let mut web = service("web", 2, false);
    web.annotations
        .insert(lb::TLS_CONTAINER_REF.into(), reference.clone());
    let built = occm::build(cloud(), &client, &cluster, &mut web, &nodes).await;

    let shadow = load_balancers(&client).await;
    let (status, woulds) = dry_run::scope(shadow.ensure_load_balancer(&cluster, &web, &nodes)).await;
    assert_eq!(address(&status.expect("the shadow's ensure")), built.floating_ip);
    assert!(woulds.is_empty(), "the shadow would write {woulds:?}");

    let ours = load_balancers(&client).await;
    let barbican = |client: &Client| {
        client
            .request_counts()
            .iter()
            .filter(|((service, _), _)| *service == Service::KeyManager)
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    let before = barbican(&client);
    let status = ours
        .ensure_load_balancer(&cluster, &web, &nodes)
        .await
        .expect("taken over");
    assert_eq!(address(&status), built.floating_ip);
    assert_eq!(ours.writes(), 0, "taken over with no write");
    assert_eq!(
        barbican(&client),
        before,
        "no Barbican call for a reference already written"
    );

    lb::delete(&ours, &cluster, &web, DEADLINE)
        .await
        .expect("deleted");
    let id = reference.rsplit('/').next().unwrap_or_default();
    client
        .get(Service::KeyManager, &format!("/containers/{id}"))
        .send_json::<Value>()
        .await
        .expect("the user's container stays");
    openstack_fixture::barbican::delete_container_and_secrets(&client, &reference)
        .await
        .expect("the container removed");
}
