"""``python -m gpu_compiler``: see ``gpu_compiler.cli``."""

from __future__ import annotations

import sys

from gpu_compiler.cli import main

sys.exit(main())
