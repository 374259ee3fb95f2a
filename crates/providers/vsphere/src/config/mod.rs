//! CPI's `vsphere.conf`, read as `vsphere-cloud-controller-manager` reads it (`ReadCPIConfig`,
//! reference §7): YAML first, else INI; `[Global]`/`global`, `[VirtualCenter "x"]`/`vcenter`,
//! `[Labels]`/`labels`, `[Nodes]`/`nodes`; per-vCenter keys inherit the global ones; a
//! `server` in `[Global]` adds a vCenter of its own; CPI's validation messages.
//!
//! # Where this differs from CPI, on purpose
//! - A key spelled the other format's way (`insecure-flag` in YAML, CPI #1455; `insecureFlag`
//!   in INI) is read by its evident meaning with a start-up notice; CPI ignores it silently.
//! - A YAML file whose shape is wrong is reported as YAML (CPI falls back to INI and reports
//!   "expected section header"); a YAML scalar where CPI wants a list (`datacenters: dc1`) or a
//!   quoted number (`port: "443"`) is read by its meaning (CPI fails the YAML and then the INI).
//! - `ip-family` entries are trimmed and lower-cased (CPI validates `IPv4` and then matches no
//!   address with it); CIDR lists are trimmed and checked at start (see [`crate::addresses`]).
//! - Keys without effect (`soap-roundtrip-count`, which CPI's govmomi never retries with;
//!   `api-disable`, `api-binding`, whose gRPC API CPI removed) are named in the notices.
//! - The `VSPHERE_*` environment overrides (§7.4) are not read yet.

mod ini;
mod raw;
mod yaml;

use std::path::{Path, PathBuf};

use ipnet::IpNet;

use crate::addresses::{IpFamily, Selection};
use raw::{Key, Raw, Section, Value, letters};

/// Which format the file was in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// YAML (`global:`, camelCase keys).
    #[default]
    Yaml,
    /// INI (`[Global]`, dashed keys); deprecated by CPI.
    Ini,
}

/// A password, never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

/// A Kubernetes Secret holding credentials (`secret-name`, `secret-namespace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// One vCenter, its inherited values resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VCenter {
    /// The section's name (`[VirtualCenter "x"]`, `vcenter: {x: …}`), CPI's tenant key.
    pub tenant: String,
    /// The host vCenter is reached at (and the prefix of its Secret keys).
    pub server: String,
    /// Its HTTPS port.
    pub port: u16,
    /// Login name; empty when it comes from a Secret.
    pub user: String,
    /// Password.
    pub password: Secret,
    /// Skip TLS verification.
    pub insecure: bool,
    /// CA certificates (PEM), instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// The certificate's SHA-256 or SHA-1 fingerprint (`AA:BB:…`), trusted when the chain is not.
    pub thumbprint: Option<String>,
    /// Datacenters to search (names, paths or `Datacenter:datacenter-N`); empty = all.
    pub datacenters: Vec<String>,
    /// The Secret with its credentials, when one is named.
    pub secret: Option<SecretRef>,
    /// Address families, in priority order.
    pub ip_families: Vec<IpFamily>,
}

impl VCenter {
    /// `https://<server>:<port>/sdk` (an IPv6 address bracketed).
    pub fn sdk_url(&self) -> String {
        let host = if self.server.contains(':') && !self.server.starts_with('[') {
            format!("[{}]", self.server)
        } else {
            self.server.clone()
        };
        format!("https://{host}:{}/sdk", self.port)
    }
}

/// `[Labels]`: the tag category names of zones and regions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels {
    /// `zone`.
    pub zone: Option<String>,
    /// `region`.
    pub region: Option<String>,
}

/// The whole file, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Which format it was in.
    pub format: Format,
    /// The vCenters, in file order (a `[Global] server` of its own last).
    pub vcenters: Vec<VCenter>,
    /// `[Labels]`.
    pub labels: Labels,
    /// `[Nodes]`.
    pub nodes: Selection,
    /// `secrets-directory`: files named like Secret keys (a mounted Secret).
    pub secrets_directory: Option<PathBuf>,
}

