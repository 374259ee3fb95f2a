//! Pure decisions of the node controller: what a node's labels, providerID, taints and addresses
//! must become, given the node and the cloud's metadata. No I/O here.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
};

use controller_kit::{
    gateway::InstanceMetadata,
    names::{ANNOTATION_PROVIDED_NODE_IP, TAINT_UNINITIALIZED, labels},
    node::has_taint,
    patch::Patches,
    validation::{label_key_error, label_value_error},
};
use k8s_openapi::api::core::v1::{Node, NodeAddress, Taint};
use serde_json::{Value, json};

/// Why a tainted node cannot be initialized yet (it stays tainted and is retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotYet {
    /// Neither the node nor the cloud knows a providerID (upstream issue #123024).
    #[error("cloud provider does not set node provider ID for node {0}")]
    NoProviderId(String),
    /// `alpha.kubernetes.io/provided-node-ip` does not parse.
    #[error("provided node ip for node {node:?} is not valid: failed to parse node IP {value:?}: {reason}")]
    BadProvidedIp {
        /// Node name.
        node: String,
        /// The annotation value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// `alpha.kubernetes.io/provided-node-ip` names an IP the cloud does not report.
    #[error(
        "provided node ip for node {node:?} is not valid: failed to get node address from cloud provider that matches ip: {ip}"
    )]
    ProvidedIpNotInCloud {
        /// Node name.
        node: String,
        /// The unmatched IP.
        ip: String,
    },
}

/// Everything the initial sync writes to a node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Initialization {
    /// Whether the main patch removes the uninitialized taint, i.e. whether this write is the
    /// one that initializes the node (its `Synced` event and delay metrics). False when the
    /// node had lost the taint already and only its addresses are left to write.
    pub untaints: bool,
    /// Both writes, planned together: the main patch (providerID only if unset, labels, the
    /// taint removed) and `status.addresses` when they must change, written in that order as
    /// upstream does: the watch events of both writes then show an initialized node, so the
    /// reconciles they trigger cost nothing. For a node that is not tainted any more, only the
    /// status patch, when its addresses still differ from the cloud's.
    pub patches: Patches,
}

/// A provider label that is not a valid Kubernetes label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedLabel {
    /// The key as the provider sent it.
    pub key: String,
    /// What is wrong with the key or the value.
    pub reason: String,
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

fn node_labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// Whether a label key is in the `kubernetes.io` / `k8s.io` namespaces (or a subdomain), which
/// providers may not set through additional labels.
pub fn is_kubernetes_namespace(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")))
}

/// Beta → GA label copies for an initialized node (beta is the source of truth): the labels to
/// set, empty when there is nothing to do. No cloud call is needed.
pub fn ga_labels_from_beta(node: &Node) -> BTreeMap<String, String> {
    let current = node_labels(node);
    labels::BETA_TO_GA
        .iter()
        .filter_map(|(beta, ga)| {
            let value = current.get(*beta)?;
            (current.get(*ga) != Some(value)).then(|| ((*ga).to_owned(), value.clone()))
        })
        .collect()
}

