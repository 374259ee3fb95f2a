//! Harness for end-to-end tests: starts the real binaries as processes on loopback and waits
//! for conditions with deadlines (never blind sleeps).
//!
//! The binaries come from the workspace's target directory; `make test` builds them first
//! (`cargo build --workspace --bins`). Each process logs to a file in the cluster's temporary
//! directory; when a test fails, the tail of every log is printed.

pub mod chaos;
pub mod conformance;
pub mod measure;
pub mod nodes;
pub mod routes_bench;
pub mod services_bench;
pub mod shadow;

use std::{
    future::Future,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use k8s_openapi::api::{
    core::v1::{Node, Service, Taint},
    events::v1::Event,
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    process::{Child, Command},
    time::Instant,
};

/// The taint kube-apiserver puts on every new Node (the TaintNodesByCondition admission
/// plugin) and kube-controller-manager removes once the node is Ready.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Where `cargo build` put the workspace's binaries.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("CCM_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // Test executables live in target/<profile>/deps/, binaries (the demo) in target/<profile>/.
    let exe = std::env::current_exe().expect("executable path");
    let dir = exe.parent().expect("executable directory");
    let dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    dir.to_path_buf()
}

/// Path of workspace binary `name`; fails with the command that builds it.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`, which `make test` does)",
        path.display()
    );
    path
}