/// A config and what in it has no effect or was read under another spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The config.
    pub config: Config,
    /// One line each, logged once at start.
    pub notices: Vec<String>,
}

/// Why the file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("vsphere.conf{}: {message}", path.as_ref().map(|p| format!(" {p}")).unwrap_or_default())]
pub struct ConfigError {
    /// The file, when read from one.
    pub path: Option<String>,
    /// What is wrong, naming the section and key (and the INI line).
    pub message: String,
}

impl ConfigError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            path: None,
            message: message.into(),
        }
    }

    /// The same error naming `path`.
    pub fn in_file(mut self, path: &Path) -> Self {
        self.path = Some(path.display().to_string());
        self
    }
}

/// What the reading needs from its surroundings (tests give their own).
#[derive(Clone, Copy)]
pub struct Environment<'a> {
    /// An environment variable.
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// The names of the variables set (for CPI's `VSPHERE_VCENTER_<ID>`).
    pub names: &'a dyn Fn() -> Vec<String>,
    /// Whether CPI's default secrets directory, `/etc/cloud/secrets`, exists.
    pub default_secrets_dir_exists: bool,
}

impl Environment<'_> {
    /// The process's.
    pub fn process() -> Environment<'static> {
        Environment {
            var: &|name| std::env::var(name).ok(),
            names: &|| {
                std::env::vars_os()
                    .filter_map(|(k, _)| k.into_string().ok())
                    .collect()
            },
            default_secrets_dir_exists: Path::new(DEFAULT_SECRETS_DIR).is_dir(),
        }
    }
}

/// CPI's default `secrets-directory`, used when it exists.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/cloud/secrets";
/// The variable CPI requires for more than one `ip-family`.
pub const DUAL_STACK_ENV: &str = "ENABLE_ALPHA_DUAL_STACK";

/// Reads `path`.
pub fn read(path: &Path, env: Environment<'_>) -> Result<Read, ConfigError> {
    let text = gcfg::read_to_string(path).map_err(|e| ConfigError::new(e.message).in_file(path))?;
    parse(&text, env).map_err(|e| e.in_file(path))
}

/// Parses the text of a `vsphere.conf`: YAML first, else INI, as CPI.
pub fn parse(text: &str, env: Environment<'_>) -> Result<Read, ConfigError> {
    if text.trim().is_empty() {
        return Err(ConfigError::new("no vSphere cloud provider config file given"));
    }
    let raw = match yaml::parse(text) {
        Ok(raw) => raw,
        Err(yaml::YamlError::Shape(message)) => return Err(ConfigError::new(format!("YAML: {message}"))),
        Err(yaml::YamlError::NotYaml(yaml_error)) => ini::parse(text)
            .map_err(|e| ConfigError::new(format!("neither YAML ({yaml_error}) nor INI ({e})")))?,
    };
    build(&raw, env)
}

/// How one key is spelled in each format, and where it may appear.
struct Spelling {
    ini: &'static str,
    yaml: &'static str,
}

const fn key(ini: &'static str, yaml: &'static str) -> Spelling {
    Spelling { ini, yaml }
}

