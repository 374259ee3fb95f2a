"""sqlite's "database is locked" reaches oslo.db as a deadlock (imported by neutron-server),
so Neutron's own retry decorators run the request again, as they do after a MySQL deadlock.

Why: neutron-server is one process, but its green threads each hold a pooled connection to the
same sqlite file. A transaction that reads, then writes after another green thread committed,
fails at once with "database is locked" (WAL's SQLITE_BUSY_SNAPSHOT; the busy timeout does not
apply). Sixteen clients creating security groups and their rules at once got 134 such 500s in
190 requests. BEGIN IMMEDIATE (sqlite_immediate.py) is no fix here: eventlet cannot switch
green threads while sqlite waits for its lock in C, so the waiting thread would stall the
process, the lock holder with it, until the timeout. Every Neutron API write is already wrapped
in `retry_db_errors`, which retries DBDeadlock with a back-off; the error only has to be named one.
"""
from oslo_db import exception
from oslo_db.sqlalchemy import exc_filters
from sqlalchemy import exc as sqla_exc


@exc_filters.filters("sqlite", sqla_exc.OperationalError, r".*database is locked")
def _locked_is_deadlock(operational_error, match, engine_name, is_disconnect):
    raise exception.DBDeadlock(operational_error)
