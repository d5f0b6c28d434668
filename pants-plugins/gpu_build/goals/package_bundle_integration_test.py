"""Whole `./pants package` runs of the example device bundles, in a copy of the checkout.

- The H200 bundle's PEX holds no compiler and no numba (no numba, llvmlite, NVVM, NVRTC,
  nvJitLink wheels or libraries), only cuda-core, cuda-bindings, numpy for cp312 x86_64.
- The Jetson bundle's PEX carries aarch64 / cp310 wheels, and its kernels are sm_87, built by the
  CUDA 12.6 toolchain, PTX ISA <= 8.5.
- Two packages from empty local stores give byte-identical bundles (directory and .tar.gz), and
  a second package leaves no stale file behind.
- A CUDA 13 build for a CUDA 12.6 driver is refused, naming the bundle, the kernel and the fix.
- Each bundle compiles each kernel source in one process per toolchain, for the kernel target's
  whole capability list (the processes `pants package` on the kernels runs), though it ships one.
- The app PEX is packed (each wheel one file of the manifest) and carries no kernel source: a
  kernel edit changes only that kernel's cache files and the manifest, an app edit only the
  app's own files, never the wheels.
- The H200 bundle's launcher (`app`) records pex's venv of its PEX on the first run, starts the
  app from it after, and refuses a PEX that is not the one it was built with (CPython 3.12 of
  this machine, no GPU).
- aarch64 under qemu-user (issue 22, point 5): a bundle of the example kernels for an arm64
  Debian root (CPython 3.11, complete platform read off its emulated interpreter) starts there to
  its "no CUDA driver" error, twice (first and second start times printed and recorded as
  `timing` properties for .ci/test_summary.py), and its `verify` passes. It skips, saying why,
  where the root or binfmt_misc cannot be had (gpu_build_testutil/arm64_root.py).

The refused bundle is in the BUILD file from the start (the two packages name their targets, so
it changes nothing of theirs), so that the repo does not change between the second package and
the refused one: those two share one pantsd (its first run, from the empty store, builds
everything; the refused one then needs no Pants start-up of its own).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib
import json
import re
import shutil
import subprocess
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

from gpu_build.util_rules.bundle_launcher import TAMPERED_EXIT, pex_identity
from gpu_build_testutil import arm64_root
from gpu_build_testutil.pants_harness import (
    PantsRun,
    base_env,
    copy_checkout,
    find_cpython,
    repo_root,
    run_pants,
    stop_pantsd,
    tree_digests,
)
from gpu_spec.resources.cubin import differences

APP = "src/python/imaging"
MANIFEST_SCHEMA = "src/spec/gpu_spec/manifest/manifest.schema.json"
KERNEL_CAPABILITIES = ("sm_75", "sm_80", "sm_87", "sm_90")  # src/python/imaging/kernels/BUILD
# source -> the capabilities its gpu_kernel lists (bfloat16 needs sm_80+)
KERNEL_SOURCES: dict[str, tuple[str, ...]] = {
    **{
        source: KERNEL_CAPABILITIES
        for source in (
            "saxpy.py",
            "blur.py",
            "histogram.py",
            "sobel.cu",
            "matmul.cu",
            "half_stats.cu",
            "haxpy.py",
        )
    },
    "bf16_axpy.py": KERNEL_CAPABILITIES[1:],
}
EXIT_GPU_ERROR = 2  # src/python/imaging/app.py: gpu_runtime could not run

# The aarch64 bundle: the Orin's kernels and toolchain (sm_87, cuda12, driver 12.6), built for
# the emulated root's interpreter (its platform.json), in a directory of its own.
ARM64_DIR = "aarch64_emulated"
ARM64_BUNDLE = "imaging_arm64_emulated"
_KERNELS = ", ".join(f'"{APP}/kernels:{source.split(".")[0]}"' for source in KERNEL_SOURCES)
ARM64_BUILD = f"""\
file(name="platform", source="platform.json")

