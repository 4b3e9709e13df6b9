"""The Spark engine (``--engine spark``): a Flow compiled to PySpark.

Modules: :mod:`.session` (one SparkSession per process, settings, Java check), :mod:`.plan`
(feeds, stages, key groups and the worker kernels), :mod:`.native` (a bounded flow of column
expressions as Spark's own DataFrame operations; :mod:`.exprs` translates the expressions),
:mod:`.batch` (bounded inputs through Python workers),
:mod:`.streaming` (Structured Streaming with transformWithStateInPandas), :mod:`.rescale`
(offline repartitioning of a streaming checkpoint) and :mod:`.cluster` (a standalone
master and worker started from the pyspark installation). ``executors/spark.py`` exposes
``run``. docs/spark.md is the user documentation.
"""
