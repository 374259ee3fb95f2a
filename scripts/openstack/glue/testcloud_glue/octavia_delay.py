"""octavia-worker can take a set time over every load-balancer change, for benchmarks that need
Octavia as slow as a production one (imported by octavia-worker before it starts).

Why: with the no-op amphora driver the test cloud's Octavia applies a change in well under a
second, where a real one spends seconds to minutes (amphorae boot, haproxy reloads). While the
file `octavia-delay-s` in the test cloud's directory holds a number, every flow the worker runs
waits that many seconds first, so the load balancer stays PENDING_* that long; without the file
nothing changes. The wait is in the worker's RPC thread, so flows of different load balancers
still overlap, as they do on a real Octavia.
"""
import os
import time

from octavia.controller.worker.v2 import controller_worker

_FLAG = os.path.join(os.environ.get("OS_TESTCLOUD_DIR", "."), "octavia-delay-s")
_run_flow = controller_worker.ControllerWorker.run_flow


def _delay():
    try:
        with open(_FLAG) as f:
            return max(0.0, float(f.read().strip() or 0))
    except (OSError, ValueError):
        return 0.0


def _run_flow_after_the_delay(self, func, *args, **kwargs):
    delay = _delay()
    if delay:
        time.sleep(delay)
    return _run_flow(self, func, *args, **kwargs)


controller_worker.ControllerWorker.run_flow = _run_flow_after_the_delay
