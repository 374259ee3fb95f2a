//! cloud-provider-aws's `--cloud-config` file, read as upstream reads it, into [`AwsConfig`].
//!
//! The format is gcfg (git-config style INI), read by the [`gcfg`] crate as `gopkg.in/gcfg.v1`
//! reads it (syntax, quoting, escapes, continuation lines, CRLF, errors naming line and key).
//! What this module adds is upstream's schema:
//! - `[Global]` and `[ServiceOverride "name"]` (a bare `[ServiceOverride]` is the override
//!   named `""`); a `[Global "sub"]` header and its keys are ignored, as gcfg ignores them.
//! - Booleans (`DisableSecurityGroupIngress`; a blank key is `true`), an int32
//!   (`ClusterServiceSharedLoadBalancerHealthProbePort`: decimal or `0x` hexadecimal) and
//!   strings; a blank string key is an error.
//! - A key given twice: the last value wins, except the multi-valued `NodeIPFamilies`, whose
//!   values accumulate (a blank one clears them). Sections given twice merge.
//! - Unknown sections and keys are ignored, as upstream ignores them (`gcfg.FatalOnly`), but
//!   [`CloudConfig::notices`] names each, so the gateway can say so once at start.
//!
//! [`parse`] reads the syntax and the types; [`CloudConfig::to_aws_config`] applies upstream's
//! semantics (§7 of the reference) and refuses at start what upstream would only refuse later
//! (an unknown health-probe mode, an invalid `NLBSecurityGroupMode`) or what this provider does
//! not implement (`NLBSecurityGroupMode = Managed`). Every error names the line and the key.

use std::path::Path;

use crate::config::{AwsConfig, AwsService, HealthProbe, IpFamily, ServiceEndpoint, topology_pattern_error};

/// Something in the file that has no effect; the gateway logs these once at start.
pub use gcfg::Notice;

/// Why the file cannot be used: the line and key (when there is one) and what is wrong.
pub type CloudConfigError = gcfg::Error;

/// Default port of the shared (kube-proxy) health probe, as upstream.
pub const DEFAULT_SHARED_PROBE_PORT: u16 = 10256;
/// Default path of the shared (kube-proxy) health probe, as upstream.
pub const DEFAULT_SHARED_PROBE_PATH: &str = "/healthz";

/// A value read from the file and the line it was on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting<T> {
    /// The value, unquoted and unescaped.
    pub value: T,
    /// Its line in the file.
    pub line: usize,
}

/// The `[Global]` section. Every field is as the file gave it; empty strings are kept (upstream
/// treats them as unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Global {
    /// `Zone` (legacy): the region is derived from it.
    pub zone: Option<Setting<String>>,
    /// `Region`.
    pub region: Option<Setting<String>>,
    /// `VPC`.
    pub vpc: Option<Setting<String>>,
    /// `SubnetID`.
    pub subnet_id: Option<Setting<String>>,
    /// `RouteTableID`.
    pub route_table_id: Option<Setting<String>>,
    /// `RoleARN`.
    pub role_arn: Option<Setting<String>>,
    /// `SourceARN`.
    pub source_arn: Option<Setting<String>>,
    /// `KubernetesClusterTag` (legacy cluster ID).
    pub kubernetes_cluster_tag: Option<Setting<String>>,
    /// `KubernetesClusterID`.
    pub kubernetes_cluster_id: Option<Setting<String>>,
    /// `DisableSecurityGroupIngress`.
    pub disable_security_group_ingress: Option<Setting<bool>>,
    /// `ElbSecurityGroup`.
    pub elb_security_group: Option<Setting<String>>,
    /// `NodeIPFamilies`, every value in order.
    pub node_ip_families: Vec<Setting<String>>,
    /// `ClusterServiceLoadBalancerHealthProbeMode`.
    pub health_probe_mode: Option<Setting<String>>,
    /// `ClusterServiceSharedLoadBalancerHealthProbePort` (an int32 upstream).
    pub health_probe_port: Option<Setting<i32>>,
    /// `ClusterServiceSharedLoadBalancerHealthProbePath`.
    pub health_probe_path: Option<Setting<String>>,
    /// `SupportedTopologyInstanceTypePattern`.
    pub supported_topology_instance_type_pattern: Option<Setting<String>>,
    /// `NLBSecurityGroupMode`.
    pub nlb_security_group_mode: Option<Setting<String>>,
}

/// One `[ServiceOverride "<name>"]` section (sections of the same name merge).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceOverride {
    /// The subsection name (`""` for a bare `[ServiceOverride]`, as gcfg stores it).
    pub name: String,
    /// The line of its first header.
    pub line: usize,
    /// `Service`.
    pub service: Option<Setting<String>>,
    /// `Region`.
    pub region: Option<Setting<String>>,
    /// `URL`.
    pub url: Option<Setting<String>>,
    /// `SigningRegion`.
    pub signing_region: Option<Setting<String>>,
    /// `SigningMethod` (read and unused, as upstream).
    pub signing_method: Option<Setting<String>>,
    /// `SigningName`.
    pub signing_name: Option<Setting<String>>,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudConfig {
    /// `[Global]`.
    pub global: Global,
    /// `[ServiceOverride "<name>"]` sections, in the order they first appear.
    pub service_overrides: Vec<ServiceOverride>,
    /// Unknown sections and keys, and removed keys, in file order.
    pub ignored: Vec<Notice>,
}

