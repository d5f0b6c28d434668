"""What a compile takes and what its failure report says: its options (`options`), one value
from the `gpu_kernel` target to the compiler's argv, and how a report names the capabilities
that failed (`report`)."""
