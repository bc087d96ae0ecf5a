from shmq.cli.main import main

__all__ = ["main"]
