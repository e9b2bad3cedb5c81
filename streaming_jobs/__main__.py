"""`python -m streaming_jobs run …`."""

import sys

from streaming_jobs.cli import main

sys.exit(main())
