"""``python -m proxy`` is the ``sonate`` command."""

from proxy.cli import main

raise SystemExit(main())