/// Keys of `[Global]` and of `[VirtualCenter "x"]` (the last four are global only).
const VC_KEYS: &[Spelling] = &[
    key("user", "user"),
    key("password", "password"),
    key("server", "server"),
    key("port", "port"),
    key("insecure-flag", "insecureFlag"),
    key("ca-file", "caFile"),
    key("thumbprint", "thumbprint"),
    key("datacenters", "datacenters"),
    key("soap-roundtrip-count", "soapRoundtripCount"),
    key("secret-name", "secretName"),
    key("secret-namespace", "secretNamespace"),
    key("ip-family", "ipFamily"),
];
const GLOBAL_ONLY_KEYS: &[Spelling] = &[
    key("secrets-directory", "secretsDirectory"),
    key("api-disable", "apiDisable"),
    key("api-binding", "apiBinding"),
];
const LABEL_KEYS: &[Spelling] = &[key("zone", "zone"), key("region", "region")];
const NODE_KEYS: &[Spelling] = &[
    key("internal-network-subnet-cidr", "internalNetworkSubnetCidr"),
    key("external-network-subnet-cidr", "externalNetworkSubnetCidr"),
    key("internal-vm-network-name", "internalVmNetworkName"),
    key("external-vm-network-name", "externalVmNetworkName"),
    key(
        "exclude-internal-network-subnet-cidr",
        "excludeInternalNetworkSubnetCidr",
    ),
    key(
        "exclude-external-network-subnet-cidr",
        "excludeExternalNetworkSubnetCidr",
    ),
];

/// Reads the keys of one section, noting respelled and unknown ones.
struct Reader<'a> {
    section: &'a Section,
    notices: &'a mut Vec<String>,
}

impl<'a> Reader<'a> {
    fn new(
        section: &'a Section,
        format: Format,
        known: &[&[Spelling]],
        notices: &'a mut Vec<String>,
    ) -> Self {
        let all = || known.iter().flat_map(|k| k.iter());
        for (letters, k) in &section.keys {
            match all().find(|s| letters == &raw::letters(s.ini)) {
                None => notices.push(format!(
                    "{}{} {}: unknown key, ignored as CPI ignores it",
                    line(k),
                    section.label,
                    k.written
                )),
                Some(s) => {
                    let own = match format {
                        Format::Yaml => k.written == s.yaml,
                        Format::Ini => k.written.eq_ignore_ascii_case(s.ini),
                    };
                    if !own {
                        let (ours, theirs) = match format {
                            Format::Yaml => (s.yaml, "INI"),
                            Format::Ini => (s.ini, "YAML"),
                        };
                        notices.push(format!(
                            "{}{} {}: read as {ours} (CPI ignores the {theirs} spelling here)",
                            line(k),
                            section.label,
                            k.written
                        ));
                    }
                }
            }
        }
        Self { section, notices }
    }

