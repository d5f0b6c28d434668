"""The remote cache on a real REAPI server (BuildGrid), end to end.

One BuildGrid (CAS on disk + lru-action-cache, instance `main`) on 127.0.0.1, started by
.ci/buildgrid/buildgrid.sh and stopped however the module ends. Each Pants run happens in its own
`git clone` of the repository under a temp dir, with its own empty `--local-store-dir` and
`--no-pantsd` (but the two `--changed-since` runs, which share a clone, a store and one pantsd),
configured by .ci/remote-cache.toml:

1. cold: `./pants package src/python/imaging::` in clone A (the example kernels, both toolchains
   and the two deploy bundles that ship them): everything runs and is written to the server.
2. other checkout: the same in clone B, at another path, from an empty local store, with another
   PATH: every kernel compile is a remote hit (no `Compile ...` process runs) and dist/ is
   byte-identical to A's.
3. other Pants venv: ./pants' bootstrap cache (the Pants venv) copied elsewhere: the same hits.
   This is run 2 itself (one `package` differing from A in all three ways): a cache key that
   took in any one of them would make its compiles miss, which both tests check; one full Pants
   run from an empty store fewer.
4. server down: a build pointed at a dead address succeeds, warning that the cache is unreachable.
5. `--changed-since`: after one kernel's source is edited, `package` rebuilds only that kernel and
   the bundles that contain it (and with nothing changed, nothing).

Run: `./pants test tests/remote_cache::` (add `--force` to rerun a cached pass; the test reads
.ci/ and ./pants, which Pants does not track). Several minutes on a cold machine (the first build
downloads the toolchain wheels into Pants' named caches, ~1 GB of local store per build).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from typing import Iterator

import pytest

import remote_cache_harness as harness
from gpu_build_testutil.pants_harness import (
    PantsRun,
    clone_checkout,
    repo_root,
    stop_pantsd,
    tree_digests,
)
from gpu_build_testutil.script_server import ScriptServer

# The example app: its kernels for both toolchains and the deploy bundles that ship them. Not `::`:
# numba_docs, the GPU probes and the wheels would add minutes to two cold builds and no case the
# assertions (kernel compiles, dist/ as a whole, bundles rebuilt for an edit) do not already cover.
PACKAGE_SPEC = "src/python/imaging::"
KERNEL_DIR = "src/python/imaging/kernels"
EDITED_KERNEL = f"{KERNEL_DIR}/saxpy.py"


def dist_digests(repo: str) -> dict[str, str]:
    return tree_digests(os.path.join(repo, "dist"))


class Session:
    """What the module's tests share: the repo, a scratch dir, the server and the cold build."""

    def __init__(self, root: str, scratch: str, server: ScriptServer) -> None:
        self.root = root
        self.scratch = scratch
        self.server = server
        self.cold: PantsRun | None = None
        self.cold_dist: dict[str, str] = {}
        self.elsewhere_dist: dict[str, str] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.scratch, name)

    def clone(self, name: str) -> str:
        return clone_checkout(self.root, self.path(name))

    def package(self, repo: str, store: str, spec: str = PACKAGE_SPEC, **kwargs) -> PantsRun:
        run = harness.run_pants(
            repo,
            ["package", spec],
            local_store=self.path(store),
            remote_address=self.server.address,
            **kwargs,
        )
        print(f"\n[{os.path.basename(repo)} {store}] package {spec}: {run.summary()}")
        return run


@pytest.fixture(scope="module")
def session() -> Iterator[Session]:
    root = repo_root()
    scratch = tempfile.mkdtemp(prefix="remote-cache-it-")
    try:
        with harness.buildgrid(root, state_dir=os.path.join(scratch, "buildgrid")) as server:
            yield Session(root, scratch, server)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def cold(session: Session) -> Session:
    """Clone A, empty local store and empty server: every process runs and is uploaded."""
    repo_a = session.clone("checkout-a")
    run = session.package(repo_a, "store-a").check()
    compiles = run.compile_processes()
    assert compiles, f"no `Compile ...` process in the cold build:\n{run.stderr[-4000:]}"
    assert all(p.source == "Ran" for p in compiles), run.summary()
    assert run.counters.get("remote_cache_write_successes", 0) >= len(compiles), run.summary()
    assert run.counters.get("remote_cache_write_errors", 0) == 0, run.summary()
    session.cold = run
    session.cold_dist = dist_digests(repo_a)
    assert any(path.startswith(KERNEL_DIR.replace("/", ".")) for path in session.cold_dist)
    return session


def assert_all_compiles_remote_hits(run: PantsRun, cold: PantsRun) -> None:
    ran = [p.description for p in run.compile_processes("Ran")]
    assert (
        not ran
    ), f"kernel compiles that ran instead of hitting the remote cache: {ran}\n{run.summary()}"
    hits = sorted(p.description for p in run.compile_processes("HitRemotely"))
    assert hits == sorted(p.description for p in cold.compile_processes()), run.summary()
    assert run.counters.get("remote_cache_requests_cached", 0) >= len(hits), run.summary()
    assert run.counters.get("remote_cache_read_errors", 0) == 0, run.summary()


