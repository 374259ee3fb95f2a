"""oslo.log's eventlet fix for logging only where eventlet runs the threads (imported by
octavia-worker before it starts).

Why: oslo.log 5.0.1 (Debian 12) swaps logging's module lock for an eventlet RLock at
`log.setup()` whenever eventlet has been imported, monkey patched or not, and octavia-worker
imports it without patching (oslo_utils.eventletutils tries the import). The worker runs its
flows in native threads; two of them meeting on that lock (`logging.getLogger`, which keystoneauth
calls for every request and answer of the VIP network driver) leave the waiter in an eventlet hub of its own
that nothing ever wakes. Seen on this test cloud: a load-balancer delete whose flow read the
VIP port and never sent its delete, the load balancer PENDING_DELETE for good (the worker's
thread in `Hub.wait` with no reader, writer or timer). `scripts/openstack/check_octavia_worker_threads.py`
reproduces it apart from Octavia: eight threads calling `logging.getLogger` after `log.setup()`
with eventlet imported hang without this module.

The fix applies oslo.log's swap only when threads are monkey patched, the case it exists for.
"""
import sys

from oslo_log import log

_fix_eventlet_logging = log._fix_eventlet_logging


def _fix_only_for_green_threads():
    eventlet = sys.modules.get("eventlet")
    if eventlet is not None and eventlet.patcher.is_monkey_patched("thread"):
        _fix_eventlet_logging()


log._fix_eventlet_logging = _fix_only_for_green_threads
