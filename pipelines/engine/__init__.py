"""What both engines run: the emulation stages per topic window on pandas frames
(:mod:`~pipelines.engine.stages`). No Spark."""
