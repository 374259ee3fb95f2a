//! Reconcile-level tests: one Service's sync (and the backends update after a node-set change)
//! against fake-apiserver in-process and a fake cloud, between the pure plan tests and the
//! end-to-end tests of the processes. Each test checks what the API server ends up holding,
//! which events were written, what the cloud was asked (and in which order), and what
//! `reconcile` / `error_policy` return.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use controller_kit::{
    events::Events,
    gateway::GatewayError,
    gateway_provider::ProviderWatch,
    load_balancers::{BackendNode, CloudLoadBalancers, Ensured, ServingProvider},
    names::{FINALIZER_LB_CLEANUP, callers::SERVICE_CONTROLLER, labels::EXCLUDE_FROM_EXTERNAL_LBS},
    shards::Shards,
};
use http::Method;
use k8s_openapi::api::{
    core::v1::{LoadBalancerStatus, Node, Service},
    events::v1::Event,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{
        controller::Action,
        reflector::{self, ObjectRef, store::Writer},
        watcher,
    },
};
use serde_json::json;
use service_lb_controller::{
    metrics::Metrics,
    reconcile::{self, Context, Error},
};
use side_port::MetricsRegistry;
use test_support::{
    FakeCloud, LoadBalancerOp, NodeBuilder, ServiceBuilder,
    intercept::{self, Intercept},
};
use tokio::sync::mpsc::UnboundedReceiver;

const CLUSTER: &str = "test-cluster";

struct Harness {
    _server: fake_apiserver::RunningServer,
    /// For the test's own reads and writes (not logged, never intercepted).
    services: Api<Service>,
    events: Api<Event>,
    /// What the controller sent to the API server.
    requests: intercept::Log,
    cloud: Arc<FakeCloud>,
    /// The gateway in front of `cloud`, as the controller sees it.
    gateway: Arc<Gateway>,
    ctx: Arc<Context>,
    metrics: MetricsRegistry,
    /// Feeds the controller's Node cache, as its watch would.
    nodes: Mutex<Writer<Node>>,
    /// The Services sent back to the queue after a failed backends update.
    retries: Mutex<UnboundedReceiver<ObjectRef<Service>>>,
}

/// A replica that owns every shard, talking to the API server straight through.
async fn harness() -> Harness {
    harness_with(Shards::unconditional(16), |_, _| Intercept::Pass).await
}

/// The controller acts on `shards` and talks to the API server through a client that asks
/// `hook` about every request (to answer some itself, e.g. with a conflict).
async fn harness_with<F>(shards: Shards, hook: F) -> Harness
where
    F: Fn(&Method, &str) -> Intercept + Send + Sync + 'static,
{
    harness_following(shards, hook, None).await
}

/// [`harness`], its controller following `provider` (the gateway client's view of which
/// provider the gateway serves, from its answers).
async fn harness_believing(provider: &str) -> Harness {
    let watch = ProviderWatch::default();
    watch.observe(provider);
    harness_following(Shards::unconditional(16), |_, _| Intercept::Pass, Some(watch)).await
}

async fn harness_following<F>(shards: Shards, hook: F, provider: Option<ProviderWatch>) -> Harness
where
    F: Fn(&Method, &str) -> Intercept + Send + Sync + 'static,
{
    let server = fake_apiserver::FakeApiServer::start(fake_apiserver::Config::default())
        .await
        .unwrap();
    let client = server.client().unwrap();
    let (controllers_client, requests) = intercept::client(&server, hook);
    let cloud = FakeCloud::new();
    let gateway = Arc::new(Gateway {
        cloud: cloud.clone(),
        load_balancers: AtomicBool::new(true),
        asked: AtomicUsize::new(0),
        new_ensures: AtomicUsize::new(0),
    });
    let metrics = MetricsRegistry::new();
    let (store, writer) = reflector::store();
    let (retry, retries) = tokio::sync::mpsc::unbounded_channel();
    let ctx = Context::new(
        controllers_client.clone(),
        gateway.clone(),
        CLUSTER.into(),
        None,
        shards.clone(),
        Events::new(controllers_client, SERVICE_CONTROLLER, None),
        Metrics::register(&metrics, &shards),
        store,
        retry,
    );
    let ctx = Arc::new(match provider {
        Some(watch) => ctx.with_provider(watch),
        None => ctx,
    });
    Harness {
        _server: server,
        services: Api::namespaced(client.clone(), "default"),
        events: Api::namespaced(client, "default"),
        requests,
        cloud,
        gateway,
        ctx,
        metrics,
        nodes: Mutex::new(writer),
        retries: Mutex::new(retries),
    }
}

/// A gateway in front of the fake cloud, its provider's capabilities scripted: a provider
/// without load balancers (OpenStack's, today) says so when asked, and answers every
/// load-balancer call UNIMPLEMENTED (the calls still reach the fake cloud, which records them).
struct Gateway {
    cloud: Arc<FakeCloud>,
    load_balancers: AtomicBool,
    /// How many times it was asked which provider it serves.
    asked: AtomicUsize,
    /// How many ensures said the Service shows no load balancer yet.
    new_ensures: AtomicUsize,
}

#[async_trait::async_trait]
impl CloudLoadBalancers for Gateway {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, GatewayError> {
        self.cloud.get_load_balancer(cluster, service).await
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError> {
        self.cloud.ensure_load_balancer(cluster, service, nodes).await
    }

    async fn ensure_new_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError> {
        self.new_ensures.fetch_add(1, Ordering::SeqCst);
        self.cloud.ensure_load_balancer(cluster, service, nodes).await
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<(), GatewayError> {
        self.cloud.update_load_balancer(cluster, service, nodes).await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<(), GatewayError> {
        self.cloud.ensure_load_balancer_deleted(cluster, service).await
    }

    async fn current_provider(&self) -> Result<Option<String>, GatewayError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.cloud.current_provider().await
    }

    async fn serving_provider(&self) -> Result<ServingProvider, GatewayError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(ServingProvider {
            name: self.cloud.current_provider().await?,
            load_balancers: self.load_balancers.load(Ordering::SeqCst),
            annotation_prefix: self.cloud.serving_provider().await?.annotation_prefix,
        })
    }
}

impl Harness {
    /// The gateway at the address now serves `provider` (a swap, which no answer has told the
    /// controller of yet), with or without load balancers.
    fn serve(&self, provider: &str, load_balancers: bool) {
        self.cloud.serve_provider(Some(provider));
        self.gateway
            .load_balancers
            .store(load_balancers, Ordering::SeqCst);
        let unimplemented = (!load_balancers)
            .then(|| GatewayError::NotImplemented(format!("provider {provider} has no load balancers")));
        for op in [
            LoadBalancerOp::Get,
            LoadBalancerOp::Ensure,
            LoadBalancerOp::Update,
            LoadBalancerOp::Delete,
        ] {
            self.cloud.fail_load_balancer_calls(op, unimplemented.clone());
        }
    }

