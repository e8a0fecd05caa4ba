"""`python -m loadgen.worker --master-host H --master-port P`: one Locust worker process.

Owns nothing but joining a master (local or remote) with the loadgen driver user, and, for a
worker its master started on this host (`--parent-pid`), quitting as soon as that master is
gone (even SIGKILLed): an orphan would keep sending its share of the schedule to the target.
The master sends the run configuration with its spawn message; records go back as custom
messages. Plain `locust -f loadgen/locustfile.py --worker --master-host H` is equivalent.
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
from locust.env import Environment  # noqa: E402

from loadgen.locust.install import install  # noqa: E402
from loadgen.locust.user import DriverUser  # noqa: E402

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.worker", description=__doc__)
    parser.add_argument("--master-host", default="127.0.0.1", help="master address")
    parser.add_argument("--master-port", type=int, default=5557, help="master port")
    parser.add_argument(
        "--parent-pid",
        type=int,
        help="quit when this process (the local master that started the worker) is gone",
    )
    args = parser.parse_args(argv)
    env = Environment(user_classes=[DriverUser])
    runner = env.create_worker_runner(args.master_host, args.master_port)
    install(env)
    if args.parent_pid is not None:
        gevent.spawn(_quit_when_orphaned, args.parent_pid)
    try:
        runner.greenlet.join()
    except KeyboardInterrupt:
        runner.quit()
    return 0


def _quit_when_orphaned(parent_pid: int) -> None:
    # Reparented (to init or a subreaper) once the master is gone; Locust itself would wait
    # 60 s for the master's heartbeat, sending load all the while.
    while os.getppid() == parent_pid:
        gevent.sleep(0.25)
    print("loadgen worker: its master is gone; quitting", file=sys.stderr, flush=True)
    os._exit(5)  # in-flight requests die with the process; nobody is left to record them


if __name__ == "__main__":
    sys.exit(main())
