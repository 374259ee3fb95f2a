//! Pod-CIDR routes as Neutron router extra routes, owned through router tags ([`plan`] has the
//! decisions; [`OpenStackRoutes`] makes the calls around them).
//!
//! # Steps and their order
//! A create writes the ownership tag, then the route, then the allowed address pair; a delete
//! removes the route, then the pair, then the tag. So a route on the router is listed only
//! once it is complete enough to be deleted, a crash after any step leaves a state that a retry
//! (or the next [`Routes::list_routes`]) finishes, and no step duplicates anything:
//! - tag without route (a create stopped after its first step, or a delete after its second):
//!   never listed; the next list finishes the deletion (pair, then tag), a create finishes the
//!   creation.
//! - route and tag without pair: listed; a create adds the pair, a delete removes all.
//!
//! Every write goes through [`provider::dry_run::intercept`] first; reads are made as usual, so
//! a dry run records exactly the writes the call would make.
//!
//! # Calls (with `extraroute-atomic`, the usual case)
//! - list: steady state 2 Neutron calls: the router GET, and when the cluster owns routes one
//!   port list for all their nexthops (`fixed_ips=ip_address=A&fixed_ips=ip_address=B…`, which
//!   Neutron ORs; one more per [`ADDRESSES_PER_PORT_QUERY`] nexthops, one more for the router's
//!   networks when a nexthop is held on two networks). Cold (a server name not cached): one
//!   Nova call more, `GET /servers/{id}` for one unknown server, else the project's server list.
//!   A cluster with no routes: the router GET alone. Stale tags cost calls only when present.
//! - create: router GET and the nexthop's port GET, then only the missing writes: tag PUT,
//!   `add_extraroutes` PUT, port PUT (5 calls cold, 2 reads when all is there).
//! - delete: router GET, then only what is there: `remove_extraroutes` PUT, port GET and PUT,
//!   tag DELETE (5 calls; 1 when nothing of ours is there).
//!
//! Without `extraroute-atomic` a route write is a router GET and a whole-list PUT with
//! `If-Match` (more on a 412); without `revision-if-match` too, the list is written as OCCM
//! writes it, serialized only within this process.

pub mod plan;

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use provider::{ProviderError, Route, Routes, dry_run};

use crate::{
    client::{Client, error::PRECONDITION_RETRY_AFTER},
    neutron::{
        self,
        ports::{self, Port},
        routers::{self, ExtraRoute, Router},
    },
    nodes::provider_id::{PROVIDER_NAME, ProviderIdScheme},
    nova,
};
use plan::NexthopOwner;

/// How many times a conditional write (`If-Match`) is tried before the call answers
/// [`ProviderError::RetryAfter`].
pub const WRITE_ATTEMPTS: usize = 5;
/// Nexthops per port list (`fixed_ips=ip_address=…` is about 35 characters in the URL; Neutron's
/// eventlet server refuses request lines over 8 KiB).
pub const ADDRESSES_PER_PORT_QUERY: usize = 100;
/// The most pages of Nova's server list read for names (1000 servers a page).
const SERVER_PAGES: usize = 50;

/// What Neutron offers for routes, from its extension list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `extraroute-atomic`: `add_extraroutes` / `remove_extraroutes`. Without it the whole route
    /// list is written (with `If-Match` when [`Features::if_match`]).
    pub atomic: bool,
    /// `allowed-address-pairs`: a node's port gets a pair for its pod CIDR (as OCCM).
    pub allowed_address_pairs: bool,
    /// `revision-if-match`: full-list and pair writes carry `If-Match: revision_number=N`.
    pub if_match: bool,
}

impl Features {
    /// The features from Neutron's extension aliases.
    ///
    /// # Errors
    /// [`ProviderError::NotImplemented`] when Neutron has no extra routes (`extraroute` nor
    /// `extraroute-atomic`: OCCM then has no Routes either) or no tags on routers
    /// (`standard-attr-tag`, or the older `tag`), which the ownership of routes needs.
    pub fn from_aliases<'a>(aliases: impl IntoIterator<Item = &'a str>) -> Result<Features, ProviderError> {
        let aliases: HashSet<&str> = aliases.into_iter().collect();
        let has = |a: &str| aliases.contains(a);
        if !has("extraroute") && !has("extraroute-atomic") {
            return Err(ProviderError::NotImplemented(
                "Neutron has neither the extraroute nor the extraroute-atomic extension: no routes".into(),
            ));
        }
        if !has("standard-attr-tag") && !has("tag") {
            return Err(ProviderError::NotImplemented(
                "Neutron has no tags on routers (extension standard-attr-tag): ownership of routes needs router tags, so that clusters sharing a router never delete each other's routes"
                    .into(),
            ));
        }
        Ok(Features {
            atomic: has("extraroute-atomic"),
            allowed_address_pairs: has("allowed-address-pairs"),
            if_match: has("revision-if-match"),
        })
    }
}

