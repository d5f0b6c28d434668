"""Exceptions raised by gpu_runtime: each is a `GpuRuntimeError`, which an app can report as is."""

from __future__ import annotations

import contextlib
from typing import Iterator

from gpu_spec import errors as spec_errors


class GpuRuntimeError(Exception):
    """Base class of every error gpu_runtime raises on purpose."""


class CacheNotFoundError(GpuRuntimeError):
    """No bundle cache (`cache/manifest.json`) was found and JIT mode has nothing to compile."""


class ManifestError(GpuRuntimeError, spec_errors.ManifestError):
    """`cache/manifest.json` (or compile metadata given to `build_manifest`) is malformed."""


@contextlib.contextmanager
def manifest_errors() -> Iterator[None]:
    """Re-raises gpu_spec's ManifestError as the runtime's, so that apps catch one base class."""
    try:
        yield
    except spec_errors.ManifestError as e:
        if isinstance(e, GpuRuntimeError):
            raise
        raise ManifestError(str(e)) from e


class IntegrityError(GpuRuntimeError):
    """A cache file is missing, tampered with, or its manifest path leaves the cache directory."""


class UntrustedBundleError(IntegrityError):
    """Keys are trusted here, and the bundle is unsigned or not validly signed by one of them."""


class NoCompatibleVariantError(GpuRuntimeError):
    """The bundle holds no cubin or PTX that can run on this device with this driver."""


class IncompleteBundleError(IntegrityError, NoCompatibleVariantError):
    """Files the manifest lists are missing in bulk: the bundle was not written or copied whole.

    Also a NoCompatibleVariantError (nothing here can be used), so that code catching that one,
    JIT mode's fallback included, treats it alike; its message never gives capability advice.
    """


class DriverTooOldError(NoCompatibleVariantError):
    """The bundle holds code for this GPU, but all of it needs a newer driver than the device's:
    the message names the CUDA version needed and the one the driver supports (never "add the
    capability" or "the bundle is incomplete", which would be wrong advice)."""


class KernelNotFoundError(GpuRuntimeError, KeyError):
    """No kernel of the requested name, or the name is ambiguous across libraries."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class AmbiguousKernelError(KernelNotFoundError):
    """A bare kernel name that several libraries define: the message lists "library.kernel"
    for each. JIT mode never compiles its way out of it (its libraries would define it too)."""


class DispatchError(GpuRuntimeError, TypeError):
    """The launch arguments match none of a kernel's signatures, or cannot be converted."""


class DeviceError(GpuRuntimeError):
    """No usable CUDA device/driver, or a CUDA driver call failed."""


class LaunchError(GpuRuntimeError, ValueError):
    """A launch that cannot run as asked, refused before it reaches the GPU (e.g. a cooperative
    kernel's grid larger than can be co-resident)."""
