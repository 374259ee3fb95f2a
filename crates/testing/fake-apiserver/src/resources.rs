//! The resources this server serves, with what discovery says about them.

/// Where objects live. `events` (core/v1) and `events.k8s.io/v1` share one storage, as in the
/// real server, where both are views of the same etcd keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Store {
    Namespaces,
    Nodes,
    Services,
    Events,
    ConfigMaps,
    Secrets,
    Leases,
}

impl Store {
    pub const ALL: [Store; 7] = [
        Store::Namespaces,
        Store::Nodes,
        Store::Services,
        Store::Events,
        Store::ConfigMaps,
        Store::Secrets,
        Store::Leases,
    ];
}

#[derive(Debug)]
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub has_status: bool,
    pub store: Store,
    /// The `events.k8s.io/v1` view: objects are converted from the stored core/v1 shape.
    pub events_v1: bool,
}

pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
    /// `nodes`, `leases.coordination.k8s.io`.
    pub fn qualified(&self) -> String {
        qualified(self.group, self.plural)
    }
}

/// `schema.GroupResource.String()`: `nodes`, `leases.coordination.k8s.io`.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

pub static RESOURCES: &[ResourceDef] = &[
    ResourceDef {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        has_status: true,
        store: Store::Namespaces,
        events_v1: false,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        has_status: true,
        store: Store::Nodes,
        events_v1: false,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        categories: &["all"],
        has_status: true,
        store: Store::Services,
        events_v1: false,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        has_status: false,
        store: Store::Events,
        events_v1: false,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        has_status: false,
        store: Store::ConfigMaps,
        events_v1: false,
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        categories: &[],
        has_status: false,
        store: Store::Secrets,
        events_v1: false,
    },
    ResourceDef {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        categories: &[],
        has_status: false,
        store: Store::Leases,
        events_v1: false,
    },
    ResourceDef {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        has_status: false,
        store: Store::Events,
        events_v1: true,
    },
];

/// The API groups (other than the legacy core group), in discovery order.
pub const GROUPS: &[&str] = &["coordination.k8s.io", "events.k8s.io"];

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

pub fn in_group_version<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceDef> + use<'a> {
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

/// The canonical (core/v1 for events) definition of a store.
pub fn primary(store: Store) -> &'static ResourceDef {
    RESOURCES
        .iter()
        .find(|r| r.store == store && !r.events_v1)
        .unwrap_or(&RESOURCES[0])
}
