"""Kafka topics as the replay's streaming source: Spark's own Kafka source, beside the file source
of :func:`pipelines.spark.ingest.read_raw_stream`.

:func:`read_kafka_stream` gives the raw frame the file source gives for Parquet — ``source_file``
and ``record`` (a struct per record, fields of the ``kafka`` preset,
``pipelines.contract.kafka.KAFKA``) — so the mapping, the input rules, quarantine and staging
are the same code (``pipelines.spark.ingest.map_records``, ``pipelines.ingest.rules``). The
source's offsets are in the query's checkpoint: ``run`` (``availableNow``) reads what the topics
hold when it starts, ``stream`` follows them, and a restart re-reads exactly the micro-batch that
was not committed (exactly-once as with files; docs/guarantees.md).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.contract.kafka import KafkaInput


def producer_column(header: str) -> Column:
    """The producer of a record: its last header ``header`` as UTF-8, else
    ``partition-<partition>`` (a record without the header; each partition replays as one
    producer)."""
    values = F.filter(F.col("headers"), lambda h: h.getField("key") == F.lit(header))
    named = F.try_element_at(values, F.lit(-1)).getField("value").cast("string")
    return F.coalesce(named, F.concat(F.lit("partition-"), F.col("partition").cast("string")))


def kafka_records(df: DataFrame, source: KafkaInput) -> DataFrame:
    """Kafka source rows (``key``, ``value``, ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``timestampType``, ``headers``) → the raw frame: ``source_file``
    (``kafka://<servers>/<topic>/<partition>/<offset>``, what a quarantined record names) and
    ``record``: ``topic``, ``key`` (string), ``publish_time`` (timestamp),
    ``payload_size`` (bigint, 0 for a null value), ``producer_name``, ``partition`` (int),
    ``offset`` (bigint), ``timestamp_type`` (int: 0 CreateTime, 1 LogAppendTime)."""
    record = F.struct(
        F.col("topic"),
        F.col("key").cast("string").alias("key"),
        F.col("timestamp").alias("publish_time"),
        F.coalesce(F.octet_length(F.col("value")), F.lit(0)).cast("bigint").alias("payload_size"),
        producer_column(source.producer_header).alias("producer_name"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestampType").alias("timestamp_type"),
    )
    where = F.concat_ws("/", F.lit(f"kafka://{source.bootstrap_servers}"), F.col("topic"),
                        F.col("partition").cast("string"), F.col("offset").cast("string"))
    return df.select(where.alias("source_file"), record.alias("record"))


def read_kafka_stream(spark: SparkSession, source: KafkaInput) -> DataFrame:
    """The streaming raw frame of ``source`` (see :func:`kafka_records`): Spark's Kafka source
    with the record headers, ``startingOffsets`` for a new query, ``maxOffsetsPerTrigger``
    when set, and ``source.options``."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", source.bootstrap_servers)
              .option("includeHeaders", "true")
              .option("startingOffsets", source.starting_offsets))
    if source.subscribe is not None:
        reader = reader.option("subscribe", source.subscribe)
    else:
        reader = reader.option("subscribePattern", source.subscribe_pattern or "")
    if source.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(source.max_offsets_per_trigger))
    for key, value in source.options.items():
        reader = reader.option(key, value)
    return kafka_records(reader.load(), source)
