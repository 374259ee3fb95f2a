#!/usr/bin/python3
"""Checks that octavia-worker's native threads can log at once, as its flows do, in a process
made as `testcloud` makes the worker's: the same glue imported first, eventlet imported but not
patched (oslo_utils.eventletutils imports it), then oslo.log's `log.setup()`.

    scripts/openstack/check_octavia_worker_threads.py

Eight threads call `logging.getLogger` 2000 times each (keystoneauth does for every request of
the VIP network driver). Exits 0 when all finish within 20 s, 1 when they do not: without
`testcloud_glue/oslo_log_native_threads.py` they wait on eventlet's lock for good, and a
load-balancer flow stuck so leaves its load balancer PENDING_* forever.
"""
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THREADS = 8
DEADLINE_S = 20


def testcloud():
    loader = importlib.machinery.SourceFileLoader("testcloud", os.path.join(HERE, "testcloud"))
    spec = importlib.util.spec_from_loader("testcloud", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main():
    tc = testcloud()
    sys.path.insert(0, tc.GLUE)
    for name in ["sqlite_immediate"] + list(tc.OCTAVIA_WORKER_GLUE):
        importlib.import_module("testcloud_glue." + name)
    import eventlet  # noqa: F401  imported, never patched, as in octavia-worker
    from oslo_config import cfg
    from oslo_log import log

    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf([], project="check-octavia-worker-threads")
    log.setup(conf, "check-octavia-worker-threads")

    finished = []

    def work(i):
        for k in range(2000):
            logging.getLogger("check.%d.%d" % (i, k))
        finished.append(i)

    for i in range(THREADS):
        threading.Thread(target=work, args=(i,), daemon=True).start()
    deadline = time.monotonic() + DEADLINE_S
    while len(finished) < THREADS and time.monotonic() < deadline:
        time.sleep(0.05)
    print("%d of %d threads finished logging within %d s (logging's lock: %s)"
          % (len(finished), THREADS, DEADLINE_S, type(logging._lock).__module__), flush=True)
    # A hung thread would hold the interpreter's exit too.
    os._exit(0 if len(finished) == THREADS else 1)


if __name__ == "__main__":
    main()
