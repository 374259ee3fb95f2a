//! What a Service asks of its Octavia load balancer: its annotations and spec read as OCCM's
//! `checkService` and `makeSvcConf` read them (reference §3.3, §3.4), over the `[LoadBalancer]`
//! and `[LoadBalancerClass]` settings. Pure: what needs a cloud call to settle (the subnet of the
//! first node, the external network when none is configured, whether a floating subnet belongs
//! to its network) is left as `None` or a [`FloatingSubnet`] for the caller to resolve.
//!
//! # What OCCM accepts is accepted; what it ignores is ignored, and said
//! A Service that OCCM serves is served the same way after the switch: a value OCCM cannot read
//! (a boolean other than `true`/`false`, an integer `Atoi` refuses, a `proxy-protocol` other than
//! `true`/`false`/`v1`/`v2`) falls back to OCCM's default; a `loadbalancer.openstack.org/*` key
//! OCCM does not read is ignored; what the cloud's Octavia cannot do (listener timeouts below
//! API 2.1, flavors below 2.6, source ranges below 2.12, an availability zone below 2.14, or
//! the `ovn` provider) is left out. Where OCCM does so silently, each is a [`ServiceNotice`]
//! here, which the service controller tells the Service's owner once in a Warning event
//! (OCCM's own event reason where it has one); [`resolve_noting`] answers them.
//!
//! # Where this differs from OCCM, on purpose
//! - A `default-tls-container-ref` is checked in Barbican only before a listener is written
//!   with it (OCCM reads it on every sync): an unchanged Service costs no Barbican call.
//! - `lb-method` is checked against Octavia's algorithms before any write; OCCM sends it and
//!   emits `LoadBalancerLbMethodUnknown` when Octavia refuses it.
//! - Connection limits, timeouts and health-monitor values that Octavia's API would refuse are
//!   refused here, before any write, naming the annotation (OCCM's write fails).

use std::collections::{BTreeMap, BTreeSet};

use std::cell::RefCell;

use ipnet::IpNet;
use provider::{ExternalTrafficPolicy, ProviderError, ServiceNotice, ServiceSpec};

use crate::cloud_config::{LbClass, LoadBalancerSettings};

/// Prefix of OCCM's own annotations.
pub const PREFIX: &str = "loadbalancer.openstack.org/";

pub const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";
pub const LEGACY_SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
pub const NODE_SELECTOR: &str = "loadbalancer.openstack.org/node-selector";
pub const CONNECTION_LIMIT: &str = "loadbalancer.openstack.org/connection-limit";
pub const FLOATING_NETWORK_ID: &str = "loadbalancer.openstack.org/floating-network-id";
pub const FLOATING_SUBNET: &str = "loadbalancer.openstack.org/floating-subnet";
pub const FLOATING_SUBNET_ID: &str = "loadbalancer.openstack.org/floating-subnet-id";
pub const FLOATING_SUBNET_TAGS: &str = "loadbalancer.openstack.org/floating-subnet-tags";
pub const CLASS: &str = "loadbalancer.openstack.org/class";
pub const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";
pub const PORT_ID: &str = "loadbalancer.openstack.org/port-id";
pub const LB_METHOD: &str = "loadbalancer.openstack.org/lb-method";
pub const PROXY_PROTOCOL: &str = "loadbalancer.openstack.org/proxy-protocol";
pub const SUBNET_ID: &str = "loadbalancer.openstack.org/subnet-id";
pub const NETWORK_ID: &str = "loadbalancer.openstack.org/network-id";
pub const MEMBER_SUBNET_ID: &str = "loadbalancer.openstack.org/member-subnet-id";
pub const TIMEOUT_CLIENT_DATA: &str = "loadbalancer.openstack.org/timeout-client-data";
pub const TIMEOUT_MEMBER_CONNECT: &str = "loadbalancer.openstack.org/timeout-member-connect";
pub const TIMEOUT_MEMBER_DATA: &str = "loadbalancer.openstack.org/timeout-member-data";
pub const TIMEOUT_TCP_INSPECT: &str = "loadbalancer.openstack.org/timeout-tcp-inspect";
pub const X_FORWARDED_FOR: &str = "loadbalancer.openstack.org/x-forwarded-for";
pub const FLAVOR_ID: &str = "loadbalancer.openstack.org/flavor-id";
pub const AVAILABILITY_ZONE: &str = "loadbalancer.openstack.org/availability-zone";
pub const ENABLE_HEALTH_MONITOR: &str = "loadbalancer.openstack.org/enable-health-monitor";
pub const MONITOR_DELAY: &str = "loadbalancer.openstack.org/health-monitor-delay";
pub const MONITOR_TIMEOUT: &str = "loadbalancer.openstack.org/health-monitor-timeout";
pub const MONITOR_MAX_RETRIES: &str = "loadbalancer.openstack.org/health-monitor-max-retries";
pub const MONITOR_MAX_RETRIES_DOWN: &str = "loadbalancer.openstack.org/health-monitor-max-retries-down";
pub const HOSTNAME: &str = "loadbalancer.openstack.org/hostname";
pub const LOAD_BALANCER_ADDRESS: &str = "loadbalancer.openstack.org/load-balancer-address";
pub const LOAD_BALANCER_ID: &str = "loadbalancer.openstack.org/load-balancer-id";
pub const TLS_CONTAINER_REF: &str = "loadbalancer.openstack.org/default-tls-container-ref";

/// OCCM's annotations under [`PREFIX`] that this provider reads. Any other key under it is
/// ignored, as OCCM ignores it, with a notice.
const READ: &[&str] = &[
    NODE_SELECTOR,
    CONNECTION_LIMIT,
    FLOATING_NETWORK_ID,
    FLOATING_SUBNET,
    FLOATING_SUBNET_ID,
    FLOATING_SUBNET_TAGS,
    CLASS,
    KEEP_FLOATING_IP,
    PORT_ID,
    LB_METHOD,
    PROXY_PROTOCOL,
    SUBNET_ID,
    NETWORK_ID,
    MEMBER_SUBNET_ID,
    TIMEOUT_CLIENT_DATA,
    TIMEOUT_MEMBER_CONNECT,
    TIMEOUT_MEMBER_DATA,
    TIMEOUT_TCP_INSPECT,
    X_FORWARDED_FOR,
    FLAVOR_ID,
    AVAILABILITY_ZONE,
    ENABLE_HEALTH_MONITOR,
    MONITOR_DELAY,
    MONITOR_TIMEOUT,
    MONITOR_MAX_RETRIES,
    MONITOR_MAX_RETRIES_DOWN,
    HOSTNAME,
    TLS_CONTAINER_REF,
    // Written by OCCM with the address in use; an output, read by nobody.
    LOAD_BALANCER_ADDRESS,
    LOAD_BALANCER_ID,
];

/// Octavia's load-balancing algorithms (`lb_algorithm`).
pub const LB_METHODS: &[&str] = &["ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"];

