//! vcsim as the vSphere provider's tests see it. Test support only: never a dependency of a
//! shipped binary.
//!
//! # One vcsim for many tests
//! [`Vcsim::shared`] uses the directory `$VSPHERE_TEST_VCSIM` when set, else `target/vcsim-run`
//! under the workspace root. When none answers there it runs `scripts/vsphere/vcsim up DIR`
//! (building it first if needed) while holding an exclusive lock on `DIR.lock`, so the test
//! processes of one run start it once. It leaves vcsim running for later test processes;
//! `scripts/vsphere/vcsim down DIR` (`make vcsim-down`) stops it. A test that counts calls
//! starts a vcsim of its own with [`Vcsim::start`] in a directory of its own.
//!
//! Tests share vcsim, so each makes its own VMs ([`Vcsim::create_vm`], unique UUIDs and
//! hostnames from [`unique`]) and assumes nothing about the others'.
//!
//! The admin API (`/vcsim-admin`, see `scripts/vsphere/vcsim-main/main.go`) is called with
//! `curl` and vcsim's own CA file: test support needs no HTTP client of its own.
//!
//! [`proxy::VcsimProxy`] stands in front of vcsim and injects faults (503s, NotAuthenticated,
//! dropped connections, slow answers) for the chaos suite.

pub mod proxy;

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `vcsim.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Info {
    /// `https://127.0.0.1:PORT/sdk`.
    pub url: String,
    /// `127.0.0.1`.
    pub server: String,
    /// The port, as text.
    pub port: String,
    /// The one login vcsim accepts.
    pub username: String,
    /// Its password.
    pub password: String,
    /// The admin API's base URL.
    pub admin: String,
}

/// A NIC of a VM's `guest.net`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Nic {
    /// Port group name.
    pub network: String,
    /// Its addresses.
    pub ips: Vec<String>,
    /// `deviceConfigId` (default 4000 + index; -1 for no vNIC).
    #[serde(rename = "deviceConfigId", skip_serializing_if = "Option::is_none")]
    pub device_config_id: Option<i32>,
}

impl Nic {
    /// A NIC on `network` with `ips`.
    pub fn new(network: &str, ips: &[&str]) -> Self {
        Self {
            network: network.into(),
            ips: ips.iter().map(|s| (*s).to_owned()).collect(),
            device_config_id: None,
        }
    }
}

/// What VMware Tools report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Guest {
    /// `guest.hostName`.
    #[serde(rename = "hostName")]
    pub host_name: String,
    /// `guest.ipAddress`.
    #[serde(rename = "ipAddress")]
    pub ip_address: String,
    /// `guest.net`.
    pub nics: Vec<Nic>,
}

/// A VM to create.
#[derive(Debug, Clone, Serialize)]
pub struct Vm {
    /// Inventory name.
    pub name: String,
    /// BIOS UUID.
    pub uuid: String,
    /// Guest OS type.
    #[serde(rename = "guestId")]
    pub guest_id: String,
    /// vCPUs.
    #[serde(rename = "numCpu")]
    pub num_cpu: i32,
    /// Memory.
    #[serde(rename = "memoryMB")]
    pub memory_mb: i64,
    /// Guest data.
    #[serde(flatten)]
    pub guest: Guest,
    /// The datacenter it is created in (`DC0`, `DC1`, …; the first when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datacenter: Option<String>,
}

impl Vm {
    /// A 2-vCPU, 4 GB Ubuntu VM with a unique name and UUID, its tools reporting `ip` on
    /// "VM Network" and the hostname `name`.
    pub fn ubuntu(prefix: &str, ip: &str) -> Self {
        let name = unique(prefix);
        Self {
            uuid: uuid::Uuid::new_v4().to_string(),
            guest_id: "ubuntu64Guest".into(),
            num_cpu: 2,
            memory_mb: 4096,
            guest: Guest {
                host_name: name.clone(),
                ip_address: ip.into(),
                nics: vec![Nic::new("VM Network", &[ip])],
            },
            name,
            datacenter: None,
        }
    }
}

/// A running vcsim.
#[derive(Debug)]
pub struct Vcsim {
    /// Its directory (`vcsim.json`, `ca.pem`, `vcsim.log`).
    pub dir: PathBuf,
    /// Its `vcsim.json`.
    pub info: Info,
}

static SHARED: OnceLock<Vcsim> = OnceLock::new();
static SEQ: AtomicU64 = AtomicU64::new(0);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .expect("workspace root")
}