    /// The Node cache after a (re)list that found exactly `nodes`.
    fn list_nodes(&self, nodes: &[NodeBuilder]) {
        let mut writer = self.nodes.lock().unwrap();
        writer.apply_watcher_event(&watcher::Event::Init);
        for node in nodes {
            writer.apply_watcher_event(&watcher::Event::InitApply(node.clone().build()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    /// A node added to (or changed in) the Node cache.
    fn apply_node(&self, node: NodeBuilder) {
        let mut writer = self.nodes.lock().unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(node.build()));
    }

    /// Creates `svc` and returns it as the watch would deliver it.
    async fn create(&self, svc: ServiceBuilder) -> Arc<Service> {
        let svc = svc.without_uid().build();
        Arc::new(self.services.create(&PostParams::default(), &svc).await.unwrap())
    }

    /// The Service as the API server holds it now (as the watch delivers it next).
    async fn service(&self, name: &str) -> Arc<Service> {
        Arc::new(self.services.get(name).await.unwrap())
    }

    async fn exists(&self, name: &str) -> bool {
        self.services.get_opt(name).await.unwrap().is_some()
    }

    /// Merge-patches the Service (as a user would) and returns it as the watch delivers it.
    async fn patch(&self, name: &str, patch: serde_json::Value) -> Arc<Service> {
        Arc::new(
            self.services
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap(),
        )
    }

    /// Deletes the Service (as a user would) and returns it as the watch delivers it: marked
    /// for deletion, kept by its finalizer.
    async fn delete(&self, name: &str) -> Arc<Service> {
        self.services
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        self.service(name).await
    }

    async fn reconcile(&self, svc: &Arc<Service>) -> Result<Action, Error> {
        reconcile::reconcile(svc.clone(), self.ctx.clone()).await
    }

    fn error_policy(&self, svc: &Arc<Service>, err: &Error) -> Action {
        reconcile::error_policy(svc.clone(), err, self.ctx.clone())
    }

    /// The events written, oldest first, as `Type Reason`.
    async fn events(&self) -> Vec<String> {
        self.event_objects()
            .await
            .into_iter()
            .map(|e| format!("{} {}", e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
            .collect()
    }

    /// The note of the (first) event with `reason`.
    async fn note(&self, reason: &str) -> String {
        self.event_objects()
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .and_then(|e| e.note)
            .unwrap_or_else(|| panic!("no {reason} event"))
    }

    async fn event_objects(&self) -> Vec<Event> {
        let mut events = self.events.list(&ListParams::default()).await.unwrap().items;
        // Named `<object>.<hex nanoseconds>`: by name is by time.
        events.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        events
    }

    /// What the controller did, in order: its API requests (`PATCH services/web`, `POST
    /// events`) and its cloud calls (`cloud Ensure default/web [n1]`), by when each went out.
    fn timeline(&self) -> Vec<String> {
        let mut all: Vec<(Instant, String)> = self
            .requests
            .sent()
            .into_iter()
            .map(|r| {
                let path = r.path.rsplit("/namespaces/default/").next().unwrap_or_default();
                (r.at, format!("{} {path}", r.method))
            })
            .collect();
        all.extend(
            self.cloud
                .load_balancer_calls()
                .into_iter()
                .map(|c| (c.at, format!("cloud {}", c.describe()))),
        );
        all.sort_by_key(|(at, _)| *at);
        all.into_iter().map(|(_, what)| what).collect()
    }

    /// The Services sent back to the queue so far.
    fn retried(&self) -> Vec<ObjectRef<Service>> {
        let mut retries = self.retries.lock().unwrap();
        std::iter::from_fn(|| retries.try_recv().ok()).collect()
    }
}

fn node(name: &str) -> NodeBuilder {
    NodeBuilder::new(name)
        .provider_id(&format!("sim://zone-a/i-{name}"))
        .ready(true)
        .addresses(&[("InternalIP", "10.0.0.1")])
}

fn has_finalizer(svc: &Service) -> bool {
    svc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_LB_CLEANUP)
}

/// `status.loadBalancer.ingress` IPs.
fn ingress_ips(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone())
        .collect()
}

/// The delay of a requeue (`Action` keeps it private; its `Debug` shows it).
fn requeue_after(action: &Action) -> Option<Duration> {
    let text = format!("{action:?}");
    let inner = text
        .strip_prefix("Action { requeue_after: ")
        .and_then(|t| t.strip_suffix(" }"))
        .unwrap_or_else(|| panic!("unexpected Action debug format: {text}"));
    let duration = inner.strip_prefix("Some(")?.strip_suffix(')')?;
    let (number, unit) = duration
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|i| duration.split_at(i))
        .unwrap_or_else(|| panic!("no unit in {duration}"));
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "µs" => 1e-6,
        "ns" => 1e-9,
        other => panic!("unexpected unit {other} in {duration}"),
    };
    Some(Duration::from_secs_f64(number.parse::<f64>().unwrap() * scale))
}

fn secs(s: u64) -> Action {
    Action::requeue(Duration::from_secs(s))
}

// --- ensure ---------------------------------------------------------------------------------

#[tokio::test]
async fn ensure_writes_the_finalizer_before_the_cloud_call_then_the_status() {
    let h = harness().await;
    h.list_nodes(&[
        node("n2"),
        node("n1"),
        node("n3").label(EXCLUDE_FROM_EXTERNAL_LBS, "true"),
    ]);
    let svc = h.create(ServiceBuilder::new("web")).await;

    let action = h.reconcile(&svc).await.unwrap();

    assert_eq!(action, Action::await_change());
    assert_eq!(
        h.timeline(),
        [
            "POST events",
            "PATCH services/web",
            "cloud Ensure default/web [n1 n2]",
            "POST events",
            "PATCH services/web/status",
        ],
        "the finalizer is written before the cloud is asked; the status after"
    );
    let stored = h.service("web").await;
    assert!(has_finalizer(&stored), "{:?}", stored.metadata.finalizers);
    assert_eq!(ingress_ips(&stored), ["203.0.113.1"]);
    let call = &h.cloud.load_balancer_calls()[0];
    assert_eq!(call.cluster, CLUSTER);
    assert_eq!(Some(&call.uid), svc.metadata.uid.as_ref());
    let balancer = h.cloud.load_balancer(&call.uid).unwrap();
    assert_eq!(balancer.backend_names(), ["n1", "n2"], "n3 is excluded");
    assert_eq!(
        h.events().await,
        ["Normal EnsuringLoadBalancer", "Normal EnsuredLoadBalancer"]
    );

    // The watch delivers the Service with our finalizer and status: nothing to do, no request.
    let requests = h.requests.sent().len();
    for copy in [stored, svc] {
        assert_eq!(h.reconcile(&copy).await.unwrap(), Action::await_change());
    }
    assert_eq!(h.cloud.load_balancer_calls().len(), 1, "no second cloud call");
    assert_eq!(h.requests.sent().len(), requests, "no API write");
}

#[tokio::test]
async fn only_the_first_ensure_of_a_new_service_tells_the_gateway_it_has_no_load_balancer_yet() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Ensure,
        Some(GatewayError::Unavailable("the cloud is down".into())),
    );
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap_err();
    assert_eq!(h.gateway.new_ensures.load(Ordering::SeqCst), 1, "just created");

