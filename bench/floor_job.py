"""The benchmark's floor: the least Spark work over the same input files as the replay.

Run (by ``bench/bench_replay.py``, as a subprocess so that its wall time and RSS are measured
exactly like the replay's)::

    .venv/bin/python bench/floor_job.py --input DIR --output DIR [--format parquet]

Reads the message log with the replay's session settings (``pipelines.spark.session``), computes
Spark's built-in ``hash(key)`` (Murmur3, seed 42) per message, groups by ``topic`` and writes one
row per topic — ``topic`` (string), ``messages`` (long), ``payload_bytes`` (long), ``hash_sum``
(long: keeps the hash from being optimized away) — as Parquet to ``--output`` (overwritten).
Prints ``floor: <messages> messages, <topics> topics`` at the end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F

from pipelines.spark.session import build_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="message log folder (the replay's input)")
    parser.add_argument("--output", required=True, help="Parquet output folder (overwritten)")
    parser.add_argument("--format", default="parquet", choices=["parquet", "json", "csv"])
    parser.add_argument("--master", default=None)
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    args = parser.parse_args(argv)

    # The JVM's default collector (G1): the floor is the fastest the same Spark can do. The
    # replay's serial collector (pipelines.spark.session) trades a few % of time for a heap that
    # tracks the live data; here it made the floor 10-25 % slower.
    spark = build_session(master=args.master, shuffle_partitions=args.shuffle_partitions,
                          extra_conf={"spark.driver.extraJavaOptions": "-XX:+UseG1GC"})
    reader = spark.read.option("header", "true") if args.format == "csv" else spark.read
    df = reader.format(args.format).load(args.input)
    counts = df.groupBy("topic").agg(
        F.count(F.lit(1)).alias("messages"),
        F.sum(F.col("payload_size").cast("long")).alias("payload_bytes"),
        F.sum(F.hash("key").cast("long")).alias("hash_sum"),
    )
    counts.write.mode("overwrite").parquet(args.output)
    rows = spark.read.parquet(args.output).collect()
    print(f"floor: {sum(r['messages'] for r in rows)} messages, {len(rows)} topics")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
