"""``python -m gpu_runtime cache list | clear | prune [--max-size SIZE]``: the JIT cache."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

HELP = "list, clear or prune the JIT cache ($GPU_RUNTIME_JIT_CACHE)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "clear", "prune"))
    parser.add_argument(
        "--max-size",
        default=None,
        metavar="SIZE",
        help="prune to this size (e.g. 500M; default $GPU_RUNTIME_JIT_CACHE_SIZE or 1G)",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="the cache root (default: as the runtime)"
    )


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _in_use(store: Any) -> str:
    """What a prune or clear left because running processes hold it (never removed)."""
    kept = len(store.in_use())
    return f"; {kept} entries in use by running processes kept" if kept else ""


def run(args: argparse.Namespace) -> int:
    from gpu_runtime.jit.cache import cache_bound
    from gpu_runtime.jit.store import JitCacheError, JitStore, parse_size

    store = JitStore(args.cache_dir)
    if args.action == "clear":
        removed = store.clear()
        print(f"removed {removed} entries from {store.root}{_in_use(store)}")
        return 0
    if args.action == "prune":
        try:
            bound = parse_size(args.max_size) if args.max_size else cache_bound()
        except (ValueError, JitCacheError) as error:
            fix = ": use e.g. 500M or 2G" if args.max_size else ""
            print(f"error: {'--max-size: ' if args.max_size else ''}{error}{fix}", file=sys.stderr)
            return 2
        evicted = store.prune(bound)
        freed = _size(sum(size for _, size in evicted))
        over = _in_use(store) if sum(s for _, _, s in store.sizes()) > bound else ""
        print(f"evicted {len(evicted)} entries ({freed}) to fit {_size(bound)}{over}")
        return 0
    entries = store.entries()
    print(f"{store.root}: {len(entries)} entries, {_size(sum(e.size for e in entries))}")
    rows = [("library", "capability", "size", "last use", "target", "key")]
    for e in reversed(entries):  # most recently used first
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_use))
        rows.append(
            (
                e.info.get("library", "?"),
                e.info.get("capability", "?"),
                _size(e.size),
                last,
                e.info.get("target", "?"),
                e.key[:12],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