    // The failed ensure may have made the load balancer: the retry, with the finalizer now
    // written, is a plain ensure (the gateway reads first).
    h.cloud.fail_load_balancer_calls(LoadBalancerOp::Ensure, None);
    let stored = h.service("web").await;
    assert!(has_finalizer(&stored));
    h.reconcile(&stored).await.unwrap();
    assert_eq!(h.gateway.new_ensures.load(Ordering::SeqCst), 1, "finalizer seen");
    assert_eq!(h.cloud.load_balancer_calls().len(), 2);

    // The stale copy the watch delivered first: the finalizer's write finds it on the server.
    let stale = h
        .create(ServiceBuilder::new("api").ports(&[("TCP", 80, 30081)]))
        .await;
    h.services
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER_LB_CLEANUP]}})),
        )
        .await
        .unwrap();
    assert!(!has_finalizer(&stale));
    h.reconcile(&stale).await.unwrap();
    assert_eq!(
        h.gateway.new_ensures.load(Ordering::SeqCst),
        1,
        "a finalizer another replica wrote meanwhile counts"
    );
}

#[tokio::test]
async fn a_failing_ensure_finds_the_finalizer_written_and_leaves_the_status() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Ensure,
        Some(GatewayError::Unavailable("the cloud is down".into())),
    );
    let svc = h.create(ServiceBuilder::new("web")).await;

    let err = h.reconcile(&svc).await.unwrap_err();

    assert!(
        matches!(
            err,
            Error::Cloud {
                source: GatewayError::Unavailable(_),
                ..
            }
        ),
        "{err:?}"
    );
    let stored = h.service("web").await;
    assert!(has_finalizer(&stored), "written before the cloud call");
    assert!(ingress_ips(&stored).is_empty());
    assert_eq!(
        h.events().await,
        ["Normal EnsuringLoadBalancer", "Warning SyncLoadBalancerFailed"]
    );
    assert_eq!(
        h.note("SyncLoadBalancerFailed").await,
        "Error syncing load balancer: failed to ensure load balancer: unavailable: the cloud is down"
    );
}

#[tokio::test]
async fn with_no_nodes_the_load_balancer_is_ensured_with_a_warning() {
    let h = harness().await;
    h.list_nodes(&[]);
    let svc = h.create(ServiceBuilder::new("web")).await;

    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());

    assert_eq!(h.cloud.described_load_balancer_calls(), ["Ensure default/web []"]);
    assert_eq!(
        h.events().await,
        [
            "Normal EnsuringLoadBalancer",
            "Warning UnAvailableLoadBalancer",
            "Normal EnsuredLoadBalancer",
        ]
    );
    assert_eq!(
        h.note("UnAvailableLoadBalancer").await,
        "There are no available nodes for LoadBalancer"
    );
    assert_eq!(ingress_ips(&*h.service("web").await), ["203.0.113.1"]);
}

// --- errors and requeues --------------------------------------------------------------------

#[tokio::test]
async fn retry_after_requeues_after_exactly_that_delay_and_an_unrelated_change_waits_for_it() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    h.cloud.retry_after_ensures(1, Duration::from_secs(7));
    let svc = h.create(ServiceBuilder::new("web")).await;

    let err = h.reconcile(&svc).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)), "{err:?}");
    assert_eq!(h.error_policy(&svc, &err), secs(7), "not the 5 s backoff");
    assert_eq!(h.cloud.load_balancer_calls().len(), 1);
    assert!(
        !h.events().await.iter().any(|e| e.starts_with("Warning")),
        "the cloud at work is no failure: {:?}",
        h.events().await
    );

    // A label changes meanwhile (and our own finalizer write woke the queue too): the cloud
    // is not asked again before the 7 s are up.
    let requests = h.requests.sent().len();
    let relabelled = h
        .patch("web", json!({ "metadata": { "labels": { "team": "shop" } } }))
        .await;
    for copy in [relabelled, h.service("web").await] {
        let action = h.reconcile(&copy).await.unwrap();
        let left = requeue_after(&action).expect("a requeue, not await_change");
        assert!(
            left > Duration::from_secs(5) && left <= Duration::from_secs(7),
            "the time left of the 7 s: {left:?}"
        );
    }
    assert_eq!(h.cloud.load_balancer_calls().len(), 1, "no cloud call meanwhile");
    assert_eq!(h.requests.sent().len(), requests, "no API request meanwhile");
    assert!(
        h.metrics
            .render()
            .contains(r#"service_lb_controller_reconcile_errors_total{error="retry_after"} 1"#),
        "{}",
        h.metrics.render()
    );
}

#[tokio::test]
async fn other_errors_back_off_from_5s_doubling_to_300s() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let down = || Some(GatewayError::Unavailable("the cloud is down".into()));
    h.cloud.fail_load_balancer_calls(LoadBalancerOp::Ensure, down());
    h.create(ServiceBuilder::new("web")).await;

    let mut delays = Vec::new();
    for attempt in 0..8 {
        // Each attempt is a change that needs the cloud, so the cloud is asked at once.
        let svc = h
            .patch(
                "web",
                json!({ "metadata": { "annotations": { "attempt": attempt.to_string() } } }),
            )
            .await;
        let err = h.reconcile(&svc).await.unwrap_err();
        assert_eq!(err.retry_after(), None);
        delays.push(h.error_policy(&svc, &err));
    }

    assert_eq!(
        delays,
        [5, 10, 20, 40, 80, 160, 300, 300].map(secs),
        "exponential backoff, capped"
    );
    assert_eq!(h.cloud.load_balancer_calls().len(), 8);
    assert!(
        h.metrics
            .render()
            .contains(r#"service_lb_controller_reconcile_errors_total{error="cloud"} 8"#),
        "{}",
        h.metrics.render()
    );

    // Unchanged, the Service waits for its retry: no cloud call.
    let action = h.reconcile(&h.service("web").await).await.unwrap();
    assert!(requeue_after(&action).is_some_and(|d| d > Duration::from_secs(299)));
    assert_eq!(h.cloud.load_balancer_calls().len(), 8);

    // A success resets the backoff: the next failure waits 5 s again.
    h.cloud.fail_load_balancer_calls(LoadBalancerOp::Ensure, None);
    let svc = h
        .patch(
            "web",
            json!({ "metadata": { "annotations": { "attempt": "ok" } } }),
        )
        .await;
    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());
    h.cloud.fail_load_balancer_calls(LoadBalancerOp::Ensure, down());
    let svc = h
        .patch(
            "web",
            json!({ "metadata": { "annotations": { "attempt": "again" } } }),
        )
        .await;
    let err = h.reconcile(&svc).await.unwrap_err();
    assert_eq!(h.error_policy(&svc, &err), secs(5));
}

