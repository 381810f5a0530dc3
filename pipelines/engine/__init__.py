"""What both engines run and report, without Spark: the emulation stages per topic window on
pandas frames (:mod:`~pipelines.engine.stages`), the in-process engine
(:mod:`~pipelines.engine.local`) and a run's ``runs`` row and summary
(:mod:`~pipelines.engine.summary`)."""