/// A conditional write about to be sent (test support, see [`OpenStackRoutes::before_conditional_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionalWrite {
    /// The router's whole route list (no `extraroute-atomic`).
    RouterRoutes,
    /// A port's allowed address pairs.
    PortPairs,
}

type Hook = Arc<dyn Fn(ConditionalWrite) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// `provider::Routes` on one Neutron router (`[Route] router-id`).
pub struct OpenStackRoutes {
    client: Client,
    router_id: String,
    scheme: ProviderIdScheme,
    features: Features,
    /// Server ID → name, for the listed routes' target nodes.
    names: Mutex<HashMap<String, String>>,
    /// Ownership tags of creates under way in this process: not stale, whatever a list sees.
    creating: Mutex<HashSet<String>>,
    /// Full-list writes of this process, one at a time (others are kept off by `If-Match`).
    full_list: tokio::sync::Mutex<()>,
    before_write: Option<Hook>,
}

impl fmt::Debug for OpenStackRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenStackRoutes")
            .field("router_id", &self.router_id)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

/// Which ports count for a nexthop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// Servers' ports only (`compute:*`): a listed route's target.
    Server,
    /// Any port but Neutron's own (`network:*`): where a route's allowed address pair goes.
    NotNeutrons,
}

impl PortKind {
    fn accepts(self, port: &Port) -> bool {
        match self {
            PortKind::Server => port.is_servers(),
            PortKind::NotNeutrons => !port.device_owner.starts_with("network:"),
        }
    }
}

/// The port holding each address, among `ports` of `kind`. An address held by more than one
/// such port (overlapping subnets on two networks of the project) is settled by the router's
/// networks: `None` when they are needed and not given.
pub fn ports_by_address(
    ports: &[Port],
    addresses: &BTreeSet<String>,
    kind: PortKind,
    router_networks: Option<&HashSet<String>>,
) -> Option<HashMap<String, Port>> {
    let mut found = HashMap::new();
    for address in addresses {
        let mut holders = ports.iter().filter(|p| {
            kind.accepts(p)
                && p.fixed_ips.iter().any(|ip| &ip.ip_address == address)
                && router_networks.is_none_or(|n| n.contains(&p.network_id))
        });
        let Some(first) = holders.next() else {
            continue;
        };
        if router_networks.is_none() && holders.any(|p| p.id != first.id) {
            return None;
        }
        found.insert(address.clone(), first.clone());
    }
    Some(found)
}

