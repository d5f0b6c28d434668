"""numba-cuda's documentation example ``ex_sessionize`` (tests/doc_examples/test_sessionize.py in
NVIDIA/numba-cuda): click-stream sessionization. One thread per click; a thread at a session
boundary (a new user, or more than ``session_timeout`` since the previous click) writes its
index, waits for every boundary to be written (a grid-wide sync, cooperative groups) and labels
the clicks after it. Cooperative: the build links libcudadevrt and marks the kernel
"cooperative"; the runtime launches it cooperatively (the docs use
``sessionize.forall(len(ids))``).

Changes from the original, for the AOT convention: ``session_timeout`` and the kernel are at
module level instead of in the test method (the kernel reads ``session_timeout`` as a global,
as it read the test's local before: a compile-time constant either way), and the signature
(the docs' int64 ids and timestamps, float64 results from ``np.zeros``, all from
``cuda.to_device``: C-contiguous) is listed in AOT_SIGNATURES. The host-side data is the case
in numba_docs.cases.
"""

# ex_sessionize.import.begin
import numpy as np
from numba import cuda

# Set the timeout to one hour
session_timeout = np.int64(np.timedelta64("3600", "s"))
# ex_sessionize.import.end


# ex_sessionize.kernel.begin
@cuda.jit
def sessionize(user_id, timestamp, results):
    gid = cuda.grid(1)
    size = len(user_id)

    if gid >= size:
        return

    # Determine session boundaries
    is_first_datapoint = gid == 0
    if not is_first_datapoint:
        new_user = user_id[gid] != user_id[gid - 1]
        timed_out = timestamp[gid] - timestamp[gid - 1] > session_timeout
        is_sess_boundary = new_user or timed_out
    else:
        is_sess_boundary = True

    # Determine session labels
    if is_sess_boundary:
        # This thread marks the start of a session
        results[gid] = gid

        # Make sure all session boundaries are written
        # before populating the session id
        grid = cuda.cg.this_grid()
        grid.sync()

        look_ahead = 1
        # Check elements 'forward' of this one
        # until a new session boundary is found
        while results[gid + look_ahead] == 0:
            results[gid + look_ahead] = gid
            look_ahead += 1
            # Avoid out-of-bounds accesses by the last thread
            if gid + look_ahead == size - 1:
                results[gid + look_ahead] = gid
                break


# ex_sessionize.kernel.end

AOT_SIGNATURES = {"sessionize": ["void(int64[::1], int64[::1], float64[::1])"]}
