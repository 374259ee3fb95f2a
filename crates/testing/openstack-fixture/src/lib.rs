//! The OpenStack test cloud (`scripts/openstack/testcloud`: real Keystone, Nova with the fake
//! driver, Neutron, Octavia with no-op amphorae, Barbican, on 127.0.0.1) as the OpenStack provider's
//! tests see it: started once, its `cloud.json`, credentials for its users, clients, servers
//! booted and waited for. Test support only: never a dependency of a shipped binary.
//!
//! # One cloud for many tests
//! [`TestCloud::shared`] uses the directory `$OPENSTACK_TEST_CLOUD` when set, else
//! `target/openstack` under the workspace root. When no cloud answers there it starts one with
//! `scripts/openstack/testcloud up DIR` while holding an exclusive lock on `DIR.lock`, so the
//! test processes of one `cargo nextest` run start it once and the others wait for it (a cold
//! start takes about a minute). It **leaves the cloud running**: later test processes reuse it,
//! and whoever runs the tests stops it at the end (`make openstack-down`, i.e.
//! `scripts/openstack/testcloud down DIR`; the test runner script's job).
//!
//! Tests share the cloud, so everything a test creates is named with [`TestCloud::unique_name`]
//! and nothing assumes it is alone (list by name, never count everything).
//!
//! # Other URLs for the same cloud
//! [`TestCloud::add_region`] registers a catalog region whose endpoints are other URLs (a
//! counting proxy, a TLS front); [`tls_front`] puts HTTPS with a private CA in front of the
//! cloud's plain-HTTP services that way ([`TestCloud::add_tls_region`]).

pub mod barbican;
pub mod lb;
pub mod occm;
pub mod proxy;
pub mod quotas;
pub mod tls_front;

pub use quotas::LiftedQuotas;

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use provider_openstack::{
    auth::{Credentials, DomainRef, Interface, Method, ProjectRef, Scope, Secret, Tls, UserRef},
    client::{ApiError, Client, ErrorKind, Service},
};
use serde::Deserialize;
use serde_json::{Value, json};

/// What [`TestCloud::cloud_conf`] changes in the test cloud's `cloud.conf`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CloudConf<'a> {
    /// Keystone through another URL (a proxy).
    pub auth_url: Option<&'a str>,
    /// Another region (one whose endpoints are other URLs).
    pub region: Option<&'a str>,
    /// `[Route] router-id = router1`.
    pub routes: bool,
    /// `[LoadBalancer]` with the subnet for VIPs and members and the floating network.
    pub load_balancers: bool,
}

/// How long a server may take to become ACTIVE (a few seconds on an idle machine; the builds
/// of a test run share the cores).
pub const BOOT_DEADLINE: Duration = Duration::from_secs(120);
/// How long a stop, start or delete may take.
pub const STATE_DEADLINE: Duration = Duration::from_secs(60);

/// A user of the test cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// `admin`/`secret`, role admin on project admin.
    Admin,
    /// `ccm`/`ccm-secret`, roles member, load-balancer_member and creator (Barbican) on project ccm.
    Ccm,
}

/// `cloud.json`: one user's credentials.
#[derive(Debug, Clone, Deserialize)]
pub struct UserInfo {
    /// Name.
    pub username: String,
    /// Password.
    pub password: String,
    /// Project name.
    pub project_name: String,
    /// Project id.
    pub project_id: String,
    /// The user's domain name (`Default`).
    pub user_domain_name: String,
    /// The project's domain name (`Default`).
    pub project_domain_name: String,
}

/// `cloud.json`: what was seeded.
#[derive(Debug, Clone, Deserialize)]
pub struct Ids {
    /// Project ccm.
    pub project_ccm: String,
    /// Project admin.
    pub project_admin: String,
    /// The external flat network `public`.
    pub network_public: String,
    /// `public-subnet` (172.24.4.0/24).
    pub subnet_public: String,
    /// Project ccm's vxlan network `private`.
    pub network_private: String,
    /// `private-subnet` (10.0.0.0/24).
    pub subnet_private: String,
    /// `private-subnet-v6` (fd00:10::/64), unless the cloud was started without IPv6.
    #[serde(default)]
    pub subnet_private_v6: Option<String>,
    /// `router1` (project ccm): gateway on public, interfaces on the private subnets.
    pub router1: String,
    /// Flavor name → id (`m1.tiny` → `1`, `m1.small` → `2`).
    pub flavors: BTreeMap<String, String>,
    /// The image `cirros`.
    pub image_cirros: String,
}

