"""Whole `./pants package` runs of the example kernels, in a copy of the checkout.

- Cached: with a fresh local store the first run compiles all 20 (kernel, capability) pairs in 5
  processes, one per source; a second run compiles nothing; appending a comment to sobel.cu
  re-runs exactly its one process (its 4 pairs). A compile process is logged at INFO
  (`Completed: Compile <source> for <sm_XX, ...> (<toolchain>)`) only when it really runs, never
  on a cache hit, so the test counts those lines.
- Batched like unbatched: `--gpu-toolchains-batch-capabilities=false` runs one process per pair
  (20) and writes the same bytes.
- Outputs: every example kernel has PTX and cubin for sm_75/80/87/90 in dist/; each PTX has
  `.version` <= 9.0 (a CUDA 13.0 driver JITs it) and the right `.target`, and each cubin's ELF
  header names its SM.
- Hermetic: that unbatched run is made with the system CUDA toolkit hidden (/usr/local replaced
  by an empty tmpfs in a private mount namespace, no CUDA on PATH) where the machine allows it:
  its 20 compiles are processes no earlier run made, so they really run, and give the same bytes
  as the first run's. (One run for both: a separate hermetic run with `--no-local-cache` rebuilt
  the toolchain PEX and every other process too.)

The checkout is found through $GPU_BUILD_REPO_ROOT (`[test].extra_env_vars` in pants.toml); the
copy holds its tracked and untracked-but-not-ignored files, i.e. the working tree as it is.
The runs share a fresh `--local-store-dir` (so the first one really compiles everything) but use
Pants' usual named caches (the pex and pip caches under ~/.cache/pants), so the 280 MiB toolchain
PEX is rebuilt from cached wheels in seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from gpu_build_testutil.pants_harness import PantsRun, base_env, copy_checkout, repo_root, run_pants

KERNELS_DIR = "src/python/imaging/kernels"
DIST = Path("dist/src.python.imaging.kernels")
CAPABILITIES = ("sm_75", "sm_80", "sm_87", "sm_90")
# gpu_kernel target name -> source file, as in src/python/imaging/kernels/BUILD.
KERNELS = {
    "saxpy": "saxpy.py",
    "blur": "blur.py",
    "histogram": "histogram.py",
    "sobel": "sobel.cu",
    "matmul": "matmul.cu",
}
# The five original kernels by address, not `kernels::`: the half-precision ones (CUB's headers
# make half_stats.cu a 10 s compile) would add a minute to these four packages and prove nothing
# more here; toolchain_headers_test and the bundles' builds cover them.
SPECS = [f"{KERNELS_DIR}:{name}" for name in KERNELS]
MAX_PTX_ISA = (9, 0)  # what a CUDA 13.0 driver (the H200's driver 580) JIT-compiles
EM_CUDA = 190


def all_compiles() -> set[tuple[str, str]]:
    return {(f"{KERNELS_DIR}/{src}", cap) for src in KERNELS.values() for cap in CAPABILITIES}


def compiles(run: PantsRun) -> list[tuple[str, str]]:
    """(source, capability) of every compile done by the processes that really ran."""
    return run.logged_pairs()


def processes(run: PantsRun) -> list[tuple[str, tuple[str, ...]]]:
    """(source, capabilities) of every compile process that really ran."""
    return [(c.source, c.capabilities) for c in run.logged_compiles()]


def package(repo: Path, store: Path) -> PantsRun:
    return run_pants(repo, ["package", *SPECS], local_store=store).check()


def dist_files(repo: Path, names: Sequence[str]) -> dict[str, bytes]:
    out = {}
    for name in names:
        for path in sorted((repo / DIST / name).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(repo / DIST))] = path.read_bytes()
    return out


# Runs Pants with /usr/local (CUDA toolkit, nvcc, its libraries) hidden: a private mount
# namespace with an empty tmpfs there.
HIDE_USR_LOCAL = (
    "unshare",
    "-m",
    "--propagation",
    "private",
    "bash",
    "-c",
    'mount -t tmpfs none /usr/local && test ! -e /usr/local/cuda && exec "$@"',
    "hide-usr-local",
)


def hiding_refused() -> str | None:
    """Why /usr/local cannot be hidden here (None: it can)."""
    probe = subprocess.run(
        [*HIDE_USR_LOCAL, "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    if probe.returncode == 0:
        return None
    return (
        "Cannot hide /usr/local in a private mount namespace here (unshare -m and mount need "
        f"CAP_SYS_ADMIN): {probe.stdout.decode(errors='replace').strip()}"
    )


def path_without_cuda() -> str:
    return os.pathsep.join(
        p
        for p in base_env()["PATH"].split(os.pathsep)
        if p and "cuda" not in p.lower() and not p.startswith("/usr/local")
    )


@dataclass(frozen=True)
class Workspace:
    repo: Path
    store: Path
    first: PantsRun
    dist_after_first: dict[str, bytes]
    second: PantsRun
    after_edit: PantsRun
    unbatched: PantsRun
    dist_unbatched: dict[str, bytes]
    hermetic_skipped: str | None  # why the unbatched run could not hide /usr/local


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = repo_root()
    tmp = tmp_path_factory.mktemp("gpu_build_package")
    repo = tmp / "repo"
    copy_checkout(root, repo)
    store = tmp / "lmdb_store"
    try:
        first = package(repo, store)
        dist_after_first = dist_files(repo, list(KERNELS))
        second = package(repo, store)
        with open(repo / KERNELS_DIR / "sobel.cu", "a") as f:
            f.write("// An edit that changes no code, only the source's bytes.\n")
        after_edit = package(repo, store)
        # The original source again, for later runs.
        (repo / KERNELS_DIR / "sobel.cu").write_bytes(
            (Path(root) / KERNELS_DIR / "sobel.cu").read_bytes()
        )
        # The other layout (`batch_capabilities = false`): 20 processes no run made before, so
        # they run; with the system CUDA hidden where that is possible.
        shutil.rmtree(repo / DIST)
        skipped = hiding_refused()
        unbatched = run_pants(
            repo,
            ["--gpu-toolchains-batch-capabilities=false", "package", *SPECS],
            local_store=store,
            env=None if skipped else {"PATH": path_without_cuda()},
            wrapper=() if skipped else HIDE_USR_LOCAL,
        ).check()
        dist_unbatched = dist_files(repo, list(KERNELS))
        for what, run in (
            ("first", first),
            ("second", second),
            ("after edit", after_edit),
            ("unbatched", unbatched),
        ):
            print(f"{what}: {run.summary()}")
        yield Workspace(
            repo,
            store,
            first,
            dist_after_first,
            second,
            after_edit,
            unbatched,
            dist_unbatched,
            skipped,
        )
    finally:
        # The store holds a copy of the 280 MiB toolchain PEX.
        shutil.rmtree(tmp, ignore_errors=True)


def test_first_run_compiles_every_kernel_once(workspace: Workspace) -> None:
    ran = compiles(workspace.first)
    assert sorted(ran) == sorted(all_compiles()), workspace.first.stderr[-4000:]
    assert len(ran) == 20
    # One process per source, for all 4 capabilities.
    assert sorted(processes(workspace.first)) == sorted(
        (f"{KERNELS_DIR}/{src}", CAPABILITIES) for src in KERNELS.values()
    ), workspace.first.stderr[-4000:]


def test_second_run_compiles_nothing(workspace: Workspace) -> None:
    assert compiles(workspace.second) == [], workspace.second.stderr[-4000:]
    # It did package: every kernel was written again, from the cache.
    for name in KERNELS:
        assert f"Wrote {DIST}/{name}" in workspace.second.stderr


def test_editing_one_kernel_recompiles_only_it(workspace: Workspace) -> None:
    assert processes(workspace.after_edit) == [
        (f"{KERNELS_DIR}/sobel.cu", CAPABILITIES)
    ], workspace.after_edit.stderr[-4000:]


def test_one_process_per_capability_gives_the_same_bytes(workspace: Workspace) -> None:
    """The other layout (`batch_capabilities = false`): 20 processes, the very same files."""
    run = workspace.unbatched
    assert sorted(processes(run)) == sorted(
        (source, (cap,)) for source, cap in all_compiles()
    ), run.stderr[-4000:]
    unbatched = workspace.dist_unbatched
    assert sorted(unbatched) == sorted(workspace.dist_after_first)
    different = [p for p in unbatched if unbatched[p] != workspace.dist_after_first[p]]
    assert not different, different


def ptx_version(ptx: str) -> tuple[int, int]:
    match = re.search(r"^\.version (\d+)\.(\d+)\s*$", ptx, re.MULTILINE)
    assert match, ptx[:500]
    return int(match.group(1)), int(match.group(2))


def cubin_sm(data: bytes) -> int:
    """The SM number in a cubin's ELF header (see src/python/gpu_compiler/elf.py)."""
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not an ELF64 file"
    (e_machine,) = struct.unpack_from("<H", data, 18)
    assert e_machine == EM_CUDA
    (e_flags,) = struct.unpack_from("<I", data, 48)
    abi_version = data[8]
    # CUDA 13 writes ABI version 8 (EF_CUDA_SM_MASK 0xff00); older ones the low byte.
    return (e_flags >> 8) & 0xFF if abi_version >= 8 else e_flags & 0xFF