#[tokio::test]
async fn an_invalid_argument_warns_with_the_clouds_message_and_waits_the_longest_backoff() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let message = "port 80/TCP: the cloud's load balancers take no port below 1024";
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Ensure,
        Some(GatewayError::InvalidArgument(message.into())),
    );
    let svc = h.create(ServiceBuilder::new("web")).await;

    let err = h.reconcile(&svc).await.unwrap_err();

    assert_eq!(h.error_policy(&svc, &err), secs(300));
    assert_eq!(
        h.events().await,
        ["Normal EnsuringLoadBalancer", "Warning SyncLoadBalancerFailed"]
    );
    let note = h.note("SyncLoadBalancerFailed").await;
    assert!(note.contains(message), "{note}");
    assert!(
        h.metrics
            .render()
            .contains(r#"service_lb_controller_reconcile_errors_total{error="invalid_service"} 1"#),
        "{}",
        h.metrics.render()
    );
}

#[tokio::test]
async fn a_used_up_quota_warns_naming_it_and_backs_off_like_other_errors() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let message = "CreateLoadBalancer: TooManyLoadBalancers: Exceeded quota of account 123456789012";
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Ensure,
        Some(GatewayError::QuotaExceeded(message.into())),
    );
    h.create(ServiceBuilder::new("web")).await;

    let mut delays = Vec::new();
    for attempt in 0..3 {
        let svc = h
            .patch(
                "web",
                json!({ "metadata": { "annotations": { "attempt": attempt.to_string() } } }),
            )
            .await;
        let err = h.reconcile(&svc).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Cloud {
                    source: GatewayError::QuotaExceeded(_),
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.retry_after(), None);
        delays.push(h.error_policy(&svc, &err));
    }

    // Neither a fixed delay nor the longest backoff of a Service that can never work: the
    // quota may be raised any time.
    assert_eq!(delays, [5, 10, 20].map(secs), "the ordinary backoff");
    assert!(
        h.events()
            .await
            .contains(&"Warning SyncLoadBalancerFailed".to_owned())
    );
    assert_eq!(
        h.note("SyncLoadBalancerFailed").await,
        format!("Error syncing load balancer: failed to ensure load balancer: quota exceeded: {message}")
    );
    assert!(
        h.metrics
            .render()
            .contains(r#"service_lb_controller_reconcile_errors_total{error="quota_exceeded"} 3"#),
        "{}",
        h.metrics.render()
    );
}

// --- cleanup --------------------------------------------------------------------------------

#[tokio::test]
async fn a_deleted_service_loses_its_load_balancer_then_its_finalizer() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let created = h.create(ServiceBuilder::new("web").finalizer()).await;
    h.cloud.add_load_balancer(&created);
    let svc = h.delete("web").await;
    assert!(svc.metadata.deletion_timestamp.is_some());

    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());

    assert_eq!(
        h.timeline(),
        [
            "cloud Get default/web",
            "POST events",
            "cloud Delete default/web",
            "PATCH services/web",
            "POST events",
        ],
        "the finalizer goes only after the load balancer"
    );
    assert!(h.cloud.load_balancers().is_empty());
    assert!(!h.exists("web").await, "gone with its finalizer");
    assert_eq!(
        h.events().await,
        ["Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"]
    );
}

#[tokio::test]
async fn a_deleted_service_whose_load_balancer_is_reported_gone_still_has_the_provider_clean_up() {
    // What was made for the Service may outlive its load balancer (a security group, a target
    // group, the nodes' rules, a load balancer of the type the Service asked for before): the
    // provider is asked to delete whatever exists. Upstream skips the call and leaks them.
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    h.create(ServiceBuilder::new("web").finalizer()).await;
    let svc = h.delete("web").await;

    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());

    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Get default/web", "Delete default/web"]
    );
    assert!(!h.exists("web").await, "gone with its finalizer");
    assert_eq!(h.events().await, ["Normal DeletedLoadBalancer"]);
}

#[tokio::test]
async fn a_service_no_longer_of_type_load_balancer_is_cleaned_up() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    let uid = svc.metadata.uid.clone().unwrap();
    assert!(h.cloud.load_balancer(&uid).is_some());
    h.cloud.clear_load_balancer_calls();

    let cluster_ip = h.patch("web", json!({ "spec": { "type": "ClusterIP" } })).await;
    assert_eq!(h.reconcile(&cluster_ip).await.unwrap(), Action::await_change());

    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Get default/web", "Delete default/web"]
    );
    assert!(h.cloud.load_balancer(&uid).is_none());
    let stored = h.service("web").await;
    assert!(!has_finalizer(&stored), "{:?}", stored.metadata.finalizers);
    // (The API server itself clears the status with the type, as the real one does.)
    assert!(ingress_ips(&stored).is_empty(), "{:?}", stored.status);
    let events = h.events().await;
    assert_eq!(
        events[2..],
        ["Normal DeletingLoadBalancer", "Normal DeletedLoadBalancer"]
    );

    // Cleaned up: the next sync has nothing to do.
    let calls = h.cloud.load_balancer_calls().len();
    assert_eq!(h.reconcile(&stored).await.unwrap(), Action::await_change());
    assert_eq!(h.cloud.load_balancer_calls().len(), calls);
}

