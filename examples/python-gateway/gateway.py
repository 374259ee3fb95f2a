#!/usr/bin/env python3
"""pycloud: a cloudgateway.v1 gateway written in Python, over its own tiny in-memory cloud.

It shows that the contract, not our Rust code, is the plugin interface: the controllers talk to
it exactly as to our cloud-gateway, and `cloudgateway-conformance` checks it the same way.

The cloud: instances from an inventory file (YAML or JSON), load balancers that get addresses
from a pool and take a configurable time to provision, and routes per cluster. Errors are typed
as the contract says: a gRPC code plus a `cloudgateway.v1.ErrorDetail` in the `google.rpc.Status`
details (`grpc-status-details-bin`), so that controllers decide on the reason, never on a message.

    scripts/python-gateway/setup.sh      # venv, packages, code generated from the .proto files
    scripts/python-gateway/run.sh --listen 127.0.0.1:50061 --admin-listen 127.0.0.1:10261

See README.md next to this file.
"""

import argparse
import collections
import ipaddress
import json
import logging
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

try:
    import grpc
    import yaml
    from google.protobuf import any_pb2
    from google.rpc import status_pb2
    from grpc_status import rpc_status

    from cloudgateway.v1 import gateway_pb2, gateway_pb2_grpc, types_pb2
except ImportError as e:  # pragma: no cover - a setup problem, said plainly
    sys.exit(f"pycloud gateway: {e}: run scripts/python-gateway/setup.sh and start it with "
             "scripts/python-gateway/run.sh")

log = logging.getLogger("pycloud")

PROVIDER = "pycloud"
# Every answer names the provider behind it, so a controller notices a swapped gateway at once.
PROVIDER_HEADER = "x-cloudgateway-provider"
# A service with this annotation set to "external" is left to another controller.
LB_TYPE_ANNOTATION = "pycloud.example.com/load-balancer-type"
# The most nodes one BatchLookupInstances may carry (our Rust gateway accepts as many).
MAX_BATCH_REQUEST = 10_000
DEFAULT_INVENTORY = Path(__file__).with_name("inventory.yaml")


# --- typed errors -------------------------------------------------------------------------------

R = types_pb2  # ErrorReason values: R.ERROR_REASON_INSTANCE_NOT_FOUND, ...

