//! The fixture file of `cloudgateway-conformance`: the cloud a gateway already serves, described
//! in YAML. The format is documented in `docs/providers.md` ("Checking a gateway of your own").

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use serde::Deserialize;

use crate::{CloudFixture, ExpectedCapabilities, Skip, Target, TestInstance};

/// The YAML document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureFile {
    /// Expected `Capabilities.provider_name`.
    pub provider_name: String,
    /// Capabilities the gateway must claim; all three when unset.
    #[serde(default)]
    pub capabilities: ExpectedCapabilities,
    /// Cluster name of load balancer and route calls; `conformance-<random>` when unset.
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// The instances the cloud holds.
    #[serde(default)]
    pub instances: Instances,
    /// What makes the gateway refuse a load balancer.
    #[serde(default)]
    pub load_balancers: LoadBalancers,
    /// The route the routes case creates and deletes.
    #[serde(default)]
    pub routes: Routes,
    /// Commands that change the cloud for the cases the contract alone cannot arrange.
    #[serde(default)]
    pub hooks: Hooks,
}

/// Instances of the cloud, by state.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instances {
    /// Running instances (two for the update case), fully described.
    #[serde(default)]
    pub running: Vec<TestInstance>,
    /// Stopped instances (`node_name` and `provider_id` suffice).
    #[serde(default)]
    pub stopped: Vec<TestInstance>,
    /// Terminated instances (`node_name` and `provider_id` suffice).
    #[serde(default)]
    pub terminated: Vec<TestInstance>,
    /// A well-formed provider ID of an instance that never existed.
    #[serde(default)]
    pub unknown_provider_id: Option<String>,
}

/// Services the gateway must not provision.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancers {
    /// Annotations that make the gateway leave a service to another controller.
    #[serde(default)]
    pub implemented_elsewhere_annotations: Option<BTreeMap<String, String>>,
    /// A service the gateway must refuse with INVALID_ARGUMENT.
    #[serde(default)]
    pub invalid_service: Option<InvalidService>,
}

/// The parts of a service that make it invalid.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvalidService {
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// `spec.loadBalancerIP`.
    #[serde(default)]
    pub load_balancer_ip: String,
}

/// The route of the routes case.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Routes {
    /// Destination CIDR; nothing may route it yet.
    #[serde(default)]
    pub destination_cidr: Option<String>,
    /// Node name of the target; the first running instance's when unset.
    #[serde(default)]
    pub target_node: Option<String>,
}

/// Hooks: shell commands run with `sh -c` in the fixture file's directory.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// Makes the cloud answer "throttled" to every call.
    #[serde(default)]
    pub throttle: Option<Hook>,
    /// Makes new load balancers take `$CONFORMANCE_SECONDS` seconds to provision.
    #[serde(default)]
    pub slow_provisioning: Option<Hook>,
}

/// A change to the cloud and its undoing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    /// Turns it on, before the case.
    pub on: String,
    /// Turns it off, after the case (pass or fail).
    #[serde(default)]
    pub off: Option<String>,
}

/// How long a hook may run.
const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

impl FixtureFile {
    /// Parses and checks a fixture document.
    pub fn parse(yaml: &str) -> Result<Self, String> {
        let file: Self = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        file.validate()?;
        Ok(file)
    }

    fn validate(&self) -> Result<(), String> {
        if self.provider_name.is_empty() {
            return Err("provider_name is empty".into());
        }
        let states = [
            ("running", &self.instances.running),
            ("stopped", &self.instances.stopped),
            ("terminated", &self.instances.terminated),
        ];
        for (state, list) in states {
            for (n, i) in list.iter().enumerate() {
                let mut required = vec![("node_name", &i.node_name), ("provider_id", &i.provider_id)];
                if state == "running" {
                    required.extend([
                        ("instance_type", &i.instance_type),
                        ("zone", &i.zone),
                        ("region", &i.region),
                        ("internal_ip", &i.internal_ip),
                    ]);
                }
                if let Some((field, _)) = required.iter().find(|(_, v)| v.is_empty()) {
                    return Err(format!("instances.{state}[{n}].{field} is missing or empty"));
                }
            }
        }
        if let Some(target) = &self.routes.target_node
            && !self.instances.running.iter().any(|i| &i.node_name == target)
        {
            return Err(format!(
                "routes.target_node {target:?} is none of instances.running"
            ));
        }
        Ok(())
    }
}

