//! Runs a runbook's commands as written: the fenced blocks of a Markdown file, in order.
//!
//! The convention (said at the top of each runbook): a block fenced ```` ```sh ```` or
//! ```` ```bash ```` is commands, run; one fenced ```` ```text ````, ```` ```console ````,
//! ```` ```json ```` or ```` ```yaml ```` is output or a file's content, not run. A block with no
//! language, or another one, fails the test: every block is either run or declared not to be.
//!
//! Each block runs with `bash -euo pipefail` in a working directory of its own (files written by
//! one block, such as `occm.yaml`, are there for the next), with the repository's `charts`
//! beside it, and fails the test when it exits non-zero or writes to stderr. Before it runs,
//! only the placeholders of the test's substitution table are replaced (`<OCCM's
//! --cluster-name>`, a local port, …); a `<placeholder>` the table does not know fails the
//! test. `helm` and `kubectl` are the shims of [`shims`]; the rest (`curl`, `jq`, `aws`,
//! `openstack`, `diff`, …) are the real tools, pointed at the test's cloud by environment
//! variables only.
//!
//! The [`Kubelet`] runs what a `helm install` or `upgrade` rendered: each Deployment as one
//! process of its binary, with its container's args and env (mounted paths in both relocated),
//! its Secret and ConfigMap volumes
//! written where it mounts them (the render's own, else the API server's, as OCCM's `cloud-config`
//! Secret), in-cluster addresses substituted by loopback ones (see [`Kubelet::start`]).

// Each test uses a part of it.
#![allow(dead_code)]

pub mod shims;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use e2e::{Cluster, Proc, binary, free_port, http_get, spawn_with_env, wait_for};
use k8s_openapi::{
    NamespaceResourceScope,
    api::core::v1::{ConfigMap, Secret},
};
use kube::{Api, Resource, api::PostParams};
use serde_json::Value;

/// What a fenced block is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Commands, run.
    Run,
    /// Output or a file's content, not run.
    Output,
}

/// A fenced block of a Markdown file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// 1-based line of its opening fence.
    pub line: usize,
    pub kind: Kind,
    /// Its lines, less the fence's indentation.
    pub text: String,
}

/// The fenced blocks of `markdown`, in order; an error names each block whose language is none
/// or unknown, and an unclosed fence.
pub fn blocks(markdown: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut open: Option<(usize, usize, Option<Kind>, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed.starts_with("```") => {
                let lang = trimmed.trim_start_matches('`').trim();
                let kind = match lang {
                    "sh" | "bash" => Some(Kind::Run),
                    "text" | "console" | "json" | "yaml" => Some(Kind::Output),
                    _ => {
                        errors.push(format!(
                            "line {}: a block fenced ```{lang} is neither run (sh, bash) nor output (text, console, json, yaml)",
                            i + 1
                        ));
                        None
                    }
                };
                open = Some((i + 1, indent, kind, String::new()));
            }
            None => {}
            Some((start, fence_indent, kind, text)) => {
                if trimmed == "```" {
                    if let Some(kind) = kind.take() {
                        out.push(Block {
                            line: *start,
                            kind,
                            text: std::mem::take(text),
                        });
                    }
                    open = None;
                } else {
                    let strip = indent.min(*fence_indent);
                    text.push_str(&line[strip..]);
                    text.push('\n');
                }
            }
        }
    }
    if let Some((start, ..)) = open {
        errors.push(format!("line {start}: a fence never closed"));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join("\n"))
    }
}

/// `text` with each placeholder of `table` replaced; an error names a `<placeholder>` left.
pub fn substitute(text: &str, table: &[(&str, String)]) -> Result<String, String> {
    let mut out = text.to_owned();
    for (from, to) in table {
        out = out.replace(from, to);
    }
    // A placeholder: `<` then a letter, up to `>` on the same line.
    let mut left = Vec::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find('<') {
        let after = &rest[i + 1..];
        if after.starts_with(|c: char| c.is_ascii_alphabetic())
            && let Some(end) = after.find(['>', '\n', '<'])
            && after[end..].starts_with('>')
        {
            left.push(format!("<{}>", &after[..end]));
        }
        rest = after;
    }
    if left.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "placeholders the test's substitution table does not know: {left:?}"
        ))
    }
}

