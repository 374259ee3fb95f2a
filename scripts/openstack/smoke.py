#!/usr/bin/python3
"""End-to-end check of a running test cloud over REST, as the CCM user (`testcloud up DIR` first).

    scripts/openstack/smoke.py DIR [--boots N] [--concurrent N]

Boots, stops and deletes a server; adds and removes router extra routes; checks If-Match on
router updates; creates a load balancer (listener, pool, member, health monitor), attaches a
floating IP to its VIP port and deletes it with cascade; boots N servers one after another and
N at once. Prints each step with its time; exits 1 on the first failure.
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
