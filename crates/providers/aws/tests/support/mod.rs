//! Test support: one `moto_server` per test process, a fault-injecting proxy per test, and a
//! provider on them; the cloud-side setup is `aws_fixture`'s.
//!
//! moto's state is global to its process, so tests never reset it: each test works in its own
//! VPC under its own cluster name, and they run in parallel against one server.
#![allow(dead_code)]

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use aws_sdk_ec2::config::Credentials;
use provider_aws::{AwsConfig, AwsProvider};

#[allow(unused_imports)] // each test binary uses its own part
pub use aws_fixture::{Cloud, FaultProxy, INSTANCE_TYPE, Instance, Network, REGION};
/// How long moto may take to start.
const MOTO_START_DEADLINE: Duration = Duration::from_secs(60);

/// A running moto and the watchdog that kills it when this process ends.
struct Moto {
    endpoint: String,
    _server: Child,
    _watchdog: Child,
    _watchdog_stdin: ChildStdin,
}

static MOTO: OnceLock<Result<Mutex<Moto>, String>> = OnceLock::new();

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Where `moto_server` is: `$MOTO_SERVER`, else `$MOTO_VENV/bin/moto_server`, else the venv that
/// `scripts/moto/setup.sh` creates.
fn moto_binary() -> Result<PathBuf, String> {
    let path = match (std::env::var_os("MOTO_SERVER"), std::env::var_os("MOTO_VENV")) {
        (Some(server), _) => PathBuf::from(server),
        (None, Some(venv)) => PathBuf::from(venv).join("bin/moto_server"),
        (None, None) => workspace_root().join(".venv-moto/bin/moto_server"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "moto_server not found at {}: run scripts/moto/setup.sh (make test-deps)",
            path.display()
        ))
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Whether moto answers HTTP on `port`.
fn answers(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

fn start_moto() -> Result<Mutex<Moto>, String> {
    let binary = moto_binary()?;
    let mut last_error = String::new();
    for _ in 0..3 {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("moto-{port}.log"));
        let log_file = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let mut server = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("start {}: {e}", binary.display()))?;
        // The watchdog reads its stdin, which only this process holds: when the test process
        // ends (even killed), the pipe closes, `read` returns, and moto is killed.
        let mut watchdog = Command::new("sh")
            .args(["-c", "read -r _ ; kill \"$1\" 2>/dev/null", "moto-watchdog"])
            .arg(server.id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start the moto watchdog: {e}"))?;
        let watchdog_stdin = watchdog.stdin.take().ok_or("watchdog stdin")?;
        let deadline = Instant::now() + MOTO_START_DEADLINE;
        loop {
            if answers(port) {
                return Ok(Mutex::new(Moto {
                    endpoint: format!("http://127.0.0.1:{port}"),
                    _server: server,
                    _watchdog: watchdog,
                    _watchdog_stdin: watchdog_stdin,
                }));
            }
            if let Ok(Some(status)) = server.try_wait() {
                last_error = format!(
                    "moto_server exited with {status} (log: {}): {}",
                    log.display(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                break;
            }
            if Instant::now() > deadline {
                let _ = server.kill();
                last_error = format!(
                    "moto_server did not answer within {MOTO_START_DEADLINE:?} (log: {})",
                    log.display()
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(watchdog_stdin);
        let _ = watchdog.wait();
        let _ = server.wait();
    }
    Err(last_error)
}

/// The endpoint of this process's moto, started on first use. Panics with the setup hint when
/// moto is not installed.
pub fn moto_endpoint() -> String {
    match MOTO.get_or_init(start_moto) {
        Ok(moto) => moto.lock().expect("moto lock").endpoint.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// A cluster name no other test of this process uses.
pub fn unique_cluster(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An SDK configuration for moto at `endpoint` with static credentials, built like the
/// provider's own (so tests go through the same HTTP client, retry and timeout settings).
pub async fn sdk_config(config: &AwsConfig) -> aws_config::SdkConfig {
    config
        .sdk_loader()
        .expect("valid settings")
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
        .load()
        .await
}

/// A provider on moto through a fault proxy, configured for `network`.
pub struct Harness {
    /// The provider under test.
    pub provider: Arc<AwsProvider>,
    /// The proxy in front of moto.
    pub proxy: FaultProxy,
    /// Direct clients.
    pub cloud: Cloud,
    /// The test's network.
    pub network: Network,
    /// The provider's settings.
    pub config: AwsConfig,
}

impl Harness {
    /// A fresh cluster, network and provider; `tune` adjusts the provider settings.
    pub async fn start(prefix: &str, tune: impl FnOnce(&mut AwsConfig)) -> Self {
        let cloud = Cloud::connect(&moto_endpoint()).await;
        let network = cloud.network(&unique_cluster(prefix)).await;
        let proxy = FaultProxy::start(&moto_endpoint()).await;
        let mut config = AwsConfig {
            region: REGION.into(),
            endpoint_url: Some(proxy.endpoint.clone()),
            route_table_id: Some(network.route_table_id.clone()),
            vpc_id: Some(network.vpc_id.clone()),
            subnet_ids: Vec::new(),
            // Failures fast: the SDK's retries are tested by the SDK.
            max_attempts: 1,
            ..AwsConfig::default()
        };
        tune(&mut config);
        let sdk = sdk_config(&config).await;
        let provider = AwsProvider::with_sdk_config(config.clone(), &sdk).expect("provider");
        Self {
            provider,
            proxy,
            cloud,
            network,
            config,
        }
    }

    /// Another provider with the same settings and nothing remembered: a restarted gateway, or
    /// another replica.
    pub async fn fresh_provider(&self, tune: impl FnOnce(&mut AwsConfig)) -> Arc<AwsProvider> {
        let mut config = self.config.clone();
        tune(&mut config);
        let sdk = sdk_config(&config).await;
        AwsProvider::with_sdk_config(config, &sdk).expect("provider")
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.network.cluster
    }
}
