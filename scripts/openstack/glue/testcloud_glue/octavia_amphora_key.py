"""Every no-op amphora gets the same private key (imported by octavia-worker before it
starts); its certificate is still made and signed for it, with its own CN.

Why: each load-balancer create generates a 2048-bit RSA key for the amphora's agent
certificate. With the no-op amphora driver nothing ever uses that key, yet making it took
about 15 % of octavia-worker's time (profiled, 20 load balancers created at once), on a
worker that is the bound of the load-balancer benchmarks. One key per worker process
removes that cost and nothing else.
"""
import functools

from octavia.certificates.generator import local

_generate_private_key = local.LocalCertGenerator._generate_private_key.__func__


@functools.lru_cache(maxsize=None)
def _one_private_key(cls, bit_length=2048, passphrase=None):
    return _generate_private_key(cls, bit_length, passphrase)


local.LocalCertGenerator._generate_private_key = classmethod(_one_private_key)