/// Where the runbook's commands run and what they find.
pub struct Runner {
    /// The commands' working directory.
    pub work: PathBuf,
    /// The shims' state (releases, DaemonSets, the kubelet's pods).
    pub state: PathBuf,
    env: Vec<(String, String)>,
    shims: PathBuf,
}

/// What a block printed.
#[derive(Debug)]
pub struct Ran {
    pub line: usize,
    pub command: String,
    pub stdout: String,
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// Where helm, kubectl and the Python venv with kubernetes-validate are
/// (scripts/tools/setup.sh installs them into `.tools`, with the `aws` CLI in its venv):
/// `$RUNBOOK_TOOLS`, else the repository's `.tools`.
pub fn tools() -> PathBuf {
    if let Some(dir) = std::env::var_os("RUNBOOK_TOOLS") {
        return PathBuf::from(dir);
    }
    let dir = repo().join(".tools");
    assert!(
        dir.join("helm").is_file() && dir.join("kubectl").is_file(),
        "{}: no helm and kubectl: run scripts/tools/setup.sh",
        dir.display()
    );
    dir
}

impl Runner {
    /// A runner in `dir` against the API server of `kubeconfig`, with `env` added.
    pub fn new(dir: &Path, kubeconfig: &Path, env: &[(&str, String)]) -> Self {
        let work = dir.join("work");
        let state = dir.join("state");
        let shims = dir.join("shims");
        for d in [&work, &state, &shims] {
            std::fs::create_dir_all(d).expect("runner directories");
        }
        // A copy, not a link: helm warns about a chart reached through a symbolic link.
        let copied = std::process::Command::new("cp")
            .arg("-r")
            .arg(repo().join("charts"))
            .arg(&work)
            .status()
            .expect("cp");
        assert!(copied.success(), "cannot copy charts/");
        for (name, script) in [("helm", shims::HELM), ("kubectl", shims::KUBECTL)] {
            let path = shims.join(name);
            std::fs::write(&path, script).expect("shim");
            let mut perm = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&path, perm).expect("shim mode");
        }
        let tools = tools();
        // The shims first, then the tools' venv (the `aws` CLI), then the machine's.
        let path = format!(
            "{}:{}:{}",
            shims.display(),
            tools.join("venv/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut all: Vec<(String, String)> = vec![
            ("PATH".into(), path),
            ("KUBECONFIG".into(), kubeconfig.display().to_string()),
            ("RUNBOOK_STATE".into(), state.display().to_string()),
            ("REAL_HELM".into(), tools.join("helm").display().to_string()),
            ("REAL_KUBECTL".into(), tools.join("kubectl").display().to_string()),
            ("TOOLS_VENV".into(), tools.join("venv").display().to_string()),
            // helm's own state, away from the user's.
            (
                "HELM_CACHE_HOME".into(),
                dir.join("helm/cache").display().to_string(),
            ),
            (
                "HELM_CONFIG_HOME".into(),
                dir.join("helm/config").display().to_string(),
            ),
            (
                "HELM_DATA_HOME".into(),
                dir.join("helm/data").display().to_string(),
            ),
        ];
        all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        Self {
            work,
            state,
            env: all,
            shims,
        }
    }

