"""octavia-worker runs a fully populated load-balancer create to the end (imported by
octavia-worker before it starts). Two faults of Octavia 11 (Debian 12's python3-octavia 11.0.0),
both seen on this test cloud with a one-listener fully populated create, OCCM's default way to
create:

1. `ControllerWorker.run_flow(func, *args, **kwargs)` calls `func(*args)` and hands every keyword
   to `taskflow_load` when the jobboard is off, as it is here. `create_load_balancer` passes
   `listeners=` that way, so the flow factory never sees the listeners: the load balancer goes
   ACTIVE, its listeners and pools stay PENDING_CREATE for good, and every later write to them
   answers 409 ("immutable"). Patched: `store` goes to the engine, everything else to the factory
   (what the jobboard path, `run_poster(func, *args, **kwargs)`, already does).
2. With the listeners passed, the flow fails validation: its `AmphoraePostNetworkPlug` task
   requires `amphorae_network_config` and nothing in `_create_listeners_flow` provides it (the
   member-create flow puts a `GetAmphoraeNetworkConfigs` task before the same task). Patched:
   that task is added to the listeners' flow in the same place.
"""
from octavia.common import constants
from octavia.controller.worker.v2 import controller_worker
from octavia.controller.worker.v2.flows import load_balancer_flows
from octavia.controller.worker.v2.tasks import amphora_driver_tasks, network_tasks
from taskflow.listeners import logging as tf_logging

_run_flow = controller_worker.ControllerWorker.run_flow


def _run_flow_with_factory_kwargs(self, func, *args, store=None, **kwargs):
    if controller_worker.CONF.task_flow.jobboard_enabled:
        return _run_flow(self, func, *args, store=store, **kwargs)
    engine = self.tf_engine.taskflow_load(func(*args, **kwargs), store=store)
    with tf_logging.DynamicLoggingListener(engine, log=controller_worker.LOG):
        engine.run()


_create_listeners_flow = load_balancer_flows.LoadBalancerFlows._create_listeners_flow


def _create_listeners_flow_with_network_config(self):
    flows = list(_create_listeners_flow(self))
    at = next(i for i, f in enumerate(flows)
              if isinstance(f, amphora_driver_tasks.AmphoraePostNetworkPlug))
    flows.insert(at, network_tasks.GetAmphoraeNetworkConfigs(
        name="testcloud-listeners-get-amphorae-network-config",
        requires=constants.LOADBALANCER_ID,
        provides=constants.AMPHORAE_NETWORK_CONFIG))
    return flows


controller_worker.ControllerWorker.run_flow = _run_flow_with_factory_kwargs
load_balancer_flows.LoadBalancerFlows._create_listeners_flow = _create_listeners_flow_with_network_config
