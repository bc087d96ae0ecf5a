#!/usr/bin/env python3
"""A shmq store as Parquet partitioned by topic and day, verified after writing.

python spark/export.py STORE_DIR OUT [--topic T,...] [--mode overwrite|append] [--master URL]
spark-submit --master URL spark/export.py STORE_DIR hdfs:///shmq/export ...
"""

import sys

from shmq_jobs.export import run

if __name__ == "__main__":
    sys.exit(run())
