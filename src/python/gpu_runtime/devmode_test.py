"""Dev mode with a fake compiler (the real one needs the cuda13 toolchain: see
tests/gpu/dev_mode_check.py)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict

import pytest

import gpu_runtime
from gpu_runtime.conftest import (
    HISTOGRAM,
    SAXPY,
    SOBEL,
    FakeBackend,
    FakeDeviceArray,
    make_metadata,
)
from gpu_runtime.devmode import (
    DevKernelCache,
    cache_key,
    default_options,
    dev_cache_root,
    expand_sources,
)
from gpu_runtime.errors import GpuRuntimeError, IntegrityError, KernelNotFoundError

MODULES = {
    "saxpy": ("numba", SAXPY),
    "histogram": ("numba", HISTOGRAM),
    "sobel": ("cuda_cpp", SOBEL),
}


class FakeResult:
    def __init__(self, metadata, files):
        self.metadata, self.files = metadata, files


class FakeCompiler:
    """Stands in for gpu_compiler.compile.{compile_source, write_outputs, CompileOptions}."""

    def __init__(self, versions=None):
        self.calls = []
        self.versions = versions or {"cuda": "13.0", "numba-cuda": "0.30.4"}

    def compile_source(self, source, capability, options):
        self.calls.append((source, capability, options))
        stem = os.path.splitext(os.path.basename(source))[0]
        lang, modules = MODULES[stem]
        content = lambda lib, m, cap, kind: f"{kind} {m} {cap}".encode()  # noqa: E731
        md = make_metadata(source, lang, modules, capability, content=content)
        files = {}
        for m in md["modules"]:
            for kind in ("ptx", "cubin"):
                files[m[kind]] = content(stem, m["name"], capability, kind)
        return FakeResult(md, files)

    @staticmethod
    def write_outputs(result, out_dir):
        tmp = out_dir + ".tmp"
        os.makedirs(tmp)
        for name, data in result.files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        with open(os.path.join(tmp, "metadata.json"), "w") as f:
            json.dump(result.metadata, f)
        os.replace(tmp, out_dir)

    @staticmethod
    def options(**kw):
        return kw

    def fingerprint(self):
        return {"versions": dict(self.versions), "gpu_compiler": "fake"}

    def tools(self):
        return (self.compile_source, self.write_outputs, self.options, self.fingerprint)


@pytest.fixture
def sources(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir()
    text = {
        "saxpy.py": "def saxpy(out, a, x, y): ...\n",
        "histogram.py": "def histogram_256(image, bins): ...\ndef sum_f32(values, out): ...\n",
        "sobel.cu": 'extern "C" __global__ void sobel_magnitude(const float* src) {}\n',
    }
    for name in ("saxpy.py", "histogram.py", "sobel.cu", "_helper.py", "notes.txt"):
        (d / name).write_text(text.get(name, f"# {name}\n"))
    return d


def dev(sources, tmp_path, compiler, backend=None, **kw):
    return DevKernelCache(
        str(sources),
        backend or FakeBackend(),
        cache_dir=str(tmp_path / "devcache"),
        compiler=compiler.tools(),
        **kw,
    )


def test_expand_sources(sources):
    found = expand_sources(str(sources))
    assert sorted(os.path.basename(p) for p in found) == ["histogram.py", "saxpy.py", "sobel.cu"]
    assert expand_sources({str(sources / "sobel.cu"): {"defines": ["X"]}}) == {
        str(sources / "sobel.cu"): {"defines": ["X"]}
    }
    with pytest.raises(GpuRuntimeError, match="does not exist"):
        expand_sources([str(sources / "nope.py")])


def test_compiles_on_first_use_only_what_is_needed(sources, tmp_path):
    comp = FakeCompiler()
    c = dev(sources, tmp_path, comp)
    assert comp.calls == []
    k = c.kernel("saxpy")
    assert [os.path.basename(s) for s, _, _ in comp.calls] == ["saxpy.py"]
    assert comp.calls[0][1] == "sm_90"
    out = FakeDeviceArray((4,), "float32")
    k.launch(1, 4, out, 1.0, out, out)
    c.kernel("sum_f32")  # not a file stem: the source whose text mentions it is compiled next
    assert [os.path.basename(s) for s, _, _ in comp.calls] == ["saxpy.py", "histogram.py"]


def test_second_process_hits_the_cache(sources, tmp_path):
    comp = FakeCompiler()
    b1 = FakeBackend()
    dev(sources, tmp_path, comp, b1).kernel("sobel_magnitude").load()
    comp2 = FakeCompiler()
    b2 = FakeBackend()
    dev(sources, tmp_path, comp2, b2).kernel("sobel_magnitude").load()
    assert [os.path.basename(s) for s, _, _ in comp.calls] == ["sobel.cu"]  # its text names it
    assert comp2.calls == []
    assert b1.loads == b2.loads


@pytest.mark.parametrize("change", ["source", "capability", "options", "toolchain", "helper"])
def test_key_changes_recompile(sources, tmp_path, change):
    comp = FakeCompiler()
    dev(sources, tmp_path, comp).kernel("saxpy").load()
    backend = FakeBackend()
    opts: Dict[str, Any] = {}
    if change == "source":
        (sources / "saxpy.py").write_text("# edited\n")
    elif change == "capability":
        backend = FakeBackend(capability=(8, 7), driver=(13, 0))
    elif change == "toolchain":
        comp.versions = {"cuda": "13.0", "numba-cuda": "0.30.5"}
    elif change == "helper":
        (sources / "_helper.py").write_text("# helper edited\n")
    c = DevKernelCache(
        {str(sources / "saxpy.py"): {"fast_math": change == "options"}},
        backend,
        cache_dir=str(tmp_path / "devcache"),
        compiler=comp.tools(),
        **opts,
    )
    c.kernel("saxpy").load()
    assert len(comp.calls) == 2
    assert len(os.listdir(tmp_path / "devcache")) == 2


def test_cache_key_is_versioned_and_stable():
    a = cache_key("ab" * 32, "sm_90", {"fast_math": False}, {"cuda": "13.0"})
    assert a == cache_key("ab" * 32, "sm_90", {"fast_math": False}, {"cuda": "13.0"})
    assert len(a) == 64
    assert a != cache_key("ab" * 32, "sm_87", {"fast_math": False}, {"cuda": "13.0"})
    assert a != cache_key("ab" * 32, "sm_90", {"fast_math": True}, {"cuda": "13.0"})
    assert a != cache_key("ab" * 32, "sm_90", {"fast_math": False}, {"cuda": "13.1"})
    assert a != cache_key("cd" * 32, "sm_90", {"fast_math": False}, {"cuda": "13.0"})


def test_tampered_dev_cache_file_is_refused(sources, tmp_path):
    comp = FakeCompiler()
    dev(sources, tmp_path, comp).kernel("saxpy").load()
    root = tmp_path / "devcache"
    (entry,) = os.listdir(root)
    (root / entry / "saxpy__0.cubin").write_bytes(b"tampered")
    with pytest.raises(IntegrityError, match="does not match"):
        dev(sources, tmp_path, comp).kernel("saxpy").load()


def test_unknown_kernel_in_dev_mode(sources, tmp_path):
    comp = FakeCompiler()
    with pytest.raises(
        KernelNotFoundError,
        match="no kernel 'nope' in dev mode .* Kernels: histogram.histogram_256",
    ):
        dev(sources, tmp_path, comp).kernel("nope")
    assert len(comp.calls) == 3


def test_qualified_name_compiles_only_that_library(sources, tmp_path):
    comp = FakeCompiler()
    c = dev(sources, tmp_path, comp)
    assert c.kernel("histogram.sum_f32").qualified_name == "histogram.sum_f32"
    assert c.kernel("sobel_magnitude", library="sobel").library == "sobel"
    assert [os.path.basename(s) for s, _, _ in comp.calls] == ["histogram.py", "sobel.cu"]


def test_open_cache_falls_back_to_dev_mode(sources, tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_RUNTIME_CACHE", raising=False)
    monkeypatch.delenv("PEX", raising=False)
    monkeypatch.setattr("sys.argv", [str(tmp_path / "app.py")])
    monkeypatch.setenv("GPU_RUNTIME_DEV_SOURCES", str(sources))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GPU_RUNTIME_DEV_CACHE", raising=False)
    c = gpu_runtime.open_cache(backend=FakeBackend())
    assert isinstance(c, DevKernelCache)
    assert c.root == str(tmp_path / "xdg" / "gpu_runtime")
    assert c.libraries() == ["histogram", "saxpy", "sobel"]


def test_dev_cache_root(tmp_path):
    assert dev_cache_root({"GPU_RUNTIME_DEV_CACHE": str(tmp_path)}) == str(tmp_path)
    assert dev_cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "gpu_runtime")
    assert dev_cache_root({}).endswith(os.path.join(".cache", "gpu_runtime"))


def test_default_options(tmp_path, monkeypatch):
    root = tmp_path / "src"
    (root / "pkg" / "kernels").mkdir(parents=True)
    src = root / "pkg" / "kernels" / "k.py"
    src.write_text("")
    monkeypatch.setattr("sys.path", [str(root), "/elsewhere"])
    assert default_options(str(src), {})["sys_path"] == [str(root)]
    assert default_options(str(src), {"sys_path": ["x"]})["sys_path"] == ["x"]
    cu = root / "pkg" / "kernels" / "m.cu"
    assert default_options(str(cu), {})["include_dirs"] == [str(root / "pkg" / "kernels")]
    assert default_options(str(cu), {"include_dirs": ["inc", "/abs"]})["include_dirs"] == [
        str(root / "pkg" / "kernels" / "inc"),
        "/abs",
    ]


def test_dev_mode_without_gpu_compiler_is_a_clear_error(sources, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_compiler(name, *a, **kw):
        if name.startswith("gpu_compiler.compile"):
            raise ImportError("No module named 'numba'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_compiler)
    c = DevKernelCache(str(sources), FakeBackend(), cache_dir=str(tmp_path / "d"))
    with pytest.raises(
        KernelNotFoundError, match="dev mode needs gpu_compiler and the compile toolchain"
    ):
        c.kernel("saxpy")


def test_metadata_sha_is_what_gets_checked(sources, tmp_path):
    comp = FakeCompiler()
    b = FakeBackend()
    dev(sources, tmp_path, comp, b).kernel("saxpy").load()
    assert (
        hashlib.sha256(b.loads[0][1]).hexdigest()
        == hashlib.sha256(b"cubin saxpy__0 sm_90").hexdigest()
    )


def test_dev_mode_driver_too_old_advice(sources, tmp_path):
    c = dev(sources, tmp_path, FakeCompiler(), FakeBackend(capability=(8, 7), driver=(12, 6)))
    with pytest.raises(gpu_runtime.NoCompatibleVariantError, match="fix: dev mode compiled it"):
        c.kernel("saxpy").load()
