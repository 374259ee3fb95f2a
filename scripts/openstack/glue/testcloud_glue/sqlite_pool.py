"""sqlite connections are kept open in a pool (imported first by octavia-api and
octavia-worker), as SQLAlchemy 2.0 does for file databases.

Why: SQLAlchemy 1.4 (Debian 12) gives a file database a NullPool: every session opens a new
sqlite connection (reading the schema again) and closes it after, and the close of the last
connection to a WAL file checkpoints it. Profiled with 20 load balancers created at once,
closing connections took 48 % of octavia-api's time and 21 % of octavia-worker's, so 50 at
once took minutes on the worker alone. Kept open, a connection is used by one thread at a
time (the pool checks it out), hence `check_same_thread` off. No upper bound on connections:
octavia-api opens a second session inside a writing one, and a bounded pool could leave
every thread waiting for a second connection.
"""
from sqlalchemy import pool
from sqlalchemy.dialects.sqlite import pysqlite

_POOLED = 10


class _OpenConnections(pool.QueuePool):
    def __init__(self, creator, **kw):
        kw.setdefault("pool_size", _POOLED)
        kw["max_overflow"] = -1
        super().__init__(creator, **kw)


_get_pool_class = pysqlite.SQLiteDialect_pysqlite.get_pool_class.__func__
_create_connect_args = pysqlite.SQLiteDialect_pysqlite.create_connect_args


def _get_pool_class_open(cls, url):
    if cls._is_url_file_db(url):
        return _OpenConnections
    return _get_pool_class(cls, url)


def _create_connect_args_any_thread(self, url):
    args, opts = _create_connect_args(self, url)
    if self._is_url_file_db(url):
        opts["check_same_thread"] = False
    return args, opts


pysqlite.SQLiteDialect_pysqlite.get_pool_class = classmethod(_get_pool_class_open)
pysqlite.SQLiteDialect_pysqlite.create_connect_args = _create_connect_args_any_thread
