"""Every sqlite transaction starts with BEGIN IMMEDIATE (imported first by nova-api,
nova-conductor and nova-scheduler, which write the same files at the same time, and by
octavia-worker, which writes beside octavia-api).

Why: oslo.db starts sqlite transactions with a plain (deferred) BEGIN. In WAL mode a
transaction that first reads and then writes, while another process has written in between,
fails at once with "database is locked" (SQLITE_BUSY_SNAPSHOT): sqlite's busy timeout does
not apply to that case. Seen with several servers deleted at once (nova-api 500s), and in
octavia-worker's flows (a pool delete, a listener update) while octavia-api wrote: the flow
failed and left its load balancer PENDING_* or ERROR. BEGIN
IMMEDIATE takes the write lock up front, so such a transaction waits (up to the `timeout` of
the connection URL) instead of failing. Cost: transactions of different processes on one
file run one at a time, which a test cloud does not notice.

Not for Keystone: it opens a second session inside a writing one, in the same thread; with
IMMEDIATE that second session waits for the first until the busy timeout ("database is
locked" after 60 s, seen). Keystone, Glance, Placement, Neutron and octavia-api keep
oslo.db's deferred BEGIN: each of the first four is the only writer of its files, and
octavia-api opens a second session while its lock session writes, as Keystone does.
"""
from sqlalchemy import event
from sqlalchemy.engine import Engine


@event.listens_for(Engine, "before_cursor_execute", retval=True)
def _begin_immediate(conn, cursor, statement, parameters, context, executemany):
    if statement == "BEGIN" and conn.dialect.name == "sqlite":
        statement = "BEGIN IMMEDIATE"
    return statement, parameters