/// `cloud.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct CloudInfo {
    /// Keystone, with `/v3`.
    pub auth_url: String,
    /// `RegionOne`.
    pub region: String,
    /// The admin user.
    pub admin: UserInfo,
    /// The CCM's user.
    pub ccm: UserInfo,
    /// Catalog type → URL, as registered (the same URL for public, internal and admin).
    pub endpoints: BTreeMap<String, String>,
    /// Service → port.
    pub ports: BTreeMap<String, u16>,
    /// What was seeded.
    pub ids: Ids,
}

/// A running test cloud.
#[derive(Debug)]
pub struct TestCloud {
    /// Its directory (`cloud.json`, `cloud.conf`, `log/`).
    pub dir: PathBuf,
    /// Its `cloud.json`.
    pub info: CloudInfo,
    /// The raw `cloud.json`.
    pub raw: Value,
}

static SHARED: OnceLock<TestCloud> = OnceLock::new();
static SEQ: AtomicU64 = AtomicU64::new(0);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .expect("workspace root")
}

impl TestCloud {
    /// The cloud of this test run: `$OPENSTACK_TEST_CLOUD` or `target/openstack`, started when
    /// none answers there (see the crate's documentation). Blocks while the cloud starts.
    pub fn shared() -> &'static TestCloud {
        SHARED.get_or_init(|| {
            let dir = std::env::var_os("OPENSTACK_TEST_CLOUD")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target/openstack"));
            TestCloud::start(&dir)
        })
    }

    /// The cloud in `dir`, started unless one already runs there (under the lock `DIR.lock`).
    pub fn start(dir: &Path) -> TestCloud {
        let script = workspace_root().join("scripts/openstack/testcloud");
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).expect("the test cloud's parent directory");
        }
        let dir = std::path::absolute(dir).expect("absolute test cloud directory");
        let lock_path = with_suffix(&dir, ".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .unwrap_or_else(|e| panic!("{}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("locking {}: {e}", lock_path.display()));
        let running = Command::new(&script)
            .arg("status")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !running {
            let log_path = with_suffix(&dir, ".up.log");
            let log = std::fs::File::create(&log_path).expect("the test cloud's start-up log");
            eprintln!(
                "openstack-fixture: starting the test cloud in {} (about a minute)",
                dir.display()
            );
            let started = Instant::now();
            let status = Command::new(&script)
                .arg("up")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .status()
                .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
            if !status.success() {
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("`testcloud up {}` failed ({status}):\n{text}", dir.display());
            }
            eprintln!(
                "openstack-fixture: test cloud up in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        let _ = lock.unlock();
        let text = std::fs::read_to_string(dir.join("cloud.json")).expect("cloud.json");
        let raw: Value = serde_json::from_str(&text).expect("cloud.json is JSON");
        let info = serde_json::from_value(raw.clone()).expect("cloud.json's shape");
        TestCloud { dir, info, raw }
    }

    /// A user's entry of `cloud.json`.
    pub fn user(&self, user: User) -> &UserInfo {
        match user {
            User::Admin => &self.info.admin,
            User::Ccm => &self.info.ccm,
        }
    }

    /// Password credentials for `user`: the user and the project by name in domain `Default`,
    /// the public interface, region `RegionOne`, 30 s per request.
    pub fn credentials(&self, user: User) -> Credentials {
        let u = self.user(user);
        Credentials {
            auth_url: self.info.auth_url.clone(),
            method: Method::Password {
                user: UserRef::Name {
                    name: u.username.clone(),
                    domain: Some(DomainRef::Name(u.user_domain_name.clone())),
                },
                password: Secret(u.password.clone()),
            },
            scope: Scope::Project(ProjectRef::Name {
                name: u.project_name.clone(),
                domain: Some(DomainRef::Name(u.project_domain_name.clone())),
            }),
            region: self.info.region.clone(),
            interface: Interface::Public,
            tls: Tls::default(),
            request_timeout: Duration::from_secs(30),
        }
    }

    /// A new client for `user`. A client belongs to the tokio runtime it was made on (its
    /// pooled connections do), so each test makes its own.
    pub async fn client(&self, user: User) -> Client {
        Client::connect(&self.credentials(user))
            .await
            .unwrap_or_else(|e| panic!("connecting as {user:?}: {e}"))
    }

    /// A new admin client.
    pub async fn admin(&self) -> Client {
        self.client(User::Admin).await
    }

    /// Waits until no other test (of any process) makes Octavia load balancers, and holds that
    /// until the returned guard is dropped.
    ///
    /// Why: the test cloud's Octavia keeps its state in sqlite. When two of its flows write at
    /// once (the API and the worker, for two load balancers), sqlite can refuse one at once with
    /// "database is locked" (a write-lock upgrade in WAL mode, which no busy timeout waits for);
    /// the worker's flow then fails and leaves its load balancer PENDING_* for good, as a
    /// broken Octavia would. A real Octavia on MySQL does not do that, so the tests that make
    /// load balancers take turns.
    pub async fn octavia_turn(&self) -> std::fs::File {
        let path = self.dir.join("octavia-turn.lock");
        tokio::task::spawn_blocking(move || {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            file.lock()
                .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
            file
        })
        .await
        .expect("the lock task")
    }

    /// `prefix-<pid>-<n>-<time>`: unique across the tests and processes sharing the cloud.
    pub fn unique_name(&self, prefix: &str) -> String {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() % 100_000_000)
            .unwrap_or(0);
        format!("{prefix}-{}-{n}-{t}", std::process::id())
    }

    /// A flavor's id from its name (`m1.tiny`); an id is returned as it is.
    pub fn flavor_id(&self, flavor: &str) -> String {
        self.info
            .ids
            .flavors
            .get(flavor)
            .cloned()
            .unwrap_or_else(|| flavor.to_owned())
    }

    /// The test cloud's `cloud.conf` (the CCM's user, project `ccm`) as an operator hands it to
    /// the gateway, with `changes`.
    ///
    /// # Panics
    /// The cloud's `cloud.conf` cannot be read.
    pub fn cloud_conf(&self, changes: &CloudConf<'_>) -> String {
        let path = self.dir.join("cloud.conf");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut out = String::new();
        for line in text.lines() {
            let key = line.split_once('=').map(|(k, _)| k.trim().to_ascii_lowercase());
            match (key.as_deref(), changes.auth_url, changes.region) {
                (Some("auth-url"), Some(url), _) => out.push_str(&format!("auth-url = {url}\n")),
                (Some("region"), _, Some(region)) => out.push_str(&format!("region = {region}\n")),
                _ => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        let ids = &self.info.ids;
        if changes.routes {
            out.push_str(&format!("\n[Route]\nrouter-id = {}\n", ids.router1));
        }
        if changes.load_balancers {
            // As an OCCM operator writes it: VIPs on the tenant subnet, floating IPs from `public`.
            out.push_str(&format!(
                "\n[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {}\n",
                ids.subnet_private, ids.network_public
            ));
        }
        out
    }

    /// A network's id from its name (`private`, `public`); an id is returned as it is.
    pub fn network_id(&self, network: &str) -> String {
        match network {
            "private" => self.info.ids.network_private.clone(),
            "public" => self.info.ids.network_public.clone(),
            id => id.to_owned(),
        }
    }

    /// Boots a server (image cirros) in the project of `client`, on `network` (a name or an
    /// id), and waits for ACTIVE; a server that goes to ERROR is deleted and booted once more.
    /// Returns its id.
    pub async fn boot_server(&self, client: &Client, name: &str, flavor: &str, network: &str) -> String {
        let mut last = String::new();
        for attempt in 0..2 {
            let body = json!({"server": {
                "name": name,
                "flavorRef": self.flavor_id(flavor),
                "imageRef": self.info.ids.image_cirros,
                "networks": [{"uuid": self.network_id(network)}],
            }});
            let created: Value = client
                .post(Service::Compute, "/servers")
                .json(&body)
                .send_json()
                .await
                .unwrap_or_else(|e| panic!("booting {name}: {e}"));
            let id = created["server"]["id"].as_str().expect("server id").to_owned();
            match wait_server(client, &id, "ACTIVE", BOOT_DEADLINE).await {
                Ok(()) => return id,
                Err(e) => {
                    last = e;
                    eprintln!(
                        "openstack-fixture: server {name} ({id}), attempt {}: {last}",
                        attempt + 1
                    );
                    self.delete_server(client, &id).await;
                }
            }
        }
        panic!("server {name} never became ACTIVE: {last}")
    }

    /// Stops a server and waits for SHUTOFF.
    pub async fn stop_server(&self, client: &Client, id: &str) {
        server_action(client, id, json!({"os-stop": null})).await;
        wait_server(client, id, "SHUTOFF", STATE_DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("stopping {id}: {e}"));
    }

    /// Starts a stopped server and waits for ACTIVE.
    pub async fn start_server(&self, client: &Client, id: &str) {
        server_action(client, id, json!({"os-start": null})).await;
        wait_server(client, id, "ACTIVE", STATE_DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("starting {id}: {e}"));
    }

    /// Deletes a server and waits until Nova answers 404 for it (already gone is fine).
    pub async fn delete_server(&self, client: &Client, id: &str) {
        match client
            .delete(Service::Compute, &format!("/servers/{id}"))
            .send_empty()
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_not_found() => return,
            Err(e) => panic!("deleting server {id}: {e}"),
        }
        let deadline = Instant::now() + STATE_DEADLINE;
        loop {
            match client
                .get(Service::Compute, &format!("/servers/{id}"))
                .send()
                .await
            {
                Err(e) if e.is_not_found() => return,
                Err(e) => panic!("waiting for server {id} to go: {e}"),
                Ok(_) if Instant::now() > deadline => {
                    panic!("server {id} still there after {STATE_DEADLINE:?}")
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// A user's id, by name, through an admin client.
    pub async fn user_id(&self, admin: &Client, name: &str) -> String {
        let users: Value = admin
            .get(Service::Identity, "/users")
            .query(&[("name", name)])
            .send_json()
            .await
            .unwrap_or_else(|e| panic!("looking up user {name}: {e}"));
        users["users"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no user {name}"))
            .to_owned()
    }

    /// Creates a user (domain `Default`, no roles) through an admin client; returns its id.
    pub async fn create_user(&self, admin: &Client, name: &str, password: &str) -> String {
        let created: Value = admin
            .post(Service::Identity, "/users")
            .json(&json!({"user": {"name": name, "password": password, "domain_id": "default"}}))
            .send_json()
            .await
            .unwrap_or_else(|e| panic!("creating user {name}: {e}"));
        created["user"]["id"].as_str().expect("user id").to_owned()
    }
}

/// A region of the test cloud's catalog whose endpoints are other URLs (a counting proxy, a TLS
/// front) for the same services: a client configured with `region = <id>` then reaches every
/// service through them, while everything else keeps using `RegionOne`. Remove it with
/// [`Region::remove`]; a region left behind only lengthens the catalog.
#[derive(Debug, Clone)]
pub struct Region {
    /// The region's id (unique per test).
    pub id: String,
    endpoint_ids: Vec<String>,
}

/// How long a Keystone call of [`TestCloud::add_region`] or [`Region::remove`] may keep failing
/// with a 5xx. The test cloud's Keystone keeps its data in SQLite, which refuses a write while
/// another one is under way (`database is locked`, a 500): test processes that add and remove
/// regions at the same time meet it.
pub const KEYSTONE_BUSY_DEADLINE: Duration = Duration::from_secs(30);

/// `call` until it answers anything but a 5xx, for at most [`KEYSTONE_BUSY_DEADLINE`]; `call`
/// gets the attempt number (0 first).
async fn keystone_retry<T, F, Fut>(mut call: F) -> Result<T, ApiError>
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let end = Instant::now() + KEYSTONE_BUSY_DEADLINE;
    let mut attempt = 0;
    loop {
        match call(attempt).await {
            Err(e) if e.kind == ErrorKind::Server && Instant::now() < end => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt.min(10)))).await;
            }
            result => return result,
        }
    }
}