    fn get(&self, ini: &str) -> Option<&'a Key> {
        self.section.keys.get(&letters(ini))
    }

    fn name(&self, k: &Key) -> String {
        format!("{}{} {}", line(k), self.section.label, k.written)
    }

    fn error(&self, k: &Key, what: &str) -> ConfigError {
        ConfigError::new(format!("{}: {what}", self.name(k)))
    }

    /// A string; empty when absent or null.
    fn text(&self, ini: &str) -> Result<String, ConfigError> {
        let Some(k) = self.get(ini) else {
            return Ok(String::new());
        };
        match &k.value {
            Value::Ini(Some(s)) | Value::Str(s) => Ok(s.clone()),
            Value::Int(i) => Ok(i.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Null => Ok(String::new()),
            Value::Ini(None) => Err(self.error(k, gcfg::NEEDS_A_VALUE)),
            Value::List(_) => Err(self.error(k, "a list where one value is expected")),
            Value::Other(what) => Err(self.error(k, &format!("{what} where a string is expected"))),
        }
    }

    fn boolean(&self, ini: &str) -> Result<bool, ConfigError> {
        let Some(k) = self.get(ini) else {
            return Ok(false);
        };
        let parsed = match &k.value {
            Value::Ini(None) | Value::Null => Some(matches!(k.value, Value::Ini(None))),
            Value::Bool(b) => Some(*b),
            Value::Int(0) => Some(false),
            Value::Int(1) => Some(true),
            Value::Ini(Some(s)) | Value::Str(s) => gcfg::parse_bool(s),
            _ => None,
        };
        parsed.ok_or_else(|| self.error(k, "not a boolean (true/false, yes/no, on/off, 1/0)"))
    }

    /// An unsigned number; 0 when absent.
    fn number<T: gcfg::Int + TryFrom<i64> + Default>(&self, ini: &str) -> Result<T, ConfigError> {
        let Some(k) = self.get(ini) else {
            return Ok(T::default());
        };
        match &k.value {
            Value::Int(i) => T::try_from(*i).map_err(|_| self.error(k, &format!("{i} is out of range"))),
            Value::Null => Ok(T::default()),
            Value::Ini(Some(s)) | Value::Str(s) => {
                gcfg::parse_int(s).map_err(|e| self.error(k, &e.to_string()))
            }
            Value::Ini(None) => Err(self.error(k, gcfg::NEEDS_A_VALUE)),
            _ => Err(self.error(k, "not a number")),
        }
    }

    /// A list: a YAML sequence, or a comma-separated string; entries trimmed, empty ones dropped.
    fn list(&self, ini: &str) -> Result<Vec<String>, ConfigError> {
        let Some(k) = self.get(ini) else {
            return Ok(Vec::new());
        };
        let items: Vec<String> = match &k.value {
            Value::List(items) => items.clone(),
            Value::Ini(Some(s)) | Value::Str(s) => s.split(',').map(str::to_owned).collect(),
            Value::Null => Vec::new(),
            Value::Ini(None) => return Err(self.error(k, gcfg::NEEDS_A_VALUE)),
            _ => return Err(self.error(k, "not a list")),
        };
        Ok(items
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect())
    }

    fn cidrs(&self, ini: &str) -> Result<Vec<IpNet>, ConfigError> {
        let mut out = Vec::new();
        for item in self.list(ini)? {
            let net = item.parse::<IpNet>().map_err(|_| {
                let k = self.get(ini).expect("listed");
                self.error(k, &format!("{item:?} is not a CIDR"))
            })?;
            out.push(net);
        }
        Ok(out)
    }

    fn families(&self, ini: &str) -> Result<Vec<IpFamily>, ConfigError> {
        self.list(ini)?
            .iter()
            .map(|f| {
                IpFamily::parse(f).ok_or_else(|| {
                    let k = self.get(ini).expect("listed");
                    self.error(k, &format!("{f:?} is not an IP family (ipv4, ipv6)"))
                })
            })
            .collect()
    }

    fn note(&mut self, ini: &str, why: &str) {
        if let Some(k) = self.get(ini) {
            let name = self.name(k);
            self.notices.push(format!("{name}: {why}"));
        }
    }

    fn optional(&self, ini: &str) -> Result<Option<String>, ConfigError> {
        let text = self.text(ini)?;
        Ok((!text.trim().is_empty()).then(|| text.trim().to_owned()))
    }

    fn secret(&self) -> Result<Option<SecretRef>, ConfigError> {
        Ok(
            match (self.optional("secret-namespace")?, self.optional("secret-name")?) {
                (Some(namespace), Some(name)) => Some(SecretRef { namespace, name }),
                _ => None,
            },
        )
    }
}

fn line(k: &Key) -> String {
    k.line.map(|l| format!("line {l}: ")).unwrap_or_default()
}

/// The per-vCenter values as written in one section (global or a vCenter's).
struct Written {
    user: String,
    password: String,
    server: String,
    port: u16,
    insecure: bool,
    ca_file: Option<String>,
    thumbprint: Option<String>,
    datacenters: Vec<String>,
    secret: Option<SecretRef>,
    ip_families: Vec<IpFamily>,
}

