//! The YAML inventory that seeds a new simulated cloud: its schema, parsing and validation, with
//! every error pointing at the line to fix.
//!
//! ```yaml
//! region: sim-east-1                 # default sim-east-1
//! zones: [sim-east-1a, sim-east-1b]  # default <region>a, <region>b, <region>c
//! instance_subnet: 10.0.0.0/16       # private IPs come from here (default 10.0.0.0/16)
//! load_balancer_pool: 203.0.113.0/24 # load balancer IPs come from here (default 203.0.113.0/24)
//! instances:
//!   - name: node-1                   # required; the Kubernetes Node name
//!     id: i-0a1b2c3d4e5f60718        # optional; generated (stable per name) when absent
//!     type: sim.large                # optional; default sim.medium
//!     zone: sim-east-1a              # optional; default: zones in turn
//!     private_ip: 10.0.1.10          # optional; allocated from instance_subnet
//!     public_ip: 198.51.100.10       # optional
//!     state: running                 # running (default) | stopped | terminated
//!     labels: {team: blue}           # optional; reported as additional Node labels
//! ```
//!
//! Syntax and type errors come with the YAML parser's line and column. Semantic errors (a duplicate
//! id, an IP outside the subnet...) are found after parsing, so the line of the offending entry
//! (or of its field) is recovered from the text: see [`EntryLines`].

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    path::{Path, PathBuf},
    time::SystemTime,
};

use ipnet::IpNet;
use serde::Deserialize;

use crate::{
    ipam::Pool,
    state::{Instance, InstanceState, State},
};

/// Default region.
pub const DEFAULT_REGION: &str = "sim-east-1";
/// Default instance type.
pub const DEFAULT_INSTANCE_TYPE: &str = "sim.medium";
/// Default private subnet.
pub const DEFAULT_INSTANCE_SUBNET: &str = "10.0.0.0/16";
/// Default load balancer pool (TEST-NET-3, never routed on the Internet).
pub const DEFAULT_LOAD_BALANCER_POOL: &str = "203.0.113.0/24";

/// An inventory that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct InventoryError {
    /// The file, when read from one.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl InventoryError {
    fn at(line: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            file: None,
            line,
            column: None,
            message: message.into(),
        }
    }

    fn render(&self) -> String {
        let mut s = String::from("inventory");
        if let Some(f) = &self.file {
            s.push(' ');
            s.push_str(&f.display().to_string());
        }
        match (self.line, self.column) {
            (Some(l), Some(c)) => s.push_str(&format!(", line {l} column {c}")),
            (Some(l), None) => s.push_str(&format!(", line {l}")),
            _ => {}
        }
        s.push_str(": ");
        s.push_str(&self.message);
        s
    }
}

/// A validated inventory: every instance has its id, zone, type and private IP.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    /// Region.
    pub region: String,
    /// Zones.
    pub zones: Vec<String>,
    /// Private subnet.
    pub instance_subnet: IpNet,
    /// Load balancer pool.
    pub load_balancer_pool: IpNet,
    /// Instances, in file order.
    pub instances: Vec<InventoryInstance>,
    /// Where private IP allocation stopped (persisted as the state's cursor).
    instance_ip_cursor: Option<IpAddr>,
}

/// One resolved instance of the inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryInstance {
    /// Id (given or generated).
    pub id: String,
    /// Name.
    pub name: String,
    /// Type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Private IP (given or allocated).
    pub private_ip: IpAddr,
    /// Public IP.
    pub public_ip: Option<IpAddr>,
    /// State.
    pub state: InstanceState,
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInventory {
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    zones: Option<Vec<String>>,
    #[serde(default)]
    instance_subnet: Option<IpNet>,
    #[serde(default)]
    load_balancer_pool: Option<IpNet>,
    /// `instances:` with nothing under it is YAML's null: an empty inventory, as people mean it.
    #[serde(default, deserialize_with = "null_as_empty")]
    instances: Vec<RawInstance>,
}

fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    name: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(rename = "type", default)]
    instance_type: Option<String>,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    private_ip: Option<IpAddr>,
    #[serde(default)]
    public_ip: Option<IpAddr>,
    #[serde(default)]
    state: InstanceState,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Default for Inventory {
    /// The cloud a user gets with no inventory: the default region, three zones, no instances.
    fn default() -> Self {
        let region = DEFAULT_REGION.to_string();
        Self {
            zones: default_zones(&region),
            region,
            instance_subnet: DEFAULT_INSTANCE_SUBNET
                .parse()
                .unwrap_or_else(|_| unreachable_net()),
            load_balancer_pool: DEFAULT_LOAD_BALANCER_POOL
                .parse()
                .unwrap_or_else(|_| unreachable_net()),
            instances: Vec::new(),
            instance_ip_cursor: None,
        }
    }
}

// The default CIDRs above are constants that parse; this only satisfies the type checker
// without a panic path.
fn unreachable_net() -> IpNet {
    IpNet::V4(ipnet::Ipv4Net::default())
}

fn default_zones(region: &str) -> Vec<String> {
    ["a", "b", "c"].iter().map(|z| format!("{region}{z}")).collect()
}

/// Reads and validates the inventory at `path`.
pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
    let text = std::fs::read_to_string(path).map_err(|e| InventoryError {
        file: Some(path.to_path_buf()),
        line: None,
        column: None,
        message: format!("cannot be read: {e}"),
    })?;
    parse(&text).map_err(|mut e| {
        e.file = Some(path.to_path_buf());
        e
    })
}

/// Parses and validates inventory text.
pub fn parse(text: &str) -> Result<Inventory, InventoryError> {
    // An empty file (or only comments) is the default inventory, not an error.
    let raw: RawInventory = if text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---"
    }) {
        RawInventory {
            region: None,
            zones: None,
            instance_subnet: None,
            load_balancer_pool: None,
            instances: Vec::new(),
        }
    } else {
        serde_saphyr::from_str(text).map_err(yaml_error)?
    };
    validate(raw, text)
}

/// serde-saphyr says "... at line N, column M" (without its source snippet); keep the message,
/// move the place to fields.
fn yaml_error(e: serde_saphyr::Error) -> InventoryError {
    let loc = e.location();
    let mut message = e.without_snippet().to_string();
    if let Some(loc) = &loc {
        let suffix = format!(" at line {}, column {}", loc.line(), loc.column());
        message = message.replacen(&suffix, "", 1);
    }
    let place = |n: u64| usize::try_from(n).ok().filter(|n| *n > 0);
    InventoryError {
        file: None,
        line: loc.as_ref().and_then(|l| place(l.line())),
        column: loc.as_ref().and_then(|l| place(l.column())),
        message,
    }
}