/// Reads and parses the file at `path`; errors name it.
pub fn read(path: &Path) -> Result<CloudConfig, CloudConfigError> {
    let text = gcfg::read_to_string(path)?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// Parses the text of a cloud-config file (syntax and value types; the semantics are in
/// [`CloudConfig::to_aws_config`]). The first error in file order wins, syntax or value, as
/// gcfg sets each value as it scans.
pub fn parse(text: &str) -> Result<CloudConfig, CloudConfigError> {
    let (document, syntax_error) = gcfg::parse_prefix(text);
    let mut config = CloudConfig::default();
    for section in &document.sections {
        if section.is("Global") {
            // `[Global "sub"]` is ignored (and noted), as gcfg ignores it.
            if section.sub.is_none() {
                for entry in &section.entries {
                    config.set_global(entry)?;
                }
            }
        } else if section.is("ServiceOverride") {
            let index = config.service_override(section.sub_or_empty(), section.line);
            for entry in &section.entries {
                config.set_override(index, entry)?;
            }
        }
    }
    if let Some(mut e) = syntax_error {
        if e.message == gcfg::KEY_BEFORE_SECTION {
            e.message
                .push_str(" (expected [Global] or [ServiceOverride \"name\"] first)");
        }
        return Err(e);
    }
    config.ignored = document
        .unknown(SCHEMA)
        .into_iter()
        .map(|mut notice| {
            if let Some(name) = notice.what.strip_prefix("[Global] ")
                && let Some((_, why)) = REMOVED_GLOBAL_KEYS
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
            {
                notice.why = (*why).into();
            }
            notice
        })
        .collect();
    Ok(config)
}

/// Upstream's spelling of each `[Global]` key.
const GLOBAL_KEYS: &[&str] = &[
    "Zone",
    "Region",
    "VPC",
    "SubnetID",
    "RouteTableID",
    "RoleARN",
    "SourceARN",
    "KubernetesClusterTag",
    "KubernetesClusterID",
    "DisableSecurityGroupIngress",
    "ElbSecurityGroup",
    "NodeIPFamilies",
    "ClusterServiceLoadBalancerHealthProbeMode",
    "ClusterServiceSharedLoadBalancerHealthProbePort",
    "ClusterServiceSharedLoadBalancerHealthProbePath",
    "SupportedTopologyInstanceTypePattern",
    "NLBSecurityGroupMode",
];

/// Upstream's spelling of each `[ServiceOverride]` key.
const OVERRIDE_KEYS: &[&str] = &[
    "Service",
    "Region",
    "URL",
    "SigningRegion",
    "SigningMethod",
    "SigningName",
];

/// Keys upstream removed and now ignores, with when.
const REMOVED_GLOBAL_KEYS: &[(&str, &str)] = &[(
    "DisableStrictZoneCheck",
    "removed from cloud-provider-aws in v1.27; it has no effect",
)];

/// Upstream's sections and keys.
const SCHEMA: &[gcfg::SectionSchema<'static>] = &[
    gcfg::SectionSchema {
        name: "Global",
        subsections: false,
        keys: GLOBAL_KEYS,
    },
    gcfg::SectionSchema {
        name: "ServiceOverride",
        subsections: true,
        keys: OVERRIDE_KEYS,
    },
];

fn canonical(keys: &[&'static str], name: &str) -> Option<&'static str> {
    keys.iter().copied().find(|k| k.eq_ignore_ascii_case(name))
}

impl CloudConfig {
    /// The index of the override named `name`, created at its first header.
    fn service_override(&mut self, name: &str, line: usize) -> usize {
        match self.service_overrides.iter().position(|o| o.name == name) {
            Some(i) => i,
            None => {
                self.service_overrides.push(ServiceOverride {
                    name: name.to_owned(),
                    line,
                    ..ServiceOverride::default()
                });
                self.service_overrides.len() - 1
            }
        }
    }

    /// One entry of `[ServiceOverride "<name>"]` (unknown keys are noted by [`parse`]).
    fn set_override(&mut self, index: usize, entry: &gcfg::Entry) -> Result<(), CloudConfigError> {
        let Some(key) = canonical(OVERRIDE_KEYS, &entry.name) else {
            return Ok(());
        };
        let o = &mut self.service_overrides[index];
        let value = entry
            .text(&format!("[ServiceOverride {:?}] {key}", o.name))?
            .to_owned();
        let slot = match key {
            "Service" => &mut o.service,
            "Region" => &mut o.region,
            "URL" => &mut o.url,
            "SigningRegion" => &mut o.signing_region,
            "SigningMethod" => &mut o.signing_method,
            _ => &mut o.signing_name,
        };
        *slot = Some(Setting {
            value,
            line: entry.line,
        });
        Ok(())
    }

    /// One entry of `[Global]` (unknown keys are noted by [`parse`]).
    fn set_global(&mut self, entry: &gcfg::Entry) -> Result<(), CloudConfigError> {
        let Some(key) = canonical(GLOBAL_KEYS, &entry.name) else {
            return Ok(());
        };
        let label = format!("[Global] {key}");
        let line = entry.line;
        let g = &mut self.global;
        match key {
            "DisableSecurityGroupIngress" => {
                let value = entry.boolean(&label)?;
                g.disable_security_group_ingress = Some(Setting { value, line });
            }
            "NodeIPFamilies" => match &entry.value {
                // A blank value starts the list afresh (gcfg's multi-valued variables).
                None => g.node_ip_families.clear(),
                Some(value) => g.node_ip_families.push(Setting {
                    value: value.clone(),
                    line,
                }),
            },
            "ClusterServiceSharedLoadBalancerHealthProbePort" => {
                let text = entry.text(&label)?;
                let value = gcfg::parse_int::<i32>(text).map_err(|_| {
                    CloudConfigError::at(
                        line,
                        Some(label.clone()),
                        format!("{text:?} is not an integer (decimal, or hexadecimal with 0x)"),
                    )
                })?;
                g.health_probe_port = Some(Setting { value, line });
            }
            _ => {
                let value = entry.text(&label)?.to_owned();
                let slot = match key {
                    "Zone" => &mut g.zone,
                    "Region" => &mut g.region,
                    "VPC" => &mut g.vpc,
                    "SubnetID" => &mut g.subnet_id,
                    "RouteTableID" => &mut g.route_table_id,
                    "RoleARN" => &mut g.role_arn,
                    "SourceARN" => &mut g.source_arn,
                    "KubernetesClusterTag" => &mut g.kubernetes_cluster_tag,
                    "KubernetesClusterID" => &mut g.kubernetes_cluster_id,
                    "ElbSecurityGroup" => &mut g.elb_security_group,
                    "ClusterServiceLoadBalancerHealthProbeMode" => &mut g.health_probe_mode,
                    "ClusterServiceSharedLoadBalancerHealthProbePath" => &mut g.health_probe_path,
                    "SupportedTopologyInstanceTypePattern" => &mut g.supported_topology_instance_type_pattern,
                    _ => &mut g.nlb_security_group_mode,
                };
                *slot = Some(Setting { value, line });
            }
        }
        Ok(())
    }

    /// The provider settings the file gives, over [`AwsConfig::default`], with upstream's
    /// semantics; refuses what upstream refuses (at start or later) and what this provider does
    /// not implement. Settings the file does not have keep their defaults, so the caller may lay
    /// flags over the result.
    pub fn to_aws_config(&self) -> Result<AwsConfig, CloudConfigError> {
        let g = &self.global;
        let key_err = |s: &Setting<String>, key: &str, m: String| {
            CloudConfigError::at(s.line, Some(format!("[Global] {key}")), m)
        };
        let mut config = AwsConfig::default();

        // Region: `Region`, or derived from the legacy `Zone` (upstream prefers `Zone` when both
        // are set; when they disagree the file is ambiguous and refused).
        let region = set(&g.region);
        if let Some(zone) = set(&g.zone) {
            let derived = zone_region(&zone.value).ok_or_else(|| {
                key_err(
                    zone,
                    "Zone",
                    format!(
                        "{:?} is not an availability zone name (upstream's ^([a-zA-Z]+-)+\\d+ finds no region in it)",
                        zone.value
                    ),
                )
            })?;
            if let Some(region) = region
                && region.value != derived
            {
                return Err(key_err(
                    zone,
                    "Zone",
                    format!(
                        "zone {:?} is in region {derived:?} but Region (line {}) is {:?}; set one of them",
                        zone.value, region.line, region.value
                    ),
                ));
            }
            config.region = derived;
        } else if let Some(region) = region {
            config.region = region.value.clone();
        }

        // `VPC` counts only in upstream's cross-account or off-AWS mode: with `SubnetID` or
        // `RoleARN`, and a cluster ID. Elsewhere upstream takes its own instance's VPC and
        // ignores the line, so a stale one must not move where load balancers are looked for.
        let cluster_id_set =
            set(&g.kubernetes_cluster_tag).is_some() || set(&g.kubernetes_cluster_id).is_some();
        let cross_account = (set(&g.subnet_id).is_some() || set(&g.role_arn).is_some()) && cluster_id_set;
        match set(&g.vpc) {
            Some(vpc) if cross_account => config.vpc_id = Some(vpc.value.clone()),
            Some(vpc) => tracing::warn!(
                line = vpc.line,
                vpc = %vpc.value,
                "[Global] VPC is ignored, as cloud-provider-aws ignores it without SubnetID or RoleARN and a cluster ID; the cluster's VPC is the load balancers' and the nodes' own (or set --aws-vpc-id)"
            ),
            None => {}
        }
        config.subnet_ids = set(&g.subnet_id).map(|s| s.value.clone()).into_iter().collect();
        config.route_table_id = set(&g.route_table_id).map(|s| s.value.clone());

        if let Some(role) = set(&g.role_arn) {
            if let Err(e) = crate::config::role_account(&role.value) {
                return Err(key_err(role, "RoleARN", e));
            }
            config.role_arn = Some(role.value.clone());
            config.source_arn = set(&g.source_arn).map(|s| s.value.clone());
        }

        // Cluster identity.
        match (set(&g.kubernetes_cluster_tag), set(&g.kubernetes_cluster_id)) {
            (Some(tag), Some(id)) if tag.value != id.value => {
                return Err(key_err(
                    id,
                    "KubernetesClusterID",
                    format!(
                        "{:?} differs from KubernetesClusterTag {:?} (line {}); set one, or both the same",
                        id.value, tag.value, tag.line
                    ),
                ));
            }
            (Some(tag), _) => {
                config.cluster_id = Some(tag.value.clone());
                config.legacy_cluster_tag = true;
            }
            (None, Some(id)) => config.cluster_id = Some(id.value.clone()),
            (None, None) => {}
        }

        // Load balancers.
        let lb = &mut config.load_balancers;
        lb.disable_security_group_ingress =
            g.disable_security_group_ingress.as_ref().is_some_and(|s| s.value);
        lb.elb_security_group = set(&g.elb_security_group).map(|s| s.value.clone());
        lb.health_probe = health_probe(g)?;
        if let Some(mode) = &g.nlb_security_group_mode
            && !mode.value.is_empty()
        {
            let message = if mode.value == "Managed" {
                "\"Managed\" (a security group created and managed for every NLB) is not implemented by \
                 this provider: its NLBs get no security group of their own, as upstream's default. \
                 Remove the key to keep that behaviour"
                    .to_owned()
            } else {
                format!(
                    "invalid NLB security group mode {:?}: the only valid value is \"Managed\"",
                    mode.value
                )
            };
            return Err(key_err(mode, "NLBSecurityGroupMode", message));
        }

        // Node addresses.
        if !g.node_ip_families.is_empty() {
            let mut families = Vec::new();
            for s in &g.node_ip_families {
                let family = match s.value.to_ascii_lowercase().as_str() {
                    "ipv4" => IpFamily::V4,
                    "ipv6" => IpFamily::V6,
                    _ => {
                        return Err(key_err(
                            s,
                            "NodeIPFamilies",
                            format!("{:?} is not an IP family (ipv4 or ipv6)", s.value),
                        ));
                    }
                };
                if !families.contains(&family) {
                    families.push(family);
                }
            }
            config.node_ip_families = families;
        }

        if let Some(pattern) = set(&g.supported_topology_instance_type_pattern) {
            if let Some(e) = topology_pattern_error(&pattern.value) {
                return Err(key_err(pattern, "SupportedTopologyInstanceTypePattern", e));
            }
            config.supported_topology_instance_type_pattern = Some(pattern.value.clone());
        }

        config.service_endpoints = self.service_endpoints()?;
        Ok(config)
    }

    /// Upstream's `ValidateOverrides`, then each override as the endpoints of the services
    /// this provider calls.
    fn service_endpoints(&self) -> Result<Vec<ServiceEndpoint>, CloudConfigError> {
        let mut endpoints: Vec<(ServiceEndpoint, usize)> = Vec::new();
        let mut seen: Vec<(&str, &str, usize)> = Vec::new();
        for o in &self.service_overrides {
            let section = format!("[ServiceOverride {:?}]", o.name);
            // Upstream trims these before checking them (gcfg keeps quoted blanks).
            fn required<'a>(
                s: &'a Option<Setting<String>>,
                section: &str,
                header_line: usize,
                key: &str,
            ) -> Result<(&'a str, usize), CloudConfigError> {
                s.as_ref()
                    .map(|s| (s.value.trim(), s.line))
                    .filter(|(v, _)| !v.is_empty())
                    .ok_or_else(|| {
                        CloudConfigError::at(
                            header_line,
                            Some(format!("{section} {key}")),
                            "is missing or empty",
                        )
                    })
            }
            let required = |s, key| required(s, &section, o.line, key);
            let (service, line) = required(&o.service, "Service")?;
            let (region, _) = required(&o.region, "Region")?;
            let (url, url_line) = required(&o.url, "URL")?;
            let (signing_region, _) = required(&o.signing_region, "SigningRegion")?;
            if let Some((_, _, first)) = seen.iter().find(|(s, r, _)| *s == service && *r == region) {
                return Err(CloudConfigError::at(
                    line,
                    Some(format!("{section} Service")),
                    format!("duplicate override of {service} in {region} (the first is on line {first})"),
                ));
            }
            seen.push((service, region, line));
            let signing_name = o
                .signing_name
                .as_ref()
                .map(|s| s.value.trim())
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            for service in AwsService::from_override_name(service) {
                let endpoint = ServiceEndpoint {
                    service,
                    region: region.to_owned(),
                    url: url.to_owned(),
                    signing_region: signing_region.to_owned(),
                    signing_name: signing_name.clone(),
                };
                if let Err(e) = endpoint.validate() {
                    return Err(CloudConfigError::at(url_line, Some(format!("{section} URL")), e));
                }
                if let Some((_, first)) = endpoints
                    .iter()
                    .find(|(e, _)| e.service == service && e.region == region)
                {
                    return Err(CloudConfigError::at(
                        line,
                        Some(format!("{section} Service")),
                        format!(
                            "a second override of {} in {region} (the first is on line {first})",
                            service.name()
                        ),
                    ));
                }
                endpoints.push((endpoint, line));
            }
        }
        Ok(endpoints.into_iter().map(|(e, _)| e).collect())
    }

    /// Everything in the file that has no effect, one line each: unknown sections and keys,
    /// removed keys, and settings this provider stores but does not act on. The gateway logs
    /// them in one warning at start.
    pub fn notices(&self) -> Vec<Notice> {
        let g = &self.global;
        let mut notices = self.ignored.clone();
        let mut note = |line: usize, what: &str, why: &str| {
            notices.push(Notice {
                line,
                what: what.to_owned(),
                why: why.to_owned(),
            });
        };
        if g.role_arn.as_ref().is_none_or(|r| r.value.is_empty())
            && let Some(s) = set(&g.source_arn)
        {
            note(
                s.line,
                "[Global] SourceARN",
                "has no effect without RoleARN, as upstream",
            );
        }
        let shared = g.health_probe_mode.as_ref().is_some_and(|m| m.value == "Shared");
        if !shared {
            if let Some(s) = &g.health_probe_port {
                note(
                    s.line,
                    "[Global] ClusterServiceSharedLoadBalancerHealthProbePort",
                    "has no effect unless ClusterServiceLoadBalancerHealthProbeMode is Shared",
                );
            }
            if let Some(s) = set(&g.health_probe_path) {
                note(
                    s.line,
                    "[Global] ClusterServiceSharedLoadBalancerHealthProbePath",
                    "has no effect unless ClusterServiceLoadBalancerHealthProbeMode is Shared",
                );
            }
        }
        if let Some(s) = set(&g.supported_topology_instance_type_pattern) {
            note(
                s.line,
                "[Global] SupportedTopologyInstanceTypePattern",
                "stored, but this provider does not read instance topology (DescribeInstanceTopology), so it has no effect yet",
            );
        }
        for o in &self.service_overrides {
            if let Some(service) = &o.service
                && AwsService::from_override_name(service.value.trim()).is_empty()
            {
                note(
                    service.line,
                    &format!(
                        "[ServiceOverride {:?}] Service = {}",
                        o.name,
                        service.value.trim()
                    ),
                    "this provider calls only EC2, Elastic Load Balancing and Elastic Load Balancing v2 \
                     (and STS for RoleARN, which upstream never overrides)",
                );
            }
        }
        notices.sort_by_key(|n| n.line);
        notices
    }
}

/// A string setting that is set and not empty (upstream treats `""` as unset).
fn set(s: &Option<Setting<String>>) -> Option<&Setting<String>> {
    s.as_ref().filter(|s| !s.value.is_empty())
}

/// Upstream's `azToRegion`: the match of `^([a-zA-Z]+-)+\d+` (ASCII digits, as Go's `\d`).
pub fn zone_region(zone: &str) -> Option<String> {
    static ZONE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new("^([a-zA-Z]+-)+[0-9]+").expect("a valid regex"));
    ZONE.find(zone).map(|m| m.as_str().to_owned())
}

fn health_probe(g: &Global) -> Result<HealthProbe, CloudConfigError> {
    let mode = g.health_probe_mode.as_ref();
    match mode.map(|m| m.value.as_str()) {
        None | Some("" | "ServiceNodePort") => Ok(HealthProbe::ServiceNodePort),
        Some("Shared") => {
            let port = match &g.health_probe_port {
                None => DEFAULT_SHARED_PROBE_PORT,
                Some(p) if p.value == 0 => DEFAULT_SHARED_PROBE_PORT,
                Some(p) => u16::try_from(p.value).map_err(|_| {
                    CloudConfigError::at(
                        p.line,
                        Some("[Global] ClusterServiceSharedLoadBalancerHealthProbePort".into()),
                        format!(
                            "{} is not a port (1 to 65535, or 0 for the default {DEFAULT_SHARED_PROBE_PORT})",
                            p.value
                        ),
                    )
                })?,
            };
            let path =
                set(&g.health_probe_path).map_or(DEFAULT_SHARED_PROBE_PATH.to_owned(), |p| p.value.clone());
            if !path.starts_with('/') {
                let p = g.health_probe_path.as_ref().map_or(0, |p| p.line);
                return Err(CloudConfigError::at(
                    p,
                    Some("[Global] ClusterServiceSharedLoadBalancerHealthProbePath".into()),
                    format!("{path:?} must start with '/'"),
                ));
            }
            Ok(HealthProbe::Shared { port, path })
        }
        Some(other) => {
            let m = mode.map_or(0, |m| m.line);
            Err(CloudConfigError::at(
                m,
                Some("[Global] ClusterServiceLoadBalancerHealthProbeMode".into()),
                format!(
                    "unsupported mode {other:?}: ServiceNodePort (the default) or Shared (upstream only fails \
                     at the first load-balancer sync; this gateway refuses it at start)"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::LbSettings;

    fn config(text: &str) -> AwsConfig {
        parse(text)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_aws_config()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The error of parsing and converting `text`.
    fn error(text: &str) -> CloudConfigError {
        match parse(text) {
            Err(e) => e,
            Ok(c) => c.to_aws_config().expect_err("refused"),
        }
    }

    #[track_caller]
    fn assert_error(text: &str, line: usize, key: Option<&str>, needle: &str) {
        let e = error(text);
        assert_eq!(e.line, Some(line), "{e}");
        assert_eq!(e.key.as_deref(), key, "{e}");
        let shown = e.to_string();
        assert!(shown.contains(needle), "{shown:?} lacks {needle:?}");
        assert!(shown.contains(&format!("line {line}")), "{shown}");
    }

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/cloud-config")
            .join(name)
    }

    #[test]
    fn every_global_key_maps_to_the_provider_settings() {
        let c = config(
            "[Global]
Region = eu-west-1
VPC = vpc-0abc
SubnetID = subnet-0abc
RouteTableID = rtb-0abc
RoleARN = arn:aws:iam::123456789012:role/ccm
SourceARN = arn:aws:eks:eu-west-1:123456789012:cluster/prod
KubernetesClusterID = prod
DisableSecurityGroupIngress = true
ElbSecurityGroup = sg-0shared
NodeIPFamilies = ipv6
NodeIPFamilies = ipv4
ClusterServiceLoadBalancerHealthProbeMode = Shared
ClusterServiceSharedLoadBalancerHealthProbePort = 10257
ClusterServiceSharedLoadBalancerHealthProbePath = /livez
SupportedTopologyInstanceTypePattern = \"^(p4d|p5|trn1)\\\\..*$\"
NLBSecurityGroupMode =
",
        );
        let expected = AwsConfig {
            region: "eu-west-1".into(),
            vpc_id: Some("vpc-0abc".into()),
            subnet_ids: vec!["subnet-0abc".into()],
            route_table_id: Some("rtb-0abc".into()),
            role_arn: Some("arn:aws:iam::123456789012:role/ccm".into()),
            source_arn: Some("arn:aws:eks:eu-west-1:123456789012:cluster/prod".into()),
            cluster_id: Some("prod".into()),
            legacy_cluster_tag: false,
            load_balancers: LbSettings {
                elb_security_group: Some("sg-0shared".into()),
                disable_security_group_ingress: true,
                health_probe: HealthProbe::Shared {
                    port: 10257,
                    path: "/livez".into(),
                },
            },
            node_ip_families: vec![IpFamily::V6, IpFamily::V4],
            supported_topology_instance_type_pattern: Some("^(p4d|p5|trn1)\\..*$".into()),
            ..AwsConfig::default()
        };
        assert_eq!(c, expected);
        c.validate().unwrap();
    }

    #[test]
    fn the_vpc_counts_only_in_cross_account_or_off_aws_mode() {
        let vpc = |extra: &str| config(&format!("[Global]\nVPC = vpc-9\n{extra}")).vpc_id;
        assert_eq!(vpc(""), None);
        assert_eq!(vpc("SubnetID = subnet-1"), None, "no cluster ID");
        assert_eq!(
            vpc("KubernetesClusterID = c"),
            None,
            "neither SubnetID nor RoleARN"
        );
        assert_eq!(
            vpc("SubnetID = subnet-1\nKubernetesClusterID = c").as_deref(),
            Some("vpc-9")
        );
        assert_eq!(
            vpc("RoleARN = arn:aws:iam::123456789012:role/r\nKubernetesClusterTag = c").as_deref(),
            Some("vpc-9")
        );
    }

    #[test]
    fn an_empty_file_keeps_every_default() {
        assert_eq!(config(""), AwsConfig::default());
        assert_eq!(config("; nothing\n[Global]\n# at all\n"), AwsConfig::default());
        // Empty values are unset, as upstream reads them.
        assert_eq!(
            config("[Global]\nRegion =\nVPC = \"\"\nZone=\n"),
            AwsConfig::default()
        );
    }

    #[test]
    fn section_and_key_names_are_case_insensitive() {
        let c = config(
            "[global]\nREGION = us-east-2\nvpc = vpc-1\nkubernetesclustertag = old\n\
             [SERVICEOVERRIDE \"a\"]\nservice = ec2\nregion = us-east-2\nurl = https://ec2.internal\nsigningregion = us-east-2\n",
        );
        assert_eq!(c.region, "us-east-2");
        // VPC without SubnetID or RoleARN: ignored, as upstream ignores it.
        assert_eq!(c.vpc_id, None);
        assert_eq!(
            (c.cluster_id.as_deref(), c.legacy_cluster_tag),
            (Some("old"), true)
        );
        assert_eq!(c.service_endpoints.len(), 1);
        assert_eq!(c.service_endpoints[0].url, "https://ec2.internal");
        // Blanks around the brackets and the name are allowed, as gcfg allows them.
        assert_eq!(config("[ Global ]\nRegion=ap-south-1").region, "ap-south-1");
    }

    #[test]
    fn booleans_read_as_gcfg_reads_them() {
        for (text, expected) in [
            ("true", true),
            ("YES", true),
            ("On", true),
            ("1", true),
            ("false", false),
            ("no", false),
            ("OFF", false),
            ("0", false),
            ("\"yes\"", true),
        ] {
            let c = config(&format!("[Global]\nDisableSecurityGroupIngress = {text}\n"));
            assert_eq!(
                c.load_balancers.disable_security_group_ingress, expected,
                "{text}"
            );
        }
        // A bare key is true.
        assert!(
            config("[Global]\nDisableSecurityGroupIngress\n")
                .load_balancers
                .disable_security_group_ingress
        );
        assert!(
            config("[Global]\nDisableSecurityGroupIngress ; yes\n")
                .load_balancers
                .disable_security_group_ingress
        );
        for bad in ["maybe", "", "2", "t"] {
            assert_error(
                &format!("[Global]\n\nDisableSecurityGroupIngress = {bad}\n"),
                3,
                Some("[Global] DisableSecurityGroupIngress"),
                "not a boolean",
            );
        }
    }

    #[test]
    fn node_ip_families_are_multi_valued() {
        assert_eq!(
            config("[Global]\nNodeIPFamilies = ipv6").node_ip_families,
            [IpFamily::V6]
        );
        assert_eq!(
            config("[Global]\nNodeIPFamilies = ipv6\nNodeIPFamilies = ipv4\nNodeIPFamilies = IPv6")
                .node_ip_families,
            [IpFamily::V6, IpFamily::V4]
        );
        // A bare key starts the list afresh (gcfg); nothing left is the default, IPv4.
        assert_eq!(
            config("[Global]\nNodeIPFamilies = ipv6\nNodeIPFamilies\nNodeIPFamilies = ipv4").node_ip_families,
            [IpFamily::V4]
        );
        assert_eq!(
            config("[Global]\nNodeIPFamilies = ipv6\nNodeIPFamilies").node_ip_families,
            [IpFamily::V4]
        );
        assert_error(
            "[Global]\nNodeIPFamilies = ipv4\nNodeIPFamilies = dual\n",
            3,
            Some("[Global] NodeIPFamilies"),
            "\"dual\" is not an IP family",
        );
    }

    #[test]
    fn unknown_and_removed_keys_and_sections_are_collected_not_fatal() {
        let parsed = parse(
            "[Global]\nRegion = eu-west-1\nDisableStrictZoneCheck = true\nNoSuchKey = 1\n\
             [Extra]\nAnything = goes\n[Extra \"sub\"]\n[Global \"sub\"]\nRegion = ignored\n\
             [ServiceOverride \"1\"]\nService = ec2\nRegion = eu-west-1\nURL = https://ec2.example\n\
             SigningRegion = eu-west-1\nColour = blue\n",
        )
        .unwrap();
        let shown: Vec<String> = parsed.notices().iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 6, "{shown:#?}");
        assert!(
            shown[0].starts_with("line 3: [Global] DisableStrictZoneCheck (removed"),
            "{shown:#?}"
        );
        assert!(shown[0].contains("no effect"), "{shown:#?}");
        assert!(
            shown[1].starts_with("line 4: [Global] NoSuchKey (unknown key"),
            "{shown:#?}"
        );
        assert!(
            shown[2].starts_with("line 5: [Extra] (unknown section"),
            "{shown:#?}"
        );
        assert!(shown[3].starts_with("line 7: [Extra \"sub\"]"), "{shown:#?}");
        assert!(shown[4].starts_with("line 8: [Global \"sub\"]"), "{shown:#?}");
        assert!(
            shown[5].starts_with("line 15: [ServiceOverride \"1\"] Colour"),
            "{shown:#?}"
        );
        let c = parsed.to_aws_config().unwrap();
        assert_eq!(c.region, "eu-west-1");
        // Known keys give no notice.
        assert!(parse("[Global]\nRegion=a-1").unwrap().notices().is_empty());
    }

    #[test]
    fn format_errors_and_repeats_through_the_aws_reader() {
        // The format is the gcfg crate's (its tests cover the syntax); here, what the AWS
        // reader adds: its hint, its key names, its types, and the first error in file order.
        assert_error(
            "Region = x\n",
            1,
            Some("Region"),
            "before any section header (expected [Global] or [ServiceOverride \"name\"] first)",
        );
        assert_error("[Global]\nRegion = x\n[Global\n", 3, None, "expected ']'");
        assert_error(
            "[Global]\n\n\nRegion\n",
            4,
            Some("[Global] Region"),
            "needs a value",
        );
        assert_error(
            "[ServiceOverride \"1\"]\nURL\n",
            2,
            Some("[ServiceOverride \"1\"] URL"),
            "needs a value",
        );
        assert_error(
            "[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = ten\n",
            2,
            Some("[Global] ClusterServiceSharedLoadBalancerHealthProbePort"),
            "\"ten\" is not an integer (decimal, or hexadecimal with 0x)",
        );
        assert_error(
            "[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = 99999999999\n",
            2,
            Some("[Global] ClusterServiceSharedLoadBalancerHealthProbePort"),
            "not an integer",
        );
        // A bad value before a syntax error is the error; after it, the syntax error is.
        assert_error(
            "[Global]\nDisableSecurityGroupIngress = maybe\nVPC = \"x\n",
            2,
            Some("[Global] DisableSecurityGroupIngress"),
            "not a boolean",
        );
        assert_error(
            "[Global]\nVPC = \"x\nDisableSecurityGroupIngress = maybe\n",
            2,
            Some("VPC"),
            "no closing quote",
        );
        // Keys of ignored sections are not checked, as gcfg does not set them.
        assert!(parse("[Global \"x\"]\nDisableSecurityGroupIngress = maybe\n").is_ok());
        assert!(parse("[Other]\nRegion\n").is_ok());
        // Quoting and escapes reach the settings.
        let parsed = parse("[Global]\nVPC = \"vpc-;#\" ; c\nSubnetID = a\"b c\"d\n").unwrap();
        assert_eq!(parsed.global.vpc.as_ref().unwrap().value, "vpc-;#");
        assert_eq!(parsed.global.subnet_id.as_ref().unwrap().value, "ab cd");
        // The last of a repeated key wins; repeated sections merge.
        let c = config(
            "[Global]\nRegion=a-1\nSubnetID=subnet-1\n[Global]\nVPC=vpc-3\nRegion=b-2\nKubernetesClusterID=c\n",
        );
        assert_eq!((c.region.as_str(), c.vpc_id.as_deref()), ("b-2", Some("vpc-3")));
    }

    #[test]
    fn read_names_the_file() {
        let dir = std::env::temp_dir().join(format!("cloud-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.conf");
        std::fs::write(
            &path,
            "[Global]\nRegion = eu-west-1\nDisableSecurityGroupIngress = sure\n",
        )
        .unwrap();
        let shown = read(&path).unwrap_err().to_string();
        assert!(shown.contains(&path.display().to_string()), "{shown}");
        assert!(
            shown.contains("line 3, [Global] DisableSecurityGroupIngress"),
            "{shown}"
        );
        std::fs::write(&path, b"[Global]\nRegion = eu-\xff\n").unwrap();
        let e = read(&path).unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (Some(2), "not UTF-8"));
        let missing = read(&dir.join("missing.conf")).unwrap_err().to_string();
        assert!(
            missing.contains("missing.conf") && missing.contains("cannot read it"),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_region_comes_from_region_or_the_legacy_zone() {
        assert_eq!(config("[Global]\nZone = eu-west-1a").region, "eu-west-1");
        assert_eq!(config("[Global]\nZone = us-gov-west-1b").region, "us-gov-west-1");
        assert_eq!(config("[Global]\nZone = us-east-1-bos-1a").region, "us-east-1");
        assert_eq!(
            config("[Global]\nZone = eu-west-1a\nRegion = eu-west-1").region,
            "eu-west-1"
        );
        assert_error(
            "[Global]\nZone = local\n",
            2,
            Some("[Global] Zone"),
            "not an availability zone",
        );
        assert_error(
            "[Global]\nRegion = us-east-1\nZone = eu-west-1a\n",
            3,
            Some("[Global] Zone"),
            "is in region \"eu-west-1\" but Region (line 2) is \"us-east-1\"",
        );
        assert_eq!(zone_region("ap-northeast-3c").as_deref(), Some("ap-northeast-3"));
        assert_eq!(zone_region("eu-west-"), None);
        assert_eq!(zone_region("1-eu"), None);
    }

    #[test]
    fn the_cluster_id_comes_from_the_id_or_the_legacy_tag() {
        let c = config("[Global]\nKubernetesClusterID = prod");
        assert_eq!(
            (c.cluster_id.as_deref(), c.legacy_cluster_tag),
            (Some("prod"), false)
        );
        let c = config("[Global]\nKubernetesClusterTag = prod");
        assert_eq!(
            (c.cluster_id.as_deref(), c.legacy_cluster_tag),
            (Some("prod"), true)
        );
        let c = config("[Global]\nKubernetesClusterTag = prod\nKubernetesClusterID = prod");
        assert_eq!(
            (c.cluster_id.as_deref(), c.legacy_cluster_tag),
            (Some("prod"), true)
        );
        assert_error(
            "[Global]\nKubernetesClusterTag = old\nKubernetesClusterID = new\n",
            3,
            Some("[Global] KubernetesClusterID"),
            "differs from KubernetesClusterTag \"old\" (line 2)",
        );
    }

    #[test]
    fn health_probe_modes_as_upstream_and_refused_at_start() {
        let probe = |text: &str| config(&format!("[Global]\n{text}")).load_balancers.health_probe;
        assert_eq!(probe(""), HealthProbe::ServiceNodePort);
        assert_eq!(
            probe("ClusterServiceLoadBalancerHealthProbeMode ="),
            HealthProbe::ServiceNodePort
        );
        assert_eq!(
            probe("ClusterServiceLoadBalancerHealthProbeMode = ServiceNodePort"),
            HealthProbe::ServiceNodePort
        );
        let shared_default = HealthProbe::Shared {
            port: 10256,
            path: "/healthz".into(),
        };
        assert_eq!(
            probe("ClusterServiceLoadBalancerHealthProbeMode = Shared"),
            shared_default
        );
        assert_eq!(
            probe(
                "ClusterServiceLoadBalancerHealthProbeMode = Shared\nClusterServiceSharedLoadBalancerHealthProbePort = 0"
            ),
            shared_default
        );
        assert_eq!(
            probe(
                "ClusterServiceLoadBalancerHealthProbeMode = Shared\nClusterServiceSharedLoadBalancerHealthProbePort = 0x2818"
            ),
            HealthProbe::Shared {
                port: 10264,
                path: "/healthz".into()
            }
        );
        // Upstream compares the mode exactly.
        assert_error(
            "[Global]\nClusterServiceLoadBalancerHealthProbeMode = shared\n",
            2,
            Some("[Global] ClusterServiceLoadBalancerHealthProbeMode"),
            "unsupported mode \"shared\"",
        );
        assert_error(
            "[Global]\nClusterServiceLoadBalancerHealthProbeMode = Shared\nClusterServiceSharedLoadBalancerHealthProbePort = 70000\n",
            3,
            Some("[Global] ClusterServiceSharedLoadBalancerHealthProbePort"),
            "70000 is not a port",
        );
        assert_error(
            "[Global]\nClusterServiceLoadBalancerHealthProbeMode = Shared\nClusterServiceSharedLoadBalancerHealthProbePath = healthz\n",
            3,
            Some("[Global] ClusterServiceSharedLoadBalancerHealthProbePath"),
            "must start with '/'",
        );
        // Port and path without Shared have no effect, and say so.
        let notices = parse("[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = 1\n")
            .unwrap()
            .notices();
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0]
                .why
                .contains("unless ClusterServiceLoadBalancerHealthProbeMode is Shared")
        );
    }

    #[test]
    fn nlb_security_group_mode_managed_is_refused_by_name() {
        assert_eq!(config("[Global]\nNLBSecurityGroupMode ="), AwsConfig::default());
        assert_error(
            "[Global]\nNLBSecurityGroupMode = Managed\n",
            2,
            Some("[Global] NLBSecurityGroupMode"),
            "not implemented by this provider",
        );
        assert_error(
            "[Global]\nNLBSecurityGroupMode = managed\n",
            2,
            Some("[Global] NLBSecurityGroupMode"),
            "invalid NLB security group mode \"managed\"",
        );
    }

    #[test]
    fn role_and_source_arns() {
        assert_error(
            "[Global]\nRoleARN = ccm-role\n",
            2,
            Some("[Global] RoleARN"),
            "is not an ARN",
        );
        // SourceARN alone does nothing, as upstream, and says so.
        let parsed = parse("[Global]\nSourceARN = arn:aws:eks:eu-west-1:1:cluster/c\n").unwrap();
        assert_eq!(parsed.to_aws_config().unwrap().source_arn, None);
        assert!(
            parsed.notices()[0].why.contains("without RoleARN"),
            "{:?}",
            parsed.notices()
        );
    }

    #[test]
    fn the_topology_pattern_is_stored_and_checked() {
        let parsed = parse("[Global]\nSupportedTopologyInstanceTypePattern = \"^trn2\\\\.\"\n").unwrap();
        assert_eq!(
            parsed
                .to_aws_config()
                .unwrap()
                .supported_topology_instance_type_pattern
                .as_deref(),
            Some("^trn2\\.")
        );
        assert!(parsed.notices()[0].why.contains("no effect"));
        assert_error(
            "[Global]\nSupportedTopologyInstanceTypePattern = ^(p4d\n",
            2,
            Some("[Global] SupportedTopologyInstanceTypePattern"),
            "not a valid regular expression",
        );
    }

    #[test]
    fn service_overrides_validate_as_upstream_and_map_to_services() {
        let c = config(
            "[ServiceOverride \"ec2\"]\nService = EC2\nRegion = eu-west-1\nURL = https://ec2.internal:8443\n\
             SigningRegion = eu-central-1\nSigningName = ec2-custom\nSigningMethod = v4\n\
             [ServiceOverride \"lb\"]\nService = elasticloadbalancing\nRegion = eu-west-1\nURL = http://lb.internal\n\
             SigningRegion = eu-west-1\n\
             [ServiceOverride \"elsewhere\"]\nService = ec2\nRegion = us-east-1\nURL = https://ec2.us\nSigningRegion = us-east-1\n",
        );
        let e = &c.service_endpoints;
        assert_eq!(e.len(), 4, "{e:#?}");
        assert_eq!(
            e[0],
            ServiceEndpoint {
                service: AwsService::Ec2,
                region: "eu-west-1".into(),
                url: "https://ec2.internal:8443".into(),
                signing_region: "eu-central-1".into(),
                signing_name: Some("ec2-custom".into()),
            }
        );
        assert_eq!((e[1].service, e[2].service), (AwsService::Elb, AwsService::Elbv2));
        assert_eq!(e[1].signing_name, None);
        assert_eq!(
            (e[3].service, e[3].region.as_str()),
            (AwsService::Ec2, "us-east-1")
        );
        c.validate().unwrap();

        let base =
            "[ServiceOverride \"1\"]\nService = ec2\nRegion = r-1\nURL = https://x\nSigningRegion = r-1\n";
        for key in ["Service", "Region", "URL", "SigningRegion"] {
            let without = base
                .lines()
                .map(|l| {
                    if l.starts_with(&format!("{key} ")) {
                        format!("{key} = \"  \"")
                    } else {
                        l.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            assert_error(
                &without,
                1,
                Some(&format!("[ServiceOverride \"1\"] {key}")),
                "missing or empty",
            );
            let dropped: String = base
                .lines()
                .filter(|l| !l.starts_with(&format!("{key} ")))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_error(
                &dropped,
                1,
                Some(&format!("[ServiceOverride \"1\"] {key}")),
                "missing or empty",
            );
        }
        assert_error(
            "[ServiceOverride \"1\"]\nService = ec2\nRegion = r-1\nURL = ec2.example\nSigningRegion = r-1\n",
            4,
            Some("[ServiceOverride \"1\"] URL"),
            "must be http(s)://host",
        );
        // The same service named two ways is still one service twice.
        assert_error(
            "[ServiceOverride \"1\"]\nService = EC2\nRegion = r-1\nURL = https://a\nSigningRegion = r-1\n\
             [ServiceOverride \"2\"]\nService = ec2\nRegion = r-1\nURL = https://b\nSigningRegion = r-1\n",
            7,
            Some("[ServiceOverride \"2\"] Service"),
            "a second override of EC2 in r-1 (the first is on line 2)",
        );
        // Overrides of services the provider never calls are accepted and named.
        let parsed = parse(
            "[ServiceOverride \"k\"]\nService = kms\nRegion = r-1\nURL = https://k\nSigningRegion = r-1\n",
        )
        .unwrap();
        assert!(parsed.to_aws_config().unwrap().service_endpoints.is_empty());
        assert!(
            parsed.notices()[0].to_string().contains("Service = kms"),
            "{:?}",
            parsed.notices()
        );
        // A bare [ServiceOverride] is the override named "" (gcfg).
        let c =
            config("[ServiceOverride]\nService = elb\nRegion = r-1\nURL = https://e\nSigningRegion = r-1\n");
        assert_eq!(c.service_endpoints[0].service, AwsService::Elb);
    }

    #[test]
    fn upstream_example_development() {
        let c = read(&fixture("development.conf"))
            .unwrap()
            .to_aws_config()
            .unwrap();
        assert_eq!(c.region, "us-east-1");
        assert_eq!(
            c.vpc_id.as_deref(),
            Some("<VPC ID where the cluster is installed>")
        );
        assert_eq!(
            c.subnet_ids,
            ["<Single subnet ID used by load balancer controller>"]
        );
        assert_eq!(
            (c.cluster_id.as_deref(), c.legacy_cluster_tag),
            (Some("<kubernetes cluster ID>"), true)
        );
        assert!(!c.load_balancers.disable_security_group_ingress);
        assert_eq!(
            c.load_balancers.health_probe,
            HealthProbe::Shared {
                port: 10256,
                path: "/healthz".into()
            }
        );
        // The placeholders are not IDs: the provider refuses them, naming the setting.
        assert!(c.validate().unwrap_err().to_string().contains("VPC ID"));
    }

    #[test]
    fn upstream_example_nlb_security_groups_is_refused() {
        let e = read(&fixture("nlb-security-groups.conf"))
            .unwrap()
            .to_aws_config()
            .unwrap_err();
        assert_eq!(
            (e.line, e.key.as_deref()),
            (Some(3), Some("[Global] NLBSecurityGroupMode"))
        );
    }

    #[test]
    fn upstream_example_local_up_cluster() {
        let c = read(&fixture("local-up-cluster.conf"))
            .unwrap()
            .to_aws_config()
            .unwrap();
        assert_eq!(c.region, "us-west-2");
        assert_eq!(
            c.role_arn.as_deref(),
            Some("arn:aws:iam::123456789012:role/node-role")
        );
        c.validate().unwrap();
    }

    #[test]
    fn upstream_examples_of_service_overrides() {
        for name in ["service-overrides.conf", "multiple-overrides.conf"] {
            let parsed = read(&fixture(name)).unwrap();
            assert_eq!(parsed.service_overrides.len(), 2, "{name}");
            let c = parsed.to_aws_config().unwrap_or_else(|e| panic!("{name}: {e}"));
            // s3 is not called by the provider; ec2 is.
            assert_eq!(c.service_endpoints.len(), 1, "{name}");
            assert_eq!(c.service_endpoints[0].service, AwsService::Ec2);
            assert_eq!(c.service_endpoints[0].url, "https://ec2.foo.bar");
            assert!(
                parsed.notices().iter().any(|n| n.what.contains("Service = s3")),
                "{name}"
            );
        }
        let c = read(&fixture("multiple-overrides.conf"))
            .unwrap()
            .to_aws_config()
            .unwrap();
        assert_eq!(c.vpc_id, None, "no cross-account mode: upstream ignores VPC");
        assert_eq!(c.service_endpoints[0].region, "sregion2");

        let parsed = read(&fixture("active-overrides.conf")).unwrap();
        assert_eq!(
            parsed.service_overrides[0].service.as_ref().unwrap().value,
            "s3      "
        );
        parsed.to_aws_config().unwrap();

        let e = read(&fixture("duplicate-overrides.conf"))
            .unwrap()
            .to_aws_config()
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("[ServiceOverride \"2\"] Service"), "{e}");
        assert!(e.message.contains("duplicate override of s3 in sregion1"), "{e}");
    }

    #[test]
    fn upstream_test_inputs_of_node_ip_families_and_zone() {
        let c = read(&fixture("node-ip-families.conf"))
            .unwrap()
            .to_aws_config()
            .unwrap();
        assert_eq!(c.node_ip_families, [IpFamily::V6, IpFamily::V4]);
        let c = read(&fixture("zone.conf")).unwrap().to_aws_config().unwrap();
        assert_eq!(c.region, "eu-west-1");
    }

    proptest::proptest! {
        /// Any text is parsed or refused with a line, never a panic.
        #[test]
        fn fuzz_cloud_config_never_panics(text in "(\\[|\\]|\"|\\\\|=|;|#|\n|\r| |\t|[a-zA-Z0-9-]{1,12}|Global|ServiceOverride|Region|NodeIPFamilies|DisableSecurityGroupIngress|URL|Service){0,40}") {
            match parse(&text) {
                Ok(c) => {
                    if let Err(e) = c.to_aws_config() {
                        proptest::prop_assert!(e.line.is_some(), "{}", e);
                    }
                    let _ = c.notices();
                }
                Err(e) => proptest::prop_assert!(e.line.is_some(), "{}", e),
            }
        }
    }
}
