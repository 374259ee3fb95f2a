//! The simulated cloud's console, behind the thin `cloud-sim` binary: a client of the admin API
//! (`/simulator/v1/...`) served by the cloud-gateway when it runs the simulator provider. Its
//! knob values are read by [`crate::knobs`]' parsers, as the gateway's `--simulator-*` flags are.
//!
//! ```text
//! cloud-sim [--admin-url http://127.0.0.1:10258] [-o table|json] <command>
//!   instances list | add --name N [--type T --zone Z --private-ip IP --public-ip IP --label k=v]
//!             | stop ID | start ID | terminate ID
//!   load-balancers list
//!   routes list | add --target NODE --destination CIDR [--cluster kubernetes --name-hint H]
//!   knobs get | set [--latency 50ms] [--latency-jitter 10ms] [--rate-limit 10/20|off|0]
//!                   [--error-rate describe_instances=0.5|op=off] [--clear-error-rates]
//!                   [--lb-provision-delay 5s]
//!   stats [get|reset]
//!   info
//! ```

use std::{process::ExitCode, time::Duration};

use crate::knobs::{RateLimitSetting, parse_duration, parse_error_rate};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, header};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::{Map, Value, json};

const PREFIX: &str = "/simulator/v1";
const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Parser)]
#[command(
    name = "cloud-sim",
    version,
    about = "Console of the simulated cloud (talks to its admin API)"
)]
struct Cli {
    /// Base URL of the HTTP port serving the simulator's admin API (the cloud-gateway's).
    #[arg(
        long,
        env = "CLOUD_SIM_ADMIN_URL",
        default_value = "http://127.0.0.1:10258",
        global = true
    )]
    admin_url: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table, global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Human-readable table.
    Table,
    /// The API's JSON.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Instances (virtual machines).
    #[command(subcommand, alias = "instance")]
    Instances(InstancesCmd),
    /// Load balancers of every cluster.
    #[command(subcommand, name = "load-balancers", alias = "lbs")]
    LoadBalancers(ListCmd),
    /// Routes of every cluster.
    #[command(subcommand)]
    Routes(RoutesCmd),
    /// Realism knobs: latency, rate limit, injected errors, provisioning delay.
    #[command(subcommand)]
    Knobs(KnobsCmd),
    /// API call counters.
    Stats {
        #[command(subcommand)]
        cmd: Option<StatsCmd>,
    },
    /// Region, zones and address pools.
    Info,
}

#[derive(Subcommand)]
enum ListCmd {
    /// List them.
    List,
}

#[derive(Subcommand)]
enum RoutesCmd {
    /// List them.
    List,
    /// Add a route out of band, as an operator or another tool would.
    Add(RouteArgs),
}

#[derive(Args)]
struct RouteArgs {
    /// The cluster whose route it is (the route controller's --cluster-name).
    #[arg(long, default_value = "kubernetes")]
    cluster: String,
    /// Target instance (= Node) name; a live instance.
    #[arg(long)]
    target: String,
    /// Destination CIDR, e.g. 10.244.9.0/24.
    #[arg(long)]
    destination: String,
    /// Name hint (the route is named <cluster>-<hint>); default the target's name.
    #[arg(long)]
    name_hint: Option<String>,
}

#[derive(Subcommand)]
enum InstancesCmd {
    /// List every instance, terminated ones included.
    List,
    /// Launch a running instance.
    Add(AddArgs),
    /// Power an instance off (it still exists).
    Stop { id: String },
    /// Power a stopped instance on.
    Start { id: String },
    /// Terminate an instance for good.
    Terminate { id: String },
}

#[derive(Args)]
struct AddArgs {
    /// Instance name (= Node name).
    #[arg(long)]
    name: String,
    /// Instance type (default sim.medium).
    #[arg(long = "type")]
    instance_type: Option<String>,
    /// Zone (default: the one with the fewest instances).
    #[arg(long)]
    zone: Option<String>,
    /// Private IP (default: next free one of the instance subnet).
    #[arg(long)]
    private_ip: Option<std::net::IpAddr>,
    /// Public IP.
    #[arg(long)]
    public_ip: Option<std::net::IpAddr>,
    /// Extra Node label, `key=value`; repeatable.
    #[arg(long = "label", value_parser = parse_key_value)]
    labels: Vec<(String, String)>,
}

