"""shmq's Spark data source (the `spark` extra: pyspark + pyarrow).

    spark.dataSource.register(shmq.spark.ShmqDataSource)
    spark.read.format("shmq").load(STORE_DIR)
"""
import os
import sys

# Spark starts its Python workers with PYSPARK_PYTHON (default: whatever `python3` is on PATH);
# a worker without shmq and its dependencies fails with a bare EOFException in the JVM. Point
# it at this interpreter unless the user chose one (read when the SparkContext starts).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from shmq.spark.source import ShmqDataSource  # noqa: E402

__all__ = ["ShmqDataSource"]