/// Plans the initialization of a node carrying the uninitialized taint.
///
/// A node that lost the taint meanwhile gets only its addresses, if they still differ from the
/// cloud's, and `untaints: false`. That is the replan after a 409 on the status patch, which
/// goes out after the main patch removed the taint (kubelet updated the status in between):
/// planning nothing there would leave the node initialized without the cloud's addresses until
/// the next refresh. A node another replica or an admin fully initialized gets nothing.
///
/// # Errors
/// Why the node cannot be initialized from this answer yet; it keeps its taint. For a node
/// without the taint: the provided node IP matches no cloud address.
pub fn initialize(node: &Node, cloud: &InstanceMetadata) -> Result<Initialization, NotYet> {
    if !has_taint(node, TAINT_UNINITIALIZED) {
        return Ok(Initialization {
            untaints: false,
            patches: address_patch(node, &cloud.addresses)?
                .map(Patches::status)
                .unwrap_or_default(),
        });
    }
    let name = node_name(node);
    let node_provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    if node_provider_id.is_empty() && cloud.provider_id.is_empty() {
        return Err(NotYet::NoProviderId(name));
    }
    // Validated before anything is written, so a mismatch keeps the taint.
    provided_ip_order(node, &cloud.addresses)?;

    let current = node_labels(node);
    let mut new_labels = BTreeMap::new();
    for (value, keys) in [
        (
            &cloud.instance_type,
            [labels::INSTANCE_TYPE, labels::INSTANCE_TYPE_BETA],
        ),
        (&cloud.zone, [labels::ZONE, labels::ZONE_BETA]),
        (&cloud.region, [labels::REGION, labels::REGION_BETA]),
    ] {
        if !value.is_empty() {
            for key in keys {
                if current.get(key) != Some(value) {
                    new_labels.insert(key.to_owned(), value.clone());
                }
            }
        }
    }
    for (key, value) in &cloud.additional_labels {
        if label_key_error(key)
            .or_else(|| label_value_error(value))
            .is_some()
        {
            // Left out; see `invalid_labels`.
        } else if is_kubernetes_namespace(key) {
            tracing::warn!(node = %name, label = %key, "discarding node label in a kubernetes namespace");
        } else if current.contains_key(key) || new_labels.contains_key(key) {
            if current.get(key) != Some(value) {
                tracing::warn!(node = %name, label = %key, "discarding node label that is already present");
            }
        } else {
            new_labels.insert(key.clone(), value.clone());
        }
    }

    let remaining: Vec<Taint> = taints(node)
        .into_iter()
        .filter(|t| t.key != TAINT_UNINITIALIZED)
        .collect();
    let mut patch = json!({ "spec": { "taints": remaining } });
    if node_provider_id.is_empty() {
        patch["spec"]["providerID"] = json!(cloud.provider_id);
    }
    if !new_labels.is_empty() {
        patch["metadata"] = json!({ "labels": new_labels });
    }
    Ok(Initialization {
        untaints: true,
        patches: Patches {
            status: address_patch(node, &cloud.addresses)?,
            main: Some(patch),
        },
    })
}

/// The provider's additional labels that the API server would refuse, with the reason: they are
/// left out of the initialization (and reported) instead of failing the whole write.
pub fn invalid_labels(cloud: &InstanceMetadata) -> Vec<RejectedLabel> {
    cloud
        .additional_labels
        .iter()
        .filter_map(|(key, value)| {
            let reason = label_key_error(key).or_else(|| label_value_error(value))?;
            Some(RejectedLabel {
                key: key.clone(),
                reason,
            })
        })
        .collect()
}

/// The periodic refresh of an initialized node: the status patch that brings its addresses in
/// line with the cloud's, or `None` (nothing changed, the cloud reported none, or the node is
/// still tainted: the initial sync owns it).
///
/// # Errors
/// The provided node IP matches no cloud address.
pub fn refresh_addresses(node: &Node, cloud: &[NodeAddress]) -> Result<Option<Value>, NotYet> {
    if has_taint(node, TAINT_UNINITIALIZED) {
        return Ok(None);
    }
    address_patch(node, cloud)
}

/// The beta→GA label copies of an initialized node as a patch, or `None` when there is nothing
/// to do.
pub fn ga_labels_patch(node: &Node) -> Option<Value> {
    let labels = ga_labels_from_beta(node);
    (!labels.is_empty()).then(|| json!({ "metadata": { "labels": labels } }))
}

/// The status patch setting `status.addresses` to what the cloud says, when they differ.
fn address_patch(node: &Node, cloud: &[NodeAddress]) -> Result<Option<Value>, NotYet> {
    Ok(wanted_addresses(node, cloud)?
        .filter(|wanted| addresses_differ(node, wanted))
        .map(|wanted| json!({ "status": { "addresses": wanted } })))
}

/// The node's `status.addresses` as they should be, given the cloud's: the cloud's list, with
/// kubelet's Hostname kept when the cloud reported none, ordered for the provided node IP.
/// `Ok(None)` when the cloud reported no address at all (leave kubelet's).
pub fn wanted_addresses(node: &Node, cloud: &[NodeAddress]) -> Result<Option<Vec<NodeAddress>>, NotYet> {
    if cloud.is_empty() {
        return Ok(None);
    }
    let mut addresses = cloud.to_vec();
    if !addresses.iter().any(|a| a.type_ == "Hostname") {
        let kubelet = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        addresses.extend(
            kubelet
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == "Hostname")
                .cloned(),
        );
    }
    Ok(Some(provided_ip_order(node, &addresses)?.unwrap_or(addresses)))
}

