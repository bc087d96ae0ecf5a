"""shmq's Spark data source (the `spark` extra: pyspark + pyarrow).

    spark.dataSource.register(shmq.spark.ShmqDataSource)
    spark.read.format("shmq").load(STORE_DIR)     # or a cluster's store root: a `broker` column

The session may be created before or after this import: the workers Spark starts run this
interpreter unless PYSPARK_PYTHON chose another (shmq.spark.workers).
"""

from shmq.spark import workers  # noqa: F401 (sets PYSPARK_PYTHON's default for a session started later)
from shmq.spark.source import ShmqDataSource

__all__ = ["ShmqDataSource"]