@pytest.fixture(scope="module")
def elsewhere(cold: Session) -> PantsRun:
    """Clone B at another path, with another PATH and the Pants venv at another path, from an
    empty local store: each of the three differences is one that must not reach a cache key."""
    repo_b = cold.clone("elsewhere/checkout-b")
    # Another PATH as well: a directory in front, one at the back.
    path = os.pathsep.join(
        [cold.path("bin-b"), os.environ.get("PATH", "/usr/bin:/bin"), "/opt/nowhere/bin"]
    )
    bootstrap = harness.relocated_bootstrap_cache(cold.path("bootstrap-b"))
    run = cold.package(
        repo_b, "store-b", env={"PATH": path, "PANTS_BOOTSTRAP_CACHE": bootstrap}
    ).check()
    cold.elsewhere_dist = dist_digests(repo_b)
    return run


def test_second_checkout_gets_every_compile_from_the_remote_cache(
    cold: Session, elsewhere: PantsRun
) -> None:
    run = elsewhere
    assert cold.cold is not None
    assert_all_compiles_remote_hits(run, cold.cold)
    # Cacheable processes that still ran (none expected); reported to make a regression obvious.
    ran = sorted({p.description for p in run.processes if p.cacheable and p.source == "Ran"})
    assert not ran, f"cacheable processes that missed the remote cache: {ran}"
    assert cold.elsewhere_dist == cold.cold_dist


def test_pants_venv_elsewhere_gets_the_same_hits(elsewhere: PantsRun) -> None:
    run = elsewhere
    ran = [p.description for p in run.compile_processes("Ran")]
    assert not ran, (
        "With the Pants venv at another path (and the checkout and PATH elsewhere), kernel "
        "compiles missed the remote cache: ./pants must run Pants with a sys.executable that "
        "does not depend on where the venv lives (see docs/remote-cache-and-ci.md).\n"
        f"Ran: {ran}\n{run.summary()}"
    )
    assert run.compile_processes("HitRemotely"), run.summary()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_build_succeeds_with_the_server_down(cold: Session) -> None:
    repo_d = cold.clone("checkout-d")
    # A port nothing listens on: the remote cache is unreachable.
    dead = f"grpc://127.0.0.1:{free_port()}"
    spec = f"{KERNEL_DIR}:saxpy"
    run = harness.run_pants(
        repo_d, ["package", spec], local_store=cold.path("store-d"), remote_address=dead
    )
    print(f"\n[server down] package {spec}: {run.summary()}")
    run.check()
    assert "Failed to read from remote cache" in run.stderr, run.stderr[-4000:]
    assert run.counters.get("remote_cache_requests_cached", 0) == 0
    assert run.compile_processes("Ran"), run.summary()
    # Built locally, the same bytes as the cached ones.
    saxpy = {k: v for k, v in dist_digests(repo_d).items() if "saxpy" in k}
    assert saxpy and all(cold.cold_dist.get(k) == v for k, v in saxpy.items())


def test_changed_since_packages_only_what_contains_the_edited_kernel(cold: Session) -> None:
    repo_e = cold.clone("checkout-e")
    harness.commit_all(repo_e, "the tree under test")  # local runs: commit the copied changes
    # The edit is committed too, so that the two runs see one tree and share one pantsd (one
    # Pants start-up): against HEAD nothing changed, against HEAD~1 the edited kernel did (both
    # are `git diff <ref>` of the working tree, as for an uncommitted edit).
    with open(os.path.join(repo_e, EDITED_KERNEL), "a") as f:
        f.write("\n# edited by the --changed-since test\n")
    harness.commit_all(repo_e, "the edit")

    def changed_since(ref: str) -> PantsRun:
        # `list` and `package` in one run: stdout is the list's alone, the package's
        # `Wrote dist/...` lines go to the log.
        return harness.run_pants(
            repo_e,
            [f"--changed-since={ref}", "--changed-dependents=transitive", "list", "package"],
            local_store=cold.path("store-e"),
            remote_address=cold.server.address,
            pantsd=True,
        ).check()

    try:
        nothing = changed_since("HEAD")
        run = changed_since("HEAD~1")
    finally:
        stop_pantsd(repo_e)
    assert nothing.written() == [], nothing.stderr[-3000:]
    assert nothing.stdout.split() == [], nothing.stdout

    targets = set(run.stdout.split())
    print(f"\n[changed-since] targets: {sorted(targets)}")
    assert f"{KERNEL_DIR}:saxpy" in targets
    assert not {f"{KERNEL_DIR}:{k}" for k in ("blur", "histogram", "sobel", "matmul")} & targets

    written = run.written()
    print(f"[changed-since] wrote: {written}\n[changed-since] {run.summary()}")
    assert f"dist/{KERNEL_DIR.replace('/', '.')}/saxpy" in written
    others = [w for w in written if any(k in w for k in ("blur", "histogram", "sobel", "matmul"))]
    assert not others, written
    # Every bundle that ships saxpy is rebuilt (each deploy_bundle lists all example kernels).
    assert cold.cold is not None
    bundles = {p.split("/")[1] for p in cold.cold.written() if p.startswith("dist/imaging_")}
    assert bundles <= {p.split("/")[1] for p in written}, (bundles, written)
    # Only the edited kernel was compiled; the bundles' other kernels came from the cache.
    ran = run.compile_processes("Ran")
    assert ran and all(p.compile and p.compile.source == EDITED_KERNEL for p in ran), ran