/// Removes the tag from the set of creates under way when the create ends, however it ends.
struct Creating<'a> {
    set: &'a Mutex<HashSet<String>>,
    tag: String,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        lock(self.set).remove(&self.tag);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl OpenStackRoutes {
    /// Learns Neutron's extensions (one `GET /extensions`) and checks the router exists (one
    /// router GET).
    ///
    /// # Errors
    /// See [`Features::from_aliases`]; a router Neutron does not know (or the project cannot
    /// see) is an [`ProviderError::InvalidArgument`] naming the router-id.
    pub async fn discover(
        client: Client,
        router_id: String,
        scheme: ProviderIdScheme,
    ) -> Result<Self, ProviderError> {
        if router_id.trim().is_empty() {
            return Err(ProviderError::InvalidArgument(
                "[Route] router-id is empty: routes need the router that carries them".into(),
            ));
        }
        let aliases = neutron::extension_aliases(&client).await?;
        let features = Features::from_aliases(aliases.iter().map(String::as_str))?;
        let routes = OpenStackRoutes {
            client,
            router_id,
            scheme,
            features,
            names: Mutex::default(),
            creating: Mutex::default(),
            full_list: tokio::sync::Mutex::new(()),
            before_write: None,
        };
        match routes.router().await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                return Err(ProviderError::InvalidArgument(format!(
                    "[Route] router-id {:?}: Neutron has no such router, or the project cannot see it ({e})",
                    routes.router_id
                )));
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(router = %routes.router_id, features = ?routes.features, "OpenStack routes on the router's extra routes");
        if !features.atomic && !features.if_match {
            tracing::warn!(router = %routes.router_id, "Neutron has neither extraroute-atomic nor revision-if-match: route list writes can lose a concurrent writer's change (as OCCM's)");
        }
        Ok(routes)
    }

    /// The router's ID.
    pub fn router_id(&self) -> &str {
        &self.router_id
    }

    /// What Neutron offers.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Writes the whole route list (with `If-Match`) even when Neutron has `extraroute-atomic`:
    /// the path of clouds without it, to test it on one that has it.
    pub fn with_full_list_writes(mut self) -> Self {
        self.features.atomic = false;
        self
    }

    /// Test support: `hook` runs right before each conditional write is sent (after the read it
    /// is based on), so a test can change the object in between and see the `If-Match` retry.
    #[doc(hidden)]
    pub fn before_conditional_write<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(ConditionalWrite) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.before_write = Some(Arc::new(move |w| Box::pin(hook(w))));
        self
    }

    async fn router(&self) -> Result<Router, crate::client::ApiError> {
        routers::get(&self.client, &self.router_id).await
    }

    /// The port of `kind` holding each address, in as few port lists as the addresses allow (one
    /// per [`ADDRESSES_PER_PORT_QUERY`]), plus one for the router's networks when an address is
    /// held on two networks.
    async fn ports_for(
        &self,
        addresses: &BTreeSet<String>,
        kind: PortKind,
    ) -> Result<HashMap<String, Port>, ProviderError> {
        if addresses.is_empty() {
            return Ok(HashMap::new());
        }
        let list: Vec<&String> = addresses.iter().collect();
        let mut ports = Vec::new();
        for chunk in list.chunks(ADDRESSES_PER_PORT_QUERY) {
            ports.extend(ports::holding(&self.client, chunk).await?);
        }
        if let Some(found) = ports_by_address(&ports, addresses, kind, None) {
            return Ok(found);
        }
        let networks = self.router_networks().await?;
        Ok(ports_by_address(&ports, addresses, kind, Some(&networks)).unwrap_or_default())
    }

    /// The networks the router has ports on (interfaces and gateway).
    async fn router_networks(&self) -> Result<HashSet<String>, ProviderError> {
        let ports = ports::of_device_once(&self.client, &self.router_id).await?;
        Ok(ports.into_iter().map(|p| p.network_id).collect())
    }

    /// Names of the servers, from the cache, else from Nova in one call: `GET /servers/{id}`
    /// for one unknown server, else the project's server list (`GET /servers`, IDs and names,
    /// paged), which refreshes the whole cache. A server Nova does not have is left out.
    async fn server_names(&self, ids: &BTreeSet<String>) -> Result<HashMap<String, String>, ProviderError> {
        let unknown: Vec<&String> = {
            let names = lock(&self.names);
            ids.iter().filter(|id| !names.contains_key(*id)).collect()
        };
        match unknown.as_slice() {
            [] => {}
            [id] => {
                if let Some(server) = nova::server_v21(&self.client, id).await? {
                    lock(&self.names).insert(server.id, server.name);
                }
            }
            _ => {
                let servers = nova::servers(&self.client, SERVER_PAGES).await?;
                *lock(&self.names) = servers.into_iter().map(|s| (s.id, s.name)).collect();
            }
        }
        let names = lock(&self.names);
        Ok(ids
            .iter()
            .filter_map(|id| names.get(id).map(|n| (id.clone(), n.clone())))
            .collect())
    }

    /// Adds the ownership tag (idempotent: Neutron answers 201 for a tag it has).
    async fn add_tag(&self, tag: &str) -> Result<(), ProviderError> {
        if !dry_run::intercept(PROVIDER_NAME, "router.add_tag", &self.router_id, || {
            tag.to_owned()
        }) {
            return Ok(());
        }
        routers::add_tag(&self.client, &self.router_id, tag).await?;
        Ok(())
    }

    /// Removes the ownership tag; one already gone is fine.
    async fn remove_tag(&self, tag: &str) -> Result<(), ProviderError> {
        if !dry_run::intercept(PROVIDER_NAME, "router.remove_tag", &self.router_id, || {
            tag.to_owned()
        }) {
            return Ok(());
        }
        match routers::remove_tag(&self.client, &self.router_id, tag).await {
            Err(e) if !e.is_not_found() => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Adds (`add`) or removes the route: `add_extraroutes` / `remove_extraroutes` (both
    /// idempotent in Neutron), or without `extraroute-atomic` the whole list with `If-Match`.
    async fn edit_route(&self, route: &ExtraRoute, add: bool) -> Result<(), ProviderError> {
        if !self.features.atomic {
            return self.edit_full_list(route, add).await;
        }
        let call = if add {
            "router.add_extraroutes"
        } else {
            "router.remove_extraroutes"
        };
        let body = routers::routes_body(std::slice::from_ref(route));
        if !dry_run::intercept(PROVIDER_NAME, call, &self.router_id, || body.to_string()) {
            return Ok(());
        }
        routers::edit_extraroutes(&self.client, &self.router_id, add, &body).await?;
        Ok(())
    }

    /// The whole route list, read, edited and written with `If-Match` on the revision read; a
    /// 412 (another writer came between) reads again, [`WRITE_ATTEMPTS`] times, then
    /// [`ProviderError::RetryAfter`]. One such write at a time in this process.
    async fn edit_full_list(&self, route: &ExtraRoute, add: bool) -> Result<(), ProviderError> {
        let _one_at_a_time = self.full_list.lock().await;
        for attempt in 1..=WRITE_ATTEMPTS {
            let router = self.router().await?;
            let edited = if add {
                plan::with_route(&router.routes, route)
            } else {
                plan::without_route(&router.routes, route)
            };
            let Some(routes) = edited else {
                return Ok(());
            };
            let body = routers::routes_body(&routes);
            if !dry_run::intercept(PROVIDER_NAME, "router.update_routes", &self.router_id, || {
                body.to_string()
            }) {
                return Ok(());
            }
            if let Some(hook) = &self.before_write {
                hook(ConditionalWrite::RouterRoutes).await;
            }
            let revision = self.features.if_match.then_some(router.revision_number);
            match routers::set_routes(&self.client, &self.router_id, &body, revision).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_precondition_failed() => {
                    tracing::debug!(router = %self.router_id, attempt, error = %e, "the router changed since it was read: reading it again");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ProviderError::RetryAfter {
            after: PRECONDITION_RETRY_AFTER,
            message: format!(
                "router {}: its route list changed under each of {WRITE_ATTEMPTS} writes",
                self.router_id
            ),
        })
    }

    /// Adds (`add`) or removes the pod CIDR's allowed address pair on the port, with `If-Match`
    /// on the port's revision, read again after a 412. A port without port security is left
    /// alone (as OCCM); a port gone meanwhile needs nothing.
    async fn edit_pair(&self, port: Port, cidr: &str, add: bool) -> Result<(), ProviderError> {
        let mut port = port;
        for attempt in 1..=WRITE_ATTEMPTS {
            if port.port_security_enabled != Some(true) {
                if add {
                    tracing::warn!(port = %port.id, cidr, "port security is off on the nexthop's port: no allowed address pair");
                }
                return Ok(());
            }
            let edited = if add {
                plan::pairs_with(&port.allowed_address_pairs, cidr)
            } else {
                plan::pairs_without(&port.allowed_address_pairs, cidr)
            };
            let Some(pairs) = edited else {
                return Ok(());
            };
            let body = ports::pairs_body(&pairs);
            if !dry_run::intercept(
                PROVIDER_NAME,
                "port.update_allowed_address_pairs",
                &port.id,
                || body.to_string(),
            ) {
                return Ok(());
            }
            if let Some(hook) = &self.before_write {
                hook(ConditionalWrite::PortPairs).await;
            }
            let revision = self.features.if_match.then_some(port.revision_number);
            match ports::set_allowed_address_pairs(&self.client, &port.id, &body, revision).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) if e.is_precondition_failed() => {
                    tracing::debug!(port = %port.id, attempt, error = %e, "the port changed since it was read: reading it again");
                    match ports::get(&self.client, &port.id).await {
                        Ok(read) => port = read,
                        Err(e) if e.is_not_found() => return Ok(()),
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ProviderError::RetryAfter {
            after: PRECONDITION_RETRY_AFTER,
            message: format!(
                "port {}: its allowed address pairs changed under each of {WRITE_ATTEMPTS} writes",
                port.id
            ),
        })
    }

    /// The port for a nexthop's allowed address pair, when pairs are in use.
    async fn pair_port(&self, nexthop: &str) -> Result<Option<Port>, ProviderError> {
        if !self.features.allowed_address_pairs {
            return Ok(None);
        }
        let addresses = BTreeSet::from([nexthop.to_owned()]);
        Ok(self
            .ports_for(&addresses, PortKind::NotNeutrons)
            .await?
            .remove(nexthop))
    }

    /// Removes one route of ours, in order: the route (unless another cluster owns exactly
    /// that route too), its allowed address pair (unless a blackhole, or another route to the
    /// CIDR still goes via the port), the tag. Nothing when the router has no tag of ours for
    /// it: the route is not ours (an operator's, OCCM's, another cluster's), or is gone.
    async fn remove_owned(
        &self,
        cluster: &str,
        router: &Router,
        route: &ExtraRoute,
        blackhole: bool,
    ) -> Result<(), ProviderError> {
        let tag = plan::ownership_tag(cluster, route);
        if !router.tags.contains(&tag) {
            return Ok(());
        }
        let shared = plan::other_owner_tags(router, cluster, route);
        if !shared.is_empty() {
            tracing::info!(router = %self.router_id, ?route, others = ?shared, "another cluster owns the route too: only our tag is removed");
            return self.remove_tag(&tag).await;
        }
        if router.routes.contains(route) {
            self.edit_route(route, false).await?;
        }
        if !blackhole && let Some(port) = self.pair_port(&route.nexthop).await? {
            let remaining: Vec<ExtraRoute> = router.routes.iter().filter(|r| *r != route).cloned().collect();
            if !plan::pair_still_needed(&remaining, route, &port.fixed_ips) {
                self.edit_pair(port, &route.destination, false).await?;
            }
        }
        self.remove_tag(&tag).await
    }

    /// Finishes the deletions behind stale tags (pair, then tag), best effort: a failure is
    /// logged and left for the next list. Tags of creates under way here are not stale.
    async fn clean_stale(&self, cluster: &str, router: &Router) {
        for tag in plan::stale_tags(router, cluster) {
            if lock(&self.creating).contains(&tag) {
                continue;
            }
            let Some(route) = plan::parse_ownership_tag(cluster, &tag) else {
                continue;
            };
            tracing::info!(router = %self.router_id, tag, "an ownership tag without its route: finishing the deletion");
            if let Err(e) = self.remove_owned(cluster, router, &route, false).await {
                tracing::warn!(router = %self.router_id, tag, error = %e, "removing a stale ownership tag failed; next list tries again");
            }
        }
    }
}

impl OpenStackRoutes {
    /// The nexthop of a new route: the target's first InternalIP of the destination's family, as
    /// OCCM. A caller that sends no address (the route controller always does; another client
    /// of the contract may name the target only) gets the target's server found by providerID,
    /// else by name, and its ports' addresses.
    async fn nexthop(&self, route: &Route) -> provider::Result<String> {
        let sent_addresses = route
            .target_node_addresses
            .iter()
            .any(|a| a.kind == provider::AddressType::InternalIP);
        if sent_addresses {
            return plan::nexthop_for(route);
        }
        let server_id = if route.target_provider_id.is_empty() {
            let filter = crate::nodes::name_filter(&route.target_node);
            let servers = nova::servers_named(&self.client, &filter, 10).await?;
            crate::nodes::match_by_name(&route.target_node, &servers)
                .into_result(&route.target_node)?
                .id
                .clone()
        } else {
            self.scheme.server_id(&route.target_provider_id)?.to_owned()
        };
        let ports = ports::of_device(&self.client, &server_id, 10).await?;
        let found = Route {
            target_node_addresses: ports
                .iter()
                .flat_map(|p| &p.fixed_ips)
                .map(|ip| {
                    provider::NodeAddress::new(provider::AddressType::InternalIP, ip.ip_address.clone())
                })
                .collect(),
            ..route.clone()
        };
        plan::nexthop_for(&found)
    }
}

#[async_trait]
impl Routes for OpenStackRoutes {
    async fn list_routes(&self, cluster: &str) -> provider::Result<Vec<Route>> {
        let router = self.router().await?;
        self.clean_stale(cluster, &router).await;
        let owned: Vec<&ExtraRoute> = plan::owned_routes(&router, cluster);
        let nexthops: BTreeSet<String> = owned.iter().map(|r| r.nexthop.clone()).collect();
        let ports = self.ports_for(&nexthops, PortKind::Server).await?;
        let server_ids: BTreeSet<String> = ports.values().map(|p| p.device_id.clone()).collect();
        let names = self.server_names(&server_ids).await?;
        Ok(owned
            .into_iter()
            .map(|route| {
                // A server Nova does not know (a port left behind) is no target: a blackhole.
                let owner = ports.get(&route.nexthop).and_then(|p| {
                    names.get(&p.device_id).map(|name| NexthopOwner {
                        server_id: p.device_id.clone(),
                        server_name: Some(name.clone()),
                    })
                });
                plan::listed_route(route, owner.as_ref(), |id| self.scheme.make_instance_id(id))
            })
            .collect())
    }

    async fn create_route(&self, cluster: &str, _name_hint: &str, route: &Route) -> provider::Result<()> {
        let nexthop = self.nexthop(route).await?;
        let extra = ExtraRoute::new(route.destination_cidr.trim(), nexthop);
        let tag = plan::ownership_tag(cluster, &extra);
        lock(&self.creating).insert(tag.clone());
        let _creating = Creating {
            set: &self.creating,
            tag: tag.clone(),
        };
        // The target's server, when the route names it: not this cloud's providerID (another
        // vendor's node after a gateway swap) is refused before anything is read or written.
        let target_server = match route.target_provider_id.trim() {
            "" => None,
            provider_id => Some(self.scheme.server_id(provider_id).map_err(|e| {
                ProviderError::InvalidArgument(format!(
                    "node {}: {e}: not a server of this cloud, its pod CIDR is not routed",
                    route.target_node
                ))
            })?),
        };
        let router = self.router().await?;
        // Read before any write: a nexthop no port holds, or another server's port holds, fails
        // here, leaving nothing behind.
        let port = if self.features.allowed_address_pairs || target_server.is_some() {
            let addresses = BTreeSet::from([extra.nexthop.clone()]);
            self.ports_for(&addresses, PortKind::NotNeutrons)
                .await?
                .remove(&extra.nexthop)
        } else {
            None
        };
        if self.features.allowed_address_pairs || target_server.is_some() {
            plan::check_nexthop_holder(route, &extra.nexthop, target_server, port.as_ref())?;
        }
        let port = port.filter(|_| self.features.allowed_address_pairs);
        if !router.tags.contains(&tag) {
            self.add_tag(&tag).await?;
        }
        if !router.routes.contains(&extra)
            && let Err(e) = self.edit_route(&extra, true).await
        {
            // Refused outright (max_routes, a nexthop off the router's subnets): the tag goes.
            if matches!(e, ProviderError::InvalidArgument(_))
                && let Err(e2) = self.remove_tag(&tag).await
            {
                tracing::warn!(router = %self.router_id, tag, error = %e2, "removing the tag of a refused route failed; the next list removes it");
            }
            return Err(e);
        }
        if let Some(port) = port {
            self.edit_pair(port, &extra.destination, true).await?;
        }
        Ok(())
    }

    async fn delete_route(&self, cluster: &str, route: &Route) -> provider::Result<()> {
        let router = self.router().await?;
        let destination = route.destination_cidr.trim();
        let targets: Vec<ExtraRoute> = match plan::listed_nexthop(route) {
            Some(nexthop) => vec![ExtraRoute::new(destination, nexthop)],
            None => plan::owned_routes(&router, cluster)
                .into_iter()
                .filter(|r| r.destination == destination)
                .cloned()
                .collect(),
        };
        for target in &targets {
            self.remove_owned(cluster, &router, target, route.blackhole)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{lenient::Strict, neutron::ports::FixedIp};

    #[test]
    fn features_need_extra_routes_and_tags() {
        let all = [
            "extraroute",
            "extraroute-atomic",
            "allowed-address-pairs",
            "standard-attr-tag",
            "revision-if-match",
        ];
        assert_eq!(
            Features::from_aliases(all),
            Ok(Features {
                atomic: true,
                allowed_address_pairs: true,
                if_match: true
            })
        );
        assert_eq!(
            Features::from_aliases(["extraroute", "tag"]),
            Ok(Features {
                atomic: false,
                allowed_address_pairs: false,
                if_match: false
            })
        );
        match Features::from_aliases(["standard-attr-tag", "router"]) {
            Err(ProviderError::NotImplemented(m)) => assert!(m.contains("extraroute"), "{m}"),
            other => panic!("{other:?}"),
        }
        match Features::from_aliases(["extraroute-atomic", "revision-if-match"]) {
            Err(ProviderError::NotImplemented(m)) => assert!(m.contains("needs router tags"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// A port of the route pairs' tests, here and in [`super::plan`].
    pub(super) fn port(id: &str, owner: &str, device: &str, network: &str, ips: &[&str]) -> Port {
        Port {
            id: id.into(),
            device_id: device.into(),
            device_owner: owner.into(),
            fixed_ips: ips
                .iter()
                .map(|ip| FixedIp {
                    ip_address: (*ip).into(),
                    ..FixedIp::default()
                })
                .collect(),
            allowed_address_pairs: vec![],
            port_security_enabled: Some(true),
            revision_number: 1,
            network_id: network.into(),
            ..Port::default()
        }
    }

    #[test]
    fn an_address_on_two_networks_is_settled_by_the_routers_networks() {
        let ports = [
            port("p1", "compute:nova", "s1", "n1", &["10.0.0.5", "fd00::5"]),
            port("p2", "compute:nova", "s2", "n2", &["10.0.0.5"]),
            port("p3", "network:router_interface", "r", "n1", &["10.0.0.1"]),
            port("p4", "", "", "n1", &["10.0.0.7"]),
        ];
        let addrs = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let ids = |m: HashMap<String, Port>| {
            let mut v: Vec<(String, String)> = m.into_iter().map(|(a, p)| (a, p.id)).collect();
            v.sort();
            v
        };
        // Unambiguous: one list is enough.
        let got = ports_by_address(
            &ports,
            &addrs(&["fd00::5", "10.0.0.1", "10.0.0.9"]),
            PortKind::Server,
            None,
        );
        assert_eq!(ids(got.unwrap()), [("fd00::5".into(), "p1".into())]);
        // Held on two networks: the router's networks are needed.
        assert_eq!(
            ports_by_address(&ports, &addrs(&["10.0.0.5"]), PortKind::Server, None),
            None
        );
        let n1 = HashSet::from(["n1".to_owned()]);
        let got = ports_by_address(&ports, &addrs(&["10.0.0.5"]), PortKind::Server, Some(&n1));
        assert_eq!(ids(got.unwrap()), [("10.0.0.5".into(), "p1".into())]);
        // A pair goes on any port but Neutron's own.
        let got = ports_by_address(
            &ports,
            &addrs(&["10.0.0.7", "10.0.0.1"]),
            PortKind::NotNeutrons,
            None,
        );
        assert_eq!(ids(got.unwrap()), [("10.0.0.7".into(), "p4".into())]);
    }

    #[test]
    fn a_port_row_reads_neutrons_port() {
        // Strictly, as the routes read it: the pairs are written back whole.
        let row: Strict<Port> = serde_json::from_value(json!({
            "id": "p", "network_id": "n", "device_id": "s", "device_owner": "compute:nova",
            "fixed_ips": [{"subnet_id": "sn", "ip_address": "10.0.0.5"}],
            "allowed_address_pairs": [{"ip_address": "10.244.1.0/24", "mac_address": "fa:16:3e:00:00:01"}],
            "port_security_enabled": true, "revision_number": 4, "tags": []
        }))
        .unwrap();
        let row = row.0;
        assert_eq!(row.network_id, "n");
        assert_eq!(row.revision_number, 4);
        assert_eq!(
            row.allowed_address_pairs[0].mac_address.as_deref(),
            Some("fa:16:3e:00:00:01")
        );
    }
}
