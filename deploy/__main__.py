"""``python -m deploy ...``: the same as ``rmq-cluster ...``."""

import sys

from deploy.cli import main

sys.exit(main())
