"""gpu_spec: the rules the gpu_build plugin, gpu_compiler and gpu_runtime share, defined once.

Capabilities and their order, versions, PTX ISA and the drivers that load it, what a driver can
load from a toolchain, and the two file formats that cross process boundaries (the compiler's
`metadata.json`, the bundle's `cache/manifest.json`) with their schema versions.

Why a package of its own: the plugin imports it inside Pants (CPython 3.9, no numpy, no CUDA), so
it is standard library only with Python 3.9 syntax, and it is the only first-party package on the
plugin's `pythonpath` besides the plugin itself: editing the compiler or the runtime never
restarts pantsd.
"""

from __future__ import annotations

from typing import List


def module_paths() -> List[str]:
    """Each module of gpu_spec (its tests and conftest left out), by path inside gpu_spec/:
    what the deploy tool ships to a device (its PEX's sources, the program run over ssh)."""
    import pkgutil  # here: importing gpu_spec on the device stays as cheap as it was

    paths = ["__init__.py"]
    for m in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        leaf = m.name.rsplit(".", 1)[-1]
        if not leaf.endswith("_test") and leaf != "conftest":
            path = m.name[len(__name__) + 1 :].replace(".", "/")
            paths.append(f"{path}/__init__.py" if m.ispkg else f"{path}.py")
    return paths