/// What the cloud's Octavia can do (OCCM's `IsOctaviaFeatureSupported`, reference §3.12): from
/// the API version it reports and the provider (`ovn` does none of the gated features).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OctaviaFeatures {
    /// Tags on load balancers and listeners (2.5): shared load balancers need them.
    pub tags: bool,
    /// Listener timeouts (2.1).
    pub timeouts: bool,
    /// Flavors (2.6).
    pub flavors: bool,
    /// `allowed_cidrs` on listeners (2.12).
    pub vip_acl: bool,
    /// Availability zones (2.14).
    pub availability_zones: bool,
    /// HTTP monitors on UDP pools (2.16).
    pub http_monitors_on_udp: bool,
}

impl OctaviaFeatures {
    /// The features of Octavia API `major.minor` behind `lb_provider`.
    pub fn of(major: u32, minor: u32, lb_provider: &str) -> Self {
        let at_least = |m: u32| major > 2 || (major == 2 && minor >= m);
        let not_ovn = lb_provider != "ovn";
        Self {
            tags: at_least(5),
            timeouts: at_least(1) && not_ovn,
            flavors: at_least(6) && not_ovn,
            vip_acl: at_least(12) && not_ovn,
            availability_zones: at_least(14) && not_ovn,
            http_monitors_on_udp: at_least(16) && not_ovn,
        }
    }
}

/// PROXY protocol towards the members (`proxy-protocol`): the pool's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// `true` or `v1`: pool protocol `PROXY`.
    V1,
    /// `v2`: pool protocol `PROXYV2`.
    V2,
}

/// Which subnet of the external network a floating IP is taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloatingSubnet {
    /// Any: Neutron chooses.
    Any,
    /// This subnet (`floating-subnet-id`).
    Id(String),
    /// The first subnet of the network matching both: a name pattern (`floating-subnet`: a glob,
    /// `~regex`, `!` negates) and tags (`floating-subnet-tags`).
    Matching {
        name: Option<String>,
        tags: Option<String>,
    },
}

/// Where an external Service's floating IP comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Floating {
    /// The external network; `None`: detected (the first external network with an IPv4 subnet).
    pub network_id: Option<String>,
    /// Its subnet.
    pub subnet: FloatingSubnet,
}

/// The listener timeouts, in milliseconds (OCCM's defaults: 50000, 5000, 50000, 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub client_data: u32,
    pub member_connect: u32,
    pub member_data: u32,
    pub tcp_inspect: u32,
}

/// The health monitor of every pool (`enable-health-monitor`, else `create-monitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Monitor {
    /// Seconds between checks.
    pub delay: u32,
    /// Seconds a check may take.
    pub timeout: u32,
    /// Successes that bring a member up (1–10).
    pub max_retries: u32,
    /// Failures that bring a member down (1–10).
    pub max_retries_down: u32,
}

/// Everything one Service asks of its load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLbConf {
    /// No floating IP: the VIP on the tenant network is the address.
    pub internal: bool,
    /// `class`: the `[LoadBalancerClass]` section used, if any.
    pub class: Option<String>,
    /// The VIP's network (annotation, class, config); create-only.
    pub vip_network_id: Option<String>,
    /// The VIP's subnet (annotation, class, config); create-only.
    pub vip_subnet_id: Option<String>,
    /// An existing port to use as the VIP (`port-id`); create-only.
    pub vip_port_id: Option<String>,
    /// The members' subnet; `None` with no VIP network or subnet either: detected from the first
    /// node, as OCCM does.
    pub member_subnet_id: Option<String>,
    /// The floating IP of an external Service; `None` for an internal one.
    pub floating: Option<Floating>,
    /// `loadBalancerIP`: the floating IP to claim, or the VIP address of an internal Service.
    pub requested_ip: Option<String>,
    /// `keep-floatingip`: the floating IP survives the load balancer.
    pub keep_floating_ip: bool,
    /// `load-balancer-id`: the load balancer to use (shared, or adopted), instead of the one
    /// named after the Service.
    pub load_balancer_id: Option<String>,
    /// `connection-limit` (-1: none).
    pub connection_limit: i32,
    /// `lb-method`, else `[LoadBalancer] lb-method`.
    pub lb_method: String,
    /// `node-selector`, else the config's: every entry must match a node's labels (an empty
    /// value: the label exists).
    pub node_selector: BTreeMap<String, String>,
    /// `x-forwarded-for`: HTTP listener and pool with the header inserted.
    pub x_forwarded_for: bool,
    /// `proxy-protocol`.
    pub proxy_protocol: Option<ProxyProtocol>,
    /// The listener timeouts, when Octavia has them.
    pub timeouts: Option<Timeouts>,
    /// The listeners' `allowed_cidrs`, sorted, when Octavia has them.
    pub allowed_cidrs: Option<Vec<String>>,
    /// `flavor-id` (when Octavia has flavors); create-only.
    pub flavor_id: Option<String>,
    /// `availability-zone`; create-only.
    pub availability_zone: Option<String>,
    /// The pools' health monitor, when enabled.
    pub monitor: Option<Monitor>,
    /// `spec.healthCheckNodePort`, when the monitor is on and `externalTrafficPolicy: Local`:
    /// the monitor checks `/healthz` there over HTTP.
    pub health_check_node_port: Option<u16>,
    /// `sessionAffinity: ClientIP`: the pool's session persistence is `SOURCE_IP`.
    pub source_ip_persistence: bool,
    /// `hostname`: the status names it instead of an address.
    pub hostname: Option<String>,
    /// `default-tls-container-ref`, else the config's: every listener `TERMINATED_HTTPS` with
    /// this Barbican container or secret, its pool HTTP. Last, so that a Service without TLS
    /// keeps its fingerprint ([`super::converged`]).
    pub tls_container_ref: Option<String>,
}

/// The event reason of a value read as OCCM reads it, not as written (OCCM has none: it falls
/// back silently).
pub const VALUE_IGNORED: &str = "AnnotationValueIgnored";
/// The event reason of an unknown `loadbalancer.openstack.org/*` key (OCCM ignores it silently).
pub const KEY_IGNORED: &str = "AnnotationIgnored";
/// OCCM's event when Octavia cannot enforce the source ranges.
pub const SOURCE_RANGES_IGNORED: &str = "LoadBalancerSourceRangesIgnored";
/// OCCM's event when Octavia has no availability zones.
pub const AVAILABILITY_ZONES_IGNORED: &str = "LoadBalancerAvailabilityZonesIgnored";

/// The Service's annotations, read with OCCM's precedence over the settings, and what was read
/// other than written.
struct Annotations<'a> {
    values: &'a BTreeMap<String, String>,
    notices: RefCell<Vec<ServiceNotice>>,
}

impl<'a> Annotations<'a> {
    fn new(values: &'a BTreeMap<String, String>) -> Self {
        Self {
            values,
            notices: RefCell::default(),
        }
    }