/// A free port on 127.0.0.1 (bound and released; the process that gets it binds it at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A process of the cluster.
pub struct Proc {
    /// Its name in logs.
    pub name: String,
    /// Its `/healthz`, `/metrics` address, for controllers.
    pub http: Option<SocketAddr>,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Sends SIGKILL.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`) with the `kill` command.
    pub async fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.id() {
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status()
                .await;
            assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {pid} failed");
        }
    }

    /// Its process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops it the way Kubernetes stops a pod: SIGTERM, then SIGKILL after `grace`. Waits for
    /// it to exit, so it does not outlive its parent even as a zombie.
    pub async fn stop(&mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }

    /// Whether it exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Starts `binary` with `args`, logging to `dir/name.log`.
pub fn spawn(dir: &Path, name: &str, binary: &Path, args: &[String]) -> Proc {
    spawn_with_env(dir, name, binary, args, &[])
}

/// [`spawn`], with environment variables `env` added (e.g. `OTEL_*`).
pub fn spawn_with_env(dir: &Path, name: &str, binary: &Path, args: &[String], env: &[(&str, &str)]) -> Proc {
    let log = dir.join(format!("{name}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    let err = file.try_clone().expect("log file");
    let child = Command::new(binary)
        .args(args)
        .envs(env.iter().copied())
        .env(
            "RUST_LOG",
            std::env::var("E2E_RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    Proc {
        name: name.into(),
        http: None,
        child,
        log,
    }
}

/// Waits until `check` returns `Some`, polling every 100 ms, failing after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A minimal HTTP/1.0 GET on loopback: (status code, body). `None` when nothing answers.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path).await
}

/// A minimal HTTP/1.0 request without a body on loopback: (status code, body). `None` when
/// nothing answers.
pub async fn http_request(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    stream
        .write_all(
            format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .ok()?
        .ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// What to start.
#[derive(Clone)]
pub struct ClusterSpec {
    /// Simulator inventory (YAML).
    pub inventory: String,
    /// Extra `cloud-gateway` flags.
    pub gateway_args: Vec<String>,
    /// Extra `fake-apiserver` flags (kube-apiserver's, such as `--service-node-port-range`).
    pub apiserver_args: Vec<String>,
}

impl ClusterSpec {
    /// The gateway's own read and write limits raised to `per_second` (burst as much), for tests
    /// whose subject is not the limiter.
    pub fn with_gateway_limits(mut self, per_second: u32) -> Self {
        let rate = per_second.to_string();
        for flag in ["--write-rate", "--write-burst", "--read-rate", "--read-burst"] {
            self.gateway_args.extend([flag.to_owned(), rate.clone()]);
        }
        self
    }

    /// An inventory with running instances `names` in region `sim-east-1`.
    pub fn with_instances(names: &[&str]) -> Self {
        let mut inventory = String::from(
            "region: sim-east-1\nzones: [sim-east-1a, sim-east-1b]\ninstance_subnet: 10.0.0.0/16\ninstances:\n",
        );
        for (i, name) in names.iter().enumerate() {
            inventory.push_str(&format!(
                "  - name: {name}\n    type: sim.medium\n    zone: sim-east-1{}\n    private_ip: 10.0.0.{}\n",
                if i % 2 == 0 { 'a' } else { 'b' },
                i + 10
            ));
        }
        Self {
            inventory,
            gateway_args: Vec::new(),
            apiserver_args: Vec::new(),
        }
    }
}

/// Starts the gateway with `args` on two free loopback ports (gRPC, HTTP). A port another test
/// took between [`free_port`] and the gateway's bind makes it exit at once: then it starts again
/// on other ports. Answers the process, its addresses and its whole flags.
async fn start_gateway_on_free_ports(
    dir: &Path,
    args: &[String],
) -> (Proc, SocketAddr, SocketAddr, Vec<String>) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut all = vec![
            "--grpc-listen".to_owned(),
            grpc.to_string(),
            "--http-listen".to_owned(),
            http.to_string(),
        ];
        all.extend(args.iter().cloned());
        let mut gateway = spawn(dir, "cloud-gateway", &binary("cloud-gateway"), &all);
        // Up or gone: whichever comes first.
        let up = wait_for("the gateway to listen or exit", Duration::from_secs(30), || {
            let exited = gateway.exited().is_some();
            async move {
                if exited {
                    return Some(false);
                }
                matches!(http_get(http, "/healthz").await, Some((200, _))).then_some(true)
            }
        })
        .await;
        if up || attempt == 3 || !gateway.log().contains("Address already in use") {
            return (gateway, grpc, http, all);
        }
    }
}

/// fake-apiserver + cloud-gateway on the simulator, plus controllers started on demand.
pub struct Cluster {
    /// Every process started, in order. First so that it drops first: its logs are printed
    /// and its processes stopped before `dir` is removed.
    pub procs: Procs,
    /// Temporary directory (logs, kubeconfig, simulator state).
    pub dir: TempDir,
    /// Kubeconfig of the fake API server.
    pub kubeconfig: PathBuf,
    /// Client of the fake API server.
    pub client: Client,
    /// Gateway gRPC address.
    pub gateway_grpc: SocketAddr,
    /// Gateway HTTP address (health, metrics, simulator admin API).
    pub gateway_http: SocketAddr,
    /// The gateway's flags, to start it again at the same addresses on the same cloud state.
    gateway_args: Vec<String>,
}

/// The processes of a cluster; when a test fails, the tail of each log is printed. Dropped,
/// it kills them all.
#[derive(Default)]
pub struct Procs(pub Vec<Proc>);

impl std::ops::Deref for Procs {
    type Target = Vec<Proc>;
    fn deref(&self) -> &Vec<Proc> {
        &self.0
    }
}

impl std::ops::DerefMut for Procs {
    fn deref_mut(&mut self) -> &mut Vec<Proc> {
        &mut self.0
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var("E2E_SHOW_LOGS").is_ok() {
            for proc in &self.0 {
                let log = proc.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = &lines[lines.len().saturating_sub(60)..];
                eprintln!(
                    "----- {} (last {} lines) -----\n{}",
                    proc.name,
                    tail.len(),
                    tail.join("\n")
                );
            }
        }
        // SIGKILL and reap every process: kill_on_drop alone does not wait, and an unreaped
        // child outlives an exiting parent as a zombie wherever PID 1 does not reap.
        for proc in &mut self.0 {
            let _ = proc.child.start_kill();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        for proc in &mut self.0 {
            while matches!(proc.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Cluster {
    /// Starts the API server and the gateway and waits until both answer.
    pub async fn start(spec: ClusterSpec) -> Self {
        // kube's client needs a rustls crypto provider chosen explicitly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let apiserver = spawn(
            dir.path(),
            "fake-apiserver",
            &binary("fake-apiserver"),
            &[
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--kubeconfig-out".into(),
                kubeconfig.display().to_string(),
            ]
            .into_iter()
            .chain(spec.apiserver_args.iter().cloned())
            .collect::<Vec<String>>(),
        );
        let inventory = dir.path().join("inventory.yaml");
        std::fs::write(&inventory, &spec.inventory).expect("inventory");
        let mut args = vec![
            "--simulator-inventory".into(),
            inventory.display().to_string(),
            "--simulator-state".into(),
            dir.path().join("cloud-state.json").display().to_string(),
            "--simulator-no-fsync".into(),
        ];
        // Plain text unless the spec configures mutual TLS itself.
        if !spec.gateway_args.iter().any(|a| a.starts_with("--tls-")) {
            args.push("--insecure-plaintext".into());
        }
        // No cache unless the spec says otherwise: tests see every change of the cloud at once.
        if !spec
            .gateway_args
            .iter()
            .any(|a| a.starts_with("--instance-cache-ttl"))
        {
            args.extend(["--instance-cache-ttl".into(), "0s".into()]);
        }
        args.extend(spec.gateway_args.iter().cloned());
        let mut procs = Procs(vec![apiserver]);
        let (gateway, gateway_grpc, gateway_http, gateway_args) =
            start_gateway_on_free_ports(dir.path(), &args).await;
        procs.push(gateway);
        let config = wait_for("the fake-apiserver kubeconfig", Duration::from_secs(20), || {
            let path = kubeconfig.clone();
            async move {
                let kc = Kubeconfig::read_from(&path).ok()?;
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .ok()
            }
        })
        .await;
        let client = Client::try_from(config).expect("client");
        let cluster = Self {
            kubeconfig,
            client: client.clone(),
            gateway_grpc,
            gateway_http,
            gateway_args,
            procs,
            dir,
        };
        wait_for("the fake-apiserver to answer", Duration::from_secs(20), || {
            let client = client.clone();
            async move { client.apiserver_version().await.ok() }
        })
        .await;
        wait_for(
            "the gateway to be ready",
            Duration::from_secs(30),
            || async move { matches!(http_get(gateway_http, "/readyz").await, Some((200, _))).then_some(()) },
        )
        .await;
        cluster
    }

    /// Flags every controller needs to reach this cluster, serving health on `http_port`.
    pub fn controller_args(&self, http_port: u16) -> Vec<String> {
        vec![
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
            "--gateway-address".into(),
            format!("http://{}", self.gateway_grpc),
            "--http-listen".into(),
            format!("127.0.0.1:{http_port}"),
        ]
    }

    /// Starts controller binary `name` with the cluster flags plus `extra`; returns its index.
    pub fn start_controller(&mut self, name: &str, label: &str, extra: &[&str]) -> usize {
        self.start_controller_with_env(name, label, extra, &[])
    }

    /// [`Cluster::start_controller`], with environment variables `env` added.
    pub fn start_controller_with_env(
        &mut self,
        name: &str,
        label: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> usize {
        let port = free_port();
        let mut args = self.controller_args(port);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let mut proc = spawn_with_env(self.dir.path(), label, &binary(name), &args, env);
        proc.http = Some(([127, 0, 0, 1], port).into());
        self.procs.push(proc);
        self.procs.len() - 1
    }

    /// [`Cluster::sim`] that answers `None` when the gateway does not (it may be down on purpose).
    pub async fn try_sim(&self, args: &[&str]) -> Option<Value> {
        let output = Command::new(binary("cloud-sim"))
            .arg("--admin-url")
            .arg(format!("http://{}", self.gateway_http))
            .arg("-o")
            .arg("json")
            .args(args)
            .output()
            .await
            .ok()?;
        if !output.status.success() {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }

    /// The process labelled `name`, the latest one when several were.
    pub fn proc_named(&mut self, name: &str) -> Option<&mut Proc> {
        self.procs.iter_mut().rev().find(|p| p.name == name)
    }

    /// SIGKILLs the gateway (a crash: nothing is flushed or drained); its cloud state stays on
    /// disk for [`Cluster::start_gateway`].
    pub async fn kill_gateway(&mut self) {
        if let Some(gateway) = self.proc_named("cloud-gateway") {
            gateway.kill().await;
        }
    }

    /// Runs `cloud-sim` against the gateway's admin API; returns its JSON output.
    pub async fn sim(&self, args: &[&str]) -> Value {
        let output = Command::new(binary("cloud-sim"))
            .arg("--admin-url")
            .arg(format!("http://{}", self.gateway_http))
            .arg("-o")
            .arg("json")
            .args(args)
            .output()
            .await
            .expect("run cloud-sim");
        assert!(
            output.status.success(),
            "cloud-sim {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    /// The simulator's id of the instance named `name`.
    pub async fn instance_id(&self, name: &str) -> String {
        let list = self.sim(&["instances", "list"]).await;
        let instances = list.get("instances").cloned().unwrap_or(list);
        instances
            .as_array()
            .and_then(|a| a.iter().find(|i| i["name"] == name && i["state"] != "terminated"))
            .and_then(|i| i["id"].as_str())
            .unwrap_or_else(|| panic!("no instance named {name} in {instances}"))
            .to_owned()
    }

    /// Registers a Node the way kubelet `--cloud-provider=external` does: the uninitialized
    /// taint, a Hostname and InternalIP address of its own, and a Ready condition.
    pub async fn register_node(&self, name: &str, ready: bool) -> Node {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
            "spec": { "taints": [{
                "key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"
            }]},
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        self.set_ready(name, ready).await
    }

    /// Sets the node's Ready condition (as kubelet or the node lifecycle of kube-controller-manager
    /// would), and the not-ready taint to match it.
    pub async fn set_ready(&self, name: &str, ready: bool) -> Node {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = json!({ "status": {
            "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }],
        }});
        let mut node = nodes
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
            .await
            .expect("node status");
        if node.status.as_ref().and_then(|s| s.addresses.as_ref()).is_none() {
            let addresses = json!({ "status": { "addresses": [
                { "type": "Hostname", "address": name },
            ]}});
            node = nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&addresses))
                .await
                .expect("addresses");
        }
        self.sync_not_ready_taint(name, ready).await.unwrap_or(node)
    }

    /// What kube-controller-manager's node lifecycle controller does with the
    /// `not-ready:NoSchedule` taint the API server puts on every new Node: keeps it while Ready is
    /// False, removes it once True (a real cluster shows no Ready node with it). Written guarded
    /// by the resourceVersion read and retried on conflict, so the controllers' taints stay.
    /// Returns the node when it changed it.
    async fn sync_not_ready_taint(&self, name: &str, ready: bool) -> Option<Node> {
        let nodes = self.nodes();
        let is_not_ready = |t: &Taint| t.key == TAINT_NOT_READY && t.effect == "NoSchedule";
        wait_for(
            &format!("the not-ready taint of {name} to follow its Ready condition"),
            Duration::from_secs(20),
            || {
                let nodes = nodes.clone();
                async move {
                    let node = nodes.get(name).await.ok()?;
                    let mut taints = node.spec.clone().unwrap_or_default().taints.unwrap_or_default();
                    if taints.iter().any(is_not_ready) != ready {
                        return Some(None);
                    }
                    if ready {
                        taints.retain(|t| !is_not_ready(t));
                    } else {
                        taints.push(Taint {
                            key: TAINT_NOT_READY.into(),
                            effect: "NoSchedule".into(),
                            ..Taint::default()
                        });
                    }
                    let patch = json!({
                        "metadata": { "resourceVersion": node.metadata.resource_version },
                        "spec": { "taints": taints },
                    });
                    let params = PatchParams::default();
                    let patched = nodes.patch(name, &params, &Patch::Merge(&patch)).await;
                    patched.ok().map(Some)
                }
            },
        )
        .await
    }

    /// Stops the gateway (SIGTERM, as a rollout does); its cloud state stays on disk.
    pub async fn stop_gateway(&mut self) {
        if let Some(gateway) = self.procs.iter_mut().find(|p| p.name == "cloud-gateway") {
            gateway.stop(Duration::from_secs(10)).await;
        }
    }

    /// Starts the gateway again at the same addresses on the same cloud state, and waits until
    /// it is ready.
    pub async fn start_gateway(&mut self) {
        let gateway = spawn(
            self.dir.path(),
            "cloud-gateway",
            &binary("cloud-gateway"),
            &self.gateway_args,
        );
        self.procs.retain(|p| p.name != "cloud-gateway");
        self.procs.push(gateway);
        let http = self.gateway_http;
        wait_for(
            "the gateway to be ready again",
            Duration::from_secs(30),
            || async move { matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(()) },
        )
        .await;
    }

    /// Replaces the gateway (stopped with SIGTERM, as a rollout does) by `program` serving the
    /// same gRPC and HTTP addresses with `args` (the address flags are added) and `env`: another
    /// vendor's gateway at the address every controller dials. Waits until it is ready.
    pub async fn swap_gateway(&mut self, program: &Path, args: &[String], env: &[(&str, &str)]) {
        self.swap_gateway_with(program, ["--grpc-listen", "--http-listen"], args, env)
            .await;
    }

    /// [`Cluster::swap_gateway`] for a gateway whose address flags are `listen` (gRPC, HTTP).
    pub async fn swap_gateway_with(
        &mut self,
        program: &Path,
        listen: [&str; 2],
        args: &[String],
        env: &[(&str, &str)],
    ) {
        self.stop_gateway().await;
        let mut all = vec![
            listen[0].to_owned(),
            self.gateway_grpc.to_string(),
            listen[1].to_owned(),
            self.gateway_http.to_string(),
        ];
        all.extend(args.iter().cloned());
        // Its own log file; named like the gateway it replaces, so stop_gateway finds it.
        let log = format!("swapped-gateway-{}", self.procs.len());
        let mut gateway = spawn_with_env(self.dir.path(), &log, program, &all, env);
        gateway.name = "cloud-gateway".into();
        gateway.http = Some(self.gateway_http);
        self.procs.retain(|p| p.name != "cloud-gateway");
        self.procs.push(gateway);
        let http = self.gateway_http;
        wait_for(
            "the swapped-in gateway to be ready",
            Duration::from_secs(60),
            || async move { matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(()) },
        )
        .await;
    }

    /// The simulator's load balancers (of every cluster), as its admin API lists them.
    pub async fn load_balancers(&self) -> Vec<Value> {
        lb_list(self.sim(&["load-balancers", "list"]).await)
    }

    /// [`Cluster::load_balancers`], `None` when the gateway does not answer.
    pub async fn try_load_balancers(&self) -> Option<Vec<Value>> {
        Some(lb_list(self.try_sim(&["load-balancers", "list"]).await?))
    }

    /// The Services API of `namespace`.
    pub fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Creates a `type: LoadBalancer` Service `namespace/name` with one TCP port 80, merged
    /// with `extra` (JSON of a Service: more spec fields, annotations).
    pub async fn create_lb_service(&self, namespace: &str, name: &str, extra: Value) -> Service {
        let mut service = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": { "name": name, "namespace": namespace },
            "spec": {
                "type": "LoadBalancer",
                "selector": { "app": name },
                "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }],
            },
        });
        json_patch::merge(&mut service, &extra);
        let service: Service = serde_json::from_value(service).expect("service");
        self.services(namespace)
            .create(&PostParams::default(), &service)
            .await
            .expect("create service")
    }

    /// The nodes API.
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Stops every process, the last started first (controllers before the servers they talk
    /// to), each with SIGTERM and up to 5 s to exit. Dropping the cluster instead SIGKILLs them.
    pub async fn stop(&mut self) {
        for proc in self.procs.iter_mut().rev() {
            proc.stop(Duration::from_secs(5)).await;
        }
    }
}

/// The environment of a gateway on moto: static test credentials, no instance metadata.
pub const MOTO_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

/// The flags of `cloud-gateway --provider <provider>` reading `conf` (its config file), with no
/// answer cache: every lookup reaches the cloud (or a proxy in front of it), so a test sees each
/// instance change and each fault at once. Start it with [`Cluster::swap_gateway`].
pub fn uncached_gateway_args(provider: &str, conf: &Path) -> Vec<String> {
    [
        "--insecure-plaintext",
        "--provider",
        provider,
        "--cloud-config",
        &conf.display().to_string(),
        "--instance-cache-ttl",
        "0s",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// [`uncached_gateway_args`] of the vSphere provider reading `conf` (a `vsphere.conf`).
pub fn vsphere_gateway_args(conf: &Path) -> Vec<String> {
    uncached_gateway_args("vsphere", conf)
}

/// The flags of `cloud-gateway --provider aws` on the AWS API at `endpoint` (moto, or a proxy in
/// front of it) in VPC `vpc`, failing fast (one attempt per call), plus `extra`; start it with
/// [`Cluster::swap_gateway`] and [`MOTO_ENV`].
pub fn aws_gateway_args(endpoint: &str, vpc: &str, extra: &[&str]) -> Vec<String> {
    [
        "--insecure-plaintext",
        "--provider",
        "aws",
        "--aws-region",
        "us-east-1",
        "--aws-endpoint-url",
        endpoint,
        "--aws-vpc-id",
        vpc,
        "--aws-max-attempts",
        "1",
    ]
    .iter()
    .chain(extra)
    .map(|s| (*s).to_owned())
    .collect()
}

impl Cluster {
    /// Waits until there are `count` Nodes, each with a providerID starting with `scheme`
    /// (`aws://`): initialized from that cloud.
    pub async fn nodes_initialized(&self, count: usize, scheme: &str) {
        let nodes = self.nodes();
        wait_for(
            &format!("{count} nodes initialized from {scheme}"),
            Duration::from_secs(60),
            || {
                let nodes = nodes.clone();
                async move {
                    let list = nodes.list(&Default::default()).await.ok()?;
                    (list.items.len() == count
                        && list.items.iter().all(|n| {
                            n.spec
                                .as_ref()
                                .and_then(|s| s.provider_id.as_deref())
                                .is_some_and(|p| p.starts_with(scheme))
                        }))
                    .then_some(())
                }
            },
        )
        .await;
    }
}