/// The interleaving of `make chaos`'s leaked load balancers (issue 29): the queue hands a worker
/// the Service as the watch delivered it, a new LoadBalancer without our finalizer; before the
/// worker writes the finalizer, the user retypes the Service to ClusterIP (or deletes it while
/// another finalizer keeps it). The finalizer write meets a conflict, reads the Service afresh
/// and plans nothing. The sync must then stop: an ensure from the stale copy made a load
/// balancer with no finalizer on its Service, which no later sync (of this replica or the next)
/// would ever clean up.
#[tokio::test]
async fn a_service_changed_before_its_finalizer_is_written_gets_no_load_balancer() {
    for change in ["retyped to ClusterIP", "deleted"] {
        let h = harness().await;
        h.list_nodes(&[node("n1")]);
        let watched = h
            .create(ServiceBuilder::new("web").other_finalizer("example.com/hold"))
            .await;
        let now = match change {
            "deleted" => h.delete("web").await,
            _ => h.patch("web", json!({ "spec": { "type": "ClusterIP" } })).await,
        };

        h.reconcile(&watched).await.unwrap();

        assert!(
            h.cloud.load_balancer_calls().is_empty(),
            "{change}: the cloud was asked {:?}",
            h.cloud.described_load_balancer_calls()
        );
        let stored = h.service("web").await;
        assert!(
            !has_finalizer(&stored),
            "{change}: {:?}",
            stored.metadata.finalizers
        );
        // The sync of the change (here, or at a replica that took over) has nothing to undo.
        h.reconcile(&now).await.unwrap();
        assert!(
            h.cloud.load_balancers().is_empty(),
            "{change}: a load balancer leaked"
        );
    }
}

#[tokio::test]
async fn a_cleanup_whose_cloud_delete_fails_keeps_the_finalizer() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let created = h.create(ServiceBuilder::new("web").finalizer()).await;
    h.cloud.add_load_balancer(&created);
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Delete,
        Some(GatewayError::Unavailable("the cloud is down".into())),
    );
    let svc = h.delete("web").await;

    let err = h.reconcile(&svc).await.unwrap_err();

    assert_eq!(h.error_policy(&svc, &err), secs(5));
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Get default/web", "Delete default/web"]
    );
    let stored = h.service("web").await;
    assert!(has_finalizer(&stored), "kept until the load balancer is gone");
    assert!(
        h.cloud
            .load_balancer(created.metadata.uid.as_deref().unwrap())
            .is_some()
    );
    assert_eq!(
        h.events().await,
        ["Normal DeletingLoadBalancer", "Warning SyncLoadBalancerFailed"]
    );
    let note = h.note("SyncLoadBalancerFailed").await;
    assert!(
        note.starts_with("Error syncing load balancer: failed to delete load balancer"),
        "{note}"
    );
}

// --- node-set sync --------------------------------------------------------------------------

#[tokio::test]
async fn a_new_node_updates_the_backends_once() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    // Another Service of ours whose load balancer was never ensured: not the node sync's.
    let other = h
        .create(ServiceBuilder::new("other").ports(&[("TCP", 81, 30081)]))
        .await;
    let svc = h.service("web").await;
    h.cloud.clear_load_balancer_calls();
    let requests = h.requests.sent().len();

    h.apply_node(node("n2"));
    let failed = reconcile::sync_nodes(&h.ctx, vec![svc.clone(), other.clone()], 4).await;

    assert_eq!(failed, 0);
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Update default/web [n1 n2]"]
    );
    let uid = svc.metadata.uid.as_deref().unwrap();
    assert_eq!(h.cloud.load_balancer(uid).unwrap().backend_names(), ["n1", "n2"]);
    let sent: Vec<String> = h.requests.sent()[requests..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        sent,
        ["POST /apis/events.k8s.io/v1/namespaces/default/events"],
        "the event, no write of the Service"
    );
    assert_eq!(h.events().await.last().unwrap(), "Normal UpdatedLoadBalancer");
    let metrics = h.metrics.render();
    assert!(
        metrics.contains("service_controller_loadbalancer_sync_total 1"),
        "{metrics}"
    );

    // The same node set again: nothing to update.
    assert_eq!(reconcile::sync_nodes(&h.ctx, vec![svc, other], 4).await, 0);
    assert_eq!(h.cloud.load_balancer_calls().len(), 1);
    assert!(h.retried().is_empty());
}

#[tokio::test]
async fn a_failed_backends_update_warns_counts_and_sends_the_service_back_to_be_ensured() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    let svc = h.service("web").await;
    h.cloud.clear_load_balancer_calls();
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Update,
        Some(GatewayError::Unavailable("the cloud is down".into())),
    );

    h.apply_node(node("n2"));
    assert_eq!(reconcile::sync_nodes(&h.ctx, vec![svc.clone()], 4).await, 1);

    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Update default/web [n1 n2]", "Get default/web"]
    );
    assert_eq!(
        h.events().await.last().unwrap(),
        "Warning UpdateLoadBalancerFailed"
    );
    let note = h.note("UpdateLoadBalancerFailed").await;
    assert!(
        note.starts_with("Error updating load balancer with new hosts [n1 n2]"),
        "{note}"
    );
    let metrics = h.metrics.render();
    assert!(
        metrics.contains("service_controller_nodesync_error_total 1"),
        "{metrics}"
    );
    assert_eq!(h.retried(), [ObjectRef::from_obj(&*svc)]);

    // The queue's retry ensures the load balancer whole (upstream's retry path).
    h.cloud.fail_load_balancer_calls(LoadBalancerOp::Update, None);
    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());
    assert_eq!(
        h.cloud.described_load_balancer_calls()[2..],
        ["Ensure default/web [n1 n2]"]
    );
}

#[tokio::test]
async fn a_backends_update_the_cloud_is_still_applying_is_asked_again_without_a_failure() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    let svc = h.service("web").await;
    h.cloud.clear_load_balancer_calls();
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Update,
        Some(GatewayError::RetryAfter {
            after: Duration::from_secs(2),
            message: "load balancer lb-1 is PENDING_UPDATE".into(),
        }),
    );

    h.apply_node(node("n2"));
    assert_eq!(reconcile::sync_nodes(&h.ctx, vec![svc.clone()], 4).await, 0);
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Update default/web [n1 n2]"]
    );
    assert!(
        !h.events().await.iter().any(|e| e.starts_with("Warning")),
        "{:?}",
        h.events().await
    );
    assert!(
        h.metrics
            .render()
            .contains("service_controller_nodesync_error_total 0"),
        "{}",
        h.metrics.render()
    );
    assert_eq!(h.retried(), [ObjectRef::from_obj(&*svc)]);

    // The queue's retry: the same update, not a whole ensure; then nothing before the delay.
    let err = h.reconcile(&svc).await.unwrap_err();
    assert_eq!(h.error_policy(&svc, &err), secs(2));
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Update default/web [n1 n2]", "Update default/web [n1 n2]"]
    );
    let action = h.reconcile(&svc).await.unwrap();
    let left = requeue_after(&action).expect("a requeue");
    assert!(left <= Duration::from_secs(2), "{left:?}");
    assert_eq!(
        h.cloud.load_balancer_calls().len(),
        2,
        "nothing asked before the delay"
    );
    assert!(!h.events().await.iter().any(|e| e.starts_with("Warning")));
}