#[derive(Subcommand)]
enum KnobsCmd {
    /// Show the knobs.
    Get,
    /// Change some knobs; the others stay as they are.
    Set(SetArgs),
}

#[derive(Args)]
struct SetArgs {
    /// Latency added to every API call, e.g. 50ms.
    #[arg(long, value_parser = duration_arg)]
    latency: Option<String>,
    /// Random extra latency up to this, e.g. 10ms.
    #[arg(long, value_parser = duration_arg)]
    latency_jitter: Option<String>,
    /// API rate limit RATE/BURST (calls per second / burst), `off` for none, `0` to throttle
    /// every call.
    #[arg(long)]
    rate_limit: Option<RateLimitSetting>,
    /// Failure probability of an operation, OP=P (OP `*` for all); OP=off removes it. Repeatable.
    #[arg(long = "error-rate", value_parser = parse_error_rate)]
    error_rates: Vec<(String, Option<f64>)>,
    /// Remove every error rate (applied before --error-rate).
    #[arg(long)]
    clear_error_rates: bool,
    /// How long new load balancers take to provision, e.g. 5s.
    #[arg(long, value_parser = duration_arg)]
    lb_provision_delay: Option<String>,
}

#[derive(Subcommand)]
enum StatsCmd {
    /// Show the counters.
    Get,
    /// Zero the counters.
    Reset,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

fn duration_arg(s: &str) -> Result<String, String> {
    parse_duration(s).map(|_| s.trim().to_string())
}

/// Runs the console with the process's arguments; what `cloud-sim` does.
pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cloud-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: &Cli) -> Result<(), String> {
    let api = Api::new(&cli.admin_url)?;
    let (value, table): (Value, fn(&Value) -> String) = match &cli.command {
        Command::Instances(InstancesCmd::List) => {
            (api.call(Method::GET, "/instances", None).await?, instances_table)
        }
        Command::Instances(InstancesCmd::Add(a)) => {
            let mut body = Map::new();
            body.insert("name".into(), json!(a.name));
            if let Some(t) = &a.instance_type {
                body.insert("type".into(), json!(t));
            }
            if let Some(z) = &a.zone {
                body.insert("zone".into(), json!(z));
            }
            if let Some(ip) = a.private_ip {
                body.insert("private_ip".into(), json!(ip));
            }
            if let Some(ip) = a.public_ip {
                body.insert("public_ip".into(), json!(ip));
            }
            if !a.labels.is_empty() {
                let labels: Map<String, Value> =
                    a.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                body.insert("labels".into(), Value::Object(labels));
            }
            let one = api
                .call(Method::POST, "/instances", Some(Value::Object(body)))
                .await?;
            (one, one_instance_table)
        }
        Command::Instances(InstancesCmd::Stop { id }) => (api.act(id, "stop").await?, one_instance_table),
        Command::Instances(InstancesCmd::Start { id }) => (api.act(id, "start").await?, one_instance_table),
        Command::Instances(InstancesCmd::Terminate { id }) => {
            (api.act(id, "terminate").await?, one_instance_table)
        }
        Command::LoadBalancers(ListCmd::List) => {
            (api.call(Method::GET, "/load-balancers", None).await?, lb_table)
        }
        Command::Routes(RoutesCmd::List) => (api.call(Method::GET, "/routes", None).await?, routes_table),
        Command::Routes(RoutesCmd::Add(a)) => {
            let mut body = Map::new();
            body.insert("cluster".into(), json!(a.cluster));
            body.insert("target_node".into(), json!(a.target));
            body.insert("destination_cidr".into(), json!(a.destination));
            if let Some(hint) = &a.name_hint {
                body.insert("name_hint".into(), json!(hint));
            }
            let one = api
                .call(Method::POST, "/routes", Some(Value::Object(body)))
                .await?;
            (one, one_route_table)
        }
        Command::Knobs(KnobsCmd::Get) => (api.call(Method::GET, "/knobs", None).await?, knobs_table),
        Command::Knobs(KnobsCmd::Set(a)) => (
            api.call(Method::PUT, "/knobs", Some(knobs_patch(a)?)).await?,
            knobs_table,
        ),
        Command::Stats {
            cmd: None | Some(StatsCmd::Get),
        } => (api.call(Method::GET, "/stats", None).await?, stats_table),
        Command::Stats {
            cmd: Some(StatsCmd::Reset),
        } => (api.call(Method::POST, "/stats/reset", None).await?, stats_table),
        Command::Info => (api.call(Method::GET, "/info", None).await?, info_table),
    };
    match cli.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default()),
        Output::Table => print!("{}", table(&value)),
    }
    Ok(())
}