/// The load balancers of `cloud-sim load-balancers list` output.
fn lb_list(list: Value) -> Vec<Value> {
    let list = list.get("load_balancers").cloned().unwrap_or(list);
    list.as_array().cloned().unwrap_or_default()
}

/// The first ingress hostname of a Service's status (AWS load balancers answer DNS names).
pub fn ingress_hostname(service: &Service) -> Option<String> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .hostname
        .clone()
}

/// The ingress IPs of a Service's status.
pub fn ingress_ips(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ingress| ingress.iter().filter_map(|i| i.ip.clone()).collect())
        .unwrap_or_default()
}

/// Sum of a Prometheus counter's series whose labels contain every `(name, value)` of `with`.
pub fn counter(metrics: &str, name: &str, with: &[(&str, &str)]) -> u64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && with.iter().all(|(k, v)| labels.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum::<f64>() as u64
}

/// Where `moto_server` is (installed by `scripts/moto/setup.sh`, which `make test` runs):
/// `$MOTO_SERVER`, else the repository's `.venv-moto`.
pub fn moto_server() -> PathBuf {
    let path = std::env::var_os("MOTO_SERVER").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-moto/bin/moto_server"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "{} is missing: run scripts/moto/setup.sh (make test-deps)",
        path.display()
    );
    path
}