fn validate(raw: RawInventory, text: &str) -> Result<Inventory, InventoryError> {
    let lines = EntryLines::new(text, "instances");
    let key_line = |key: &str| top_level_key_line(text, key);

    let region = raw.region.unwrap_or_else(|| DEFAULT_REGION.to_string());
    check_dns_label(&region).map_err(|m| InventoryError::at(key_line("region"), format!("region: {m}")))?;

    let zones = raw.zones.unwrap_or_else(|| default_zones(&region));
    if zones.is_empty() {
        return Err(InventoryError::at(
            key_line("zones"),
            "zones: at least one zone is needed",
        ));
    }
    for (i, z) in zones.iter().enumerate() {
        check_dns_label(z).map_err(|m| InventoryError::at(key_line("zones"), format!("zones[{i}]: {m}")))?;
        if zones[..i].contains(z) {
            return Err(InventoryError::at(
                key_line("zones"),
                format!("zones: {z} is listed twice"),
            ));
        }
    }

    let instance_subnet = raw
        .instance_subnet
        .unwrap_or_else(|| Inventory::default().instance_subnet);
    let load_balancer_pool = raw
        .load_balancer_pool
        .unwrap_or_else(|| Inventory::default().load_balancer_pool);
    for (key, net) in [
        ("instance_subnet", instance_subnet),
        ("load_balancer_pool", load_balancer_pool),
    ] {
        if net.trunc() != net {
            return Err(InventoryError::at(
                key_line(key),
                format!("{key}: {net} has host bits set; did you mean {}?", net.trunc()),
            ));
        }
    }
    if instance_subnet.contains(&load_balancer_pool) || load_balancer_pool.contains(&instance_subnet) {
        return Err(InventoryError::at(
            key_line("load_balancer_pool"),
            format!("load_balancer_pool {load_balancer_pool} overlaps instance_subnet {instance_subnet}"),
        ));
    }
    let subnet_pool = Pool::new(instance_subnet);
    let lb_pool = Pool::new(load_balancer_pool);

    // First pass: everything that needs no allocation, remembering what is taken.
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut live_names: HashMap<&str, usize> = HashMap::new();
    let mut private_ips: HashMap<IpAddr, usize> = HashMap::new();
    let mut public_ips: HashMap<IpAddr, usize> = HashMap::new();
    let entry_err = |idx: usize, field: Option<&str>, msg: String| {
        let line = field
            .and_then(|f| lines.field_line(idx, f))
            .or_else(|| lines.entry_line(idx));
        InventoryError::at(line, format!("instances[{idx}]: {msg}"))
    };
    let first_at = |idx: usize| match lines.entry_line(idx) {
        Some(l) => format!("instances[{idx}] at line {l}"),
        None => format!("instances[{idx}]"),
    };
    for (idx, inst) in raw.instances.iter().enumerate() {
        check_subdomain(&inst.name).map_err(|m| entry_err(idx, Some("name"), format!("name: {m}")))?;
        if let Some(id) = &inst.id {
            check_instance_id(id).map_err(|m| entry_err(idx, Some("id"), format!("id: {m}")))?;
            if let Some(prev) = ids.insert(id.clone(), idx) {
                return Err(entry_err(
                    idx,
                    Some("id"),
                    format!("duplicate instance id {id} (first used by {})", first_at(prev)),
                ));
            }
        }
        if inst.state != InstanceState::Terminated {
            // Two live instances with one name would make lookups by Node name ambiguous.
            if let Some(prev) = live_names.insert(&inst.name, idx) {
                return Err(entry_err(
                    idx,
                    Some("name"),
                    format!(
                        "duplicate instance name {} (first used by {}); only terminated instances may share a name",
                        inst.name,
                        first_at(prev)
                    ),
                ));
            }
        }
        if inst.instance_type.as_ref().is_some_and(|t| t.trim().is_empty()) {
            return Err(entry_err(idx, Some("type"), "type: must not be empty".into()));
        }
        if let Some(z) = inst.zone.as_ref().filter(|z| !zones.contains(z)) {
            return Err(entry_err(
                idx,
                Some("zone"),
                format!("zone {z} is not a zone of this cloud ({})", zones.join(", ")),
            ));
        }
        if let Some(ip) = inst.private_ip {
            if !subnet_pool.contains(ip) {
                return Err(entry_err(
                    idx,
                    Some("private_ip"),
                    format!("private_ip {ip} is not a usable address of instance_subnet {instance_subnet}"),
                ));
            }
            if inst.state != InstanceState::Terminated
                && let Some(prev) = private_ips.insert(ip, idx)
            {
                return Err(entry_err(
                    idx,
                    Some("private_ip"),
                    format!("private_ip {ip} is already used by {}", first_at(prev)),
                ));
            }
        }
        if let Some(ip) = inst.public_ip {
            if lb_pool.contains(ip) || load_balancer_pool.contains(&ip) {
                return Err(entry_err(
                    idx,
                    Some("public_ip"),
                    format!("public_ip {ip} is inside load_balancer_pool {load_balancer_pool}"),
                ));
            }
            if inst.state != InstanceState::Terminated
                && let Some(prev) = public_ips.insert(ip, idx)
            {
                return Err(entry_err(
                    idx,
                    Some("public_ip"),
                    format!("public_ip {ip} is already used by {}", first_at(prev)),
                ));
            }
        }
        for (k, v) in &inst.labels {
            check_label(k, v).map_err(|m| entry_err(idx, Some("labels"), format!("labels: {m}")))?;
        }
    }

    // Second pass: fill in generated ids, zones and private IPs.
    let mut cursor = None;
    let mut instances = Vec::with_capacity(raw.instances.len());
    for (idx, inst) in raw.instances.into_iter().enumerate() {
        let id = match inst.id {
            Some(id) => id,
            None => {
                let id = generated_id(&region, &inst.name, idx, |c| ids.contains_key(c));
                ids.insert(id.clone(), idx);
                id
            }
        };
        let private_ip = match inst.private_ip {
            Some(ip) => ip,
            None => {
                let ip = subnet_pool
                    .allocate(cursor, |ip| private_ips.contains_key(&ip))
                    .ok_or_else(|| {
                        entry_err(
                            idx,
                            None,
                            format!("instance_subnet {instance_subnet} has no free address left"),
                        )
                    })?;
                cursor = Some(ip);
                private_ips.insert(ip, idx);
                ip
            }
        };
        instances.push(InventoryInstance {
            id,
            zone: inst.zone.unwrap_or_else(|| zones[idx % zones.len()].clone()),
            instance_type: inst
                .instance_type
                .unwrap_or_else(|| DEFAULT_INSTANCE_TYPE.to_string()),
            name: inst.name,
            private_ip,
            public_ip: inst.public_ip,
            state: inst.state,
            labels: inst.labels,
        });
    }
    Ok(Inventory {
        region,
        zones,
        instance_subnet,
        load_balancer_pool,
        instances,
        instance_ip_cursor: cursor,
    })
}

