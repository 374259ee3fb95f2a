#!/usr/bin/python3
"""End-to-end check of a running test cloud over REST, as the CCM user (`testcloud up DIR` first).

    scripts/openstack/smoke.py DIR [--boots N] [--concurrent N]

Boots, stops and deletes a server; adds and removes router extra routes; checks If-Match on
router updates; creates a load balancer (listener, pool, member, health monitor), attaches a
floating IP to its VIP port and deletes it with cascade; terminates TLS on a listener with a
certificate container in Barbican, then switches it to another container and to a PKCS12 secret
(and checks Octavia's answer for a container that does not exist); boots N servers one after
another and N at once. Prints each step with its time; exits 1 on the first failure.
"""
import argparse
import ipaddress
import json
import os
import sys
import time

import requests

NOVA_MICROVERSION = "2.79"  # Zed's maximum is 2.93; 2.79 is what the checks below rely on at most


class Cloud:
    def __init__(self, info, who="ccm"):
        self.info = info
        cred = info[who]
        self.s = requests.Session()
        self.s.trust_env = False
        r = self.s.post(info["auth_url"] + "/auth/tokens", json={"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": cred["username"], "domain": {"name": cred["user_domain_name"]},
                "password": cred["password"]}}},
            "scope": {"project": {"name": cred["project_name"],
                                  "domain": {"name": cred["project_domain_name"]}}}}}, timeout=30)
        r.raise_for_status()
        self.s.headers["X-Auth-Token"] = r.headers["X-Subject-Token"]
        self.s.headers["OpenStack-API-Version"] = "compute " + NOVA_MICROVERSION
        self.catalog = {e["type"]: [x["url"] for x in e["endpoints"] if x["interface"] == "public"][0]
                        for e in r.json()["token"]["catalog"]}

    def call(self, method, service, path, expect=(200, 201, 202, 204), **kw):
        r = self.s.request(method, self.catalog[service] + path, timeout=60, **kw)
        if expect and r.status_code not in expect:
            raise AssertionError("%s %s -> %d %s" % (method, path, r.status_code, r.text[:400]))
        return r

    def json(self, method, service, path, body=None, **kw):
        r = self.call(method, service, path, json=body, **kw)
        return r.json() if r.content else {}


def wait(what, fn, timeout=120, interval=0.25):
    t = time.monotonic()
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() - t > timeout:
            raise AssertionError("timeout waiting for " + what)
        time.sleep(interval)


STEPS = []


def step(name):
    def deco(fn):
        def run(*a, **kw):
            t = time.monotonic()
            try:
                out = fn(*a, **kw)
            except Exception as e:
                print("FAIL  %-48s %6.2fs  %s" % (name, time.monotonic() - t, e), flush=True)
                raise
            dt = time.monotonic() - t
            STEPS.append((name, dt))
            print("ok    %-48s %6.2fs  %s" % (name, dt, out if out is not None else ""), flush=True)
            return out
        return run
    return deco


def server_status(c, sid):
    r = c.call("GET", "compute", "/servers/" + sid, expect=(200, 404))
    if r.status_code == 404:
        return "404"
    s = r.json()["server"]
    if s["status"] == "ERROR":
        raise AssertionError("server %s ERROR: %s" % (sid, s.get("fault")))
    return s["status"]


def boot(c, ids, name):
    return c.json("POST", "compute", "/servers", {"server": {
        "name": name, "flavorRef": ids["flavors"]["m1.tiny"], "imageRef": ids["image_cirros"],
        "networks": [{"uuid": ids["network_private"]}]}})["server"]["id"]


