import sys

from shmq.cli.main import main

sys.exit(main())