fn written(r: &mut Reader<'_>) -> Result<Written, ConfigError> {
    let _: u32 = r.number("soap-roundtrip-count")?;
    r.note(
        "soap-roundtrip-count",
        "no effect: a failed call is retried by the controller that asked (CPI's govmomi makes one attempt too)",
    );
    Ok(Written {
        user: r.text("user")?,
        password: r.text("password")?,
        server: r.text("server")?.trim().to_owned(),
        port: r.number("port")?,
        insecure: r.boolean("insecure-flag")?,
        ca_file: r.optional("ca-file")?,
        thumbprint: r.optional("thumbprint")?,
        datacenters: r.list("datacenters")?,
        secret: r.secret()?,
        ip_families: r.families("ip-family")?,
    })
}

/// The start-up notice for a section this gateway does not read: CPI reads `[NSXT]`,
/// `[LoadBalancer]` and `[Route]` for its alpha NSX-T load balancer and routes, which are not
/// served here; anything else CPI ignores too.
fn section_notice(section: &str) -> String {
    // INI: "line 3: [NSXT]" or "line 3: [Route \"x\"]"; YAML: "nsxt".
    let bare = section
        .rsplit(": ")
        .next()
        .unwrap_or(section)
        .trim_start_matches('[');
    let first = bare.split([' ', ']']).next().unwrap_or_default();
    let nsxt = ["nsxt", "loadbalancer", "loadbalancerclass", "route"]
        .iter()
        .any(|n| first.eq_ignore_ascii_case(n));
    if nsxt {
        format!(
            "{section}: CPI reads it for its NSX-T load balancer and routes, which this gateway does not serve: ignored"
        )
    } else {
        format!("{section}: unknown section, ignored as CPI ignores it")
    }
}

fn build(raw: &Raw, env: Environment<'_>) -> Result<Read, ConfigError> {
    let mut notices = Vec::new();
    if raw.format == Format::Ini {
        notices.push(
            "the INI form of vsphere.conf is deprecated by CPI; the YAML form reads the same".to_owned(),
        );
    }
    for s in &raw.unknown_sections {
        notices.push(section_notice(s));
    }
    for s in &raw.respelled_sections {
        notices.push(format!("{s}: read by its meaning (CPI ignores this spelling)"));
    }
    let mut g = Reader::new(
        &raw.global,
        raw.format,
        &[VC_KEYS, GLOBAL_ONLY_KEYS],
        &mut notices,
    );
    let global = written(&mut g)?;
    let secrets_dir = g.optional("secrets-directory")?;
    g.boolean("api-disable")?;
    g.text("api-binding")?;
    g.note("api-disable", "no effect: CPI removed its gRPC API");
    g.note("api-binding", "no effect: CPI removed its gRPC API");
    let secrets_directory = secrets_dir.map(PathBuf::from).or_else(|| {
        env.default_secrets_dir_exists
            .then(|| PathBuf::from(DEFAULT_SECRETS_DIR))
    });

    let mut vcenters = Vec::new();
    for (name, section) in &raw.vcenters {
        let mut r = Reader::new(section, raw.format, &[VC_KEYS], &mut notices);
        let w = written(&mut r)?;
        let server = if !w.server.is_empty() {
            w.server.clone()
        } else if raw.format == Format::Ini {
            name.clone()
        } else {
            return Err(ConfigError::new(format!(
                "vcenter.{name}: vsphere.conf does not have the VirtualCenter IP address specified (server)"
            )));
        };
        vcenters.push(resolve(
            name,
            server,
            Some(&w),
            &global,
            secrets_directory.is_some(),
        ));
    }
    if !global.server.is_empty() && !vcenters.iter().any(|v: &VCenter| v.tenant == global.server) {
        vcenters.push(resolve(
            &global.server,
            global.server.clone(),
            None,
            &global,
            secrets_directory.is_some(),
        ));
    }
    if vcenters.is_empty() {
        return Err(ConfigError::new("No Virtual Center hosts defined"));
    }
    let has_secret_source = |vc: &VCenter| vc.secret.is_some() || secrets_directory.is_some();
    for vc in &vcenters {
        if vc.user.is_empty() && !has_secret_source(vc) {
            return Err(ConfigError::new(format!(
                "vCenter {:?}: Username is missing",
                vc.tenant
            )));
        }
        if vc.password.0.is_empty() && !has_secret_source(vc) {
            return Err(ConfigError::new(format!(
                "vCenter {:?}: Password is missing",
                vc.tenant
            )));
        }
        if vc.ip_families.len() > 1 && (env.var)(DUAL_STACK_ENV).is_none() {
            return Err(ConfigError::new(format!(
                "mulitple IP families specified for virtual center {:?} but {DUAL_STACK_ENV} env var is not set",
                vc.tenant
            )));
        }
    }

    let l = Reader::new(&raw.labels, raw.format, &[LABEL_KEYS], &mut notices);
    let labels = Labels {
        zone: l.optional("zone")?,
        region: l.optional("region")?,
    };
    if labels.zone.is_some() != labels.region.is_some() {
        l.notices.push(
            "[Labels]: zones and regions need both zone and region (as CPI): no zone or region is set on nodes"
                .to_owned(),
        );
    }
    let n = Reader::new(&raw.nodes, raw.format, &[NODE_KEYS], &mut notices);
    let nodes = Selection {
        internal_cidrs: n.cidrs("internal-network-subnet-cidr")?,
        external_cidrs: n.cidrs("external-network-subnet-cidr")?,
        internal_network: n.optional("internal-vm-network-name")?,
        external_network: n.optional("external-vm-network-name")?,
        exclude_internal: n.cidrs("exclude-internal-network-subnet-cidr")?,
        exclude_external: n.cidrs("exclude-external-network-subnet-cidr")?,
    };
    let mut config = Config {
        format: raw.format,
        vcenters,
        labels,
        nodes,
        secrets_directory,
    };
    env::apply(&mut config, env, &mut notices)?;
    Ok(Read { config, notices })
}

