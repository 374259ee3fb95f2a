"""An Octavia network driver: real Neutron VIP ports, no-op for everything amphora-side.

Why: the stock no-op network driver invents the VIP (a random vip_port_id that Neutron does
not know, 198.51.100.1 when no address was asked for), so a floating IP cannot be attached to
a load balancer's VIP, which is exactly what a cloud controller manager does. The real
allowed-address-pairs driver on the other hand wants amphora VMs, their ports and security
groups, which the no-op compute driver never makes.

So: allocate_vip / deallocate_vip and the look-ups of networks, subnets and ports go to real
Neutron (through the stock AllowedAddressPairsDriver, authenticated as [service_auth]).
A look-up that Neutron answers with "not found" and that has no request context (the
worker's own look-ups, e.g. of the fake amphora management network in
[controller_worker] amp_boot_network_list) falls back to the no-op answer. Everything else
(plugging amphorae, security groups, failover) stays no-op.

The no-op answer for a network keeps one invented subnet. The stock no-op network invents
one more subnet every time its subnet list is read, and keeps the network (and all its
subnets) for the worker's life; every load-balancer create reads the management network's
subnets, and plugs each one into the new amphora with a Neutron look-up per subnet, so the
n-th create since the worker started made about n look-ups (250 network GETs per create
after 250 creates, the bound of a long test run).
"""
import threading

from oslo_log import log as logging

from octavia.network import base
from octavia.network.drivers.noop_driver import driver as noop

LOG = logging.getLogger(__name__)


_neutron = None
_neutron_lock = threading.Lock()


class NeutronVipNoopDriver(noop.NoopNetworkDriver):
    @property
    def neutron(self):
        # One per process, made on first use: its constructor asks Neutron for five
        # extensions, and the worker makes a network driver per task (eight per create).
        global _neutron
        with _neutron_lock:
            if _neutron is None:
                from octavia.network.drivers.neutron import allowed_address_pairs
                _neutron = allowed_address_pairs.AllowedAddressPairsDriver()
        return _neutron

    # -- the VIP is a real Neutron port ------------------------------------------------------

    def allocate_vip(self, loadbalancer):
        # Creates (or reuses) the port 'octavia-lb-<id>' on the VIP network/subnet/address.
        return self.neutron.allocate_vip(loadbalancer)

    def deallocate_vip(self, vip):
        # The stock version walks vip.load_balancer.amphorae, which is None on a flow revert
        # ('NoneType' object has no attribute 'amphorae'); only the port matters here.
        if not vip or not vip.port_id:
            return
        try:
            port = self.neutron.get_port(vip.port_id)
        except base.PortNotFound:
            return
        if port.device_owner == 'Octavia' or port.name == 'octavia-lb-%s' % vip.load_balancer_id:
            try:
                self.neutron.delete_port(vip.port_id)
            except Exception:  # already gone, or Neutron down: a test cloud logs and moves on
                LOG.exception('deleting VIP port %s', vip.port_id)
        else:
            LOG.info('VIP port %s was not created by Octavia; leaving it', vip.port_id)

    # -- look-ups: real first, no-op for the worker's imaginary networks ---------------------

    def _lookup(self, kind, real, fake, ident, context):
        try:
            return real(ident, context=context)
        except (base.NetworkNotFound, base.SubnetNotFound, base.PortNotFound):
            if context is not None:
                raise  # an API request naming a missing resource must fail as it would for real
            LOG.debug('%s %s not in Neutron: no-op answer', kind, ident)
            return fake(ident)

    def get_network(self, network_id, context=None):
        return self._lookup('network', self.neutron.get_network, self._noop_network,
                            network_id, context)

    def _noop_network(self, network_id):
        known = network_id in noop._NOOP_MANAGER_VARS['networks']
        network = self.driver.get_network(network_id)
        if not known:
            network.subnets = list(network.subnets)  # one invented subnet, for good
        return network

    def get_subnet(self, subnet_id, context=None):
        return self._lookup('subnet', self.neutron.get_subnet, self.driver.get_subnet,
                            subnet_id, context)

    def get_port(self, port_id, context=None):
        return self._lookup('port', self.neutron.get_port, self.driver.get_port,
                            port_id, context)

    def get_network_ip_availability(self, network):
        # The API uses it to pick a subnet when only a VIP network was given.
        return self.neutron.get_network_ip_availability(network)
