"""The `pants run` request of a deploy_bundle, built purely and asserted without the engine."""

from __future__ import annotations

from pants.core.goals.package import BuiltPackage
from pants.engine.fs import EMPTY_DIGEST

from gpu_build.goals.run_bundle import bundle_run_request


def test_runs_the_packaged_pex_beside_its_cache_strictly() -> None:
    request = bundle_run_request(BuiltPackage(EMPTY_DIGEST, ()), "imaging_h200", "app.pex")
    assert request.digest == EMPTY_DIGEST
    assert request.args == ("{chroot}/imaging_h200/app.pex",)
    assert dict(request.extra_env) == {"GPU_RUNTIME_STRICT": "1"}
