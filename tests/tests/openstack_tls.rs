//! TLS termination (`loadbalancer.openstack.org/default-tls-container-ref`) end to end, through
//! the real binaries (fake-apiserver, `cloud-gateway --provider openstack`,
//! service-lb-controller) on the test cloud's Octavia and Barbican (issue 39):
//!
//! - built as OCCM builds it: TERMINATED_HTTPS listeners with the reference, HTTP pools; a new
//!   certificate is the listener's reference changed in place; deleted, nothing is left but the
//!   user's certificate containers;
//! - a TLS load balancer OCCM built (its calls replayed, a real certificate in Barbican) taken
//!   over with no Octavia write;
//! - on a cloud whose catalog has no key manager: the TLS Service is refused by name in a
//!   Warning, and another Service is served beside it.

mod openstack_support;

use std::{collections::BTreeMap, time::Duration};

use e2e::{Cluster, ClusterSpec, binary, ingress_ips, wait_for, wait_ingress_ip};
use k8s_openapi::api::core::v1::{Node, Service as KubeService};
use kube::api::{Patch, PatchParams, PostParams};
use openstack_fixture::{TestCloud, User, barbican, occm};
use provider::{AddressType, LoadBalancerNode, NodeAddress, Protocol, ServicePort, ServiceSpec};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

const TLS_ANNOTATION: &str = openstack_fixture::lb::TLS_CONTAINER_REF;
const DEADLINE: Duration = Duration::from_secs(120);

/// A cluster whose gateway serves the test cloud (in `region`, when given) and whose
/// service-lb-controller calls the cluster `name`, with one Node (no providerID yet, as kubelet
/// registers it, its InternalIP on `private`).
async fn cluster(cloud: &TestCloud, name: &str, region: Option<&str>, node_ip: &str) -> Cluster {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = openstack_support::write_cloud_conf(cloud, cluster.dir.path(), region);
    cluster
        .swap_gateway(
            &binary("cloud-gateway"),
            &openstack_support::gateway_args(&conf),
            &[],
        )
        .await;
    cluster.start_controller(
        "service-lb-controller",
        "service-lb-controller",
        &["--cluster-name", name, "--node-sync-delay", "0s"],
    );
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": format!("{name}-node"), "labels": { "kubernetes.io/hostname": format!("{name}-node") } },
        "status": { "addresses": [
            { "type": "InternalIP", "address": node_ip },
            { "type": "Hostname", "address": format!("{name}-node") },
        ]},
    }))
    .expect("a node");
    cluster
        .nodes()
        .create(&PostParams::default(), &node)
        .await
        .expect("the node");
    cluster
}

/// A Service of one HTTPS port (443 to node port `node_port`), internal, with `annotations`.
fn https_service(node_port: u16, annotations: &[(&str, &str)]) -> Value {
    let mut all: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    all.insert(
        "service.beta.kubernetes.io/openstack-internal-load-balancer",
        "true",
    );
    json!({
        "metadata": { "annotations": all },
        "spec": { "ports": [{ "name": "https", "port": 443, "targetPort": 8443, "nodePort": node_port, "protocol": "TCP" }] },
    })
}

/// The load balancer named `name` with its listeners and pools, once it is ACTIVE.
async fn tree(ccm: &Client, name: &str) -> Option<(Value, Vec<Value>, Vec<Value>)> {
    let lbs: Value = ccm
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .query(&[("name", name)])
        .send_json()
        .await
        .ok()?;
    let lb = lbs["loadbalancers"].as_array()?.first()?.clone();
    if lb["provisioning_status"] != "ACTIVE" {
        return None;
    }
    let id = lb["id"].as_str()?;
    let listeners: Value = ccm
        .get(Service::LoadBalancer, "/lbaas/listeners")
        .query(&[("loadbalancer_id", id)])
        .send_json()
        .await
        .ok()?;
    let pools: Value = ccm
        .get(Service::LoadBalancer, "/lbaas/pools")
        .query(&[("loadbalancer_id", id)])
        .send_json()
        .await
        .ok()?;
    Some((
        lb,
        listeners["listeners"].as_array()?.clone(),
        pools["pools"].as_array()?.clone(),
    ))
}

/// Waits for a Warning event on Service `service` whose note has every one of `words`.
async fn warning(cluster: &Cluster, service: &str, words: &[&str]) {
    wait_for(
        &format!("a Warning on {service} naming {words:?}"),
        DEADLINE,
        || async {
            cluster.events("default").await.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(service)
                    && e.type_.as_deref() == Some("Warning")
                    && e.note
                        .as_deref()
                        .is_some_and(|m| words.iter().all(|w| m.contains(w)))
            })
        },
    )
    .await;
}

