#!/usr/bin/env bash
# Checks the deployment artefacts with real tools (installed by scripts/tools/setup.sh):
# - docker/Dockerfile with hadolint;
# - the Helm chart with `helm lint --strict`, and its rendered manifests (simulator, AWS and
#   OpenStack gateways, the service controller with non-default values, the route controller on) against
#   Kubernetes 1.33's schemas with kubernetes-validate --strict;
# - that switching the gateway's vendor leaves every controller manifest unchanged, so a
#   `helm upgrade` of the gateway never restarts a controller;
# - the OpenStack gateway: the OpenStack CCM's cloud.conf from a Secret (required), mounted into
#   the gateway alone and passed once as --cloud-config; OS_CCM_REGIONAL and the CA bundle on request;
# - the service controller's defaults (2 replicas sharing the work, its flags) and that no
#   controller's RBAC grants access to secrets;
# - the route controller: off by default (as upstream), on it needs a cluster CIDR, runs
#   leader-elected replicas with its flags and least-privilege RBAC;
# - mutual TLS on by default: the gateway's --tls-* flags, https and the --gateway-tls-* flags
#   for every controller, each pod mounting only its own certificate (no controller pod mounts
#   the gateway's cloud-credentials Secret, no pod the CA's key), the generated certificates
#   (names, chain, keys) and the authorization policy; the cert-manager, existing-Secrets and
#   plain-text variants; renders stable apart from the generated certificates, which a re-render
#   against a (stub) cluster holding them re-uses, as `helm upgrade` does;
# - the NetworkPolicy on the gateway's gRPC port, and values.schema.json refusing a misspelled
#   value.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=.tools
command -v openssl >/dev/null || { echo "openssl is needed to check the chart's certificates" >&2; exit 1; }
"$tools/venv/bin/hadolint" --ignore DL3059 docker/Dockerfile
"$tools/helm" lint --strict charts/ccm
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tools/helm" template ccm charts/ccm -n kube-system > "$out/simulator.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system \
  --set gateway.provider=aws --set gateway.aws.region=eu-west-1 \
  --set 'gateway.aws.subnetIDs={subnet-a,subnet-b}' --set gateway.aws.credentialsSecret=aws-creds \
  > "$out/aws.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system \
  --set serviceLbController.replicas=3 \
  --set serviceLbController.loadBalancerClass=example.com/internal \
  --set 'serviceLbController.extraArgs={--gateway-timeout=10s}' \
  > "$out/service-lb-custom.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set serviceLbController.enabled=false \
  > "$out/service-lb-disabled.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set nodeRouteController.enabled=true \
  --set 'nodeRouteController.clusterCIDR=10.244.0.0/16\,fd00:10::/56' \
  --set nodeRouteController.routeReconciliationPeriod=30s \
  > "$out/node-route.yaml"
# The Grafana dashboard ConfigMap, on request.
"$tools/helm" template ccm charts/ccm -n kube-system --set dashboards.enabled=true \
  > "$out/dashboards.yaml"
grep -q 'grafana_dashboard: "1"' "$out/dashboards.yaml" || { echo "dashboards.enabled rendered no dashboard" >&2; exit 1; }
# cloud-provider-aws's cloud-config file: inline (a ConfigMap the chart renders), or the key of
# an existing ConfigMap or Secret; each mounted into the gateway only and passed as --cloud-config.
aws_cc=(--set gateway.provider=aws --set gateway.aws.region=eu-west-1)
"$tools/helm" template ccm charts/ccm -n kube-system "${aws_cc[@]}" \
  --set-string 'gateway.aws.cloudConfig=[Global]\nKubernetesClusterID = prod' > "$out/aws-cloud-config-inline.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system "${aws_cc[@]}" \
  --set gateway.aws.cloudConfigFrom.configMap=aws-cloud-config > "$out/aws-cloud-config-configmap.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system "${aws_cc[@]}" \
  --set gateway.aws.cloudConfigFrom.secret=aws-cloud-config --set gateway.aws.cloudConfigFrom.key=cloud.cfg \
  > "$out/aws-cloud-config-secret.yaml"
for f in "$out"/aws-cloud-config-*.yaml; do
  [ "$(grep -c -- '--cloud-config=/etc/cloud-gateway/cloud-config/cloud.conf' "$f")" = 1 ] \
    && [ "$(grep -c 'mountPath: /etc/cloud-gateway/cloud-config' "$f")" = 1 ] \
    || { echo "$f: the gateway must get --cloud-config and its mount (once)" >&2; exit 1; }
done
grep -q 'name: ccm-cloud-gateway-cloud-config' "$out/aws-cloud-config-inline.yaml" \
  && grep -q 'checksum/cloud-config' "$out/aws-cloud-config-inline.yaml" \
  && grep -q 'name: aws-cloud-config' "$out/aws-cloud-config-configmap.yaml" \
  && grep -q 'secretName: aws-cloud-config' "$out/aws-cloud-config-secret.yaml" \
  && grep -q 'key: "cloud.cfg"' "$out/aws-cloud-config-secret.yaml" \
  || { echo "gateway.aws.cloudConfig / cloudConfigFrom rendered the wrong volume" >&2; exit 1; }
! grep -q -- '--cloud-config' "$out/aws.yaml" \
  || { echo "no cloud config was asked for, yet --cloud-config is passed" >&2; exit 1; }
echo "cloud config: inline, from a ConfigMap or a Secret, mounted into the gateway as --cloud-config"
# OpenStack: the OpenStack CCM's cloud.conf from a Secret (it holds the credentials), mounted into
# the gateway only; regional providerIDs and a CA bundle on request.
os_cc=(--set gateway.provider=openstack --set gateway.openstack.cloudConfigSecret.name=occm-cloud-config)
"$tools/helm" template ccm charts/ccm -n kube-system "${os_cc[@]}" > "$out/openstack.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system "${os_cc[@]}" \
  --set gateway.openstack.cloudConfigSecret.key=cloud-config --set gateway.openstack.regional=true \
  --set gateway.openstack.caSecret.name=occm-ca --set gateway.openstack.caSecret.key=root.pem \
  > "$out/openstack-full.yaml"
