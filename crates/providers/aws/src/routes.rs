//! Pod-CIDR routes in a VPC route table, to instances.
//!
//! Routes cannot be tagged, so ownership is the route table's: the configured table, or the one
//! table tagged `kubernetes.io/cluster/<cluster>` (as cloud-provider-aws), and in both cases the
//! table must carry that tag. The cluster's routes are the table's routes to instances, except
//! routes to instances tagged for another cluster (a shared table).
//!
//! A listed route names its instance's private DNS name as the target node and carries the
//! instance's provider ID: the route controller matches it to the Node with that provider ID,
//! as cloud-provider-aws names a route's target by the Node whose providerID holds the instance
//! ID, so Nodes named otherwise (kops, kubelet `--hostname-override`) keep their routes. A
//! route's target is found by the Node's provider ID when the create carries one (as upstream,
//! by instance ID, never by name then), else by its name (the private DNS name, or an instance
//! ID), else by its internal IP.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_ec2::types::{AttributeBooleanValue, Filter, RouteState};
use provider::{AddressType, NodeRef, ProviderError, Result, Route, Routes};

use crate::{
    AwsProvider,
    errors::{code_of, done_or_already, sdk_error},
    instances::InstanceView,
    naming::provider_id,
    tags::ClusterTagging,
};

/// A route of a route table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteView {
    /// Destination (IPv4 or IPv6 CIDR).
    pub cidr: String,
    /// Target instance, for instance routes.
    pub instance_id: Option<String>,
    /// Another kind of target (gateway, NAT...), for the error message of a CIDR clash.
    pub other_target: Option<String>,
    /// `active` or `blackhole`.
    pub state: String,
}

/// A route table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteTableView {
    /// ID.
    pub id: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Routes.
    pub routes: Vec<RouteView>,
}

impl RouteTableView {
    fn from_sdk(t: &aws_sdk_ec2::types::RouteTable) -> Self {
        Self {
            id: t.route_table_id().unwrap_or_default().to_owned(),
            tags: t
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_owned(), t.value().unwrap_or_default().to_owned())))
                .collect(),
            routes: t
                .routes()
                .iter()
                .filter_map(|r| {
                    let cidr = r
                        .destination_cidr_block()
                        .or(r.destination_ipv6_cidr_block())?
                        .to_owned();
                    Some(RouteView {
                        cidr,
                        instance_id: r.instance_id().map(str::to_owned),
                        other_target: r
                            .gateway_id()
                            .or(r.nat_gateway_id())
                            .or(r.network_interface_id())
                            .or(r.transit_gateway_id())
                            .or(r.vpc_peering_connection_id())
                            .map(str::to_owned),
                        state: r.state().map(RouteState::as_str).unwrap_or("active").to_owned(),
                    })
                })
                .collect(),
        }
    }

    /// The route to `cidr`.
    pub fn route_to(&self, cidr: &str) -> Option<&RouteView> {
        self.routes.iter().find(|r| r.cidr == cidr)
    }
}

/// The provider's name of a route.
pub fn route_name(cluster: &str, cidr: &str) -> String {
    format!("{cluster}-{cidr}")
}