    /// Runs `command` (a block's text, substituted); `Err` with what it printed when it exits
    /// non-zero or writes to stderr.
    pub async fn run(&self, command: &str) -> Result<String, String> {
        let output = tokio::process::Command::new("bash")
            .arg("-euo")
            .arg("pipefail")
            .arg("-c")
            .arg(command)
            .current_dir(&self.work)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(120), output)
            .await
            .map_err(|_| "still running after 120 s".to_owned())?
            .map_err(|e| format!("cannot run bash: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if output.status.success() && stderr.trim().is_empty() {
            Ok(stdout)
        } else {
            Err(format!(
                "{}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                output.status
            ))
        }
    }
}

/// Runs every `sh`/`bash` block of `markdown` in order with `table`'s substitutions, the
/// kubelet following each `helm` change; fails the test, naming the runbook's line, at the
/// first block that fails. Returns what each printed.
pub async fn run_runbook(
    name: &str,
    markdown: &str,
    table: &[(&str, String)],
    runner: &Runner,
    kubelet: &mut Kubelet,
) -> Vec<Ran> {
    let blocks = blocks(markdown).unwrap_or_else(|e| panic!("{name}:\n{e}"));
    let mut ran = Vec::new();
    for block in blocks.into_iter().filter(|b| b.kind == Kind::Run) {
        let command = substitute(&block.text, table).unwrap_or_else(|e| panic!("{name}:{}: {e}", block.line));
        let stdout = runner.run(&command).await.unwrap_or_else(|e| {
            panic!(
                "{name}:{}: the runbook's command failed:\n{command}\n{e}",
                block.line
            )
        });
        kubelet.sync().await;
        ran.push(Ran {
            line: block.line,
            command,
            stdout,
        });
    }
    ran
}

/// Nodes `names` initialized as the old controller left them, by our gateway with `gateway_args`
/// (and `env`) and the cloud node controller (each providerID starting with `scheme`); then both
/// stop: only the API server runs, as in a cluster about to migrate.
pub async fn initialize_nodes(
    cluster: &mut Cluster,
    gateway_args: &[String],
    env: &[(&str, &str)],
    names: &[&str],
    scheme: &str,
) {
    cluster
        .swap_gateway(&binary("cloud-gateway"), gateway_args, env)
        .await;
    let node_controller = cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    for name in names {
        cluster.register_node(name, true).await;
    }
    cluster.nodes_initialized(names.len(), scheme).await;
    cluster.procs[node_controller].stop(Duration::from_secs(10)).await;
    // Only the API server is the cluster's; the gateway comes from the chart.
    cluster.stop_gateway().await;
}

/// Creates `object` (a Secret or ConfigMap as JSON, its namespace in its metadata) as the old
/// controller's manifests made it; `what` names it when the create fails.
pub async fn create_as_left<K>(cluster: &Cluster, object: Value, what: &str)
where
    K: Resource<Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no namespace"))
        .to_owned();
    let object: K = serde_json::from_value(object).unwrap_or_else(|e| panic!("{what}: {e}"));
    Api::<K>::namespaced(cluster.client.clone(), &namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// A runbook to run as written on a cluster the old controller left, and what differs between
/// the providers' runbooks.
pub struct Runbook<'a> {
    /// Its path in the repository (`docs/migrating-from-….md`).
    pub path: &'a str,
    /// The old controller's DaemonSet as the `kubectl` shim finds it: file name, manifest.
    pub daemonset: (&'a str, &'a str),
    /// The placeholders the runbook's commands name, and what replaces them.
    pub table: &'a [(&'a str, String)],
    /// Added to the commands' environment (the cloud CLI's credentials and endpoints).
    pub cli_env: &'a [(&'a str, String)],
    /// Added to the environment of each process the kubelet starts (the cloud's credentials).
    pub kubelet_env: &'a [(&'a str, &'a str)],
}

impl Runbook<'_> {
    /// Runs every block on `cluster` within 240 s; fails the test at the first that fails.
    /// Returns the runner (its directories), the kubelet (still running what the releases left:
    /// stop it) and what each block printed.
    pub async fn run(&self, cluster: &Cluster) -> (Runner, Kubelet, Vec<Ran>) {
        let dir = cluster.dir.path();
        let runner = Runner::new(dir, &cluster.kubeconfig, self.cli_env);
        let daemonsets = runner.state.join("daemonsets");
        std::fs::create_dir_all(&daemonsets).expect("the DaemonSets' directory");
        let (file, manifest) = self.daemonset;
        std::fs::write(daemonsets.join(file), manifest).expect("the old controller's DaemonSet");
        let mut kubelet = Kubelet::new(
            dir,
            &runner.state,
            &cluster.kubeconfig,
            cluster.client.clone(),
            self.kubelet_env,
        );
        let markdown = std::fs::read_to_string(repo().join(self.path)).expect("the runbook");
        let ran = tokio::time::timeout(
            Duration::from_secs(240),
            run_runbook(self.path, &markdown, self.table, &runner, &mut kubelet),
        )
        .await;
        let ran = ran.unwrap_or_else(|_| panic!("the runbook took over 240 s\n{}", kubelet.logs()));
        (runner, kubelet, ran)
    }
}

/// A free port for the operator's side of `port-forward`, outside Linux's ephemeral range
/// (32768–60999), where [`free_port`] finds the processes' ports: the two never collide.
pub fn local_port() -> u16 {
    let start = 20000 + (std::process::id() % 5000) as u16;
    (start..30000)
        .chain(20000..start)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port in 20000-29999")
}

