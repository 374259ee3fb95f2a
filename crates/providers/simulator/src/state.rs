//! The simulated cloud's persisted model and its file format: JSON with a schema `version`,
//! written atomically (temporary file in the same directory, fsync, rename, fsync the directory).

use std::{
    collections::{BTreeMap, HashSet},
    fs,
    io::Write,
    net::IpAddr,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::SystemTime,
};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The schema version this simulator reads and writes.
pub const STATE_VERSION: u32 = 1;

/// Everything the simulated cloud knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Schema version ([`STATE_VERSION`]).
    pub version: u32,
    /// The one region of this cloud.
    pub region: String,
    /// Its availability zones.
    pub zones: Vec<String>,
    /// Where instances' private IPs come from.
    pub instance_subnet: IpNet,
    /// Where load balancer IPs come from.
    pub load_balancer_pool: IpNet,
    /// Last private IP handed out (next-fit allocation, see [`crate::ipam`]).
    #[serde(default)]
    pub instance_ip_cursor: Option<IpAddr>,
    /// Last load balancer IP handed out.
    #[serde(default)]
    pub load_balancer_ip_cursor: Option<IpAddr>,
    /// Instances in launch order (terminated ones stay, as in EC2).
    #[serde(default)]
    pub instances: Vec<Instance>,
    /// Load balancers by name.
    #[serde(default)]
    pub load_balancers: BTreeMap<String, LoadBalancer>,
    /// Load balancers ever created (a service's load balancer created twice shows here).
    #[serde(default)]
    pub load_balancers_created: u64,
    /// Routes of every cluster, in creation order.
    #[serde(default)]
    pub routes: Vec<RouteRecord>,
}

/// Lifecycle state of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    /// Powered on.
    #[default]
    Running,
    /// Powered off; still exists.
    Stopped,
    /// Gone for good; kept in the listing, never found by lookups.
    Terminated,
}

impl InstanceState {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Terminated => "terminated",
        }
    }
}

/// A virtual machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// `i-` and 17 hex digits.
    pub id: String,
    /// Its name; also the name of its Kubernetes Node.
    pub name: String,
    /// Instance type, e.g. `sim.large`.
    #[serde(rename = "type")]
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// Private address inside the instance subnet.
    pub private_ip: IpAddr,
    /// Public address, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<IpAddr>,
    /// Lifecycle state.
    pub state: InstanceState,
    /// Extra labels the provider reports for the Node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// When it was launched.
    #[serde(with = "rfc3339")]
    pub launched_at: SystemTime,
}

impl Instance {
    /// `simulator://<zone>/<id>`.
    pub fn provider_id(&self) -> String {
        format!("{}://{}/{}", crate::PROVIDER_NAME, self.zone, self.id)
    }

    /// Not terminated.
    pub fn is_live(&self) -> bool {
        self.state != InstanceState::Terminated
    }
}

/// Provisioning state of a load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadBalancerState {
    /// Being created; answers nothing yet.
    Provisioning,
    /// Serving on its IP.
    Active,
}

/// One listener of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    /// Service port name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// Front port.
    pub port: u16,
    /// Node port traffic goes to.
    pub node_port: u16,
}

/// A backend node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Node name.
    pub node_name: String,
    /// The node's providerID (may be empty).
    #[serde(default)]
    pub provider_id: String,
}

/// How the load balancer checks its backends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// `HTTP`.
    pub protocol: String,
    /// Node port probed.
    pub port: u16,
    /// Path probed.
    pub path: String,
}

/// A load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancer {
    /// `default_load_balancer_name(service uid)`.
    pub name: String,
    /// The cluster that owns it (the tag real clouds use).
    pub cluster: String,
    /// Service UID.
    pub service_uid: String,
    /// Service namespace.
    pub service_namespace: String,
    /// Service name.
    pub service_name: String,
    /// Listeners.
    pub listeners: Vec<Listener>,
    /// Backend nodes, sorted by name.
    pub backends: Vec<Backend>,
    /// Health check.
    pub health_check: HealthCheck,
    /// Client CIDRs allowed; empty: everyone.
    #[serde(default)]
    pub source_ranges: Vec<String>,
    /// ClientIP session affinity.
    #[serde(default)]
    pub session_affinity_client_ip: bool,
    /// Its address, from the pool.
    pub ip: IpAddr,
    /// Provisioning state as of `ready_at`: read it through [`LoadBalancer::state_at`].
    pub state: LoadBalancerState,
    /// Creation time.
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    /// When provisioning ends.
    #[serde(with = "rfc3339")]
    pub ready_at: SystemTime,
}

impl LoadBalancer {
    /// The state at `now` (provisioning ends at `ready_at`, with no call needed).
    pub fn state_at(&self, now: SystemTime) -> LoadBalancerState {
        if now >= self.ready_at {
            LoadBalancerState::Active
        } else {
            LoadBalancerState::Provisioning
        }
    }
}

/// A route of a cluster's route table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRecord {
    /// Owning cluster.
    pub cluster: String,
    /// `<cluster>-<name hint>`.
    pub name: String,
    /// Target node name.
    pub target_node: String,
    /// Destination (a network address).
    pub destination_cidr: IpNet,
    /// Creation time.
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
}

