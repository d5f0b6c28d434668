"""``python -m gpu_runtime <command>`` (also from a bundle: ``PEX_MODULE=gpu_runtime ./app.pex``).

The commands live in `gpu_runtime.cli.commands`; see ``python -m gpu_runtime --help``.
"""

from gpu_runtime.cli.commands import main

raise SystemExit(main())