/// The output of the block whose command contains `needle`.
pub fn output_of<'a>(ran: &'a [Ran], needle: &str) -> &'a str {
    ran.iter()
        .find(|r| r.command.contains(needle))
        .map(|r| r.stdout.as_str())
        .unwrap_or_else(|| panic!("no block ran a command with {needle:?}"))
}

/// Runs the Deployments of each rendered release as processes.
pub struct Kubelet {
    dir: PathBuf,
    state: PathBuf,
    kubeconfig: PathBuf,
    client: kube::Client,
    /// Added to every process's environment (the cloud's credentials, as IRSA would give them).
    env: Vec<(String, String)>,
    /// release → (its render, its processes).
    running: BTreeMap<String, (String, Vec<Proc>)>,
}

impl Kubelet {
    pub fn new(
        dir: &Path,
        state: &Path,
        kubeconfig: &Path,
        client: kube::Client,
        env: &[(&str, &str)],
    ) -> Self {
        Self {
            dir: dir.join("kubelet"),
            state: state.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            client,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            running: BTreeMap::new(),
        }
    }

    /// The render of each installed release, as helm's shim left it.
    fn renders(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(self.state.join("releases")) else {
            return out;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                out.insert(name, std::fs::read_to_string(&path).expect("render"));
            }
        }
        out
    }

    /// Follows the releases: a new or changed render's processes (re)started, a removed one's
    /// stopped.
    pub async fn sync(&mut self) {
        let renders = self.renders();
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|r| renders.get(*r) != self.running.get(*r).map(|(s, _)| s))
            .cloned()
            .collect();
        for release in gone {
            if let Some((_, mut procs)) = self.running.remove(&release) {
                for p in procs.iter_mut().rev() {
                    p.stop(Duration::from_secs(10)).await;
                }
            }
            let _ = std::fs::remove_dir_all(self.state.join("pods"));
        }
        for (release, render) in renders {
            if !self.running.contains_key(&release) {
                let docs: Vec<Value> = serde_json::from_str(&render).expect("render JSON");
                let procs = self.start(&docs).await;
                self.running.insert(release, (render, procs));
            }
        }
    }

    /// The processes of `release`'s Deployment `name`.
    pub fn proc(&self, release: &str, name: &str) -> &Proc {
        self.running[release]
            .1
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no Deployment {name} runs"))
    }

    /// Starts the Deployments of a render, the gateway first, one replica each; waits until
    /// the gateway is ready. In their args and in the files they mount: an `/etc/…` path they
    /// mount is the file written for it; `--*-listen=0.0.0.0:P` is a free loopback port; the gateway's Service address
    /// (`--gateway-address`, `--peers`) is the gateway's loopback port (the TLS server name
    /// stays: the certificate names the Service); a controller gets `--kubeconfig` (in-cluster
    /// credentials stand-in).
    async fn start(&mut self, docs: &[Value]) -> Vec<Proc> {
        let by = |kind: &str| -> BTreeMap<String, Value> {
            docs.iter()
                .filter(|d| d["kind"] == kind)
                .map(|d| {
                    (
                        d["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                        d.clone(),
                    )
                })
                .collect()
        };
        let (secrets, config_maps) = (by("Secret"), by("ConfigMap"));
        let mut deployments: Vec<Value> = by("Deployment").into_values().collect();
        deployments.sort_by_key(|d| {
            !d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .ends_with("cloud-gateway")
        });
        let (gw_grpc, gw_http) = (free_port(), free_port());
        let mut procs = Vec::new();
        for d in deployments {
            let name = d["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let namespace = d["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let pod = &d["spec"]["template"]["spec"];
            let container = &pod["containers"][0];
            let root = self.dir.join(&name);
            let _ = std::fs::remove_dir_all(&root);
            // Volumes, written where the container mounts them.
            let mut mounts: Vec<(String, PathBuf)> = Vec::new();
            let mut files_at: Vec<(PathBuf, Vec<u8>)> = Vec::new();
            for m in container["volumeMounts"].as_array().into_iter().flatten() {
                let path = m["mountPath"].as_str().unwrap_or_default();
                let at = root.join(path.trim_start_matches('/'));
                std::fs::create_dir_all(&at).expect("mount directory");
                let volume = pod["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|v| v["name"] == m["name"])
                    .unwrap_or_else(|| panic!("{name}: no volume {}", m["name"]));
                let files = self
                    .volume_files(volume, &namespace, &secrets, &config_maps)
                    .await;
                files_at.extend(files.into_iter().map(|(file, content)| (at.join(file), content)));
                mounts.push((path.to_owned(), at));
            }
            mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
            // A path in a mounted file that names a mounted file (cloud.conf's `clouds-file`)
            // is where the container would see it: the file written for it here.
            for (file, content) in files_at {
                let content = match String::from_utf8(content) {
                    Ok(mut text) => {
                        for (path, at) in &mounts {
                            text = text.replace(&format!("{path}/"), &format!("{}/", at.display()));
                        }
                        text.into_bytes()
                    }
                    Err(binary) => binary.into_bytes(),
                };
                std::fs::write(file, content).expect("volume file");
            }
            let is_gateway = name.ends_with("cloud-gateway");
            let mut ports = BTreeMap::new();
            let mut args = Vec::new();
            for arg in container["args"].as_array().into_iter().flatten() {
                let mut arg = arg.as_str().unwrap_or_default().to_owned();
                for (path, at) in &mounts {
                    arg = arg.replace(path.as_str(), &at.display().to_string());
                }
                if let Some((flag, addr)) = arg.split_once('=')
                    && (flag == "--http-listen" || flag == "--grpc-listen")
                {
                    let local = match (flag, is_gateway) {
                        ("--grpc-listen", _) => gw_grpc,
                        (_, true) => gw_http,
                        _ => free_port(),
                    };
                    let port = addr.rsplit(':').next().unwrap_or_default().to_owned();
                    ports.insert(port, local);
                    arg = format!("{flag}=127.0.0.1:{local}");
                } else if let Some(addr) = arg.strip_prefix("--gateway-address=") {
                    let scheme = addr.split("://").next().unwrap_or("https");
                    arg = format!("--gateway-address={scheme}://127.0.0.1:{gw_grpc}");
                } else if arg.starts_with("--peers=") {
                    arg = format!("--peers=127.0.0.1:{gw_http}");
                }
                args.push(arg);
            }
            if !is_gateway {
                args.extend(["--kubeconfig".to_owned(), self.kubeconfig.display().to_string()]);
            }
            // Named ports too, for `port-forward deploy/x L:http`.
            for p in container["ports"].as_array().into_iter().flatten() {
                let number = p["containerPort"].to_string();
                if let (Some(n), Some(local)) = (p["name"].as_str(), ports.get(&number).copied()) {
                    ports.insert(n.to_owned(), local);
                }
            }
            let mut env: Vec<(String, String)> = container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
                .map(|(name, mut value)| {
                    // A value naming a mounted path (vSphere's VSPHERE_SECRETS_DIRECTORY): where
                    // the container would see it, as for args.
                    for (path, at) in &mounts {
                        value = value.replace(path.as_str(), &at.display().to_string());
                    }
                    (name, value)
                })
                .collect();
            env.extend(self.env.iter().cloned());
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let image = container["image"].as_str().unwrap_or_default();
            let binary = image
                .rsplit('/')
                .next()
                .and_then(|b| b.split(':').next())
                .unwrap_or_default();
            std::fs::create_dir_all(&self.dir).expect("kubelet directory");
            let mut proc = spawn_with_env(&self.dir, &name, &e2e::binary(binary), &args, &env);
            proc.http = ports.get("http").map(|p| ([127, 0, 0, 1], *p).into());
            // What kubectl's shim reads for `logs` and `port-forward`.
            let pods = self.state.join("pods");
            std::fs::create_dir_all(&pods).expect("pods");
            let mut record = format!("log={}\n", self.dir.join(format!("{name}.log")).display());
            for (port, local) in &ports {
                record.push_str(&format!("port.{port}={local}\n"));
            }
            std::fs::write(pods.join(&name), record).expect("pod record");
            // Ready before the next command, as `kubectl rollout status` would have it.
            if let Some(http) = proc.http {
                wait_for(
                    &format!("{name} from the render to be ready"),
                    Duration::from_secs(60),
                    || async move { matches!(http_get(http, "/readyz").await, Some((200, _))).then_some(()) },
                )
                .await;
            }
            procs.push(proc);
        }
        procs
    }

    /// The files of a Secret or ConfigMap volume (the render's, else the API server's), by
    /// their paths; none for other volumes (a hostPath: the directory stays empty).
    async fn volume_files(
        &self,
        volume: &Value,
        namespace: &str,
        secrets: &BTreeMap<String, Value>,
        config_maps: &BTreeMap<String, Value>,
    ) -> Vec<(String, Vec<u8>)> {
        let (data, items): (BTreeMap<String, Vec<u8>>, &Value) = if let Some(s) = volume.get("secret") {
            let name = s["secretName"].as_str().unwrap_or_default();
            let data = match secrets.get(name) {
                Some(d) => serde_json::from_value::<Secret>(d.clone())
                    .expect("a rendered Secret")
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect(),
                None => {
                    let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                    let secret = api
                        .get(name)
                        .await
                        .unwrap_or_else(|e| panic!("the Secret {namespace}/{name} a pod mounts: {e}"));
                    secret
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect()
                }
            };
            (data, &s["items"])
        } else if let Some(c) = volume.get("configMap") {
            let name = c["name"].as_str().unwrap_or_default();
            let data = match config_maps.get(name) {
                Some(d) => d["data"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().as_bytes().to_vec()))
                    .collect(),
                None => {
                    let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                    let cm = api
                        .get(name)
                        .await
                        .unwrap_or_else(|e| panic!("the ConfigMap {namespace}/{name} a pod mounts: {e}"));
                    cm.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect()
                }
            };
            (data, &c["items"])
        } else {
            return Vec::new();
        };
        match items.as_array() {
            Some(items) => items
                .iter()
                .map(|i| {
                    let key = i["key"].as_str().unwrap_or_default();
                    let content = data
                        .get(key)
                        .unwrap_or_else(|| panic!("no key {key} in {volume}"))
                        .clone();
                    (i["path"].as_str().unwrap_or(key).to_owned(), content)
                })
                .collect(),
            None => data.into_iter().collect(),
        }
    }

    /// Stops every process.
    pub async fn stop(&mut self) {
        for (_, (_, procs)) in std::mem::take(&mut self.running) {
            for mut p in procs.into_iter().rev() {
                p.stop(Duration::from_secs(5)).await;
            }
        }
    }

    /// The last lines of each process's log (for a failing test).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (_, procs) in self.running.values() {
            for p in procs {
                let log = p.log();
                let lines: Vec<&str> = log.lines().collect();
                out.push_str(&format!(
                    "----- {} -----\n{}\n",
                    p.name,
                    lines[lines.len().saturating_sub(30)..].join("\n")
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_run_or_output_by_their_language_and_keep_their_order() {
        let md =
            "intro\n\n```sh\na \\\n  b\n```\n\n1. step:\n\n   ```bash\n   c\n   ```\n\n```text\nout\n```\n";
        assert_eq!(
            blocks(md).unwrap(),
            [
                Block {
                    line: 3,
                    kind: Kind::Run,
                    text: "a \\\n  b\n".into()
                },
                Block {
                    line: 10,
                    kind: Kind::Run,
                    text: "c\n".into()
                },
                Block {
                    line: 14,
                    kind: Kind::Output,
                    text: "out\n".into()
                },
            ]
        );
    }

    #[test]
    fn a_block_neither_run_nor_output_fails_by_its_line() {
        for (md, want) in [
            (
                "x\n```\nkubectl get svc\n```\n",
                "line 2: a block fenced ``` is neither",
            ),
            (
                "```shell\nls\n```\n",
                "line 1: a block fenced ```shell is neither",
            ),
            ("```sh\nls\n", "line 1: a fence never closed"),
        ] {
            let err = blocks(md).unwrap_err();
            assert!(err.contains(want), "{md:?}: {err}");
        }
    }

    #[test]
    fn placeholders_are_substituted_and_an_unknown_one_is_refused() {
        let table = [("<OCCM's --cluster-name>", "prod".to_owned())];
        assert_eq!(
            substitute("--set clusterName=<OCCM's --cluster-name> 2>&1 <(ls)", &table).unwrap(),
            "--set clusterName=prod 2>&1 <(ls)"
        );
        let err = substitute("port-forward x 18080:<its httpPort> && a < b > c", &table).unwrap_err();
        assert!(err.contains("\"<its httpPort>\""), "{err}");
        assert!(!err.contains("< b >"), "{err}");
    }
}