/// Starts `moto_server` on a free loopback port, logging to `dir/moto.log`; returns it and its
/// address once it answers.
pub async fn start_moto(dir: &Path) -> (Proc, SocketAddr) {
    let port = free_port();
    let moto = spawn(
        dir,
        "moto",
        &moto_server(),
        &["-H".into(), "127.0.0.1".into(), "-p".into(), port.to_string()],
    );
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for("moto to answer", Duration::from_secs(60), || async move {
        http_get(addr, "/moto-api/data.json").await.map(|_| ())
    })
    .await;
    (moto, addr)
}

/// One EC2 Query API call to moto (which checks no signature): `Action` and its parameters;
/// returns the XML answer.
pub async fn ec2_query(moto: SocketAddr, params: &[(&str, &str)]) -> String {
    let body: Vec<String> = params
        .iter()
        .chain(&[("Version", "2016-11-15")])
        .map(|(k, v)| format!("{k}={}", v.replace('/', "%2F").replace(' ', "%20")))
        .collect();
    let body = body.join("&");
    let mut stream = tokio::net::TcpStream::connect(moto)
        .await
        .expect("connect to moto");
    let request = format!(
        "POST / HTTP/1.0\r\nHost: {moto}\r\nContent-Type: application/x-www-form-urlencoded\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write to moto");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read from moto");
    answer
}