impl Inventory {
    /// The initial cloud state, every instance launched at `now`.
    pub fn into_state(self, now: SystemTime) -> State {
        let mut s = State::empty(
            self.region,
            self.zones,
            self.instance_subnet,
            self.load_balancer_pool,
        );
        s.instance_ip_cursor = self.instance_ip_cursor;
        s.instances = self
            .instances
            .into_iter()
            .map(|i| Instance {
                id: i.id,
                name: i.name,
                instance_type: i.instance_type,
                zone: i.zone,
                private_ip: i.private_ip,
                public_ip: i.public_ip,
                state: i.state,
                labels: i.labels,
                launched_at: now,
            })
            .collect();
        s
    }
}

/// A stable id for an inventory instance without one, so re-seeding the same inventory gives the
/// same providerIDs (demos and docs can name them). FNV-1a over region, name and position.
fn generated_id(region: &str, name: &str, idx: usize, taken: impl Fn(&str) -> bool) -> String {
    let mut salt: u64 = 0;
    loop {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in region
            .bytes()
            .chain([0])
            .chain(name.bytes())
            .chain([0])
            .chain(idx.to_le_bytes())
            .chain(salt.to_le_bytes())
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let id = format!("i-0{h:016x}");
        if !taken(&id) {
            return id;
        }
        salt += 1;
    }
}

/// `i-` followed by 8 or 17 lowercase hex digits, as EC2 ids look.
pub fn check_instance_id(id: &str) -> Result<(), String> {
    let hex = id.strip_prefix("i-").unwrap_or("");
    if (hex.len() == 8 || hex.len() == 17)
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not an instance id (i- followed by 8 or 17 lowercase hex digits)"
        ))
    }
}

/// An RFC 1123 label: what zone and region names look like.
fn check_dns_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} must be 1-63 lowercase letters, digits or '-', not starting or ending with '-'"
        ))
    }
}

/// An RFC 1123 subdomain: what Node names must be.
pub fn check_subdomain(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a valid Node name (lowercase letters, digits, '-' and '.', at most 253, starting and ending with a letter or digit)"
        ))
    }
}

/// A Kubernetes label key and value.
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 63
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && n.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
            && n.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric)
    };
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        check_subdomain(p).map_err(|_| format!("label key {key:?} has an invalid prefix {p:?}"))?;
    }
    if !name_ok(name) {
        return Err(format!(
            "label key {key:?} is invalid (name part: 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        ));
    }
    if !value.is_empty() && !name_ok(value) {
        return Err(format!(
            "label {key}: value {value:?} is invalid (at most 63 letters, digits, '-', '_' or '.')"
        ));
    }
    Ok(())
}

/// The line of a top-level `key:` (1-based), if written in block style.
fn top_level_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

/// Where the items of a top-level block sequence start, to point semantic errors at the entry
/// they are about. Block style (`- name: x` items under `instances:`) is what people write; for
/// flow style (`instances: [{...}]`) the entries are not located and errors point at the key.
pub struct EntryLines<'a> {
    lines: Vec<&'a str>,
    /// 0-based line index of each item's `-`.
    starts: Vec<usize>,
    /// 0-based line index after the last item.
    end: usize,
    key_line: Option<usize>,
}

