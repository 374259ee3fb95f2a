//! Benchmark: create 5000 nodes and 1000 services, list each in full, and measure watch
//! delivery latency to 10 concurrent watchers. Prints a table. Traffic stays on 127.0.0.1.

use std::time::{Duration, Instant};

use fake_apiserver::{Config, FakeApiServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const NODES: usize = 5000;
const SERVICES: usize = 1000;
const WATCHERS: usize = 10;
const WATCH_EVENTS: usize = 500;
const CONCURRENCY: usize = 16;

async fn create_all<K, F>(api: Api<K>, n: usize, make: F) -> Duration
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: Fn(usize) -> K,
{
    let objs: Vec<K> = (0..n).map(make).collect();
    let t = Instant::now();
    futures::stream::iter(objs)
        .for_each_concurrent(CONCURRENCY, |o| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &o).await.expect("create");
            }
        })
        .await;
    t.elapsed()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = FakeApiServer::start(Config::default()).await?;
    let client = server.client()?;
    let nodes: Api<Node> = Api::all(client.clone());
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");

    let create_nodes = create_all(nodes.clone(), NODES, |i| {
        serde_json::from_value(json!({"metadata": {"name": format!("node-{i:05}"), "labels": {"kubernetes.io/hostname": format!("node-{i:05}")}},
            "spec": {"providerID": format!("sim://node-{i:05}"), "podCIDR": format!("10.{}.{}.0/24", 100 + i / 256, i % 256)},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": format!("192.168.{}.{}", i / 250, i % 250 + 1)}]}}))
        .expect("node")
    })
    .await;
    let create_svcs = create_all(svcs.clone(), SERVICES, |i| {
        serde_json::from_value(json!({"metadata": {"name": format!("svc-{i:04}")},
            "spec": {"type": "LoadBalancer", "selector": {"app": format!("a{i}")}, "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}}))
        .expect("service")
    })
    .await;

    let t = Instant::now();
    let nl = nodes.list(&ListParams::default()).await?;
    let list_nodes = t.elapsed();
    assert_eq!(nl.items.len(), NODES);
    let t = Instant::now();
    let sl = svcs.list(&ListParams::default()).await?;
    let list_svcs = t.elapsed();
    assert!(sl.items.len() >= SERVICES);

    // Watch latency: each event carries its send time; every watcher records arrival.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..WATCHERS {
        let mut stream = cms
            .watch(&WatchParams::default().timeout(120), &rv)
            .await?
            .boxed();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(WATCH_EVENTS);
            while lat.len() < WATCH_EVENTS {
                match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Added(c)))) => {
                        let sent: u64 = c
                            .data
                            .as_ref()
                            .and_then(|d| d.get("t"))
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        let now = start.elapsed().as_micros() as u64;
                        lat.push(Duration::from_micros(now.saturating_sub(sent)));
                    }
                    Ok(Some(Ok(_))) => {}
                    other => panic!("watch ended early: {other:?}"),
                }
            }
            lat
        }));
    }
    for i in 0..WATCH_EVENTS {
        let sent = start.elapsed().as_micros() as u64;
        let c: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("lat-{i}")}, "data": {"t": sent.to_string()}}),
        )?;
        cms.create(&PostParams::default(), &c).await?;
        // Spread the writes: about 500 events/s.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await?);
    }
    all.sort();

    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    println!(
        "fake-apiserver benchmark ({} cores, {CONCURRENCY} concurrent writers, kube-rs over HTTP on 127.0.0.1)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("{:<48} {:>12}", "measurement", "value");
    println!("{:<48} {:>12}", format!("create {NODES} nodes"), ms(create_nodes));
    println!(
        "{:<48} {:>12}",
        format!("create {SERVICES} LoadBalancer services"),
        ms(create_svcs)
    );
    println!(
        "{:<48} {:>12}",
        format!("full list of {NODES} nodes"),
        ms(list_nodes)
    );
    println!(
        "{:<48} {:>12}",
        format!("full list of {} services", sl.items.len()),
        ms(list_svcs)
    );
    println!(
        "{:<48} {:>12}",
        format!("watch delivery p50 ({WATCHERS} watchers x {WATCH_EVENTS} events)"),
        ms(pct(&all, 0.50))
    );
    println!("{:<48} {:>12}", "watch delivery p99", ms(pct(&all, 0.99)));
    println!(
        "{:<48} {:>12}",
        "watch delivery max",
        ms(*all.last().unwrap_or(&Duration::ZERO))
    );
    println!("targets: full node list < 1000 ms; watch p99 < 50 ms");
    server.shutdown().await;
    Ok(())
}