def test_dist_has_ptx_and_cubin_per_capability(workspace: Workspace) -> None:
    files = workspace.dist_after_first
    for name in KERNELS:
        capabilities = {path.split("/")[1] for path in files if path.startswith(f"{name}/")}
        assert capabilities == set(CAPABILITIES), (name, sorted(files))
        for cap in CAPABILITIES:
            prefix = f"{name}/{cap}/"
            ptxs = [p for p in files if p.startswith(prefix) and p.endswith(".ptx")]
            cubins = [p for p in files if p.startswith(prefix) and p.endswith(".cubin")]
            assert ptxs and cubins, (name, cap)
            assert f"{prefix}metadata.json" in files
            assert {p[: -len(".ptx")] for p in ptxs} == {p[: -len(".cubin")] for p in cubins}
            for path in ptxs:
                ptx = files[path].decode()
                assert ptx_version(ptx) <= MAX_PTX_ISA, (path, ptx_version(ptx))
                assert re.search(rf"^\.target {cap}\b", ptx, re.MULTILINE), path
            for path in cubins:
                assert cubin_sm(files[path]) == int(cap[3:]), (path, hex(cubin_sm(files[path])))


def test_sm_90_cubin_flags(workspace: Workspace) -> None:
    cubin = workspace.dist_after_first["saxpy/sm_90/saxpy__0.cubin"]
    (e_flags,) = struct.unpack_from("<I", cubin, 48)
    assert (e_flags >> 8) & 0xFF == 0x5A


def test_hermetic_without_system_cuda(workspace: Workspace) -> None:
    """Compiles with /usr/local (CUDA toolkit, nvcc, its libraries) hidden give the same bytes:
    the unbatched run's 20 compiles ran so (they are no earlier run's processes)."""
    if workspace.hermetic_skipped:
        pytest.skip(workspace.hermetic_skipped)
    run = workspace.unbatched
    assert sorted(compiles(run)) == sorted(all_compiles()), run.stderr[-4000:]
    hermetic = workspace.dist_unbatched
    normal = workspace.dist_after_first
    assert sorted(hermetic) == sorted(normal)
    different = [path for path in normal if hermetic[path] != normal[path]]
    assert not different, different
