//! The runbooks are tests (issue 38): every `sh` block of docs/migrating-from-openstack-ccm.md,
//! docs/migrating-from-cloud-provider-aws.md and docs/migrating-from-vsphere-cpi.md runs, in
//! order, as written (the convention and
//! the stand-ins are in `runbooks_support`). The cluster is fake-apiserver holding what the
//! vendor's CCM left (its DaemonSet, its cloud config, its Services); `helm install` runs the
//! chart's render as processes (the shadow run, then the switch) on the real cloud: the
//! OpenStack test cloud, moto for AWS, with load balancers made the vendor CCM's way; vcsim for
//! vSphere, with Nodes made as CPI initializes them.
//!
//! The substitution table of each runbook (placeholder → what the test fills in) is the
//! `table` of its test; nothing else of a command is changed.

mod openstack_support;
mod runbooks_support;

use std::time::Duration;

use e2e::{Cluster, ClusterSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::PostParams};
use openstack_fixture::TestCloud;
use runbooks_support::{Runbook, create_as_left, initialize_nodes, local_port, output_of};
use serde_json::json;

/// OCCM's DaemonSet as its manifests ship it (`manifests/controller-manager/…-ds.yaml`): the
/// fields the runbook reads, its label, its `cloud-config` Secret and the node's PKI.
const OCCM_DAEMONSET: &str = "\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: openstack-cloud-controller-manager
  namespace: kube-system
  labels:
    k8s-app: openstack-cloud-controller-manager
spec:
  selector:
    matchLabels:
      k8s-app: openstack-cloud-controller-manager
  template:
    metadata:
      labels:
        k8s-app: openstack-cloud-controller-manager
    spec:
      serviceAccountName: cloud-controller-manager
      hostNetwork: true
      containers:
        - name: openstack-cloud-controller-manager
          image: registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0
          args:
            - /bin/openstack-cloud-controller-manager
            - --v=1
            - --cluster-name=CLUSTER
            - --cloud-config=/etc/config/cloud.conf
            - --cloud-provider=openstack
            - --use-service-account-credentials=false
            - --bind-address=127.0.0.1
          volumeMounts:
            - {mountPath: /etc/kubernetes/pki, name: k8s-certs, readOnly: true}
            - {mountPath: /etc/config, name: cloud-config-volume, readOnly: true}
      volumes:
        - name: k8s-certs
          hostPath: {path: /etc/kubernetes/pki, type: DirectoryOrCreate}
        - name: cloud-config-volume
          secret:
            secretName: cloud-config
";

