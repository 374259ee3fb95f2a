#!/usr/bin/env python3
"""Changes the Python example gateway's cloud behind its back (standard library only, so any
python3 runs it; cloudgateway-conformance's hooks do):

    python3 knobs.py [--admin http://127.0.0.1:10261] throttle=on lb_provision_delay=2

The admin address defaults to $PYTHON_GATEWAY_ADMIN, else http://127.0.0.1:10261.
"""
import argparse
import json
import os
import sys
import urllib.request


def value(text):
    if text in ("on", "true"):
        return True
    if text in ("off", "false"):
        return False
    return float(text)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--admin", default=os.environ.get("PYTHON_GATEWAY_ADMIN", "http://127.0.0.1:10261"))
    p.add_argument("knobs", nargs="*", help="KNOB=VALUE: throttle=on|off, lb_provision_delay=SECONDS")
    args = p.parse_args()
    patch = {}
    for knob in args.knobs:
        key, sep, text = knob.partition("=")
        if not sep:
            p.error(f"{knob!r}: expected KNOB=VALUE")
        patch[key] = value(text)
    request = urllib.request.Request(f"{args.admin.rstrip('/')}/admin/knobs", method="PUT",
                                     data=json.dumps(patch).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            print(answer.read().decode().strip())
    except OSError as e:
        sys.exit(f"knobs: {args.admin}: {e}")


if __name__ == "__main__":
    main()
