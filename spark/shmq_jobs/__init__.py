"""The shmq Spark jobs (spark/scan.py, spark/export.py): their logic, importable for tests.

The scripts in spark/ put this folder's parent on sys.path (Python does so for the script's
own folder), so `python spark/scan.py` and `spark-submit spark/scan.py` find it without an
install; only `shmq` itself must be importable by the driver and the executors.
"""
