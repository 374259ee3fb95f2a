"""octavia-api's locking sessions start with BEGIN IMMEDIATE (imported by octavia-api
before its application is made); its other sessions keep oslo.db's deferred BEGIN.

Why: octavia-api changes the database in a locking session (`get_session(autocommit=False)`)
that first reads (the quota row, the load balancer's status) and then writes. With a plain
BEGIN, when octavia-worker writes in between, sqlite fails the write at once with
"database is locked" (SQLITE_BUSY_SNAPSHOT; its busy timeout does not apply), and the
client gets a 500: seen on load-balancer creates and deletes while the worker ran other
creates. BEGIN IMMEDIATE makes the session wait for the worker's transaction instead.
Not for every session (sqlite_immediate.py): octavia-api reads in a second session while
its locking session holds the lock, and an IMMEDIATE read session would wait for it.
"""
import threading

from sqlalchemy import event
from sqlalchemy.engine import Engine

from octavia.db import api

_OPTION = "testcloud_begin_immediate"
_get_session = api.get_session
_engine = None
_engine_lock = threading.Lock()


@event.listens_for(Engine, "before_cursor_execute", retval=True)
def _begin_immediate_when_asked(conn, cursor, statement, parameters, context, executemany):
    if (statement == "BEGIN" and conn.dialect.name == "sqlite"
            and conn.get_execution_options().get(_OPTION)):
        statement = "BEGIN IMMEDIATE"
    return statement, parameters


def _locking_engine():
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = api.get_engine().execution_options(**{_OPTION: True})
    return _engine


def get_session(expire_on_commit=True, autocommit=True):
    if autocommit:
        return _get_session(expire_on_commit=expire_on_commit, autocommit=True)
    return api._create_facade_lazily().get_session(
        expire_on_commit=expire_on_commit, autocommit=False, bind=_locking_engine())


api.get_session = get_session
