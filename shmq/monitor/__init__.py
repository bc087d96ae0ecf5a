"""What `shmq top` and `shmq exporter` show: snapshots of a broker's state segment and rates between them."""