    /// The value when present, even empty (OCCM: a present-but-empty annotation is `""`).
    fn get(&self, key: &str) -> Option<&'a str> {
        self.values.get(key).map(String::as_str)
    }

    fn notice(&self, reason: &str, message: String) {
        self.notices.borrow_mut().push(ServiceNotice {
            reason: reason.to_owned(),
            message,
        });
    }

    /// `value` of `key` is not used: `instead` is, as OCCM does.
    fn fell_back(&self, key: &str, value: &str, why: &str, instead: &str) {
        self.notice(
            VALUE_IGNORED,
            format!("annotation {key}: {value:?} {why}; {instead} is used, as the OpenStack cloud controller manager does"),
        );
    }

    /// A non-empty value, else `None`.
    fn id(&self, key: &str) -> Option<String> {
        self.get(key).filter(|v| !v.is_empty()).map(str::to_owned)
    }

    /// OCCM's `getBoolFromServiceAnnotation`: exactly `true` or `false`, else the default.
    fn boolean(&self, key: &str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some("true") => true,
            Some("false") => false,
            Some(other) => {
                self.fell_back(
                    key,
                    other,
                    "is not true or false",
                    &format!("the default {default}"),
                );
                default
            }
        }
    }

    /// An integer as Go's `Atoi` reads it (an optional sign, decimal digits), else the default
    /// (OCCM's `getIntFromServiceAnnotation`); one Octavia would refuse, outside `range`, is
    /// refused.
    fn int(
        &self,
        key: &str,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, ProviderError> {
        let Some(text) = self.get(key) else {
            return Ok(default);
        };
        let Ok(value) = text.parse::<i64>() else {
            self.fell_back(key, text, "is not an integer", &format!("the default {default}"));
            return Ok(default);
        };
        if !range.contains(&value) {
            return Err(invalid(
                key,
                text,
                &format!(
                    "is out of range: Octavia takes {} to {}",
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(value)
    }
}

fn invalid(key: &str, value: &str, why: &str) -> ProviderError {
    ProviderError::InvalidArgument(format!("annotation {key}: {value:?} {why}"))
}

/// The keys under [`PREFIX`] that OCCM does not read: ignored, as OCCM ignores them, each
/// named with the key it may stand for (`floating-subnet-tag`, the spelling of older OCCM docs,
/// for `floating-subnet-tags`).
fn ignore_unknown_keys(a: &Annotations<'_>) {
    for (key, value) in a
        .values
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX) && !READ.contains(&k.as_str()))
    {
        // A known key it cuts short (`floating-subnet-tag`), else the longest it extends.
        let meant = READ
            .iter()
            .find(|known| known.starts_with(key.as_str()))
            .or_else(|| {
                READ.iter()
                    .filter(|known| key.starts_with(**known))
                    .max_by_key(|known| known.len())
            })
            .map(|known| format!(" (did you mean {known}?)"))
            .unwrap_or_default();
        a.notice(
            KEY_IGNORED,
            format!(
                "annotation {key} (set to {value:?}) is not one the OpenStack cloud controller manager reads{meant}: ignored, as it ignores it"
            ),
        );
    }
}

/// OCCM's `StringToMap` for `node-selector`: `k=v,k2,k3=`; a key alone or with an empty value
/// means the label exists, whatever its value.
pub fn parse_node_selector(text: &str) -> BTreeMap<String, String> {
    text.trim()
        .split(',')
        .filter_map(|entry| {
            let entry = entry.trim();
            let (key, value) = entry.split_once('=').unwrap_or((entry, ""));
            (!key.is_empty()).then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Whether a node with `labels` matches OCCM's `matchNodeLabels`: every selector entry's label
/// is present and, when the entry has a value, equal to it.
pub fn node_matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(key, want)| {
        labels
            .get(key)
            .is_some_and(|have| want.is_empty() || have == want)
    })
}

/// Whether the Service's security group enforces its source ranges instead of the listeners:
/// with `manage-security-groups` on the `ovn` provider, which keeps the client's address and has
/// no `allowed_cidrs` (OCCM's `checkService`).
pub fn security_group_holds_source_ranges(settings: &LoadBalancerSettings) -> bool {
    settings.manage_security_groups && settings.lb_provider == "ovn"
}

/// The source ranges as OCCM's `GetLoadBalancerSourceRanges` reads them: the spec's, else the
/// legacy annotation's (comma-separated), else everything; each normalised to its network
/// (`10.1.2.3/8` is `10.0.0.0/8`), sorted, without repeats.
pub fn source_ranges(service: &ServiceSpec, ipv6: bool) -> Result<Vec<String>, ProviderError> {
    let (from, texts): (&str, Vec<&str>) = if !service.source_ranges.is_empty() {
        (
            "spec.loadBalancerSourceRanges",
            service.source_ranges.iter().map(String::as_str).collect(),
        )
    } else {
        let text = service
            .annotations
            .get(LEGACY_SOURCE_RANGES)
            .map_or("", |v| v.trim());
        if text.is_empty() {
            return Ok(vec![if ipv6 { "::/0" } else { "0.0.0.0/0" }.to_owned()]);
        }
        (
            LEGACY_SOURCE_RANGES,
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).collect(),
        )
    };
    let mut ranges = BTreeSet::new();
    for text in texts {
        let net: IpNet = text.trim().parse().map_err(|_| {
            ProviderError::InvalidArgument(format!(
                "{from}: {text:?} is not an IP range (for example 10.0.0.0/24)"
            ))
        })?;
        ranges.insert(net.trunc().to_string());
    }
    Ok(ranges.into_iter().collect())
}

/// The floating IP's network and subnet (an external Service's): the class's win, then the
/// annotations, then `[LoadBalancer]`.
fn floating(settings: &LoadBalancerSettings, a: &Annotations<'_>, class: Option<&LbClass>) -> Floating {
    let mut network_id = class.and_then(|c| c.floating_network_id.clone());
    let mut subnet = match class {
        Some(c) if c.floating_subnet_id.is_some() => Some(FloatingSubnet::Id(
            c.floating_subnet_id.clone().unwrap_or_default(),
        )),
        Some(c) if c.floating_subnet.is_some() || c.floating_subnet_tags.is_some() => {
            Some(FloatingSubnet::Matching {
                name: c.floating_subnet.clone(),
                tags: c.floating_subnet_tags.clone(),
            })
        }
        _ => None,
    };
    if network_id.is_none() {
        network_id = match a.get(FLOATING_NETWORK_ID) {
            Some(v) => (!v.is_empty()).then(|| v.to_owned()),
            None => settings.floating_network_id.clone(),
        };
    }
    if subnet.is_none() {
        subnet = Some(if let Some(id) = a.id(FLOATING_SUBNET_ID) {
            FloatingSubnet::Id(id)
        } else if a.id(FLOATING_SUBNET).is_some() || a.id(FLOATING_SUBNET_TAGS).is_some() {
            FloatingSubnet::Matching {
                name: a.id(FLOATING_SUBNET),
                tags: a.id(FLOATING_SUBNET_TAGS),
            }
        } else if let Some(id) = settings.floating_subnet_id.clone() {
            FloatingSubnet::Id(id)
        } else if settings.floating_subnet.is_some() || settings.floating_subnet_tags.is_some() {
            FloatingSubnet::Matching {
                name: settings.floating_subnet.clone(),
                tags: settings.floating_subnet_tags.clone(),
            }
        } else {
            FloatingSubnet::Any
        });
    }
    Floating {
        network_id,
        subnet: subnet.unwrap_or(FloatingSubnet::Any),
    }
}

/// The listener timeouts the annotations ask (Octavia's defaults otherwise), where Octavia has
/// them; asked where it has none, refused.
fn timeouts(features: &OctaviaFeatures, a: &Annotations<'_>) -> Result<Option<Timeouts>, ProviderError> {
    // Octavia's listener timeouts: 0 to 24 days in milliseconds.
    const MAX_TIMEOUT_MS: i64 = 24 * 24 * 60 * 60 * 1000;
    Ok(if features.timeouts {
        let ms = |key, default| a.int(key, default, 0..=MAX_TIMEOUT_MS).map(|v| v as u32);
        Some(Timeouts {
            client_data: ms(TIMEOUT_CLIENT_DATA, 50_000)?,
            member_connect: ms(TIMEOUT_MEMBER_CONNECT, 5_000)?,
            member_data: ms(TIMEOUT_MEMBER_DATA, 50_000)?,
            tcp_inspect: ms(TIMEOUT_TCP_INSPECT, 0)?,
        })
    } else {
        let asked: Vec<&str> = [
            TIMEOUT_CLIENT_DATA,
            TIMEOUT_MEMBER_CONNECT,
            TIMEOUT_MEMBER_DATA,
            TIMEOUT_TCP_INSPECT,
        ]
        .into_iter()
        .filter(|k| a.get(k).is_some())
        .collect();
        if !asked.is_empty() {
            a.notice(
                VALUE_IGNORED,
                format!(
                    "annotation {}: this cloud's Octavia has no listener timeouts (API 2.1, not the ovn provider); \
                     ignored, as the OpenStack cloud controller manager ignores it",
                    asked.join(", ")
                ),
            );
        }
        None
    })
}

/// The source ranges Octavia enforces (`allowed_cidrs`), where it can; where it cannot, none:
/// the security group holds them, or they are ignored as OCCM ignores them, with its event.
fn allowed_cidrs(
    settings: &LoadBalancerSettings,
    features: &OctaviaFeatures,
    service: &ServiceSpec,
    a: &Annotations<'_>,
) -> Result<Option<Vec<String>>, ProviderError> {
    let ipv6 = service.requested_ip.contains(':');
    let ranges = source_ranges(service, ipv6)?;
    let everything = ranges.len() == 1 && (ranges[0] == "0.0.0.0/0" || ranges[0] == "::/0");
    Ok(if features.vip_acl {
        Some(ranges)
    } else {
        if !everything && !security_group_holds_source_ranges(settings) {
            a.notice(
                SOURCE_RANGES_IGNORED,
                format!(
                    "load balancer source ranges ({}) cannot be enforced: this cloud's Octavia has no allowed_cidrs \
                     (API 2.12, not the ovn provider); the load balancer accepts every address, as the OpenStack \
                     cloud controller manager's does",
                    ranges.join(", ")
                ),
            );
        }
        None
    })
}

/// The health monitor, unless disabled: its delays and retries from the annotations, else
/// `[LoadBalancer]`.
fn monitor(settings: &LoadBalancerSettings, a: &Annotations<'_>) -> Result<Option<Monitor>, ProviderError> {
    let monitor_enabled = a.boolean(ENABLE_HEALTH_MONITOR, settings.create_monitor);
    let seconds = |d: std::time::Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    Ok(if monitor_enabled {
        let delay = a.int(
            MONITOR_DELAY,
            seconds(settings.monitor_delay),
            0..=i64::from(i32::MAX),
        )?;
        let timeout = a.int(
            MONITOR_TIMEOUT,
            seconds(settings.monitor_timeout),
            0..=i64::from(i32::MAX),
        )?;
        let max_retries = a.int(MONITOR_MAX_RETRIES, settings.monitor_max_retries as i64, 1..=10)?;
        let max_retries_down = a.int(
            MONITOR_MAX_RETRIES_DOWN,
            settings.monitor_max_retries_down as i64,
            1..=10,
        )?;
        Some(Monitor {
            delay: delay as u32,
            timeout: timeout as u32,
            max_retries: max_retries as u32,
            max_retries_down: max_retries_down as u32,
        })
    } else {
        None
    })
}

/// What `service` asks of its load balancer, on a cloud whose Octavia has `features`.
///
/// # Errors
/// `InvalidArgument` naming the annotation (or spec field, or class) that cannot be served.
pub fn resolve(
    settings: &LoadBalancerSettings,
    features: &OctaviaFeatures,
    service: &ServiceSpec,
) -> Result<ServiceLbConf, ProviderError> {
    resolve_noting(settings, features, service).0
}

/// [`resolve`], and what it read other than written (see the module's opening), also when the
/// Service is refused.
pub fn resolve_noting(
    settings: &LoadBalancerSettings,
    features: &OctaviaFeatures,
    service: &ServiceSpec,
) -> (Result<ServiceLbConf, ProviderError>, Vec<ServiceNotice>) {
    let a = Annotations::new(&service.annotations);
    ignore_unknown_keys(&a);
    let conf = read(settings, features, service, &a);
    (conf, a.notices.into_inner())
}

fn read(
    settings: &LoadBalancerSettings,
    features: &OctaviaFeatures,
    service: &ServiceSpec,
    a: &Annotations<'_>,
) -> Result<ServiceLbConf, ProviderError> {
    if service.ports.is_empty() {
        return Err(ProviderError::InvalidArgument("the Service has no ports".into()));
    }

    let internal = settings.internal_lb || a.boolean(INTERNAL, false);
    let class = match a.id(CLASS) {
        None => None,
        Some(name) => match settings.classes.get(&name) {
            Some(class) => Some((name, class)),
            None => {
                return Err(ProviderError::InvalidArgument(format!(
                    "annotation {CLASS}: no [LoadBalancerClass {name:?}] section in the cloud config"
                )));
            }
        },
    };
    let class_value = |pick: fn(&crate::cloud_config::LbClass) -> &Option<String>| {
        class.as_ref().and_then(|(_, c)| pick(c).clone())
    };

    // getNetworkID, getSubnetID: annotation, class, config.
    let vip_network_id = a
        .id(NETWORK_ID)
        .or_else(|| class_value(|c| &c.network_id))
        .or_else(|| settings.network_id.clone());
    let vip_subnet_id = a
        .id(SUBNET_ID)
        .or_else(|| class_value(|c| &c.subnet_id))
        .or_else(|| settings.subnet_id.clone());
    // checkService: the config's subnet-id, else the VIP subnet; nothing known at all means
    // detected from the first node; an explicit member-subnet-id (annotation, class, config) wins.
    let member_subnet_id = a
        .id(MEMBER_SUBNET_ID)
        .or_else(|| class_value(|c| &c.member_subnet_id))
        .or_else(|| settings.member_subnet_id.clone())
        .or_else(|| {
            if vip_network_id.is_none() && vip_subnet_id.is_none() {
                None
            } else {
                settings.subnet_id.clone().or_else(|| vip_subnet_id.clone())
            }
        });

    let floating = (!internal).then(|| floating(settings, a, class.as_ref().map(|(_, c)| *c)));

    let x_forwarded_for = a.boolean(X_FORWARDED_FOR, false);
    // getProxyProtocolFromServiceAnnotation: anything else is off.
    let proxy_protocol = match a.get(PROXY_PROTOCOL) {
        None | Some("false") => None,
        Some("true" | "v1") => Some(ProxyProtocol::V1),
        Some("v2") => Some(ProxyProtocol::V2),
        Some(other) => {
            a.fell_back(
                PROXY_PROTOCOL,
                other,
                "is not true, false, v1 or v2",
                "no PROXY protocol",
            );
            None
        }
    };
    if proxy_protocol.is_some() && x_forwarded_for {
        return Err(ProviderError::InvalidArgument(format!(
            "annotations {PROXY_PROTOCOL} and {X_FORWARDED_FOR} cannot be used together"
        )));
    }

    let lb_method = a
        .get(LB_METHOD)
        .filter(|v| !v.is_empty())
        .unwrap_or(&settings.lb_method)
        .to_owned();
    if !LB_METHODS.contains(&lb_method.as_str()) {
        return Err(ProviderError::InvalidArgument(format!(
            "lb-method {lb_method:?} (annotation {LB_METHOD} or [LoadBalancer] lb-method) is not one of Octavia's: {}",
            LB_METHODS.join(", ")
        )));
    }

    // Octavia's range: -1 (unlimited) and up.
    let connection_limit = a.int(CONNECTION_LIMIT, -1, -1..=i64::from(i32::MAX))? as i32;
    let timeouts = timeouts(features, a)?;

    let allowed_cidrs = allowed_cidrs(settings, features, service, a)?;

    let flavor_id = if features.flavors {
        a.id(FLAVOR_ID).or_else(|| settings.flavor_id.clone())
    } else {
        if let Some(flavor) = a.id(FLAVOR_ID) {
            a.fell_back(
                FLAVOR_ID,
                &flavor,
                "cannot be used: this cloud's Octavia has no flavors (API 2.6, not the ovn provider)",
                "Octavia's default flavor",
            );
        }
        None
    };
    let mut availability_zone = a
        .id(AVAILABILITY_ZONE)
        .or_else(|| settings.availability_zone.clone());
    if !features.availability_zones
        && let Some(zone) = availability_zone.take()
    {
        a.notice(
            AVAILABILITY_ZONES_IGNORED,
            format!(
                "availability zone {zone:?} (annotation {AVAILABILITY_ZONE} or [LoadBalancer] availability-zone) is \
                 ignored: this cloud's Octavia has no availability zones (API 2.14, not the ovn provider), as the \
                 OpenStack cloud controller manager ignores it"
            ),
        );
    }

    let monitor = monitor(settings, a)?;
    let health_check_node_port = (monitor.is_some()
        && service.external_traffic_policy == ExternalTrafficPolicy::Local
        && service.health_check_node_port > 0)
        .then_some(service.health_check_node_port);

    let node_selector = parse_node_selector(a.get(NODE_SELECTOR).unwrap_or(&settings.node_selector));
    let tls_container_ref = tls_container_ref(settings, a)?;

    Ok(ServiceLbConf {
        internal,
        class: class.map(|(name, _)| name),
        vip_network_id,
        vip_subnet_id,
        vip_port_id: a.id(PORT_ID),
        member_subnet_id,
        floating,
        requested_ip: (!service.requested_ip.is_empty()).then(|| service.requested_ip.clone()),
        keep_floating_ip: a.boolean(KEEP_FLOATING_IP, false),
        load_balancer_id: a.id(LOAD_BALANCER_ID),
        connection_limit,
        lb_method,
        node_selector,
        x_forwarded_for,
        proxy_protocol,
        timeouts,
        allowed_cidrs,
        flavor_id,
        availability_zone,
        monitor,
        health_check_node_port,
        source_ip_persistence: service.session_affinity_client_ip,
        hostname: a.id(HOSTNAME),
        tls_container_ref,
    })
}

/// `default-tls-container-ref`: the annotation (present but empty: no TLS, as OCCM reads it),
/// else `[LoadBalancer] default-tls-container-ref`; with `container-store = barbican`, a
/// reference Barbican's form (its existence is checked before it is written, not here: a
/// resolve makes no call).
fn tls_container_ref(
    settings: &LoadBalancerSettings,
    a: &Annotations<'_>,
) -> Result<Option<String>, ProviderError> {
    let reference = match a.get(TLS_CONTAINER_REF) {
        Some(value) => (!value.is_empty()).then(|| value.to_owned()),
        None => settings
            .default_tls_container_ref
            .clone()
            .filter(|v| !v.is_empty()),
    };
    if let Some(reference) = &reference
        && settings.container_store == "barbican"
        && let Err(why) = crate::barbican::TlsRef::parse(reference)
    {
        return Err(ProviderError::InvalidArgument(format!(
            "TLS reference (annotation {TLS_CONTAINER_REF} or [LoadBalancer] default-tls-container-ref): {why}"
        )));
    }
    Ok(reference)
}

#[cfg(test)]
mod tests {
    use provider::{Protocol, ServicePort};

    use super::*;
    use crate::cloud_config::LbClass;

    fn service(annotations: &[(&str, &str)]) -> ServiceSpec {
        ServiceSpec {
            uid: "uid-1".into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            }],
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..ServiceSpec::default()
        }
    }

    fn zed() -> OctaviaFeatures {
        OctaviaFeatures::of(2, 26, "amphora")
    }

    fn settings_with_class() -> LoadBalancerSettings {
        let mut s = LoadBalancerSettings {
            subnet_id: Some("conf-subnet".into()),
            member_subnet_id: Some("conf-member-subnet".into()),
            network_id: Some("conf-network".into()),
            ..LoadBalancerSettings::default()
        };
        s.classes.insert(
            "gold".into(),
            LbClass {
                member_subnet_id: Some("class-member-subnet".into()),
                subnet_id: Some("class-subnet".into()),
                network_id: Some("class-network".into()),
                floating_network_id: Some("class-ext".into()),
                ..LbClass::default()
            },
        );
        s
    }

    fn resolved(settings: &LoadBalancerSettings, annotations: &[(&str, &str)]) -> ServiceLbConf {
        resolve(settings, &zed(), &service(annotations)).expect("resolves")
    }

    fn noting(
        settings: &LoadBalancerSettings,
        features: &OctaviaFeatures,
        annotations: &[(&str, &str)],
    ) -> (Result<ServiceLbConf, ProviderError>, Vec<ServiceNotice>) {
        resolve_noting(settings, features, &service(annotations))
    }

    /// Each notice's reason and the annotation it names (the first word after "annotation ").
    fn reasons(notices: &[ServiceNotice]) -> Vec<(&str, String)> {
        notices
            .iter()
            .map(|n| {
                let key = n
                    .message
                    .strip_prefix("annotation ")
                    .and_then(|rest| rest.split([':', ' ']).next())
                    .unwrap_or_default();
                (n.reason.as_str(), key.to_owned())
            })
            .collect()
    }

    fn refused(settings: &LoadBalancerSettings, annotations: &[(&str, &str)]) -> String {
        match resolve(settings, &zed(), &service(annotations)) {
            Err(ProviderError::InvalidArgument(m)) => m,
            other => panic!("{annotations:?}: expected InvalidArgument, got {other:?}"),
        }
    }

    // OCCM's TestLbaasV2_getMemberSubnetID, Test_getSubnetID, TestLbaasV2_getNetworkID: the
    // annotation, else the class, else the config.
    #[test]
    fn subnets_and_networks_come_from_the_annotation_then_the_class_then_the_config() {
        let s = settings_with_class();
        let by_annotation = resolved(
            &s,
            &[
                (MEMBER_SUBNET_ID, "ann-member"),
                (SUBNET_ID, "ann-subnet"),
                (NETWORK_ID, "ann-net"),
                (CLASS, "gold"),
            ],
        );
        assert_eq!(by_annotation.member_subnet_id.as_deref(), Some("ann-member"));
        assert_eq!(by_annotation.vip_subnet_id.as_deref(), Some("ann-subnet"));
        assert_eq!(by_annotation.vip_network_id.as_deref(), Some("ann-net"));
        assert_eq!(by_annotation.class.as_deref(), Some("gold"));

        let by_class = resolved(&s, &[(CLASS, "gold")]);
        assert_eq!(by_class.member_subnet_id.as_deref(), Some("class-member-subnet"));
        assert_eq!(by_class.vip_subnet_id.as_deref(), Some("class-subnet"));
        assert_eq!(by_class.vip_network_id.as_deref(), Some("class-network"));
        assert_eq!(
            by_class.floating.as_ref().and_then(|f| f.network_id.as_deref()),
            Some("class-ext")
        );

        let by_config = resolved(&s, &[]);
        assert_eq!(by_config.member_subnet_id.as_deref(), Some("conf-member-subnet"));
        assert_eq!(by_config.vip_subnet_id.as_deref(), Some("conf-subnet"));
        assert_eq!(by_config.vip_network_id.as_deref(), Some("conf-network"));
        assert_eq!(by_config.class, None);

        // An empty annotation is unset, as OCCM treats "".
        assert_eq!(
            resolved(&s, &[(SUBNET_ID, "")]).vip_subnet_id.as_deref(),
            Some("conf-subnet")
        );

        let m = refused(&LoadBalancerSettings::default(), &[(CLASS, "invalid-lb-class")]);
        assert!(m.contains(CLASS) && m.contains("invalid-lb-class"), "{m}");
    }

    // checkService: members on the config's subnet-id (the quirk: not on the annotation's VIP
    // subnet), else on the VIP subnet; nothing configured at all: detected from the first node.
    #[test]
    fn the_member_subnet_follows_occms_check_service() {
        let conf_subnet = LoadBalancerSettings {
            subnet_id: Some("A".into()),
            ..LoadBalancerSettings::default()
        };
        assert_eq!(
            resolved(&conf_subnet, &[(SUBNET_ID, "B")])
                .member_subnet_id
                .as_deref(),
            Some("A")
        );
        let none = LoadBalancerSettings::default();
        assert_eq!(
            resolved(&none, &[(SUBNET_ID, "B")]).member_subnet_id.as_deref(),
            Some("B")
        );
        assert_eq!(resolved(&none, &[(NETWORK_ID, "N")]).member_subnet_id, None);
        let detected = resolved(&none, &[]);
        assert_eq!(
            (
                detected.vip_network_id,
                detected.vip_subnet_id,
                detected.member_subnet_id
            ),
            (None, None, None)
        );
    }

    #[test]
    fn the_floating_ip_source_follows_occms_precedence() {
        let mut s = LoadBalancerSettings {
            floating_network_id: Some("conf-ext".into()),
            floating_subnet_id: Some("conf-fsub".into()),
            ..LoadBalancerSettings::default()
        };
        let f = |conf: &ServiceLbConf| conf.floating.clone().expect("external");
        assert_eq!(
            f(&resolved(&s, &[])),
            Floating {
                network_id: Some("conf-ext".into()),
                subnet: FloatingSubnet::Id("conf-fsub".into())
            }
        );
        assert_eq!(
            f(&resolved(
                &s,
                &[(FLOATING_NETWORK_ID, "ann-ext"), (FLOATING_SUBNET, "pub-*")]
            )),
            Floating {
                network_id: Some("ann-ext".into()),
                subnet: FloatingSubnet::Matching {
                    name: Some("pub-*".into()),
                    tags: None
                }
            }
        );
        // An empty floating-network-id annotation asks for detection, as in OCCM.
        assert_eq!(f(&resolved(&s, &[(FLOATING_NETWORK_ID, "")])).network_id, None);
        // The subnet ID wins over the name and tags.
        assert_eq!(
            f(&resolved(
                &s,
                &[(FLOATING_SUBNET_ID, "x"), (FLOATING_SUBNET_TAGS, "a,b")]
            ))
            .subnet,
            FloatingSubnet::Id("x".into())
        );
        s.classes.insert(
            "tagged".into(),
            LbClass {
                floating_subnet_tags: Some("public".into()),
                ..LbClass::default()
            },
        );
        // A class with only subnet tags keeps the network of the annotation or config.
        let tagged = f(&resolved(
            &s,
            &[(CLASS, "tagged"), (FLOATING_SUBNET_ID, "ignored")],
        ));
        assert_eq!(tagged.network_id.as_deref(), Some("conf-ext"));
        assert_eq!(
            tagged.subnet,
            FloatingSubnet::Matching {
                name: None,
                tags: Some("public".into())
            }
        );
        assert_eq!(
            f(&resolved(&LoadBalancerSettings::default(), &[])),
            Floating {
                network_id: None,
                subnet: FloatingSubnet::Any
            }
        );
    }

    #[test]
    fn an_internal_service_has_no_floating_ip_and_internal_lb_forces_it() {
        let none = LoadBalancerSettings::default();
        assert!(resolved(&none, &[]).floating.is_some());
        let internal = resolved(&none, &[(INTERNAL, "true")]);
        assert!(internal.internal && internal.floating.is_none());
        let forced = LoadBalancerSettings {
            internal_lb: true,
            ..LoadBalancerSettings::default()
        };
        assert!(resolved(&forced, &[(INTERNAL, "false")]).internal);
    }

    // OCCM's Test_getProxyProtocolFromServiceAnnotation: anything else is off (with a notice).
    #[test]
    fn proxy_protocol_versions() {
        let none = LoadBalancerSettings::default();
        let cases = [
            ("true", Some(ProxyProtocol::V1)),
            ("v1", Some(ProxyProtocol::V1)),
            ("v2", Some(ProxyProtocol::V2)),
            ("false", None),
        ];
        for (value, want) in cases {
            assert_eq!(
                resolved(&none, &[(PROXY_PROTOCOL, value)]).proxy_protocol,
                want,
                "{value}"
            );
        }
        assert_eq!(resolved(&none, &[]).proxy_protocol, None);
        let (conf, notices) = noting(&none, &zed(), &[(PROXY_PROTOCOL, "v3")]);
        assert_eq!(conf.unwrap().proxy_protocol, None);
        assert_eq!(reasons(&notices), [(VALUE_IGNORED, PROXY_PROTOCOL.to_owned())]);
        let both = refused(&none, &[(PROXY_PROTOCOL, "v2"), (X_FORWARDED_FOR, "true")]);
        assert!(both.contains("cannot be used together"), "{both}");
    }

    // OCCM's Test_getBoolFromServiceAnnotation and Test_getIntFromServiceAnnotation: a value
    // they cannot read is their default; the Service is served so, with a notice naming the
    // annotation, its value and the default (it used to be refused: a Service OCCM served
    // stopped following its nodes at the switch).
    #[test]
    fn a_value_occm_replaces_by_its_default_is_so_replaced_and_noticed() {
        let none = LoadBalancerSettings::default();
        // What the Service is served with, read back from the resolved settings.
        type Read = fn(&ServiceLbConf) -> String;
        let cases: [(&str, &str, &str, Read); 7] = [
            (INTERNAL, "True", "false", |c| c.internal.to_string()),
            (KEEP_FLOATING_IP, "yes", "false", |c| {
                c.keep_floating_ip.to_string()
            }),
            (X_FORWARDED_FOR, "1", "false", |c| c.x_forwarded_for.to_string()),
            (ENABLE_HEALTH_MONITOR, "on", "false", |c| {
                c.monitor.is_some().to_string()
            }),
            (CONNECTION_LIMIT, "ten", "-1", |c| c.connection_limit.to_string()),
            (TIMEOUT_CLIENT_DATA, "1.5", "50000", |c| {
                c.timeouts.map(|t| t.client_data).unwrap_or_default().to_string()
            }),
            (CONNECTION_LIMIT, " 10", "-1", |c| c.connection_limit.to_string()),
        ];
        for (key, value, default, read) in cases {
            let (conf, notices) = noting(&none, &zed(), &[(key, value)]);
            let conf = conf.unwrap_or_else(|e| panic!("{key}={value}: refused: {e}"));
            assert_eq!(read(&conf), default, "{key}={value}");
            assert_eq!(notices.len(), 1, "{key}={value}: {notices:?}");
            let m = &notices[0].message;
            assert!(
                notices[0].reason == VALUE_IGNORED
                    && m.contains(key)
                    && m.contains(value)
                    && m.contains(default),
                "{key}={value}: {m}"
            );
        }
        // A default from the config: `create-monitor`.
        let monitored = LoadBalancerSettings {
            create_monitor: true,
            ..LoadBalancerSettings::default()
        };
        let (conf, notices) = noting(&monitored, &zed(), &[(ENABLE_HEALTH_MONITOR, "yes")]);
        assert!(conf.unwrap().monitor.is_some());
        assert!(notices[0].message.contains("the default true"), "{notices:?}");
        // What Octavia's API would refuse is still refused, before any write.
        for (key, value) in [(CONNECTION_LIMIT, "-2"), (TIMEOUT_MEMBER_DATA, "-1")] {
            let m = refused(&none, &[(key, value)]);
            assert!(m.contains(key) && m.contains(value), "{key}={value}: {m}");
        }
        // Values read as written have no notice.
        let (_, notices) = noting(&none, &zed(), &[(INTERNAL, "true"), (CONNECTION_LIMIT, "5")]);
        assert_eq!(notices, []);
        let monitor = [(ENABLE_HEALTH_MONITOR, "true"), (MONITOR_MAX_RETRIES, "11")];
        assert!(refused(&none, &monitor).contains(MONITOR_MAX_RETRIES));
        // Atoi's spelling is read: a sign, leading zeros.
        assert_eq!(
            resolved(&none, &[(CONNECTION_LIMIT, "+010")]).connection_limit,
            10
        );
    }

    // OCCM ignores a key it does not read; so does this provider, naming it once (it used to
    // refuse the Service).
    #[test]
    fn unknown_keys_are_ignored_and_noticed() {
        let none = LoadBalancerSettings::default();
        let (conf, notices) = noting(
            &none,
            &zed(),
            &[
                ("loadbalancer.openstack.org/floating-subnet-tag", "public"),
                ("loadbalancer.openstack.org/enable-helth-monitor", "true"),
            ],
        );
        assert_eq!(conf.unwrap().floating.unwrap().subnet, FloatingSubnet::Any);
        assert_eq!(
            reasons(&notices),
            [
                (
                    KEY_IGNORED,
                    "loadbalancer.openstack.org/enable-helth-monitor".to_owned()
                ),
                (
                    KEY_IGNORED,
                    "loadbalancer.openstack.org/floating-subnet-tag".to_owned()
                ),
            ]
        );
        assert!(
            notices[1]
                .message
                .contains(&format!("did you mean {FLOATING_SUBNET_TAGS}?"))
                && notices[1].message.contains("(set to \"public\")"),
            "the key, its value and what it may stand for: {notices:?}"
        );
        // Other prefixes are not ours to judge.
        resolved(
            &none,
            &[
                ("example.com/owner", "team-a"),
                (LOAD_BALANCER_ADDRESS, "1.2.3.4"),
            ],
        );
    }

    // OCCM's checkService: the annotation, else the config (an empty annotation is no TLS);
    // with container-store = barbican, the last two path segments are containers/<uuid> or
    // secrets/<uuid>; with external, anything.
    #[test]
    fn tls_comes_from_the_annotation_then_the_config_as_occm_reads_it() {
        let container = "https://kms:9311/v1/containers/c1";
        let config = LoadBalancerSettings {
            default_tls_container_ref: Some("https://kms:9311/v1/secrets/s1".into()),
            ..LoadBalancerSettings::default()
        };
        let none = LoadBalancerSettings::default();
        let tls = |settings: &LoadBalancerSettings, annotations: &[(&str, &str)]| {
            resolved(settings, annotations).tls_container_ref
        };
        assert_eq!(tls(&none, &[]), None);
        assert_eq!(
            tls(&none, &[(TLS_CONTAINER_REF, container)]).as_deref(),
            Some(container)
        );
        assert_eq!(
            tls(&config, &[(TLS_CONTAINER_REF, container)]).as_deref(),
            Some(container)
        );
        assert_eq!(
            tls(&config, &[]).as_deref(),
            Some("https://kms:9311/v1/secrets/s1")
        );
        assert_eq!(tls(&config, &[(TLS_CONTAINER_REF, "")]), None);
        for bad in [
            "c1",
            "https://kms:9311/v1/orders/o1",
            "https://kms/v1/containers/",
        ] {
            let m = refused(&none, &[(TLS_CONTAINER_REF, bad)]);
            assert!(m.contains(TLS_CONTAINER_REF) && m.contains(bad), "{bad}: {m}");
        }
        let external = LoadBalancerSettings {
            container_store: "external".into(),
            ..LoadBalancerSettings::default()
        };
        assert_eq!(
            tls(&external, &[(TLS_CONTAINER_REF, "vault:tls/web")]).as_deref(),
            Some("vault:tls/web")
        );
    }

    #[test]
    fn defaults_are_occms() {
        let conf = resolved(&LoadBalancerSettings::default(), &[]);
        assert_eq!(conf.connection_limit, -1);
        assert_eq!(conf.lb_method, "ROUND_ROBIN");
        assert_eq!(
            conf.timeouts,
            Some(Timeouts {
                client_data: 50_000,
                member_connect: 5_000,
                member_data: 50_000,
                tcp_inspect: 0
            })
        );
        assert_eq!(conf.allowed_cidrs, Some(vec!["0.0.0.0/0".to_owned()]));
        assert_eq!(conf.monitor, None);
        assert!(!conf.keep_floating_ip && !conf.x_forwarded_for && conf.node_selector.is_empty());
    }

    #[test]
    fn lb_method_is_checked_against_octavias_algorithms() {
        let none = LoadBalancerSettings::default();
        assert_eq!(
            resolved(&none, &[(LB_METHOD, "LEAST_CONNECTIONS")]).lb_method,
            "LEAST_CONNECTIONS"
        );
        assert!(refused(&none, &[(LB_METHOD, "least_connections")]).contains("least_connections"));
        let bad_conf = LoadBalancerSettings {
            lb_method: "RANDOM".into(),
            ..LoadBalancerSettings::default()
        };
        assert!(refused(&bad_conf, &[]).contains("RANDOM"));
    }

    #[test]
    fn source_ranges_come_from_the_spec_then_the_legacy_annotation() {
        let none = LoadBalancerSettings::default();
        let mut svc = service(&[(LEGACY_SOURCE_RANGES, " 10.1.2.3/8 , 192.168.0.0/24,10.0.0.0/8")]);
        let conf = resolve(&none, &zed(), &svc).unwrap();
        assert_eq!(
            conf.allowed_cidrs,
            Some(vec!["10.0.0.0/8".to_owned(), "192.168.0.0/24".to_owned()])
        );
        svc.source_ranges = vec!["172.16.0.0/12".into()];
        let conf = resolve(&none, &zed(), &svc).unwrap();
        assert_eq!(conf.allowed_cidrs, Some(vec!["172.16.0.0/12".to_owned()]));
        svc.source_ranges = vec!["172.16.0.0".into()];
        let Err(ProviderError::InvalidArgument(m)) = resolve(&none, &zed(), &svc) else {
            panic!()
        };
        assert!(
            m.contains("spec.loadBalancerSourceRanges") && m.contains("172.16.0.0"),
            "{m}"
        );
    }

    // OCCM ignores what its Octavia cannot do, with its event where it has one; so does this
    // provider (it used to refuse the Service).
    #[test]
    fn what_an_older_or_ovn_octavia_cannot_do_is_ignored_and_noticed() {
        let none = LoadBalancerSettings::default();
        let ovn = OctaviaFeatures::of(2, 26, "ovn");
        let mut svc = service(&[]);
        // Open to everything: nothing to enforce, nothing to say.
        let (conf, notices) = resolve_noting(&none, &ovn, &svc);
        let conf = conf.unwrap();
        assert_eq!((conf.allowed_cidrs, conf.timeouts, notices), (None, None, vec![]));
        svc.source_ranges = vec!["10.0.0.0/8".into()];
        let (conf, notices) = resolve_noting(&none, &ovn, &svc);
        assert_eq!(conf.unwrap().allowed_cidrs, None);
        assert_eq!(notices[0].reason, SOURCE_RANGES_IGNORED);
        assert!(notices[0].message.contains("10.0.0.0/8"), "{notices:?}");
        // With manage-security-groups on ovn, the group's rules enforce them (OCCM).
        let groups = LoadBalancerSettings {
            manage_security_groups: true,
            lb_provider: "ovn".into(),
            ..LoadBalancerSettings::default()
        };
        let (conf, notices) = resolve_noting(&groups, &ovn, &svc);
        assert_eq!((conf.unwrap().allowed_cidrs, notices), (None, vec![]));
        let old = OctaviaFeatures::of(2, 13, "amphora");
        let (conf, notices) = noting(&none, &old, &[(AVAILABILITY_ZONE, "az1")]);
        assert_eq!(conf.unwrap().availability_zone, None);
        assert_eq!(notices[0].reason, AVAILABILITY_ZONES_IGNORED);
        assert!(notices[0].message.contains("az1"), "{notices:?}");
        let (conf, notices) = noting(&none, &ovn, &[(TIMEOUT_TCP_INSPECT, "10")]);
        assert_eq!(conf.unwrap().timeouts, None);
        assert_eq!(
            reasons(&notices),
            [(VALUE_IGNORED, TIMEOUT_TCP_INSPECT.to_owned())]
        );
        let old_flavors = OctaviaFeatures::of(2, 5, "amphora");
        let (conf, notices) = noting(&none, &old_flavors, &[(FLAVOR_ID, "f-1")]);
        assert_eq!(conf.unwrap().flavor_id, None);
        assert_eq!(reasons(&notices), [(VALUE_IGNORED, FLAVOR_ID.to_owned())]);
    }

    // OCCM's IsOctaviaFeatureSupported table (reference §3.12).
    #[test]
    fn octavia_features_by_version_and_provider() {
        let f = OctaviaFeatures::of(2, 5, "amphora");
        assert!(f.tags && f.timeouts && !f.flavors && !f.vip_acl);
        let f = OctaviaFeatures::of(2, 14, "amphora");
        assert!(f.flavors && f.vip_acl && f.availability_zones && !f.http_monitors_on_udp);
        let f = OctaviaFeatures::of(2, 26, "ovn");
        assert!(f.tags && !f.timeouts && !f.flavors && !f.vip_acl && !f.availability_zones);
        let f = OctaviaFeatures::of(2, 0, "amphora");
        assert!(!f.tags && !f.timeouts);
    }

    #[test]
    fn the_monitor_checks_the_health_check_node_port_only_for_local_traffic() {
        let none = LoadBalancerSettings::default();
        let mut svc = service(&[(ENABLE_HEALTH_MONITOR, "true"), (MONITOR_DELAY, "10")]);
        svc.health_check_node_port = 32000;
        let conf = resolve(&none, &zed(), &svc).unwrap();
        assert_eq!(
            conf.monitor,
            Some(Monitor {
                delay: 10,
                timeout: 3,
                max_retries: 1,
                max_retries_down: 3
            })
        );
        assert_eq!(conf.health_check_node_port, None);
        svc.external_traffic_policy = ExternalTrafficPolicy::Local;
        assert_eq!(
            resolve(&none, &zed(), &svc).unwrap().health_check_node_port,
            Some(32000)
        );
        svc.annotations
            .insert(ENABLE_HEALTH_MONITOR.into(), "false".into());
        let off = resolve(&none, &zed(), &svc).unwrap();
        assert_eq!((off.monitor, off.health_check_node_port), (None, None));
        let on_by_config = LoadBalancerSettings {
            create_monitor: true,
            ..LoadBalancerSettings::default()
        };
        assert!(resolved(&on_by_config, &[]).monitor.is_some());
    }

    // OCCM's TestFilterNodes and StringToMap.
    #[test]
    fn node_selectors_as_occm_reads_and_matches_them() {
        let sel = parse_node_selector(" k1=v1, k2 ,k3=,=x,k4=a=b ");
        let want: BTreeMap<String, String> = [("k1", "v1"), ("k2", ""), ("k3", ""), ("k4", "a=b")]
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        assert_eq!(sel, want);
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
        };
        let sel = parse_node_selector("k1=v1,k2");
        assert!(node_matches(&sel, &labels(&[("k1", "v1"), ("k2", "anything")])));
        assert!(!node_matches(&sel, &labels(&[("k1", "v1")])));
        assert!(!node_matches(&sel, &labels(&[("k1", "v2"), ("k2", "")])));
        assert!(node_matches(&BTreeMap::new(), &labels(&[])));
        let from_config = LoadBalancerSettings {
            node_selector: "pool=lb".into(),
            ..LoadBalancerSettings::default()
        };
        assert_eq!(
            resolved(&from_config, &[]).node_selector,
            parse_node_selector("pool=lb")
        );
        assert!(
            resolved(&from_config, &[(NODE_SELECTOR, "")])
                .node_selector
                .is_empty()
        );
    }
}