/// The annotations of the Service OCCM serves before the switch: a bool written `"yes"` (OCCM
/// reads exactly `true`/`false`, else its default: no monitor) and the key older OCCM docs
/// spelled (`floating-subnet-tag`: unknown to OCCM, ignored).
const READ_OTHER_THAN_WRITTEN: [(&str, &str); 2] = [
    ("loadbalancer.openstack.org/enable-health-monitor", "yes"),
    ("loadbalancer.openstack.org/floating-subnet-tag", "public"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_runbook_runs_as_written() {
    use k8s_openapi::api::core::v1::Event;
    use kube::{
        ResourceExt,
        api::{ListParams, Patch, PatchParams},
    };
    use openstack_fixture::{User, lb, occm};

    let cloud = TestCloud::shared();
    let client = cloud.client(User::Ccm).await;
    let cluster_name = cloud.unique_name("runbook");
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let dir = cluster.dir.path().to_owned();

    // The cluster as OCCM left it: a server's Node initialized (by the provider, as OCCM
    // initializes it), a Service on the load balancer OCCM built for it.
    let server = openstack_support::boot(cloud, &client, "runbook-node", "m1.tiny").await;
    let _leftovers = openstack_support::Leftovers::servers([&server]);
    let conf_path = openstack_support::write_cloud_conf(cloud, &dir, None);
    initialize_nodes(
        &mut cluster,
        &openstack_support::gateway_args(&conf_path),
        &[],
        &[&server.name],
        "openstack://",
    )
    .await;
    let annotations: serde_json::Map<String, serde_json::Value> = READ_OTHER_THAN_WRITTEN
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let web = cluster
        .create_lb_service(
            "default",
            "web",
            json!({ "metadata": { "annotations": annotations } }),
        )
        .await;
    let node_port = web.spec.as_ref().and_then(|s| s.ports.as_ref()).expect("ports")[0]
        .node_port
        .expect("a node port") as u16;
    let mut spec = lb::service(cloud, "default", 1, "");
    spec.uid = web.uid().expect("uid");
    spec.name = "web".into();
    spec.ports[0].port = 80;
    spec.ports[0].node_port = node_port;
    spec.annotations = READ_OTHER_THAN_WRITTEN
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let member = provider::LoadBalancerNode {
        name: server.name.clone(),
        provider_id: server.provider_id(),
        addresses: vec![provider::NodeAddress {
            kind: provider::AddressType::InternalIP,
            address: server.ipv4.clone(),
        }],
        labels: Default::default(),
    };
    let built = occm::build(cloud, &client, &cluster_name, &mut spec, &[member]).await;
    let services = cluster.services("default");
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": {
                "finalizers": ["service.kubernetes.io/load-balancer-cleanup"],
                "annotations": spec.annotations,
            }})),
        )
        .await
        .expect("OCCM's finalizer and annotations");
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "status": { "loadBalancer": { "ingress": [{ "ip": built.floating_ip }] } } }),
            ),
        )
        .await
        .expect("OCCM's ingress");
    let octavia_before = occm_tree(&client, &built.id).await;

    // What OCCM left: its Secret as its manifests make it (cloud.conf as OpenShift's operator
    // writes it, its credentials in the clouds.yaml beside it), its DaemonSet.
    let (conf, clouds_yaml) = openstack_support::with_clouds_yaml(
        &std::fs::read_to_string(&conf_path).expect("cloud.conf"),
        "/etc/config/clouds.yaml",
        "",
    );
    create_as_left::<Secret>(
        &cluster,
        json!({
            "metadata": { "name": "cloud-config", "namespace": "kube-system" },
            "stringData": { "cloud.conf": conf, "clouds.yaml": clouds_yaml },
        }),
        "OCCM's cloud-config Secret",
    )
    .await;

    let port = local_port().to_string();
    let table = [
        ("<OCCM's --cluster-name>", cluster_name.clone()),
        // The operator's local port, free here.
        ("18080", port),
    ];
    // The operator's credentials for the `openstack` CLI: those of OCCM's cloud.conf.
    let ccm = &cloud.info.ccm;
    let cli_env = [
        ("OS_AUTH_URL", cloud.info.auth_url.clone()),
        ("OS_REGION_NAME", cloud.info.region.clone()),
        ("OS_USERNAME", ccm.username.clone()),
        ("OS_PASSWORD", ccm.password.clone()),
        ("OS_PROJECT_NAME", ccm.project_name.clone()),
        ("OS_USER_DOMAIN_NAME", ccm.user_domain_name.clone()),
        ("OS_PROJECT_DOMAIN_NAME", ccm.project_domain_name.clone()),
    ];
    let (runner, mut kubelet, ran) = Runbook {
        path: "docs/migrating-from-openstack-ccm.md",
        daemonset: (
            "openstack-cloud-controller-manager.yaml",
            &OCCM_DAEMONSET.replace("CLUSTER", &cluster_name),
        ),
        table: &table,
        cli_env: &cli_env,
        kubelet_env: &[],
    }
    .run(&cluster)
    .await;
    let daemonsets = runner.state.join("daemonsets");

    // §0 found OCCM's Secret and flags; §1's shadow run listed no Warning; §3: no write, the
    // same addresses; §4: OCCM's DaemonSet back, the release gone.
    let extensions = output_of(&ran, "openstack extension list --network");
    assert!(
        extensions.lines().any(|l| l == "standard-attr-tag") && extensions.lines().any(|l| l == "extraroute"),
        "the router-tag prerequisite: {extensions}"
    );
    let found = output_of(&ran, "get ds openstack-cloud-controller-manager \\");
    assert!(found.starts_with("cloud-config\n"), "{found}");
    assert!(
        found.contains(&format!("--cluster-name={cluster_name}")),
        "{found}"
    );
    // §1 and §3 waited for a full pass of each enabled controller, the service controller's
    // over the one LoadBalancer Service.
    let waits: Vec<&str> = ran
        .iter()
        .filter(|r| r.command.contains("bash full-pass.sh"))
        .map(|r| r.stdout.as_str())
        .collect();
    assert_eq!(waits.len(), 2, "§1 and §3 wait for a full pass");
    for output in waits {
        let reached = full_pass(output);
        assert!(
            reached
                .iter()
                .any(|(c, _, want)| c == "service-lb-controller" && *want == 1),
            "{output}"
        );
    }
    // The shadow run listed, before the switch, the Service whose annotations OCCM reads other
    // than written: one Warning per annotation, naming it and what is used instead.
    let warnings: Vec<&str> = output_of(&ran, "select(.kind == \"warning_event\")")
        .lines()
        .filter(|l| !l.starts_with("Forwarding from"))
        .collect();
    assert_eq!(warnings.len(), 2, "the shadow run's Warnings: {warnings:#?}");
    for (key, value) in READ_OTHER_THAN_WRITTEN {
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("Service/default/web ") && w.contains(key) && w.contains(value)),
            "a Warning naming {key}={value}: {warnings:#?}"
        );
    }
    // After the switch: the load balancer OCCM built served with no write (§3's log check and
    // the same address), its tree as OCCM left it; the Service's two Warnings written once each.
    assert_eq!(
        output_of(&ran, "logs deploy/ccm-shadow-cloud-gateway"),
        "no write\n"
    );
    assert_eq!(
        occm_tree(&client, &built.id).await,
        octavia_before,
        "OCCM's load balancer untouched"
    );
    let after = services.get("web").await.expect("web");
    assert_eq!(
        after
            .status
            .and_then(|s| s.load_balancer?.ingress?.into_iter().next()?.ip),
        Some(built.floating_ip.clone())
    );
    let events_api = Api::<Event>::namespaced(cluster.client.clone(), "default");
    let events: Vec<Event> = e2e::wait_for(
        "the Warnings the switch wrote on web",
        Duration::from_secs(30),
        || {
            let events_api = events_api.clone();
            async move {
                let warnings: Vec<Event> = events_api
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter(|e| {
                        e.involved_object.name.as_deref() == Some("web")
                            && e.type_.as_deref() == Some("Warning")
                    })
                    .collect();
                (warnings.len() >= READ_OTHER_THAN_WRITTEN.len()).then_some(warnings)
            }
        },
    )
    .await;
    for (key, _) in READ_OTHER_THAN_WRITTEN {
        let naming: Vec<&Event> = events
            .iter()
            .filter(|e| e.message.as_deref().is_some_and(|m| m.contains(key)))
            .collect();
        assert_eq!(naming.len(), 1, "one Warning naming {key}: {events:#?}");
        assert_eq!(naming[0].count.unwrap_or(1), 1, "said once: {:#?}", naming[0]);
    }
    assert!(
        daemonsets
            .join("openstack-cloud-controller-manager.yaml")
            .is_file()
    );
    assert!(!runner.state.join("releases/ccm-shadow.json").exists());
    kubelet.stop().await;
    cluster.stop().await;
}

