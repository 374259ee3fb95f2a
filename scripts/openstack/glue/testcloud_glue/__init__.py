"""Glue that lets stock OpenStack Zed services run as a loopback test cloud.

This directory goes on PYTHONPATH of every service the test cloud starts. The
testcloud_glue-0.dist-info folder beside it declares the entry points, so that
Neutron's and Octavia's stevedore loaders find the drivers by name without a
pip install into the system.
"""
