import sys

from shmq.cli import main

sys.exit(main())
