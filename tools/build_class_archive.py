"""Build the driver JVM's class-data archive (``make setup``; pipelines/spark/class_archive.py).

Replays ``data/sample`` under ``conf/sample.yaml`` in this process with the driver JVM told to
dump the classes it loaded when it exits, closes the JVM (its stdin: pyspark's gateway exits
on end of input), waits for the dump and renames it into place. Nothing to do when the archive
for this Java, pyspark and jars exists (silently). Exit 0 either way (a replay without the
archive only starts slower), with one line saying what happened.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from subprocess import Popen
from typing import Any

from pyspark import SparkContext

from jobs.replay import main as topic_replay
from pipelines.spark import class_archive
from pipelines.spark.session import delta_jars, kafka_jars, s3a_jars

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    target = class_archive.archive_path([*delta_jars(), *s3a_jars(), *kafka_jars()])
    if target is None:
        print("class-archive: off (TOPIC_REPLAY_CLASS_ARCHIVE) or no java; replays start "
              "without it")
        return 0
    if target.is_file():  # current: nothing to say (`make run` and `make test` pass here)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    dumped = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    os.environ[class_archive.DUMP_ENV] = str(dumped)
    started = time.monotonic()
    print("class-archive: replaying data/sample once to archive the driver's classes ...",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="class-archive-") as out:
        rc = _replay_sample(Path(out))
        proc = _close_driver_jvm()
    if rc != 0 or proc is None:
        dumped.unlink(missing_ok=True)
        print(f"class-archive: the sample replay failed (exit {rc}); replays start without "
              f"the archive")
        return 0
    if not class_archive.publish(dumped, target):
        print("class-archive: the JVM wrote no archive; replays start without it")
        return 0
    print(f"class-archive: {target} ({target.stat().st_size / 2**20:.0f} MB) in "
          f"{time.monotonic() - started:.0f} s")
    return 0


def _replay_sample(out: Path) -> int:
    quiet = io.StringIO()  # the sample's summary is not what `make setup` reports
    with contextlib.redirect_stdout(quiet):
        return topic_replay(["run", "--input", str(ROOT / "data" / "sample"),
                             "--conf", str(ROOT / "conf" / "sample.yaml"),
                             "--output", str(out), "--run-id", "class-archive"])


def _close_driver_jvm() -> Popen[Any] | None:
    """End the driver JVM (it dumps the archive as it exits) and wait for it; its process."""
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return None
    proc.stdin.close()  # pyspark's gateway server exits on end of input
    proc.wait(timeout=900)
    return proc


def _main() -> int:
    try:
        return main()
    except Exception as exc:  # an optional speed-up: never what fails `make setup`
        print(f"class-archive: not built ({type(exc).__name__}: {exc}); replays start "
              f"without it")
        return 0


if __name__ == "__main__":
    sys.exit(_main())
