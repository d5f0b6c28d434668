"""gpu_spec: the rules the gpu_build plugin, gpu_compiler and gpu_runtime share, defined once.

Capabilities and their order, versions, PTX ISA and the drivers that load it, what a driver can
load from a toolchain, and the two file formats that cross process boundaries (the compiler's
`metadata.json`, the bundle's `cache/manifest.json`) with their schema versions.

Why a package of its own: the plugin imports it inside Pants (CPython 3.9, no numpy, no CUDA), so
it is standard library only with Python 3.9 syntax, and it is the only first-party package on the
plugin's `pythonpath` besides the plugin itself: editing the compiler or the runtime never
restarts pantsd.
"""