/// The text of the first `<tag>` element of an XML answer.
pub fn xml_value(xml: &str, tag: &str) -> Option<String> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].to_owned())
}

impl Cluster {
    /// The index in [`Cluster::procs`] of the first process labelled `name`.
    pub fn proc_index(&self, name: &str) -> usize {
        self.procs
            .iter()
            .position(|p| p.name == name)
            .unwrap_or_else(|| panic!("no process {name}"))
    }

    /// The process ids of the processes labelled `names`, for [`Cluster::assert_not_restarted`].
    pub fn pids(&self, names: &[&str]) -> Vec<u32> {
        names
            .iter()
            .map(|name| self.procs[self.proc_index(name)].id().unwrap())
            .collect()
    }

    /// Asserts that each process labelled `names[i]` still runs as `pids[i]`: neither restarted
    /// nor exited.
    pub fn assert_not_restarted(&mut self, names: &[&str], pids: &[u32]) {
        for (name, pid) in names.iter().zip(pids) {
            let index = self.proc_index(name);
            assert_eq!(self.procs[index].id(), Some(*pid), "{name} restarted");
            assert!(self.procs[index].exited().is_none(), "{name} exited");
        }
    }

    /// The `/metrics` of the process labelled `name` (a controller).
    pub async fn metrics_of(&self, name: &str) -> String {
        let index = self.proc_index(name);
        http_get(self.procs[index].http.expect("a side port"), "/metrics")
            .await
            .unwrap_or_else(|| panic!("{name}: /metrics"))
            .1
    }

    /// The Events of `namespace`; none when the list fails.
    pub async fn events(&self, namespace: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        events
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }
}

/// Waits up to 60 s until Service `name` has an ingress IP (`what` names the wait); returns it.
pub async fn wait_ingress_ip(services: &Api<Service>, name: &str, what: &str) -> Service {
    wait_service(services, name, what, |s| !ingress_ips(s).is_empty()).await
}

/// Waits up to 60 s until Service `name` is `ready` (`what` names the wait); returns it.
pub async fn wait_service(
    services: &Api<Service>,
    name: &str,
    what: &str,
    ready: impl Fn(&Service) -> bool,
) -> Service {
    let ready = &ready;
    wait_for(what, Duration::from_secs(60), || {
        let services = services.clone();
        async move { services.get(name).await.ok().filter(|s| ready(s)) }
    })
    .await
}
