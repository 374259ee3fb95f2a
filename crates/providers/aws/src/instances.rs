//! Instances: batched DescribeInstances, with a definite answer for every node.
//!
//! Nodes with a provider ID are looked up by instance ID, up to `max_instance_batch` IDs per
//! DescribeInstances call. AWS fails the whole call when one ID is unknown
//! (`InvalidInstanceID.NotFound`, naming the unknown IDs), so those IDs are taken out, recorded as
//! not found, and the rest asked again; if the message names none of the asked IDs, the batch
//! falls back to the `instance-id` filter (200 values per call), which returns only existing
//! instances. A node without a provider ID is looked up by its name: a name that is an instance
//! ID or a resource-name hostname (`i-0abc….ec2.internal`) joins the by-ID lookup, as in
//! cloud-provider-aws; other names (IP-based, `ip-10-0-0-1.ec2.internal`) go through the
//! `private-dns-name` filter.
//!
//! State rules match cloud-provider-aws: `terminated` does not exist; every other state exists;
//! only `stopped` is shut down (`stopping` may still be serving).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::Ipv6Addr,
};

use async_trait::async_trait;
use aws_sdk_ec2::types::{Filter, Instance, NetworkInterfaceStatus};
use provider::{
    AddressType, InstanceInfo, InstanceMetadata, Instances, NodeAddress, NodeRef, ProviderError, Result,
};

use crate::{
    AwsProvider,
    config::IpFamily,
    errors::{code_of, message_of, sdk_error},
    naming::{instance_id_from_provider_id, instance_id_in_node_name, instance_ids_in_message, provider_id},
    zones::{LABEL_ZONE_ID, ZoneView},
};

/// How long an instance described for a load balancer is reused (its groups and VPC do not
/// change; its state only decides whether a new target is registered).
pub const INSTANCE_TTL: std::time::Duration = std::time::Duration::from_secs(300);
/// Most values AWS accepts in one filter.
pub const MAX_FILTER_VALUES: usize = 200;
/// Rounds of "drop the unknown IDs and ask again" before falling back to the filter.
const MAX_NOT_FOUND_ROUNDS: usize = 3;

/// What the provider keeps of an EC2 instance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceView {
    /// Instance ID.
    pub id: String,
    /// State name (`running`, `stopped`, `terminated`...).
    pub state: String,
    /// Instance type.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// Private IPv4 addresses: the primary one first, then the other interfaces' by device index.
    pub private_ips: Vec<String>,
    /// IPv6 addresses: the first of each in-use network interface, by device index (upstream
    /// reports one per interface).
    pub ipv6_ips: Vec<String>,
    /// Public IPv4 address.
    pub public_ip: Option<String>,
    /// Private DNS name (the Node name on AWS).
    pub private_dns: Option<String>,
    /// Public DNS name.
    pub public_dns: Option<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Whether EC2 drops traffic not addressed to the instance (must be off for pod routes).
    pub source_dest_check: Option<bool>,
    /// The instance's security groups (its primary interface's), as upstream reads them.
    pub security_groups: Vec<String>,
    /// Its VPC.
    pub vpc_id: String,
}

fn non_empty(s: Option<&str>) -> Option<String> {
    s.filter(|s| !s.is_empty()).map(str::to_owned)
}

