//! OCCM's `cloud.conf`, read as `openstack-cloud-controller-manager` reads it (`ReadConfig`,
//! `NewOpenStack`, `client.NewOpenStackClient`; reference §1 and §5), with the [`gcfg`] reader.
//!
//! [`parse`] is OCCM's `ReadConfig`: the sections `[Global]`, `[Networking]`, `[LoadBalancer]`,
//! `[LoadBalancerClass "name"]`, `[Route]` and `[Metadata]`, case-insensitive names, the
//! repeatable `public-network-name`/`internal-network-name`, Go durations, gcfg's booleans and
//! integers, OCCM's defaults; a bad value is an error naming its line and key, as gcfg's fatal
//! errors are. Unknown sections and keys are ignored, as OCCM ignores them, and named by
//! [`CloudConf::notices`] (the gateway logs them in one warning at start).
//!
//! [`CloudConf::merge_clouds_yaml`] is OCCM's `ReadClouds` (`use-clouds = true`, `clouds-file`,
//! `cloud`; [`crate::clouds_yaml`]): clouds.yaml fills what `[Global]` leaves empty.
//!
//! [`CloudConf::to_config`] is what OCCM does with it at start (`NewOpenStackClient`'s
//! `ToAuth3Options`, `NewOpenStack`'s checks). What concerns one capability alone does not stop
//! the start: it switches that capability off ([`OpenStackConfig::switched_off`]; e.g. an
//! `lb-version` other than `v2`, which OCCM's `LoadBalancer()` dies on). A CA given inline
//! (`cafilecontents`) is trusted as OCCM trusts it: only when `ca-file` is not set.
//!
//! # Where this differs from OCCM, on purpose
//! - No `region`: OCCM starts, takes whichever region's endpoint the catalog lists first and
//!   labels nodes with an empty region, which on a multi-region cloud silently manages the wrong
//!   region's servers. Here the client uses the catalog's region when it lists one only (said at
//!   start) and refuses, naming the regions, when it lists several.
//! - `cloud` without `use-clouds`: gophercloud then takes the credentials from clouds.yaml alone,
//!   ignoring `[Global]`'s; here clouds.yaml is merged as with `use-clouds` (cloud.conf wins), and
//!   the notices say so.
//! - Credentials OCCM would hand to gophercloud in a combination gophercloud refuses (so OCCM
//!   fails at start) are read by their evident meaning where there is one: `user-id` wins over
//!   `username`; a domain ID wins over a domain name, as it does for the project's domain; the
//!   user's domain comes from `user-domain-*`, else `domain-*`, whatever the scope; a trust
//!   ignores `token`; an application credential wins over a password or a token (OCCM would
//!   authenticate with the password and no scope, which has no catalog). What is ignored is named
//!   in the notices. A combination with no meaning (nothing to authenticate with, a project name
//!   without a domain) is refused naming the key.
//! - A Keystone v2.0 `auth-url` is refused (Keystone removed v2.0 in Queens).
//! - A negative duration is refused (see [`gcfg::parse_duration`]).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use gcfg::{Entry, Error, Notice, SectionSchema};
use ipnet::IpNet;

use crate::auth::{Credentials, DomainRef, Interface, Method, ProjectRef, Scope, Secret, Tls, UserRef};

/// The environment variable that switches providerIDs to the regional form.
pub const REGIONAL_ENV: &str = "OS_CCM_REGIONAL";

/// OCCM's reading of [`REGIONAL_ENV`]: regional only for exactly `true`.
pub fn regional_from_env(value: Option<&str>) -> bool {
    value == Some("true")
}

/// `[Metadata] request-timeout` when unset or zero, as OCCM.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `[Metadata] search-order` when unset or empty, as OCCM.
pub const DEFAULT_SEARCH_ORDER: &str = "configDrive,metadataService";

/// The Octavia providers OCCM knows (another only logs a warning there).
pub const KNOWN_LB_PROVIDERS: &[&str] = &["amphora", "octavia", "ovn", "f5", "amphorav2"];

/// The TLS container stores OCCM knows (another only logs a warning there).
pub const KNOWN_CONTAINER_STORES: &[&str] = &["barbican", "external"];

const GLOBAL_KEYS: &[&str] = &[
    "auth-url",
    "username",
    "password",
    "user-id",
    "tenant-id",
    "tenant-name",
    "trust-id",
    "trustee-id",
    "trustee-password",
    "domain-id",
    "domain-name",
    "tenant-domain-id",
    "tenant-domain-name",
    "user-domain-id",
    "user-domain-name",
    "region",
    "os-endpoint-type",
    "ca-file",
    "tls-insecure",
    "token",
    "cert-file",
    "key-file",
    "cafilecontents",
    "use-clouds",
    "clouds-file",
    "cloud",
    "application-credential-id",
    "application-credential-name",
    "application-credential-secret",
];

const NETWORKING_KEYS: &[&str] = &[
    "ipv6-support-disabled",
    "public-network-name",
    "internal-network-name",
    "address-sort-order",
];

const LOAD_BALANCER_KEYS: &[&str] = &[
    "enabled",
    "lb-version",
    "subnet-id",
    "member-subnet-id",
    "network-id",
    "floating-network-id",
    "floating-subnet-id",
    "floating-subnet",
    "floating-subnet-tags",
    "lb-method",
    "lb-provider",
    "create-monitor",
    "monitor-delay",
    "monitor-timeout",
    "monitor-max-retries",
    "monitor-max-retries-down",
    "manage-security-groups",
    "internal-lb",
    "node-selector",
    "cascade-delete",
    "flavor-id",
    "availability-zone",
    "enable-ingress-hostname",
    "ingress-hostname-suffix",
    "max-shared-lb",
    "container-store",
    "provider-requires-serial-api-calls",
    "default-tls-container-ref",
    // OCCM's untagged map field: gcfg fails on any value of it.
    "lbclasses",
];

const LOAD_BALANCER_CLASS_KEYS: &[&str] = &[
    "floating-network-id",
    "floating-subnet-id",
    "floating-subnet",
    "floating-subnet-tags",
    "network-id",
    "subnet-id",
    "member-subnet-id",
];

/// OCCM's sections and keys (`Config` in `pkg/openstack/openstack.go`).
pub const SCHEMA: &[SectionSchema<'static>] = &[
    SectionSchema {
        name: "Global",
        subsections: false,
        keys: GLOBAL_KEYS,
    },
    SectionSchema {
        name: "Networking",
        subsections: false,
        keys: NETWORKING_KEYS,
    },
    SectionSchema {
        name: "LoadBalancer",
        subsections: false,
        keys: LOAD_BALANCER_KEYS,
    },
    SectionSchema {
        name: "LoadBalancerClass",
        subsections: true,
        keys: LOAD_BALANCER_CLASS_KEYS,
    },
    SectionSchema {
        name: "Route",
        subsections: false,
        keys: &["router-id"],
    },
    SectionSchema {
        name: "Metadata",
        subsections: false,
        keys: &["search-order", "request-timeout"],
    },
];

/// `[Global]` as OCCM's `AuthOpts` holds it: every value as the file gave it (the last one),
/// `""` when unset, as OCCM treats an empty value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Global {
    /// `auth-url`.
    pub auth_url: String,
    /// `username`.
    pub username: String,
    /// `password`.
    pub password: Secret,
    /// `user-id`.
    pub user_id: String,
    /// `tenant-id`.
    pub tenant_id: String,
    /// `tenant-name`.
    pub tenant_name: String,
    /// `trust-id`.
    pub trust_id: String,
    /// `trustee-id`.
    pub trustee_id: String,
    /// `trustee-password`.
    pub trustee_password: Secret,
    /// `domain-id`.
    pub domain_id: String,
    /// `domain-name`.
    pub domain_name: String,
    /// `tenant-domain-id`.
    pub tenant_domain_id: String,
    /// `tenant-domain-name`.
    pub tenant_domain_name: String,
    /// `user-domain-id`.
    pub user_domain_id: String,
    /// `user-domain-name`.
    pub user_domain_name: String,
    /// `region`.
    pub region: String,
    /// `os-endpoint-type`.
    pub os_endpoint_type: String,
    /// `ca-file`.
    pub ca_file: String,
    /// `tls-insecure` (a string in OCCM: only `true` counts).
    pub tls_insecure: String,
    /// `token`.
    pub token: Secret,
    /// `cert-file`.
    pub cert_file: String,
    /// `key-file`.
    pub key_file: String,
    /// `cafilecontents`: an inline PEM CA bundle, used when `ca-file` is not set.
    pub ca_file_contents: String,
    /// `use-clouds`: read clouds.yaml ([`CloudConf::merge_clouds_yaml`]).
    pub use_clouds: bool,
    /// `clouds-file`: where clouds.yaml is (else clientconfig's search path).
    pub clouds_file: String,
    /// `cloud`: which cloud of clouds.yaml.
    pub cloud: String,
    /// `application-credential-id`.
    pub application_credential_id: String,
    /// `application-credential-name`.
    pub application_credential_name: String,
    /// `application-credential-secret`.
    pub application_credential_secret: Secret,
}

/// `[Networking]` as the file gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkingConf {
    /// `ipv6-support-disabled` (default false).
    pub ipv6_support_disabled: bool,
    /// `public-network-name`, every value in order.
    pub public_network_names: Vec<String>,
    /// `internal-network-name`, every value in order.
    pub internal_network_names: Vec<String>,
    /// `address-sort-order`, as written.
    pub address_sort_order: String,
}

/// One `[LoadBalancerClass "name"]` (OCCM's `LBClass`); empty values are unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LbClass {
    /// `floating-network-id`.
    pub floating_network_id: Option<String>,
    /// `floating-subnet-id`.
    pub floating_subnet_id: Option<String>,
    /// `floating-subnet`.
    pub floating_subnet: Option<String>,
    /// `floating-subnet-tags`.
    pub floating_subnet_tags: Option<String>,
    /// `network-id`.
    pub network_id: Option<String>,
    /// `subnet-id`.
    pub subnet_id: Option<String>,
    /// `member-subnet-id`.
    pub member_subnet_id: Option<String>,
}