impl TestCloud {
    /// Registers region `id` (through an admin client) with one endpoint per catalog type in
    /// `endpoints` (`identity`, `compute`, `network`, `load-balancer` → URL), for the public,
    /// internal and admin interfaces alike, as the cloud's own endpoints are. Keystone's 5xx
    /// (a busy database) are retried for [`KEYSTONE_BUSY_DEADLINE`].
    pub async fn add_region(&self, admin: &Client, id: &str, endpoints: &BTreeMap<String, String>) -> Region {
        let body = json!({"region": {"id": id, "description": "a test region over other URLs"}});
        keystone_retry(|attempt| {
            let request = admin.post(Service::Identity, "/regions").json(&body).send_empty();
            async move {
                match request.await {
                    // A retry of a creation that took effect after all.
                    Err(e) if e.is_conflict() && attempt > 0 => Ok(()),
                    result => result,
                }
            }
        })
        .await
        .unwrap_or_else(|e| panic!("creating region {id}: {e}"));
        let mut endpoint_ids = Vec::new();
        for (service_type, url) in endpoints {
            let services: Value = keystone_retry(|_| {
                admin
                    .get(Service::Identity, "/services")
                    .query(&[("type", service_type.as_str())])
                    .send_json()
            })
            .await
            .unwrap_or_else(|e| panic!("looking up service {service_type}: {e}"));
            let service_id = services["services"][0]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("no service of type {service_type}"))
                .to_owned();
            for interface in ["public", "internal", "admin"] {
                let body = json!({"endpoint": {
                    "service_id": service_id, "interface": interface, "url": url, "region_id": id,
                }});
                let created: Value = keystone_retry(|_| {
                    admin
                        .post(Service::Identity, "/endpoints")
                        .json(&body)
                        .send_json()
                })
                .await
                .unwrap_or_else(|e| panic!("creating endpoint {service_type} in {id}: {e}"));
                endpoint_ids.push(
                    created["endpoint"]["id"]
                        .as_str()
                        .expect("endpoint id")
                        .to_owned(),
                );
            }
        }
        Region {
            id: id.to_owned(),
            endpoint_ids,
        }
    }
}

