"""bundle_cache's reading of one compile's outputs."""

from __future__ import annotations

import pytest
from pants.engine.addresses import Address
from pants.engine.fs import EMPTY_DIGEST, Digest, DigestContents, DigestEntries, DigestSubset
from pants.testutil.rule_runner import MockGet, run_rule_with_mocks

from gpu_build.util_rules.bundle_cache import compiled_kernel_files
from gpu_build.util_rules.compile_kernel import CompiledKernel, GpuKernelCompileError

KERNEL = CompiledKernel(
    address=Address("src/python/imaging/kernels", target_name="saxpy"),
    source="src/python/imaging/kernels/saxpy.py",
    capability="sm_90",
    toolchain="cuda13",
    digest=EMPTY_DIGEST,
)


def test_a_compile_without_metadata_is_refused_naming_the_kernel() -> None:
    with pytest.raises(GpuKernelCompileError) as e:  # was: IndexError (metadata[0])
        run_rule_with_mocks(
            compiled_kernel_files,
            rule_args=[KERNEL],
            mock_gets=[
                MockGet(DigestContents, (DigestSubset,), lambda _: DigestContents([])),
                MockGet(DigestEntries, (Digest,), lambda _: DigestEntries([])),
                MockGet(Digest, (DigestSubset,), lambda _: EMPTY_DIGEST),
            ],
        )
    message = str(e.value)
    assert message.startswith(
        "The compile of src/python/imaging/kernels/saxpy.py (target "
        "src/python/imaging/kernels:saxpy) with the GPU toolchain 'cuda13' wrote no "
        "metadata.json for sm_90 "
    ), message
    assert "\n" not in message
