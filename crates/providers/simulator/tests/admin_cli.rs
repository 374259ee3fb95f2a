//! The admin HTTP API on a real socket (127.0.0.1), and the `cloud-sim` CLI against it.

use std::{
    path::{Path, PathBuf},
    process::Output,
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use provider::{Protocol, Provider, ServicePort, ServiceSpec};
use provider_simulator::{Knobs, RateLimit, Simulator, SimulatorConfig, admin_router};
use serde_json::{Value, json};
use tokio::{net::TcpListener, task::JoinHandle};

struct Server {
    sim: Arc<Simulator>,
    base: String,
    task: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn example_inventory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/simulator-inventory.yaml")
}

async fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::open(SimulatorConfig {
        state_file: Some(dir.path().join("state.json")),
        inventory: Some(example_inventory()),
        durable_writes: false,
        ..SimulatorConfig::default()
    })
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = admin_router(sim.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Server {
        sim,
        base,
        task,
        _dir: dir,
    }
}

async fn http(base: &str, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("{base}/simulator/v1{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("answer in time")
        .expect("request");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

fn service(uid: &str) -> ServiceSpec {
    ServiceSpec {
        uid: uid.into(),
        namespace: "shop".into(),
        name: "web".into(),
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: 30080,
        }],
        ..ServiceSpec::default()
    }
}

#[tokio::test]
async fn admin_api_lists_launches_and_powers_instances() {
    let s = serve().await;
    let (code, list) = http(&s.base, Method::GET, "/instances", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 7);
    assert_eq!(list[0]["name"], "control-plane-1");
    assert_eq!(list[0]["type"], "sim.large");

    let (code, added) = http(
        &s.base,
        Method::POST,
        "/instances",
        Some(r#"{"name":"worker-7","type":"sim.large","zone":"sim-east-1c","labels":{"team":"red"}}"#),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{added}");
    assert_eq!(added["state"], "running");
    assert_eq!(added["zone"], "sim-east-1c");
    let id = added["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("i-0") && id.len() == 19, "{id}");

    // (body, status, message fragment)
    let refusals = [
        (
            r#"{"name":"worker-7"}"#,
            StatusCode::CONFLICT,
            "already named worker-7",
        ),
        (
            r#"{"name":"x","zone":"mars-1a"}"#,
            StatusCode::BAD_REQUEST,
            "not a zone",
        ),
        (
            r#"{"name":"x","private_ip":"10.0.1.10"}"#,
            StatusCode::CONFLICT,
            "already in use",
        ),
        (
            r#"{"name":"x","private_ip":"nope"}"#,
            StatusCode::BAD_REQUEST,
            "invalid request body",
        ),
        (r#"{"nmae":"x"}"#, StatusCode::BAD_REQUEST, "unknown field `nmae`"),
        ("not json", StatusCode::BAD_REQUEST, "invalid request body"),
    ];
    for (body, want, fragment) in refusals {
        let (code, err) = http(&s.base, Method::POST, "/instances", Some(body)).await;
        assert_eq!(code, want, "{body}: {err}");
        assert!(err["error"].as_str().unwrap().contains(fragment), "{body}: {err}");
    }

    for (action, state) in [
        ("stop", "stopped"),
        ("start", "running"),
        ("terminate", "terminated"),
    ] {
        let (code, inst) = http(&s.base, Method::POST, &format!("/instances/{id}/{action}"), None).await;
        assert_eq!(code, StatusCode::OK, "{inst}");
        assert_eq!(inst["state"], state);
    }
    let (code, err) = http(&s.base, Method::POST, &format!("/instances/{id}/start"), None).await;
    assert_eq!(code, StatusCode::CONFLICT, "{err}");
    let (code, err) = http(&s.base, Method::POST, "/instances/i-0ffffffffffffffff/stop", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(err["error"], "no instance i-0ffffffffffffffff");
    let (code, err) = http(&s.base, Method::POST, &format!("/instances/{id}/reboot"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(err["error"].as_str().unwrap().contains("unknown action"), "{err}");

    // terminated instances stay listed
    let (_, list) = http(&s.base, Method::GET, "/instances", None).await;
    assert_eq!(list.as_array().unwrap().len(), 8);
    let (code, info) = http(&s.base, Method::GET, "/info", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(info["region"], "sim-east-1");
    assert!(info["state_file"].as_str().unwrap().ends_with("state.json"));
}

#[tokio::test]
async fn admin_api_knobs_stats_and_cloud_resources() {
    let s = serve().await;
    let (code, knobs) = http(&s.base, Method::GET, "/knobs", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(knobs["latency"], "0s");
    assert_eq!(knobs["rate_limit"], Value::Null);

    let (code, knobs) = http(
        &s.base,
        Method::PUT,
        "/knobs",
        Some(
            r#"{"latency":"20ms","rate_limit":{"rate":0,"burst":0},"error_rate":{"describe_instances":0.5}}"#,
        ),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{knobs}");
    assert_eq!(knobs["latency"], "20ms");
    assert_eq!(s.sim.knobs().rate_limit, Some(RateLimit::closed()));
    // a partial update keeps the rest
    let (_, knobs) = http(
        &s.base,
        Method::PUT,
        "/knobs",
        Some(r#"{"lb_provision_delay":"1s"}"#),
    )
    .await;
    assert_eq!(knobs["latency"], "20ms");
    assert_eq!(knobs["lb_provision_delay"], "1s");
    assert_eq!(knobs["error_rate"]["describe_instances"], 0.5);
    for (body, fragment) in [
        (r#"{"error_rate":{"describe_instances":2}}"#, "between 0 and 1"),
        (r#"{"latency":"soon"}"#, "invalid duration"),
        (r#"{"rate_limit":{"rate":5}}"#, "missing field `burst`"),
    ] {
        let (code, err) = http(&s.base, Method::PUT, "/knobs", Some(body)).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert!(err["error"].as_str().unwrap().contains(fragment), "{body}: {err}");
    }
    assert_eq!(
        s.sim.knobs().lb_provision_delay,
        Duration::from_secs(1),
        "a refused update changes nothing"
    );

    // The API is closed (rate 0), yet the admin API answers and counts nothing.
    let (code, _) = http(&s.base, Method::GET, "/instances", None).await;
    assert_eq!(code, StatusCode::OK);
    let (_, stats) = http(&s.base, Method::GET, "/stats", None).await;
    assert_eq!(stats["calls_total"], 0);

    // cloud calls show up in stats, load balancers and routes
    s.sim.set_knobs(Knobs::default());
    let lbs = Provider::load_balancers(&*s.sim).unwrap();
    lbs.ensure_load_balancer("prod", &service("u-1"), &[])
        .await
        .unwrap();
    let route = provider::Route {
        name: String::new(),
        target_node: "worker-1".into(),
        destination_cidr: "10.244.1.0/24".into(),
        blackhole: false,
        target_node_addresses: vec![],
        target_provider_id: String::new(),
    };
    Provider::routes(&*s.sim)
        .unwrap()
        .create_route("prod", "uid-1", &route)
        .await
        .unwrap();
    let (_, stats) = http(&s.base, Method::GET, "/stats", None).await;
    assert_eq!(stats["calls_total"], 2);
    assert_eq!(stats["operations"]["ensure_load_balancer"]["accepted"], 1);
    let (_, list) = http(&s.base, Method::GET, "/load-balancers", None).await;
    assert_eq!(list[0]["cluster"], "prod");
    assert_eq!(list[0]["ip"], "203.0.113.1");
    assert_eq!(
        list[0]["listeners"][0],
        json!({"name":"http","protocol":"TCP","port":80,"node_port":30080})
    );
    assert_eq!(list[0]["health_check"]["port"], 10256);
    let (_, routes) = http(&s.base, Method::GET, "/routes", None).await;
    assert_eq!(routes[0]["name"], "prod-uid-1");
    assert_eq!(routes[0]["blackhole"], false);
    let (_, stats) = http(&s.base, Method::POST, "/stats/reset", None).await;
    assert_eq!(stats["calls_total"], 0);
}

async fn cli(base: &str, args: &[&str]) -> Output {
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_cloud-sim"))
            .arg("--admin-url")
            .arg(base)
            .args(args)
            .env_remove("CLOUD_SIM_ADMIN_URL")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("cloud-sim finished in time")
    .expect("cloud-sim runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drives_the_admin_api() {
    let s = serve().await;
    let b = s.base.as_str();

    let out = cli(b, &["instances", "list"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains("worker-gpu-1") && table.contains("accelerator=sim-gpu"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 8, "{table}");

    let out = cli(
        b,
        &[
            "-o",
            "json",
            "instances",
            "add",
            "--name",
            "cli-node",
            "--type",
            "sim.small",
            "--label",
            "a=b",
            "--public-ip",
            "198.51.100.77",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let added: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(added["labels"]["a"], "b");
    let id = added["id"].as_str().unwrap().to_string();

    let out = cli(b, &["instances", "stop", &id]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("stopped"), "{}", stdout(&out));
    let out = cli(b, &["instances", "terminate", &id]).await;
    assert!(stdout(&out).contains("terminated"));
    let out = cli(b, &["instances", "start", &id]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is terminated") && stderr(&out).contains("409"),
        "{}",
        stderr(&out)
    );
    let out = cli(b, &["instances", "stop", "i-0ffffffffffffffff"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no instance i-0ffffffffffffffff"),
        "{}",
        stderr(&out)
    );

    let out = cli(
        b,
        &[
            "knobs",
            "set",
            "--latency",
            "50ms",
            "--rate-limit",
            "10/20",
            "--error-rate",
            "describe_instances=0.5",
            "--error-rate",
            "*=0.01",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("10/s, burst 20"), "{}", stdout(&out));
    let k = s.sim.knobs();
    assert_eq!(k.latency, Duration::from_millis(50));
    assert_eq!(k.rate_limit, Some(RateLimit::new(10.0, 20.0)));
    assert_eq!(k.error_rate_for("describe_instances"), 0.5);
    assert_eq!(k.error_rate_for("list_routes"), 0.01);
    let out = cli(
        b,
        &[
            "knobs",
            "set",
            "--rate-limit",
            "off",
            "--error-rate",
            "describe_instances=off",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(s.sim.knobs().rate_limit, None);
    assert_eq!(s.sim.knobs().error_rate_for("describe_instances"), 0.01);
    let out = cli(b, &["knobs", "set", "--error-rate", "describe=0.5"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown operation \"describe\""),
        "{}",
        stderr(&out)
    );
    let out = cli(b, &["-o", "json", "knobs", "get"]).await;
    let knobs: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(knobs["latency"], "50ms");

    s.sim.set_knobs(Knobs::default());
    Provider::load_balancers(&*s.sim)
        .unwrap()
        .ensure_load_balancer("prod", &service("u-9"), &[])
        .await
        .unwrap();
    let out = cli(b, &["load-balancers", "list"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains("shop/web") && table.contains("203.0.113.1") && table.contains("80/TCP->30080"),
        "{table}"
    );
    let out = cli(b, &["routes", "list"]).await;
    assert!(out.status.success());
    assert!(stdout(&out).starts_with("CLUSTER"));
    let out = cli(b, &["stats"]).await;
    assert!(stdout(&out).contains("ensure_load_balancer"), "{}", stdout(&out));
    let out = cli(b, &["info"]).await;
    assert!(stdout(&out).contains("203.0.113.0/24"), "{}", stdout(&out));
}

#[tokio::test]
async fn cli_explains_an_unreachable_server() {
    // a port nobody listens on: bind, note it, close it
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = cli(&format!("http://127.0.0.1:{port}"), &["instances", "list"]).await;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("cannot reach the simulator admin API") && err.contains(&port.to_string()),
        "{err}"
    );
    let out = cli("https://example.invalid", &["instances", "list"]).await;
    assert!(
        stderr(&out).contains("must be an http:// URL"),
        "{}",
        stderr(&out)
    );
}

/// `cloud-sim routes add` puts a route in the table out of band, as an operator would; the
/// cluster's list shows it, and a taken destination or an unknown target is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_adds_routes_out_of_band() {
    let s = serve().await;
    let b = s.base.as_str();
    let out = cli(
        b,
        &[
            "routes",
            "add",
            "--target",
            "worker-1",
            "--destination",
            "10.244.9.0/24",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains("kubernetes-worker-1") && table.contains("10.244.9.0/24") && table.contains("active"),
        "{table}"
    );
    let listed = Provider::routes(&*s.sim)
        .unwrap()
        .list_routes("kubernetes")
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].target_node, "worker-1");

    let out = cli(
        b,
        &[
            "-o",
            "json",
            "routes",
            "add",
            "--cluster",
            "prod",
            "--target",
            "worker-2",
            "--destination",
            "192.168.7.0/24",
            "--name-hint",
            "vpn",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let added: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (added["cluster"].as_str(), added["name"].as_str()),
        (Some("prod"), Some("prod-vpn"))
    );

    let taken = cli(
        b,
        &[
            "routes",
            "add",
            "--target",
            "worker-2",
            "--destination",
            "10.244.9.0/24",
        ],
    )
    .await;
    assert!(!taken.status.success());
    assert!(
        stderr(&taken).contains("already routed") && stderr(&taken).contains("409"),
        "{}",
        stderr(&taken)
    );
    let nobody = cli(
        b,
        &[
            "routes",
            "add",
            "--target",
            "nobody",
            "--destination",
            "10.244.8.0/24",
        ],
    )
    .await;
    assert!(!nobody.status.success());
    assert!(
        stderr(&nobody).contains("no instance is named"),
        "{}",
        stderr(&nobody)
    );
    let (_, routes) = http(&s.base, Method::GET, "/routes", None).await;
    assert_eq!(routes.as_array().unwrap().len(), 2);
}
