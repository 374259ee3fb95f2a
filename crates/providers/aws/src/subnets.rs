//! The subnets of a new load balancer, chosen as cloud-provider-aws chooses them
//! (`findELBSubnets`, `resolveSubnetNameOrIDs`), and the cached view of the cluster's VPC they
//! are chosen from.
//!
//! Discovery: among the VPC's subnets tagged for this cluster or for no cluster at all, drop
//! private ones (no route to an `igw-` in their route table, or the main table) for
//! internet-facing load balancers, keep one per zone (the role tag first, then the cluster tag,
//! then the smallest ID), drop zones that are not plain availability zones (local and wavelength
//! zones carry no Classic ELB or NLB), in zone-name order.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use aws_sdk_ec2::types::Filter;
use provider::{ProviderError, Result};

use crate::{
    AwsProvider,
    errors::sdk_error,
    tags::{ClusterTagging, ROLE_ELB_TAG, ROLE_INTERNAL_ELB_TAG, Tags, from_pairs},
};

/// How long a VPC's subnets and route tables are reused: a burst of load balancer changes (a
/// node joining touches every load balancer) reads them once.
pub const NETWORK_TTL: Duration = Duration::from_secs(60);

/// A subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetView {
    /// Subnet ID.
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// IPv4 CIDR.
    pub cidr: String,
    /// Tags.
    pub tags: Tags,
}

/// A route table, as far as "is this subnet public" needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTableView {
    /// Route table ID.
    pub id: String,
    /// The VPC's main table (used by subnets without an explicit association).
    pub main: bool,
    /// Subnets explicitly associated.
    pub subnets: Vec<String>,
    /// Has a route to an internet gateway (`igw-…`).
    pub to_internet_gateway: bool,
}

/// The cluster's VPC as subnet choices need it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Network {
    /// VPC ID.
    pub vpc_id: String,
    /// Every subnet of the VPC.
    pub subnets: Vec<SubnetView>,
    /// Every route table of the VPC.
    pub route_tables: Vec<RouteTableView>,
    /// Zone name → zone type (`availability-zone`, `local-zone`, `wavelength-zone`).
    pub zone_types: BTreeMap<String, String>,
}

impl Network {
    /// The subnet with this ID.
    pub fn subnet(&self, id: &str) -> Option<&SubnetView> {
        self.subnets.iter().find(|s| s.id == id)
    }
}

/// Upstream's `isSubnetPublic`: the explicitly associated table, else the main table; public if
/// it routes to an internet gateway.
pub fn is_public(tables: &[RouteTableView], subnet: &str) -> Result<bool> {
    let table = tables
        .iter()
        .find(|t| t.subnets.iter().any(|s| s == subnet))
        .or_else(|| tables.iter().find(|t| t.main))
        .ok_or_else(|| {
            ProviderError::InvalidArgument(format!("could not locate a route table for subnet {subnet}"))
        })?;
    Ok(table.to_internet_gateway)
}

/// Upstream's discovery (see the module docs). `Ok(vec![])` when nothing fits.
pub fn discover(network: &Network, cluster: &ClusterTagging, internal: bool) -> Result<Vec<String>> {
    let role = if internal {
        ROLE_INTERNAL_ELB_TAG
    } else {
        ROLE_ELB_TAG
    };
    let rank = |s: &SubnetView| {
        (
            !s.tags.contains_key(role),
            !cluster.has_cluster_tag(&s.tags),
            s.id.clone(),
        )
    };
    let mut by_zone: BTreeMap<&str, &SubnetView> = BTreeMap::new();
    for subnet in &network.subnets {
        let usable =
            cluster.has_cluster_tag(&subnet.tags) || ClusterTagging::has_no_cluster_tag(&subnet.tags);
        if !usable || subnet.zone.is_empty() || subnet.id.is_empty() {
            continue;
        }
        if !internal && !is_public(&network.route_tables, &subnet.id)? {
            continue;
        }
        match by_zone.get(subnet.zone.as_str()) {
            Some(best) if rank(best) <= rank(subnet) => {}
            _ => {
                by_zone.insert(&subnet.zone, subnet);
            }
        }
    }
    Ok(by_zone
        .into_iter()
        .filter(|(zone, _)| {
            network
                .zone_types
                .get(*zone)
                .is_none_or(|t| t == "availability-zone")
        })
        .map(|(_, s)| s.id.clone())
        .collect())
}