/// `prefix-<pid>-<n>`, lower-case: unique across the tests and processes sharing vcsim.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn with_suffix(dir: &Path, suffix: &str) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl Vcsim {
    /// The vcsim of this run (see the crate's documentation).
    pub fn shared() -> &'static Vcsim {
        SHARED.get_or_init(|| {
            let dir = std::env::var_os("VSPHERE_TEST_VCSIM")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target/vcsim-run"));
            Vcsim::start(&dir)
        })
    }

    /// The vcsim in `dir`, started unless one already answers there.
    pub fn start(dir: &Path) -> Vcsim {
        Self::start_with(dir, 1)
    }

    /// [`Vcsim::start`] with `datacenters` datacenters (`DC0`, `DC1`, …, each with a cluster
    /// `DCn_C0`), when it is started here.
    pub fn start_with(dir: &Path, datacenters: usize) -> Vcsim {
        std::fs::create_dir_all(dir).expect("vcsim's directory");
        let dir = std::path::absolute(dir).expect("absolute directory");
        let lock_path = with_suffix(&dir, ".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .unwrap_or_else(|e| panic!("{}: {e}", lock_path.display()));
        lock.lock().expect("vcsim's lock");
        let script = workspace_root().join("scripts/vsphere/vcsim");
        let output = Command::new(&script)
            .env("VCSIM_DATACENTERS", datacenters.to_string())
            .arg("up")
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        let _ = lock.unlock();
        assert!(
            output.status.success(),
            "`vcsim up {}` failed (scripts/vsphere/install.sh installs what it needs):\n{}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let text = std::fs::read_to_string(dir.join("vcsim.json")).expect("vcsim.json");
        let info = serde_json::from_str(&text).expect("vcsim.json's shape");
        Vcsim { dir, info }
    }

    /// Stops a vcsim started with [`Vcsim::start`] in a directory of the test's own.
    pub fn stop(&self) {
        let _ = Command::new(workspace_root().join("scripts/vsphere/vcsim"))
            .arg("down")
            .arg(&self.dir)
            .status();
    }

    /// An IPv4 address no other VM of this vcsim was given by this method (a counter kept in
    /// its directory under a lock: vcsim outlives test processes, and FindByIp picks any VM
    /// with the address).
    pub fn unique_ipv4(&self) -> String {
        let path = self.dir.join("ip-counter");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .expect("ip counter");
        file.lock().expect("ip counter lock");
        let n: u32 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
            + 1;
        std::fs::write(&path, n.to_string()).expect("ip counter");
        let _ = file.unlock();
        format!("10.{}.{}.{}", 100 + (n >> 16) % 100, (n >> 8) & 255, n & 255)
    }

    /// Its certificate, for `ca-file`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// An INI `vsphere.conf` for it (`[Global]` with its credentials and CA file, one
    /// `[VirtualCenter]`), followed by `extra`.
    pub fn conf(&self, extra: &str) -> String {
        format!(
            "[Global]\nuser = \"{}\"\npassword = \"{}\"\nport = {}\nca-file = {}\n\n[VirtualCenter \"{}\"]\n\n{extra}",
            self.info.username,
            self.info.password,
            self.info.port,
            self.ca_file().display(),
            self.info.server
        )
    }

    fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "60", "-X", method, "--cacert"])
            .arg(self.ca_file())
            .arg(format!("{}/{path}", self.info.admin));
        if let Some(body) = body {
            cmd.args(["-H", "Content-Type: application/json", "--data-binary"])
                .arg(body.to_string());
        }
        let out = cmd.output().expect("curl");
        let text = String::from_utf8_lossy(&out.stdout);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|_| {
            panic!(
                "vcsim admin {method} {path}: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        if let Some(e) = value.get("error") {
            panic!("vcsim admin {method} {path}: {e}");
        }
        value
    }

    /// Zones and regions as `[Labels]` reads them: a zone category and a region category
    /// (unique names), and for each of the first `datacenters` VMs of `morefs` (one per
    /// datacenter) a zone tag on its cluster and a region tag on its datacenter. The two
    /// categories' names.
    pub fn tag_zones_and_regions(&self, morefs: &[String], datacenters: usize) -> (String, String) {
        let (zones, regions) = (unique("k8s-zone"), unique("k8s-region"));
        let zone_category = self.create_category(&zones);
        let region_category = self.create_category(&regions);
        for (dc, moref) in morefs.iter().take(datacenters).enumerate() {
            let placed = self.placement(moref);
            let zone = self.create_tag(&zone_category, &format!("zone-{dc}"));
            let region = self.create_tag(&region_category, &format!("region-{dc}"));
            self.attach_tag(&zone, &placed["cluster"]);
            self.attach_tag(&region, &placed["datacenter"]);
        }
        (zones, regions)
    }

    /// Creates and powers on `vm`; its managed object id (`vm-57`).
    pub fn create_vm(&self, vm: &Vm) -> String {
        let v = self.admin("POST", "vm", Some(&serde_json::to_value(vm).expect("JSON")));
        v["moref"].as_str().expect("moref").to_owned()
    }

    /// Creates and powers on every VM of `vms` in one admin call; their managed object ids.
    pub fn create_vms(&self, vms: &[Vm]) -> Vec<String> {
        let v = self.admin("POST", "vms", Some(&serde_json::to_value(vms).expect("JSON")));
        serde_json::from_value(v["morefs"].clone()).expect("morefs")
    }

    /// The SOAP sessions open, the admin API's own aside.
    pub fn sessions(&self) -> u64 {
        self.admin("GET", "sessions", None)["sessions"]
            .as_u64()
            .unwrap_or(0)
    }

    /// Sets what the VM's tools report.
    pub fn set_guest(&self, moref: &str, guest: &Guest) {
        self.admin(
            "POST",
            &format!("vm/{moref}/guest"),
            Some(&serde_json::to_value(guest).expect("JSON")),
        );
    }

    /// `power-off`, `power-on`, `suspend` or `destroy`.
    pub fn vm_action(&self, moref: &str, action: &str) {
        self.admin("POST", &format!("vm/{moref}/{action}"), Some(&json!({})));
    }

    /// Ends every session: vCenter forgetting its clients (a restart, an idle timeout).
    pub fn terminate_sessions(&self) -> u64 {
        self.admin("POST", "sessions/terminate", Some(&json!({})))["terminated"]
            .as_u64()
            .unwrap_or(0)
    }

    /// Sets keys of the VM's `config.extraConfig` (`guestinfo.metadata`, …) as `govc vm.change
    /// -e` does (ReconfigVM).
    pub fn set_extra_config(&self, moref: &str, values: &[(&str, &str)]) {
        let body: serde_json::Map<String, Value> =
            values.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
        self.admin(
            "POST",
            &format!("vm/{moref}/extra-config"),
            Some(&Value::Object(body)),
        );
    }

    /// Where VM `moref` runs: `host`, `pool`, `cluster`, `datacenter`, each as (type, id).
    pub fn placement(&self, moref: &str) -> BTreeMap<String, (String, String)> {
        let v = self.admin("GET", &format!("vm/{moref}/placement"), None);
        v.as_object()
            .expect("a placement")
            .iter()
            .map(|(k, r)| {
                let field = |f: &str| r[f].as_str().expect("a reference").to_owned();
                (k.clone(), (field("type"), field("value")))
            })
            .collect()
    }

    /// A call of vCenter's tagging REST API (`/rest/com/vmware/cis…`), as an operator's `govc
    /// tags.*` makes it, in a session of its own (not counted as the provider's: the admin's
    /// user agent); the answer's `value`.
    fn rest(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let base = self.info.url.strip_suffix("/sdk").unwrap_or(&self.info.url);
        let curl = |args: &[&str]| {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "--fail-with-body",
                    "--max-time",
                    "60",
                    "-A",
                    "vcsim-admin",
                    "--cacert",
                ])
                .arg(self.ca_file())
                .args(args)
                .output()
                .expect("curl");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "vcsim REST {method} {path}: {text}");
            // An attach answers 200 with no body.
            if text.trim().is_empty() {
                return Value::Null;
            }
            serde_json::from_str::<Value>(&text)
                .unwrap_or_else(|_| panic!("vcsim REST {method} {path}: {text:?}"))
        };
        let credentials = format!("{}:{}", self.info.username, self.info.password);
        let session = curl(&[
            "-X",
            "POST",
            "-u",
            &credentials,
            &format!("{base}/rest/com/vmware/cis/session"),
        ]);
        let session = session["value"].as_str().expect("a REST session").to_owned();
        let header = format!("vmware-api-session-id: {session}");
        let url = format!("{base}/rest/com/vmware/cis{path}");
        let mut args = vec!["-X", method, "-H", &header, &url];
        let data = body.map(Value::to_string);
        if let Some(data) = &data {
            args.extend(["-H", "Content-Type: application/json", "--data-binary", data]);
        }
        curl(&args)["value"].clone()
    }

    /// How many tag categories vCenter has (tests share vcsim: others' included).
    pub fn category_count(&self) -> usize {
        self.rest("GET", "/tagging/category", None)
            .as_array()
            .map_or(0, Vec::len)
    }

    /// Creates tag category `name` (single cardinality, any object); its id.
    pub fn create_category(&self, name: &str) -> String {
        let spec = json!({"create_spec": {"name": name, "description": "", "cardinality": "SINGLE", "associable_types": []}});
        self.rest("POST", "/tagging/category", Some(&spec))
            .as_str()
            .expect("a category id")
            .to_owned()
    }

    /// Creates tag `name` in category `category_id`; its id.
    pub fn create_tag(&self, category_id: &str, name: &str) -> String {
        let spec = json!({"create_spec": {"name": name, "description": "", "category_id": category_id}});
        self.rest("POST", "/tagging/tag", Some(&spec))
            .as_str()
            .expect("a tag id")
            .to_owned()
    }

    /// Attaches tag `tag_id` to the object (type, id).
    pub fn attach_tag(&self, tag_id: &str, object: &(String, String)) {
        let body = json!({"object_id": {"type": object.0, "id": object.1}});
        self.rest(
            "POST",
            &format!("/tagging/tag-association/id:{tag_id}?~action=attach"),
            Some(&body),
        );
    }

    /// Calls counted since start or the last reset, by `soap <Method>` / `rest <VERB> <path>`.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        serde_json::from_value(self.admin("GET", "calls", None)).expect("counts")
    }

    /// Resets the counts.
    pub fn reset_calls(&self) {
        self.admin("DELETE", "calls", None);
    }
}