/// The cluster's routes in `table`: routes to instances not tagged for another cluster. A route
/// whose instance is gone or terminated, or that AWS marks `blackhole`, is a blackhole.
pub fn cluster_routes(
    tagging: &ClusterTagging,
    table: &RouteTableView,
    instances: &HashMap<String, InstanceView>,
) -> Vec<Route> {
    table
        .routes
        .iter()
        .filter_map(|r| {
            let id = r.instance_id.as_ref()?;
            let instance = instances.get(id);
            if instance.is_some_and(|i| tagging.belongs_to_other_cluster(&i.tags)) {
                return None;
            }
            Some(Route {
                name: route_name(&tagging.id, &r.cidr),
                target_node: instance.and_then(|i| i.private_dns.clone()).unwrap_or_default(),
                destination_cidr: r.cidr.clone(),
                blackhole: r.state == "blackhole" || instance.is_none_or(|i| !i.exists()),
                target_node_addresses: Vec::new(),
                target_provider_id: instance
                    .filter(|i| !i.zone.is_empty())
                    .map(|i| provider_id(&i.zone, &i.id))
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// What to do to route `cidr` to `instance_id` given the table's current route to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    /// The route is there.
    Nothing,
    /// Create it.
    Create,
    /// Point the existing instance route (blackhole, or another node's) at the instance.
    Replace,
}

/// Decides how to route `cidr` to `instance_id`. An instance of another cluster, or a route of
/// another kind (gateway, NAT...) on the CIDR, is never touched.
pub fn route_action(
    tagging: &ClusterTagging,
    current: Option<&RouteView>,
    instance_id: &str,
    instances: &HashMap<String, InstanceView>,
) -> Result<RouteAction> {
    let Some(route) = current else {
        return Ok(RouteAction::Create);
    };
    match &route.instance_id {
        Some(id) if id == instance_id && route.state != "blackhole" => Ok(RouteAction::Nothing),
        Some(id)
            if instances
                .get(id)
                .is_some_and(|i| tagging.belongs_to_other_cluster(&i.tags)) =>
        {
            Err(ProviderError::InvalidArgument(format!(
                "{} is routed to {id}, an instance of another cluster",
                route.cidr
            )))
        }
        Some(_) => Ok(RouteAction::Replace),
        None => Err(ProviderError::InvalidArgument(format!(
            "{} is already routed to {}",
            route.cidr,
            route.other_target.as_deref().unwrap_or("a non-instance target")
        ))),
    }
}

fn is_v6(cidr: &str) -> bool {
    cidr.contains(':')
}

impl AwsProvider {
    /// The cluster's route table (see the module docs).
    async fn route_table(&self, cluster: &str) -> Result<RouteTableView> {
        let tagging = self.tagging(cluster)?;
        let tag = tagging.tag_key();
        let request = match &self.config.route_table_id {
            Some(id) => self.ec2.describe_route_tables().route_table_ids(id),
            None => {
                let mut r = self
                    .ec2
                    .describe_route_tables()
                    .filters(Filter::builder().name("tag-key").values(&tag).build());
                if let Some(vpc) = &self.config.vpc_id {
                    r = r.filters(Filter::builder().name("vpc-id").values(vpc).build());
                }
                r
            }
        };
        let tables: Vec<RouteTableView> = match request.send().await {
            Ok(resp) => resp.route_tables().iter().map(RouteTableView::from_sdk).collect(),
            Err(e) if code_of(&e) == Some("InvalidRouteTableID.NotFound") => Vec::new(),
            Err(e) => return Err(sdk_error("DescribeRouteTables", &e)),
        };
        let table = match (tables.as_slice(), &self.config.route_table_id) {
            ([one], _) => one.clone(),
            ([], Some(id)) => {
                return Err(ProviderError::InvalidArgument(format!(
                    "route table {id} does not exist"
                )));
            }
            ([], None) => {
                return Err(ProviderError::InvalidArgument(format!(
                    "no route table is tagged {tag}: tag the cluster's route table or configure its ID"
                )));
            }
            (many, _) => {
                return Err(ProviderError::InvalidArgument(format!(
                    "{} route tables are tagged {tag}; configure the one to use",
                    many.len()
                )));
            }
        };
        if !tagging.has_cluster_tag(&table.tags) {
            return Err(ProviderError::InvalidArgument(format!(
                "route table {} is not tagged {tag}; refusing to manage its routes",
                table.id
            )));
        }
        Ok(table)
    }

    /// Instances that `routes` point at (found ones only).
    async fn route_instances<'a>(
        &self,
        routes: impl IntoIterator<Item = &'a RouteView>,
    ) -> Result<HashMap<String, InstanceView>> {
        let ids: Vec<String> = routes.into_iter().filter_map(|r| r.instance_id.clone()).collect();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(self.describe_instance_ids(&ids).await?.found)
    }

    /// The instance of a route's target node: by its provider ID, else by name, else by an
    /// internal IP.
    async fn route_target(&self, route: &Route) -> Result<InstanceView> {
        let node = NodeRef::new(route.target_node.clone(), route.target_provider_id.clone());
        let found = self
            .resolve_nodes(std::slice::from_ref(&node))
            .await?
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(ProviderError::Internal("empty lookup".into())));
        match found {
            // A provider ID is definite: its instance, or none.
            Err(ProviderError::InstanceNotFound(why)) if node.provider_id.is_empty() => {
                let ips: Vec<String> = route
                    .target_node_addresses
                    .iter()
                    .filter(|a| a.kind == AddressType::InternalIP)
                    .map(|a| a.address.clone())
                    .collect();
                if ips.is_empty() {
                    return Err(ProviderError::InstanceNotFound(why));
                }
                let live: Vec<InstanceView> = self
                    .describe_instances_filtered("private-ip-address", &ips)
                    .await?
                    .into_iter()
                    .filter(InstanceView::exists)
                    .collect();
                match live.as_slice() {
                    [one] => Ok(one.clone()),
                    _ => Err(ProviderError::InstanceNotFound(why)),
                }
            }
            Ok(i) if !i.exists() => Err(ProviderError::InstanceNotFound(format!(
                "node {}: instance {} is terminated",
                route.target_node, i.id
            ))),
            other => other,
        }
    }
}

#[async_trait]
impl Routes for AwsProvider {
    async fn list_routes(&self, cluster: &str) -> Result<Vec<Route>> {
        let table = self.route_table(cluster).await?;
        let instances = self.route_instances(&table.routes).await?;
        Ok(cluster_routes(&self.tagging(cluster)?, &table, &instances))
    }

    async fn create_route(&self, cluster: &str, _name_hint: &str, route: &Route) -> Result<()> {
        let table = self.route_table(cluster).await?;
        let instance = self.route_target(route).await?;
        if self.tagging(cluster)?.belongs_to_other_cluster(&instance.tags) {
            return Err(ProviderError::InvalidArgument(format!(
                "node {} is instance {}, tagged for another cluster",
                route.target_node, instance.id
            )));
        }
        // Pod traffic is addressed to pod IPs, not the instance's: EC2 must not drop it.
        if instance.source_dest_check != Some(false)
            && provider::dry_run::intercept(
                crate::naming::PROVIDER_NAME,
                "ModifyInstanceAttribute",
                &instance.id,
                || "SourceDestCheck=false".to_owned(),
            )
        {
            self.ec2
                .modify_instance_attribute()
                .instance_id(&instance.id)
                .source_dest_check(AttributeBooleanValue::builder().value(false).build())
                .send()
                .await
                .map_err(|e| sdk_error("ModifyInstanceAttribute", &e))?;
        }
        let cidr = &route.destination_cidr;
        // Only the instance the CIDR is routed to now matters (one lookup, not the whole table).
        let instances = self
            .route_instances(
                table
                    .route_to(cidr)
                    .filter(|r| r.instance_id.as_ref() != Some(&instance.id)),
            )
            .await?;
        let action = route_action(
            &self.tagging(cluster)?,
            table.route_to(cidr),
            &instance.id,
            &instances,
        )?;
        let call = match action {
            RouteAction::Nothing => return Ok(()),
            RouteAction::Create => "CreateRoute",
            RouteAction::Replace => "ReplaceRoute",
        };
        if !provider::dry_run::intercept(crate::naming::PROVIDER_NAME, call, &table.id, || {
            format!("{cidr} -> {}", instance.id)
        }) {
            return Ok(());
        }
        match action {
            RouteAction::Nothing => Ok(()),
            RouteAction::Create => {
                let mut request = self
                    .ec2
                    .create_route()
                    .route_table_id(&table.id)
                    .instance_id(&instance.id);
                request = if is_v6(cidr) {
                    request.destination_ipv6_cidr_block(cidr)
                } else {
                    request.destination_cidr_block(cidr)
                };
                match request.send().await {
                    Ok(_) => Ok(()),
                    Err(e) if code_of(&e) == Some("RouteAlreadyExists") => {
                        // Created meanwhile (a retry): fine if it is ours and right.
                        let table = self.route_table(cluster).await?;
                        match route_action(
                            &self.tagging(cluster)?,
                            table.route_to(cidr),
                            &instance.id,
                            &instances,
                        )? {
                            RouteAction::Nothing => Ok(()),
                            _ => Err(sdk_error("CreateRoute", &e)),
                        }
                    }
                    Err(e) => Err(sdk_error("CreateRoute", &e)),
                }
            }
            RouteAction::Replace => {
                let mut request = self
                    .ec2
                    .replace_route()
                    .route_table_id(&table.id)
                    .instance_id(&instance.id);
                request = if is_v6(cidr) {
                    request.destination_ipv6_cidr_block(cidr)
                } else {
                    request.destination_cidr_block(cidr)
                };
                request.send().await.map_err(|e| sdk_error("ReplaceRoute", &e))?;
                Ok(())
            }
        }
    }

    async fn delete_route(&self, cluster: &str, route: &Route) -> Result<()> {
        let table = self.route_table(cluster).await?;
        let cidr = &route.destination_cidr;
        let Some(current) = table.route_to(cidr) else {
            return Ok(());
        };
        let instances = self.route_instances([current]).await?;
        let only = RouteTableView {
            routes: vec![current.clone()],
            ..RouteTableView::default()
        };
        if cluster_routes(&self.tagging(cluster)?, &only, &instances).is_empty() {
            return Err(ProviderError::InvalidArgument(format!(
                "the route to {cidr} ({}) is not one of the cluster's",
                current
                    .instance_id
                    .as_deref()
                    .or(current.other_target.as_deref())
                    .unwrap_or("unknown target")
            )));
        }
        if !provider::dry_run::intercept(crate::naming::PROVIDER_NAME, "DeleteRoute", &table.id, || {
            cidr.clone()
        }) {
            return Ok(());
        }
        let mut request = self.ec2.delete_route().route_table_id(&table.id);
        request = if is_v6(cidr) {
            request.destination_ipv6_cidr_block(cidr)
        } else {
            request.destination_cidr_block(cidr)
        };
        done_or_already("DeleteRoute", request.send().await, &["InvalidRoute.NotFound"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(id: &str, state: &str, cluster: Option<&str>) -> InstanceView {
        InstanceView {
            id: id.into(),
            state: state.into(),
            private_dns: Some(format!("{id}.internal")),
            zone: "eu-west-1a".into(),
            tags: cluster
                .map(|c| BTreeMap::from([(format!("kubernetes.io/cluster/{c}"), "owned".to_owned())]))
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    fn route(cidr: &str, instance: Option<&str>, state: &str) -> RouteView {
        RouteView {
            cidr: cidr.into(),
            instance_id: instance.map(str::to_owned),
            other_target: if instance.is_none() {
                Some("igw-1".into())
            } else {
                None
            },
            state: state.into(),
        }
    }

    fn instances(list: &[InstanceView]) -> HashMap<String, InstanceView> {
        list.iter().map(|i| (i.id.clone(), i.clone())).collect()
    }

    #[test]
    fn the_cluster_sees_its_instance_routes_only() {
        let table = RouteTableView {
            id: "rtb-1".into(),
            tags: BTreeMap::new(),
            routes: vec![
                route("10.0.0.0/16", None, "active"),
                route("0.0.0.0/0", None, "active"),
                route("100.64.1.0/24", Some("i-a"), "active"),
                route("100.64.2.0/24", Some("i-b"), "blackhole"),
                route("100.64.3.0/24", Some("i-gone"), "active"),
                route("100.64.4.0/24", Some("i-dead"), "active"),
                route("100.64.5.0/24", Some("i-other"), "active"),
                route("100.64.6.0/24", Some("i-untagged"), "active"),
            ],
        };
        let known = instances(&[
            instance("i-a", "running", Some("blue")),
            instance("i-b", "stopped", Some("blue")),
            instance("i-dead", "terminated", Some("blue")),
            instance("i-other", "running", Some("green")),
            instance("i-untagged", "running", None),
        ]);
        let got: Vec<(String, String, String, bool)> =
            cluster_routes(&ClusterTagging::new("blue", false).unwrap(), &table, &known)
                .into_iter()
                .map(|r| {
                    (
                        r.destination_cidr,
                        r.target_node,
                        r.target_provider_id,
                        r.blackhole,
                    )
                })
                .collect();
        let id = |i: &str| format!("aws:///eu-west-1a/{i}");
        assert_eq!(
            got,
            vec![
                ("100.64.1.0/24".into(), "i-a.internal".into(), id("i-a"), false),
                ("100.64.2.0/24".into(), "i-b.internal".into(), id("i-b"), true),
                ("100.64.3.0/24".into(), String::new(), String::new(), true),
                (
                    "100.64.4.0/24".into(),
                    "i-dead.internal".into(),
                    id("i-dead"),
                    true
                ),
                (
                    "100.64.6.0/24".into(),
                    "i-untagged.internal".into(),
                    id("i-untagged"),
                    false
                ),
            ]
        );
        assert_eq!(route_name("blue", "100.64.1.0/24"), "blue-100.64.1.0/24");
    }

    #[test]
    fn creating_a_route_touches_only_the_clusters() {
        let known = instances(&[
            instance("i-a", "running", Some("blue")),
            instance("i-other", "running", Some("green")),
        ]);
        let cases: [(Option<RouteView>, std::result::Result<RouteAction, &str>); 6] = [
            (None, Ok(RouteAction::Create)),
            (Some(route("c", Some("i-a"), "active")), Ok(RouteAction::Nothing)),
            (
                Some(route("c", Some("i-a"), "blackhole")),
                Ok(RouteAction::Replace),
            ),
            (
                Some(route("c", Some("i-gone"), "blackhole")),
                Ok(RouteAction::Replace),
            ),
            (
                Some(route("c", Some("i-other"), "active")),
                Err("another cluster"),
            ),
            (Some(route("c", None, "active")), Err("igw-1")),
        ];
        for (current, want) in cases {
            let got = route_action(
                &ClusterTagging::new("blue", false).unwrap(),
                current.as_ref(),
                "i-a",
                &known,
            );
            match want {
                Ok(action) => assert_eq!(got, Ok(action), "{current:?}"),
                Err(what) => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(what)),
                    "{current:?}: {got:?}"
                ),
            }
        }
    }
}