impl InstanceView {
    /// Converts an SDK instance; `None` when it has no ID.
    pub fn from_sdk(i: &Instance) -> Option<Self> {
        let id = non_empty(i.instance_id())?;
        let mut private_ips = Vec::new();
        if let Some(ip) = non_empty(i.private_ip_address()) {
            private_ips.push(ip);
        }
        let mut interfaces: Vec<_> = i.network_interfaces().iter().collect();
        interfaces.sort_by_key(|n| n.attachment().and_then(|a| a.device_index()).unwrap_or(i32::MAX));
        let ipv6_ips = interfaces
            .iter()
            .filter(|n| n.status() == Some(&NetworkInterfaceStatus::InUse))
            .filter_map(|n| non_empty(n.ipv6_addresses().first()?.ipv6_address()))
            .collect();
        for interface in interfaces {
            let mut ips: Vec<_> = interface.private_ip_addresses().iter().collect();
            ips.sort_by_key(|a| !a.primary().unwrap_or(false));
            for ip in ips.into_iter().filter_map(|a| non_empty(a.private_ip_address())) {
                if !private_ips.contains(&ip) {
                    private_ips.push(ip);
                }
            }
        }
        Some(Self {
            id,
            state: i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_owned())
                .unwrap_or_default(),
            instance_type: i
                .instance_type()
                .map(|t| t.as_str().to_owned())
                .unwrap_or_default(),
            zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_owned(),
            private_ips,
            ipv6_ips,
            public_ip: non_empty(i.public_ip_address()),
            private_dns: non_empty(i.private_dns_name()),
            public_dns: non_empty(i.public_dns_name()),
            tags: i
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_owned(), t.value().unwrap_or_default().to_owned())))
                .collect(),
            source_dest_check: i.source_dest_check(),
            security_groups: i
                .security_groups()
                .iter()
                .filter_map(|g| non_empty(g.group_id()))
                .collect(),
            vpc_id: i.vpc_id().unwrap_or_default().to_owned(),
        })
    }

    /// Terminated instances do not exist (cloud-provider-aws: only `terminated`).
    pub fn exists(&self) -> bool {
        self.state != "terminated"
    }

    /// Stopped: exists, powered off. Only `stopped`, as cloud-provider-aws: a `stopping` instance
    /// is not tainted shut down yet.
    pub fn shut_down(&self) -> bool {
        self.state == "stopped"
    }

    /// Tags as pairs.
    pub fn tag_pairs(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Node addresses as cloud-provider-aws reports them, family by family in the order of
/// `families` (cloud-config `NodeIPFamilies`; a family named twice counts once):
/// - IPv4: private IPs (InternalIP), the public IP (ExternalIP), the private DNS name
///   (InternalDNS and Hostname), the public DNS name (ExternalDNS);
/// - IPv6: the first IPv6 address of each network interface, as InternalIP even when publicly
///   routable (AWS gives IPv6 addresses no DNS names), in canonical form.
///
/// # Errors
/// An IPv6 address EC2 reported that does not parse (upstream fails the node the same way).
pub fn node_addresses(i: &InstanceView, families: &[IpFamily]) -> Result<Vec<NodeAddress>> {
    let mut out = Vec::new();
    let mut done = Vec::new();
    for family in families {
        if done.contains(family) {
            continue;
        }
        done.push(*family);
        match family {
            IpFamily::V4 => {
                out.extend(
                    i.private_ips
                        .iter()
                        .map(|ip| NodeAddress::new(AddressType::InternalIP, ip.clone())),
                );
                if let Some(ip) = &i.public_ip {
                    out.push(NodeAddress::new(AddressType::ExternalIP, ip.clone()));
                }
                if let Some(dns) = &i.private_dns {
                    out.push(NodeAddress::new(AddressType::InternalDNS, dns.clone()));
                    out.push(NodeAddress::new(AddressType::Hostname, dns.clone()));
                }
                if let Some(dns) = &i.public_dns {
                    out.push(NodeAddress::new(AddressType::ExternalDNS, dns.clone()));
                }
            }
            IpFamily::V6 => {
                for ip in &i.ipv6_ips {
                    let parsed: Ipv6Addr = ip.parse().map_err(|_| {
                        ProviderError::Internal(format!(
                            "instance {} has an invalid IPv6 address {ip:?}",
                            i.id
                        ))
                    })?;
                    out.push(NodeAddress::new(AddressType::InternalIP, parsed.to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// The labels cloud-provider-aws adds to a node beyond the standard ones:
/// `topology.k8s.aws/zone-id` with the zone's ID, when known.
pub fn additional_labels(zone: Option<&ZoneView>) -> BTreeMap<String, String> {
    zone.filter(|z| !z.id.is_empty())
        .map(|z| (LABEL_ZONE_ID.to_owned(), z.id.clone()))
        .into_iter()
        .collect()
}

/// The answer for one node whose instance was found: `families` order its addresses, `zone` is
/// its zone as DescribeAvailabilityZones lists it (`None`: not listed, an error as upstream's;
/// listed without an ID, as an AWS-compatible cloud may: no zone-ID label).
pub fn instance_info(
    i: &InstanceView,
    region: &str,
    families: &[IpFamily],
    zone: Option<&ZoneView>,
) -> Result<InstanceInfo> {
    if !i.exists() {
        return Err(ProviderError::InstanceNotFound(format!(
            "instance {} is terminated",
            i.id
        )));
    }
    if i.zone.is_empty() {
        return Err(ProviderError::Internal(format!(
            "instance {} has no availability zone",
            i.id
        )));
    }
    if zone.is_none() {
        return Err(ProviderError::Internal(format!(
            "instance {} is in zone {}, which DescribeAvailabilityZones does not list",
            i.id, i.zone
        )));
    }
    Ok(InstanceInfo {
        metadata: InstanceMetadata {
            provider_id: provider_id(&i.zone, &i.id),
            instance_type: i.instance_type.clone(),
            addresses: node_addresses(i, families)?,
            zone: i.zone.clone(),
            region: region.to_owned(),
            additional_labels: additional_labels(zone),
        },
        shutdown: i.shut_down(),
    })
}

/// How a node is to be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKey {
    /// By instance ID (from the provider ID, or a name that is an instance ID).
    Id(String),
    /// By private DNS name (the node name).
    Name(String),
    /// Never: the provider ID is not an AWS one.
    Invalid(ProviderError),
}

/// Decides how to find `node`: the provider ID first, then the instance ID in the name, then the
/// name as a private DNS name.
pub fn node_key(node: &NodeRef) -> NodeKey {
    if !node.provider_id.is_empty() {
        return match instance_id_from_provider_id(&node.provider_id) {
            Ok(id) => NodeKey::Id(id),
            Err(e) => NodeKey::Invalid(e),
        };
    }
    if node.name.is_empty() {
        return NodeKey::Invalid(ProviderError::InvalidArgument(
            "node has neither a provider ID nor a name".into(),
        ));
    }
    match instance_id_in_node_name(&node.name) {
        Some(id) => NodeKey::Id(id.to_owned()),
        None => NodeKey::Name(node.name.clone()),
    }
}

/// The instance a node name stands for, among those with that private DNS name: the one that is
/// not terminated (an IP, hence a name, can be reused after a termination).
pub fn pick_by_name<'a>(name: &str, candidates: &'a [InstanceView]) -> Result<&'a InstanceView> {
    let live: Vec<&InstanceView> = candidates.iter().filter(|i| i.exists()).collect();
    match live.as_slice() {
        [one] => Ok(one),
        [] => Err(ProviderError::InstanceNotFound(format!(
            "no instance with private DNS name {name:?}"
        ))),
        many => Err(ProviderError::Internal(format!(
            "{} instances share the private DNS name {name:?}: {}",
            many.len(),
            many.iter().map(|i| i.id.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Instances described by ID: what was found, and the IDs AWS calls malformed. An asked ID in
/// neither does not exist.
#[derive(Debug, Default)]
pub struct Described {
    /// Found instances by ID (terminated ones included).
    pub found: HashMap<String, InstanceView>,
    /// IDs AWS refused as malformed.
    pub malformed: HashSet<String>,
}

impl Described {
    /// The definite answer for `id`.
    pub fn answer(&self, id: &str) -> Result<&InstanceView> {
        if self.malformed.contains(id) {
            return Err(ProviderError::InvalidArgument(format!(
                "malformed instance ID {id:?}"
            )));
        }
        self.found
            .get(id)
            .ok_or_else(|| ProviderError::InstanceNotFound(format!("instance {id} does not exist")))
    }
}

fn dedup(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = HashSet::new();
    values.into_iter().filter(|v| seen.insert(v.clone())).collect()
}

impl AwsProvider {
    /// Describes instances by ID, `max_instance_batch` per call.
    pub(crate) async fn describe_instance_ids(&self, ids: &[String]) -> Result<Described> {
        let mut out = Described::default();
        let ids = dedup(ids.iter().cloned());
        for chunk in ids.chunks(self.config.max_instance_batch) {
            self.describe_id_chunk(chunk, &mut out).await?;
        }
        Ok(out)
    }

    async fn describe_id_chunk(&self, chunk: &[String], out: &mut Described) -> Result<()> {
        let mut pending: Vec<String> = chunk.to_vec();
        for _ in 0..=MAX_NOT_FOUND_ROUNDS {
            if pending.is_empty() {
                return Ok(());
            }
            match self.describe_instances_by_ids(&pending).await {
                Ok(found) => {
                    out.found.extend(found.into_iter().map(|i| (i.id.clone(), i)));
                    return Ok(());
                }
                Err(err) => {
                    let code = code_of(&err).unwrap_or_default();
                    if code != "InvalidInstanceID.NotFound" && code != "InvalidInstanceID.Malformed" {
                        return Err(sdk_error("DescribeInstances", &err));
                    }
                    let named: HashSet<String> =
                        instance_ids_in_message(message_of(&err)).into_iter().collect();
                    let before = pending.len();
                    pending.retain(|id| !named.contains(id));
                    if code == "InvalidInstanceID.Malformed" {
                        out.malformed
                            .extend(named.into_iter().filter(|id| chunk.contains(id)));
                    }
                    if pending.len() == before {
                        break;
                    }
                    tracing::debug!(
                        unknown = before - pending.len(),
                        "DescribeInstances named unknown instance IDs; asking again without them"
                    );
                }
            }
        }
        // The error did not say which IDs are unknown (or too many rounds): the filter returns
        // only the existing ones.
        let found = self.describe_instances_filtered("instance-id", &pending).await?;
        out.found.extend(found.into_iter().map(|i| (i.id.clone(), i)));
        Ok(())
    }

    async fn describe_instances_by_ids(
        &self,
        ids: &[String],
    ) -> std::result::Result<
        Vec<InstanceView>,
        aws_sdk_ec2::error::SdkError<
            aws_sdk_ec2::operation::describe_instances::DescribeInstancesError,
            aws_smithy_runtime_api::client::orchestrator::HttpResponse,
        >,
    > {
        let mut views = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .ec2
                .describe_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .set_next_token(token.take())
                .send()
                .await?;
            views.extend(
                out.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .filter_map(InstanceView::from_sdk),
            );
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(views),
            }
        }
    }

    /// Instances matching one filter, `MAX_FILTER_VALUES` values per call, all pages.
    pub(crate) async fn describe_instances_filtered(
        &self,
        filter: &str,
        values: &[String],
    ) -> Result<Vec<InstanceView>> {
        let mut views = Vec::new();
        // Names and addresses repeat across VPCs with overlapping CIDRs: stay in the cluster's.
        let vpc = match (&self.config.vpc_id, filter) {
            (Some(vpc), "private-dns-name" | "private-ip-address") => {
                Some(Filter::builder().name("vpc-id").values(vpc).build())
            }
            _ => None,
        };
        for chunk in values.chunks(MAX_FILTER_VALUES) {
            let mut token: Option<String> = None;
            loop {
                let out = self
                    .ec2
                    .describe_instances()
                    .set_filters(Some(
                        std::iter::once(
                            Filter::builder()
                                .name(filter)
                                .set_values(Some(chunk.to_vec()))
                                .build(),
                        )
                        .chain(vpc.clone())
                        .collect(),
                    ))
                    .set_next_token(token.take())
                    .send()
                    .await
                    .map_err(|e| sdk_error("DescribeInstances", &e))?;
                views.extend(
                    out.reservations()
                        .iter()
                        .flat_map(|r| r.instances())
                        .filter_map(InstanceView::from_sdk),
                );
                match out.next_token() {
                    Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                    _ => break,
                }
            }
        }
        Ok(views)
    }

    /// Instances by ID for load balancers: what was described within [`INSTANCE_TTL`] is
    /// reused (a node joining makes every load balancer look its backends up), the rest is
    /// described in batches. Unknown IDs are absent from the answer.
    pub(crate) async fn instances_cached(&self, ids: &[String]) -> Result<HashMap<String, InstanceView>> {
        let mut out = HashMap::new();
        let missing = self.take_cached_instances(ids, &mut out);
        if !missing.is_empty() {
            // One describe at a time: the callers that missed together wait for the first one,
            // then find what it described (a node joining makes every load balancer miss).
            let _describing = self.caches.instances_describing.lock().await;
            let missing = self.take_cached_instances(&missing, &mut out);
            if missing.is_empty() {
                return Ok(out);
            }
            let described = self.describe_instance_ids(&missing).await?;
            let now = std::time::Instant::now();
            let mut cache = self.caches.instances.lock().expect("instance cache");
            cache.retain(|_, (at, _)| at.elapsed() < INSTANCE_TTL);
            for (id, view) in described.found {
                cache.insert(id.clone(), (now, view.clone()));
                out.insert(id, view);
            }
        }
        Ok(out)
    }

    /// Moves what the cache holds (described within [`INSTANCE_TTL`]) of `ids` into `out`;
    /// the IDs it does not hold.
    fn take_cached_instances(&self, ids: &[String], out: &mut HashMap<String, InstanceView>) -> Vec<String> {
        let cache = self.caches.instances.lock().expect("instance cache");
        let mut missing = Vec::new();
        for id in ids {
            match cache.get(id) {
                Some((at, view)) if at.elapsed() < INSTANCE_TTL => {
                    out.insert(id.clone(), view.clone());
                }
                _ => missing.push(id.clone()),
            }
        }
        missing
    }

    /// Finds the instance of every node: the outer error fails the batch (throttled,
    /// unreachable); a per-node problem is that node's entry. Terminated instances are returned
    /// as found; callers decide.
    pub(crate) async fn resolve_nodes(&self, nodes: &[NodeRef]) -> Result<Vec<Result<InstanceView>>> {
        let keys: Vec<NodeKey> = nodes.iter().map(node_key).collect();
        let ids: Vec<String> = keys
            .iter()
            .filter_map(|k| match k {
                NodeKey::Id(id) => Some(id.clone()),
                _ => None,
            })
            .collect();
        let names: Vec<String> = dedup(keys.iter().filter_map(|k| match k {
            NodeKey::Name(n) => Some(n.clone()),
            _ => None,
        }));
        let by_id = if ids.is_empty() {
            Described::default()
        } else {
            self.describe_instance_ids(&ids).await?
        };
        let mut by_name: HashMap<String, Vec<InstanceView>> = HashMap::new();
        if !names.is_empty() {
            for i in self
                .describe_instances_filtered("private-dns-name", &names)
                .await?
            {
                if let Some(dns) = i.private_dns.clone() {
                    by_name.entry(dns).or_default().push(i);
                }
            }
        }
        Ok(keys
            .into_iter()
            .map(|key| match key {
                NodeKey::Id(id) => by_id.answer(&id).cloned(),
                NodeKey::Name(name) => {
                    let candidates = by_name.get(&name).map(Vec::as_slice).unwrap_or_default();
                    pick_by_name(&name, candidates).cloned()
                }
                NodeKey::Invalid(e) => Err(e),
            })
            .collect())
    }
}

#[async_trait]
impl Instances for AwsProvider {
    async fn lookup_instances(&self, nodes: &[NodeRef]) -> Result<Vec<Result<InstanceInfo, ProviderError>>> {
        let resolved = self.resolve_nodes(nodes).await?;
        // The zones of the live instances found, described once for the process's life.
        let names: BTreeSet<String> = resolved
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .filter(|i| i.exists() && !i.zone.is_empty())
            .map(|i| i.zone.clone())
            .collect();
        let zones = self.zones(&names).await?;
        let families = &self.config.node_ip_families;
        Ok(resolved
            .into_iter()
            .map(|r| r.and_then(|i| instance_info(&i, &self.region, families, zones.get(&i.zone))))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: &str, state: &str) -> InstanceView {
        InstanceView {
            id: id.into(),
            state: state.into(),
            instance_type: "m5.large".into(),
            zone: "eu-west-1a".into(),
            private_ips: vec!["10.0.1.5".into(), "10.0.1.6".into()],
            public_ip: Some("54.1.2.3".into()),
            private_dns: Some("ip-10-0-1-5.eu-west-1.compute.internal".into()),
            public_dns: Some("ec2-54-1-2-3.eu-west-1.compute.amazonaws.com".into()),
            ..Default::default()
        }
    }

    #[test]
    fn states_decide_existence_and_only_stopped_is_shut_down() {
        let cases = [
            ("pending", true, false),
            ("running", true, false),
            // Still running its shutdown: not shut down yet (cloud-provider-aws: only `stopped`).
            ("stopping", true, false),
            ("stopped", true, true),
            ("shutting-down", true, false),
            ("terminated", false, false),
        ];
        for (state, exists, shut) in cases {
            let i = view("i-1", state);
            assert_eq!(i.exists(), exists, "{state}");
            assert_eq!(i.shut_down(), shut, "{state}");
            let info = instance_info(&i, "eu-west-1", &[IpFamily::V4], Some(&zone()));
            assert_eq!(info.is_ok(), exists, "{state}");
            if let Ok(info) = info {
                assert_eq!(info.shutdown, shut, "{state}");
            } else {
                assert!(matches!(info, Err(ProviderError::InstanceNotFound(_))));
            }
        }
    }

    fn zone() -> ZoneView {
        ZoneView {
            id: "euw1-az3".into(),
            kind: "availability-zone".into(),
        }
    }

    #[test]
    fn metadata_carries_ids_addresses_and_topology() {
        let info = instance_info(
            &view("i-0abc", "running"),
            "eu-west-1",
            &[IpFamily::V4],
            Some(&zone()),
        )
        .unwrap();
        let m = info.metadata;
        assert_eq!(m.provider_id, "aws:///eu-west-1a/i-0abc");
        assert_eq!(m.instance_type, "m5.large");
        assert_eq!(m.zone, "eu-west-1a");
        assert_eq!(m.region, "eu-west-1");
        assert_eq!(
            m.additional_labels,
            BTreeMap::from([("topology.k8s.aws/zone-id".to_owned(), "euw1-az3".to_owned())])
        );
        let kinds: Vec<(AddressType, &str)> =
            m.addresses.iter().map(|a| (a.kind, a.address.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (AddressType::InternalIP, "10.0.1.5"),
                (AddressType::InternalIP, "10.0.1.6"),
                (AddressType::ExternalIP, "54.1.2.3"),
                (AddressType::InternalDNS, "ip-10-0-1-5.eu-west-1.compute.internal"),
                (AddressType::Hostname, "ip-10-0-1-5.eu-west-1.compute.internal"),
                (
                    AddressType::ExternalDNS,
                    "ec2-54-1-2-3.eu-west-1.compute.amazonaws.com"
                ),
            ]
        );
        let mut no_zone = view("i-1", "running");
        no_zone.zone.clear();
        assert!(matches!(
            instance_info(&no_zone, "r", &[IpFamily::V4], Some(&zone())),
            Err(ProviderError::Internal(_))
        ));
        // A zone DescribeAvailabilityZones does not list fails the node, as upstream's; one
        // listed without an ID (an AWS-compatible cloud) only goes without the label.
        let running = view("i-1", "running");
        let err = instance_info(&running, "r", &[IpFamily::V4], None).unwrap_err();
        assert!(
            matches!(&err, ProviderError::Internal(m) if m.contains("eu-west-1a")),
            "{err:?}"
        );
        let no_id = ZoneView {
            id: String::new(),
            ..zone()
        };
        let info = instance_info(&running, "r", &[IpFamily::V4], Some(&no_id)).unwrap();
        assert!(info.metadata.additional_labels.is_empty());
    }

    /// Upstream's `getInstanceNodeAddress`: each family's addresses in the order of
    /// `NodeIPFamilies`; IPv6 ones are InternalIP, in canonical form.
    #[test]
    fn addresses_follow_the_ip_families_in_order() {
        let dual = InstanceView {
            ipv6_ips: vec!["2600:1F18:0:0::a".into(), "2600:1f18::b".into()],
            ..view("i-1", "running")
        };
        let v4 = [
            "InternalIP 10.0.1.5",
            "InternalIP 10.0.1.6",
            "ExternalIP 54.1.2.3",
            "InternalDNS ip-10-0-1-5.eu-west-1.compute.internal",
            "Hostname ip-10-0-1-5.eu-west-1.compute.internal",
            "ExternalDNS ec2-54-1-2-3.eu-west-1.compute.amazonaws.com",
        ];
        let v6 = ["InternalIP 2600:1f18::a", "InternalIP 2600:1f18::b"];
        let shown = |families: &[IpFamily], i: &InstanceView| -> Vec<String> {
            node_addresses(i, families)
                .unwrap()
                .iter()
                .map(|a| format!("{:?} {}", a.kind, a.address))
                .collect()
        };
        let cases: [(&[IpFamily], Vec<&str>); 5] = [
            (&[IpFamily::V4], v4.to_vec()),
            (&[IpFamily::V6], v6.to_vec()),
            (&[IpFamily::V4, IpFamily::V6], [&v4[..], &v6[..]].concat()),
            (&[IpFamily::V6, IpFamily::V4], [&v6[..], &v4[..]].concat()),
            // A family named twice counts once.
            (
                &[IpFamily::V6, IpFamily::V4, IpFamily::V6],
                [&v6[..], &v4[..]].concat(),
            ),
        ];
        for (families, want) in cases {
            assert_eq!(shown(families, &dual), want, "{families:?}");
        }
        // An IPv6-only instance (no IPv4 address, no DNS name) under ipv6.
        let v6_only = InstanceView {
            id: "i-2".into(),
            ipv6_ips: vec!["2600:1f18::c".into()],
            ..InstanceView::default()
        };
        assert_eq!(shown(&[IpFamily::V6], &v6_only), ["InternalIP 2600:1f18::c"]);
        assert!(shown(&[IpFamily::V4], &v6_only).is_empty());
        // An IPv4 instance under ipv6: no address.
        assert!(shown(&[IpFamily::V6], &view("i-3", "running")).is_empty());
        // EC2 reporting a malformed address fails the node, naming it; never a panic.
        let bad = InstanceView {
            ipv6_ips: vec!["2600:zz::1".into()],
            ..view("i-4", "running")
        };
        let err = node_addresses(&bad, &[IpFamily::V4, IpFamily::V6]).unwrap_err();
        assert!(
            matches!(&err, ProviderError::Internal(m) if m.contains("i-4") && m.contains("2600:zz::1")),
            "{err:?}"
        );
        assert!(
            node_addresses(&bad, &[IpFamily::V4]).is_ok(),
            "not asked, not read"
        );
    }

    /// IPv6 addresses as EC2 describes them: the first of each in-use interface, primary
    /// interface first.
    #[test]
    fn ipv6_addresses_come_from_in_use_interfaces_by_device_index() {
        use aws_sdk_ec2::types::{
            InstanceIpv6Address, InstanceNetworkInterface, InstanceNetworkInterfaceAttachment,
        };
        let eni = |index: i32, status: NetworkInterfaceStatus, ips: &[&str]| {
            let mut b = InstanceNetworkInterface::builder().status(status).attachment(
                InstanceNetworkInterfaceAttachment::builder()
                    .device_index(index)
                    .build(),
            );
            for ip in ips {
                b = b.ipv6_addresses(InstanceIpv6Address::builder().ipv6_address(*ip).build());
            }
            b.build()
        };
        let instance = Instance::builder()
            .instance_id("i-1")
            .network_interfaces(eni(2, NetworkInterfaceStatus::InUse, &["2600::2a", "2600::2b"]))
            .network_interfaces(eni(1, NetworkInterfaceStatus::Detaching, &["2600::1"]))
            .network_interfaces(eni(0, NetworkInterfaceStatus::InUse, &["2600::a", "2600::b"]))
            .network_interfaces(eni(3, NetworkInterfaceStatus::InUse, &[]))
            .build();
        let view = InstanceView::from_sdk(&instance).unwrap();
        assert_eq!(view.ipv6_ips, ["2600::a", "2600::2a"]);
    }

    #[test]
    fn nodes_are_found_by_provider_id_first_then_name() {
        assert_eq!(
            node_key(&NodeRef::new("n", "aws:///eu-west-1a/i-0abc")),
            NodeKey::Id("i-0abc".into())
        );
        assert_eq!(
            node_key(&NodeRef::by_name("ip-10-0-1-5")),
            NodeKey::Name("ip-10-0-1-5".into())
        );
        assert!(matches!(
            node_key(&NodeRef::new("n", "gce://p/z/n")),
            NodeKey::Invalid(ProviderError::InvalidArgument(_))
        ));
        assert!(matches!(node_key(&NodeRef::default()), NodeKey::Invalid(_)));
    }

    #[test]
    fn nodes_named_by_instance_id_or_resource_name_are_found_by_id() {
        let cases = [
            ("i-0123456789abcdef0", NodeKey::Id("i-0123456789abcdef0".into())),
            (
                "i-0123456789abcdef0.eu-west-1.compute.internal",
                NodeKey::Id("i-0123456789abcdef0".into()),
            ),
            (
                "i-0123456789abcdef0.ec2.internal",
                NodeKey::Id("i-0123456789abcdef0".into()),
            ),
            (
                "ip-10-0-1-5.ec2.internal",
                NodeKey::Name("ip-10-0-1-5.ec2.internal".into()),
            ),
            ("worker-1", NodeKey::Name("worker-1".into())),
        ];
        for (name, want) in cases {
            assert_eq!(node_key(&NodeRef::by_name(name)), want, "{name:?}");
        }
        // The provider ID still comes first.
        assert_eq!(
            node_key(&NodeRef::new(
                "i-0123456789abcdef0",
                "aws:///eu-west-1a/i-0fedcba9876543210"
            )),
            NodeKey::Id("i-0fedcba9876543210".into())
        );
    }

    #[test]
    fn a_name_picks_the_live_instance() {
        let dead = view("i-old", "terminated");
        let live = view("i-new", "running");
        assert_eq!(
            pick_by_name("n", &[dead.clone(), live.clone()]).unwrap().id,
            "i-new"
        );
        assert!(matches!(
            pick_by_name("n", std::slice::from_ref(&dead)),
            Err(ProviderError::InstanceNotFound(_))
        ));
        assert!(matches!(
            pick_by_name("n", &[]),
            Err(ProviderError::InstanceNotFound(_))
        ));
        assert!(matches!(
            pick_by_name("n", &[live.clone(), view("i-other", "stopped")]),
            Err(ProviderError::Internal(_))
        ));
    }

    #[test]
    fn described_answers_are_definite() {
        let mut d = Described::default();
        d.found.insert("i-1".into(), view("i-1", "running"));
        d.malformed.insert("i-zz".into());
        assert_eq!(d.answer("i-1").unwrap().id, "i-1");
        assert!(matches!(d.answer("i-2"), Err(ProviderError::InstanceNotFound(_))));
        assert!(matches!(d.answer("i-zz"), Err(ProviderError::InvalidArgument(_))));
    }
}
