"""The namespace wall fails closed and clean: a refusal half-way leaves the process usable.

Seen inside a remote executor's bubblewrap sandbox (run as root, no user namespace of its own):
``unshare(CLONE_NEWUSER | ... | CLONE_NEWPID)`` succeeded, writing the uid map was refused, and
the compile went on under Landlock alone in a process whose children belonged to a PID namespace
that had no pid 1 yet, so numba's first thread failed ("can't start new thread").
"""

from __future__ import annotations

import threading

import pytest

from gpu_compiler.walls import namespace


def _namespaces_available() -> bool:
    try:
        namespace._probe_user_namespace()
    except namespace.Unavailable:
        return False
    return True


def test_a_uid_map_refused_half_way_leaves_this_process_as_it_was(monkeypatch) -> None:
    if not _namespaces_available():
        pytest.skip("this kernel allows no unprivileged user namespace: nothing half-way to test")
    real_write = namespace._write

    def refuse_uid_map(path: str, text: str) -> None:
        if path.endswith("uid_map"):
            raise PermissionError(1, "Operation not permitted", path)
        real_write(path, text)

    # The probe's child inherits the patch: there, unshare succeeds and the uid map is refused.
    monkeypatch.setattr(namespace, "_write", refuse_uid_map)
    with pytest.raises(namespace.Unavailable, match="mapping the compile's uid failed"):
        namespace._probe_user_namespace()
    # Nothing changed here: a thread still starts (it would not after unshare(CLONE_NEWPID)).
    ran = []
    worker = threading.Thread(target=lambda: ran.append(True))
    worker.start()
    worker.join()
    assert ran == [True]


def test_the_probe_refuses_a_process_that_runs_threads() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        with pytest.raises(namespace.Unavailable, match="threads"):
            namespace._probe_user_namespace()
    finally:
        stop.set()
        worker.join()