#[tokio::test]
async fn a_backends_update_finding_the_load_balancer_gone_ensures_it_again_at_once() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    let svc = h.service("web").await;
    // Someone deleted it in the cloud.
    h.cloud.ensure_load_balancer_deleted(CLUSTER, &svc).await.unwrap();
    h.cloud.clear_load_balancer_calls();

    h.apply_node(node("n2"));
    assert_eq!(reconcile::sync_nodes(&h.ctx, vec![svc.clone()], 4).await, 1);

    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Update default/web [n1 n2]", "Get default/web"]
    );
    let metrics = h.metrics.render();
    assert!(
        metrics.contains("service_controller_nodesync_error_total 0"),
        "upstream counts a failure only while the load balancer exists: {metrics}"
    );
    assert!(!h.events().await.iter().any(|e| e.starts_with("Warning")));
    assert_eq!(h.retried(), [ObjectRef::from_obj(&*svc)]);

    // The queue ensures it again, without waiting.
    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());
    assert_eq!(
        h.cloud.described_load_balancer_calls()[2..],
        ["Ensure default/web [n1 n2]"]
    );
    let uid = svc.metadata.uid.as_deref().unwrap();
    assert_eq!(h.cloud.load_balancer(uid).unwrap().backend_names(), ["n1", "n2"]);
}

/// Upstream's TestSlowNodeSync: a Service synced while a slow backends update of it is out
/// waits for it, then ensures it with the node set of its own time; the update does not
/// overtake it with an older one.
#[tokio::test]
async fn a_sync_waits_for_a_slow_backends_update_of_the_same_service() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    let svc = h.service("web").await;
    h.cloud.clear_load_balancer_calls();
    let latency = Duration::from_millis(300);
    h.cloud.set_load_balancer_latency(latency);

    h.apply_node(node("n2"));
    let update = {
        let (ctx, svc) = (h.ctx.clone(), svc.clone());
        tokio::spawn(async move { reconcile::sync_nodes(&ctx, vec![svc], 4).await })
    };
    while h.cloud.load_balancer_calls().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // While the update is out: a third node, and a change of the Service that needs the cloud.
    h.apply_node(node("n3"));
    let changed = h
        .patch(
            "web",
            json!({ "metadata": { "annotations": { "lb": "bigger" } } }),
        )
        .await;
    assert_eq!(h.reconcile(&changed).await.unwrap(), Action::await_change());
    assert_eq!(update.await.unwrap(), 0);

    let calls = h.cloud.load_balancer_calls();
    assert_eq!(
        calls.iter().map(|c| c.describe()).collect::<Vec<_>>(),
        ["Update default/web [n1 n2]", "Ensure default/web [n1 n2 n3]"]
    );
    assert!(
        calls[1].at >= calls[0].at + latency,
        "the ensure went out while the update was still out"
    );
    let uid = svc.metadata.uid.as_deref().unwrap();
    assert_eq!(
        h.cloud.load_balancer(uid).unwrap().backend_names(),
        ["n1", "n2", "n3"]
    );
    // The ensure recorded its backends: the next node pass has nothing to do.
    assert_eq!(reconcile::sync_nodes(&h.ctx, vec![changed], 4).await, 0);
    assert_eq!(h.cloud.load_balancer_calls().len(), 2);
}

#[tokio::test]
async fn a_load_balancer_implemented_elsewhere_is_left_alone() {
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    h.cloud.fail_load_balancer_calls(
        LoadBalancerOp::Ensure,
        Some(GatewayError::ImplementedElsewhere("another controller".into())),
    );
    let svc = h.create(ServiceBuilder::new("web")).await;

    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());

    let stored = h.service("web").await;
    assert!(ingress_ips(&stored).is_empty(), "no status of ours");
    assert_eq!(h.events().await, ["Normal EnsuringLoadBalancer"]);
    assert_eq!(h.reconcile(&stored).await.unwrap(), Action::await_change());
    assert_eq!(h.cloud.load_balancer_calls().len(), 1, "not asked again");
}

// --- shards ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_service_of_a_shard_this_replica_does_not_own_is_left_alone() {
    // Shard leases never granted: this replica owns nothing.
    let h = harness_with(Shards::elected(16), |_, _| Intercept::Pass).await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;

    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());
    h.apply_node(node("n2"));
    assert_eq!(reconcile::sync_nodes(&h.ctx, vec![svc.clone()], 4).await, 0);
    let doomed = h
        .create(
            ServiceBuilder::new("doomed")
                .ports(&[("TCP", 81, 30081)])
                .finalizer(),
        )
        .await;
    h.cloud.add_load_balancer(&doomed);
    let doomed = h.delete("doomed").await;
    assert_eq!(h.reconcile(&doomed).await.unwrap(), Action::await_change());

    assert!(h.requests.sent().is_empty(), "{:?}", h.requests.sent());
    assert!(h.cloud.load_balancer_calls().is_empty());
    assert!(h.events().await.is_empty());
    let stored = h.service("web").await;
    assert!(!has_finalizer(&stored));
    assert_eq!(stored.metadata.resource_version, svc.metadata.resource_version);
    assert!(h.exists("doomed").await, "its finalizer stays for its owner");
}

// --- API errors (upstream's TestProcessServiceCreateOrUpdateK8sError) ------------------------

/// Every status write of `svc-k8s-err` is answered `code`.
async fn status_writes_answered(code: u16, reason: &str) -> Harness {
    let reason = reason.to_owned();
    harness_with(Shards::unconditional(16), move |method, path| {
        if method == Method::PATCH && path.ends_with("/services/svc-k8s-err/status") {
            intercept::status(code, &reason, "answered by the test")
        } else {
            Intercept::Pass
        }
    })
    .await
}

#[tokio::test]
async fn a_conflicting_status_write_fails_the_sync_with_upstreams_message() {
    let h = status_writes_answered(409, "Conflict").await;
    h.list_nodes(&[node("n1")]);
    // With the finalizer already, the status patch is the only write.
    let svc = h.create(ServiceBuilder::new("svc-k8s-err").finalizer()).await;

    let err = h.reconcile(&svc).await.unwrap_err();

    assert!(
        err.to_string()
            .starts_with("failed to update load balancer status: "),
        "{err}"
    );
    assert!(
        h.events()
            .await
            .contains(&"Warning SyncLoadBalancerFailed".to_owned())
    );
    let note = h.note("SyncLoadBalancerFailed").await;
    assert!(
        note.starts_with("Error syncing load balancer: failed to update load balancer status"),
        "{note}"
    );
    assert!(
        h.requests
            .matching(&Method::PATCH, "/services/svc-k8s-err/status")
            .len()
            > 1
    );
    assert!(
        h.requests
            .matching(&Method::PATCH, "/services/svc-k8s-err")
            .iter()
            .all(|r| r.path.ends_with("/status")),
        "no main patch: the finalizer was there"
    );
}