def self_signed(cn):
    """A real self-signed certificate for `cn` and its key, PEM, and the pair as PKCS12."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.utcnow()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(cn)]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    p12 = pkcs12.serialize_key_and_certificates(cn.encode(), key, cert, None, serialization.NoEncryption())
    return cert_pem, key_pem, p12


def tls_step(c, ids, tag):
    """TERMINATED_HTTPS as OCCM builds it: the user's container (or PKCS12 secret) in Barbican,
    its ref on the listener, an HTTP pool; then the ref changed, then everything deleted."""
    import base64

    def secret(name, payload, content_type="text/plain", encoding=None):
        body = {"name": name, "payload": payload, "payload_content_type": content_type}
        if encoding:
            body["payload_content_encoding"] = encoding
        return c.json("POST", "key-manager", "/v1/secrets", body)["secret_ref"]

    def last_two(ref):
        return "/v1/" + "/".join(ref.rstrip("/").split("/")[-2:])

    made = {"containers": [], "secrets": []}

    @step("barbican: 2 certificate containers, 1 PKCS12 secret")
    def store():
        refs = []
        for i in (1, 2):
            cert_pem, key_pem, _ = self_signed("smoke-%d.example.test" % i)
            s_cert = secret("smoke-%s-%d-cert" % (tag, i), cert_pem)
            s_key = secret("smoke-%s-%d-key" % (tag, i), key_pem)
            made["secrets"] += [s_cert, s_key]
            ref = c.json("POST", "key-manager", "/v1/containers", {
                "name": "smoke-%s-%d" % (tag, i), "type": "certificate",
                "secret_refs": [{"name": "certificate", "secret_ref": s_cert},
                                {"name": "private_key", "secret_ref": s_key}]})["container_ref"]
            made["containers"].append(ref)
            refs.append(ref)
        _, _, p12 = self_signed("smoke-p12.example.test")
        p12_ref = secret("smoke-%s-p12" % tag, base64.b64encode(p12).decode(),
                         "application/octet-stream", "base64")
        made["secrets"].append(p12_ref)
        return refs + [p12_ref]
    ref1, ref2, p12_ref = store()

    def lb_status(lid):
        r = c.call("GET", "load-balancer", "/v2/lbaas/loadbalancers/" + lid, expect=(200, 404))
        if r.status_code == 404:
            return "404"
        st = r.json()["loadbalancer"]["provisioning_status"]
        if st == "ERROR":
            raise AssertionError("load balancer ERROR")
        return st

    def settled(lid):
        wait("LB ACTIVE", lambda: lb_status(lid) == "ACTIVE")

    @step("TERMINATED_HTTPS listener + HTTP pool -> ACTIVE")
    def create():
        lb = c.json("POST", "load-balancer", "/v2/lbaas/loadbalancers", {"loadbalancer": {
            "name": "smoke-tls-" + tag, "vip_subnet_id": ids["subnet_private"]}})["loadbalancer"]
        settled(lb["id"])
        li = c.json("POST", "load-balancer", "/v2/lbaas/listeners", {"listener": {
            "loadbalancer_id": lb["id"], "protocol": "TERMINATED_HTTPS", "protocol_port": 443,
            "default_tls_container_ref": ref1}})["listener"]
        settled(lb["id"])
        c.json("POST", "load-balancer", "/v2/lbaas/pools", {"pool": {
            "listener_id": li["id"], "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN"}})
        settled(lb["id"])
        got = c.json("GET", "load-balancer", "/v2/lbaas/listeners/" + li["id"])["listener"]
        assert got["provisioning_status"] == "ACTIVE", got
        assert got["default_tls_container_ref"] == ref1, got
        # Octavia added its service user to the read ACLs, with ccm's token.
        acl = c.json("GET", "key-manager", last_two(ref1) + "/acl")
        readers = acl.get("read", {}).get("users", [])
        assert readers, acl
        return lb["id"], li["id"], "container ACL readers %s" % readers
    lid, li_id, _ = create()

    @step("listener with a container that does not exist -> 400")
    def missing():
        gone = ref1.rsplit("/", 1)[0] + "/00000000-0000-0000-0000-000000000000"
        r = c.call("POST", "load-balancer", "/v2/lbaas/listeners", expect=(400,), json={"listener": {
            "loadbalancer_id": lid, "protocol": "TERMINATED_HTTPS", "protocol_port": 8443,
            "default_tls_container_ref": gone}})
        return "%d %s" % (r.status_code, r.text.strip())
    missing()

    @step("listener ref -> 2nd container, then PKCS12 secret")
    def change():
        for ref in (ref2, p12_ref):
            c.json("PUT", "load-balancer", "/v2/lbaas/listeners/" + li_id,
                   {"listener": {"default_tls_container_ref": ref}})
            settled(lid)
            got = c.json("GET", "load-balancer", "/v2/lbaas/listeners/" + li_id)["listener"]
            assert got["default_tls_container_ref"] == ref and got["provisioning_status"] == "ACTIVE", got
    change()

    @step("LB cascade delete -> 404; containers, secrets deleted")
    def delete():
        c.call("DELETE", "load-balancer", "/v2/lbaas/loadbalancers/%s?cascade=true" % lid)
        wait("LB gone", lambda: lb_status(lid) == "404")
        for ref in made["containers"] + made["secrets"]:
            c.call("DELETE", "key-manager", last_two(ref))
        for ref in made["containers"] + made["secrets"]:
            c.call("GET", "key-manager", last_two(ref), expect=(404,))
        return "%d containers, %d secrets" % (len(made["containers"]), len(made["secrets"]))
    delete()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--concurrent", type=int, default=3)
    args = ap.parse_args()
    with open(os.path.join(args.dir, "cloud.json")) as f:
        info = json.load(f)
    ids = info["ids"]
    c = Cloud(info)
    tag = str(int(time.time()))

    exts = {e["alias"] for e in c.json("GET", "network", "/v2.0/extensions")["extensions"]}
    needed = ["router", "extraroute", "extraroute-atomic", "revision-if-match", "standard-attr-revisions",
              "external-net", "port-security", "security-group", "allowed-address-pairs"]
    missing = [e for e in needed if e not in exts]
    print("neutron extensions: %s" % ("all present: " + " ".join(needed) if not missing else "MISSING %s" % missing))
    if missing:
        return 1

    # -- server lifecycle ------------------------------------------------------------------
    sid = step("server create -> ACTIVE")(lambda: (
        lambda i: wait("ACTIVE", lambda: server_status(c, i) == "ACTIVE" and i))(boot(c, ids, "smoke-" + tag)))()

    @step("server has an address on private-subnet")
    def addr():
        s = c.json("GET", "compute", "/servers/" + sid)["server"]
        ips = [a["addr"] for a in s["addresses"].get("private", [])]
        v4 = [ip for ip in ips if ipaddress.ip_address(ip) in ipaddress.ip_network("10.0.0.0/24")]
        assert v4, s["addresses"]
        ports = c.json("GET", "network", "/v2.0/ports?device_id=" + sid)["ports"]
        assert ports and ports[0]["binding:vif_type"] != "binding_failed" if "binding:vif_type" in ports[0] else True
        return "%s (port %s %s)" % (ips, ports[0]["id"][:8], ports[0]["status"])
    addr()

    @step("server stop -> SHUTOFF")
    def stop():
        c.call("POST", "compute", "/servers/%s/action" % sid, json={"os-stop": None})
        wait("SHUTOFF", lambda: server_status(c, sid) == "SHUTOFF")
    stop()

    @step("server delete -> 404")
    def delete():
        c.call("DELETE", "compute", "/servers/" + sid)
        wait("404", lambda: server_status(c, sid) == "404")
        wait("port gone", lambda: not c.json("GET", "network", "/v2.0/ports?device_id=" + sid)["ports"])
    delete()

    # -- router extra routes ---------------------------------------------------------------
    rid = ids["router1"]
    route = {"destination": "192.168.77.0/24", "nexthop": "10.0.0.77"}

    @step("router add_extraroutes (ccm)")
    def add_routes():
        r = c.json("PUT", "network", "/v2.0/routers/%s/add_extraroutes" % rid, {"router": {"routes": [route]}})
        assert route in r["router"]["routes"], r
        return r["router"]["routes"]
    add_routes()

    @step("router remove_extraroutes (ccm)")
    def remove_routes():
        r = c.json("PUT", "network", "/v2.0/routers/%s/remove_extraroutes" % rid, {"router": {"routes": [route]}})
        assert route not in r["router"]["routes"], r
        return r["router"]["routes"]
    remove_routes()

    @step("router PUT If-Match revision_number")
    def if_match():
        rev = c.json("GET", "network", "/v2.0/routers/" + rid)["router"]["revision_number"]
        r = c.call("PUT", "network", "/v2.0/routers/" + rid, json={"router": {"routes": [route]}},
                   headers={"If-Match": "revision_number=%d" % rev})
        new = r.json()["router"]["revision_number"]
        stale = c.call("PUT", "network", "/v2.0/routers/" + rid, json={"router": {"routes": []}},
                       headers={"If-Match": "revision_number=%d" % rev}, expect=(412,))
        c.call("PUT", "network", "/v2.0/routers/" + rid, json={"router": {"routes": []}},
               headers={"If-Match": "revision_number=%d" % new})
        return "rev %d -> %d; stale If-Match -> %d" % (rev, new, stale.status_code)
    if_match()

    # -- load balancer ---------------------------------------------------------------------
    def lb_status(lid):
        r = c.call("GET", "load-balancer", "/v2/lbaas/loadbalancers/" + lid, expect=(200, 404))
        if r.status_code == 404:
            return "404"
        st = r.json()["loadbalancer"]["provisioning_status"]
        if st == "ERROR":
            raise AssertionError("load balancer ERROR")
        return st

    @step("loadbalancer create -> ACTIVE")
    def lb_create():
        lb = c.json("POST", "load-balancer", "/v2/lbaas/loadbalancers", {"loadbalancer": {
            "name": "smoke-" + tag, "vip_subnet_id": ids["subnet_private"]}})["loadbalancer"]
        wait("LB ACTIVE", lambda: lb_status(lb["id"]) == "ACTIVE")
        return c.json("GET", "load-balancer", "/v2/lbaas/loadbalancers/" + lb["id"])["loadbalancer"]
    lb = lb_create()
    lid = lb["id"]

    @step("VIP port exists in neutron")
    def vip_port():
        p = c.json("GET", "network", "/v2.0/ports/" + lb["vip_port_id"])["port"]
        assert p["fixed_ips"][0]["ip_address"] == lb["vip_address"], (p, lb)
        return "%s %s %s" % (p["name"], lb["vip_address"], p["device_owner"])
    vip_port()

    def child_active():
        wait("LB ACTIVE", lambda: lb_status(lid) == "ACTIVE")

    @step("listener+pool+member+healthmonitor -> ACTIVE")
    def lb_children():
        li = c.json("POST", "load-balancer", "/v2/lbaas/listeners", {"listener": {
            "loadbalancer_id": lid, "protocol": "TCP", "protocol_port": 80}})["listener"]
        child_active()
        pool = c.json("POST", "load-balancer", "/v2/lbaas/pools", {"pool": {
            "listener_id": li["id"], "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}})["pool"]
        child_active()
        c.json("POST", "load-balancer", "/v2/lbaas/pools/%s/members" % pool["id"], {"member": {
            "address": "10.0.0.50", "protocol_port": 30080, "subnet_id": ids["subnet_private"]}})
        child_active()
        c.json("POST", "load-balancer", "/v2/lbaas/healthmonitors", {"healthmonitor": {
            "pool_id": pool["id"], "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 2}})
        child_active()
    lb_children()

    @step("floating IP on the VIP port")
    def fip():
        f = c.json("POST", "network", "/v2.0/floatingips", {"floatingip": {
            "floating_network_id": ids["network_public"], "port_id": lb["vip_port_id"]}})["floatingip"]
        assert f["fixed_ip_address"] == lb["vip_address"], f
        return f
    f = fip()

    @step("floating IP delete, LB cascade delete -> 404")
    def lb_delete():
        c.call("DELETE", "network", "/v2.0/floatingips/" + f["id"])
        c.call("DELETE", "load-balancer", "/v2/lbaas/loadbalancers/%s?cascade=true" % lid)
        wait("LB gone", lambda: lb_status(lid) == "404")
        wait("VIP port gone", lambda: c.call("GET", "network", "/v2.0/ports/" + lb["vip_port_id"],
                                             expect=(200, 404)).status_code == 404)
        return "VIP port %s deleted" % lb["vip_port_id"][:8]
    lb_delete()

    tls_step(c, ids, tag)

    # -- several servers -------------------------------------------------------------------
    made = []

    @step("%d servers one after another -> ACTIVE" % args.boots)
    def sequential():
        for i in range(args.boots):
            s = boot(c, ids, "smoke-seq-%s-%d" % (tag, i))
            made.append(s)
            wait("ACTIVE", lambda: server_status(c, s) == "ACTIVE")
    sequential()

    @step("%d servers at once -> ACTIVE" % args.concurrent)
    def concurrent():
        batch = [boot(c, ids, "smoke-par-%s-%d" % (tag, i)) for i in range(args.concurrent)]
        made.extend(batch)
        wait("all ACTIVE", lambda: all(server_status(c, s) == "ACTIVE" for s in batch), timeout=180)
    concurrent()

    @step("delete them all -> 404")
    def cleanup():
        for s in made:
            c.call("DELETE", "compute", "/servers/" + s)
        wait("all 404", lambda: all(server_status(c, s) == "404" for s in made), timeout=180)
    cleanup()

    print("total %.1fs" % sum(t for _, t in STEPS))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError:
        sys.exit(1)
