"""WSGI application factories for gunicorn (`gunicorn 'testcloud_glue.wsgi:keystone()'`).

Why: Debian ships the WSGI scripts (keystone-wsgi-public, placement-api) only in the daemon
packages, which we do not install. Keystone's factory also parses sys.argv with oslo.config,
and under gunicorn that is gunicorn's own command line ("unrecognized arguments: -b ..."),
so argv is cut to the program name first. Configuration comes from the environment:
OS_KEYSTONE_CONFIG_FILES and OS_PLACEMENT_CONFIG_DIR.
Run with `-k sync` workers: keystone's sqlite use is not thread-safe under gthread.
"""
import sys


def keystone():
    sys.argv = sys.argv[:1]
    from keystone.server import wsgi
    return wsgi.initialize_public_application()


def placement():
    sys.argv = sys.argv[:1]
    from placement import wsgi
    return wsgi.init_application()