/// A vCenter's values: its own, else the global ones (CPI's inheritance: an empty or zero
/// value inherits; `insecure-flag` cannot be turned off per vCenter).
fn resolve(
    tenant: &str,
    server: String,
    own: Option<&Written>,
    global: &Written,
    secrets_dir: bool,
) -> VCenter {
    let pick = |a: &str, b: &str| if a.is_empty() { b.to_owned() } else { a.to_owned() };
    let empty = Written {
        user: String::new(),
        password: String::new(),
        server: String::new(),
        port: 0,
        insecure: false,
        ca_file: None,
        thumbprint: None,
        datacenters: Vec::new(),
        secret: None,
        ip_families: Vec::new(),
    };
    let own = own.unwrap_or(&empty);
    let port = [own.port, global.port]
        .into_iter()
        .find(|p| *p != 0)
        .unwrap_or(443);
    let ip_families = if !own.ip_families.is_empty() {
        own.ip_families.clone()
    } else if !global.ip_families.is_empty() {
        global.ip_families.clone()
    } else {
        vec![IpFamily::V4]
    };
    // CPI: a global Secret applies to vCenters without their own, unless a secrets directory
    // replaces it.
    let secret = own
        .secret
        .clone()
        .or_else(|| (!secrets_dir).then(|| global.secret.clone()).flatten());
    VCenter {
        tenant: tenant.to_owned(),
        server,
        port,
        user: pick(&own.user, &global.user),
        password: Secret(pick(&own.password, &global.password)),
        insecure: own.insecure || global.insecure,
        ca_file: own
            .ca_file
            .clone()
            .or_else(|| global.ca_file.clone())
            .map(PathBuf::from),
        thumbprint: own.thumbprint.clone().or_else(|| global.thumbprint.clone()),
        datacenters: if own.datacenters.is_empty() {
            global.datacenters.clone()
        } else {
            own.datacenters.clone()
        },
        secret,
        ip_families,
    }
}

mod env;

#[cfg(test)]
mod tests;