/// `t` rounded down to the millisecond: the precision of the file, so that what is in memory
/// equals what a restart reads back.
pub fn truncate_to_millis(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => {
            SystemTime::UNIX_EPOCH
                + std::time::Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
        }
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// The current time at the file's precision.
pub fn now() -> SystemTime {
    truncate_to_millis(SystemTime::now())
}

/// Why a state file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state file {}: {message}", path.display())]
pub struct StateFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl State {
    /// An empty cloud.
    pub fn empty(
        region: String,
        zones: Vec<String>,
        instance_subnet: IpNet,
        load_balancer_pool: IpNet,
    ) -> Self {
        Self {
            version: STATE_VERSION,
            region,
            zones,
            instance_subnet,
            load_balancer_pool,
            instance_ip_cursor: None,
            load_balancer_ip_cursor: None,
            load_balancers_created: 0,
            instances: Vec::new(),
            load_balancers: BTreeMap::new(),
            routes: Vec::new(),
        }
    }

    /// Checks the invariants a hand-edited or damaged file could break.
    pub fn check(&self) -> Result<(), String> {
        if self.version != STATE_VERSION {
            return Err(format!(
                "schema version {} is not supported (this simulator reads version {STATE_VERSION})",
                self.version
            ));
        }
        let mut ids = HashSet::new();
        for i in &self.instances {
            if !ids.insert(i.id.as_str()) {
                return Err(format!("instance id {} appears twice", i.id));
            }
        }
        let mut ips = HashSet::new();
        for (name, lb) in &self.load_balancers {
            if *name != lb.name {
                return Err(format!("load balancer {} is filed under {name}", lb.name));
            }
            if !ips.insert(lb.ip) {
                return Err(format!("IP {} is held by two load balancers", lb.ip));
            }
        }
        Ok(())
    }

    /// Reads `path`; `Ok(None)` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<State>, StateFileError> {
        let err = |message: String| StateFileError {
            path: path.to_path_buf(),
            message,
        };
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(err(format!("cannot be read: {e}"))),
        };
        let state: State = serde_json::from_slice(&bytes)
            .map_err(|e| err(format!("is corrupt or not a simulator state file: {e}")))?;
        state.check().map_err(|m| err(format!("is inconsistent: {m}")))?;
        Ok(Some(state))
    }

    /// Writes the state to `path` atomically: readers and a crash at any point see either the
    /// old file or the new one. With `durable`, the data and the rename are fsynced before this
    /// returns, so the change survives a power cut.
    pub fn save(&self, path: &Path, durable: bool) -> Result<(), StateFileError> {
        let err = |message: String| StateFileError {
            path: path.to_path_buf(),
            message,
        };
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| err(format!("cannot be serialized: {e}")))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = path
            .file_name()
            .ok_or_else(|| err("is not a file path".into()))?
            .to_string_lossy();
        // Unique per write, so two writers (a misconfiguration) never share a temporary file.
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{file_name}.tmp.{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            if durable {
                f.sync_data()?;
            }
            drop(f);
            fs::rename(&tmp, path)?;
            if durable {
                // The rename lives in the directory: fsync it too, or a crash may undo it.
                fs::File::open(&dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            err(format!("cannot be written: {e}"))
        })
    }
}

/// `SystemTime` as an RFC 3339 UTC timestamp with milliseconds.
mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_rfc3339(&s).map_err(|e| D::Error::custom(format!("bad timestamp {s:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn sample() -> State {
        let mut s = State::empty(
            "sim-east-1".into(),
            vec!["sim-east-1a".into()],
            "10.0.0.0/16".parse().unwrap(),
            "203.0.113.0/24".parse().unwrap(),
        );
        s.instances.push(Instance {
            id: "i-0123456789abcdef0".into(),
            name: "node-1".into(),
            instance_type: "sim.large".into(),
            zone: "sim-east-1a".into(),
            private_ip: "10.0.0.5".parse().unwrap(),
            public_ip: None,
            state: InstanceState::Stopped,
            labels: [("team".to_string(), "a".to_string())].into(),
            launched_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        });
        s
    }

    #[test]
    fn save_then_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(State::load(&path).unwrap(), None);
        let s = sample();
        for durable in [true, false] {
            s.save(&path, durable).unwrap();
            assert_eq!(State::load(&path).unwrap(), Some(s.clone()));
        }
        // no temporary file left behind
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"version\": 1"), "{text}");
        assert!(text.contains("2023-11-14T22:13:20.123Z"), "{text}");
    }

    #[test]
    fn bad_files_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut future = serde_json::to_value(sample()).unwrap();
        future["version"] = 99.into();
        let mut twice = sample();
        twice.instances.push(twice.instances[0].clone());
        let cases = [
            ("{not json".to_string(), "is corrupt"),
            (future.to_string(), "schema version 99 is not supported"),
            (serde_json::to_string(&twice).unwrap(), "appears twice"),
        ];
        for (content, want) in cases {
            fs::write(&path, content).unwrap();
            let e = State::load(&path).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("state.json"), "{e}");
        }
    }

    #[test]
    fn unwritable_location_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("state.json");
        let e = sample().save(&path, false).unwrap_err().to_string();
        assert!(e.contains("cannot be written"), "{e}");
    }
}
