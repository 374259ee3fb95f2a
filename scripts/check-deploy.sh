#!/usr/bin/env bash
# Checks the deployment artefacts with real tools (installed by scripts/tools/setup.sh):
# - docker/Dockerfile with hadolint;
# - the Helm chart with `helm lint --strict`, and its rendered manifests (simulator and AWS
#   gateways, the service controller with non-default values, the route controller on) against
#   Kubernetes 1.33's schemas with kubernetes-validate --strict;
# - that switching the gateway's vendor leaves every controller manifest unchanged, so a
#   `helm upgrade` of the gateway never restarts a controller;
# - the service controller's defaults (2 replicas sharing the work, its flags) and that no
#   controller's RBAC grants access to secrets;
# - the route controller: off by default (as upstream), on it needs a cluster CIDR, runs
#   leader-elected replicas with its flags and least-privilege RBAC.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=.tools
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
python3 - "$out/simulator.yaml" "$out/aws.yaml" <<'PY'
import sys
def controller_docs(path):
    docs = open(path).read().split("\n---\n")
    return [d for d in docs if "templates/controllers.yaml" in d]
a, b = (controller_docs(p) for p in sys.argv[1:3])
assert a, "no controller manifests rendered"
assert a == b, "controller manifests change with the gateway's provider"
assert any("kind: Deployment" in d and "name: ccm-service-lb-controller\n" in d for d in a), \
    "the service controller's Deployment is not among the compared manifests"
print(f"{len(a)} controller manifests identical across gateway vendors")
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
    ("", "events"): {"create", "patch", "update"},
    ("events.k8s.io", "events"): {"create", "patch", "update"},
}, f"service controller ClusterRole: {granted}"
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
echo "deployment checks passed"