/// How many load balancers are named `name`; `None` when Octavia does not answer.
async fn named(ccm: &Client, name: &str) -> Option<usize> {
    let lbs: Value = ccm
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .query(&[("name", name)])
        .send_json()
        .await
        .ok()?;
    Some(lbs["loadbalancers"].as_array()?.len())
}

/// Whether Barbican still has the container `reference` names.
async fn container_exists(ccm: &Client, reference: &str) -> bool {
    let id = reference.rsplit('/').next().unwrap_or_default();
    ccm.get(Service::KeyManager, &format!("/containers/{id}"))
        .send_json::<Value>()
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_service_is_built_as_occm_builds_it_its_certificate_changed_in_place_and_deleted() {
    let cloud = TestCloud::shared();
    let ccm = cloud.client(User::Ccm).await;
    let name = cloud.unique_name("tls");
    let first = barbican::create_certificate_container(&ccm, &format!("{name}-a"))
        .await
        .expect("a certificate container");
    let second = barbican::create_certificate_container(&ccm, &format!("{name}-b"))
        .await
        .expect("another certificate container");
    let mut cluster = cluster(cloud, &name, None, "10.0.0.201").await;
    let services = cluster.services("default");
    cluster
        .create_lb_service(
            "default",
            "web",
            https_service(30443, &[(TLS_ANNOTATION, &first)]),
        )
        .await;
    wait_ingress_ip(&services, "web", "the TLS Service served").await;

    // OCCM's listener and pool: TERMINATED_HTTPS with the reference, HTTP, the node a member.
    let lb_name = format!("kube_service_{name}_default_web");
    let (lb, listeners, pools) =
        wait_for("the load balancer ACTIVE", DEADLINE, || tree(&ccm, &lb_name)).await;
    assert_eq!(listeners.len(), 1, "{listeners:#?}");
    assert_eq!(listeners[0]["protocol"], "TERMINATED_HTTPS");
    assert_eq!(listeners[0]["protocol_port"], 443);
    assert_eq!(listeners[0]["default_tls_container_ref"], first.as_str());
    assert_eq!(pools[0]["protocol"], "HTTP");
    let listener_id = listeners[0]["id"].as_str().expect("an id").to_owned();

    // Another certificate: the same listener, its reference changed.
    let patch = json!({ "metadata": { "annotations": { TLS_ANNOTATION: second } } });
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
    let listeners = wait_for("the listener on the new certificate", DEADLINE, || async {
        let (_, listeners, _) = tree(&ccm, &lb_name).await?;
        (listeners.len() == 1 && listeners[0]["default_tls_container_ref"] == second.as_str())
            .then_some(listeners)
    })
    .await;
    assert_eq!(
        listeners[0]["id"],
        listener_id.as_str(),
        "changed in place, not replaced"
    );

    // Deleted: the load balancer goes; the user's containers stay, as they are the user's.
    services.delete("web", &Default::default()).await.expect("delete");
    let id = lb["id"].as_str().expect("an id").to_owned();
    wait_for("the load balancer deleted", DEADLINE, || async {
        let answer = ccm
            .get(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
            .send_json::<Value>()
            .await;
        match answer {
            Err(e) if e.is_not_found() => Some(()),
            Ok(lb) if lb["loadbalancer"]["provisioning_status"] == "DELETED" => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(container_exists(&ccm, &first).await && container_exists(&ccm, &second).await);

    // A reference Barbican does not have: refused by name before any Octavia write.
    let missing = format!(
        "{}/containers/0c0e0000-0000-4000-8000-00000000dead",
        first.rsplit_once("/containers/").map_or("", |(base, _)| base)
    );
    cluster
        .create_lb_service(
            "default",
            "stale",
            https_service(30447, &[(TLS_ANNOTATION, &missing)]),
        )
        .await;
    warning(&cluster, "stale", &[&missing, "Barbican has no such container"]).await;
    assert_eq!(
        named(&ccm, &format!("kube_service_{name}_default_stale")).await,
        Some(0),
        "nothing made for it"
    );
    services
        .delete("stale", &Default::default())
        .await
        .expect("delete");
    cluster.stop().await;
    for reference in [&first, &second] {
        barbican::delete_container_and_secrets(&ccm, reference)
            .await
            .expect("the containers removed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_load_balancer_occm_built_is_taken_over_with_no_write() {
    let cloud = TestCloud::shared();
    let ccm = cloud.client(User::Ccm).await;
    let name = cloud.unique_name("tlsoccm");
    let reference = barbican::create_certificate_container(&ccm, &format!("{name}-cert"))
        .await
        .expect("a certificate container");
    let node_ip = "10.0.0.202";
    let node = LoadBalancerNode {
        name: format!("{name}-node"),
        addresses: vec![NodeAddress {
            kind: AddressType::InternalIP,
            address: node_ip.into(),
        }],
        ..LoadBalancerNode::default()
    };
    let mut svc = ServiceSpec {
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![ServicePort {
            name: "https".into(),
            protocol: Protocol::Tcp,
            port: 443,
            node_port: 30444,
        }],
        annotations: [(TLS_ANNOTATION.to_owned(), reference.clone())].into(),
        ..ServiceSpec::default()
    };
    let built = occm::build(cloud, &ccm, &name, &mut svc, std::slice::from_ref(&node)).await;
    let lb_name = format!("kube_service_{name}_default_web");
    let (_, before, _) = tree(&ccm, &lb_name).await.expect("OCCM's tree");
    assert_eq!(before[0]["protocol"], "TERMINATED_HTTPS");

    // The Service as OCCM left it: its annotations (the ones OCCM wrote included), its status.
    let mut cluster = cluster(cloud, &name, None, node_ip).await;
    let services = cluster.services("default");
    let annotations: BTreeMap<&str, &str> = svc
        .annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let created: KubeService = cluster
        .create_lb_service(
            "default",
            "web",
            json!({
                "metadata": { "annotations": annotations },
                "spec": { "ports": [{ "name": "https", "port": 443, "targetPort": 8443, "nodePort": 30444, "protocol": "TCP" }] },
            }),
        )
        .await;
    let served = wait_ingress_ip(&services, "web", "OCCM's TLS Service served").await;
    assert_eq!(
        ingress_ips(&served),
        std::slice::from_ref(&built.floating_ip),
        "{created:?}"
    );
    // Served from what OCCM left: its listener untouched, no Octavia write made.
    let (_, after, _) = tree(&ccm, &lb_name).await.expect("the tree");
    assert_eq!(
        after[0]["updated_at"], before[0]["updated_at"],
        "the listener untouched"
    );
    assert_eq!(after[0]["default_tls_container_ref"], reference.as_str());
    let log = cluster.procs[cluster.proc_index("cloud-gateway")].log();
    assert!(!log.contains("Octavia write"), "no Octavia write:\n{log}");

    // Cleanup: OCCM's load balancer and floating IP go with the Service.
    services.delete("web", &Default::default()).await.expect("delete");
    wait_for("OCCM's load balancer deleted", DEADLINE, || async {
        ccm.get(
            Service::LoadBalancer,
            &format!("/lbaas/loadbalancers/{}", built.id),
        )
        .send_json::<Value>()
        .await
        .err()
        .filter(|e| e.is_not_found())
        .map(drop)
    })
    .await;
    cluster.stop().await;
    barbican::delete_container_and_secrets(&ccm, &reference)
        .await
        .expect("the container removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_manager_the_tls_service_is_refused_by_name_and_the_others_are_served() {
    let cloud = TestCloud::shared();
    let admin = cloud.admin().await;
    let ccm = cloud.client(User::Ccm).await;
    // A region with the cloud's services but no key manager.
    let region_id = cloud.unique_name("nokms");
    let endpoints: BTreeMap<String, String> = ["identity", "compute", "network", "load-balancer"]
        .into_iter()
        .map(|kind| (kind.to_owned(), cloud.info.endpoints[kind].clone()))
        .collect();
    let region = cloud.add_region(&admin, &region_id, &endpoints).await;
    let name = cloud.unique_name("nokms");
    let mut cluster = cluster(cloud, &name, Some(&region_id), "10.0.0.203").await;
    let services = cluster.services("default");
    cluster
        .create_lb_service(
            "default",
            "secure",
            https_service(
                30445,
                &[(TLS_ANNOTATION, "https://kms.example/v1/containers/0c0e")],
            ),
        )
        .await;
    cluster
        .create_lb_service("default", "plain", https_service(30446, &[]))
        .await;
    wait_ingress_ip(&services, "plain", "the Service without TLS served").await;
    warning(&cluster, "secure", &["key-manager", TLS_ANNOTATION, "Barbican"]).await;
    let secure = services.get("secure").await.expect("secure");
    assert!(ingress_ips(&secure).is_empty(), "not served: {secure:?}");
    assert_eq!(
        named(&ccm, &format!("kube_service_{name}_default_secure")).await,
        Some(0),
        "no load balancer made for it"
    );

    services
        .delete("plain", &Default::default())
        .await
        .expect("delete");
    services
        .delete("secure", &Default::default())
        .await
        .expect("delete");
    wait_for("plain's load balancer deleted", DEADLINE, || async {
        (named(&ccm, &format!("kube_service_{name}_default_plain")).await? == 0).then_some(())
    })
    .await;
    cluster.stop().await;
    region.remove(&admin).await;
}