deploy_bundle(
    name="{ARM64_BUNDLE}",
    binary="{APP}:app",
    kernels=[{_KERNELS}],
    capabilities=["sm_87"],
    toolchain="cuda12",
    driver_version="12.6",
    complete_platforms=[":platform"],
)
"""


def pex_names(pex: Path) -> list[str]:
    """The PEX's entries as a zipapp names them, whatever its layout: a packed PEX's loose files
    by their path, the files of its wheel zips as `.deps/<wheel>/<path>`."""
    if not pex.is_dir():
        with zipfile.ZipFile(pex) as zf:
            return zf.namelist()
    names = []
    for rel in tree_digests(pex):
        if rel.startswith(".deps/") and rel.count("/") == 1:
            with zipfile.ZipFile(pex / rel) as zf:
                names += [f"{rel}/{n}" for n in zf.namelist() if not n.startswith("../")]
        else:
            names.append(rel)
    return names


# A CUDA 13 build for a CUDA 12.6 driver: refused (see its test).
REFUSED_BUNDLE = """
deploy_bundle(
    name="orin_with_cuda13",
    binary=":app",
    kernels=["src/python/imaging/kernels:saxpy"],
    capabilities=["sm_87"],
    toolchain="cuda13",
    driver_version="12.6",
)
"""


def pex_wheels(pex: Path) -> list[str]:
    return sorted(
        {n.split("/")[1] for n in pex_names(pex) if n.startswith(".deps/") and n.split("/")[1]}
    )


def app_files(bundle: Path) -> dict[str, str]:
    """{path under the bundle: sha256} of its packed app PEX."""
    return {f"app.pex/{rel}": sha for rel, sha in tree_digests(bundle / "app.pex").items()}


@dataclass(frozen=True)
class Arm64:
    """The emulated arm64 root and the complete platform read off its interpreter, or why not."""

    emulation: Optional[arm64_root.Arm64Root]
    platform: Optional[dict]
    read_s: float = 0.0  # reading the platform under emulation
    unavailable: str = ""  # why this machine cannot emulate aarch64: the test skips
    error: str = ""  # what went wrong where it could: the test fails (the others run)


@dataclass(frozen=True)
class Bundles:
    repo: Path
    first: dict[str, dict[str, str]]
    second: dict[str, dict[str, str]]
    run: PantsRun
    store: Path
    arm64: Arm64


def prepare_arm64(repo: Path) -> Arm64:
    """qemu-user, binfmt_misc and the arm64 root (cached), and the complete platform of its
    python3, read by the runtime's own command: the file alone (`python3 -m gpu_runtime` would
    import numpy, which the bare root lacks)."""
    try:
        emulation = arm64_root.prepare()
    except arm64_root.Unavailable as e:
        return Arm64(None, None, unavailable=str(e))
    with emulation.scratch() as run:
        shutil.copy(repo / "src/python/gpu_runtime/cli/complete_platform.py", run.host)
        read = emulation.run(
            ["python3", f"{run.inside}/complete_platform.py", "-o", f"{run.inside}/platform.json"]
        )
        assert read.returncode == 0, read.stdout + read.stderr
        platform = json.loads((run.host / "platform.json").read_text())
    return Arm64(emulation, platform, read.seconds)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bundles]:
    tmp = tmp_path_factory.mktemp("gpu_build_bundles")
    repo = tmp / "repo"
    try:
        copy_checkout(repo_root(), repo)
        with open(repo / APP / "BUILD", "a") as build:
            build.write(REFUSED_BUNDLE)
        # The arm64 root is fetched (first time) and its platform read while Pants packages.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            arm64_ready = pool.submit(prepare_arm64, repo)
            specs: tuple[str, ...] = (f"{APP}:imaging_h200", f"{APP}:imaging_orin")
            run = run_pants(repo, ["package", *specs], local_store=tmp / "store1").check()
            print(f"first package: {run.summary()}")
            try:
                arm64 = arm64_ready.result()
            except Exception:
                arm64 = Arm64(None, None, error=traceback.format_exc())
        dist = repo / "dist"
        first = {name: tree_digests(dist / name) for name in ("imaging_h200", "imaging_orin")}
        first["archives"] = {
            a: hashlib.sha256((dist / a).read_bytes()).hexdigest()
            for a in ("imaging_h200.tar.gz", "imaging_orin.tar.gz")
        }
        # The aarch64 bundle rides along with the second package: no Pants start of its own, and
        # the cuda12 kernels it ships are the Orin bundle's processes.
        if arm64.platform is not None:
            target_dir = repo / ARM64_DIR
            target_dir.mkdir()
            (target_dir / "platform.json").write_text(json.dumps(arm64.platform, indent=1))
            (target_dir / "BUILD").write_text(ARM64_BUILD)
            specs += (f"{ARM64_DIR}:{ARM64_BUNDLE}",)
        # A stale file from "an earlier package" must not survive the next one.
        (dist / "imaging_h200" / "cache" / "stale.cubin").write_bytes(b"old")
        # dist/ is not watched by Pants: the stale file does not stop the second run sharing its
        # pantsd with the refused one.
        again = run_pants(repo, ["package", *specs], local_store=tmp / "store2", pantsd=True)
        print(f"second package: {again.check().summary()}")
        second = {name: tree_digests(dist / name) for name in ("imaging_h200", "imaging_orin")}
        second["archives"] = {
            a: hashlib.sha256((dist / a).read_bytes()).hexdigest()
            for a in ("imaging_h200.tar.gz", "imaging_orin.tar.gz")
        }
        yield Bundles(repo, first, second, run, tmp / "store2", arm64)
    finally:
        stop_pantsd(repo)
        # Each local store holds a copy of the toolchain PEXes (hundreds of MiB).
        shutil.rmtree(tmp, ignore_errors=True)


def test_bundles_are_reproducible_and_clean(bundles: Bundles) -> None:
    assert bundles.first == bundles.second
    assert "cache/stale.cubin" not in bundles.second["imaging_h200"]


def test_built_manifests_match_the_json_schema(bundles: Bundles) -> None:
    """Every bundle this package built: its manifest.json as the schema file says (the same
    schema the fixtures' manifests are checked against in gpu_spec/manifest/schema_test.py)."""
    # jsonschema comes with the test runner (3rdparty/python/pytest-tool-requirements.txt)
    jsonschema = importlib.import_module("jsonschema")
    schema = json.loads((bundles.repo / MANIFEST_SCHEMA).read_text())
    manifests = sorted((bundles.repo / "dist").glob("*/cache/manifest.json"))
    assert {m.parent.parent.name for m in manifests} >= {"imaging_h200", "imaging_orin"}
    for path in manifests:
        jsonschema.validate(
            json.loads(path.read_text()), schema, cls=jsonschema.Draft202012Validator
        )


def test_manifest_resources_are_the_cubins_own(bundles: Bundles) -> None:
    """Every kernel of every variant in both bundles (CUDA 13 for sm_90, CUDA 12.6 for sm_87):
    registers, shared, local and constant bytes in the manifest equal what its cubin says
    (gpu_spec.resources.cubin reads the ELF records the driver's cuFuncGetAttribute reads)."""
    checked, wrong = 0, []
    for manifest in sorted((bundles.repo / "dist").glob("*/cache/manifest.json")):
        for library in json.loads(manifest.read_text())["libraries"]:
            for variant in library["variants"]:
                for module in variant["modules"]:
                    cubin = (manifest.parent / module["cubin"]).read_bytes()
                    kernels = {k["entry"]: k["resources"] for k in module["kernels"]}
                    wrong += [f"{module['cubin']}: {d}" for d in differences(cubin, kernels)]
                    checked += len(kernels)
    assert checked >= 20 and wrong == []


def test_one_process_per_source_and_toolchain(bundles: Bundles) -> None:
    processes = sorted(
        (c.source, c.capabilities, c.toolchain) for c in bundles.run.logged_compiles()
    )
    assert processes == sorted(
        (f"{APP}/kernels/{source}", capabilities, toolchain)
        for source, capabilities in KERNEL_SOURCES.items()
        for toolchain in ("cuda12", "cuda13")
    ), bundles.run.stderr[-4000:]


def test_h200_bundle_has_no_compiler(bundles: Bundles) -> None:
    bundle = bundles.repo / "dist" / "imaging_h200"
    wheels = pex_wheels(bundle / "app.pex")
    # The runtime talks to the driver through cuda.bindings alone: no cuda.core in the app.
    projects = [w.split("-")[0] for w in wheels]
    # cryptography (+ cffi, pycparser): the signature check, imported only with a key pinned.
    assert projects == [
        "cffi",
        "cryptography",
        "cuda_bindings",
        "cuda_pathfinder",
        "ml_dtypes",
        "numpy",
        "pycparser",
    ], wheels
    assert all(
        (("cp312" in w or "-abi3-" in w) and "x86_64" in w) or w.endswith("py3-none-any.whl")
        for w in wheels
    ), wheels
    names = pex_names(bundle / "app.pex")
    top_level = {n.split("/")[2] for n in names if n.startswith(".deps/") and n.count("/") >= 3}
    assert not top_level & {"numba", "numba_cuda", "llvmlite", "nvidia"}, sorted(top_level)
    assert not [n for n in names if re.search(r"lib(nvrtc|nvvm|nvJitLink)", n)]
    # No compiler code rides along; the shared rules do.
    assert not [n for n in names if n.startswith("gpu_compiler/")]
    # [gpu-bundle].strip_wheel_files (default): no Cython sources or generated C/C++ in wheels,
    # the wheels' own code kept (the launcher test below runs this PEX)
    assert not [n for n in names if n.startswith(".deps/") and n.endswith((".pyx", ".pxd", ".cpp"))]
    assert [
        n for n in names if n.startswith(".deps/cuda_bindings") and "bindings/driver.cpython" in n
    ]
    assert "gpu_spec/compatibility.py" in names
    # The kernels ship compiled: their sources (JIT mode's index) are not in the app (issue 22)
    assert not [n for n in names if "__gpu_kernels__" in n or "kernels/saxpy.py" in n], names
    manifest = json.loads((bundle / "cache" / "manifest.json").read_text())
    assert manifest["capabilities"] == ["sm_90"] and manifest["driver"] == "13.0"
    assert {lib["name"] for lib in manifest["libraries"]} == {
        source.split(".")[0] for source in KERNEL_SOURCES
    }
    for rel, sha in manifest["files"].items():
        assert hashlib.sha256((bundle / "cache" / rel).read_bytes()).hexdigest() == sha
    launcher_sha = hashlib.sha256((bundle / "app").read_bytes()).hexdigest()
    # packed (deploy_bundle's default app_layout): every file of app.pex/, each wheel one zip
    assert manifest["bundle_files"] == {**app_files(bundle), "app": launcher_sha}
    assert [n for n in manifest["bundle_files"] if n.startswith("app.pex/.deps/")] == [
        f"app.pex/.deps/{w}" for w in wheels
    ]


def test_h200_launcher_runs_the_app_from_a_venv_made_once(bundles: Bundles, tmp_path: Path) -> None:
    python = find_cpython("3.12")
    if python is None:
        pytest.skip("no CPython 3.12 here to run the H200 bundle's cp312 PEX with")
    bundle = tmp_path / "imaging_h200"
    shutil.copytree(bundles.repo / "dist" / "imaging_h200", bundle, symlinks=True)
    venvs = tmp_path / "venvs"
    env = dict(base_env(), GPU_BUNDLE_PYTHON=python, GPU_BUNDLE_VENVS=str(venvs))
    env["PEX_ROOT"] = str(tmp_path / "pex_root")
    probe = "import os, sys; print(sys.prefix); print(os.environ['PEX'])"

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(bundle / "app"), *args],
            env=dict(env, PEX_INTERPRETER="1"),
            capture_output=True,
            text=True,
        )

    app_sha = pex_identity(tree_digests(bundle / "app.pex"))
    for _ in range(2):  # recorded by the first run, used as it is by the second
        run = launch("-c", probe)
        assert run.returncode == 0, run.stderr
        link = venvs / app_sha
        assert link.is_symlink() and str(link.resolve()).startswith(str(tmp_path / "pex_root"))
        assert run.stdout.split() == [str(link), str(bundle / "app.pex")]  # started through it
    # no temporary link left (`.pycache`: the bytecode of the PEX's own boot, kept out of the
    # bundle)
    assert sorted(p.name for p in venvs.iterdir() if p.name != ".pycache") == [app_sha]
    usage = subprocess.run([str(bundle / "app"), "--help"], env=env, capture_output=True, text=True)
    assert usage.returncode == 0 and "--self-test" in usage.stdout, usage.stderr

    shutil.rmtree(venvs)
    with open(bundle / "app.pex" / "imaging" / "app.py", "ab") as f:
        f.write(b"\n")  # not the PEX this launcher was built with
    run = launch("-c", probe)
    assert run.returncode == TAMPERED_EXIT and "damaged or was altered" in run.stderr, run.stderr
    assert not venvs.exists() or not any(venvs.iterdir())