/// `[LoadBalancer]` and the `[LoadBalancerClass]` sections (OCCM's `LoadBalancerOpts`), with
/// OCCM's defaults. Empty IDs and names are unset (`None`), as OCCM treats `""`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerSettings {
    /// `enabled` (default true): false means no load balancers at all.
    pub enabled: bool,
    /// `subnet-id`: the VIP subnet.
    pub subnet_id: Option<String>,
    /// `member-subnet-id`.
    pub member_subnet_id: Option<String>,
    /// `network-id`: the VIP network.
    pub network_id: Option<String>,
    /// `floating-network-id` (unset: detected).
    pub floating_network_id: Option<String>,
    /// `floating-subnet-id`.
    pub floating_subnet_id: Option<String>,
    /// `floating-subnet`.
    pub floating_subnet: Option<String>,
    /// `floating-subnet-tags`.
    pub floating_subnet_tags: Option<String>,
    /// `lb-method` (default `ROUND_ROBIN`), passed to Octavia as it is.
    pub lb_method: String,
    /// `lb-provider` (default `amphora`), passed to Octavia as it is.
    pub lb_provider: String,
    /// `create-monitor` (default false).
    pub create_monitor: bool,
    /// `monitor-delay` (default 5 s; Octavia gets whole seconds).
    pub monitor_delay: Duration,
    /// `monitor-timeout` (default 3 s).
    pub monitor_timeout: Duration,
    /// `monitor-max-retries` (default 1).
    pub monitor_max_retries: u64,
    /// `monitor-max-retries-down` (default 3).
    pub monitor_max_retries_down: u64,
    /// `manage-security-groups` (default false).
    pub manage_security_groups: bool,
    /// `internal-lb` (default false).
    pub internal_lb: bool,
    /// `node-selector` (default empty: every node), `k=v,k` as OCCM reads it later.
    pub node_selector: String,
    /// `cascade-delete` (default true).
    pub cascade_delete: bool,
    /// `flavor-id`.
    pub flavor_id: Option<String>,
    /// `availability-zone`.
    pub availability_zone: Option<String>,
    /// `enable-ingress-hostname` (default false).
    pub enable_ingress_hostname: bool,
    /// `ingress-hostname-suffix` (default `nip.io`).
    pub ingress_hostname_suffix: String,
    /// `max-shared-lb` (default 2).
    pub max_shared_lb: i64,
    /// `container-store` (default `barbican`).
    pub container_store: String,
    /// `provider-requires-serial-api-calls` (default false).
    pub provider_requires_serial_api_calls: bool,
    /// `default-tls-container-ref`.
    pub default_tls_container_ref: Option<String>,
    /// The `[LoadBalancerClass "name"]` sections by name (`""` for a bare header).
    pub classes: BTreeMap<String, LbClass>,
}

impl Default for LoadBalancerSettings {
    /// OCCM's defaults (`ReadConfig`).
    fn default() -> Self {
        Self {
            enabled: true,
            subnet_id: None,
            member_subnet_id: None,
            network_id: None,
            floating_network_id: None,
            floating_subnet_id: None,
            floating_subnet: None,
            floating_subnet_tags: None,
            lb_method: "ROUND_ROBIN".into(),
            lb_provider: "amphora".into(),
            create_monitor: false,
            monitor_delay: Duration::from_secs(5),
            monitor_timeout: Duration::from_secs(3),
            monitor_max_retries: 1,
            monitor_max_retries_down: 3,
            manage_security_groups: false,
            internal_lb: false,
            node_selector: String::new(),
            cascade_delete: true,
            flavor_id: None,
            availability_zone: None,
            enable_ingress_hostname: false,
            ingress_hostname_suffix: "nip.io".into(),
            max_shared_lb: 2,
            container_store: "barbican".into(),
            provider_requires_serial_api_calls: false,
            default_tls_container_ref: None,
            classes: BTreeMap::new(),
        }
    }
}

/// `[Route]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// `router-id`: routes are managed only with one.
    pub router_id: Option<String>,
}

/// `[Metadata]` as the file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataConf {
    /// `search-order` (default `configDrive,metadataService`): validated, no effect here.
    pub search_order: String,
    /// `request-timeout`; zero when unset (then [`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
}

impl Default for MetadataConf {
    fn default() -> Self {
        Self {
            search_order: DEFAULT_SEARCH_ORDER.into(),
            request_timeout: Duration::ZERO,
        }
    }
}

/// The file, read as OCCM's `ReadConfig` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudConf {
    /// `[Global]`.
    pub global: Global,
    /// `[Networking]`.
    pub networking: NetworkingConf,
    /// `[LoadBalancer]` and `[LoadBalancerClass "name"]`.
    pub load_balancer: LoadBalancerSettings,
    /// `[Route]`.
    pub route: Route,
    /// `[Metadata]`.
    pub metadata: MetadataConf,
    /// Unknown sections and keys, in file order.
    pub ignored: Vec<Notice>,
    /// The line of the value in effect of each key set, by its name in errors
    /// (`[Global] auth-url`).
    lines: BTreeMap<String, usize>,
    /// The line of the first `[Global]` header.
    global_line: Option<usize>,
    /// `[LoadBalancer] lb-version`: only `""` and `v2` exist, so no setting keeps it.
    lb_version: String,
    /// What [`CloudConf::merge_clouds_yaml`] read, and what of it has no effect.
    clouds_notices: Vec<Notice>,
}

/// The networking settings OCCM's node addresses use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Networking {
    /// `ipv6-support-disabled`: drop IPv6 node addresses.
    pub ipv6_support_disabled: bool,
    /// `public-network-name`: networks whose addresses are ExternalIP.
    pub public_network_names: Vec<String>,
    /// `internal-network-name`: if any, only these networks give InternalIP.
    pub internal_network_names: Vec<String>,
    /// `address-sort-order`: the valid CIDRs, in order (as Go's `net.ParseCIDR`, the network).
    pub address_sort_order: Vec<IpNet>,
}

/// Everything the provider takes from `cloud.conf` (and `OS_CCM_REGIONAL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenStackConfig {
    /// How to reach and authenticate to the cloud.
    pub credentials: Credentials,
    /// `[Networking]`.
    pub networking: Networking,
    /// `[Route]`.
    pub route: Route,
    /// `OS_CCM_REGIONAL=true`: regional providerIDs (`openstack://<region>/<id>`).
    pub regional: bool,
    /// `[LoadBalancer]` and `[LoadBalancerClass]`.
    pub load_balancer: LoadBalancerSettings,
    /// The capabilities a setting switches off, with the reason naming it.
    pub switched_off: provider::SwitchedOff,
}

/// Where [`CloudConf::merge_clouds_yaml`] looks, from the process's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudsEnv {
    /// `OS_CLIENT_CONFIG_FILE`.
    pub client_config_file: Option<String>,
    /// `OS_CLOUD`.
    pub cloud: Option<String>,
    /// The working directory.
    pub cwd: Option<PathBuf>,
    /// The user's home directory (`HOME`).
    pub home: Option<PathBuf>,
}

impl CloudsEnv {
    /// The gateway process's.
    pub fn of_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            client_config_file: var("OS_CLIENT_CONFIG_FILE"),
            cloud: var("OS_CLOUD"),
            cwd: std::env::current_dir().ok(),
            home: var("HOME").map(PathBuf::from),
        }
    }
}

