"""PTX to cubin through nvJitLink, its errors, and the device runtime a grid sync links."""
