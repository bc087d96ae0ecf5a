"""`make demo` and `make spark` run the demo from the tree; its code is shmq/cli/demo.py so that
`shmq demo` runs it from an installed package too. Same options: `python tools/demo.py --help`."""

import sys

from shmq.cli.demo import main

if __name__ == "__main__":
    sys.exit(main())