fn knobs_patch(a: &SetArgs) -> Result<Value, String> {
    let mut patch = Map::new();
    for (key, v) in [
        ("latency", &a.latency),
        ("latency_jitter", &a.latency_jitter),
        ("lb_provision_delay", &a.lb_provision_delay),
    ] {
        if let Some(v) = v {
            patch.insert(key.into(), json!(v));
        }
    }
    match &a.rate_limit {
        Some(RateLimitSetting(None)) => {
            patch.insert("rate_limit".into(), Value::Null);
        }
        Some(RateLimitSetting(Some(limit))) => {
            patch.insert(
                "rate_limit".into(),
                json!({"rate": limit.rate, "burst": limit.burst}),
            );
        }
        None => {}
    }
    if a.clear_error_rates && a.error_rates.is_empty() {
        patch.insert("error_rate".into(), Value::Null);
    } else if a.clear_error_rates {
        // Clearing and setting in one request: unset what is there, then set what is given.
        return Err(
            "--clear-error-rates cannot be combined with --error-rate; run them one after the other".into(),
        );
    } else if !a.error_rates.is_empty() {
        let entries: Map<String, Value> = a
            .error_rates
            .iter()
            .map(|(op, p)| (op.clone(), p.map_or(Value::Null, |p| json!(p))))
            .collect();
        patch.insert("error_rate".into(), Value::Object(entries));
    }
    if patch.is_empty() {
        return Err("nothing to set; see `cloud-sim knobs set --help`".into());
    }
    Ok(Value::Object(patch))
}