/// Each enabled controller's (reconciles, objects) in the output of a runbook's "wait for one
/// full pass" command; fails the test when one never finished its pass.
fn full_pass(output: &str) -> Vec<(String, u64, u64)> {
    let reached: Vec<(String, u64, u64)> = output
        .lines()
        .filter_map(|l| {
            let (controller, counts) = l.split_once(": ")?;
            let (n, want) = counts.split_once(" reconciles, one full pass is ")?;
            Some((controller.to_owned(), n.parse().ok()?, want.parse().ok()?))
        })
        .collect();
    assert!(
        reached.iter().all(|(_, n, want)| *want >= 1 && n >= want),
        "a controller never finished its pass: {output}"
    );
    reached
}

/// What OCCM built under load balancer `id` as Octavia lists it, for a before/after comparison:
/// the load balancer's tags and status, its listeners, pools and members (ids, names, addresses,
/// ports, updated_at), and its monitors.
async fn occm_tree(client: &provider_openstack::client::Client, id: &str) -> Vec<serde_json::Value> {
    use provider_openstack::client::Service;
    let get = |path: String| async move {
        client
            .get(Service::LoadBalancer, &path)
            .send_json::<serde_json::Value>()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let lb = get(format!("/lbaas/loadbalancers/{id}")).await["loadbalancer"].clone();
    let mut tree =
        vec![json!({ "tags": lb["tags"], "updated_at": lb["updated_at"], "vip": lb["vip_address"] })];
    for pool in lb["pools"].as_array().cloned().unwrap_or_default() {
        let pool_id = pool["id"].as_str().unwrap_or_default().to_owned();
        let pool = get(format!("/lbaas/pools/{pool_id}")).await["pool"].clone();
        tree.push(json!({ "pool": pool["name"], "updated_at": pool["updated_at"], "monitor": pool["healthmonitor_id"] }));
        let members = get(format!("/lbaas/pools/{pool_id}/members")).await;
        for m in members["members"].as_array().cloned().unwrap_or_default() {
            tree.push(json!({ "member": m["name"], "address": m["address"], "port": m["protocol_port"], "updated_at": m["updated_at"] }));
        }
    }
    for listener in lb["listeners"].as_array().cloned().unwrap_or_default() {
        let listener_id = listener["id"].as_str().unwrap_or_default().to_owned();
        let listener = get(format!("/lbaas/listeners/{listener_id}")).await["listener"].clone();
        tree.push(json!({ "listener": listener["name"], "updated_at": listener["updated_at"], "tags": listener["tags"] }));
    }
    tree
}

/// The cluster ID of upstream's cloud config.
const AWS_CLUSTER_ID: &str = "runbook-east";

/// cloud-provider-aws's DaemonSet as its manifests ship it: its label and flags.
const UPSTREAM_DAEMONSET: &str = "\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: aws-cloud-controller-manager
  namespace: kube-system
  labels:
    k8s-app: aws-cloud-controller-manager
spec:
  selector:
    matchLabels:
      k8s-app: aws-cloud-controller-manager
  template:
    metadata:
      labels:
        k8s-app: aws-cloud-controller-manager
    spec:
      hostNetwork: true
      serviceAccountName: cloud-controller-manager
      containers:
        - name: aws-cloud-controller-manager
          image: registry.k8s.io/provider-aws/cloud-controller-manager:v1.31.0
          args: [--v=2, --cloud-provider=aws, --cloud-config=/etc/aws/cloud.conf, --configure-cloud-routes=false]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_runbook_runs_as_written() {
    use aws_fixture::{
        Cloud,
        upstream::{self, Identity, Port},
    };
    use e2e::{MOTO_ENV, aws_gateway_args, start_moto};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::{
        ResourceExt,
        api::{Patch, PatchParams},
    };

    let moto_dir = tempfile::tempdir().unwrap();
    let (_moto, moto) = start_moto(moto_dir.path()).await;
    let endpoint = format!("http://{moto}");
    let cloud = Cloud::connect(&endpoint).await;
    let network = cloud.network(AWS_CLUSTER_ID).await;
    let a = cloud.run_instance(&network, 0).await;
    let b = cloud.run_instance(&network, 1).await;

    // The cluster as upstream left it: its Nodes initialized, a Service on its Classic ELB.
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let args = aws_gateway_args(&endpoint, &network.vpc_id, &["--aws-cluster-id", AWS_CLUSTER_ID]);
    initialize_nodes(
        &mut cluster,
        &args,
        &MOTO_ENV,
        &[&a.node_name, &b.node_name],
        "aws://",
    )
    .await;
    let web = cluster.create_lb_service("default", "web", json!({})).await;
    let service = upstream::Service {
        uid: web.uid().expect("uid"),
        namespace: "default".into(),
        name: "web".into(),
        ports: vec![Port {
            port: 80,
            node_port: web.spec.as_ref().and_then(|s| s.ports.as_ref()).expect("ports")[0]
                .node_port
                .expect("a node port") as u16,
            tls: false,
        }],
        source_ranges: Vec::new(),
        ssl_cert: None,
    };
    let id = Identity {
        cluster_id: AWS_CLUSTER_ID.into(),
        legacy: false,
    };
    let built = cloud
        .classic_as_upstream(&network, &id, &service, &[a.clone(), b.clone()])
        .await;
    let services = cluster.services("default");
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "finalizers": ["service.kubernetes.io/load-balancer-cleanup"] } }),
            ),
        )
        .await
        .expect("upstream's finalizer");
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "status": { "loadBalancer": { "ingress": [{ "hostname": built.dns_name }] } } }),
            ),
        )
        .await
        .expect("upstream's ingress");
    let before = cloud.census(&network).await;

    // Upstream's cloud config: its cluster ID, its region, moto as its endpoints (an off-AWS
    // cluster's ServiceOverrides).
    let conf = format!(
        "[Global]\nRegion = us-east-1\nKubernetesClusterID = {AWS_CLUSTER_ID}\n\n\
         [ServiceOverride \"ec2\"]\nService = ec2\nRegion = us-east-1\nURL = {endpoint}\nSigningRegion = us-east-1\n\n\
         [ServiceOverride \"elb\"]\nService = elasticloadbalancing\nRegion = us-east-1\nURL = {endpoint}\nSigningRegion = us-east-1\n"
    );
    create_as_left::<ConfigMap>(
        &cluster,
        json!({
            "metadata": { "name": "aws-cloud-config", "namespace": "kube-system" },
            "data": { "cloud.conf": conf },
        }),
        "upstream's cloud config",
    )
    .await;

    let port = local_port().to_string();
    let table = [
        (
            "<upstream's cloud-config ConfigMap>",
            "aws-cloud-config".to_owned(),
        ),
        ("<upstream's --cluster-name>", "kubernetes".to_owned()),
        ("<role>", "arn:aws:iam::123456789012:role/ccm".to_owned()),
        ("<instance>", a.id.clone()),
        ("18080", port),
    ];
    // The aws CLI on moto, by the environment only.
    let cli_env: Vec<(&str, String)> = MOTO_ENV
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .chain([
            ("AWS_ENDPOINT_URL", endpoint.clone()),
            ("AWS_DEFAULT_REGION", "us-east-1".to_owned()),
        ])
        .collect();
    let (runner, mut kubelet, ran) = Runbook {
        path: "docs/migrating-from-cloud-provider-aws.md",
        daemonset: ("aws-cloud-controller-manager.yaml", UPSTREAM_DAEMONSET),
        table: &table,
        cli_env: &cli_env,
        // The static test keys stand in for IRSA's.
        kubelet_env: &MOTO_ENV,
    }
    .run(&cluster)
    .await;
    let daemonsets = runner.state.join("daemonsets");

    // §1: one full pass waited for (3 controllers enabled: each reached its count), then every
    // list empty (4 controllers and the gateway answered); §3: no write, the same hostname, AWS
    // as upstream left it; §4: upstream's DaemonSet back.
    let passes = output_of(&ran, "one full pass is $want");
    assert_eq!(full_pass(passes).len(), 3, "{passes}");
    let lists = output_of(&ran, "/dry-run; echo");
    let answered: Vec<&str> = lists.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(answered.len(), 4, "{lists}");
    for list in lists.lines().filter(|l| l.starts_with('{')) {
        let list: serde_json::Value = serde_json::from_str(list).expect("a /dry-run list");
        assert_eq!(list["total"], 0, "planned beside upstream: {list}");
    }
    assert_eq!(lists.lines().filter(|l| l.starts_with('{')).count(), 4, "{lists}");
    let tags = output_of(&ran, "aws ec2 describe-tags");
    assert!(
        tags.contains(&format!("kubernetes.io/cluster/{AWS_CLUSTER_ID}")),
        "{tags}"
    );
    assert_eq!(output_of(&ran, "grep 'AWS write'"), "no write\n");
    assert_eq!(cloud.census(&network).await, before, "AWS as upstream left it");
    assert!(daemonsets.join("aws-cloud-controller-manager.yaml").is_file());
    kubelet.stop().await;
    cluster.stop().await;
}