/// `aws-load-balancer-subnets`: each entry a subnet ID (`subnet-…`) or a Name tag of a subnet in
/// the VPC, each found exactly once; kept in the annotation's order (upstream uses AWS's
/// answer order, which decides how Elastic IPs pair with subnets).
pub fn resolve_named(network: &Network, named: &[String], annotation: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in named {
        let found: Vec<&SubnetView> = if entry.starts_with("subnet-") {
            network.subnets.iter().filter(|s| &s.id == entry).collect()
        } else {
            network
                .subnets
                .iter()
                .filter(|s| s.tags.get("Name") == Some(entry))
                .collect()
        };
        match found.as_slice() {
            [one] => out.push(one.id.clone()),
            [] => {
                return Err(ProviderError::InvalidArgument(format!(
                    "{annotation}: no subnet {entry:?} in VPC {}",
                    network.vpc_id
                )));
            }
            many => {
                return Err(ProviderError::InvalidArgument(format!(
                    "{annotation}: {} subnets in VPC {} are named {entry:?}",
                    many.len(),
                    network.vpc_id
                )));
            }
        }
    }
    Ok(out)
}

/// The CIDRs of subnets, by ID (health checks of an NLB come from its subnets).
pub fn cidrs_of(network: &Network, subnet_ids: &[String]) -> Result<Vec<ipnet::IpNet>> {
    subnet_ids
        .iter()
        .map(|id| {
            network
                .subnet(id)
                .and_then(|s| s.cidr.parse().ok())
                .ok_or_else(|| {
                    ProviderError::Internal(format!("subnet {id} is not in VPC {}", network.vpc_id))
                })
        })
        .collect()
}

