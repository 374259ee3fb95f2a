//! Load balancers on the test cloud as the provider library serves them: its settings for this
//! cloud, Services of a few ports, syncs asked again until they settle, the calls a client made,
//! what Octavia and Neutron hold. Shared by the provider's tests and the load-balancer bench.

use std::time::{Duration, Instant};

use provider::{
    AddressType, ExternalTrafficPolicy, LoadBalancerNode, LoadBalancerStatus, LoadBalancers, NodeAddress,
    Protocol, ProviderError, ServicePort, ServiceSpec,
};
use provider_openstack::{
    client::{ApiError, Client, Service},
    cloud_config::LoadBalancerSettings,
    load_balancers::OpenStackLoadBalancers,
    nodes::ProviderIdScheme,
};
use serde_json::Value;

use crate::TestCloud;

/// The annotation turning health monitors on.
pub const ENABLE_HEALTH_MONITOR: &str = "loadbalancer.openstack.org/enable-health-monitor";
/// The annotation terminating TLS with a Barbican container or secret.
pub const TLS_CONTAINER_REF: &str = "loadbalancer.openstack.org/default-tls-container-ref";
/// The annotation making a Service internal (its VIP is its address).
pub const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";

/// `[LoadBalancer]` for this cloud: members and VIPs on `private`, floating IPs from `public`.
pub fn settings(cloud: &TestCloud) -> LoadBalancerSettings {
    let ids = &cloud.info.ids;
    LoadBalancerSettings {
        subnet_id: Some(ids.subnet_private.clone()),
        floating_network_id: Some(ids.network_public.clone()),
        ..LoadBalancerSettings::default()
    }
}

/// The provider's load balancers with `settings`, through `client`.
///
/// # Errors
/// Octavia not answering, or absent from the catalog.
pub async fn provider(
    cloud: &TestCloud,
    client: &Client,
    settings: LoadBalancerSettings,
) -> Result<OpenStackLoadBalancers, String> {
    let scheme = ProviderIdScheme {
        region: cloud.info.region.clone(),
        regional: false,
    };
    OpenStackLoadBalancers::discover(client.clone(), settings, scheme)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the test cloud has no Octavia".to_owned())
}

/// OpenStack calls (Keystone's left out) `client` has sent so far.
pub fn calls(client: &Client) -> u64 {
    client
        .request_counts()
        .iter()
        .filter(|((service, _), _)| *service != Service::Identity)
        .map(|(_, n)| n)
        .sum()
}

/// A Service named uniquely in `namespace`, of `ports` TCP ports (80, 81, … to node ports
/// 30080, 30081, …), of the cluster whose identity is `cluster_id`.
pub fn service(cloud: &TestCloud, namespace: &str, ports: u16, cluster_id: &str) -> ServiceSpec {
    ServiceSpec {
        uid: cloud.unique_name("uid"),
        namespace: namespace.into(),
        name: cloud.unique_name("web"),
        ports: (0..ports)
            .map(|i| ServicePort {
                name: format!("p{i}"),
                protocol: Protocol::Tcp,
                port: 80 + i,
                node_port: 30080 + i,
            })
            .collect(),
        external_traffic_policy: ExternalTrafficPolicy::Cluster,
        cluster_id: cluster_id.into(),
        ..ServiceSpec::default()
    }
}

/// `svc` with annotation `key` set to `"true"`.
pub fn with(mut svc: ServiceSpec, key: &str) -> ServiceSpec {
    svc.annotations.insert(key.into(), "true".into());
    svc
}

/// Asks `sync` again while it answers RETRY_AFTER (after the delay it names) or a transient
/// failure (after a second: the test cloud's sqlite answers "database is locked" under
/// concurrent writes, which the service controller would retry), until `deadline` has passed;
/// its last answer.
pub async fn until_settled<T, F, Fut>(deadline: Duration, mut sync: F) -> provider::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = provider::Result<T>>,
{
    let start = Instant::now();
    loop {
        let answer = sync().await;
        let pause = match &answer {
            Err(ProviderError::RetryAfter { after, .. }) => *after,
            Err(ProviderError::Unavailable(_)) => Duration::from_secs(1),
            _ => return answer,
        };
        if start.elapsed() >= deadline {
            return answer;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Ensures `svc` on `nodes` until it settles ([`until_settled`]).
pub async fn ensure(
    lbs: &OpenStackLoadBalancers,
    cluster: &str,
    svc: &ServiceSpec,
    nodes: &[LoadBalancerNode],
    deadline: Duration,
) -> provider::Result<LoadBalancerStatus> {
    until_settled(deadline, || lbs.ensure_load_balancer(cluster, svc, nodes)).await
}

/// Deletes `svc`'s load balancer until it is gone ([`until_settled`]).
pub async fn delete(
    lbs: &OpenStackLoadBalancers,
    cluster: &str,
    svc: &ServiceSpec,
    deadline: Duration,
) -> provider::Result<()> {
    until_settled(deadline, || lbs.ensure_load_balancer_deleted(cluster, svc)).await
}

/// The live (not DELETED) load balancer named `name`, as Octavia reports it.
///
/// # Errors
/// The listing failed.
pub async fn octavia_lb(client: &Client, name: &str) -> Result<Option<Value>, ApiError> {
    let found: Value = client
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .query(&[("name", name)])
        .send_json()
        .await?;
    Ok(found["loadbalancers"].as_array().and_then(|l| {
        l.iter()
            .find(|lb| lb["provisioning_status"] != "DELETED")
            .cloned()
    }))
}

/// An Octavia object's tags.
pub fn tags(object: &Value) -> Vec<String> {
    object["tags"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// A server booted on `private` as a node: its ID, and the node (providerID, its port's
/// address as InternalIP).
pub async fn server_node(cloud: &TestCloud, client: &Client, name: &str) -> (String, LoadBalancerNode) {
    let id = cloud.boot_server(client, name, "m1.tiny", "private").await;
    let ports: Value = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", id.as_str())])
        .send_json()
        .await
        .unwrap_or_else(|e| panic!("the ports of server {id}: {e}"));
    let address = ports["ports"][0]["fixed_ips"][0]["ip_address"]
        .as_str()
        .unwrap_or_else(|| panic!("server {id} has no address: {ports}"))
        .to_owned();
    let node = LoadBalancerNode {
        name: name.to_owned(),
        provider_id: format!("openstack:///{id}"),
        addresses: vec![NodeAddress {
            kind: AddressType::InternalIP,
            address,
        }],
        labels: Default::default(),
    };
    (id, node)
}