#[tokio::test]
async fn a_status_write_finding_the_service_gone_is_no_error() {
    let h = status_writes_answered(404, "NotFound").await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("svc-k8s-err").finalizer()).await;

    assert_eq!(h.reconcile(&svc).await.unwrap(), Action::await_change());

    assert_eq!(
        h.requests
            .matching(&Method::PATCH, "/services/svc-k8s-err/status")
            .len(),
        1
    );
    assert!(!h.events().await.iter().any(|e| e.starts_with("Warning")));
}

// --- a gateway swapped for another vendor's ---------------------------------------------------

/// The provider the Service records as holding its load balancer.
fn recorded_provider(svc: &Service) -> Option<String> {
    svc.metadata
        .annotations
        .as_ref()?
        .get("service.cloudgateway.io/load-balancer-provider")
        .cloned()
}

#[tokio::test]
async fn an_ensure_during_a_swap_records_the_provider_that_answers_not_the_former_one() {
    // The last answer came from the simulator; the gateway now at the address is pycloud's.
    // Found by the chaos suite (`vendor-swap`): the Service recorded "simulator" while its load
    // balancer was made at pycloud, and was then reported as held by the former vendor, never
    // updated, and its load balancer left at pycloud when it was deleted.
    let h = harness_believing("simulator").await;
    h.cloud.serve_provider(Some("pycloud"));
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;

    h.reconcile(&svc).await.unwrap();

    let svc = h.service("web").await;
    assert_eq!(recorded_provider(&svc).as_deref(), Some("pycloud"));
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Ensure default/web [n1]"]
    );
    // Its next sync is an ordinary one, not a report of a former vendor's load balancer.
    h.patch(
        "web",
        json!({"spec": {"ports": [{"name": "http", "port": 81, "protocol": "TCP"}]}}),
    )
    .await;
    h.reconcile(&h.service("web").await).await.unwrap();
    assert_eq!(h.cloud.load_balancers().len(), 1);
    assert!(
        !h.events().await.iter().any(|e| e.contains("FormerProvider")),
        "{:?}",
        h.events().await
    );
}

#[tokio::test]
async fn a_former_vendors_service_deleted_during_a_swap_is_reported_not_deleted_at_the_new_one() {
    let h = harness_believing("simulator").await;
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    h.reconcile(&svc).await.unwrap();
    assert_eq!(
        recorded_provider(&*h.service("web").await).as_deref(),
        Some("simulator")
    );
    // The swap: pycloud answers at the address; no answer has told the controller yet.
    h.cloud.serve_provider(Some("pycloud"));
    let calls = h.cloud.load_balancer_calls().len();
    let deleted = h.delete("web").await;

    h.reconcile(&deleted).await.unwrap();

    assert!(!h.exists("web").await, "the Service is let go");
    assert_eq!(
        h.cloud.load_balancer_calls().len(),
        calls,
        "nothing asked of the new vendor for the former one's load balancer"
    );
    assert!(
        h.events()
            .await
            .contains(&"Warning LoadBalancerOrphaned".to_owned()),
        "the load balancer left at the former vendor is reported: {:?}",
        h.events().await
    );
}

/// Found by the end-to-end swap from the simulator to OpenStack: at the first node-set change
/// after the swap, the backends update of a simulator load balancer went to the gateway now at
/// the address (OpenStack: "UpdateLoadBalancerFailed … not implemented"; AWS would have been
/// asked to update a load balancer it does not hold), though ensure and cleanup ask first which
/// provider serves. The update asks too: the Service is reported as held by its provider, as an
/// ensure reports it, and nothing is asked of the new vendor.
#[tokio::test]
async fn a_backends_update_after_a_swap_is_not_sent_to_a_vendor_that_does_not_hold_the_load_balancer() {
    for (vendor, load_balancers) in [("openstack", false), ("aws", true)] {
        let h = harness_believing("simulator").await;
        h.serve("simulator", true);
        h.list_nodes(&[node("n1")]);
        let svc = h.create(ServiceBuilder::new("web")).await;
        h.reconcile(&svc).await.unwrap();
        let svc = h.service("web").await;
        assert_eq!(recorded_provider(&svc).as_deref(), Some("simulator"));
        // The swap: no answer has told the controller yet.
        h.serve(vendor, load_balancers);
        h.cloud.clear_load_balancer_calls();

        h.apply_node(node("n2"));
        let failed = reconcile::sync_nodes(&h.ctx, vec![svc.clone()], 4).await;

        assert_eq!(
            h.cloud.described_load_balancer_calls(),
            Vec::<String>::new(),
            "{vendor}: nothing asked of the new vendor for the simulator's load balancer"
        );
        let events = h.events().await;
        assert!(
            !events.contains(&"Warning UpdateLoadBalancerFailed".to_owned()),
            "{vendor}: {events:?}"
        );
        assert_eq!(
            events.last().map(String::as_str),
            Some("Warning LoadBalancerAtFormerProvider"),
            "{vendor}: reported as an ensure reports it: {events:?}"
        );
        let note = h.note("LoadBalancerAtFormerProvider").await;
        assert!(
            note.contains("provider simulator") && note.contains(&format!("now serves {vendor}")),
            "{vendor}: {note}"
        );
        assert_eq!(
            (failed, h.retried()),
            (0, vec![]),
            "{vendor}: not a failure to retry"
        );
        let metrics = h.metrics.render();
        assert!(
            metrics.contains("service_controller_nodesync_error_total 0"),
            "{vendor}: {metrics}"
        );
        assert!(
            metrics.contains(
                "service_lb_controller_load_balancer_at_former_provider{namespace=\"default\",name=\"web\",provider=\"simulator\"} 1"
            ),
            "{vendor}: {metrics}"
        );
        let uid = svc.metadata.uid.as_deref().unwrap();
        assert_eq!(h.cloud.load_balancer(uid).unwrap().backend_names(), ["n1"]);

        // Swapped back: the controller asks again (the Services it reported wait for their
        // provider), and the simulator's load balancer gets the new backends.
        h.serve("simulator", true);
        reconcile::recheck_provider(&h.ctx).await;
        assert_eq!(reconcile::sync_nodes(&h.ctx, vec![svc.clone()], 4).await, 0);
        assert_eq!(
            h.cloud.described_load_balancer_calls(),
            ["Update default/web [n1 n2]"],
            "{vendor}"
        );
        assert_eq!(h.cloud.load_balancer(uid).unwrap().backend_names(), ["n1", "n2"]);
    }
}

