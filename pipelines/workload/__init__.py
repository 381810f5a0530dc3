"""Synthetic workloads: the message-log generator (:mod:`~pipelines.workload.generator`). No
Spark."""
