#!/usr/bin/env python3
"""Follow a shmq store and append its new messages to Parquet by topic and day, exactly once.

python spark/stream.py STORE_DIR OUT --checkpoint DIR [--topic T,...] [--trigger SECONDS]
                       [--available-now] [--max-records N] [--master URL]
"""

import sys

from shmq_jobs.stream import run

if __name__ == "__main__":
    sys.exit(run())