/// A [`CloudFixture`] from a fixture file, for a gateway at `target`.
pub struct FileFixture {
    file: FixtureFile,
    target: Target,
    dir: PathBuf,
    cluster: String,
    next_running: AtomicUsize,
    undo: Mutex<Vec<(&'static str, String)>>,
}

impl FileFixture {
    /// Reads the fixture at `path` for the gateway at `target`.
    pub fn load(path: &Path, target: Target) -> Result<Self, String> {
        let yaml = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let file = FixtureFile::parse(&yaml).map_err(|e| format!("fixture {}: {e}", path.display()))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Ok(Self::new(file, target, dir))
    }

    /// A fixture from a parsed file; hooks run in `dir`.
    pub fn new(file: FixtureFile, target: Target, dir: PathBuf) -> Self {
        let cluster = file
            .cluster_name
            .clone()
            .unwrap_or_else(|| format!("conformance-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
        Self {
            file,
            target,
            dir,
            cluster,
            next_running: AtomicUsize::new(0),
            undo: Mutex::new(Vec::new()),
        }
    }

    /// The parsed file.
    pub fn file(&self) -> &FixtureFile {
        &self.file
    }

    async fn run_hook(&self, name: &str, command: &str, seconds: Option<u64>) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&self.dir)
            .env("CONFORMANCE_ADDRESS", self.target.endpoint())
            .env("CONFORMANCE_CLUSTER", &self.cluster)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(seconds) = seconds {
            cmd.env("CONFORMANCE_SECONDS", seconds.to_string());
        }
        let output = tokio::time::timeout(HOOK_TIMEOUT, cmd.output())
            .await
            .map_err(|_| format!("hook {name} ({command}) ran longer than {HOOK_TIMEOUT:?}"))?
            .map_err(|e| format!("hook {name} ({command}): {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "hook {name} ({command}) failed with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    async fn switch_on(
        &self,
        name: &'static str,
        hook: Option<&Hook>,
        seconds: Option<u64>,
    ) -> Result<(), Skip> {
        let Some(hook) = hook else {
            return Err(Skip::because(format!("the fixture has no hooks.{name}")));
        };
        if let Some(off) = &hook.off {
            self.undo.lock().expect("undo lock").push((name, off.clone()));
        }
        if let Err(e) = self.run_hook(name, &hook.on, seconds).await {
            panic!("{e}");
        }
        Ok(())
    }

    fn instance(list: &[TestInstance], state: &str) -> Result<TestInstance, Skip> {
        list.first()
            .cloned()
            .ok_or_else(|| Skip::because(format!("the fixture lists no {state} instance")))
    }
}

#[async_trait]
impl CloudFixture for FileFixture {
    fn target(&self) -> &Target {
        &self.target
    }

    fn provider_name(&self) -> &str {
        &self.file.provider_name
    }

    fn capabilities(&self) -> ExpectedCapabilities {
        self.file.capabilities
    }

    fn cluster_name(&self) -> String {
        self.cluster.clone()
    }

    async fn running_instance(&self) -> Result<TestInstance, Skip> {
        let running = &self.file.instances.running;
        if running.is_empty() {
            return Err(Skip::because("the fixture lists no running instance"));
        }
        let n = self.next_running.fetch_add(1, Ordering::Relaxed);
        Ok(running[n % running.len()].clone())
    }

    async fn stopped_instance(&self) -> Result<TestInstance, Skip> {
        Self::instance(&self.file.instances.stopped, "stopped")
    }

    async fn terminated_instance(&self) -> Result<TestInstance, Skip> {
        Self::instance(&self.file.instances.terminated, "terminated")
    }

    fn unknown_provider_id(&self) -> Result<String, Skip> {
        self.file
            .instances
            .unknown_provider_id
            .clone()
            .ok_or_else(|| Skip::because("the fixture has no instances.unknown_provider_id"))
    }

    fn implemented_elsewhere_annotations(&self) -> Result<BTreeMap<String, String>, Skip> {
        self.file
            .load_balancers
            .implemented_elsewhere_annotations
            .clone()
            .ok_or_else(|| {
                Skip::because("the fixture has no load_balancers.implemented_elsewhere_annotations")
            })
    }

    fn invalid_service(&self) -> Result<(BTreeMap<String, String>, String), Skip> {
        self.file
            .load_balancers
            .invalid_service
            .clone()
            .map(|s| (s.annotations, s.load_balancer_ip))
            .ok_or_else(|| Skip::because("the fixture has no load_balancers.invalid_service"))
    }

    async fn slow_provisioning(&self, seconds: u64) -> Result<(), Skip> {
        self.switch_on(
            "slow_provisioning",
            self.file.hooks.slow_provisioning.as_ref(),
            Some(seconds),
        )
        .await
    }

    async fn throttle_everything(&self) -> Result<(), Skip> {
        self.switch_on("throttle", self.file.hooks.throttle.as_ref(), None)
            .await
    }

    async fn route_target(&self) -> Result<(String, TestInstance), Skip> {
        let cidr = self
            .file
            .routes
            .destination_cidr
            .clone()
            .ok_or_else(|| Skip::because("the fixture has no routes.destination_cidr"))?;
        let running = &self.file.instances.running;
        let target = match &self.file.routes.target_node {
            Some(name) => running.iter().find(|i| &i.node_name == name).cloned(),
            None => running.first().cloned(),
        }
        .ok_or_else(|| Skip::because("the fixture lists no running instance to route to"))?;
        Ok((cidr, target))
    }

    async fn after_case(&self) -> Result<(), String> {
        let undo: Vec<_> = std::mem::take(&mut *self.undo.lock().expect("undo lock"));
        for (name, command) in undo {
            self.run_hook(name, &command, None).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "provider_name: example\n";

    #[test]
    fn a_minimal_fixture_expects_every_capability_and_skips_what_it_lacks() {
        let file = FixtureFile::parse(MINIMAL).expect("parse");
        assert_eq!(file.capabilities, ExpectedCapabilities::default());
        let f = FileFixture::new(file, Target::plaintext("127.0.0.1:1"), ".".into());
        assert!(f.cluster_name().starts_with("conformance-"));
        assert!(f.unknown_provider_id().is_err());
        assert!(f.invalid_service().is_err());
    }

    #[test]
    fn mistakes_are_named() {
        let unknown = FixtureFile::parse("provider_name: x\nproviders: y\n").unwrap_err();
        assert!(unknown.contains("unknown field `providers`"), "{unknown}");
        let incomplete =
            "provider_name: x\ninstances:\n  running:\n    - {node_name: a, provider_id: x://a}\n";
        let e = FixtureFile::parse(incomplete).unwrap_err();
        assert_eq!(e, "instances.running[0].instance_type is missing or empty");
        let stopped = "provider_name: x\ninstances:\n  stopped:\n    - {node_name: a, provider_id: x://a}\n";
        FixtureFile::parse(stopped).expect("a stopped instance needs only its name and ID");
        let target = "provider_name: x\nroutes: {destination_cidr: 10.0.0.0/24, target_node: nope}\n";
        let e = FixtureFile::parse(target).unwrap_err();
        assert!(e.contains("routes.target_node \"nope\""), "{e}");
    }

    #[tokio::test]
    async fn running_instances_take_turns() {
        let yaml = "provider_name: x\ninstances:\n  running:\n    - {node_name: a, provider_id: x://a, instance_type: t, zone: z, region: r, internal_ip: 10.0.0.1}\n    - {node_name: b, provider_id: x://b, instance_type: t, zone: z, region: r, internal_ip: 10.0.0.2}\n";
        let f = FileFixture::new(
            FixtureFile::parse(yaml).expect("parse"),
            Target::plaintext("127.0.0.1:1"),
            ".".into(),
        );
        let names: Vec<String> = futures::future::join_all((0..3).map(|_| f.running_instance()))
            .await
            .into_iter()
            .map(|i| i.expect("running").node_name)
            .collect();
        assert_eq!(names, ["a", "b", "a"]);
    }

    #[tokio::test]
    async fn hooks_run_in_the_fixture_directory_and_are_undone_after_the_case() {
        let dir = tempfile::tempdir().expect("temp dir");
        let yaml = "provider_name: x\nhooks:\n  throttle: {on: 'echo on > state', off: 'echo off > state'}\n  slow_provisioning: {on: 'echo $CONFORMANCE_SECONDS > seconds'}\n";
        let f = FileFixture::new(
            FixtureFile::parse(yaml).expect("parse"),
            Target::plaintext("127.0.0.1:1"),
            dir.path().into(),
        );
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("hook output");
        f.throttle_everything().await.expect("hook");
        assert_eq!(read("state"), "on\n");
        f.slow_provisioning(2).await.expect("hook");
        assert_eq!(read("seconds"), "2\n");
        f.after_case().await.expect("undo");
        assert_eq!(read("state"), "off\n");
    }
}
