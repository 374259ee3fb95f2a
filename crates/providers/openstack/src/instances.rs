//! InstancesV2 for a batch of Nodes in a bounded number of calls, where OCCM makes two Nova GETs
//! and a Neutron port list per Node (reference §2.5, its users' #1304 and #2753).
//!
//! For a batch: one Nova `servers/detail` list per name filter (`^(a|b|…)$`, every Node's name,
//! with or without providerID: a server is usually named as its Node) at microversion 2.47, so
//! each server carries its flavor's name (`original_name`) and needs no flavor GET; one `GET
//! /servers/{id}` only for a Node whose providerID names a server the list did not return (a
//! Node named otherwise than its server, or a deleted server: 404 is the definite not-found);
//! one Neutron port list for every found server (`device_id=a&device_id=b…`); trunk subports, if
//! any, in one port and one network list. The decisions are OCCM's ([`crate::nodes`]).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use provider::{InstanceInfo, Instances, NodeRef, ProviderError, Result};

pub use crate::nova::SERVER_MICROVERSION;
use crate::{
    client::Client,
    neutron::{
        networks::{self, Network},
        ports::{self, Port},
    },
    nodes::{
        AddressOptions, FlavorLookups, InstanceTypeChoice, ProviderIdScheme, SubportAddresses,
        batch_name_filters, by_name::DEFAULT_MAX_NAME_FILTER_LEN, choose_instance_type, instance_metadata,
        is_shutdown, match_by_name, metadata::instance_type_of_flavor, resolve_trunk_subports,
        trunk_subport_ids,
    },
    nova::{self, Flavor, Server},
};

/// Most single-server GETs in flight at once for one lookup.
const SERVER_GETS_AT_ONCE: usize = 8;
/// Most servers (or ports) named in one list call's query: 100 UUIDs keep the request line near
/// 5 KB, under the 8 KB that API front ends commonly accept.
pub const IDS_PER_CALL: usize = 100;

/// Nova and Neutron behind InstancesV2.
pub struct OpenStackInstances {
    client: Client,
    scheme: ProviderIdScheme,
    addresses: AddressOptions,
    /// Flavors looked up, by ID (`None`: the GET failed). Only for servers whose flavor has no
    /// usable `original_name`; flavors do not change once made.
    flavors: Mutex<FlavorLookups>,
    /// Every flavor, listed once when a server names its flavor only by a name that is no
    /// valid label value (microversion 2.47 carries no flavor ID): OCCM labels the ID then.
    all_flavors: tokio::sync::OnceCell<Vec<Flavor>>,
}

/// How a Node of the batch is to be found.
enum Wanted<'a> {
    /// By its providerID's server.
    Id(&'a str),
    /// By its name (no providerID yet).
    Name(&'a str),
    /// Its providerID is not OpenStack's (or names another region).
    Invalid(ProviderError),
}

impl OpenStackInstances {
    /// InstancesV2 over `client`, reporting providerIDs as `scheme` makes them and addresses as
    /// `addresses` (`[Networking]`) orders them.
    pub fn new(client: Client, scheme: ProviderIdScheme, addresses: AddressOptions) -> Self {
        Self {
            client,
            scheme,
            addresses,
            flavors: Mutex::default(),
            all_flavors: tokio::sync::OnceCell::new(),
        }
    }

    fn wanted<'a>(&self, node: &'a NodeRef) -> Wanted<'a> {
        if node.provider_id.is_empty() {
            return Wanted::Name(&node.name);
        }
        match self.scheme.server_id(&node.provider_id) {
            Ok(id) => Wanted::Id(id),
            Err(e) => Wanted::Invalid(e.into()),
        }
    }

    /// Every server whose name is one of `names`, by ID (a complete list, or an error).
    async fn servers_named(&self, names: &[&str]) -> Result<BTreeMap<String, Server>> {
        let mut found = BTreeMap::new();
        for batch in batch_name_filters(names, DEFAULT_MAX_NAME_FILTER_LEN) {
            for server in nova::servers_detail_named(&self.client, &batch.filter).await? {
                found.insert(server.id.clone(), server);
            }
        }
        Ok(found)
    }

    /// Every port of `servers`, by server ID.
    async fn ports_of(&self, servers: &[&str]) -> Result<HashMap<String, Vec<Port>>> {
        let mut by_server: HashMap<String, Vec<Port>> = HashMap::new();
        for chunk in servers.chunks(IDS_PER_CALL) {
            let query: Vec<(&str, &str)> = chunk.iter().map(|id| ("device_id", *id)).collect();
            for port in ports::list(&self.client, &query).await? {
                by_server.entry(port.device_id.clone()).or_default().push(port);
            }
        }
        Ok(by_server)
    }

    /// The trunk subports of `ports` and their networks (none without trunks: no call).
    async fn trunks_of(&self, ports: &[Port]) -> Result<(Vec<Port>, Vec<Network>)> {
        let ids = trunk_subport_ids(ports);
        if ids.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut subports = Vec::new();
        for chunk in ids.chunks(IDS_PER_CALL) {
            let query: Vec<(&str, &str)> = chunk.iter().map(|id| ("id", *id)).collect();
            subports.extend(ports::list(&self.client, &query).await?);
        }
        let mut network_ids: Vec<&str> = subports.iter().map(|p| p.network_id.as_str()).collect();
        network_ids.sort_unstable();
        network_ids.dedup();
        let mut networks = Vec::new();
        for chunk in network_ids.chunks(IDS_PER_CALL) {
            let query: Vec<(&str, &str)> = chunk.iter().map(|id| ("id", *id)).collect();
            networks.extend(networks::list(&self.client, &query).await?);
        }
        Ok((subports, networks))
    }

    /// The instance type of `server`, looking its flavor up (once, then cached) when the server
    /// does not carry a usable name for it.
    async fn instance_type(&self, server: &Server) -> Result<String> {
        loop {
            let choice = {
                let flavors = self
                    .flavors
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                choose_instance_type(&server.flavor, &flavors)
            };
            match choice {
                InstanceTypeChoice::Known(t) => return Ok(t),
                InstanceTypeChoice::NotFound => {
                    if server.flavor.id.is_none()
                        && let Some(name) = &server.flavor.original_name
                        && let Some(flavor) = self.flavor_named(name).await?
                    {
                        return Ok(instance_type_of_flavor(&flavor));
                    }
                    return Err(ProviderError::Internal(format!(
                        "the flavor of server {} ({:?}) was not found",
                        server.id, server.flavor
                    )));
                }
                InstanceTypeChoice::NeedsFlavor(id) => {
                    let looked_up = nova::flavor(&self.client, &id).await?;
                    self.flavors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(id, looked_up);
                }
            }
        }
    }

    /// The flavor named `name`, from one listing of every flavor (made once).
    async fn flavor_named(&self, name: &str) -> Result<Option<Flavor>> {
        let all = self
            .all_flavors
            .get_or_try_init(|| nova::flavors(&self.client))
            .await?;
        Ok(all.iter().find(|f| f.name == name).cloned())
    }

    /// What the cloud knows of `server`.
    async fn info(
        &self,
        server: &Server,
        ports: &[Port],
        subports: &[SubportAddresses],
    ) -> Result<InstanceInfo> {
        let instance_type = self.instance_type(server).await?;
        Ok(InstanceInfo {
            metadata: instance_metadata(
                server,
                ports,
                subports,
                &instance_type,
                &self.addresses,
                &self.scheme,
            ),
            shutdown: is_shutdown(&server.status),
        })
    }
}