for f in "$out"/openstack.yaml "$out"/openstack-full.yaml; do
  [ "$(grep -c -- '--cloud-config=/etc/config/cloud' "$f")" = 1 ] \
    && [ "$(grep -c 'mountPath: /etc/config,' "$f")" = 1 ] \
    && [ "$(grep -c 'secretName: occm-cloud-config' "$f")" = 1 ] \
    || { echo "$f: the gateway must get --cloud-config and the cloud-config Secret's mount (once)" >&2; exit 1; }
done
grep -q -- '--cloud-config=/etc/config/cloud.conf$' "$out/openstack.yaml" \
  && ! grep -q 'OS_CCM_REGIONAL\|openstack-ca' "$out/openstack.yaml" \
  && grep -q -- '--cloud-config=/etc/config/cloud-config$' "$out/openstack-full.yaml" \
  && [ "$(grep -c 'name: OS_CCM_REGIONAL, value: "true"' "$out/openstack-full.yaml")" = 1 ] \
  && [ "$(grep -c 'mountPath: /etc/cloud-gateway/openstack-ca' "$out/openstack-full.yaml")" = 1 ] \
  && grep -q 'key: "root.pem", path: ca.crt' "$out/openstack-full.yaml" \
  || { echo "gateway.openstack: wrong cloud.conf key, OS_CCM_REGIONAL or CA bundle" >&2; exit 1; }
echo "openstack: cloud.conf from a Secret as --cloud-config; OS_CCM_REGIONAL and the CA bundle on request"
# OCCM's own Secret taken as it is, by its name alone (key cloud.conf), with what operators set on
# OCCM's chart: hostAliases, extra volumes and mounts (a CA under /etc/kubernetes/pki), a
# PriorityClass, and the node's network for the gateway.
"$tools/helm" template ccm charts/ccm -n kube-system --set gateway.provider=openstack \
  --set gateway.openstack.cloudConfigSecret=cloud-config \
  --set gateway.hostNetwork=true --set gateway.httpPort=10268 \
  --set 'gateway.hostAliases[0].ip=10.0.0.1' --set 'gateway.hostAliases[0].hostnames[0]=keystone.example.com' \
  --set 'gateway.extraVolumes[0].name=k8s-certs' --set 'gateway.extraVolumes[0].hostPath.path=/etc/kubernetes/pki' \
  --set 'gateway.extraVolumeMounts[0].name=k8s-certs' --set 'gateway.extraVolumeMounts[0].mountPath=/etc/kubernetes/pki' \
  --set 'gateway.extraVolumeMounts[0].readOnly=true' \
  --set gateway.priorityClassName=occm-critical --set controllers.priorityClassName= \
  > "$out/openstack-occm-values.yaml" 2> "$out/openstack-occm-values.err"
"$tools/venv/bin/python" - "$out/openstack-occm-values.yaml" "$out/openstack-occm-values.err" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
warnings = open(sys.argv[2]).read()
assert "warning" not in warnings, f"helm warned: {warnings}"
deploys = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"}
gw = deploys.pop("ccm-cloud-gateway")
vols = {v["name"]: v for v in gw["volumes"]}
assert vols["cloud-config"]["secret"]["secretName"] == "cloud-config", vols["cloud-config"]
# All of OCCM's Secret, where OCCM mounts it: a clouds.yaml beside cloud.conf is found.
assert "items" not in vols["cloud-config"]["secret"], vols["cloud-config"]
assert "--cloud-config=/etc/config/cloud.conf" in gw["containers"][0]["args"], gw["containers"][0]["args"]
assert {"name": "cloud-config", "mountPath": "/etc/config", "readOnly": True} in gw["containers"][0]["volumeMounts"]
assert vols["k8s-certs"] == {"name": "k8s-certs", "hostPath": {"path": "/etc/kubernetes/pki"}}, vols
mounts = {m["name"]: m for m in gw["containers"][0]["volumeMounts"]}
assert mounts["k8s-certs"] == {"name": "k8s-certs", "mountPath": "/etc/kubernetes/pki", "readOnly": True}, mounts
assert gw["hostNetwork"] is True and gw["dnsPolicy"] == "ClusterFirstWithHostNet", gw
assert gw["hostAliases"] == [{"ip": "10.0.0.1", "hostnames": ["keystone.example.com"]}], gw["hostAliases"]
assert gw["priorityClassName"] == "occm-critical", gw
assert "--http-listen=0.0.0.0:10268" in gw["containers"][0]["args"], gw["containers"][0]["args"]
for name, spec in deploys.items():
    assert "priorityClassName" not in spec, f"{name}: controllers.priorityClassName empty, yet {spec.get('priorityClassName')}"
    assert "k8s-certs" not in str(spec), f"{name}: the gateway's extra volume reached a controller"
print("openstack: OCCM's Secret by name, hostAliases, extra volumes, PriorityClass and hostNetwork for the gateway")
PY
# vSphere: CPI's ConfigMap vsphere-cloud-config (key vsphere.conf) and Secret vsphere-cloud-secret
# by default, as CPI's chart and manifests name them; a Secret for vsphere.conf, or no
# credentials Secret, on request. Both on the gateway alone; the Secret at CPI's default
# secrets-directory, named by VSPHERE_SECRETS_DIRECTORY.
"$tools/helm" template ccm charts/ccm -n kube-system --set gateway.provider=vsphere > "$out/vsphere.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set gateway.provider=vsphere \
  --set gateway.vsphere.cloudConfigFrom.configMap= --set gateway.vsphere.cloudConfigFrom.secret=cpi-conf \
  --set gateway.vsphere.cloudConfigFrom.key=cloud.yaml --set gateway.vsphere.credentialsSecret= \
  > "$out/vsphere-secret.yaml"