impl<'a> EntryLines<'a> {
    /// Finds the items of the top-level sequence under `key`.
    pub fn new(text: &'a str, key: &str) -> Self {
        let lines: Vec<&str> = text.lines().collect();
        let key_line = top_level_key_line(text, key).map(|l| l - 1);
        let mut starts = Vec::new();
        let mut end = lines.len();
        if let Some(k) = key_line {
            let mut dash_col: Option<usize> = None;
            for (i, line) in lines.iter().enumerate().skip(k + 1) {
                let trimmed = line.trim_start();
                if trimmed.is_empty() || trimmed.starts_with('#') {
                    continue;
                }
                let indent = line.len() - trimmed.len();
                let is_item = trimmed == "-" || trimmed.starts_with("- ");
                match dash_col {
                    None if is_item => {
                        dash_col = Some(indent);
                        starts.push(i);
                    }
                    Some(c) if is_item && indent == c => starts.push(i),
                    // deeper lines belong to the current item
                    Some(c) if indent > c => {}
                    _ => {
                        end = i;
                        break;
                    }
                }
            }
        }
        Self {
            lines,
            starts,
            end,
            key_line,
        }
    }

    /// 1-based line of item `idx` (or of the key when items are not located).
    pub fn entry_line(&self, idx: usize) -> Option<usize> {
        self.starts.get(idx).or(self.key_line.as_ref()).map(|l| l + 1)
    }

