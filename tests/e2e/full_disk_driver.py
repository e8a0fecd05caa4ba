"""Driver of the full-disk case, run inside `unshare -rm` (user + mount namespaces, no root).

`full_disk_driver.py MOUNT_DIR COPY_DIR`: mounts a 4 MiB tmpfs on MOUNT_DIR (visible only in
this namespace), runs `batchgate run` with its run directory there against a `FaultTarget`,
fills the filesystem once a few records are written, waits for the run to end, and copies the
run directory to COPY_DIR (outside, where the test can read it after the mount is gone). Prints
one JSON line: the exit code, stderr, the records before the fill, the descendants seen and
those left behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "support")]

from fault_target import FaultTarget  # noqa: E402
from gate_fault_support import (  # noqa: E402
    REPO,
    Descendants,
    records,
    run_argv,
    run_env,
    wait_for_lines,
    write_gates,
)


def fill(path: Path) -> None:
    with path.open("wb") as f:
        block = b"\0" * 65536
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        # The last partial block may sit in the buffer: close() would raise again.
        with contextlib.suppress(OSError):
            f.close()


def main() -> int:
    mount_dir, copy = Path(sys.argv[1]), Path(sys.argv[2])
    mount_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_dir)], check=True)
    gates = write_gates(copy.parent)  # the gates file lives outside the small disk
    target = FaultTarget()
    try:
        argv = run_argv(target.url, gates, mount_dir / "runs", "full")
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env()
        )
        watch = Descendants(proc.pid).start()
        profile = mount_dir / "runs" / "full" / "steady"
        wait_for_lines(profile / "requests.jsonl", 3)
        before = len(records(profile / "requests.jsonl"))
        fill(mount_dir / "filler")
        _, err = proc.communicate(timeout=180)
        watch.stop()
        deadline = time.monotonic() + 15
        left = watch.alive()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = watch.alive()
    finally:
        target.stop()
    shutil.copytree(mount_dir / "runs" / "full", copy)
    result = {
        "code": proc.returncode,
        "stderr": err[-4000:],
        "records_before_fill": before,
        "seen_children": len(watch.seen),
        "left_behind": left,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
