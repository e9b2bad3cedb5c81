"""`python -m controller run ...`: the controller without the root `streamctl` CLI."""

from controller.cli import main

raise SystemExit(main())