impl Region {
    /// Deletes the region's endpoints and the region (Keystone's 5xx retried for
    /// [`KEYSTONE_BUSY_DEADLINE`]; already gone is fine).
    pub async fn remove(self, admin: &Client) {
        let paths = self
            .endpoint_ids
            .iter()
            .map(|endpoint| format!("/endpoints/{endpoint}"))
            .chain([format!("/regions/{}", self.id)]);
        for path in paths {
            match keystone_retry(|_| admin.delete(Service::Identity, &path).send_empty()).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => panic!("deleting {path}: {e}"),
            }
        }
    }
}

fn with_suffix(dir: &Path, suffix: &str) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

async fn server_action(client: &Client, id: &str, action: Value) {
    client
        .post(Service::Compute, &format!("/servers/{id}/action"))
        .json(&action)
        .send_empty()
        .await
        .unwrap_or_else(|e| panic!("server {id} action {action}: {e}"));
}

/// Polls a server until `status`; ERROR (when not asked for) or the deadline is an error.
pub async fn wait_server(client: &Client, id: &str, status: &str, deadline: Duration) -> Result<(), String> {
    let end = Instant::now() + deadline;
    loop {
        let server: Result<Value, ApiError> = client
            .get(Service::Compute, &format!("/servers/{id}"))
            .send_json()
            .await;
        let server = server.map_err(|e| e.to_string())?;
        let now = server["server"]["status"].as_str().unwrap_or_default().to_owned();
        if now == status {
            return Ok(());
        }
        if now == "ERROR" {
            return Err(format!("ERROR: {}", server["server"]["fault"]));
        }
        if Instant::now() > end {
            return Err(format!("still {now} after {deadline:?}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