/// Found by the end-to-end swap to OpenStack, whose provider serves no load balancers: a Service
/// created meanwhile got the finalizer and the record "openstack" before the call that failed
/// (`SyncLoadBalancerFailed … not implemented`), and after the swap back to the simulator it was
/// reported as held by OpenStack, which never made anything: it never got a load balancer. Now
/// nothing is written to it while no load balancers are served (one Warning says why), and it
/// is provisioned as soon as a provider with load balancers serves.
#[tokio::test]
async fn a_service_created_while_no_load_balancers_are_served_gets_one_when_they_are_again() {
    let h = harness_believing("openstack").await;
    h.serve("openstack", false);
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;

    let result = h.reconcile(&svc).await;

    let stored = h.service("web").await;
    assert!(
        !has_finalizer(&stored) && recorded_provider(&stored).is_none(),
        "nothing written to the Service: {:?}",
        stored.metadata
    );
    assert_eq!(result.unwrap(), Action::await_change(), "not a failure to retry");
    assert_eq!(stored.metadata.resource_version, svc.metadata.resource_version);
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        Vec::<String>::new(),
        "nothing asked of a provider without load balancers"
    );
    assert_eq!(h.events().await, ["Warning LoadBalancersNotServed"]);
    let note = h.note("LoadBalancersNotServed").await;
    assert!(note.contains("provider openstack"), "{note}");
    // Its next change is not reported again, nor written.
    let changed = h
        .patch(
            "web",
            json!({ "metadata": { "annotations": { "lb": "bigger" } } }),
        )
        .await;
    assert_eq!(h.reconcile(&changed).await.unwrap(), Action::await_change());
    assert_eq!(h.events().await.len(), 1);
    assert!(!has_finalizer(&*h.service("web").await));
    // While OpenStack serves, asking again sends nothing back.
    assert_eq!(reconcile::recheck_provider(&h.ctx).await, 0);
    assert!(h.retried().is_empty());

    // The simulator back at the address: the next question finds load balancers, and the
    // Service goes back to the queue, which provisions it as any other.
    h.serve("simulator", true);
    assert_eq!(reconcile::recheck_provider(&h.ctx).await, 1);
    assert_eq!(h.retried(), [ObjectRef::from_obj(&*changed)]);
    let changed = h.service("web").await;
    assert_eq!(h.reconcile(&changed).await.unwrap(), Action::await_change());

    let stored = h.service("web").await;
    assert!(has_finalizer(&stored));
    assert_eq!(recorded_provider(&stored).as_deref(), Some("simulator"));
    assert_eq!(ingress_ips(&stored), ["203.0.113.1"]);
    assert_eq!(
        h.cloud.described_load_balancer_calls(),
        ["Ensure default/web [n1]"]
    );
    assert!(
        !h.events().await.iter().any(|e| e.contains("FormerProvider")),
        "{:?}",
        h.events().await
    );
    // Nothing waits any more: no question is asked.
    let asked = h.gateway.asked.load(Ordering::SeqCst);
    assert_eq!(reconcile::recheck_provider(&h.ctx).await, 0);
    assert_eq!(h.gateway.asked.load(Ordering::SeqCst), asked);
}

/// The swap back noticed by the controller's resync of every Service (an answer naming another
/// provider) rather than by its own question: the Service is provisioned the same.
#[tokio::test]
async fn a_service_that_waited_for_load_balancers_is_provisioned_by_the_resync_after_a_swap() {
    let h = harness_believing("openstack").await;
    h.serve("openstack", false);
    h.list_nodes(&[node("n1")]);
    let svc = h.create(ServiceBuilder::new("web")).await;
    let _ = h.reconcile(&svc).await; // what it comes to: the test above

    h.serve("simulator", true);
    h.reconcile(&h.service("web").await).await.unwrap();

    let stored = h.service("web").await;
    assert_eq!(
        recorded_provider(&stored).as_deref(),
        Some("simulator"),
        "recorded at the provider that made its load balancer, not at one that never made anything"
    );
    assert_eq!(ingress_ips(&stored), ["203.0.113.1"]);
    assert_eq!(
        h.events().await,
        [
            "Warning LoadBalancersNotServed",
            "Normal EnsuringLoadBalancer",
            "Normal EnsuredLoadBalancer"
        ]
    );
    assert!(!h.ctx.waits_for_load_balancers());
}

#[tokio::test]
async fn the_providers_annotations_are_written_with_the_status_and_its_notices_told_once() {
    const ID: &str = "lb.example.org/load-balancer-id";
    let h = harness().await;
    h.list_nodes(&[node("n1")]);
    let notice = (
        "AnnotationValueIgnored",
        "annotation lb.example.org/keep: \"yes\" is not true or false; the default false is used",
    );
    h.cloud.answer_with(
        "lb.example.org/",
        &[(ID, "lb-1"), ("example.com/owner", "x")],
        &[notice],
    );
    let svc = h
        .create(ServiceBuilder::new("web").annotation("lb.example.org/keep", "yes"))
        .await;

    h.reconcile(&svc).await.unwrap();

    let stored = h.service("web").await;
    let annotations = stored.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(ID).map(String::as_str), Some("lb-1"));
    assert!(
        !annotations.contains_key("example.com/owner"),
        "a key outside the provider's prefix is never written: {annotations:?}"
    );
    assert_eq!(
        h.events().await,
        [
            "Normal EnsuringLoadBalancer",
            "Warning AnnotationValueIgnored",
            "Normal EnsuredLoadBalancer"
        ]
    );
    assert_eq!(h.note("AnnotationValueIgnored").await, notice.1);
    assert_eq!(
        h.timeline(),
        [
            "POST events",
            "PATCH services/web",
            "cloud Ensure default/web [n1]",
            "POST events",
            "POST events",
            "PATCH services/web",
            "PATCH services/web/status",
        ],
        "the annotations are written with the status"
    );

    // The watch delivers our own write: no change that needs the cloud.
    h.reconcile(&stored).await.unwrap();
    assert_eq!(h.cloud.load_balancer_calls().len(), 1);

    // Ensured again (the user changed an annotation), with the same notice and a new ID (the
    // load balancer made again): the ID is replaced, the notice not told again.
    h.cloud.answer_with("lb.example.org/", &[(ID, "lb-2")], &[notice]);
    let changed = h
        .patch("web", json!({ "metadata": { "annotations": { "team": "a" } } }))
        .await;
    h.reconcile(&changed).await.unwrap();
    assert_eq!(h.cloud.load_balancer_calls().len(), 2);
    let stored = h.service("web").await;
    assert_eq!(
        stored
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ID))
            .map(String::as_str),
        Some("lb-2")
    );
    let warnings = h
        .events()
        .await
        .into_iter()
        .filter(|e| e.starts_with("Warning"))
        .count();
    assert_eq!(warnings, 1, "told once");
}
