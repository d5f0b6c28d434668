"""Publishing a compile's files into an output directory, all at once.

Why atomically: a failed or interrupted build must never leave a partial set
of PTX, cubin and metadata.json for the Pants rule (or a dev-mode cache
reader) to pick up, and an existing directory is replaced as a whole. A
compile of several capabilities in one process publishes all of them with
one rename too: the Pants rule either gets every capability or none.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import List, Mapping

from gpu_compiler import confine
from gpu_compiler.compile_result import CompileResult


def write_outputs(result: CompileResult, out_dir: str) -> List[str]:
    """Publish the result's files into ``out_dir`` atomically; return file names.

    Files are written to a temporary directory next to ``out_dir`` and renamed
    into place, so a reader (or a crash) never sees a partial set. An existing
    ``out_dir`` is replaced.
    """
    return _publish(result.files(), out_dir)


def write_outputs_by_capability(results: Mapping[str, CompileResult], out_dir: str) -> List[str]:
    """Publish each capability's files into ``out_dir/<capability>/``, all in one rename;
    return the paths relative to ``out_dir``."""
    files = {
        "%s/%s" % (capability, name): content
        for capability, result in results.items()
        for name, content in result.files().items()
    }
    return _publish(files, out_dir)


def _publish(files: Mapping[str, bytes], out_dir: str) -> List[str]:
    """Stage ``files`` (relative paths, "/"-separated) beside ``out_dir``, then rename."""
    out_dir = os.path.normpath(out_dir)
    if os.path.basename(out_dir) in ("", ".", ".."):
        raise ValueError("out_dir must name a directory to create, got %r" % (out_dir,))
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    # Under the OS sandbox, the one directory beside out_dir it let this process write.
    staging = confine.staging_dir(out_dir) or tempfile.mkdtemp(
        prefix=".%s.tmp-" % os.path.basename(out_dir), dir=parent
    )
    published = False
    try:
        for name in sorted(files):
            path = os.path.join(staging, *name.split("/"))
            if os.path.dirname(path) != staging:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            with open(path, "wb") as f:
                f.write(files[name])
        if confine.published_outside():
            # a mount point here: the process outside the namespaces renames it once this
            # one exits 0, and removes it otherwise
            published = True
            return sorted(files)
        publish_staged(staging, out_dir)
        published = True
    finally:
        if not published:
            shutil.rmtree(staging, ignore_errors=True)
    return sorted(files)


def publish_staged(staging: str, out_dir: str) -> None:
    """Rename the complete ``staging`` directory to ``out_dir``, replacing one there."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.chmod(staging, 0o755)
    old = None
    if os.path.lexists(out_dir):
        old = tempfile.mkdtemp(prefix=".%s.old-" % os.path.basename(out_dir), dir=parent)
        os.rmdir(old)
        os.rename(out_dir, old)
    os.rename(staging, out_dir)
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.unlink(old)
