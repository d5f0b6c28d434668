"""A stand-in for `python -m gpu_compiler` in the JIT tests: same command line, fake bytes.

It writes `<out-dir>/<capability>/metadata.json` and the module files that `make_metadata`
describes, with contents derived from every input file under the cwd, so that a changed input
changes the output, and, as numba's and NVRTC's do, from the environment variables that
change codegen (NUMBA_*, CUDA_*, NVRTC_*, NVVM_*, LD_*, any case), so that one that leaks
into the compile shows in its bytes. $FAKE_COMPILER_LOG gets a line per compile,
$FAKE_COMPILER_SLEEP widens race windows, $FAKE_COMPILER_CODE is the fingerprint's code hash,
$FAKE_COMPILER_FAIL fails, $FAKE_COMPILER_ENOSPC fails writing its outputs as on a full
disk (a traceback, as a real compiler's). `--capability-from-stdin` reads the capability as
gpu_compiler does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import List, Optional


def _inputs_digest() -> str:
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk("."):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                digest.update(path.encode() + b"\0" + f.read())
    for name in sorted(os.environ):
        if name.upper().startswith(CODEGEN_ENV):
            digest.update(f"{name}={os.environ[name]}".encode() + b"\0")
    return digest.hexdigest()[:16]


CODEGEN_ENV = ("NUMBA_", "CUDA_", "NVRTC_", "NVVM_", "LD_")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fingerprint"]:
        code = os.environ.get("FAKE_COMPILER_CODE", "c0")
        print(json.dumps({"toolchain": {"cuda": "13.0"}, "code": code}))
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--source", required=True)
    parser.add_argument("--capability")
    parser.add_argument("--capability-from-stdin", action="store_true")
    parser.add_argument("--out-dir", required=True)
    args, _ = parser.parse_known_args(argv)
    if args.capability_from_stdin:  # as gpu_compiler: the line, or nothing to do at EOF
        args.capability = sys.stdin.readline().strip()
        if not args.capability:
            return 0
    if os.environ.get("FAKE_COMPILER_FAIL"):
        sys.stderr.write(
            f"{args.capability}: {args.source}:3: error: {os.environ['FAKE_COMPILER_FAIL']}\n"
        )
        return 1
    if os.environ.get("FAKE_COMPILER_LOG"):
        with open(os.environ["FAKE_COMPILER_LOG"], "a") as f:
            f.write(f"{os.getpid()} {args.source} {args.capability}\n")
    time.sleep(float(os.environ.get("FAKE_COMPILER_SLEEP", "0")))
    from gpu_spec.conftest import HISTOGRAM, SAXPY, SOBEL, make_metadata  # imports pytest: slow

    modules_of = {
        "saxpy": ("numba", SAXPY),
        "histogram": ("numba", HISTOGRAM),
        "sobel": ("cuda_cpp", SOBEL),
    }
    stem = os.path.splitext(os.path.basename(args.source))[0]
    language, modules = modules_of[stem]
    salt = _inputs_digest()

    def content(lib, module, capability, kind):
        return f"{kind} {module} {capability} {salt}".encode()

    md = make_metadata(args.source, language, modules, args.capability, content=content)
    out = os.path.join(args.out_dir, args.capability)
    os.makedirs(out)
    if os.environ.get("FAKE_COMPILER_ENOSPC"):
        import errno

        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), out)
    for m in md["modules"]:
        for kind in ("ptx", "cubin"):
            with open(os.path.join(out, m[kind]), "wb") as binary:
                binary.write(content(stem, m["name"], args.capability, kind))
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump(md, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