"$tools/venv/bin/python" - "$out/vsphere.yaml" "$out/vsphere-secret.yaml" <<'PY'
import sys, yaml
GW = "ccm-cloud-gateway"
for path, conf, creds in ((sys.argv[1], ("configMap", "vsphere-cloud-config", "vsphere.conf"), "vsphere-cloud-secret"),
                          (sys.argv[2], ("secret", "cpi-conf", "cloud.yaml"), None)):
    deployments = {d["metadata"]["name"]: d for d in yaml.safe_load_all(open(path)) if d and d["kind"] == "Deployment"}
    spec = deployments[GW]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert "--provider=vsphere" in c["args"] and "--cloud-config=/etc/cloud-gateway/vsphere/vsphere.conf" in c["args"], c["args"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    kind, name, key = conf
    v = volumes[mounts["/etc/cloud-gateway/vsphere"]["name"]]
    source = v[kind]
    assert source.get("name", source.get("secretName")) == name, v
    assert source["items"] == [{"key": key, "path": "vsphere.conf"}], v
    if creds:
        v = volumes[mounts["/etc/cloud/secrets"]["name"]]
        assert v["secret"] == {"secretName": creds, "defaultMode": 0o440, "optional": True}, v
        assert c["env"] == [{"name": "VSPHERE_SECRETS_DIRECTORY", "value": "/etc/cloud/secrets"}], c.get("env")
    else:
        assert "/etc/cloud/secrets" not in mounts and "env" not in c, c
    for m in mounts.values():
        assert m.get("readOnly") is True or m["mountPath"] not in ("/etc/cloud-gateway/vsphere", "/etc/cloud/secrets"), m
    for n, d in deployments.items():
        if n != GW:
            assert "vsphere" not in str(d["spec"]["template"]["spec"].get("volumes", [])), f"{n} mounts vSphere's config"
print("vsphere: CPI's ConfigMap vsphere-cloud-config and Secret vsphere-cloud-secret on the gateway alone; a Secret for vsphere.conf on request")
PY
# Shadow mode: dryRun passes --dry-run to the gateway and to every controller, and only then.
"$tools/helm" template ccm charts/ccm -n kube-system --set dryRun=true --set nodeRouteController.enabled=true \
  --set nodeRouteController.clusterCIDR=10.244.0.0/16 \
  > "$out/dry-run.yaml"
[ "$(grep -c -- '- --dry-run$' "$out/dry-run.yaml")" = 5 ] \
  || { echo "dryRun=true must pass --dry-run to the gateway and the 4 controllers" >&2; exit 1; }
! grep -q -- '--dry-run' "$out/node-route.yaml" \
  || { echo "dryRun is off by default, yet --dry-run is passed" >&2; exit 1; }
echo "dryRun: --dry-run on the gateway and the 4 controllers, off by default"
# Mutual TLS variants and the NetworkPolicy.
"$tools/helm" template ccm charts/ccm -n kube-system > "$out/simulator-again.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set tls.certManager.enabled=true \
  --set nodeRouteController.enabled=true --set nodeRouteController.clusterCIDR=10.244.0.0/16 \
  > "$out/cert-manager.full"
"$tools/helm" template ccm charts/ccm -n kube-system --set tls.insecurePlaintext=true \
  > "$out/plaintext.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set tls.existingSecrets.gateway=gw-tls \
  --set tls.existingSecrets.cloudNodeController=node-tls \
  --set tls.existingSecrets.cloudNodeLifecycleController=lifecycle-tls \
  --set tls.existingSecrets.serviceLbController=service-tls > "$out/existing-secrets.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set nodeRouteController.enabled=true \
  --set nodeRouteController.clusterCIDR=10.244.0.0/16 \
  --set 'networkPolicy.hostNetworkCIDRs={10.0.0.0/16,fd00:ec2::/56}' > "$out/netpol-cidrs.yaml"
"$tools/helm" template ccm charts/ccm -n kube-system --set cloudNodeController.enabled=false \
  --set cloudNodeLifecycleController.enabled=false > "$out/pod-network-only.yaml"
# kubernetes-validate knows no cert-manager kinds: it checks the rest, Python the Certificates.
"$tools/venv/bin/python" - "$out/cert-manager.full" "$out/cert-manager.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
core = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
assert len(core) < len(docs), "tls.certManager.enabled rendered no cert-manager resource"
yaml.safe_dump_all(core, open(sys.argv[2], "w"))
PY
if "$tools/helm" template ccm charts/ccm --set nodeRouteController.enabled=true >/dev/null 2>&1; then
  echo "the route controller without a cluster CIDR must fail to render" >&2
  exit 1
fi
for f in "$out"/*.yaml; do
  "$tools/venv/bin/kubernetes-validate" -k 1.33 --strict --quiet "$f"
done
if "$tools/helm" template ccm charts/ccm --set gateway.provider=azure >/dev/null 2>&1; then
  echo "an unknown provider must fail to render" >&2
  exit 1
fi
# values.schema.json: a misspelled value fails, naming the key; so do contradictory TLS settings.
must_fail() { # <what the error must say> <helm template arguments...>
  local want="$1" err
  shift
  if err="$("$tools/helm" template ccm charts/ccm "$@" 2>&1 >/dev/null)"; then
    echo "helm template $* must fail" >&2
    exit 1
  fi
  if ! grep -qF -- "$want" <<<"$err"; then
    echo "helm template $* failed without saying \"$want\":" >&2
    echo "$err" >&2
    exit 1
  fi
}
must_fail "additional properties 'certManger' not allowed" --set tls.certManger.enabled=true
must_fail "additional properties 'networkPolcy' not allowed" --set networkPolcy.enabled=false
must_fail "additional properties 'replica' not allowed" --set serviceLbController.replica=3
must_fail "/gateway/grpcPort" --set gateway.grpcPort=http
must_fail "cannot go with tls.certManager.enabled" --set tls.insecurePlaintext=true --set tls.certManager.enabled=true
must_fail "tls.existingSecrets.cloudNodeController" --set tls.existingSecrets.gateway=gw-tls
must_fail "gateway.replicas > 1 needs a real cloud" --set gateway.replicas=2
must_fail "set one of gateway.aws.cloudConfig" --set gateway.provider=aws \
  --set gateway.aws.cloudConfig=x --set gateway.aws.cloudConfigFrom.secret=s
must_fail "additional properties 'name' not allowed" --set gateway.aws.cloudConfigFrom.name=x
must_fail "gateway.provider=openstack needs gateway.openstack.cloudConfigSecret" --set gateway.provider=openstack
must_fail "additional properties 'cloudConfig' not allowed" --set gateway.provider=openstack \
  --set gateway.openstack.cloudConfigSecret.name=s --set gateway.openstack.cloudConfig=x
must_fail "additional properties 'secret' not allowed" --set gateway.openstack.cloudConfigSecret.secret=x
must_fail "/gateway/openstack/regional" --set gateway.openstack.regional=yes
must_fail "needs exactly one of gateway.vsphere.cloudConfigFrom.configMap" --set gateway.provider=vsphere \
  --set gateway.vsphere.cloudConfigFrom.secret=s
must_fail "needs exactly one of gateway.vsphere.cloudConfigFrom.configMap" --set gateway.provider=vsphere \
  --set gateway.vsphere.cloudConfigFrom.configMap=
must_fail "additional properties 'cloudConfigSecret' not allowed" --set gateway.vsphere.cloudConfigSecret=x
echo "values.schema.json refuses misspelled values; contradictory TLS settings fail with a reason"
"$tools/helm" install ccm charts/ccm -n kube-system --dry-run=client > "$out/install-default.txt"
"$tools/helm" install ccm charts/ccm -n kube-system --dry-run=client --set tls.insecurePlaintext=true \
  > "$out/install-plaintext.txt"
grep -q "accepts ANY SOURCE" "$out/install-default.txt" \
  || { echo "NOTES must say the gRPC port is open while hostNetworkCIDRs is empty" >&2; exit 1; }
grep -q "WARNING: tls.insecurePlaintext=true" "$out/install-plaintext.txt" \
  || { echo "NOTES must warn about tls.insecurePlaintext" >&2; exit 1; }
"$tools/venv/bin/python" - "$out/simulator.yaml" "$out/aws.yaml" "$out/openstack.yaml" "$out/openstack-full.yaml" \
  "$out/vsphere.yaml" <<'PY'
import sys, yaml
# Switching the gateway's vendor leaves every controller manifest identical: controllers.yaml's,
# and the controllers' certificate Secrets apart from what each render generates anew (in a
# cluster `lookup` re-uses them, as the upgrade check below shows).
GENERATED = ("ccm/ca-sha256", "ccm/not-after")
def controller_secrets(path):
    docs = []
    for d in yaml.safe_load_all(open(path)):
        if not d or d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "cloud-gateway":
            continue
        if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls" and d["metadata"]["name"] != "ccm-ccm-ca":
            d["data"] = sorted(d["data"])
            for a in GENERATED:
                d["metadata"]["annotations"].pop(a)
            docs.append(d)
    return docs
def source_docs(path, source):
    return [d for d in open(path).read().split("\n---\n") if f"# Source: ccm/templates/{source}" in d]
a, *others = (source_docs(p, "controllers.yaml") for p in sys.argv[1:])
assert a, "no controller manifests rendered"
for path, b in zip(sys.argv[2:], others):
    assert a == b, f"controller manifests change with the gateway's provider ({path})"
assert any("kind: Deployment" in d and "name: ccm-service-lb-controller\n" in d for d in a), \
    "the service controller's Deployment is not among the compared manifests"
sa, *sothers = (controller_secrets(p) for p in sys.argv[1:])
assert len(sa) == 3 and all(sa == sb for sb in sothers), \
    "the controllers' certificate Secrets change with the gateway's provider"
print(f"{len(a)} controller manifests and {len(sa)} controller certificate Secrets identical across gateway"
      f" vendors (simulator, aws, openstack, vsphere)")
PY
"$tools/venv/bin/python" - "$out" <<'PY'
import sys, yaml
out = sys.argv[1]
def load(name):
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}
def args(deploy):
    return deploy["spec"]["template"]["spec"]["containers"][0]["args"]
def flag(deploy, name):
    values = [a.split("=", 1)[1] for a in args(deploy) if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} given twice: {values}"
    return values[0] if values else None

m = load("simulator")
svc = "ccm-service-lb-controller"
deploy = m[("Deployment", svc)]
assert deploy["spec"]["replicas"] == 2, f"service controller replicas {deploy['spec']['replicas']}, want 2"
assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == svc
assert flag(deploy, "concurrent-service-syncs") == "50"
assert flag(deploy, "load-balancer-class") is None, "no class by default"
# Same gateway wiring, cluster name and lease namespace as the node controllers.
node = m[("Deployment", "ccm-cloud-node-controller")]
for name in ("gateway-address", "cluster-name", "leader-elect-resource-namespace", "log-format"):
    assert flag(deploy, name) == flag(node, name), f"--{name}: {flag(deploy, name)} != {flag(node, name)}"
assert flag(deploy, "leader-elect") == "true", "shard leases need --leader-elect"

# Least privilege: no controller reads secrets (nor anything through a wildcard).
def grants_secrets(rule):
    groups, resources = rule.get("apiGroups", []), rule.get("resources", [])
    return ("" in groups or "*" in groups) and ("secrets" in resources or "*" in resources)
roles = [d for (kind, _), d in m.items() if kind in ("ClusterRole", "Role")]
assert roles, "no RBAC rendered"
for role in roles:
    for rule in role.get("rules", []):
        assert not grants_secrets(rule), f"{role['kind']} {role['metadata']['name']} grants secrets: {rule}"
        assert "*" not in rule.get("verbs", []), f"{role['metadata']['name']} grants every verb: {rule}"
cluster_role = m[("ClusterRole", svc)]
binding = m[("ClusterRoleBinding", svc)]
assert binding["roleRef"]["name"] == svc and binding["subjects"][0]["name"] == svc
granted = {(g, r): set(rule["verbs"]) for rule in cluster_role["rules"]
           for g in rule["apiGroups"] for r in rule["resources"]}
assert granted == {
    ("", "services"): {"get", "list", "watch", "patch", "update"},
    ("", "services/status"): {"patch", "update"},
    ("", "nodes"): {"get", "list", "watch"},
    ("", "namespaces"): {"get"},
    ("", "events"): {"create", "patch", "update"},
    ("events.k8s.io", "events"): {"create", "patch", "update"},
}, f"service controller ClusterRole: {granted}"
# The cluster's identity: the kube-system Namespace only.
namespaces = [rule for rule in cluster_role["rules"] if "namespaces" in rule["resources"]]
assert [rule.get("resourceNames") for rule in namespaces] == [["kube-system"]], f"namespaces: {namespaces}"
# Shard leases: its own Role, in the namespace it is told to use.
lease_role = m[("Role", f"{svc}-leader-election")]
assert lease_role["metadata"]["namespace"] == flag(deploy, "leader-elect-resource-namespace")
assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}], lease_role["rules"]
lease_binding = m[("RoleBinding", f"{svc}-leader-election")]
assert lease_binding["subjects"][0]["name"] == svc

custom = load("service-lb-custom")[("Deployment", svc)]
assert custom["spec"]["replicas"] == 3
assert flag(custom, "load-balancer-class") == "example.com/internal"
assert args(custom)[-1] == "--gateway-timeout=10s", "extraArgs come last"
assert not [k for k in load("service-lb-disabled") if k[1].startswith(svc)], "disabled but rendered"
print("service-lb-controller: 2 replicas by default, no controller RBAC grants secrets")

rt = "ccm-node-route-controller"
assert not [k for k in m if k[1].startswith(rt)], "the route controller is off by default, as upstream"
r = load("node-route")
deploy = r[("Deployment", rt)]
assert deploy["spec"]["replicas"] == 2 and flag(deploy, "leader-elect") == "true"
assert deploy["spec"]["template"]["spec"]["hostNetwork"] is True
assert flag(deploy, "cluster-cidr") == "10.244.0.0/16,fd00:10::/56", flag(deploy, "cluster-cidr")
assert flag(deploy, "route-reconciliation-period") == "30s"
assert flag(deploy, "configure-cloud-routes") == "true"
assert flag(deploy, "concurrent-route-operations") == "200"
for name in ("gateway-address", "cluster-name", "leader-elect-resource-namespace"):
    assert flag(deploy, name) == flag(node, name), f"--{name}: {flag(deploy, name)} != {flag(node, name)}"
granted = {(g, res): set(rule["verbs"]) for rule in r[("ClusterRole", rt)]["rules"]
           for g in rule["apiGroups"] for res in rule["resources"]}
assert granted == {
    ("", "nodes"): {"get", "list", "watch"},
    ("", "nodes/status"): {"patch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}, f"route controller ClusterRole: {granted}"
lease_role = r[("Role", f"{rt}-leader-election")]
assert lease_role["metadata"]["namespace"] == flag(deploy, "leader-elect-resource-namespace")
assert lease_role["rules"][0]["verbs"] == ["get", "create", "update"], lease_role["rules"]
print("node-route-controller: off by default; on, 2 leader-elected replicas with least-privilege RBAC")
PY
"$tools/venv/bin/python" - "$out" <<'PY'
import base64, subprocess, sys, tempfile, yaml
out = sys.argv[1]
NS, GW = "kube-system", "ccm-cloud-gateway"
GW_HOST = f"{GW}.{NS}.svc"
GW_DNS = [GW, f"{GW}.{NS}", GW_HOST, f"{GW_HOST}.cluster.local"]
def docs(name):
    return [d for d in yaml.safe_load_all(open(f"{out}/{name}")) if d]
def load(name):
    return {(d["kind"], d["metadata"]["name"]): d for d in docs(name)}
def deployments(m):
    return {name: d for (kind, name), d in m.items() if kind == "Deployment"}
def container(deploy):
    return deploy["spec"]["template"]["spec"]["containers"][0]
def args(deploy):
    return container(deploy)["args"]
def flag(deploy, name):
    values = [a.split("=", 1)[1] for a in args(deploy) if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} given twice: {values}"
    return values[0] if values else None
def secrets_referenced(deploy):
    """Every Secret a pod can read: volumes (also projected), env, envFrom, image pull."""
    pod = deploy["spec"]["template"]["spec"]
    refs = set()
    for v in pod.get("volumes", []):
        if "secret" in v:
            refs.add(v["secret"]["secretName"])
        for src in v.get("projected", {}).get("sources", []):
            if "secret" in src:
                refs.add(src["secret"]["name"])
    for c in pod["containers"] + pod.get("initContainers", []):
        for e in c.get("envFrom", []):
            if "secretRef" in e:
                refs.add(e["secretRef"]["name"])
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add(ref["name"])
    refs.update(s["name"] for s in pod.get("imagePullSecrets", []))
    return refs
def mounted_file(deploy, path):
    """The (Secret, key) behind a file path in the container, through its volume mounts."""
    pod = deploy["spec"]["template"]["spec"]
    for mount in container(deploy).get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            assert "subPath" not in mount, f"{mount}: a subPath mount never sees a renewed Secret"
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            key = path[len(prefix):]
            items = {i["path"]: i["key"] for i in volume["secret"].get("items", [])}
            return volume["secret"]["secretName"], items.get(key, key)
    raise AssertionError(f"{deploy['metadata']['name']}: {path} is on no volume")

# The cloud's Secrets the test renders give the gateway (credentials, cloud.conf, CA bundle).
CLOUD_SECRETS = {"aws-creds", "occm-cloud-config", "occm-ca"}
GATEWAY_TLS = {"tls-cert-file": "tls.crt", "tls-key-file": "tls.key", "tls-client-ca-file": "ca.crt"}
CLIENT_TLS = {"gateway-tls-cert-file": "tls.crt", "gateway-tls-key-file": "tls.key", "gateway-tls-ca-file": "ca.crt"}
def check_mtls(m, secret_of):
    """Mutual TLS wiring of one render; secret_of(sa) is the Secret that component must mount."""
    ds = deployments(m)
    gw = ds[GW]
    assert "--insecure-plaintext" not in args(gw), "the gateway must not serve plain text"
    # Replicas share the provider limits through the peers Service (not-ready pods included), and
    # the controllers spread calls over the ready ones through the headless main Service.
    assert flag(gw, "peers") == f"{GW}-peers.{gw['metadata']['namespace']}.svc:10258", flag(gw, "peers")
    services = {name: d for (kind, name), d in m.items() if kind == "Service"}
    assert services[GW]["spec"].get("clusterIP") == "None", "the gateway Service must be headless"
    assert services[f"{GW}-peers"]["spec"].get("publishNotReadyAddresses") is True
    for name, key in GATEWAY_TLS.items():
        assert flag(gw, name), f"gateway: --{name} missing"
        assert mounted_file(gw, flag(gw, name)) == (secret_of(GW), key), f"gateway --{name}"
    assert secrets_referenced(gw) - CLOUD_SECRETS == {secret_of(GW)}, secrets_referenced(gw)
    controllers = {n: d for n, d in ds.items() if n != GW}
    assert controllers, "no controller rendered"
    for name, deploy in controllers.items():
        sa = deploy["spec"]["template"]["spec"]["serviceAccountName"]
        assert sa == name
        address = flag(deploy, "gateway-address")
        assert address == f"https://{GW_HOST}:{flag(gw, 'grpc-listen').rsplit(':', 1)[1]}", f"{name}: {address}"
        assert flag(deploy, "gateway-tls-server-name") == GW_HOST, f"{name}: server name"
        for f, key in CLIENT_TLS.items():
            assert flag(deploy, f), f"{name}: --{f} missing"
            assert mounted_file(deploy, flag(deploy, f)) == (secret_of(sa), key), f"{name} --{f}"
        # Its own certificate, nothing else: never the gateway's credentials or key, nor the CA's.
        assert secrets_referenced(deploy) == {secret_of(sa)}, f"{name} reads {secrets_referenced(deploy)}"
    return gw, controllers

def policy(m):
    text = m[("ConfigMap", f"{GW}-authorization-policy")]["data"]["policy.yaml"]
    return {c["name"]: (c["identities"], c["allow"]) for c in yaml.safe_load(text)["callers"]}
def check_policy(m, gw, identity):
    p = policy(m)
    assert p == {
        "node-controller": ([identity("ccm-cloud-node-controller"), identity("ccm-cloud-node-lifecycle-controller")],
                            ["identity", "instances"]),
        "service-controller": ([identity("ccm-service-lb-controller")], ["identity", "instances", "load-balancers"]),
        "route-controller": ([identity("ccm-node-route-controller")], ["identity", "routes"]),
    }, p
    pod = gw["spec"]["template"]["spec"]
    mount = next(mt for mt in container(gw)["volumeMounts"]
                 if flag(gw, "authorization-policy").startswith(mt["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == f"{GW}-authorization-policy"

def check_network_policy(m):
    """Only the controllers reach gRPC; host-network ones through the CIDRs, or the port is open."""
    ds = deployments(m)
    gw = ds[GW]
    grpc = int(flag(gw, "grpc-listen").rsplit(":", 1)[1])
    http = int(flag(gw, "http-listen").rsplit(":", 1)[1])
    np = m[("NetworkPolicy", GW)]["spec"]
    assert np["podSelector"]["matchLabels"] == gw["spec"]["selector"]["matchLabels"]
    assert np["policyTypes"] == ["Ingress"]
    rules = {r["ports"][0]["port"]: r for r in np["ingress"]}
    assert all(len(r["ports"]) == 1 for r in np["ingress"]) and set(rules) == {grpc, http}, np["ingress"]
    assert "from" not in rules[http], "the HTTP port (probes, metrics) is open to any source"
    controllers = {n: d for n, d in ds.items() if n != GW}
    host = {n for n, d in controllers.items() if d["spec"]["template"]["spec"].get("hostNetwork")}
    peers = rules[grpc].get("from")
    cidrs = [p["ipBlock"]["cidr"] for p in peers or [] if "ipBlock" in p]
    if host and not cidrs:
        assert peers is None, "host-network controllers without CIDRs: the gRPC port must stay reachable"
        return "open to any source (host-network controllers, no CIDRs)"
    selectors = [p["podSelector"] for p in peers if "podSelector" in p]
    assert len(selectors) == 1 and len(peers) == 1 + len(cidrs), peers
    sel = selectors[0]
    assert sel["matchLabels"] == {"app.kubernetes.io/instance": "ccm"}
    [expr] = sel["matchExpressions"]
    names = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] for d in controllers.values()}
    assert expr["key"] == "app.kubernetes.io/name" and expr["operator"] == "In" and set(expr["values"]) == names, expr
    assert "cloud-gateway" not in expr["values"]
    return f"controllers only ({len(names)} pod labels, {len(cidrs)} CIDRs)"

def run(*cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, capture_output=True, check=True).stdout
def check_generated_certificates(m):
    """The chart's own CA signed each component's certificate, for the right names, with its key."""
    secrets = {n: d for (k, n), d in m.items() if k == "Secret" and d["type"] == "kubernetes.io/tls"}
    ca = base64.b64decode(secrets["ccm-ccm-ca"]["data"]["tls.crt"])
    with tempfile.TemporaryDirectory() as tmp:
        open(f"{tmp}/ca.crt", "wb").write(ca)
        names = [GW] + [n for n in deployments(m) if n != GW]
        for sa in names:
            data = {k: base64.b64decode(v) for k, v in secrets[f"{sa}-tls"]["data"].items()}
            assert data["ca.crt"] == ca, f"{sa}: ca.crt is not the chart's CA"
            open(f"{tmp}/c.crt", "wb").write(data["tls.crt"])
            run("openssl", "verify", "-CAfile", f"{tmp}/ca.crt", f"{tmp}/c.crt")
            subject = run("openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", f"{tmp}/c.crt").decode()
            assert subject.strip() == f"subject=CN={sa}", f"{sa}: {subject}"
            sans = run("openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", f"{tmp}/c.crt").decode()
            dns = [s.strip()[4:] for s in sans.splitlines()[1:2][0].split(",")] if sa == GW else []
            assert dns == (GW_DNS if sa == GW else []), f"{sa}: {sans}"
            pub = run("openssl", "x509", "-noout", "-pubkey", "-in", f"{tmp}/c.crt")
            assert run("openssl", "pkey", "-pubout", stdin=data["tls.key"]) == pub, f"{sa}: key and certificate differ"
    assert set(secrets) == {"ccm-ccm-ca"} | {f"{n}-tls" for n in names}, sorted(secrets)
    return len(names)

# Default render: mutual TLS, the policy by ServiceAccount name, the NetworkPolicy.
m = load("simulator.yaml")
gw, controllers = check_mtls(m, lambda sa: f"{sa}-tls")
check_policy(m, gw, lambda sa: sa)
how = check_network_policy(m)
count = check_generated_certificates(m)
print(f"default: mutual TLS for the gateway and {len(controllers)} controllers, {count} certificates"
      f" from the chart's CA, NetworkPolicy on gRPC: {how}")

# The AWS gateway's credentials Secret: the gateway alone reads it.
aws = load("aws.yaml")
ds = deployments(aws)
assert "aws-creds" in secrets_referenced(ds[GW]), "the gateway no longer gets its credentials Secret"
readers = sorted(n for n, d in ds.items() if "aws-creds" in secrets_referenced(d))
assert readers == [GW], f"the cloud-credentials Secret is readable by {readers}"
check_mtls(aws, lambda sa: f"{sa}-tls")
# The OpenStack CCM's cloud.conf (credentials) and CA bundle: on the gateway alone, read-only.
for name, cloud in (("openstack.yaml", {"occm-cloud-config"}), ("openstack-full.yaml", {"occm-cloud-config", "occm-ca"})):
    m = load(name)
    ds = deployments(m)
    gw = ds[GW]
    assert flag(gw, "provider") == "openstack"
    conf_key = "cloud-config" if "full" in name else "cloud.conf"
    # Where OCCM's chart and manifests mount its Secret, all of it (a clouds.yaml beside it).
    assert args(gw).count(f"--cloud-config=/etc/config/{conf_key}") == 1, args(gw)
    assert mounted_file(gw, flag(gw, "cloud-config")) == ("occm-cloud-config", conf_key)
    assert mounted_file(gw, "/etc/config/clouds.yaml") == ("occm-cloud-config", "clouds.yaml")
    assert secrets_referenced(gw) - {f"{GW}-tls"} == cloud, secrets_referenced(gw)
    mounts = {mt["mountPath"]: mt for mt in container(gw)["volumeMounts"]}
    for path in ["/etc/config"] + (["/etc/cloud-gateway/openstack-ca"] if "occm-ca" in cloud else []):
        assert mounts[path].get("readOnly") is True, mounts[path]
    if "occm-ca" in cloud:
        assert mounted_file(gw, "/etc/cloud-gateway/openstack-ca/ca.crt") == ("occm-ca", "root.pem")
        assert {"name": "OS_CCM_REGIONAL", "value": "true"} in container(gw)["env"], container(gw).get("env")
    else:
        assert "env" not in container(gw), container(gw)["env"]
    for n, d in ds.items():
        if n != GW:
            assert not secrets_referenced(d) & cloud, f"{n} reads {secrets_referenced(d) & cloud}"
            assert not [v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] in ("cloud-config", "openstack-ca")], n
    check_mtls(m, lambda sa: f"{sa}-tls")
print("no controller pod mounts the gateway's cloud-credentials Secret (AWS credentials, OpenStack cloud.conf),"
      " nor any Secret but its certificate")

# Each render generates new certificates (`helm template` cannot look the Secrets up); the rest
# is stable.
def normalized(name):
    result = []
    for d in docs(name):
        if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls":
            d["data"] = sorted(d["data"])
            d["metadata"]["annotations"].pop("ccm/ca-sha256", None)
            d["metadata"]["annotations"].pop("ccm/not-after")
        result.append(d)
    return result
assert normalized("simulator.yaml") == normalized("simulator-again.yaml"), "two renders differ beyond the certificates"
first, again = load("simulator.yaml"), load("simulator-again.yaml")
assert first[("Secret", "ccm-ccm-ca")]["data"] != again[("Secret", "ccm-ccm-ca")]["data"]
print("two renders differ only in their generated certificates")

# cert-manager: a Certificate per component, SPIFFE IDs in the policy, every Secret from it.
m = load("cert-manager.full")
spiffe = lambda sa: f"spiffe://cluster.local/ns/{NS}/sa/{sa}"
gw, controllers = check_mtls(m, lambda sa: f"{sa}-tls")
check_policy(m, gw, spiffe)
check_network_policy(m)
assert not [n for (k, n) in m if k == "Secret"], "cert-manager writes the Secrets, the chart must not"
certs = {d["spec"]["secretName"]: d["spec"] for (k, _), d in m.items() if k == "Certificate"}
ca = certs.pop("ccm-ccm-ca")
assert ca["isCA"] is True and ca["issuerRef"]["name"] == "ccm-ccm-selfsigned"
assert m[("Issuer", "ccm-ccm-selfsigned")]["spec"] == {"selfSigned": {}}
assert m[("Issuer", "ccm-ccm-ca")]["spec"] == {"ca": {"secretName": "ccm-ccm-ca"}}
assert set(certs) == {f"{sa}-tls" for sa in [GW, *controllers]}, sorted(certs)
for secret, spec in certs.items():
    sa = secret.removesuffix("-tls")
    assert spec["commonName"] == sa and spec["uris"] == [spiffe(sa)], spec
    assert spec["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "ccm-ccm-ca"}
    if sa == GW:
        assert spec["dnsNames"] == GW_DNS and "server auth" in spec["usages"], spec
    else:
        assert "dnsNames" not in spec and "client auth" in spec["usages"], spec
print(f"cert-manager: {len(certs)} Certificates from the chart's CA Issuer, SPIFFE IDs in the policy")

# Secrets you bring: mounted as named, none rendered.
m = load("existing-secrets.yaml")
named = {GW: "gw-tls", "ccm-cloud-node-controller": "node-tls",
         "ccm-cloud-node-lifecycle-controller": "lifecycle-tls", "ccm-service-lb-controller": "service-tls"}
check_mtls(m, named.__getitem__)
check_policy(m, deployments(m)[GW], lambda sa: sa)
assert not [n for (k, n) in m if k == "Secret"], "existing Secrets: the chart must render none"
print("existing Secrets: each component mounts the one named for it")

# Plain text for local development: no TLS anywhere, still the policy and the NetworkPolicy.
m = load("plaintext.yaml")
ds = deployments(m)
assert "--insecure-plaintext" in args(ds[GW])
assert not [a for a in args(ds[GW]) if a.startswith("--tls-")], args(ds[GW])
for name, d in ds.items():
    assert not secrets_referenced(d), f"{name} mounts {secrets_referenced(d)} in plain text"
    if name != GW:
        assert flag(d, "gateway-address").startswith("http://"), flag(d, "gateway-address")
        assert not [a for a in args(d) if a.startswith("--gateway-tls-")], args(d)
assert not [n for (k, n) in m if k == "Secret"], "plain text issues no certificate"
check_network_policy(m)
print("tls.insecurePlaintext: --insecure-plaintext, http:// addresses, no certificate")

# NetworkPolicy closed to everything but the controllers: with the nodes' CIDRs, or without
# host-network controllers.
m = load("netpol-cidrs.yaml")
print("with hostNetworkCIDRs:", check_network_policy(m))
assert [p["ipBlock"]["cidr"] for p in m[("NetworkPolicy", GW)]["spec"]["ingress"][1]["from"][1:]] \
    == ["10.0.0.0/16", "fd00:ec2::/56"]
print("pod-network controllers only:", check_network_policy(load("pod-network-only.yaml")))
PY
"$tools/venv/bin/python" - "$tools/helm" <<'PY'
# `helm upgrade` keeps the certificates: render against a stub API server holding the first
# render's Secrets (enough discovery for Helm, GET of Secrets) so `lookup` finds them.
import base64, http.server, json, os, subprocess, sys, tempfile, threading, yaml
helm = sys.argv[1]
store = {}
GROUPS = {"v1": [("secrets", "Secret", True), ("configmaps", "ConfigMap", True),
                 ("serviceaccounts", "ServiceAccount", True), ("services", "Service", True)],
          "apps/v1": [("deployments", "Deployment", True)],
          "rbac.authorization.k8s.io/v1": [("clusterroles", "ClusterRole", False),
              ("clusterrolebindings", "ClusterRoleBinding", False), ("roles", "Role", True),
              ("rolebindings", "RoleBinding", True)],
          "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)]}
class Stub(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        path = self.path.split("?")[0].strip("/")
        parts = path.split("/")
        if path == "version":
            return self.reply(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0"})
        if path == "api":
            return self.reply(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "apis":
            return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                 "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
                for gv in GROUPS if "/" in gv]})
        gv = path.removeprefix("api/").removeprefix("apis/")
        if gv in GROUPS:
            return self.reply(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": [{"name": n, "singularName": "", "namespaced": ns, "kind": k,
                               "verbs": ["get", "list", "create", "update", "patch", "delete"]}
                              for n, k, ns in GROUPS[gv]]})
        if len(parts) == 6 and parts[:2] == ["api", "v1"] and parts[4] == "secrets" and (parts[3], parts[5]) in store:
            return self.reply(200, store[(parts[3], parts[5])])
        self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
threading.Thread(target=server.serve_forever, daemon=True).start()
with tempfile.TemporaryDirectory() as tmp:
    kubeconfig = f"{tmp}/kubeconfig"
    with open(kubeconfig, "w") as f:
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "stub",
                        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
                        "users": [{"name": "stub", "user": {}}]}, f)
    os.chmod(kubeconfig, 0o600)
    def render(*values):
        text = subprocess.run([helm, "template", "ccm", "charts/ccm", "-n", "kube-system", "--kubeconfig", kubeconfig, "--kube-context", "stub",
                               "--dry-run=server", "--disable-openapi-validation", *values],
                              capture_output=True, text=True, check=True).stdout
        return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d and d["kind"] == "Secret"}
    installed = render()
    for name, d in installed.items():
        d["metadata"].setdefault("annotations", {}).update(
            {"meta.helm.sh/release-name": "ccm", "meta.helm.sh/release-namespace": "kube-system"})
        store[("kube-system", name)] = d
    def changed(after):
        return sorted(n for n in after if n not in installed or after[n]["data"] != installed[n]["data"])
    assert changed(render()) == [], "an upgrade that changes nothing must re-use every certificate"
    assert changed(render("--set", "gateway.provider=aws")) == [], "a vendor switch must re-use every certificate"
    assert changed(render("--set", "gateway.provider=openstack", "--set", "gateway.openstack.cloudConfigSecret.name=occm-cloud-config")) == [], \
        "a vendor switch must re-use every certificate"
    assert changed(render("--set", "gateway.provider=vsphere")) == [], "a vendor switch must re-use every certificate"
    after = render("--set", "nodeRouteController.enabled=true", "--set", "nodeRouteController.clusterCIDR=10.244.0.0/16")
    assert changed(after) == ["ccm-node-route-controller-tls"], changed(after)
    with open(f"{tmp}/ca.crt", "wb") as f:
        f.write(base64.b64decode(installed["ccm-ccm-ca"]["data"]["tls.crt"]))
    with open(f"{tmp}/rt.crt", "wb") as f:
        f.write(base64.b64decode(after["ccm-node-route-controller-tls"]["data"]["tls.crt"]))
    subprocess.run(["openssl", "verify", "-CAfile", f"{tmp}/ca.crt", f"{tmp}/rt.crt"], capture_output=True, check=True)
    assert changed(render("--set", "tls.clusterDomain=example.internal")) == ["ccm-cloud-gateway-tls"]
    store[("kube-system", "ccm-service-lb-controller-tls")]["metadata"]["annotations"]["ccm/not-after"] = "0"
    assert changed(render()) == ["ccm-service-lb-controller-tls"], "an expiring certificate must be issued again"
    store[("kube-system", "ccm-ccm-ca")]["metadata"]["annotations"]["ccm/not-after"] = "0"
    assert changed(render()) == sorted(installed), "an expiring CA must be replaced with every certificate"
server.shutdown()
print("upgrade (lookup): certificates re-used; only a new controller's, a renamed gateway's or an expiring one issued again")
PY
echo "deployment checks passed"