/// With `alpha.kubernetes.io/provided-node-ip` set: for each provided IP in order, the cloud
/// addresses equal to it, then the addresses of every type that did not match (other addresses
/// of a matched type are dropped), as upstream's `GetNodeAddressesFromNodeIP`. `Ok(None)` when the
/// annotation is absent.
pub fn provided_ip_order(node: &Node, addresses: &[NodeAddress]) -> Result<Option<Vec<NodeAddress>>, NotYet> {
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROVIDED_NODE_IP))
    else {
        return Ok(None);
    };
    let name = node_name(node);
    let bad = |reason: String| NotYet::BadProvidedIp {
        node: name.clone(),
        value: value.clone(),
        reason,
    };
    let ips = value
        .split(',')
        .map(|piece| parse_ip_sloppy(piece).ok_or_else(|| bad(format!("could not parse {piece:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let dual_stack_pair = ips.len() == 2 && ips[0].is_ipv4() != ips[1].is_ipv4();
    if ips.len() > 2 || (ips.len() == 2 && !dual_stack_pair) {
        return Err(bad(
            "must contain either a single IP or a dual-stack pair of IPs".into()
        ));
    }
    if ips.len() == 2 && ips.iter().any(IpAddr::is_unspecified) {
        return Err(bad(
            "a dual-stack pair may not contain an unspecified address".into()
        ));
    }
    let mut ordered = Vec::new();
    let mut matched_types = Vec::new();
    for ip in &ips {
        let matches: Vec<&NodeAddress> = addresses
            .iter()
            .filter(|a| parse_ip_sloppy(&a.address).as_ref() == Some(ip))
            .collect();
        if matches.is_empty() {
            return Err(NotYet::ProvidedIpNotInCloud {
                node: name,
                ip: ip.to_string(),
            });
        }
        for a in matches {
            if !matched_types.contains(&a.type_) {
                matched_types.push(a.type_.clone());
            }
            ordered.push(a.clone());
        }
    }
    ordered.extend(
        addresses
            .iter()
            .filter(|a| !matched_types.contains(&a.type_))
            .cloned(),
    );
    Ok(Some(ordered))
}

/// An IP as Go's `net.ParseIP` after `netutils.ParseIPSloppy` reads it, in canonical form: IPv4
/// octets may have leading zeros (read as decimal), and an IPv4-mapped IPv6 address is the IPv4
/// address (Go's `IP.Equal` and `IsIPv6` treat them alike). No surrounding spaces.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for octet in &mut octets {
        let part = parts.next().filter(|p| !p.is_empty())?;
        let value = part.bytes().try_fold(0u32, |acc, b| {
            b.is_ascii_digit()
                .then(|| acc.checked_mul(10)?.checked_add(u32::from(b - b'0')))?
        })?;
        *octet = u8::try_from(value).ok()?;
    }
    parts.next().is_none().then(|| IpAddr::V4(Ipv4Addr::from(octets)))
}

/// Whether `status.addresses` must be rewritten to `wanted`: only when they differ as sets, as
/// upstream's `nodeAddressesChangeDetected` (a reordered list is not rewritten).
pub fn addresses_differ(node: &Node, wanted: &[NodeAddress]) -> bool {
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default();
    let key = |a: &NodeAddress| (a.type_.clone(), a.address.clone());
    let mut current: Vec<_> = current.iter().map(key).collect();
    let mut wanted: Vec<_> = wanted.iter().map(key).collect();
    current.sort();
    wanted.sort();
    current != wanted
}

#[cfg(test)]
mod tests {
    use test_support::NodeBuilder;

    use super::*;

    fn addr(type_: &str, address: &str) -> NodeAddress {
        NodeAddress {
            type_: type_.into(),
            address: address.into(),
        }
    }

    /// A node as kubelet `--cloud-provider=external` registers it.
    fn tainted() -> NodeBuilder {
        NodeBuilder::new("n1").taint(TAINT_UNINITIALIZED)
    }

    fn main(init: &Initialization) -> &Value {
        init.patches.main.as_ref().expect("a main patch")
    }

    fn cloud() -> InstanceMetadata {
        InstanceMetadata {
            provider_id: "sim://zone-a/i-1".into(),
            instance_type: "sim.large".into(),
            addresses: vec![
                addr("InternalIP", "10.0.0.1"),
                addr("ExternalIP", "203.0.113.1"),
                addr("Hostname", "n1"),
            ],
            zone: "zone-a".into(),
            region: "region-1".into(),
            additional_labels: BTreeMap::new(),
        }
    }

    #[test]
    fn a_fresh_node_gets_provider_id_all_labels_and_loses_the_taint() {
        let node = tainted().taints(&[TAINT_UNINITIALIZED, "other"]).build();
        let init = initialize(&node, &cloud()).unwrap();
        assert_eq!(main(&init)["spec"]["providerID"], "sim://zone-a/i-1");
        let labels = &main(&init)["metadata"]["labels"];
        for (k, v) in [
            (labels::INSTANCE_TYPE, "sim.large"),
            (labels::INSTANCE_TYPE_BETA, "sim.large"),
            (labels::ZONE, "zone-a"),
            (labels::ZONE_BETA, "zone-a"),
            (labels::REGION, "region-1"),
            (labels::REGION_BETA, "region-1"),
        ] {
            assert_eq!(labels[k], v, "{k}");
        }
        let taints = main(&init)["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0]["key"], "other", "other taints are kept");
        assert_eq!(
            init.patches.status.unwrap()["status"]["addresses"],
            serde_json::to_value(cloud().addresses).unwrap()
        );
    }

    #[test]
    fn a_node_that_lost_the_taint_gets_only_the_addresses_it_lacks() {
        // The replan after a 409 on the status patch: this write removed the taint already.
        let untainted = tainted()
            .taints(&[])
            .addresses(&[("Hostname", "n1"), ("InternalIP", "192.168.0.9")])
            .build();
        let init = initialize(&untainted, &cloud()).unwrap();
        assert!(!init.untaints);
        assert_eq!(init.patches.main, None, "no labels, no providerID, no taints");
        assert_eq!(
            init.patches.status.unwrap()["status"]["addresses"],
            serde_json::to_value(cloud().addresses).unwrap()
        );

        // Fully initialized by someone else (the same addresses, in another order): nothing.
        let done = tainted()
            .taints(&[])
            .addresses(&[
                ("Hostname", "n1"),
                ("InternalIP", "10.0.0.1"),
                ("ExternalIP", "203.0.113.1"),
            ])
            .build();
        assert_eq!(initialize(&done, &cloud()), Ok(Initialization::default()));

        // The tainted node is the one the write initializes.
        assert!(initialize(&tainted().build(), &cloud()).unwrap().untaints);
    }

    #[test]
    fn an_existing_provider_id_is_never_changed() {
        let node = tainted().provider_id("sim://zone-a/i-original").build();
        let init = initialize(&node, &cloud()).unwrap();
        assert!(main(&init)["spec"].get("providerID").is_none());
    }

    #[test]
    fn the_taint_stays_until_a_provider_id_is_known() {
        let node = tainted().build();
        let no_id = InstanceMetadata {
            provider_id: String::new(),
            ..cloud()
        };
        assert_eq!(initialize(&node, &no_id), Err(NotYet::NoProviderId("n1".into())));
        // ...but a node that has one already can be initialized by a cloud that reports none.
        let node = tainted().provider_id("sim://zone-a/i-1").build();
        assert!(initialize(&node, &no_id).is_ok());
    }

    #[test]
    fn well_known_labels_are_overwritten_and_empty_values_leave_them() {
        let node = tainted()
            .label(labels::ZONE, "stale")
            .label(labels::REGION, "region-1")
            .build();
        let meta = InstanceMetadata {
            instance_type: String::new(),
            ..cloud()
        };
        let init = initialize(&node, &meta).unwrap();
        let labels_patch = main(&init)["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels_patch[labels::ZONE], "zone-a");
        assert!(
            !labels_patch.contains_key(labels::REGION),
            "unchanged labels are not rewritten"
        );
        assert!(!labels_patch.contains_key(labels::INSTANCE_TYPE));
        assert!(!labels_patch.contains_key(labels::INSTANCE_TYPE_BETA));
    }

    #[test]
    fn additional_labels_never_enter_kubernetes_namespaces_nor_overwrite() {
        let node = tainted().label("team", "mine").build();
        let mut meta = cloud();
        meta.additional_labels = [
            ("team", "theirs"),
            ("sim.cloud/rack", "r7"),
            ("node.kubernetes.io/instance-type", "evil"),
            ("kubernetes.io/hostname", "evil"),
            ("foo.k8s.io/x", "evil"),
            ("k8s.io/x", "evil"),
            ("notk8s.io/x", "kept"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let init = initialize(&node, &meta).unwrap();
        let l = main(&init)["metadata"]["labels"].as_object().unwrap();
        assert!(!l.contains_key("team"), "existing labels are never overwritten");
        assert_eq!(l["sim.cloud/rack"], "r7");
        assert_eq!(l["notk8s.io/x"], "kept");
        assert_eq!(l[labels::INSTANCE_TYPE], "sim.large");
        for k in ["kubernetes.io/hostname", "foo.k8s.io/x", "k8s.io/x"] {
            assert!(!l.contains_key(k), "{k}");
        }
    }

    #[test]
    fn kubelets_hostname_is_kept_only_when_the_cloud_has_none() {
        let node = tainted()
            .addresses(&[("Hostname", "kubelet-name"), ("InternalIP", "192.168.0.9")])
            .build();
        let without = vec![addr("InternalIP", "10.0.0.1")];
        assert_eq!(
            wanted_addresses(&node, &without).unwrap().unwrap(),
            vec![addr("InternalIP", "10.0.0.1"), addr("Hostname", "kubelet-name")]
        );
        assert_eq!(
            wanted_addresses(&node, &cloud().addresses).unwrap().unwrap(),
            cloud().addresses
        );
        assert_eq!(
            wanted_addresses(&node, &[]).unwrap(),
            None,
            "no cloud addresses: leave kubelet's"
        );
    }

    /// IPv6-only and dual-stack nodes as cloud-provider-aws reports them (`NodeIPFamilies`
    /// `ipv6`, `ipv4,ipv6`, `ipv6,ipv4`): they initialize with the cloud's addresses in its
    /// order and its zone-ID label, and kubelet's `--node-ip` (single IPv6, or a dual-stack
    /// pair in either order) picks and orders them as KEP-3705 describes.
    #[test]
    fn ipv6_only_and_dual_stack_nodes_initialize() {
        let v4 = [
            addr("InternalIP", "10.0.1.5"),
            addr("InternalDNS", "ip-10-0-1-5.ec2.internal"),
            addr("Hostname", "ip-10-0-1-5.ec2.internal"),
        ];
        let v6 = [
            addr("InternalIP", "2600:1f18::a"),
            addr("InternalIP", "2600:1f18::b"),
        ];
        let aws = |addresses: Vec<NodeAddress>| InstanceMetadata {
            provider_id: "aws:///us-east-1a/i-0abc".into(),
            instance_type: "m6i.large".into(),
            addresses,
            zone: "us-east-1a".into(),
            region: "us-east-1".into(),
            additional_labels: BTreeMap::from([(
                "topology.k8s.aws/zone-id".to_owned(),
                "use1-az6".to_owned(),
            )]),
        };
        let ipv6_only = v6.to_vec();
        let v4_first = [&v4[..], &v6[..]].concat();
        let v6_first = [&v6[..], &v4[..]].concat();
        // What, the cloud's addresses, kubelet's --node-ip, the addresses written (Err: kept tainted).
        type Case<'a> = (
            &'a str,
            Vec<NodeAddress>,
            Option<&'a str>,
            Result<Vec<NodeAddress>, ()>,
        );
        let cases: Vec<Case> = vec![
            ("IPv6 only", ipv6_only.clone(), None, Ok(ipv6_only.clone())),
            (
                "IPv6 only, --node-ip the second",
                ipv6_only.clone(),
                Some("2600:1f18:0::b"),
                Ok(vec![addr("InternalIP", "2600:1f18::b")]),
            ),
            (
                "dual-stack IPv4 first",
                v4_first.clone(),
                None,
                Ok(v4_first.clone()),
            ),
            (
                "dual-stack IPv6 first",
                v6_first.clone(),
                None,
                Ok(v6_first.clone()),
            ),
            (
                "dual-stack, --node-ip an IPv6 one",
                v4_first.clone(),
                Some("2600:1f18::b"),
                Ok(vec![
                    addr("InternalIP", "2600:1f18::b"),
                    v4[1].clone(),
                    v4[2].clone(),
                ]),
            ),
            (
                "dual-stack, --node-ip an IPv6-primary pair",
                v4_first.clone(),
                Some("2600:1f18::a,10.0.1.5"),
                Ok(vec![
                    addr("InternalIP", "2600:1f18::a"),
                    addr("InternalIP", "10.0.1.5"),
                    v4[1].clone(),
                    v4[2].clone(),
                ]),
            ),
            (
                "IPv6 only, --node-ip an IPv4 pair member the cloud lacks",
                ipv6_only.clone(),
                Some("10.0.1.5,2600:1f18::a"),
                Err(()),
            ),
        ];
        for (what, addresses, node_ip, want) in cases {
            let mut node = tainted();
            if let Some(ip) = node_ip {
                node = node.annotation(ANNOTATION_PROVIDED_NODE_IP, ip);
            }
            let got = initialize(&node.build(), &aws(addresses));
            match want {
                Ok(want) => {
                    let init = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(init.untaints, "{what}");
                    assert_eq!(
                        main(&init)["metadata"]["labels"]["topology.k8s.aws/zone-id"],
                        "use1-az6",
                        "{what}"
                    );
                    assert_eq!(
                        init.patches.status.expect("addresses")["status"]["addresses"],
                        serde_json::to_value(want).unwrap(),
                        "{what}"
                    );
                }
                Err(()) => assert!(
                    matches!(got, Err(NotYet::ProvidedIpNotInCloud { .. })),
                    "{what}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn provided_node_ip_goes_first_and_drops_others_of_its_type() {
        let cloud_addrs = vec![
            addr("InternalIP", "10.0.0.1"),
            addr("InternalIP", "10.0.0.2"),
            addr("ExternalIP", "203.0.113.1"),
            addr("InternalIP", "fd00::2"),
            addr("Hostname", "n1"),
        ];
        let cases: Vec<(&str, Result<Vec<NodeAddress>, ()>)> = vec![
            (
                "10.0.0.2",
                Ok(vec![
                    addr("InternalIP", "10.0.0.2"),
                    addr("ExternalIP", "203.0.113.1"),
                    addr("Hostname", "n1"),
                ]),
            ),
            (
                "203.0.113.1",
                Ok(vec![
                    addr("ExternalIP", "203.0.113.1"),
                    addr("InternalIP", "10.0.0.1"),
                    addr("InternalIP", "10.0.0.2"),
                    addr("InternalIP", "fd00::2"),
                    addr("Hostname", "n1"),
                ]),
            ),
            (
                "fd00::2,10.0.0.1",
                Ok(vec![
                    addr("InternalIP", "fd00::2"),
                    addr("InternalIP", "10.0.0.1"),
                    addr("ExternalIP", "203.0.113.1"),
                    addr("Hostname", "n1"),
                ]),
            ),
            (
                // Go's IP.Equal: an IPv4-mapped IPv6 annotation matches the cloud's IPv4 address.
                "::ffff:10.0.0.2",
                Ok(vec![
                    addr("InternalIP", "10.0.0.2"),
                    addr("ExternalIP", "203.0.113.1"),
                    addr("Hostname", "n1"),
                ]),
            ),
            (
                "010.000.000.001,fd00::2",
                Ok(vec![
                    addr("InternalIP", "10.0.0.1"),
                    addr("InternalIP", "fd00::2"),
                    addr("ExternalIP", "203.0.113.1"),
                    addr("Hostname", "n1"),
                ]),
            ),
            // Both IPv4 to Go (the second is IPv4-mapped): not a dual-stack pair.
            ("10.0.0.1,::ffff:10.0.0.2", Err(())),
            ("10.0.0.1,::", Err(())),
            ("10.9.9.9", Err(())),
            ("10.0.0.1,10.0.0.2", Err(())),
            ("10.0.0.1, fd00::2", Err(())),
            ("", Err(())),
            ("not-an-ip", Err(())),
        ];
        for (value, want) in cases {
            let node = tainted().annotation(ANNOTATION_PROVIDED_NODE_IP, value).build();
            let got = provided_ip_order(&node, &cloud_addrs)
                .map(Option::unwrap)
                .map_err(|_| ());
            assert_eq!(got, want, "{value:?}");
        }
    }

    #[test]
    fn an_unmatched_provided_ip_keeps_the_taint() {
        let node = tainted()
            .annotation(ANNOTATION_PROVIDED_NODE_IP, "10.9.9.9")
            .build();
        assert!(matches!(
            initialize(&node, &cloud()),
            Err(NotYet::ProvidedIpNotInCloud { .. })
        ));
    }

    #[test]
    fn beta_labels_are_the_source_of_truth_on_initialized_nodes() {
        let node = tainted()
            .taints(&[])
            .label(labels::ZONE_BETA, "z1")
            .label(labels::REGION_BETA, "r1")
            .label(labels::REGION, "r-old")
            .label(labels::INSTANCE_TYPE_BETA, "t1")
            .label(labels::INSTANCE_TYPE, "t1")
            .build();
        let want: BTreeMap<String, String> = [
            (labels::ZONE.to_owned(), "z1".to_owned()),
            (labels::REGION.to_owned(), "r1".to_owned()),
        ]
        .into();
        assert_eq!(ga_labels_from_beta(&node), want);
        assert!(ga_labels_from_beta(&tainted().build()).is_empty());
    }

    #[test]
    fn kubernetes_namespaces_are_recognised() {
        for (key, want) in [
            ("kubernetes.io/x", true),
            ("node.kubernetes.io/x", true),
            ("k8s.io/x", true),
            ("a.b.k8s.io/x", true),
            ("notk8s.io/x", false),
            ("kubernetes.io.evil/x", false),
            ("plain", false),
            ("example.com/kubernetes.io", false),
        ] {
            assert_eq!(is_kubernetes_namespace(key), want, "{key}");
        }
    }

    #[test]
    fn addresses_are_compared_as_sets_so_a_reordered_list_is_not_rewritten() {
        let node = tainted()
            .addresses(&[
                ("InternalIP", "1.1.1.1"),
                ("InternalIP", "1.1.1.3"),
                ("Hostname", "h"),
            ])
            .build();
        let cases = [
            (
                "same list",
                vec![
                    ("InternalIP", "1.1.1.1"),
                    ("InternalIP", "1.1.1.3"),
                    ("Hostname", "h"),
                ],
                false,
            ),
            (
                "reordered",
                vec![
                    ("Hostname", "h"),
                    ("InternalIP", "1.1.1.3"),
                    ("InternalIP", "1.1.1.1"),
                ],
                false,
            ),
            (
                "one changed",
                vec![
                    ("InternalIP", "1.1.1.2"),
                    ("InternalIP", "1.1.1.3"),
                    ("Hostname", "h"),
                ],
                true,
            ),
            (
                "one more",
                vec![
                    ("InternalIP", "1.1.1.1"),
                    ("InternalIP", "1.1.1.3"),
                    ("Hostname", "h"),
                    ("ExternalIP", "2.2.2.2"),
                ],
                true,
            ),
            (
                "one fewer",
                vec![("InternalIP", "1.1.1.1"), ("Hostname", "h")],
                true,
            ),
            (
                "type changed",
                vec![
                    ("ExternalIP", "1.1.1.1"),
                    ("InternalIP", "1.1.1.3"),
                    ("Hostname", "h"),
                ],
                true,
            ),
        ];
        for (what, wanted, differ) in cases {
            let wanted: Vec<_> = wanted.into_iter().map(|(t, a)| addr(t, a)).collect();
            assert_eq!(addresses_differ(&node, &wanted), differ, "{what}");
        }
    }

    #[test]
    fn invalid_provider_labels_are_rejected_and_the_rest_applied() {
        let mut meta = cloud();
        meta.additional_labels = [
            ("sim.cloud/rack", "r7"),
            ("sim.cloud/bad key", "x"),
            ("sim.cloud/owner", "not a valid value"),
            ("Upper.Case/prefix", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let init = initialize(&tainted().build(), &meta).unwrap();
        let l = main(&init)["metadata"]["labels"].as_object().unwrap();
        assert_eq!(l["sim.cloud/rack"], "r7");
        assert_eq!(l[labels::ZONE], "zone-a", "the well-known labels are still set");
        let invalid = invalid_labels(&meta);
        let rejected: Vec<&str> = invalid.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            rejected,
            ["Upper.Case/prefix", "sim.cloud/bad key", "sim.cloud/owner"]
        );
        for key in rejected {
            assert!(!l.contains_key(key), "{key}");
        }
    }

    #[test]
    fn provided_node_ips_are_read_like_go_reads_them() {
        for (text, want) in [
            ("10.0.0.1", Some("10.0.0.1")),
            ("010.000.000.001", Some("10.0.0.1")),
            ("::ffff:10.0.0.1", Some("10.0.0.1")),
            ("fd00::2", Some("fd00::2")),
            ("10.0.0.256", None),
            ("10.0.0", None),
            (" 10.0.0.1", None),
            ("", None),
        ] {
            assert_eq!(
                parse_ip_sloppy(text),
                want.map(|w| w.parse::<IpAddr>().unwrap()),
                "{text:?}"
            );
        }
    }
}