struct Api {
    base: String,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl Api {
    fn new(base: &str) -> Result<Self, String> {
        let base = base.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(format!(
                "--admin-url {base:?} must be an http:// URL (e.g. http://127.0.0.1:10258)"
            ));
        }
        Ok(Self {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    async fn act(&self, id: &str, action: &str) -> Result<Value, String> {
        self.call(Method::POST, &format!("/instances/{id}/{action}"), None)
            .await
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{PREFIX}{path}", self.base);
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let req = Request::builder()
            .method(method)
            .uri(&url)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| format!("bad request to {url}: {e}"))?;
        let resp = tokio::time::timeout(TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| format!("no answer from {url} within {}s", TIMEOUT.as_secs()))?
            .map_err(|e| {
                let mut cause = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    cause = format!("{cause}: {s}");
                    src = s.source();
                }
                format!(
                    "cannot reach the simulator admin API at {} ({cause}); is the cloud-gateway running \
                     with the simulator provider, and is --admin-url (or CLOUD_SIM_ADMIN_URL) its HTTP port?",
                    self.base
                )
            })?;
        let status = resp.status();
        let body = tokio::time::timeout(TIMEOUT, resp.into_body().collect())
            .await
            .map_err(|_| format!("{url}: the answer did not finish within {}s", TIMEOUT.as_secs()))?
            .map_err(|e| format!("{url}: reading the answer failed: {e}"))?
            .to_bytes();
        let value: Option<Value> = serde_json::from_slice(&body).ok();
        if status.is_success() {
            return value.ok_or_else(|| format!("{url}: the answer is not JSON"));
        }
        let message = value
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        Err(match status {
            StatusCode::NOT_FOUND if message.is_empty() => format!(
                "{url} does not exist: is the server at {} serving the simulator's admin API?",
                self.base
            ),
            _ => format!("{} ({})", message, status),
        })
    }
}

/// Left-aligned columns separated by two spaces.
fn render(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn or_dash(x: String) -> String {
    if x.is_empty() { "-".into() } else { x }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn instance_row(i: &Value) -> Vec<String> {
    let labels = i
        .get("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    vec![
        s(i, "id"),
        s(i, "name"),
        s(i, "state"),
        s(i, "type"),
        s(i, "zone"),
        s(i, "private_ip"),
        or_dash(s(i, "public_ip")),
        or_dash(labels),
    ]
}

const INSTANCE_HEADERS: [&str; 8] = [
    "ID",
    "NAME",
    "STATE",
    "TYPE",
    "ZONE",
    "PRIVATE IP",
    "PUBLIC IP",
    "LABELS",
];

fn instances_table(v: &Value) -> String {
    render(&INSTANCE_HEADERS, items(v).iter().map(instance_row).collect())
}

fn one_instance_table(v: &Value) -> String {
    render(&INSTANCE_HEADERS, vec![instance_row(v)])
}

fn lb_table(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|lb| {
            let ports = items(lb.get("listeners").unwrap_or(&Value::Null))
                .iter()
                .map(|l| format!("{}/{}->{}", s(l, "port"), s(l, "protocol"), s(l, "node_port")))
                .collect::<Vec<_>>()
                .join(",");
            let backends = items(lb.get("backends").unwrap_or(&Value::Null))
                .iter()
                .map(|b| s(b, "node_name"))
                .collect::<Vec<_>>()
                .join(",");
            vec![
                s(lb, "name"),
                s(lb, "cluster"),
                format!("{}/{}", s(lb, "service_namespace"), s(lb, "service_name")),
                s(lb, "ip"),
                s(lb, "state"),
                ports,
                or_dash(backends),
            ]
        })
        .collect();
    render(
        &["NAME", "CLUSTER", "SERVICE", "IP", "STATE", "PORTS", "BACKENDS"],
        rows,
    )
}

fn routes_table(v: &Value) -> String {
    let rows = items(v)
        .iter()
        .map(|r| {
            vec![
                s(r, "cluster"),
                s(r, "name"),
                s(r, "destination_cidr"),
                s(r, "target_node"),
                if r.get("blackhole").and_then(Value::as_bool).unwrap_or(false) {
                    "blackhole".into()
                } else {
                    "active".into()
                },
            ]
        })
        .collect();
    render(&["CLUSTER", "NAME", "DESTINATION", "TARGET", "STATE"], rows)
}

fn one_route_table(v: &Value) -> String {
    routes_table(&Value::Array(vec![v.clone()]))
}

fn knobs_table(v: &Value) -> String {
    let rate_limit = match v.get("rate_limit") {
        Some(Value::Object(l)) => {
            let (rate, burst) = (
                l.get("rate").and_then(Value::as_f64),
                l.get("burst").and_then(Value::as_f64),
            );
            match (rate, burst) {
                (Some(0.0), _) => "closed (every call throttled)".into(),
                (Some(r), Some(b)) => format!("{r}/s, burst {b}"),
                _ => Value::Object(l.clone()).to_string(),
            }
        }
        _ => "none".into(),
    };
    let error_rate = v
        .get("error_rate")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.iter()
                .map(|(k, p)| format!("{k}={p}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "none".into());
    render(
        &["KNOB", "VALUE"],
        vec![
            vec!["latency".into(), s(v, "latency")],
            vec!["latency_jitter".into(), s(v, "latency_jitter")],
            vec!["rate_limit".into(), rate_limit],
            vec!["error_rate".into(), error_rate],
            vec!["lb_provision_delay".into(), s(v, "lb_provision_delay")],
        ],
    )
}

fn stats_table(v: &Value) -> String {
    let mut rows: Vec<Vec<String>> = v
        .get("operations")
        .and_then(Value::as_object)
        .map(|ops| {
            ops.iter()
                .map(|(op, o)| {
                    vec![
                        op.clone(),
                        s(o, "calls"),
                        s(o, "accepted"),
                        s(o, "throttled"),
                        s(o, "injected_errors"),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    rows.push(vec![
        "TOTAL".into(),
        s(v, "calls_total"),
        s(v, "accepted_total"),
        s(v, "throttled_total"),
        s(v, "injected_errors_total"),
    ]);
    render(
        &["OPERATION", "CALLS", "ACCEPTED", "THROTTLED", "INJECTED ERRORS"],
        rows,
    )
}

fn info_table(v: &Value) -> String {
    let zones = items(v.get("zones").unwrap_or(&Value::Null))
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    render(
        &["FIELD", "VALUE"],
        vec![
            vec!["provider".into(), s(v, "provider")],
            vec!["region".into(), s(v, "region")],
            vec!["zones".into(), zones],
            vec!["instance_subnet".into(), s(v, "instance_subnet")],
            vec!["load_balancer_pool".into(), s(v, "load_balancer_pool")],
            vec!["state_file".into(), or_dash(s(v, "state_file"))],
            vec![
                "load_balancers_created".into(),
                v.get("load_balancers_created")
                    .map_or_else(String::new, Value::to_string),
            ],
        ],
    )
}
