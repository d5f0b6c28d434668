"""A fake CUDA driver whose "device memory" is host memory: DeviceArray's calls, no GPU."""

from __future__ import annotations

import ctypes


class FakeDriver:
    class CUstream:
        def __init__(self, h=0):
            self.h = int(h)

    def __init__(self):
        self.buffers = {}
        self.freed = []
        self.graveyard = []
        self.syncs = []

    def cuMemAlloc(self, n):
        buf = ctypes.create_string_buffer(n)
        addr = ctypes.addressof(buf)
        self.buffers[addr] = buf
        return (0, addr)

    def cuMemFree(self, ptr):
        self.freed.append(ptr)
        # kept, so that no address is handed out twice (as tests of stale entries assume)
        self.graveyard.append(self.buffers.pop(int(ptr)))
        return (0,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        ctypes.memmove(dst, src, n)
        return (0,)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        ctypes.memmove(dst, src, n)
        return (0,)

    def cuMemsetD8Async(self, dst, value, n, stream):
        ctypes.memset(dst, value, n)
        return (0,)

    def cuStreamSynchronize(self, stream):
        self.syncs.append(stream.h)
        return (0,)
