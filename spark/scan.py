#!/usr/bin/env python3
"""Per-topic figures and consumer lag of a shmq store, read by Spark.

python spark/scan.py STORE_DIR [--topic T,...] [--top N] [--json] [--master URL]
spark-submit --master URL spark/scan.py STORE_DIR ...
"""

import sys

from shmq_jobs.scan import run

if __name__ == "__main__":
    sys.exit(run())