def test_jetson_bundle_targets_aarch64_cp310_and_cuda_12_6(bundles: Bundles) -> None:
    bundle = bundles.repo / "dist" / "imaging_orin"
    wheels = pex_wheels(bundle / "app.pex")
    platform_wheels = [w for w in wheels if not w.endswith("-none-any.whl")]
    assert platform_wheels and all(
        ("cp310" in w or "-abi3-" in w) and "aarch64" in w for w in platform_wheels
    ), wheels
    manifest = json.loads((bundle / "cache" / "manifest.json").read_text())
    assert manifest["capabilities"] == ["sm_87"] and manifest["driver"] == "12.6"
    assert manifest["toolchains"]["cuda12"]["cuda"] == "12.6"
    assert manifest["toolchains"]["cuda12"]["nvrtc"].startswith("12.6")
    for ptx in (bundle / "cache").rglob("*.ptx"):
        version = re.search(r"^\.version (\d+)\.(\d+)", ptx.read_text(), re.MULTILINE)
        assert version and (int(version.group(1)), int(version.group(2))) <= (8, 5), ptx
        assert ".target sm_87" in ptx.read_text()


def test_cuda13_build_for_a_cuda_12_6_driver_is_refused(bundles: Bundles) -> None:
    run = run_pants(
        bundles.repo, ["package", f"{APP}:orin_with_cuda13"], local_store=bundles.store, pantsd=True
    )
    assert run.returncode != 0
    message = " ".join(run.stderr.split())
    assert f"The deploy_bundle {APP}:orin_with_cuda13 targets a CUDA 12.6 driver" in message
    # The first of the bundle's kernels in address order: the binary depends on all eight
    # (for JIT mode), and a bundle ships the kernels its binary depends on too.
    assert "src/python/imaging/kernels:bf16_axpy" in message
    assert (
        "cubins built by CUDA 13.0" in message
        and "PTX ISA 9.0, which needs a CUDA 13.0 driver" in message
    )
    assert "Fix: set the bundle's `toolchain`" in message
    assert not (bundles.repo / "dist" / "orin_with_cuda13").exists()