impl From<crate::lenient::ModelError> for ProviderError {
    fn from(e: crate::lenient::ModelError) -> Self {
        ProviderError::Internal(e.to_string())
    }
}

#[async_trait]
impl Instances for OpenStackInstances {
    async fn lookup_instances(&self, nodes: &[NodeRef]) -> Result<Vec<Result<InstanceInfo, ProviderError>>> {
        let wanted: Vec<Wanted<'_>> = nodes.iter().map(|n| self.wanted(n)).collect();
        let names: Vec<&str> = nodes
            .iter()
            .zip(&wanted)
            .filter(|(_, w)| !matches!(w, Wanted::Invalid(_)))
            .map(|(n, _)| n.name.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        let mut servers = if names.is_empty() {
            BTreeMap::new()
        } else {
            self.servers_named(&names).await?
        };
        // Nodes whose providerID names a server the name list did not return: one GET each,
        // a few at a time (a batch of renamed Nodes must not wait out 100 round trips in a row,
        // nor send Nova 100 requests at once).
        let missing: std::collections::BTreeSet<String> = wanted
            .iter()
            .filter_map(|w| match w {
                Wanted::Id(id) if !servers.contains_key(*id) => Some((*id).to_owned()),
                _ => None,
            })
            .collect();
        let gets = missing
            .into_iter()
            .map(|id| async move { nova::server(&self.client, &id).await.map(|server| (id, server)) });
        let fetched: Vec<(String, Option<Server>)> = futures::stream::iter(gets)
            .buffer_unordered(SERVER_GETS_AT_ONCE)
            .try_collect()
            .await?;
        let mut gone = std::collections::BTreeSet::new();
        for (id, server) in fetched {
            match server {
                Some(server) => {
                    servers.insert(server.id.clone(), server);
                }
                None => {
                    gone.insert(id);
                }
            }
        }
        let listed: Vec<Server> = servers.into_values().collect();
        // The server of each Node: by providerID (a 404 is the definite not-found), or by name
        // (a complete list without it is the definite not-found: OCCM's F1 fixed).
        let mut results: Vec<Result<&Server, ProviderError>> = Vec::with_capacity(nodes.len());
        for (node, w) in nodes.iter().zip(wanted) {
            results.push(match w {
                Wanted::Invalid(e) => Err(e),
                Wanted::Id(id) => listed.iter().find(|s| s.id == id).ok_or_else(|| {
                    ProviderError::InstanceNotFound(format!(
                        "server {id} of node {} does not exist",
                        node.name
                    ))
                }),
                Wanted::Name(name) => match_by_name(name, &listed).into_result(name),
            });
        }
        // Their ports, in one list.
        let mut ids: Vec<&str> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|s| s.id.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let ports = if ids.is_empty() {
            HashMap::new()
        } else {
            self.ports_of(&ids).await?
        };
        let all_ports: Vec<Port> = ports.values().flatten().cloned().collect();
        let (subports, networks) = self.trunks_of(&all_ports).await?;
        let mut answers = Vec::with_capacity(nodes.len());
        for result in results {
            answers.push(match result {
                Ok(server) => {
                    let own = ports.get(&server.id).map(Vec::as_slice).unwrap_or_default();
                    let own_subports = resolve_trunk_subports(own, &subports, &networks);
                    self.info(server, own, &own_subports).await
                }
                Err(e) => Err(e),
            });
        }
        Ok(answers)
    }
}
