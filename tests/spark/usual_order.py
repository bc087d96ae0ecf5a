"""A newcomer's script, in the usual order: create the SparkSession, then import shmq.spark and
register the source. ``python usual_order.py STORE_DIR`` prints the store's message count;
when registering is refused it prints the reason on stderr and exits 3."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
try:
    import shmq.spark
    from shmq.errors import ConfigError

    try:
        spark.dataSource.register(shmq.spark.ShmqDataSource)
    except ConfigError as e:
        print(e, file=sys.stderr)
        sys.exit(3)
    print(spark.read.format("shmq").load(sys.argv[1]).count())
finally:
    spark.stop()