# The gRPC code each reason travels with (types.proto).
CODE_OF = {
    R.ERROR_REASON_INSTANCE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    R.ERROR_REASON_NOT_IMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    R.ERROR_REASON_IMPLEMENTED_ELSEWHERE: grpc.StatusCode.FAILED_PRECONDITION,
    R.ERROR_REASON_RETRY_AFTER: grpc.StatusCode.UNAVAILABLE,
    R.ERROR_REASON_THROTTLED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    R.ERROR_REASON_INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    R.ERROR_REASON_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    R.ERROR_REASON_INTERNAL: grpc.StatusCode.INTERNAL,
    R.ERROR_REASON_PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    # A used-up cloud quota: the same code as THROTTLED, but not a rate limit.
    R.ERROR_REASON_QUOTA_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """What `context.abort_with_status` sends."""


class GatewayError(Exception):
    """A contract error: a reason (ErrorReason), a message, and for RETRY_AFTER/THROTTLED a delay."""

    def __init__(self, reason, message, retry_after=None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def code(self):
        return CODE_OF[self.reason]

    def detail(self):
        detail = types_pb2.ErrorDetail(reason=self.reason)
        if self.retry_after is not None:
            seconds = int(self.retry_after)
            detail.retry_after.seconds = seconds
            detail.retry_after.nanos = int((self.retry_after - seconds) * 1e9)
        return detail

    def status(self):
        """The gRPC status: code, message, and google.rpc.Status{details: [Any(ErrorDetail)]}."""
        packed = any_pb2.Any()
        packed.Pack(self.detail())  # type URL type.googleapis.com/cloudgateway.v1.ErrorDetail
        rich = rpc_status.to_status(
            status_pb2.Status(code=self.code.value[0], message=self.message, details=[packed])
        )
        metadata = tuple(rich.trailing_metadata) + ((PROVIDER_HEADER, PROVIDER),)
        return _Status(rich.code, rich.details, metadata)

    def item(self):
        """The per-node form inside a batch answer."""
        return types_pb2.ItemError(code=self.code.value[0], message=self.message, detail=self.detail())


def invalid(message):
    return GatewayError(R.ERROR_REASON_INVALID_ARGUMENT, message)


def not_found(message):
    return GatewayError(R.ERROR_REASON_INSTANCE_NOT_FOUND, message)


# --- the cloud ----------------------------------------------------------------------------------

@dataclass
class Instance:
    name: str
    id: str
    type: str
    zone: str
    private_ip: str
    public_ip: str = ""
    state: str = "running"  # running | stopped | terminated
    labels: dict = field(default_factory=dict)

    @property
    def provider_id(self):
        return f"{PROVIDER}://{self.zone}/{self.id}"


@dataclass
class LoadBalancer:
    name: str
    cluster: str
    service: str  # namespace/name
    ip: str
    ports: list
    backends: list  # provider IDs (or names) of the backend nodes
    ready_at: float


@dataclass
class Route:
    name: str
    cluster: str
    target_node: str
    destination_cidr: str


class Cloud:
    """The in-memory cloud. Every method takes the lock: gRPC serves from a thread pool."""

    def __init__(self, inventory):
        self.lock = threading.Lock()
        self.region = inventory.get("region", "py-central-1")
        self.zones = inventory.get("zones") or [f"{self.region}a", f"{self.region}b"]
        self.pool = ipaddress.ip_network(inventory.get("load_balancer_pool", "198.51.100.0/24"))
        self.instances = {}
        for n, spec in enumerate(inventory.get("instances", [])):
            unknown = set(spec) - {"name", "id", "type", "zone", "private_ip", "public_ip", "state", "labels"}
            if unknown or "name" not in spec:
                raise ValueError(f"instances[{n}]: needs a name; unknown fields {sorted(unknown)}")
            if spec.get("state", "running") not in ("running", "stopped", "terminated"):
                raise ValueError(f"instances[{n}].state: running, stopped or terminated")
            instance = Instance(
                name=spec["name"],
                id=spec.get("id", f"i-{n:017x}"),
                type=spec.get("type", "py.small"),
                zone=spec.get("zone", self.zones[n % len(self.zones)]),
                private_ip=spec.get("private_ip", f"10.30.0.{n + 10}"),
                public_ip=spec.get("public_ip", ""),
                state=spec.get("state", "running"),
                labels=dict(spec.get("labels", {})),
            )
            self.instances[instance.id] = instance
        self.load_balancers = {}  # name -> LoadBalancer
        self.routes = {}  # destination CIDR -> Route (a destination is routed once, cloud-wide)
        self.knobs = {"throttle": False, "lb_provision_delay": 0.0}

    # Knobs, as the admin API changes them.
    def set_knobs(self, patch):
        with self.lock:
            for key, value in patch.items():
                if key == "throttle":
                    self.knobs[key] = bool(value)
                elif key == "lb_provision_delay":
                    self.knobs[key] = max(0.0, float(value))
                else:
                    raise ValueError(f"unknown knob {key!r} (throttle, lb_provision_delay)")
            return dict(self.knobs)

    def _api_call(self):
        """Every call to the cloud's API goes through here: the cloud may throttle it."""
        if self.knobs["throttle"]:
            raise GatewayError(R.ERROR_REASON_THROTTLED, "pycloud: request limit exceeded", retry_after=1.0)

    # Instances.
    def find(self, node):
        """The instance a NodeRef names: by provider ID first, by name when it is empty."""
        with self.lock:
            self._api_call()
            if node.provider_id:
                scheme, sep, rest = node.provider_id.partition("://")
                if scheme != PROVIDER or not sep or "/" not in rest:
                    raise invalid(f"{node.provider_id!r} is not a {PROVIDER}://<zone>/<id> provider ID")
                found = self.instances.get(rest.rsplit("/", 1)[1])
            else:
                found = next((i for i in self.instances.values()
                              if i.name == node.name and i.state != "terminated"), None)
            if found is None or found.state == "terminated":
                raise not_found(f"no instance {node.provider_id or node.name!r}")
            return found

    def live_names(self):
        return {i.name for i in self.instances.values() if i.state != "terminated"}

    # Load balancers.
    def get_load_balancer(self, cluster, name):
        with self.lock:
            self._api_call()
            lb = self.load_balancers.get(name)
            return lb if lb and lb.cluster == cluster else None

    def ensure_load_balancer(self, cluster, name, svc, nodes):
        with self.lock:
            self._api_call()
            if svc.annotations.get(LB_TYPE_ANNOTATION) == "external":
                raise GatewayError(R.ERROR_REASON_IMPLEMENTED_ELSEWHERE,
                                   f"{LB_TYPE_ANNOTATION}=external: another controller provisions it")
            if not svc.ports:
                raise invalid("a load balancer needs at least one port")
            for port in svc.ports:
                if port.protocol == gateway_pb2.PROTOCOL_SCTP:
                    raise invalid(f"port {port.name or port.port}: pycloud load balancers do not carry SCTP")
            lb = self.load_balancers.get(name)
            if lb and lb.cluster != cluster:
                raise invalid(f"load balancer {name} belongs to cluster {lb.cluster!r}")
            wanted_ip = self._address_for(svc, lb)
            now = time.monotonic()
            if lb is None:
                lb = LoadBalancer(name=name, cluster=cluster, service=f"{svc.namespace}/{svc.name}",
                                  ip=wanted_ip, ports=[], backends=[],
                                  ready_at=now + self.knobs["lb_provision_delay"])
                self.load_balancers[name] = lb
                log.info("created load balancer %s (%s) at %s for %s", name, cluster, lb.ip, lb.service)
            lb.ip = wanted_ip
            lb.ports = [(p.protocol, p.port, p.node_port) for p in svc.ports]
            lb.backends = sorted(n.provider_id or n.name for n in nodes)
            if now < lb.ready_at:
                raise GatewayError(R.ERROR_REASON_RETRY_AFTER, f"load balancer {name} is provisioning",
                                   retry_after=lb.ready_at - now)
            return lb

    def _address_for(self, svc, lb):
        """The requested loadBalancerIP if it is free in the pool, else the LB's own, else the next free."""
        taken = {other.ip for other in self.load_balancers.values() if other is not lb}
        if svc.load_balancer_ip:
            ip = ipaddress.ip_address(svc.load_balancer_ip)
            if ip not in self.pool:
                raise invalid(f"loadBalancerIP {ip} is outside the pool {self.pool}")
            if str(ip) in taken:
                raise invalid(f"loadBalancerIP {ip} is taken by another load balancer")
            return str(ip)
        if lb is not None:
            return lb.ip
        for ip in self.pool.hosts():
            if str(ip) not in taken:
                return str(ip)
        raise GatewayError(R.ERROR_REASON_UNAVAILABLE, f"the address pool {self.pool} is exhausted")

    def update_load_balancer(self, cluster, name, svc, nodes):
        with self.lock:
            self._api_call()
            if svc.annotations.get(LB_TYPE_ANNOTATION) == "external":
                raise GatewayError(R.ERROR_REASON_IMPLEMENTED_ELSEWHERE,
                                   f"{LB_TYPE_ANNOTATION}=external: another controller owns it")
            lb = self.load_balancers.get(name)
            if lb is None or lb.cluster != cluster:
                raise invalid(f"cluster {cluster!r} has no load balancer {name} to update")
            lb.backends = sorted(n.provider_id or n.name for n in nodes)

    def delete_load_balancer(self, cluster, name):
        with self.lock:
            self._api_call()
            lb = self.load_balancers.get(name)
            if lb and lb.cluster == cluster:  # never another cluster's
                del self.load_balancers[name]
                log.info("deleted load balancer %s (%s), released %s", name, cluster, lb.ip)

    # Routes.
    def list_routes(self, cluster):
        with self.lock:
            self._api_call()
            live = self.live_names()
            return [(r, r.target_node not in live) for r in self.routes.values() if r.cluster == cluster]

    def create_route(self, cluster, name_hint, target, cidr):
        with self.lock:
            self._api_call()
            if target not in self.live_names():
                raise invalid(f"no instance is named {target!r}")
            existing = self.routes.get(cidr)
            if existing is not None:
                if existing.cluster != cluster:
                    raise invalid(f"{cidr} is routed by cluster {existing.cluster!r}")
                if existing.target_node != target:
                    raise invalid(f"{cidr} is already routed to node {existing.target_node}")
                return  # the same route again: nothing to do
            self.routes[cidr] = Route(name=f"r-{name_hint}", cluster=cluster, target_node=target,
                                      destination_cidr=cidr)

    def delete_route(self, cluster, cidr):
        with self.lock:
            self._api_call()
            route = self.routes.get(cidr)
            if route is not None and route.cluster == cluster:
                del self.routes[cidr]

    def state(self):
        now = time.monotonic()
        with self.lock:
            return {
                "knobs": dict(self.knobs),
                "instances": [dict(vars(i), provider_id=i.provider_id) for i in self.instances.values()],
                "load_balancers": [
                    {k: v for k, v in vars(lb).items() if k != "ready_at"} | {"ready": lb.ready_at <= now}
                    for lb in self.load_balancers.values()
                ],
                "routes": [vars(r) for r in self.routes.values()],
            }


# --- request validation (what can never succeed, whatever the cloud) -----------------------------

def node_ref(node, has_node=True):
    if not has_node:
        raise invalid("node is required")
    if not node.name and not node.provider_id:
        raise invalid("node needs a name or a provider_id")
    return node


def cluster_name(name):
    if not name:
        raise invalid("cluster_name is required")
    return name


def service(request):
    if not request.HasField("service"):
        raise invalid("service is required")
    svc = request.service
    if not svc.uid:
        raise invalid("service.uid is required: load balancer names derive from it")
    if not svc.name or not svc.namespace:
        raise invalid("service.namespace and service.name are required")
    for port in svc.ports:
        if port.protocol not in (gateway_pb2.PROTOCOL_TCP, gateway_pb2.PROTOCOL_UDP, gateway_pb2.PROTOCOL_SCTP):
            raise invalid(f"port {port.name!r}: unknown protocol {port.protocol}")
        if not 0 < port.port < 65536:
            raise invalid(f"port {port.port} is out of range")
        if not 0 <= port.node_port < 65536:
            raise invalid(f"nodePort {port.node_port} is out of range")
    for cidr in svc.load_balancer_source_ranges:
        try:
            ipaddress.ip_network(cidr)
        except ValueError:
            raise invalid(f"loadBalancerSourceRanges: {cidr!r} is not a CIDR") from None
    if svc.load_balancer_ip:
        try:
            ipaddress.ip_address(svc.load_balancer_ip)
        except ValueError:
            raise invalid(f"loadBalancerIP {svc.load_balancer_ip!r} is not an IP address") from None
    if svc.external_traffic_policy not in gateway_pb2.ExternalTrafficPolicy.values():
        raise invalid(f"unknown externalTrafficPolicy {svc.external_traffic_policy}")
    return svc


def load_balancer_name(svc):
    """Upstream's default: "a" + the UID without dashes, at most 32 characters."""
    return ("a" + svc.uid.replace("-", ""))[:32]


def destination(route, has_route=True):
    if not has_route:
        raise invalid("route is required")
    try:
        return str(ipaddress.ip_network(route.destination_cidr))
    except ValueError:
        raise invalid(f"route destination {route.destination_cidr!r} is not a CIDR") from None


# --- the gRPC services -------------------------------------------------------------------------

class Metrics:
    """Calls by method and answer code, for /metrics. No caller label: callers never create state."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = collections.Counter()

    def count(self, method, code):
        with self.lock:
            self.calls[(method, code)] += 1

    def render(self, cloud):
        lines = ["# HELP pycloud_gateway_calls_total gRPC calls answered, by method and code.",
                 "# TYPE pycloud_gateway_calls_total counter"]
        with self.lock:
            for (method, code), n in sorted(self.calls.items()):
                lines.append(f'pycloud_gateway_calls_total{{method="{method}",code="{code}"}} {n}')
        with cloud.lock:
            states = collections.Counter(i.state for i in cloud.instances.values())
            lb_count = len(cloud.load_balancers)
            route_count = len(cloud.routes)
        lines += ["# HELP pycloud_instances Instances of the cloud, by state.", "# TYPE pycloud_instances gauge"]
        lines += [f'pycloud_instances{{state="{s}"}} {states[s]}' for s in ("running", "stopped", "terminated")]
        lines += ["# TYPE pycloud_load_balancers gauge", f"pycloud_load_balancers {lb_count}",
                  "# TYPE pycloud_routes gauge", f"pycloud_routes {route_count}"]
        return "\n".join(lines) + "\n"


class Gateway(gateway_pb2_grpc.IdentityServicer, gateway_pb2_grpc.InstancesServicer,
              gateway_pb2_grpc.LoadBalancersServicer, gateway_pb2_grpc.RoutesServicer):

    def __init__(self, cloud, metrics, disabled, limits):
        self.cloud = cloud
        self.metrics = metrics
        self.disabled = set(disabled)
        self.limits = limits

    def _serve(self, method, capability, context, work):
        """The frame of every call: the provider header, capability, typed errors, metrics."""
        context.send_initial_metadata(((PROVIDER_HEADER, PROVIDER),))
        try:
            if capability in self.disabled:
                raise GatewayError(R.ERROR_REASON_NOT_IMPLEMENTED, f"{PROVIDER} serves no {capability} here")
            answer = work()
        except GatewayError as e:
            log.info("%s: %s %s", method, e.code.name, e.message)
            self.metrics.count(method, e.code.name)
            context.abort_with_status(e.status())
        except Exception as e:  # a bug: still a typed answer, never a bare UNKNOWN
            log.exception("%s failed", method)
            self.metrics.count(method, "INTERNAL")
            context.abort_with_status(GatewayError(R.ERROR_REASON_INTERNAL, f"{method}: {e}").status())
        self.metrics.count(method, "OK")
        return answer

    # Identity.
    def GetCapabilities(self, request, context):
        return self._serve("GetCapabilities", None, context, lambda: gateway_pb2.Capabilities(
            provider_name=PROVIDER,
            instances="instances" not in self.disabled,
            load_balancers="load-balancers" not in self.disabled,
            routes="routes" not in self.disabled,
            limits=gateway_pb2.ProviderLimits(**self.limits),
        ))

    # Instances.
    def _metadata(self, instance):
        addresses = [types_pb2.NodeAddress(type=types_pb2.ADDRESS_TYPE_INTERNAL_IP, address=instance.private_ip)]
        if instance.public_ip:
            addresses.append(types_pb2.NodeAddress(type=types_pb2.ADDRESS_TYPE_EXTERNAL_IP,
                                                   address=instance.public_ip))
        addresses.append(types_pb2.NodeAddress(type=types_pb2.ADDRESS_TYPE_HOSTNAME, address=instance.name))
        return types_pb2.InstanceMetadata(provider_id=instance.provider_id, instance_type=instance.type,
                                          addresses=addresses, zone=instance.zone,
                                          region=self.cloud.region, additional_labels=instance.labels)

    def _find(self, request):
        return self.cloud.find(node_ref(request.node, request.HasField("node")))

    def InstanceExists(self, request, context):
        def work():
            try:
                self._find(request)
                return gateway_pb2.InstanceExistsResponse(exists=True)
            except GatewayError as e:
                if e.reason == R.ERROR_REASON_INSTANCE_NOT_FOUND:  # definitely gone: not an error here
                    return gateway_pb2.InstanceExistsResponse(exists=False)
                raise
        return self._serve("InstanceExists", "instances", context, work)

    def InstanceShutdown(self, request, context):
        return self._serve("InstanceShutdown", "instances", context, lambda: gateway_pb2.InstanceShutdownResponse(
            shutdown=self._find(request).state == "stopped"))

    def InstanceMetadata(self, request, context):
        return self._serve("InstanceMetadata", "instances", context, lambda: gateway_pb2.InstanceMetadataResponse(
            metadata=self._metadata(self._find(request))))

    def BatchLookupInstances(self, request, context):
        def work():
            if len(request.nodes) > MAX_BATCH_REQUEST:
                raise invalid(f"at most {MAX_BATCH_REQUEST} nodes per batch, got {len(request.nodes)}")
            for node in request.nodes:
                node_ref(node)
            results = []
            for node in request.nodes:  # one answer per node, in request order
                lookup = gateway_pb2.InstanceLookup(node=node)
                try:
                    instance = self.cloud.find(node)
                    lookup.found.CopyFrom(gateway_pb2.FoundInstance(
                        metadata=self._metadata(instance), shutdown=instance.state == "stopped"))
                except GatewayError as e:
                    lookup.error.CopyFrom(e.item())
                results.append(lookup)
            return gateway_pb2.BatchLookupInstancesResponse(results=results)
        return self._serve("BatchLookupInstances", "instances", context, work)

    # Load balancers.
    @staticmethod
    def _status(lb):
        return gateway_pb2.LoadBalancerStatus(ingress=[gateway_pb2.LoadBalancerIngress(ip=lb.ip)])

    def GetLoadBalancer(self, request, context):
        def work():
            cluster, svc = cluster_name(request.cluster_name), service(request)
            lb = self.cloud.get_load_balancer(cluster, load_balancer_name(svc))
            if lb is None:
                return gateway_pb2.GetLoadBalancerResponse(exists=False)
            return gateway_pb2.GetLoadBalancerResponse(exists=True, status=self._status(lb))
        return self._serve("GetLoadBalancer", "load-balancers", context, work)

    def GetLoadBalancerName(self, request, context):
        def work():
            cluster_name(request.cluster_name)
            return gateway_pb2.GetLoadBalancerNameResponse(name=load_balancer_name(service(request)))
        return self._serve("GetLoadBalancerName", "load-balancers", context, work)

    def EnsureLoadBalancer(self, request, context):
        def work():
            cluster, svc = cluster_name(request.cluster_name), service(request)
            lb = self.cloud.ensure_load_balancer(cluster, load_balancer_name(svc), svc, request.nodes)
            return gateway_pb2.EnsureLoadBalancerResponse(status=self._status(lb))
        return self._serve("EnsureLoadBalancer", "load-balancers", context, work)

    def UpdateLoadBalancer(self, request, context):
        def work():
            cluster, svc = cluster_name(request.cluster_name), service(request)
            self.cloud.update_load_balancer(cluster, load_balancer_name(svc), svc, request.nodes)
            return gateway_pb2.UpdateLoadBalancerResponse()
        return self._serve("UpdateLoadBalancer", "load-balancers", context, work)

    def EnsureLoadBalancerDeleted(self, request, context):
        def work():
            cluster, svc = cluster_name(request.cluster_name), service(request)
            self.cloud.delete_load_balancer(cluster, load_balancer_name(svc))
            return gateway_pb2.EnsureLoadBalancerDeletedResponse()
        return self._serve("EnsureLoadBalancerDeleted", "load-balancers", context, work)

    # Routes.
    def ListRoutes(self, request, context):
        def work():
            routes = self.cloud.list_routes(cluster_name(request.cluster_name))
            return gateway_pb2.ListRoutesResponse(routes=[
                gateway_pb2.Route(name=r.name, target_node=r.target_node, destination_cidr=r.destination_cidr,
                                  blackhole=blackhole)
                for r, blackhole in routes])
        return self._serve("ListRoutes", "routes", context, work)

    def CreateRoute(self, request, context):
        def work():
            cluster = cluster_name(request.cluster_name)
            cidr = destination(request.route, request.HasField("route"))
            if not request.route.target_node:
                raise invalid("route.target_node is required")
            if not request.name_hint:
                raise invalid("name_hint (the node UID) is required")
            self.cloud.create_route(cluster, request.name_hint, request.route.target_node, cidr)
            return gateway_pb2.CreateRouteResponse()
        return self._serve("CreateRoute", "routes", context, work)

    def DeleteRoute(self, request, context):
        def work():
            cluster = cluster_name(request.cluster_name)
            self.cloud.delete_route(cluster, destination(request.route, request.HasField("route")))
            return gateway_pb2.DeleteRouteResponse()
        return self._serve("DeleteRoute", "routes", context, work)



# --- the admin HTTP port: health, metrics, knobs --------------------------------------------------

def admin_handler(cloud, metrics):
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status, body, content_type="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body, indent=1).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (the http.server API)
            if self.path in ("/healthz", "/readyz"):
                self._reply(200, "ok\n", "text/plain")
            elif self.path == "/metrics":
                self._reply(200, metrics.render(cloud), "text/plain; version=0.0.4")
            elif self.path == "/admin/knobs":
                self._reply(200, cloud.set_knobs({}))
            elif self.path == "/admin/state":
                self._reply(200, cloud.state())
            else:
                self._reply(404, {"error": f"no {self.path}"})

        def do_PUT(self):  # noqa: N802
            if self.path != "/admin/knobs":
                return self._reply(404, {"error": f"no {self.path}"})
            try:
                patch = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                self._reply(200, cloud.set_knobs(patch))
            except (ValueError, TypeError, AttributeError) as e:
                self._reply(400, {"error": str(e)})

        do_POST = do_PUT

        def log_message(self, fmt, *args):
            log.debug("admin: " + fmt, *args)

    return Handler


# --- main -----------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="pycloud: a cloudgateway.v1 gateway in Python over an in-memory cloud")
    p.add_argument("--listen", default="127.0.0.1:50061", help="gRPC address, HOST:PORT (default %(default)s)")
    p.add_argument("--admin-listen", help="HTTP address for /healthz, /metrics and /admin/knobs (off when unset)")
    p.add_argument("--inventory", type=Path, default=DEFAULT_INVENTORY,
                   help="the cloud's region, zones, address pool and instances, YAML or JSON (default %(default)s)")
    p.add_argument("--disable", action="append", default=[], choices=["instances", "load-balancers", "routes"],
                   help="a capability to leave out (repeatable)")
    p.add_argument("--lb-provision-delay", type=float, default=0.0,
                   help="seconds a new load balancer takes to provision (ensure answers RETRY_AFTER meanwhile)")
    p.add_argument("--read-rate", type=float, default=100.0, help="reads per second advertised in Capabilities")
    p.add_argument("--write-rate", type=float, default=20.0, help="writes per second advertised in Capabilities")
    p.add_argument("--max-instance-batch", type=int, default=500, help="advertised in Capabilities")
    p.add_argument("--tls-cert-file", type=Path, help="PEM certificate: serve mutual TLS (with the two below)")
    p.add_argument("--tls-key-file", type=Path, help="PEM private key of --tls-cert-file")
    p.add_argument("--tls-client-ca-file", type=Path, help="PEM CA every client certificate must chain to")
    p.add_argument("--grace", type=float, default=5.0, help="seconds in-flight calls may finish on SIGTERM")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    tls = [args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file]
    if any(tls) and not all(tls):
        p.error("--tls-cert-file, --tls-key-file and --tls-client-ca-file go together")
    return args


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        inventory = yaml.safe_load(args.inventory.read_text()) or {}
        cloud = Cloud(inventory)
    except (OSError, ValueError, yaml.YAMLError) as e:
        log.error("inventory %s: %s", args.inventory, e)
        return 2
    cloud.knobs["lb_provision_delay"] = max(0.0, args.lb_provision_delay)
    metrics = Metrics()
    limits = {"max_instance_batch": args.max_instance_batch, "read_rate_per_second": args.read_rate,
              "write_rate_per_second": args.write_rate}
    gateway = Gateway(cloud, metrics, args.disable, limits)

    # No SO_REUSEPORT: a second gateway on a busy port must fail, not share it.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])
    gateway_pb2_grpc.add_IdentityServicer_to_server(gateway, server)
    gateway_pb2_grpc.add_InstancesServicer_to_server(gateway, server)
    gateway_pb2_grpc.add_LoadBalancersServicer_to_server(gateway, server)
    gateway_pb2_grpc.add_RoutesServicer_to_server(gateway, server)
    if args.tls_cert_file:
        credentials = grpc.ssl_server_credentials(
            [(args.tls_key_file.read_bytes(), args.tls_cert_file.read_bytes())],
            root_certificates=args.tls_client_ca_file.read_bytes(), require_client_auth=True)
        port = server.add_secure_port(args.listen, credentials)
    else:
        port = server.add_insecure_port(args.listen)
    if not port:
        log.error("cannot listen on %s", args.listen)
        return 1

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    # The admin port answers /readyz once gRPC serves.
    admin = None
    if args.admin_listen:
        host, _, admin_port = args.admin_listen.rpartition(":")
        try:
            admin = ThreadingHTTPServer((host, int(admin_port)), admin_handler(cloud, metrics))
        except (OSError, ValueError) as e:
            log.error("cannot serve the admin API on %s: %s", args.admin_listen, e)
            server.stop(0)
            return 1
        threading.Thread(target=admin.serve_forever, daemon=True).start()
    states = collections.Counter(i.state for i in cloud.instances.values())
    log.info("serving cloudgateway.v1 (provider %s) on %s%s; %d instances (%s), pool %s%s",
             PROVIDER, args.listen, " with mutual TLS" if args.tls_cert_file else " in plain text",
             len(cloud.instances), dict(states), cloud.pool,
             f"; admin on http://{args.admin_listen}" if admin else "")
    stop.wait()
    log.info("stopping: in-flight calls get %.0fs", args.grace)
    server.stop(args.grace).wait()
    if admin:
        admin.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
