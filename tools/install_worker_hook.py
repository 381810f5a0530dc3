"""Install the Spark workers' startup hook into this interpreter's site-packages (``make setup``;
``pipelines.spark.worker_daemon.install_startup_hook``): Python processes Spark starts with its
zip first on their path import pyspark from site-packages instead, where bytecode is cached.
Prints the file written."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.spark.worker_daemon import install_startup_hook

if __name__ == "__main__":
    hook = install_startup_hook(sysconfig.get_paths()["purelib"])
    print(f"setup: Spark workers' startup hook {hook}")
