"""`python -m loadgen.worker --master-host H --master-port P`: one Locust worker process.

Owns nothing but joining a master (local or remote) with the loadgen driver user. The master
sends the run configuration with its spawn message; records go back as custom messages. Plain
`locust -f loadgen/locustfile.py --worker --master-host H` is equivalent.
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import sys  # noqa: E402

from locust.env import Environment  # noqa: E402

from loadgen.locust.install import install  # noqa: E402
from loadgen.locust.user import DriverUser  # noqa: E402

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.worker", description=__doc__)
    parser.add_argument("--master-host", default="127.0.0.1", help="master address")
    parser.add_argument("--master-port", type=int, default=5557, help="master port")
    args = parser.parse_args(argv)
    env = Environment(user_classes=[DriverUser])
    runner = env.create_worker_runner(args.master_host, args.master_port)
    install(env)
    try:
        runner.greenlet.join()
    except KeyboardInterrupt:
        runner.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
