"""``python -m normprops`` is the ``normprops`` command."""

from normprops.cli import main

raise SystemExit(main())