/// Reads and parses the file at `path`; errors name it.
pub fn read(path: &Path) -> Result<CloudConf, Error> {
    let text = gcfg::read_to_string(path)?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// Parses the text of a `cloud.conf` as OCCM's `ReadConfig` does: types and defaults. The
/// first error in file order wins, syntax or value, as gcfg.
pub fn parse(text: &str) -> Result<CloudConf, Error> {
    let (document, syntax_error) = gcfg::parse_prefix(text);
    let mut conf = CloudConf::default();
    for section in &document.sections {
        let Some(schema) = SCHEMA.iter().find(|s| section.is(s.name)) else {
            continue;
        };
        if section.sub.is_some() && !schema.subsections {
            // gcfg ignores a subsection of a plain section (noted by `unknown`).
            continue;
        }
        if schema.name == "Global" && conf.global_line.is_none() {
            conf.global_line = Some(section.line);
        }
        let class = schema.subsections.then(|| section.sub_or_empty().to_owned());
        if let Some(class) = &class {
            // gcfg creates the class at its header, even with no keys.
            conf.load_balancer.classes.entry(class.clone()).or_default();
        }
        for entry in &section.entries {
            let Some(key) = schema.key(&entry.name) else {
                continue;
            };
            let label = match &class {
                Some(class) => format!("[{} {class:?}] {key}", schema.name),
                None => format!("[{}] {key}", schema.name),
            };
            conf.set(schema.name, class.as_deref(), key, &label, entry)?;
            conf.lines.insert(label, entry.line);
        }
    }
    if let Some(e) = syntax_error {
        return Err(e);
    }
    if conf.metadata.search_order.is_empty() {
        conf.metadata.search_order = DEFAULT_SEARCH_ORDER.into();
    }
    conf.ignored = document.unknown(SCHEMA);
    Ok(conf)
}

/// An ID or name: empty is unset.
fn optional(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

impl CloudConf {
    fn set(
        &mut self,
        section: &str,
        class: Option<&str>,
        key: &str,
        label: &str,
        entry: &Entry,
    ) -> Result<(), Error> {
        let text = || entry.text(label).map(str::to_owned);
        match (section, class) {
            ("Global", _) => {
                let g = &mut self.global;
                if key == "use-clouds" {
                    g.use_clouds = entry.boolean(label)?;
                    return Ok(());
                }
                let value = text()?;
                match key {
                    "auth-url" => g.auth_url = value,
                    "username" => g.username = value,
                    "password" => g.password = Secret(value),
                    "user-id" => g.user_id = value,
                    "tenant-id" => g.tenant_id = value,
                    "tenant-name" => g.tenant_name = value,
                    "trust-id" => g.trust_id = value,
                    "trustee-id" => g.trustee_id = value,
                    "trustee-password" => g.trustee_password = Secret(value),
                    "domain-id" => g.domain_id = value,
                    "domain-name" => g.domain_name = value,
                    "tenant-domain-id" => g.tenant_domain_id = value,
                    "tenant-domain-name" => g.tenant_domain_name = value,
                    "user-domain-id" => g.user_domain_id = value,
                    "user-domain-name" => g.user_domain_name = value,
                    "region" => g.region = value,
                    "os-endpoint-type" => g.os_endpoint_type = value,
                    "ca-file" => g.ca_file = value,
                    "tls-insecure" => g.tls_insecure = value,
                    "token" => g.token = Secret(value),
                    "cert-file" => g.cert_file = value,
                    "key-file" => g.key_file = value,
                    "cafilecontents" => g.ca_file_contents = value,
                    "clouds-file" => g.clouds_file = value,
                    "cloud" => g.cloud = value,
                    "application-credential-id" => g.application_credential_id = value,
                    "application-credential-name" => g.application_credential_name = value,
                    _ => g.application_credential_secret = Secret(value),
                }
            }
            ("Networking", _) => {
                let n = &mut self.networking;
                match key {
                    "ipv6-support-disabled" => n.ipv6_support_disabled = entry.boolean(label)?,
                    "public-network-name" | "internal-network-name" => {
                        let list = if key == "public-network-name" {
                            &mut n.public_network_names
                        } else {
                            &mut n.internal_network_names
                        };
                        // gcfg's multi-valued variable: a blank key clears it.
                        match &entry.value {
                            None => list.clear(),
                            Some(v) => list.push(v.clone()),
                        }
                    }
                    _ => n.address_sort_order = text()?,
                }
            }
            ("LoadBalancer", _) => {
                let lb = &mut self.load_balancer;
                match key {
                    "enabled" => lb.enabled = entry.boolean(label)?,
                    "create-monitor" => lb.create_monitor = entry.boolean(label)?,
                    "manage-security-groups" => lb.manage_security_groups = entry.boolean(label)?,
                    "internal-lb" => lb.internal_lb = entry.boolean(label)?,
                    "cascade-delete" => lb.cascade_delete = entry.boolean(label)?,
                    "enable-ingress-hostname" => lb.enable_ingress_hostname = entry.boolean(label)?,
                    "provider-requires-serial-api-calls" => {
                        lb.provider_requires_serial_api_calls = entry.boolean(label)?;
                    }
                    "monitor-delay" => lb.monitor_delay = entry.duration(label)?,
                    "monitor-timeout" => lb.monitor_timeout = entry.duration(label)?,
                    "monitor-max-retries" => lb.monitor_max_retries = entry.int(label)?,
                    "monitor-max-retries-down" => lb.monitor_max_retries_down = entry.int(label)?,
                    "max-shared-lb" => lb.max_shared_lb = entry.int(label)?,
                    "lbclasses" => {
                        return Err(Error::at(
                            entry.line,
                            Some(label.to_owned()),
                            "is not a key: OCCM fails on it too; write each class as a [LoadBalancerClass \"name\"] section",
                        ));
                    }
                    // Checked by `to_config` (OCCM checks it when it starts load balancers).
                    "lb-version" => self.lb_version = text()?,
                    _ => {
                        let value = text()?;
                        match key {
                            "lb-method" => lb.lb_method = value,
                            "lb-provider" => lb.lb_provider = value,
                            "node-selector" => lb.node_selector = value,
                            "ingress-hostname-suffix" => lb.ingress_hostname_suffix = value,
                            "container-store" => lb.container_store = value,
                            _ => {
                                let slot = match key {
                                    "subnet-id" => &mut lb.subnet_id,
                                    "member-subnet-id" => &mut lb.member_subnet_id,
                                    "network-id" => &mut lb.network_id,
                                    "floating-network-id" => &mut lb.floating_network_id,
                                    "floating-subnet-id" => &mut lb.floating_subnet_id,
                                    "floating-subnet" => &mut lb.floating_subnet,
                                    "floating-subnet-tags" => &mut lb.floating_subnet_tags,
                                    "flavor-id" => &mut lb.flavor_id,
                                    "availability-zone" => &mut lb.availability_zone,
                                    _ => &mut lb.default_tls_container_ref,
                                };
                                *slot = optional(&value);
                            }
                        }
                    }
                }
            }
            ("LoadBalancerClass", Some(class)) => {
                let value = optional(&text()?);
                let c = self.load_balancer.classes.entry(class.to_owned()).or_default();
                let slot = match key {
                    "floating-network-id" => &mut c.floating_network_id,
                    "floating-subnet-id" => &mut c.floating_subnet_id,
                    "floating-subnet" => &mut c.floating_subnet,
                    "floating-subnet-tags" => &mut c.floating_subnet_tags,
                    "network-id" => &mut c.network_id,
                    "subnet-id" => &mut c.subnet_id,
                    _ => &mut c.member_subnet_id,
                };
                *slot = value;
            }
            ("Route", _) => self.route.router_id = optional(&text()?),
            _ => match key {
                "search-order" => self.metadata.search_order = text()?,
                _ => self.metadata.request_timeout = entry.duration(label)?,
            },
        }
        Ok(())
    }

    /// OCCM's `ReadClouds`: with `use-clouds = true` (or a `cloud`), the cloud of clouds.yaml
    /// ([`crate::clouds_yaml`]) fills what `[Global]` leaves empty. `read` reads a file (`None`:
    /// it does not exist). Without `use-clouds` and `cloud`, nothing is read.
    ///
    /// # Errors
    /// No clouds.yaml on the search path, an unreadable or malformed one, or no cloud to pick,
    /// naming the key that asked for it: OCCM fails at start on each (every capability needs the
    /// credentials).
    pub fn merge_clouds_yaml(
        &mut self,
        env: &CloudsEnv,
        read: impl Fn(&Path) -> std::io::Result<Option<String>>,
    ) -> Result<(), Error> {
        let g = &self.global;
        let key = match (g.use_clouds, g.cloud.is_empty()) {
            (true, _) => "use-clouds",
            (false, false) => "cloud",
            (false, true) => return Ok(()),
        };
        let path = crate::clouds_yaml::search_path(
            &g.clouds_file,
            env.client_config_file.as_deref(),
            env.cwd.as_deref(),
            env.home.as_deref(),
        );
        let mut found = None;
        for candidate in &path {
            match read(candidate) {
                Ok(Some(text)) => {
                    found = Some((candidate.clone(), text));
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(self.global_error(key, format!("clouds.yaml {}: {e}", candidate.display())));
                }
            }
        }
        let Some((file, text)) = found else {
            let searched: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
            return Err(self.global_error(
                key,
                format!("no clouds.yaml found; looked for {}", searched.join(", ")),
            ));
        };
        let in_file = |m: String| format!("clouds.yaml {}: {m}", file.display());
        let clouds = crate::clouds_yaml::parse(&text).map_err(|m| self.global_error(key, in_file(m)))?;
        let (name, cloud) = crate::clouds_yaml::pick(&clouds, &g.cloud, env.cloud.as_deref())
            .map_err(|m| self.global_error(key, in_file(m)))?;
        let mut notices = Vec::new();
        if !g.clouds_file.is_empty() && file != Path::new(&g.clouds_file) {
            self.note(
                &mut notices,
                "[Global] clouds-file",
                format!(
                    "does not exist; clouds.yaml was found at {} instead, as OCCM finds it",
                    file.display()
                ),
            );
        }
        if !g.use_clouds {
            self.note(
                &mut notices,
                "[Global] cloud",
                "without use-clouds = true: merged as with it (cloud.conf wins); OCCM would take the credentials from clouds.yaml alone",
            );
        }
        let label = format!("[Global] {key}");
        let mut global = self.global.clone();
        for why in crate::clouds_yaml::merge(&mut global, cloud) {
            self.note(
                &mut notices,
                &label,
                format!("cloud {name:?} of {}: {why}", file.display()),
            );
        }
        tracing::info!(file = %file.display(), cloud = name, "cloud.conf [Global] completed from clouds.yaml (cloud.conf values win)");
        self.global = global;
        self.clouds_notices = notices;
        Ok(())
    }

    /// The line of the value in effect of `label`, if the file sets it.
    fn line(&self, label: &str) -> Option<usize> {
        self.lines.get(label).copied()
    }

    /// An error about `[Global] key`: at its line, else at the `[Global]` header.
    fn global_error(&self, key: &str, message: impl Into<String>) -> Error {
        let label = format!("[Global] {key}");
        Error {
            path: None,
            line: self.line(&label).or(self.global_line),
            key: Some(label),
            message: message.into(),
        }
    }

    fn note(&self, notices: &mut Vec<Notice>, label: &str, why: impl Into<String>) {
        notices.push(Notice {
            line: self.line(label).or(self.global_line).unwrap_or(0),
            what: label.to_owned(),
            why: why.into(),
        });
    }

    /// What the provider takes from the file, as OCCM takes it at start, with `regional` from
    /// [`regional_from_env`]. Refuses what OCCM refuses at start (bad credentials' shape, an
    /// invalid `search-order`, an invalid `os-endpoint-type`, an unknown `lb-version` with load
    /// balancers on) and what this provider does not implement, naming the line and key.
    pub fn to_config(&self, regional: bool) -> Result<OpenStackConfig, Error> {
        let (credentials, _) = self.credentials()?;
        check_search_order(&self.metadata.search_order).map_err(|m| Error {
            path: None,
            line: self.line("[Metadata] search-order"),
            key: Some("[Metadata] search-order".into()),
            message: m,
        })?;
        let lb = &self.load_balancer;
        let mut switched_off = provider::SwitchedOff::new();
        if lb.enabled
            && let Some(line) = self.line("[LoadBalancer] lb-version")
        {
            let version = &self.lb_version;
            if !version.is_empty() && version != "v2" {
                // OCCM's LoadBalancer() dies on it; it concerns load balancers alone.
                switched_off.insert(
                    provider::Capability::LoadBalancers,
                    format!(
                        "[LoadBalancer] lb-version (line {line}): {version:?}: only \"v2\" (or nothing) exists, as in OCCM"
                    ),
                );
            }
        }
        let (address_sort_order, _) = address_sort_order(&self.networking.address_sort_order);
        Ok(OpenStackConfig {
            credentials,
            networking: Networking {
                ipv6_support_disabled: self.networking.ipv6_support_disabled,
                public_network_names: self.networking.public_network_names.clone(),
                internal_network_names: self.networking.internal_network_names.clone(),
                address_sort_order,
            },
            route: self.route.clone(),
            regional,
            load_balancer: lb.clone(),
            switched_off,
        })
    }

    /// Everything in the file that has no effect, one line each, in line order: unknown
    /// sections and keys, `search-order`, credentials a chosen method ignores, invalid
    /// `address-sort-order` items, a `tls-insecure` that is not exactly `true`, half a client
    /// certificate, an unknown `lb-provider` or `container-store`. The gateway logs them in one
    /// warning at start.
    pub fn notices(&self) -> Vec<Notice> {
        let mut notices = self.ignored.clone();
        notices.extend(self.clouds_notices.iter().cloned());
        let g = &self.global;
        if !g.ca_file.is_empty() && !g.ca_file_contents.is_empty() {
            self.note(
                &mut notices,
                "[Global] cafilecontents",
                "ignored: ca-file is set, and wins, as in OCCM",
            );
        }
        if !g.use_clouds && g.cloud.is_empty() && !g.clouds_file.is_empty() {
            self.note(
                &mut notices,
                "[Global] clouds-file",
                "has no effect without use-clouds = true (or cloud), as in OCCM",
            );
        }
        if self.line("[Metadata] search-order").is_some() {
            self.note(
                &mut notices,
                "[Metadata] search-order",
                "validated as OCCM validates it, but it has no effect: this provider reads instances from Nova, never from instance metadata",
            );
        }
        if let Ok((_, ignored)) = self.credentials() {
            notices.extend(ignored);
        }
        if !matches!(g.tls_insecure.as_str(), "" | "true" | "false") {
            self.note(
                &mut notices,
                "[Global] tls-insecure",
                format!(
                    "{:?} keeps certificate verification on: OCCM turns it off only for exactly \"true\"",
                    g.tls_insecure
                ),
            );
        }
        match (g.cert_file.is_empty(), g.key_file.is_empty()) {
            (false, true) => self.note(
                &mut notices,
                "[Global] cert-file",
                "has no effect without key-file, as OCCM",
            ),
            (true, false) => self.note(
                &mut notices,
                "[Global] key-file",
                "has no effect without cert-file, as OCCM",
            ),
            _ => {}
        }
        for item in address_sort_order(&self.networking.address_sort_order).1 {
            self.note(
                &mut notices,
                "[Networking] address-sort-order",
                format!("{item:?} is not a CIDR; ignored, as OCCM ignores it"),
            );
        }
        let lb = &self.load_balancer;
        if !KNOWN_LB_PROVIDERS.contains(&lb.lb_provider.as_str()) {
            self.note(
                &mut notices,
                "[LoadBalancer] lb-provider",
                format!(
                    "{:?} is not a provider OCCM knows ({}); passed to Octavia as it is",
                    lb.lb_provider,
                    KNOWN_LB_PROVIDERS.join(", ")
                ),
            );
        }
        if !KNOWN_CONTAINER_STORES.contains(&lb.container_store.as_str()) {
            self.note(
                &mut notices,
                "[LoadBalancer] container-store",
                format!(
                    "{:?} is not a store OCCM knows ({}); TLS container references are checked only for barbican",
                    lb.container_store,
                    KNOWN_CONTAINER_STORES.join(", ")
                ),
            );
        }
        notices.sort_by_key(|n| n.line);
        notices
    }

    /// The credentials, as `NewOpenStackClient` builds them from `ToAuth3Options`, and what of
    /// `[Global]` the chosen method ignores.
    fn credentials(&self) -> Result<(Credentials, Vec<Notice>), Error> {
        let g = &self.global;
        let interface = self.endpoint_interface()?;
        let mut ignored = Vec::new();
        let (method, scope) = self.method_and_scope(&mut ignored)?;
        let tls = Tls {
            ca_file: optional(&g.ca_file).map(PathBuf::from),
            // OCCM: the inline bundle only when there is no ca-file.
            ca_pem: optional(&g.ca_file_contents).filter(|_| g.ca_file.is_empty()),
            insecure: g.tls_insecure == "true",
            client_cert: (!g.cert_file.is_empty() && !g.key_file.is_empty())
                .then(|| (PathBuf::from(&g.cert_file), PathBuf::from(&g.key_file))),
        };
        let request_timeout = if self.metadata.request_timeout.is_zero() {
            DEFAULT_REQUEST_TIMEOUT
        } else {
            self.metadata.request_timeout
        };
        Ok((
            Credentials {
                auth_url: g.auth_url.clone(),
                method,
                scope,
                region: g.region.clone(),
                interface,
                tls,
                request_timeout,
            },
            ignored,
        ))
    }

    /// Checks `auth-url` and reads `os-endpoint-type`. An empty `region` is settled by the
    /// client from the catalog ([`crate::client::Client::connect`]).
    fn endpoint_interface(&self) -> Result<Interface, Error> {
        let g = &self.global;
        if g.auth_url.is_empty() {
            return Err(self.global_error("auth-url", "is required: Keystone's URL"));
        }
        if g.auth_url.contains("v2.0") && !g.auth_url.contains("v3") {
            return Err(self.global_error(
                "auth-url",
                format!(
                    "{:?} is Keystone v2.0, which Keystone removed in Queens: give the v3 URL (or the URL without a version)",
                    g.auth_url
                ),
            ));
        }
        Ok(match g.os_endpoint_type.as_str() {
            "" | "public" => Interface::Public,
            "internal" => Interface::Internal,
            "admin" => Interface::Admin,
            other => {
                return Err(self.global_error(
                    "os-endpoint-type",
                    format!(
                        "{other:?} is not an endpoint interface: public (the default), internal or admin"
                    ),
                ));
            }
        })
    }

    /// How to authenticate and in which scope, by the first method `[Global]` gives: a trust,
    /// an application credential, a token, a password (OCCM's order).
    fn method_and_scope(&self, ignored: &mut Vec<Notice>) -> Result<(Method, Scope), Error> {
        let g = &self.global;
        let app_credential = !g.application_credential_id.is_empty()
            || !g.application_credential_name.is_empty()
            || !g.application_credential_secret.0.is_empty();
        if !g.trust_id.is_empty() {
            self.trust(ignored)
        } else if app_credential {
            Ok((self.application_credential(ignored)?, Scope::Implied))
        } else if !g.token.0.is_empty() {
            self.ignore(
                ignored,
                &[
                    ("username", !g.username.is_empty()),
                    ("user-id", !g.user_id.is_empty()),
                    ("password", !g.password.0.is_empty()),
                ],
                "ignored: token authenticates",
            );
            Ok((
                Method::Token {
                    token: g.token.clone(),
                },
                self.scope()?,
            ))
        } else if !g.password.0.is_empty() {
            Ok((
                Method::Password {
                    user: self.user(ignored)?,
                    password: g.password.clone(),
                },
                self.scope()?,
            ))
        } else {
            Err(self.global_error(
                "password",
                "no credentials: give password (with username or user-id), application-credential-id and -secret, token, or trust-id with trustee-password",
            ))
        }
    }

    /// A trust (`trust-id`): the trustee authenticates with its password, scoped to the trust.
    fn trust(&self, ignored: &mut Vec<Notice>) -> Result<(Method, Scope), Error> {
        let g = &self.global;
        // NewOpenStackClient: ToAuth3Options (no token), the trustee replacing the user.
        let password = if g.trustee_password.0.is_empty() {
            g.password.clone()
        } else {
            self.ignore(
                ignored,
                &[("password", !g.password.0.is_empty())],
                "ignored: trustee-password is the trustee's password",
            );
            g.trustee_password.clone()
        };
        if password.0.is_empty() {
            return Err(self.global_error(
                "trust-id",
                "needs the trustee's password: trustee-password (or password)",
            ));
        }
        let user = if g.trustee_id.is_empty() {
            self.user(ignored)?
        } else {
            self.ignore(
                ignored,
                &[
                    ("user-id", !g.user_id.is_empty()),
                    ("username", !g.username.is_empty()),
                ],
                "ignored: trustee-id is the user",
            );
            UserRef::Id(g.trustee_id.clone())
        };
        self.ignore(
            ignored,
            &[
                ("token", !g.token.0.is_empty()),
                ("tenant-id", !g.tenant_id.is_empty()),
                ("tenant-name", !g.tenant_name.is_empty()),
                (
                    "application-credential-id",
                    !g.application_credential_id.is_empty(),
                ),
                (
                    "application-credential-name",
                    !g.application_credential_name.is_empty(),
                ),
            ],
            "ignored: the token is scoped to the trust (trust-id)",
        );
        Ok((
            Method::Trust {
                trust_id: g.trust_id.clone(),
                user,
                password,
            },
            Scope::Implied,
        ))
    }

    /// An application credential, by ID or by name with its owner.
    fn application_credential(&self, ignored: &mut Vec<Notice>) -> Result<Method, Error> {
        let g = &self.global;
        if g.application_credential_secret.0.is_empty() {
            return Err(self.global_error(
                if g.application_credential_id.is_empty() {
                    "application-credential-name"
                } else {
                    "application-credential-id"
                },
                "needs application-credential-secret",
            ));
        }
        let method = if !g.application_credential_id.is_empty() {
            self.ignore(
                ignored,
                &[(
                    "application-credential-name",
                    !g.application_credential_name.is_empty(),
                )],
                "ignored: application-credential-id names the credential",
            );
            Method::ApplicationCredential {
                id: Some(g.application_credential_id.clone()),
                name: None,
                user: None,
                secret: g.application_credential_secret.clone(),
            }
        } else if !g.application_credential_name.is_empty() {
            // gophercloud: the user by ID, else by name in its domain (an ID wins; the
            // domain from user-domain-*/domain-* field by field, as clientconfig fills it).
            let user = if !g.user_id.is_empty() {
                UserRef::Id(g.user_id.clone())
            } else if !g.username.is_empty() {
                let id = or(&g.user_domain_id, &g.domain_id);
                let name = or(&g.user_domain_name, &g.domain_name);
                let Some(domain) = first_domain(id, name) else {
                    return Err(self.global_error(
                        "username",
                        "needs the user's domain for an application credential named by application-credential-name: user-domain-name or user-domain-id (or domain-name or domain-id)",
                    ));
                };
                UserRef::Name {
                    name: g.username.clone(),
                    domain: Some(domain),
                }
            } else {
                return Err(self.global_error(
                    "application-credential-name",
                    "needs its owner: user-id, or username with its domain (or use application-credential-id)",
                ));
            };
            Method::ApplicationCredential {
                id: None,
                name: Some(g.application_credential_name.clone()),
                user: Some(user),
                secret: g.application_credential_secret.clone(),
            }
        } else {
            return Err(self.global_error(
                "application-credential-secret",
                "needs application-credential-id (or application-credential-name)",
            ));
        };
        self.ignore(
            ignored,
            &[
                ("password", !g.password.0.is_empty()),
                ("token", !g.token.0.is_empty()),
                ("tenant-id", !g.tenant_id.is_empty()),
                ("tenant-name", !g.tenant_name.is_empty()),
            ],
            "ignored: the application credential authenticates and carries its own project",
        );
        Ok(method)
    }

    /// Notes each of `keys` that is set as ignored, for `why`.
    fn ignore(&self, notices: &mut Vec<Notice>, keys: &[(&str, bool)], why: &str) {
        for (key, set) in keys {
            if *set {
                self.note(notices, &format!("[Global] {key}"), why);
            }
        }
    }

    /// The user of a password (or a trust without a trustee): `user-id`, else `username` in
    /// its domain (`user-domain-*`, else `domain-*`; an ID wins over a name).
    fn user(&self, notices: &mut Vec<Notice>) -> Result<UserRef, Error> {
        let g = &self.global;
        if !g.user_id.is_empty() {
            self.ignore(
                notices,
                &[("username", !g.username.is_empty())],
                "ignored: user-id names the user",
            );
            return Ok(UserRef::Id(g.user_id.clone()));
        }
        if g.username.is_empty() {
            return Err(self.global_error("username", "is required (or user-id) with a password"));
        }
        let domain = first_domain(&g.user_domain_id, &g.user_domain_name)
            .or_else(|| first_domain(&g.domain_id, &g.domain_name));
        let Some(domain) = domain else {
            return Err(self.global_error(
                "username",
                "needs the user's domain: user-domain-name or user-domain-id (or domain-name or domain-id)",
            ));
        };
        Ok(UserRef::Name {
            name: g.username.clone(),
            domain: Some(domain),
        })
    }

    /// gophercloud's clientconfig scope: a project by ID, or by name in its domain (the
    /// domain's ID wins over its name, each from tenant-domain-*, else domain-*, field by
    /// field); else a domain (domain-id, else domain-name); else none.
    fn scope(&self) -> Result<Scope, Error> {
        let g = &self.global;
        if !g.tenant_id.is_empty() {
            return Ok(Scope::Project(ProjectRef::Id(g.tenant_id.clone())));
        }
        if !g.tenant_name.is_empty() {
            let id = or(&g.tenant_domain_id, &g.domain_id);
            let name = or(&g.tenant_domain_name, &g.domain_name);
            let Some(domain) = first_domain(id, name) else {
                return Err(self.global_error(
                    "tenant-name",
                    "needs the project's domain: tenant-domain-name or tenant-domain-id (or domain-name or domain-id)",
                ));
            };
            return Ok(Scope::Project(ProjectRef::Name {
                name: g.tenant_name.clone(),
                domain: Some(domain),
            }));
        }
        Ok(first_domain(&g.domain_id, &g.domain_name).map_or(Scope::Implied, Scope::Domain))
    }
}

/// `a` unless empty, else `b`.
fn or<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

/// A domain by ID, else by name.
fn first_domain(id: &str, name: &str) -> Option<DomainRef> {
    if !id.is_empty() {
        Some(DomainRef::Id(id.to_owned()))
    } else if !name.is_empty() {
        Some(DomainRef::Name(name.to_owned()))
    } else {
        None
    }
}

/// OCCM's `CheckMetadataSearchOrder`: one or two of `configDrive` and `metadataService`,
/// comma-separated (blanks around each allowed).
fn check_search_order(order: &str) -> Result<(), String> {
    if order.is_empty() {
        return Err("cannot be empty".into());
    }
    let elements: Vec<&str> = order.split(',').collect();
    if elements.len() > 2 {
        return Err(format!("{order:?} has more than 2 elements"));
    }
    for element in elements {
        let element = element.trim();
        if !matches!(element, "configDrive" | "metadataService") {
            return Err(format!(
                "{element:?} in {order:?} is not configDrive or metadataService"
            ));
        }
    }
    Ok(())
}

/// OCCM's `buildAddressSortOrderList`: the items split on commas and blanks, each a CIDR (its
/// network, as Go's `net.ParseCIDR`), and the items that are not, which OCCM ignores.
fn address_sort_order(text: &str) -> (Vec<IpNet>, Vec<String>) {
    let mut cidrs = Vec::new();
    let mut invalid = Vec::new();
    for item in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
    {
        match item.parse::<IpNet>() {
            Ok(net) => cidrs.push(net.trunc()),
            Err(_) => invalid.push(item.to_owned()),
        }
    }
    (cidrs, invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `[Global]` that authenticates, for tests about other keys.
    const AUTH: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\nregion = RegionOne\nuser-id = u1\npassword = p\n";

    fn conf(text: &str) -> CloudConf {
        parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn config(text: &str) -> OpenStackConfig {
        conf(text).to_config(false).unwrap_or_else(|e| panic!("{e}"))
    }

    fn credentials(global: &str) -> Credentials {
        config(&format!(
            "[Global]\nauth-url = http://auth.url\nregion = RegionOne\n{global}"
        ))
        .credentials
    }

    /// The error of parsing and converting `text`.
    fn error(text: &str) -> Error {
        match parse(text) {
            Err(e) => e,
            Ok(c) => c.to_config(false).expect_err("refused"),
        }
    }

    #[track_caller]
    fn assert_error(text: &str, line: Option<usize>, key: &str, needle: &str) {
        let e = error(text);
        assert_eq!((e.line, e.key.as_deref()), (line, Some(key)), "{e}");
        assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
    }

    fn notices(text: &str) -> Vec<String> {
        conf(text).notices().iter().map(ToString::to_string).collect()
    }

    fn secret(s: &str) -> Secret {
        Secret(s.into())
    }

    fn name_in(name: &str, domain: DomainRef) -> UserRef {
        UserRef::Name {
            name: name.into(),
            domain: Some(domain),
        }
    }

    /// OCCM's `TestReadConfig` (a missing reader is an error; leading blanks are fine).
    #[test]
    fn occm_read_config() {
        let c = conf(
            "
 [Global]
 auth-url = http://auth.url
 user-id = user
 password = mypass
 tenant-name = demo
 tenant-domain-name = Default
 region = RegionOne
 [LoadBalancer]
 create-monitor = yes
 monitor-delay = 1m
 monitor-timeout = 30s
 monitor-max-retries = 1
 monitor-max-retries-down = 3
 [Metadata]
 search-order = configDrive, metadataService
 ",
        );
        let g = &c.global;
        assert_eq!(g.auth_url, "http://auth.url");
        assert_eq!(g.user_id, "user");
        assert_eq!(g.password, secret("mypass"));
        assert_eq!(g.tenant_name, "demo");
        assert_eq!(g.tenant_domain_name, "Default");
        assert_eq!(g.region, "RegionOne");
        let lb = &c.load_balancer;
        assert!(lb.create_monitor);
        assert_eq!(lb.monitor_delay, Duration::from_secs(60));
        assert_eq!(lb.monitor_timeout, Duration::from_secs(30));
        assert_eq!((lb.monitor_max_retries, lb.monitor_max_retries_down), (1, 3));
        assert_eq!(c.metadata.search_order, "configDrive, metadataService");
        let cfg = c.to_config(false).unwrap();
        assert_eq!(
            cfg.credentials.method,
            Method::Password {
                user: UserRef::Id("user".into()),
                password: secret("mypass")
            }
        );
        assert_eq!(
            cfg.credentials.scope,
            Scope::Project(ProjectRef::Name {
                name: "demo".into(),
                domain: Some(DomainRef::Name("Default".into()))
            })
        );

        let e = read(Path::new("/nonexistent/cloud.conf")).unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent/cloud.conf") && e.message.contains("cannot read it"),
            "{e}"
        );
    }

    /// OCCM's `TestToAuthOptions`: no project, so the domain is the scope. (OCCM's case sets
    /// both `username` and `user-id`, which gophercloud refuses at authentication; `user-id`
    /// names the user here, and the notice says `username` is ignored.)
    #[test]
    fn occm_to_auth_options() {
        let global = "username = user\npassword = pass\ndomain-name = local\nuser-id = user\n";
        let c = credentials(global);
        assert_eq!(c.auth_url, "http://auth.url");
        assert_eq!(
            c.method,
            Method::Password {
                user: UserRef::Id("user".into()),
                password: secret("pass")
            }
        );
        assert_eq!(c.scope, Scope::Domain(DomainRef::Name("local".into())));
        let c = credentials(&format!("{global}domain-id = 2a73b8f597c04551a0fdc8e95544be8a\n"));
        assert_eq!(
            c.scope,
            Scope::Domain(DomainRef::Id("2a73b8f597c04551a0fdc8e95544be8a".into()))
        );
        let shown = notices(&format!(
            "[Global]\nauth-url = http://auth.url\nregion = r\n{global}"
        ));
        assert!(
            shown
                .iter()
                .any(|n| n.contains("[Global] username (ignored: user-id names the user)")),
            "{shown:?}"
        );
    }

    /// OCCM's `TestToAuth3Options`: the project by name, its domain from tenant-domain-name and,
    /// field by field, domain-id; gophercloud sends the domain's ID when it has both.
    #[test]
    fn occm_to_auth3_options() {
        let c = credentials(
            "username = user\npassword = pass\ndomain-id = 2a73b8f597c04551a0fdc8e95544be8a\ndomain-name = local\n\
             user-id = user\ntenant-name = demo\ntenant-domain-name = Default\n",
        );
        assert_eq!(
            c.method,
            Method::Password {
                user: UserRef::Id("user".into()),
                password: secret("pass")
            }
        );
        assert_eq!(
            c.scope,
            Scope::Project(ProjectRef::Name {
                name: "demo".into(),
                domain: Some(DomainRef::Id("2a73b8f597c04551a0fdc8e95544be8a".into()))
            })
        );
        // By username, the user's domain comes from domain-*, the ID winning.
        let c = credentials(
            "username = user\npassword = pass\ndomain-id = 2a73\ndomain-name = local\ntenant-name = demo\n",
        );
        assert_eq!(
            c.method,
            Method::Password {
                user: name_in("user", DomainRef::Id("2a73".into())),
                password: secret("pass")
            }
        );
    }

    /// OCCM's `TestToAuth3OptionsScope`.
    #[test]
    fn occm_to_auth3_options_scope() {
        let base = "username = user\npassword = pass\ndomain-id = 2a73b8f597c04551a0fdc8e95544be8a\ndomain-name = local\nuser-id = user\n";
        let project = |name: &str, domain: DomainRef| {
            Scope::Project(ProjectRef::Name {
                name: name.into(),
                domain: Some(domain),
            })
        };
        // domain-* when tenant-domain-* is not set.
        assert_eq!(
            credentials(&format!("{base}tenant-name = demo\n")).scope,
            project("demo", DomainRef::Id("2a73b8f597c04551a0fdc8e95544be8a".into()))
        );
        assert_eq!(
            credentials("user-id = u\npassword = p\ndomain-name = local\ntenant-name = demo\n").scope,
            project("demo", DomainRef::Name("local".into()))
        );
        // tenant-domain-* when set.
        assert_eq!(
            credentials(&format!(
                "{base}tenant-name = demo\ntenant-domain-name = Default\ntenant-domain-id = default\n"
            ))
            .scope,
            project("demo", DomainRef::Id("default".into()))
        );
        assert_eq!(
            credentials("user-id = u\npassword = p\ndomain-name = local\ntenant-name = demo\ntenant-domain-name = Default\n").scope,
            project("demo", DomainRef::Name("Default".into()))
        );
        // No domain at all with a project ID.
        assert_eq!(
            credentials(&format!(
                "{base}tenant-id = 7808db451cfc43eaa9acda7d67da8cf1\ntenant-domain-name = Default\ntenant-domain-id = default\n"
            ))
            .scope,
            Scope::Project(ProjectRef::Id("7808db451cfc43eaa9acda7d67da8cf1".into()))
        );
        // Nothing: the user's default project.
        assert_eq!(credentials("user-id = u\npassword = p\n").scope, Scope::Implied);
    }

    #[test]
    fn a_trust_replaces_the_user_with_the_trustee() {
        let c = credentials(
            "trust-id = t1\ntrustee-id = tee\ntrustee-password = tp\nuser-id = u\npassword = p\ntenant-name = x\ndomain-name = d\ntoken = tok\n",
        );
        assert_eq!(
            c.method,
            Method::Trust {
                trust_id: "t1".into(),
                user: UserRef::Id("tee".into()),
                password: secret("tp")
            }
        );
        assert_eq!(c.scope, Scope::Implied);
        // Without a trustee: the user and its password.
        let c = credentials("trust-id = t1\nusername = u\npassword = p\nuser-domain-name = Default\n");
        assert_eq!(
            c.method,
            Method::Trust {
                trust_id: "t1".into(),
                user: name_in("u", DomainRef::Name("Default".into())),
                password: secret("p")
            }
        );
        assert_error(
            "[Global]\nauth-url = a\nregion = r\ntrust-id = t1\ntrustee-id = tee\n",
            Some(5 - 1),
            "[Global] trust-id",
            "needs the trustee's password",
        );
    }

    #[test]
    fn application_credentials_by_id_or_by_name_with_the_user() {
        let c = credentials(
            "application-credential-id = ac\napplication-credential-name = n\napplication-credential-secret = s\npassword = p\ntenant-name = x\n",
        );
        assert_eq!(
            c.method,
            Method::ApplicationCredential {
                id: Some("ac".into()),
                name: None,
                user: None,
                secret: secret("s")
            }
        );
        assert_eq!(c.scope, Scope::Implied);
        let c = credentials(
            "application-credential-name = n\napplication-credential-secret = s\nuser-id = u\nusername = x\n",
        );
        assert_eq!(
            c.method,
            Method::ApplicationCredential {
                id: None,
                name: Some("n".into()),
                user: Some(UserRef::Id("u".into())),
                secret: secret("s")
            }
        );
        // By name with the user's name: its domain field by field, the ID winning (gophercloud).
        let c = credentials(
            "application-credential-name = n\napplication-credential-secret = s\nusername = x\nuser-domain-name = Default\ndomain-id = did\n",
        );
        assert_eq!(
            c.method,
            Method::ApplicationCredential {
                id: None,
                name: Some("n".into()),
                user: Some(name_in("x", DomainRef::Id("did".into()))),
                secret: secret("s")
            }
        );
        let base = "[Global]\nauth-url = a\nregion = r\n";
        assert_error(
            &format!("{base}application-credential-id = ac\n"),
            Some(4),
            "[Global] application-credential-id",
            "needs application-credential-secret",
        );
        assert_error(
            &format!("{base}application-credential-secret = s\n"),
            Some(4),
            "[Global] application-credential-secret",
            "needs application-credential-id",
        );
        assert_error(
            &format!("{base}application-credential-name = n\napplication-credential-secret = s\n"),
            Some(4),
            "[Global] application-credential-name",
            "needs its owner",
        );
        assert_error(
            &format!(
                "{base}application-credential-name = n\napplication-credential-secret = s\nusername = x\n"
            ),
            Some(6),
            "[Global] username",
            "needs the user's domain",
        );
        let shown = notices(&format!(
            "{base}application-credential-id = ac\napplication-credential-secret = s\npassword = p\n"
        ));
        assert!(
            shown
                .iter()
                .any(|n| n.starts_with("line 6: [Global] password (ignored")),
            "{shown:?}"
        );
    }

    #[test]
    fn a_token_keeps_the_scope_and_ignores_the_user() {
        let c = credentials("token = tok\nusername = u\ntenant-id = p1\n");
        assert_eq!(c.method, Method::Token { token: secret("tok") });
        assert_eq!(c.scope, Scope::Project(ProjectRef::Id("p1".into())));
    }

    #[test]
    fn passwords_by_user_name_need_a_domain() {
        let c =
            credentials("username = u\npassword = p\nuser-domain-id = ud\ndomain-name = d\ntenant-id = t\n");
        assert_eq!(
            c.method,
            Method::Password {
                user: name_in("u", DomainRef::Id("ud".into())),
                password: secret("p")
            }
        );
        // domain-* also names the user's domain with a domain scope.
        let c = credentials("username = u\npassword = p\ndomain-name = d\n");
        assert_eq!(
            (c.method, c.scope),
            (
                Method::Password {
                    user: name_in("u", DomainRef::Name("d".into())),
                    password: secret("p")
                },
                Scope::Domain(DomainRef::Name("d".into()))
            )
        );
        let base = "[Global]\nauth-url = a\nregion = r\n";
        assert_error(
            &format!("{base}username = u\npassword = p\n"),
            Some(4),
            "[Global] username",
            "needs the user's domain",
        );
        assert_error(
            &format!("{base}password = p\n"),
            Some(1),
            "[Global] username",
            "is required (or user-id)",
        );
        assert_error(
            &format!("{base}user-id = u\npassword = p\ntenant-name = t\n"),
            Some(6),
            "[Global] tenant-name",
            "needs the project's domain",
        );
        assert_error(
            &format!("{base}user-id = u\n"),
            Some(1),
            "[Global] password",
            "no credentials",
        );
    }

    #[test]
    fn every_default_as_occm() {
        let c = config(AUTH);
        assert_eq!(c.credentials.auth_url, "https://keystone.example:5000/v3");
        assert_eq!(c.credentials.region, "RegionOne");
        assert_eq!(c.credentials.interface, Interface::Public);
        assert_eq!(c.credentials.tls, Tls::default());
        assert_eq!(c.credentials.request_timeout, Duration::from_secs(60));
        assert_eq!(c.networking, Networking::default());
        assert_eq!(c.route, Route::default());
        assert!(!c.regional);
        let lb = LoadBalancerSettings::default();
        assert_eq!(c.load_balancer, lb);
        assert!(lb.enabled && lb.cascade_delete);
        assert!(!lb.create_monitor && !lb.manage_security_groups && !lb.internal_lb);
        assert!(!lb.enable_ingress_hostname && !lb.provider_requires_serial_api_calls);
        assert_eq!(
            (lb.lb_provider.as_str(), lb.lb_method.as_str()),
            ("amphora", "ROUND_ROBIN")
        );
        assert_eq!(
            (lb.monitor_delay, lb.monitor_timeout),
            (Duration::from_secs(5), Duration::from_secs(3))
        );
        assert_eq!((lb.monitor_max_retries, lb.monitor_max_retries_down), (1, 3));
        assert_eq!(
            (lb.ingress_hostname_suffix.as_str(), lb.max_shared_lb),
            ("nip.io", 2)
        );
        assert_eq!(
            (lb.container_store.as_str(), lb.node_selector.as_str()),
            ("barbican", "")
        );
        assert_eq!(lb.subnet_id, None);
        assert_eq!(conf(AUTH).metadata.search_order, DEFAULT_SEARCH_ORDER);
        // An empty search-order is the default too; a zero request-timeout is 60 s.
        let c = conf(&format!(
            "{AUTH}[Metadata]\nsearch-order =\nrequest-timeout = 0s\n"
        ));
        assert_eq!(c.metadata.search_order, DEFAULT_SEARCH_ORDER);
        assert_eq!(
            c.to_config(true).unwrap().credentials.request_timeout,
            Duration::from_secs(60)
        );
        assert!(c.to_config(true).unwrap().regional);
        assert!(conf(AUTH).notices().is_empty(), "{:?}", conf(AUTH).notices());
    }

    #[test]
    fn regional_only_for_exactly_true() {
        assert!(regional_from_env(Some("true")));
        for other in [None, Some(""), Some("True"), Some("1"), Some("yes")] {
            assert!(!regional_from_env(other), "{other:?}");
        }
    }

    #[test]
    fn every_key_is_read_and_typed() {
        let c = config(&format!(
            "{AUTH}os-endpoint-type = internal\nca-file = /etc/ca.pem\ntls-insecure = true\ncert-file = /c.pem\nkey-file = /k.pem\n\
             use-clouds = false\n\
             [Networking]\nipv6-support-disabled = yes\npublic-network-name = pub1\npublic-network-name = pub2\n\
             internal-network-name = a\ninternal-network-name\ninternal-network-name = b\n\
             address-sort-order = 10.0.0.5/8, 2001:db8::/32 ,bad 192.168.0.0/16\n\
             [LoadBalancer]\nenabled = true\nlb-version = v2\nsubnet-id = s\nmember-subnet-id = ms\nnetwork-id = n\n\
             floating-network-id = fn\nfloating-subnet-id = fs\nfloating-subnet = fsn\nfloating-subnet-tags = t1,t2\n\
             lb-method = SOURCE_IP_PORT\nlb-provider = ovn\ncreate-monitor\nmonitor-delay = 1m30s\nmonitor-timeout = 1500ms\n\
             monitor-max-retries = 0x2\nmonitor-max-retries-down = 5\nmanage-security-groups = on\ninternal-lb = 1\n\
             node-selector = \"env=prod,tier\"\ncascade-delete = false\nflavor-id = f\navailability-zone = az\n\
             enable-ingress-hostname = true\ningress-hostname-suffix = example.net\nmax-shared-lb = 5\n\
             container-store = external\nprovider-requires-serial-api-calls = TRUE\ndefault-tls-container-ref = ref\n\
             subnet-id =\n\
             [LoadBalancerClass \"internal\"]\nfloating-network-id = cfn\nfloating-subnet-id = cfs\nfloating-subnet = cf\n\
             floating-subnet-tags = ct\nnetwork-id = cn\nsubnet-id = cs\nmember-subnet-id = cms\n\
             [LoadBalancerClass]\n[loadbalancerclass \"other\"]\n\
             [Route]\nrouter-id = r1\n\
             [Metadata]\nsearch-order = metadataService\nrequest-timeout = 2m\n",
        ));
        let cred = &c.credentials;
        assert_eq!(cred.interface, Interface::Internal);
        assert_eq!(
            cred.tls,
            Tls {
                ca_file: Some("/etc/ca.pem".into()),
                ca_pem: None,
                insecure: true,
                client_cert: Some(("/c.pem".into(), "/k.pem".into()))
            }
        );
        assert_eq!(cred.request_timeout, Duration::from_secs(120));
        assert_eq!(
            c.networking,
            Networking {
                ipv6_support_disabled: true,
                public_network_names: vec!["pub1".into(), "pub2".into()],
                internal_network_names: vec!["b".into()],
                address_sort_order: vec![
                    "10.0.0.0/8".parse().unwrap(),
                    "2001:db8::/32".parse().unwrap(),
                    "192.168.0.0/16".parse().unwrap()
                ],
            }
        );
        assert_eq!(c.route.router_id.as_deref(), Some("r1"));
        let mut classes = BTreeMap::new();
        classes.insert(
            "internal".to_owned(),
            LbClass {
                floating_network_id: Some("cfn".into()),
                floating_subnet_id: Some("cfs".into()),
                floating_subnet: Some("cf".into()),
                floating_subnet_tags: Some("ct".into()),
                network_id: Some("cn".into()),
                subnet_id: Some("cs".into()),
                member_subnet_id: Some("cms".into()),
            },
        );
        classes.insert(String::new(), LbClass::default());
        classes.insert("other".to_owned(), LbClass::default());
        assert_eq!(
            c.load_balancer,
            LoadBalancerSettings {
                enabled: true,
                // The last value wins: empty, so unset.
                subnet_id: None,
                member_subnet_id: Some("ms".into()),
                network_id: Some("n".into()),
                floating_network_id: Some("fn".into()),
                floating_subnet_id: Some("fs".into()),
                floating_subnet: Some("fsn".into()),
                floating_subnet_tags: Some("t1,t2".into()),
                lb_method: "SOURCE_IP_PORT".into(),
                lb_provider: "ovn".into(),
                create_monitor: true,
                monitor_delay: Duration::from_secs(90),
                monitor_timeout: Duration::from_millis(1500),
                monitor_max_retries: 2,
                monitor_max_retries_down: 5,
                manage_security_groups: true,
                internal_lb: true,
                node_selector: "env=prod,tier".into(),
                cascade_delete: false,
                flavor_id: Some("f".into()),
                availability_zone: Some("az".into()),
                enable_ingress_hostname: true,
                ingress_hostname_suffix: "example.net".into(),
                max_shared_lb: 5,
                container_store: "external".into(),
                provider_requires_serial_api_calls: true,
                default_tls_container_ref: Some("ref".into()),
                classes,
            }
        );
    }

    #[test]
    fn names_are_case_insensitive_and_repeats_merge() {
        let c = config(
            "[GLOBAL]\nAUTH-URL = http://a\nRegion = r1\n[global]\nUser-Id = u\nPASSWORD = p\nregion = r2\n\
             [networking]\nPublic-Network-Name = x\n[NETWORKING]\npublic-network-name = y\n",
        );
        assert_eq!(c.credentials.region, "r2");
        assert_eq!(c.networking.public_network_names, ["x", "y"]);
    }

    #[test]
    fn refused_by_name_at_start() {
        let base = "[Global]\nauth-url = http://a/v3\nregion = r\nuser-id = u\npassword = p\n";
        for (extra, key, needle) in [
            (
                "os-endpoint-type = publicURL",
                "[Global] os-endpoint-type",
                "public (the default), internal or admin",
            ),
            (
                "os-endpoint-type = Internal",
                "[Global] os-endpoint-type",
                "not an endpoint interface",
            ),
            (
                "[Metadata]\nsearch-order = configDrive,metadataService,configDrive",
                "[Metadata] search-order",
                "more than 2",
            ),
            (
                "[Metadata]\nsearch-order = configdrive",
                "[Metadata] search-order",
                "not configDrive or metadataService",
            ),
            (
                "[Metadata]\nsearch-order = configDrive,",
                "[Metadata] search-order",
                "\"\" in",
            ),
            (
                "[LoadBalancer]\nlbclasses = x",
                "[LoadBalancer] lbclasses",
                "[LoadBalancerClass \"name\"]",
            ),
        ] {
            let text = format!("{base}{extra}\n");
            let e = error(&text);
            let line = text.lines().count();
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(line), Some(key)),
                "{extra}: {e}"
            );
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        // Accepted: use-clouds off, empty clouds keys, search-order of one or two, lb-version
        // with load balancers off (OCCM checks it only when it starts them), an inline CA.
        for extra in [
            "use-clouds = false\nclouds-file =\ncloud = \"\"",
            "cafilecontents = PEM",
            "[Metadata]\nsearch-order = metadataService",
            "[Metadata]\nsearch-order = \" metadataService , configDrive \"",
            "[LoadBalancer]\nenabled = false\nlb-version = v9",
            "[LoadBalancer]\nlb-version = v2",
            "[LoadBalancer]\nlb-version =",
        ] {
            conf(&format!("{base}{extra}\n"))
                .to_config(false)
                .unwrap_or_else(|e| panic!("{extra}: {e}"));
        }
        assert_error(
            "[Global]\nregion = r\nuser-id = u\npassword = p\n",
            Some(1),
            "[Global] auth-url",
            "is required",
        );
        // No region: the client settles it from the catalog.
        assert_eq!(
            config("[Global]\nauth-url = http://a\nuser-id = u\npassword = p\n")
                .credentials
                .region,
            ""
        );
        assert_error("", None, "[Global] auth-url", "is required");
        assert_error(
            "[Global]\nauth-url = http://keystone:5000/v2.0\nregion = r\nuser-id = u\npassword = p\n",
            Some(2),
            "[Global] auth-url",
            "Keystone v2.0",
        );
    }

    #[test]
    fn malformed_values_name_the_line_and_key() {
        for (extra, key, needle) in [
            (
                "[LoadBalancer]\nmonitor-delay = 5",
                "[LoadBalancer] monitor-delay",
                "without a unit",
            ),
            (
                "[LoadBalancer]\nmonitor-timeout = -1s",
                "[LoadBalancer] monitor-timeout",
                "negative",
            ),
            (
                "[LoadBalancer]\nmonitor-delay",
                "[LoadBalancer] monitor-delay",
                "needs a value",
            ),
            (
                "[LoadBalancer]\nmonitor-max-retries = -1",
                "[LoadBalancer] monitor-max-retries",
                "out of range",
            ),
            (
                "[LoadBalancer]\nmax-shared-lb = two",
                "[LoadBalancer] max-shared-lb",
                "not an integer",
            ),
            (
                "[LoadBalancer]\nenabled = maybe",
                "[LoadBalancer] enabled",
                "not a boolean",
            ),
            (
                "[Networking]\nipv6-support-disabled = 2",
                "[Networking] ipv6-support-disabled",
                "not a boolean",
            ),
            (
                "[Metadata]\nrequest-timeout = 60",
                "[Metadata] request-timeout",
                "without a unit",
            ),
            ("[Route]\nrouter-id", "[Route] router-id", "needs a value"),
            (
                "[LoadBalancerClass \"c\"]\nsubnet-id",
                "[LoadBalancerClass \"c\"] subnet-id",
                "needs a value",
            ),
            ("auth-url", "[Global] auth-url", "needs a value"),
            ("use-clouds = sure", "[Global] use-clouds", "not a boolean"),
        ] {
            let text = format!("{AUTH}{extra}\n");
            let e = error(&text);
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(text.lines().count()), Some(key)),
                "{extra}: {e}"
            );
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        // Syntax errors too; the first error in file order wins.
        assert_error(
            &format!("{AUTH}region = \"x\n"),
            Some(6),
            "region",
            "no closing quote",
        );
        assert_error(
            &format!("{AUTH}[LoadBalancer]\nenabled = maybe\n[Route\n"),
            Some(7),
            "[LoadBalancer] enabled",
            "not a boolean",
        );
        // Keys of ignored sections are not checked, as gcfg does not set them.
        conf(&format!(
            "{AUTH}[Global \"x\"]\nuse-clouds = sure\n[Other]\nenabled = maybe\n"
        ));
    }

    #[test]
    fn notices_name_what_has_no_effect() {
        let shown = notices(&format!(
            "{AUTH}tls-insecure = True\ncert-file = /c.pem\nfoo = 1\n[Networking]\naddress-sort-order = 10.0.0.0/8,nope\n\
             [LoadBalancer]\nlb-provider = vmware\ncontainer-store = vault\n[Metadata]\nsearch-order = configDrive\n[Extra]\n[Route \"x\"]\n"
        ));
        let expected = [
            "line 6: [Global] tls-insecure (\"True\" keeps certificate verification on",
            "line 7: [Global] cert-file (has no effect without key-file",
            "line 8: [Global] foo (unknown key",
            "line 10: [Networking] address-sort-order (\"nope\" is not a CIDR",
            "line 12: [LoadBalancer] lb-provider (\"vmware\" is not a provider OCCM knows",
            "line 13: [LoadBalancer] container-store (\"vault\" is not a store OCCM knows",
            "line 15: [Metadata] search-order (validated as OCCM validates it, but it has no effect",
            "line 16: [Extra] (unknown section",
            "line 17: [Route \"x\"] ([Route] takes no subsection",
        ];
        assert_eq!(shown.len(), expected.len(), "{shown:#?}");
        for (shown, expected) in shown.iter().zip(expected) {
            assert!(
                shown.starts_with(expected),
                "{shown:?} does not start with {expected:?}"
            );
        }
        let c = config(&format!("{AUTH}tls-insecure = True\n"));
        assert!(!c.credentials.tls.insecure, "only exactly true");
    }

    /// A setting that concerns load balancers alone switches them off, naming it and its line;
    /// the rest of the config stands.
    #[test]
    fn a_load_balancer_setting_switches_load_balancers_off_alone() {
        let base =
            "[Global]\nauth-url = http://a/v3\nregion = r\nuser-id = u\npassword = p\n[LoadBalancer]\n";
        let c = config(&format!("{base}lb-version = v1\n"));
        let reason = &c.switched_off[&provider::Capability::LoadBalancers];
        assert!(
            reason.contains("[LoadBalancer] lb-version (line 7)") && reason.contains("\"v1\""),
            "{reason}"
        );
        assert_eq!(c.switched_off.len(), 1);
        assert_eq!(c.credentials.region, "r");
        for fine in ["lb-version = v2", "enabled = false\nlb-version = v1", ""] {
            assert!(
                config(&format!("{base}{fine}\n")).switched_off.is_empty(),
                "{fine}"
            );
        }
    }

    /// cloud.conf + clouds.yaml as OCCM merges them: the file found on clientconfig's path,
    /// the cloud picked, cloud.conf's values winning; what has no effect in the notices.
    #[test]
    fn clouds_yaml_fills_what_cloud_conf_leaves_empty() {
        const CLOUDS: &str = "clouds:\n  openstack:\n    auth:\n      auth_url: https://k:5000/v3\n      username: ccm\n      password: from-yaml\n      project_name: k8s\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: internal\n    cacert: /etc/pki/ca.pem\n  other:\n    region_name: RegionTwo\n";
        let env = CloudsEnv {
            client_config_file: None,
            cloud: None,
            cwd: Some("/run".into()),
            home: Some("/home/ccm".into()),
        };
        let files = |present: &'static [&'static str]| {
            move |p: &Path| -> std::io::Result<Option<String>> {
                Ok(present
                    .contains(&p.to_str().unwrap_or_default())
                    .then(|| CLOUDS.to_owned()))
            }
        };
        type Check = fn(&OpenStackConfig, &[String]);
        let rows: [(&str, &[&str], Check); 5] = [
            // OpenShift's cloud.conf: every credential in clouds.yaml.
            (
                "[Global]\nuse-clouds = true\nclouds-file = /etc/kubernetes/secret/clouds.yaml\ncloud = openstack\n",
                &["/etc/kubernetes/secret/clouds.yaml"],
                |c, notices| {
                    let creds = &c.credentials;
                    assert_eq!(creds.auth_url, "https://k:5000/v3");
                    assert_eq!(creds.region, "RegionOne");
                    assert_eq!(creds.interface, Interface::Internal);
                    assert_eq!(creds.tls.ca_file.as_deref(), Some(Path::new("/etc/pki/ca.pem")));
                    assert!(
                        matches!(&creds.method, Method::Password { password, .. } if password.0 == "from-yaml")
                    );
                    assert!(notices.is_empty(), "{notices:?}");
                },
            ),
            // cloud.conf wins, field by field.
            (
                "[Global]\nuse-clouds = true\ncloud = openstack\nregion = RegionTwo\npassword = from-conf\nos-endpoint-type = public\n",
                &["/etc/openstack/clouds.yaml"],
                |c, _| {
                    assert_eq!(c.credentials.region, "RegionTwo");
                    assert_eq!(c.credentials.interface, Interface::Public);
                    assert!(
                        matches!(&c.credentials.method, Method::Password { password, .. } if password.0 == "from-conf")
                    );
                    assert_eq!(c.credentials.auth_url, "https://k:5000/v3");
                },
            ),
            // The search path: the working directory before ~/.config and /etc; a clouds-file
            // that does not exist is passed over, as by OCCM, and said.
            (
                "[Global]\nuse-clouds = true\nclouds-file = /missing/clouds.yaml\ncloud = openstack\n",
                &["/run/clouds.yaml", "/etc/openstack/clouds.yaml"],
                |c, notices| {
                    assert_eq!(c.credentials.region, "RegionOne");
                    assert!(
                        notices
                            .iter()
                            .any(|n| n.contains("clouds-file") && n.contains("/run/clouds.yaml")),
                        "{notices:?}"
                    );
                },
            ),
            // `cloud` without use-clouds: merged too, and said.
            (
                "[Global]\ncloud = openstack\n",
                &["/home/ccm/.config/openstack/clouds.yaml"],
                |c, notices| {
                    assert_eq!(c.credentials.auth_url, "https://k:5000/v3");
                    assert!(
                        notices.iter().any(|n| n.contains("[Global] cloud")),
                        "{notices:?}"
                    );
                },
            ),
            // Neither: clouds.yaml is not read, however many exist.
            (
                "[Global]\nauth-url = http://a/v3\nuser-id = u\npassword = p\nclouds-file = /etc/openstack/clouds.yaml\n",
                &["/etc/openstack/clouds.yaml"],
                |c, notices| {
                    assert_eq!(c.credentials.auth_url, "http://a/v3");
                    assert_eq!(c.credentials.region, "");
                    assert!(
                        notices
                            .iter()
                            .any(|n| n.contains("has no effect without use-clouds")),
                        "{notices:?}"
                    );
                },
            ),
        ];
        for (text, present, check) in rows {
            let mut c = conf(text);
            c.merge_clouds_yaml(&env, files(present))
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            let notices: Vec<String> = c.notices().iter().map(ToString::to_string).collect();
            check(
                &c.to_config(false).unwrap_or_else(|e| panic!("{text}: {e}")),
                &notices,
            );
        }
        // Refused at start, naming the key: no file anywhere, no such cloud, several and none
        // named (OS_CLOUD names one).
        for (text, present, needle) in [
            (
                "[Global]\nuse-clouds = true\n",
                &[][..],
                "no clouds.yaml found; looked for /run/clouds.yaml, /home/ccm/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml",
            ),
            (
                "[Global]\nuse-clouds = true\ncloud = nope\n",
                &["/run/clouds.yaml"][..],
                "has no cloud \"nope\"; its clouds: openstack, other",
            ),
            (
                "[Global]\nuse-clouds = true\n",
                &["/run/clouds.yaml"][..],
                "has 2 clouds",
            ),
        ] {
            let mut c = conf(text);
            let e = c.merge_clouds_yaml(&env, files(present)).unwrap_err();
            assert_eq!(
                (e.line, e.key.as_deref()),
                (Some(2), Some("[Global] use-clouds")),
                "{e}"
            );
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
        let mut c = conf("[Global]\nuse-clouds = true\n");
        let named = CloudsEnv {
            cloud: Some("openstack".into()),
            ..env.clone()
        };
        c.merge_clouds_yaml(&named, files(&["/run/clouds.yaml"])).unwrap();
        assert_eq!(c.global.region, "RegionOne");
    }

    #[test]
    fn cafilecontents_is_the_ca_bundle_unless_ca_file_is_set() {
        let base = "[Global]\nauth-url = http://a/v3\nuser-id = u\npassword = p\n";
        let c = config(&format!(
            "{base}cafilecontents = \"-----BEGIN CERTIFICATE-----\\nMII\\n\"\n"
        ));
        assert_eq!(
            c.credentials.tls.ca_pem.as_deref(),
            Some("-----BEGIN CERTIFICATE-----\nMII\n")
        );
        let text = format!("{base}ca-file = /ca.pem\ncafilecontents = PEM\n");
        let c = config(&text);
        assert_eq!(c.credentials.tls.ca_pem, None);
        assert!(
            notices(&text)
                .iter()
                .any(|n| n.contains("cafilecontents") && n.contains("ca-file is set"))
        );
    }

    #[test]
    fn read_names_the_file() {
        let dir = std::env::temp_dir().join(format!("occm-cloud-conf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cloud.conf");
        std::fs::write(&path, format!("{AUTH}[LoadBalancer]\nmonitor-delay = 5\n")).unwrap();
        let shown = read(&path).unwrap_err().to_string();
        assert!(
            shown.contains(&format!(
                "{}, line 7, [LoadBalancer] monitor-delay",
                path.display()
            )),
            "{shown}"
        );
        std::fs::write(&path, AUTH).unwrap();
        read(&path).unwrap().to_config(false).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest::proptest! {
        /// Any text is read or refused with an error, never a panic; notices never panic.
        #[test]
        fn fuzz_cloud_conf_never_panics(text in "(\\[|\\]|\"|\\\\|=|;|#|\n|\r| |\t|,|/|[a-z0-9.-]{1,10}|Global|LoadBalancer|LoadBalancerClass|Networking|Metadata|Route|auth-url|region|user-id|username|password|trust-id|token|application-credential-id|application-credential-secret|tenant-name|domain-name|search-order|request-timeout|monitor-delay|address-sort-order|10.0.0.0/8|configDrive|metadataService|true|5s){0,60}") {
            match parse(&text) {
                Ok(c) => {
                    if let Err(e) = c.to_config(false) {
                        proptest::prop_assert!(e.key.is_some(), "{}", e);
                    }
                    let _ = c.notices();
                }
                Err(e) => proptest::prop_assert!(e.line.is_some(), "{}", e),
            }
        }
    }
}