    /// 1-based line of `field:` inside item `idx`.
    pub fn field_line(&self, idx: usize, field: &str) -> Option<usize> {
        let start = *self.starts.get(idx)?;
        let end = self.starts.get(idx + 1).copied().unwrap_or(self.end);
        (start..end)
            .find(|&i| {
                let t = self.lines[i].trim_start();
                let t = t.strip_prefix('-').map(str::trim_start).unwrap_or(t);
                t.strip_prefix(field)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            })
            .map(|i| i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
# a comment
region: sim-east-1
zones: [sim-east-1a, sim-east-1b]
instance_subnet: 10.0.0.0/16
load_balancer_pool: 203.0.113.0/24
instances:
  - name: node-1
    type: sim.large
    zone: sim-east-1a
    private_ip: 10.0.1.10
    public_ip: 198.51.100.10
    labels:
      team: blue
  - name: node-2
    state: stopped
  - name: node-3
    id: i-0123456789abcdef0
    state: terminated
";

    #[test]
    fn a_good_inventory_resolves_every_instance() {
        let inv = parse(GOOD).unwrap();
        assert_eq!(inv.region, "sim-east-1");
        assert_eq!(inv.instances.len(), 3);
        let [a, b, c] = [&inv.instances[0], &inv.instances[1], &inv.instances[2]];
        assert_eq!(a.private_ip, "10.0.1.10".parse::<IpAddr>().unwrap());
        assert_eq!(a.labels.get("team").map(String::as_str), Some("blue"));
        assert_eq!(b.instance_type, DEFAULT_INSTANCE_TYPE);
        assert_eq!(b.zone, "sim-east-1b", "zones are used in turn");
        assert_eq!(b.private_ip, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(b.state, InstanceState::Stopped);
        check_instance_id(&b.id).unwrap();
        assert_eq!(c.id, "i-0123456789abcdef0");
        // ids are stable across parses
        assert_eq!(parse(GOOD).unwrap().instances[1].id, b.id);
    }

    #[test]
    fn empty_inventory_is_the_default() {
        for text in ["", "# nothing\n", "---\n"] {
            assert_eq!(parse(text).unwrap(), Inventory::default(), "{text:?}");
        }
        assert_eq!(parse("instances: []").unwrap().instances.len(), 0);
        // What serde_yaml_ng accepted and serde-saphyr first refused: a key with nothing under it.
        assert_eq!(parse("region: r\ninstances:\n").unwrap().instances.len(), 0);
    }

    /// (text, line, message fragment)
    fn error_cases() -> Vec<(String, usize, &'static str)> {
        let with = |find: &str, replace: &str| GOOD.replacen(find, replace, 1);
        vec![
            // syntax
            // the quote opened on line 14 runs into line 15
            (
                with("  - name: node-2\n", "  - name: \"node-2\n"),
                15,
                "invalid indentation in multiline quoted scalar",
            ),
            (with("    state: stopped\n", "   state: stopped\n"), 15, ""),
            (
                with("zones: [sim-east-1a, sim-east-1b]", "zones: [sim-east-1a"),
                4,
                "",
            ),
            // types
            (
                with("private_ip: 10.0.1.10", "private_ip: 10.0.1.999"),
                10,
                "invalid IP address",
            ),
            (
                with("state: stopped", "state: sleeping"),
                15,
                "unknown variant `sleeping`",
            ),
            (
                with(
                    "load_balancer_pool: 203.0.113.0/24",
                    "load_balancer_pool: 203.0.113.0/33",
                ),
                5,
                "invalid IP address",
            ),
            (
                with("    type: sim.large\n", "    typo: sim.large\n"),
                8,
                "unknown field `typo`",
            ),
            (
                with("region: sim-east-1", "region: [1]"),
                2,
                "expected string scalar",
            ),
            // semantics, at the entry or its field
            (
                with("    id: i-0123456789abcdef0", "    id: i-nothex"),
                17,
                "not an instance id",
            ),
            (
                with("  - name: node-2", "  - name: node-1"),
                14,
                "duplicate instance name node-1 (first used by instances[0] at line 7)",
            ),
            (
                with(
                    "  - name: node-2\n",
                    "  - name: node-2\n    id: i-0123456789abcdef0\n",
                ),
                18,
                "duplicate instance id i-0123456789abcdef0 (first used by instances[1] at line 14)",
            ),
            (
                with("zone: sim-east-1a", "zone: sim-west-9z"),
                9,
                "not a zone of this cloud",
            ),
            (
                with("private_ip: 10.0.1.10", "private_ip: 10.1.0.1"),
                10,
                "not a usable address of instance_subnet",
            ),
            (
                with("public_ip: 198.51.100.10", "public_ip: 203.0.113.7"),
                11,
                "inside load_balancer_pool",
            ),
            (
                with("      team: blue", "      team: \"blue sky\""),
                12,
                "labels: label team: value",
            ),
            (
                with("  - name: node-2", "  - name: Node_2"),
                14,
                "not a valid Node name",
            ),
            (with("region: sim-east-1", "region: Sim East"), 2, "region"),
            (
                with("instance_subnet: 10.0.0.0/16", "instance_subnet: 10.0.0.1/16"),
                4,
                "host bits set; did you mean 10.0.0.0/16",
            ),
            (
                with(
                    "load_balancer_pool: 203.0.113.0/24",
                    "load_balancer_pool: 10.0.5.0/24",
                ),
                5,
                "overlaps",
            ),
        ]
    }

    #[test]
    fn errors_name_the_line() {
        for (text, line, fragment) in error_cases() {
            let e = parse(&text).expect_err(&text);
            assert_eq!(e.line, Some(line), "{e}\n---\n{text}");
            assert!(e.message.contains(fragment), "{e}");
            assert!(e.to_string().contains(&format!("line {line}")), "{e}");
        }
    }

    #[test]
    fn a_private_ip_of_a_terminated_instance_may_be_reused() {
        let text = "instances:\n- name: a\n  private_ip: 10.0.0.9\n  state: terminated\n- name: a\n  private_ip: 10.0.0.9\n";
        let inv = parse(text).unwrap();
        assert_eq!(inv.instances.len(), 2);
    }

    #[test]
    fn entries_are_located_in_block_style_at_any_indentation() {
        let text = "instances:\n# c\n- name: a\n  zone: z\n\n- name: b\nregion: r\n";
        let l = EntryLines::new(text, "instances");
        assert_eq!(l.entry_line(0), Some(3));
        assert_eq!(l.entry_line(1), Some(6));
        assert_eq!(l.entry_line(2), Some(1), "unknown entries point at the key");
        assert_eq!(l.field_line(0, "zone"), Some(4));
        assert_eq!(l.field_line(1, "zone"), None, "region: is not part of the entry");
        let flow = "instances: [{name: a}, {name: a}]\n";
        let e = parse(flow).unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inv.yaml");
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("inv.yaml") && e.contains("cannot be read"), "{e}");
        std::fs::write(&path, "instances:\n  - name: x\n    state: gone\n").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("inv.yaml, line 3 column"), "{e}");
    }

    #[test]
    fn label_checks() {
        let cases = [
            ("team", "blue", true),
            ("example.com/team", "blue", true),
            ("team", "", true),
            ("-team", "blue", false),
            ("Example.com/team", "x", false),
            ("team", "has space", false),
            ("a/b/c", "x", false),
        ];
        for (k, v, ok) in cases {
            assert_eq!(check_label(k, v).is_ok(), ok, "{k}={v}");
        }
    }
}
