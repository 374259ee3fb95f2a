"""WSGI application factories for gunicorn (`gunicorn 'testcloud_glue.wsgi:keystone()'`).

Why: Debian ships the WSGI scripts (keystone-wsgi-public, placement-api, barbican-wsgi-api) only
in the daemon packages, which we do not install. octavia-api's own command serves with wsgiref's
simple_server, whose listen backlog is 5: with more clients at once than that (50 Services
created together) the rest get "connection reset", so it runs under gunicorn too. Keystone's factory also parses sys.argv with oslo.config,
and under gunicorn that is gunicorn's own command line ("unrecognized arguments: -b ..."),
so argv is cut to the program name first. Configuration comes from the environment:
OS_KEYSTONE_CONFIG_FILES, OS_PLACEMENT_CONFIG_DIR, OS_OCTAVIA_CONFIG_FILE and OS_BARBICAN_PASTE
(Barbican reads its options from ~/barbican.conf: the testcloud script sets HOME).
Run with `-k sync` workers: keystone's sqlite use is not thread-safe under gthread.
"""
import os
import sys


def keystone():
    sys.argv = sys.argv[:1]
    from keystone.server import wsgi
    return wsgi.initialize_public_application()


def placement():
    sys.argv = sys.argv[:1]
    from placement import wsgi
    return wsgi.init_application()


def octavia():
    sys.argv = [sys.argv[0], "--config-file", os.environ["OS_OCTAVIA_CONFIG_FILE"]]
    import testcloud_glue.sqlite_pool  # noqa: F401 (their docstrings say why)
    import testcloud_glue.octavia_api_lock_session  # noqa: F401
    from octavia.api import app
    return app.setup_app(argv=sys.argv)


def barbican():
    # barbican-wsgi-api's own path (get_api_wsgi_script), with the paste file the testcloud
    # script writes instead of /etc/barbican's.
    sys.argv = sys.argv[:1]
    from paste import deploy
    return deploy.loadapp("config:" + os.environ["OS_BARBICAN_PASTE"])