def test_aarch64_bundle_starts_under_qemu_user(
    bundles: Bundles, request: pytest.FixtureRequest
) -> None:
    arm64 = bundles.arm64
    if arm64.error:
        pytest.fail(f"the arm64 root or its platform failed:\n{arm64.error}")
    if arm64.emulation is None or arm64.platform is None:
        pytest.skip(f"no aarch64 emulation here: {arm64.unavailable}")
    emulation = arm64.emulation
    markers = arm64.platform["marker_environment"]
    assert (markers["platform_machine"], markers["python_version"]) == ("aarch64", "3.11")
    built = bundles.repo / "dist" / ARM64_BUNDLE
    platform_wheels = [w for w in pex_wheels(built / "app.pex") if "-none-any" not in w]
    assert platform_wheels and all(
        ("cp311" in w or "-abi3-" in w) and "aarch64" in w for w in platform_wheels
    ), platform_wheels

    with emulation.scratch() as run:
        shutil.copytree(built, run.host / "bundle", symlinks=True)
        bundle = f"{run.inside}/bundle"
        env = {"HOME": f"{run.inside}/home", "PEX_ROOT": f"{run.inside}/pex_root"}
        starts = []
        for _ in range(2):  # first: pex unpacks the PEX and makes its venv; second: warm
            started = emulation.run([f"{bundle}/app"], env)
            assert started.returncode == EXIT_GPU_ERROR, started.stdout + started.stderr
            assert "error: no CUDA driver: libcuda.so.1 cannot be loaded" in started.stderr
            assert f"bundle '{ARM64_BUNDLE}'" in started.stdout  # it read its cache/ first
            starts.append(started.seconds)
        verify = emulation.run(
            ["python3", f"{bundle}/app.pex", "verify", bundle], dict(env, PEX_MODULE="gpu_runtime")
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert verify.stdout.startswith(f"OK: bundle '{ARM64_BUNDLE}'"), verify.stdout

    timing = (
        f"aarch64 bundle under qemu-user (CPython {markers['python_full_version']}, binfmt "
        f"handler {emulation.handler}): root ready in {emulation.setup_s:.1f} s, platform read "
        f"in {arm64.read_s:.1f} s, first start {starts[0]:.1f} s, second start "
        f"{starts[1]:.1f} s, verify {verify.seconds:.1f} s"
    )
    print(timing)
    # In the JUnit report (as tests/probes do: record_property warns under xunit2).
    request.node.user_properties.append(("timing", timing))


def test_a_kernel_edit_leaves_the_app_and_an_app_edit_leaves_its_wheels(bundles: Bundles) -> None:
    """The device loop (issue 22): what a deploy would send after each kind of edit."""
    dist = bundles.repo / "dist" / "imaging_h200"
    kernel, app = bundles.repo / APP / "kernels" / "saxpy.py", bundles.repo / APP / "app.py"
    originals = {kernel: kernel.read_text(), app: app.read_text()}

    def package_after(path: Path, old: str, new: str) -> dict[str, str]:
        assert old in path.read_text(), path
        path.write_text(path.read_text().replace(old, new))
        run_pants(
            bundles.repo, ["package", f"{APP}:imaging_h200"], local_store=bundles.store
        ).check()
        return tree_digests(dist)

    try:
        before = tree_digests(dist)
        # a change of code (a comment alone changes only the manifest's source sha256)
        after_kernel = package_after(kernel, "a * x[i] + y[i]", "y[i] + a * x[i]")
        after_app = package_after(
            app, "def main(", "def unused() -> None:\n    pass\n\n\ndef main("
        )
    finally:
        for path, text in originals.items():
            path.write_text(text)

    def changed(a: dict[str, str], b: dict[str, str]) -> list[str]:
        return sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))

    kernel_changes = changed(before, after_kernel)
    assert kernel_changes and all(p.startswith("cache/") for p in kernel_changes), kernel_changes
    assert "cache/manifest.json" in kernel_changes
    assert [p for p in kernel_changes if "saxpy" in p], kernel_changes
    assert not [
        p for p in kernel_changes if p.startswith("cache/") and "/" in p[6:] and "saxpy" not in p
    ], kernel_changes  # other kernels' files untouched
    app_changes = changed(after_kernel, after_app)
    assert "app.pex/imaging/app.py" in app_changes and "cache/manifest.json" in app_changes
    assert not [p for p in app_changes if p.startswith(("app.pex/.deps/", "app.pex/.bootstrap"))]
    assert not [p for p in app_changes if p.startswith("cache/") and p != "cache/manifest.json"]