impl AwsProvider {
    /// The VPC's subnets, route tables and zone types, read at most once per [`NETWORK_TTL`].
    pub(crate) async fn network(&self, vpc_id: &str) -> Result<Arc<Network>> {
        if let Some((at, network)) = self.caches.network.lock().expect("network cache").get(vpc_id)
            && at.elapsed() < NETWORK_TTL
        {
            return Ok(network.clone());
        }
        let vpc = || Filter::builder().name("vpc-id").values(vpc_id).build();
        let mut subnets = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .ec2
                .describe_subnets()
                .filters(vpc())
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| sdk_error("DescribeSubnets", &e))?;
            subnets.extend(out.subnets().iter().filter_map(|s| {
                Some(SubnetView {
                    id: s.subnet_id()?.to_owned(),
                    zone: s.availability_zone().unwrap_or_default().to_owned(),
                    cidr: s.cidr_block().unwrap_or_default().to_owned(),
                    tags: from_pairs(s.tags().iter().map(|t| (t.key(), t.value()))),
                })
            }));
            token = out.next_token().filter(|t| !t.is_empty()).map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        let mut route_tables = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .ec2
                .describe_route_tables()
                .filters(vpc())
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| sdk_error("DescribeRouteTables", &e))?;
            route_tables.extend(out.route_tables().iter().map(|t| {
                RouteTableView {
                    id: t.route_table_id().unwrap_or_default().to_owned(),
                    main: t.associations().iter().any(|a| a.main() == Some(true)),
                    subnets: t
                        .associations()
                        .iter()
                        .filter_map(|a| a.subnet_id().map(str::to_owned))
                        .collect(),
                    to_internet_gateway: t
                        .routes()
                        .iter()
                        .any(|r| r.gateway_id().is_some_and(|g| g.starts_with("igw"))),
                }
            }));
            token = out.next_token().filter(|t| !t.is_empty()).map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        let zones: BTreeSet<String> = subnets.iter().map(|s| s.zone.clone()).collect();
        let zone_types = self.zone_types(&zones).await?;
        let network = Arc::new(Network {
            vpc_id: vpc_id.to_owned(),
            subnets,
            route_tables,
            zone_types,
        });
        self.caches
            .network
            .lock()
            .expect("network cache")
            .insert(vpc_id.to_owned(), (Instant::now(), network.clone()));
        Ok(network)
    }

    /// Zone types, described once for the process's life (as upstream's zone cache; [`crate::zones`]).
    async fn zone_types(&self, zones: &BTreeSet<String>) -> Result<BTreeMap<String, String>> {
        Ok(self
            .zones(zones)
            .await?
            .into_iter()
            .filter(|(_, z)| !z.kind.is_empty())
            .map(|(name, z)| (name, z.kind))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, zone: &str, tags: &[(&str, &str)]) -> SubnetView {
        SubnetView {
            id: id.into(),
            zone: zone.into(),
            cidr: "10.0.0.0/24".into(),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn table(id: &str, main: bool, subnets: &[&str], igw: bool) -> RouteTableView {
        RouteTableView {
            id: id.into(),
            main,
            subnets: subnets.iter().map(|s| (*s).to_owned()).collect(),
            to_internet_gateway: igw,
        }
    }

    fn blue() -> ClusterTagging {
        ClusterTagging::new("blue", false).unwrap()
    }

    const MINE: (&str, &str) = ("kubernetes.io/cluster/blue", "owned");
    const THEIRS: (&str, &str) = ("kubernetes.io/cluster/green", "owned");
    const ELB: (&str, &str) = ("kubernetes.io/role/elb", "1");
    const INTERNAL_ELB: (&str, &str) = ("kubernetes.io/role/internal-elb", "");

    fn network(subnets: Vec<SubnetView>, tables: Vec<RouteTableView>) -> Network {
        Network {
            vpc_id: "vpc-1".into(),
            subnets,
            route_tables: tables,
            zone_types: BTreeMap::new(),
        }
    }

    #[test]
    fn public_means_a_route_to_an_internet_gateway_in_the_subnets_table_or_the_main_one() {
        let tables = vec![
            table("rtb-main", true, &[], false),
            table("rtb-public", false, &["subnet-pub"], true),
        ];
        assert_eq!(is_public(&tables, "subnet-pub"), Ok(true));
        assert_eq!(is_public(&tables, "subnet-other"), Ok(false));
        let main_public = vec![
            table("rtb-main", true, &[], true),
            table("rtb-priv", false, &["subnet-priv"], false),
        ];
        assert_eq!(is_public(&main_public, "subnet-x"), Ok(true));
        assert_eq!(is_public(&main_public, "subnet-priv"), Ok(false));
        assert!(is_public(&[table("rtb-x", false, &["subnet-y"], true)], "subnet-z").is_err());
    }

    #[test]
    fn discovery_rules_one_row_each() {
        let public = |subnets: &[&str]| {
            vec![
                table("rtb-main", true, &[], false),
                table("rtb-pub", false, subnets, true),
            ]
        };
        type Row = (
            &'static str,
            Vec<SubnetView>,
            Vec<RouteTableView>,
            bool,
            Vec<&'static str>,
        );
        let rows: Vec<Row> = vec![
            (
                "an upstream-shaped VPC: public subnets tagged only with the role, a private one",
                vec![
                    subnet("subnet-pub-a", "us-east-1a", &[ELB]),
                    subnet("subnet-pub-b", "us-east-1b", &[ELB]),
                    subnet("subnet-priv-a", "us-east-1a", &[INTERNAL_ELB]),
                ],
                public(&["subnet-pub-a", "subnet-pub-b"]),
                false,
                vec!["subnet-pub-a", "subnet-pub-b"],
            ),
            (
                "internal load balancers take private subnets, the internal role tag first",
                vec![
                    subnet("subnet-pub-a", "us-east-1a", &[ELB]),
                    subnet("subnet-priv-a", "us-east-1a", &[INTERNAL_ELB]),
                ],
                public(&["subnet-pub-a"]),
                true,
                vec!["subnet-priv-a"],
            ),
            (
                "internal load balancers also take public subnets",
                vec![subnet("subnet-pub-a", "us-east-1a", &[ELB])],
                public(&["subnet-pub-a"]),
                true,
                vec!["subnet-pub-a"],
            ),
            (
                "internet-facing load balancers never take private subnets",
                vec![subnet("subnet-priv-a", "us-east-1a", &[ELB, MINE])],
                public(&[]),
                false,
                vec![],
            ),
            (
                "another cluster's subnets are not used",
                vec![
                    subnet("subnet-a", "us-east-1a", &[THEIRS, ELB]),
                    subnet("subnet-b", "us-east-1a", &[]),
                ],
                public(&["subnet-a", "subnet-b"]),
                false,
                vec!["subnet-b"],
            ),
            (
                "a subnet shared by two clusters is used",
                vec![subnet(
                    "subnet-a",
                    "us-east-1a",
                    &[THEIRS, ("kubernetes.io/cluster/blue", "shared")],
                )],
                public(&["subnet-a"]),
                false,
                vec!["subnet-a"],
            ),
            (
                "the role tag's presence wins, whatever its value",
                vec![
                    subnet("subnet-a", "us-east-1a", &[MINE]),
                    subnet("subnet-b", "us-east-1a", &[("kubernetes.io/role/elb", "")]),
                ],
                public(&["subnet-a", "subnet-b"]),
                false,
                vec!["subnet-b"],
            ),
            (
                "then the cluster tag",
                vec![
                    subnet("subnet-a", "us-east-1a", &[]),
                    subnet("subnet-b", "us-east-1a", &[MINE]),
                ],
                public(&["subnet-a", "subnet-b"]),
                false,
                vec!["subnet-b"],
            ),
            (
                "then the smallest ID",
                vec![
                    subnet("subnet-c", "us-east-1a", &[]),
                    subnet("subnet-b", "us-east-1a", &[]),
                ],
                public(&["subnet-c", "subnet-b"]),
                false,
                vec!["subnet-b"],
            ),
            (
                "subnets without a zone are skipped; zones come sorted",
                vec![
                    subnet("subnet-z", "us-east-1c", &[]),
                    subnet("subnet-y", "", &[]),
                    subnet("subnet-x", "us-east-1a", &[]),
                ],
                public(&["subnet-z", "subnet-y", "subnet-x"]),
                false,
                vec!["subnet-x", "subnet-z"],
            ),
        ];
        for (what, subnets, tables, internal, want) in rows {
            let got = discover(&network(subnets, tables), &blue(), internal).unwrap();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn local_and_wavelength_zones_are_dropped() {
        let mut net = network(
            vec![
                subnet("subnet-a", "us-east-1a", &[]),
                subnet("subnet-l", "us-east-1-bos-1a", &[]),
                subnet("subnet-w", "us-east-1-wl1-bos-wlz-1", &[]),
                subnet("subnet-u", "us-east-1-unknown", &[]),
            ],
            vec![table("rtb-main", true, &[], true)],
        );
        net.zone_types = BTreeMap::from([
            ("us-east-1a".to_owned(), "availability-zone".to_owned()),
            ("us-east-1-bos-1a".to_owned(), "local-zone".to_owned()),
            ("us-east-1-wl1-bos-wlz-1".to_owned(), "wavelength-zone".to_owned()),
        ]);
        // A zone the zone list does not know is kept, as upstream keeps it.
        assert_eq!(
            discover(&net, &blue(), false).unwrap(),
            vec!["subnet-u", "subnet-a"]
        );
    }

    #[test]
    fn named_subnets_resolve_by_id_or_name_in_the_annotations_order() {
        let net = network(
            vec![
                subnet("subnet-a", "us-east-1a", &[("Name", "public-a")]),
                subnet("subnet-b", "us-east-1b", &[("Name", "public-b")]),
                subnet("subnet-c", "us-east-1c", &[("Name", "twin")]),
                subnet("subnet-d", "us-east-1d", &[("Name", "twin")]),
            ],
            vec![],
        );
        let named = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            resolve_named(&net, &named(&["public-b", "subnet-a"]), "ann").unwrap(),
            vec!["subnet-b", "subnet-a"]
        );
        for bad in [&["subnet-zz"][..], &["nope"], &["twin"]] {
            let err = resolve_named(&net, &named(bad), "the-annotation").unwrap_err();
            assert!(err.to_string().contains("the-annotation"), "{bad:?}: {err}");
        }
    }
}