/// CPI's DaemonSet as its release manifests ship it: its label, flags and ConfigMap.
const CPI_DAEMONSET: &str = "\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: vsphere-cloud-controller-manager
  namespace: kube-system
  labels:
    k8s-app: vsphere-cloud-controller-manager
spec:
  selector:
    matchLabels:
      k8s-app: vsphere-cloud-controller-manager
  template:
    metadata:
      labels:
        k8s-app: vsphere-cloud-controller-manager
    spec:
      hostNetwork: true
      serviceAccountName: cloud-controller-manager
      containers:
        - name: vsphere-cloud-controller-manager
          image: registry.k8s.io/cloud-pv-vsphere/cloud-provider-vsphere:v1.31.0
          args: [--v=2, --cloud-provider=vsphere, --cloud-config=/etc/cloud/vsphere.conf]
          volumeMounts:
            - {mountPath: /etc/cloud, name: vsphere-config-volume, readOnly: true}
      volumes:
        - name: vsphere-config-volume
          configMap:
            name: vsphere-cloud-config
";

/// A Node as CPI leaves it after initializing it (its rules, written out here rather than asked
/// of our provider, so that the shadow run compares the two): providerID `vsphere://<BIOS
/// UUID>`, the cloud node controller's labels (GA and beta) for CPI's instance type and the
/// zone and region tags, addresses Hostname, then the first address of `guest.net` as
/// InternalIP and, with no `[Nodes]` rule, as ExternalIP too; no uninitialized taint.
fn node_as_cpi_left_it(
    vm: &vsphere_fixture::Vm,
    zone: &str,
    region: &str,
) -> k8s_openapi::api::core::v1::Node {
    let instance_type = format!(
        "vsphere-vm.cpu-{}.mem-{}gb.os-ubuntu",
        vm.num_cpu,
        vm.memory_mb / 1024
    );
    let ip = &vm.guest.ip_address;
    serde_json::from_value(json!({
        "metadata": { "name": vm.name, "labels": {
            "kubernetes.io/hostname": vm.name,
            "node.kubernetes.io/instance-type": instance_type,
            "beta.kubernetes.io/instance-type": instance_type,
            "topology.kubernetes.io/zone": zone,
            "failure-domain.beta.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": region,
            "failure-domain.beta.kubernetes.io/region": region,
        }},
        "spec": { "providerID": format!("vsphere://{}", vm.uuid) },
        "status": {
            "addresses": [
                { "type": "Hostname", "address": vm.guest.host_name },
                { "type": "InternalIP", "address": ip },
                { "type": "ExternalIP", "address": ip },
            ],
            "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z" }],
        },
    }))
    .expect("a Node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vsphere_runbook_runs_as_written() {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use kube::api::{Patch, PatchParams};
    use vsphere_fixture::{Vcsim, Vm, unique};

    let vcsim = Vcsim::shared();
    // Two VMs of two sizes in a tagged cluster and datacenter.
    let mut a = Vm::ubuntu("runbook-a", &vcsim.unique_ipv4());
    let mut b = Vm::ubuntu("runbook-b", &vcsim.unique_ipv4());
    (a.num_cpu, a.memory_mb) = (2, 4096);
    (b.num_cpu, b.memory_mb) = (4, 8192);
    let moref = vcsim.create_vm(&a);
    vcsim.create_vm(&b);
    let placed = vcsim.placement(&moref);
    let (zones, regions) = (unique("runbook-zone"), unique("runbook-region"));
    let zone = vcsim.create_tag(&vcsim.create_category(&zones), "zone-a");
    let region = vcsim.create_tag(&vcsim.create_category(&regions), "region-1");
    vcsim.attach_tag(&zone, &placed["cluster"]);
    vcsim.attach_tag(&region, &placed["datacenter"]);

    // The cluster as CPI left it: its Nodes initialized, its ConfigMap and Secret as its
    // release manifests make them (vsphere.conf in YAML, the credentials in the Secret only).
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    cluster.stop_gateway().await;
    let nodes: Api<Node> = cluster.nodes();
    for vm in [&a, &b] {
        let node = node_as_cpi_left_it(vm, "zone-a", "region-1");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("a Node CPI initialized");
        nodes
            .patch_status(
                &vm.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": node.status })),
            )
            .await
            .expect("its status");
    }
    let before: Vec<Node> = nodes.list(&Default::default()).await.expect("Nodes").items;
    let server = &vcsim.info.server;
    let conf = format!(
        "global:\n  port: {}\n  caFile: {}\n  secretName: vsphere-cloud-secret\n  secretNamespace: kube-system\n\n\
         vcenter:\n  {server}:\n    server: {server}\n    datacenters:\n      - DC0\n\n\
         labels:\n  region: {regions}\n  zone: {zones}\n",
        vcsim.info.port,
        vcsim.ca_file().display()
    );
    create_as_left::<ConfigMap>(
        &cluster,
        json!({
            "metadata": { "name": "vsphere-cloud-config", "namespace": "kube-system" },
            "data": { "vsphere.conf": conf },
        }),
        "CPI's ConfigMap",
    )
    .await;
    create_as_left::<Secret>(
        &cluster,
        json!({
            "metadata": { "name": "vsphere-cloud-secret", "namespace": "kube-system" },
            "stringData": {
                format!("{server}.username"): vcsim.info.username,
                format!("{server}.password"): vcsim.info.password,
            },
        }),
        "CPI's Secret",
    )
    .await;

    let (runner, mut kubelet, ran) = Runbook {
        path: "docs/migrating-from-vsphere-cpi.md",
        daemonset: ("vsphere-cloud-controller-manager.yaml", CPI_DAEMONSET),
        table: &[("18080", local_port().to_string())],
        cli_env: &[],
        kubelet_env: &[],
    }
    .run(&cluster)
    .await;
    let daemonsets = runner.state.join("daemonsets");

    // §0 found CPI's ConfigMap, flags and Secret; §1 and §3 waited for a full pass of both node
    // controllers over the two Nodes; the shadow planned nothing; §3's diff is empty; §4: CPI's
    // DaemonSet back, the release gone.
    let found = output_of(&ran, "get ds vsphere-cloud-controller-manager \\");
    assert!(found.starts_with("vsphere-cloud-config\n"), "{found}");
    assert!(found.contains("secretName: vsphere-cloud-secret"), "{found}");
    let waits: Vec<&str> = ran
        .iter()
        .filter(|r| r.command.contains("bash full-pass.sh"))
        .map(|r| r.stdout.as_str())
        .collect();
    assert_eq!(waits.len(), 2, "§1 and §3 wait for a full pass");
    for output in waits {
        let reached: Vec<(&str, u64, u64)> = output
            .lines()
            .filter_map(|l| {
                let (metric, counts) = l.split_once(": ")?;
                let (n, want) = counts.split_once(", one full pass is ")?;
                Some((metric, n.parse().ok()?, want.parse().ok()?))
            })
            .collect();
        // The reconciles over both Nodes, an address refresh, a lifecycle pass: each reached.
        let wanted: Vec<(&str, u64)> = reached.iter().map(|(m, _, want)| (*m, *want)).collect();
        assert_eq!(
            wanted,
            [
                ("cloud_node_controller_reconcile_total", 2),
                ("cloud_node_controller_address_refreshes_total", 1),
                ("cloud_node_lifecycle_controller_reconcile_total", 1),
            ],
            "{output}"
        );
        assert!(reached.iter().all(|(_, n, want)| n >= want), "{output}");
    }
    let lists = output_of(&ran, "jq -c '{total, planned}'");
    let answered: Vec<&str> = lists.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(answered.len(), 3, "{lists}");
    let totals: Vec<serde_json::Value> = lists
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a /dry-run list"))
        .collect();
    assert_eq!(totals.len(), 3, "{lists}");
    for list in &totals {
        assert_eq!(list["total"], 0, "planned beside CPI: {list}");
    }
    assert_eq!(output_of(&ran, "diff nodes-before.txt nodes-after.txt"), "");
    let recorded = std::fs::read_to_string(runner.work.join("nodes-before.txt")).expect("nodes-before.txt");
    assert_eq!(recorded.lines().count(), 2, "{recorded}");
    // The Nodes as CPI left them: providerID, labels and addresses, no taint.
    let after: Vec<Node> = nodes.list(&Default::default()).await.expect("Nodes").items;
    let view = |n: &Node| {
        (
            n.metadata.name.clone(),
            n.spec.as_ref().and_then(|s| s.provider_id.clone()),
            n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default(),
            n.metadata.labels.clone(),
            n.status.as_ref().and_then(|s| s.addresses.clone()),
        )
    };
    assert_eq!(
        after.iter().map(view).collect::<Vec<_>>(),
        before.iter().map(view).collect::<Vec<_>>()
    );
    assert!(daemonsets.join("vsphere-cloud-controller-manager.yaml").is_file());
    assert!(!runner.state.join("releases/ccm-shadow.json").exists());
    kubelet.stop().await;
    cluster.stop().await;
}
