"""The `gpu_kernel` target and its fields (fields and targets only; rules live elsewhere).

Constructing a target runs only Pants' own checks (types, `required`, `valid_choices`,
`valid_numbers`): Pants builds every target of the repo for Python dependency inference, so a
check here would fail every such goal on one broken target anywhere. The plugin's own checks
(capabilities, PTX versions, register caps, `defines`, `include_dirs`, drivers) run where a rule
uses the target: `gpu_build.validation`.
"""

from __future__ import annotations

import os
from typing import ClassVar, Iterable, Optional, Union

from pants.core.goals.package import OutputPathField
from pants.engine.addresses import Address
from pants.engine.target import (
    COMMON_TARGET_FIELDS,
    BoolField,
    Dependencies,
    DictStringToStringField,
    FloatField,
    IntField,
    SingleSourceField,
    SpecialCasedDependencies,
    StringField,
    StringSequenceField,
    Target,
    ValidNumbers,
)
from pants.util.strutil import help_text

from gpu_spec.capabilities import MAX_REGISTERS_PER_THREAD, parse_capability
from gpu_spec.errors import SpecError
from gpu_spec.metadata import LANG_CUDA, LANG_NUMBA, suffixes_of

CUDA_CPP_EXTENSIONS = suffixes_of(LANG_CUDA)
NUMBA_EXTENSIONS = suffixes_of(LANG_NUMBA)


def sorted_capabilities(capabilities: Iterable[str]) -> tuple[str, ...]:
    """Unique, oldest first; unknown ones last, as written, for the validation to refuse."""

    def key(capability: str) -> tuple[int, tuple]:
        try:
            return (0, parse_capability(capability))
        except SpecError:
            return (1, ())  # equal keys: the sort is stable, so they stay as written

    return tuple(sorted(dict.fromkeys(capabilities), key=key))


class GpuKernelSourceField(SingleSourceField):
    expected_file_extensions: ClassVar[tuple[str, ...]] = NUMBA_EXTENSIONS + CUDA_CPP_EXTENSIONS
    help = help_text(
        """
        The kernel source: a `.py` file of numba-cuda kernels, whose signatures are eager
        (`@cuda.jit("void(float32[::1])")`, a list of them, or numba type objects) or listed in
        a module-level `AOT_SIGNATURES` dict, or a `.cu` file of CUDA C++ compiled with NVRTC.
        """
    )


class GpuKernelCapabilitiesField(StringSequenceField):
    alias = "capabilities"
    help = help_text(
        """
        Compute capabilities to compile for, e.g. `["sm_87", "sm_90"]`. Each gets its own PTX
        and cubin, all from one compile process of the source. Defaults to
        `[gpu-toolchains].default_capabilities`.
        """
    )

    @classmethod
    def compute_value(
        cls, raw_value: Optional[Iterable[str]], address: Address
    ) -> Optional[tuple[str, ...]]:
        value = super().compute_value(raw_value, address)
        return None if value is None else sorted_capabilities(value)


class GpuKernelPtxVersionField(StringField):
    alias = "ptx_version"
    help = help_text(
        """
        Write this PTX ISA version (e.g. `"8.5"`) instead of the one the toolchain emits,
        because a driver rejects PTX newer than itself. Refused when the toolchain cannot emit
        it: newer than the toolchain's own ISA, or older than a listed capability needs.
        """
    )


class GpuKernelToolchainField(StringField):
    alias = "toolchain"
    help = help_text(
        """
        Which pinned toolchain of `[gpu-toolchains].toolchains` compiles this kernel.
        Defaults to `[gpu-toolchains].default_toolchain`.
        """
    )


class GpuKernelFastMathField(BoolField):
    alias = "fast_math"
    default = False
    help = "Compile with fast math (numba `fastmath=True`, NVRTC `--use_fast_math`)."


class GpuKernelLineInfoField(BoolField):
    alias = "lineinfo"
    default = False
    help = "Emit line information into the PTX and cubin, for profilers."


class GpuKernelMaxRegistersField(IntField):
    alias = "max_registers"
    valid_numbers = ValidNumbers.positive_only
    help = help_text(
        f"""
        Cap the registers per thread (NVRTC `--maxrregcount`, nvJitLink `-maxrregcount`), from
        1 to {MAX_REGISTERS_PER_THREAD} (what a thread can have on every supported GPU).
        """
    )


class GpuKernelDefinesField(StringSequenceField):
    alias = "defines"
    default = ()
    help = help_text(
        """
        Preprocessor definitions for a `.cu` source, as `NAME` or `NAME=VALUE`
        (NVRTC `-D`); `NAME` is a C identifier. Other compiler options (`-I`, `-O`) are not
        definitions: use `include_dirs` and the other fields.
        """
    )


class GpuKernelIncludeDirsField(StringSequenceField):
    alias = "include_dirs"
    default = ()
    help = help_text(
        """
        Include directories, relative to the BUILD file's directory (NVRTC `-I`): for a
        `.cu` source, and for a numba `.py` source, of the CUDA C++ files its kernels link
        (`@cuda.jit(link=[...])`, `cuda.declare_device(..., link=...)`), searched before the
        directories of numba's `config.CUDA_NVRTC_EXTRA_SEARCH_PATHS`. Own the headers with a
        `resources` target (a `files` target compiles too, but Pants warns about it in the
        closure of an app's `pex_binary` that depends on the kernel, as JIT mode needs): the
        owners are inferred from the `#include`s, which are also looked up in these
        directories. Every directory must be an input of the compile: one outside the
        repository is refused.
        """
    )

    @staticmethod
    def build_root_relative(spec_path: str, include_dir: str) -> str:
        """One value of the field as the compiler, the inference and the checks see it: joined
        to the BUILD file's directory and normalised (`../` out of the build root stays
        visible as a leading `..`)."""
        return os.path.normpath(os.path.join(spec_path, include_dir))

    def resolved(self, spec_path: str) -> tuple[str, ...]:
        """Every value, `build_root_relative`, in the field's order."""
        return tuple(self.build_root_relative(spec_path, d) for d in self.value or ())


class GpuKernelNameExpressionsField(StringSequenceField):
    alias = "name_expressions"
    default = ()
    help = help_text(
        """
        Template instantiations of a `.cu` source to compile, as NVRTC name expressions, e.g.
        `["matmul<float, 16>"]`. The runtime finds each kernel by this expression. `extern "C"`
        kernels need none.
        """
    )


class GpuKernelDependenciesField(Dependencies):
    help = help_text(
        """
        Helper modules a `.py` kernel imports, or headers a `.cu` kernel includes (owned by
        `python_sources` or `resources` targets): they are put beside the source when it
        compiles. The owners of first-party imports and of `#include`d files are inferred
        (transitively through headers and helpers), so list only what cannot be inferred; `!`
        ignores an inferred one.
        """
    )


class GpuKernelOutputPathField(OutputPathField):
    help = help_text(
        """
        The directory `pants package` writes this kernel's PTX, cubin and metadata into,
        relative to `--distdir` (e.g. `dist/`), one subdirectory per capability:
        `<output_path>/<capability>/<module>.ptx`. If undefined, the BUILD file's directory
        with dots for slashes, then the target name: `src/python/app/kernels:saxpy` writes
        `dist/src.python.app.kernels/saxpy/sm_90/saxpy.ptx`. Setting it risks two targets
        writing the same directory.
        """
    )


_BUDGET_DEFAULT = "Default: `[gpu-resource-budgets].{option}`; neither set: no limit."


class GpuKernelBudgetRegistersField(IntField):
    alias = "budget_registers"
    valid_numbers = ValidNumbers.positive_and_zero
    help = help_text(
        f"""
        The most registers per thread any kernel of this target may use on any of its
        capabilities; a cubin over it fails the compile, naming the kernel, capability, figure
        and budget. {_BUDGET_DEFAULT.format(option="registers")}
        """
    )


class GpuKernelBudgetSpillBytesField(IntField):
    alias = "budget_spill_bytes"
    valid_numbers = ValidNumbers.positive_and_zero
    help = help_text(
        f"""
        The most register spill traffic (spill store plus spill load bytes, per thread) a kernel
        may have; 0 fails any spill. {_BUDGET_DEFAULT.format(option="spill_bytes")}
        """
    )


class GpuKernelBudgetSharedBytesField(IntField):
    alias = "budget_shared_bytes"
    valid_numbers = ValidNumbers.positive_and_zero
    help = help_text(
        f"""
        The most static shared memory per block a kernel may declare, in bytes (as the linker
        reports it). {_BUDGET_DEFAULT.format(option="shared_bytes")}
        """
    )


class GpuKernelBudgetLocalBytesField(IntField):
    alias = "budget_local_bytes"
    valid_numbers = ValidNumbers.positive_and_zero
    help = help_text(
        f"""
        The most local memory (stack frame) per thread a kernel may use, in bytes.
        {_BUDGET_DEFAULT.format(option="local_bytes")}
        """
    )


class GpuKernelBudgetMinOccupancyField(FloatField):
    alias = "budget_min_occupancy"
    help = help_text(
        f"""
        The least theoretical occupancy (active warps over the SM's maximum, 0 to 1) a kernel
        must reach on each capability at `budget_block_size` threads per block, or at its best
        block size where none is named: the CUDA occupancy calculator's arithmetic from its
        registers and shared memory (`gpu_spec.resources.occupancy`).
        {_BUDGET_DEFAULT.format(option="min_occupancy")}
        """
    )


class GpuKernelBudgetBlockSizeField(IntField):
    alias = "budget_block_size"
    valid_numbers = ValidNumbers.positive_only
    help = help_text(
        f"""
        The threads per block the kernel is launched with, at which `budget_min_occupancy` is
        checked and `pants gpu-resources` reports occupancy.
        {_BUDGET_DEFAULT.format(option="block_size")}
        """
    )


BUDGET_FIELDS = (
    GpuKernelBudgetRegistersField,
    GpuKernelBudgetSpillBytesField,
    GpuKernelBudgetSharedBytesField,
    GpuKernelBudgetLocalBytesField,
    GpuKernelBudgetMinOccupancyField,
    GpuKernelBudgetBlockSizeField,
)


class GpuKernelTarget(Target):
    alias = "gpu_kernel"
    core_fields = (
        *COMMON_TARGET_FIELDS,
        GpuKernelSourceField,
        GpuKernelCapabilitiesField,
        GpuKernelPtxVersionField,
        GpuKernelToolchainField,
        GpuKernelFastMathField,
        GpuKernelLineInfoField,
        GpuKernelMaxRegistersField,
        GpuKernelDefinesField,
        GpuKernelIncludeDirsField,
        GpuKernelNameExpressionsField,
        GpuKernelDependenciesField,
        GpuKernelOutputPathField,
        *BUDGET_FIELDS,
    )
    help = help_text(
        f"""
        GPU kernels compiled ahead of time to PTX and cubin for each compute capability.

        One hermetic, cached Pants process per source compiles it for all its capabilities in
        the pinned toolchain of `[gpu-toolchains]` (`[gpu-toolchains].batch_capabilities =
        false`: one per (source, capability)). A `.py` source holds numba-cuda kernels with
        eager signatures (`@cuda.jit("void(float32[::1])")`, a list, type objects) or an
        `AOT_SIGNATURES` dict; a `.cu` source is CUDA C++ compiled by NVRTC (templates through
        `{GpuKernelNameExpressionsField.alias}=`). `pants package` writes
        `<capability>/<module>.ptx`, `.cubin` and `metadata.json` under `dist/`.

            gpu_kernel(name="saxpy", source="saxpy.py", capabilities=["sm_87", "sm_90"])

        Every signature form, linked `.cu` files, headers and the outputs: docs/gpu_kernel.md.
        The `budget_*` fields fail the compile of a kernel that uses more registers, spills,
        shared or local memory than allowed, or reaches too little occupancy; `pants
        gpu-resources` reports every kernel's figures.
        """
    )


# -----------------------------------------------------------------------------------------------
# `deploy_bundle`


class DeployBundleBinaryField(SpecialCasedDependencies):
    alias = "binary"
    required = True
    help = help_text(
        """
        The app: the address of a `pex_binary`. Its PEX goes into the bundle, built for
        `complete_platforms` when that field is set.
        """
    )

    @classmethod
    def compute_value(
        cls, raw_value: Optional[Union[str, Iterable[str]]], address: Address
    ) -> Optional[tuple[str, ...]]:
        # One address, written as a string; kept as a special-cased dependency so that
        # `--changed-dependents` finds the bundle from its binary.
        if isinstance(raw_value, str):
            raw_value = (raw_value,)
        return super().compute_value(raw_value, address)


class DeployBundleKernelsField(SpecialCasedDependencies):
    alias = "kernels"
    help = help_text(
        """
        `gpu_kernel` targets whose compiled kernels go into the bundle's `cache/`, besides those
        the binary already depends on.
        """
    )


class DeployBundleCapabilitiesField(StringSequenceField):
    alias = "capabilities"
    required = True
    help = help_text(
        """
        Compute capabilities to ship, e.g. `["sm_87"]` for a Jetson Orin. Every kernel is
        compiled for each of them (a kernel whose own `capabilities` leave one out is an error).
        """
    )

    @classmethod
    def compute_value(
        cls, raw_value: Optional[Iterable[str]], address: Address
    ) -> Optional[tuple[str, ...]]:
        value = super().compute_value(raw_value, address)  # enforces `required`
        return None if value is None else sorted_capabilities(value)


class DeployBundleToolchainField(StringField):
    alias = "toolchain"
    help = help_text(
        """
        The toolchain of `[gpu-toolchains].toolchains` that compiles every kernel of this bundle,
        e.g. `"cuda12"` for a CUDA 12.6 driver. Defaults to each kernel's own `toolchain`.
        """
    )


class DeployBundleDriverVersionField(StringField):
    alias = "driver_version"
    required = True
    help = help_text(
        """
        The CUDA version of the device's driver, e.g. `"12.6"` for JetPack 6 or `"13.0"` for
        driver 580. `pants package` refuses to ship PTX newer than this driver can JIT, or
        cubins from a toolchain of a newer CUDA major version.
        """
    )


class DeployBundleCompletePlatformsField(SpecialCasedDependencies):
    alias = "complete_platforms"
    help = help_text(
        """
        `file` targets of Pex complete-platform JSON describing the device (CPU architecture,
        Python version, glibc): the app PEX is built with wheels for it. Overrides the
        binary's own `complete_platforms`.
        """
    )


class DeployBundleArchiveField(StringField):
    alias = "archive"
    valid_choices = ("tar.gz",)
    help = help_text(
        """
        Also write the bundle as one archive beside its directory, e.g. `"tar.gz"` gives
        `dist/<output_path>.tar.gz` (byte-reproducible).
        """
    )


class DeployBundleInitCudaAtStartField(BoolField):
    alias = "init_cuda_at_start"
    default = True
    help = help_text(
        """
        Whether the bundle's launcher (`<bundle>/app`, written for a `pex_binary` with
        `execution_mode="venv"`) starts CUDA before the app's first line: a thread calls cuInit
        and retains device 0's primary context, which is what gpu_runtime's first use does, so
        that the driver's set-up runs while the app imports numpy and gpu_runtime instead of
        after. `app.pex` run by `python3` is not affected.

        Set it to `False` for an app that forks processes which use the GPU (the "fork" start
        method of `multiprocessing`, the default on Linux before Python 3.14): a child forked
        from a process where CUDA is initialised cannot use CUDA, and gpu_runtime's error in
        the child says so. Also for an app that chooses its GPU by setting
        `CUDA_VISIBLE_DEVICES` in its own code, or that uses another device than 0. On the
        device, `GPU_BUNDLE_INIT_CUDA=0` (or `1`) overrides this field for one run.
        """
    )


class DeployBundleAppLayoutField(StringField):
    alias = "app_layout"
    valid_choices = ("packed", "zipapp")
    default = "packed"
    help = help_text(
        """
        How the app PEX is laid out in the bundle, whatever the `pex_binary`'s own `layout`.

        `"packed"` (the default): `app.pex/` is a directory holding the app's own modules as
        files and each third-party wheel as one zip under `app.pex/.deps/`. Every one of them
        is a file of the manifest, so `pants experimental-deploy`, which sends only files whose
        sha256 the device lacks, sends an edit of the app's code without its dependencies.
        `python3 app.pex` runs it as it runs a zipapp.

        `"zipapp"`: one `app.pex` file, as `pants package` of the `pex_binary` writes it; any
        change re-sends all of it.
        """
    )


class DeployBundleJitFallbackField(BoolField):
    alias = "jit_fallback"
    default = False
    help = help_text(
        """
        Whether the app PEX also carries its kernels' sources (JIT mode's `__gpu_kernels__/`
        index), so that an unsigned bundle on a machine with the kernel compiler (numba-cuda
        or NVRTC in the app's requirements, or `$GPU_RUNTIME_TOOLCHAIN`) compiles on first use
        what its `cache/` lacks for the GPU at hand. Refused on a signed bundle: its runtime
        never compiles, since no signature covers a compiler or what it writes.

        Off by default: the bundle's app is then built from the `binary`'s dependencies *not
        reached through* `gpu_kernel` targets, so editing a kernel (or a header or module only
        a kernel uses) rebuilds that kernel's cache files and the manifest, never `app.pex`,
        and a deploy sends kilobytes. `pants run` and `pants test` always carry the sources.
        """
    )


class DeployBundleOutputPathField(OutputPathField):
    help = help_text(
        """
        Where `pants package` writes the bundle's directory (and, with `archive`, its
        `.tar.gz` beside it), relative to `--distdir` (e.g. `dist/`). If undefined, the
        target name: `src/python/imaging:imaging_orin` gives `dist/imaging_orin/`, not prefixed
        by the BUILD file's directory as other packages are. Two bundles that would write one
        path (the same name in two directories, or an `output_path` inside another's) are
        refused before anything is built.
        """
    )

    def value_or_default(self, *, file_ending: str | None) -> str:
        """Pants' default file name (the target name, with any parameters), without the
        directory part: a bundle is copied to its device by its name alone."""
        if self.value:
            return self.value
        return os.path.basename(super().value_or_default(file_ending=file_ending))


class DeployBundleDestinationField(StringField):
    alias = "destination"
    help = help_text(
        """
        Where `pants experimental-deploy` puts the bundle: `user@host:/absolute/path` (releases
        under `<path>/releases/`, the running one at `<path>/current`). Default:
        `[gpu-bundle-deploy].destination`.
        """
    )


class DeployBundleSshPortField(IntField):
    alias = "ssh_port"
    help = "The device's ssh port for `experimental-deploy`. Default: `[gpu-bundle-deploy].port`."


class DeployBundleIdentityFileField(StringField):
    alias = "identity_file"
    help = help_text(
        """
        The ssh private key to deploy with (`ssh -i`); `~` and paths relative to the build root
        are accepted. Default: `[gpu-bundle-deploy].identity_file`, else ssh's own choice.
        """
    )


class DeployBundleTarget(Target):
    alias = "deploy_bundle"
    core_fields = (
        *COMMON_TARGET_FIELDS,
        DeployBundleBinaryField,
        DeployBundleKernelsField,
        DeployBundleCapabilitiesField,
        DeployBundleToolchainField,
        DeployBundleDriverVersionField,
        DeployBundleCompletePlatformsField,
        DeployBundleArchiveField,
        DeployBundleInitCudaAtStartField,
        DeployBundleAppLayoutField,
        DeployBundleJitFallbackField,
        DeployBundleOutputPathField,
        DeployBundleDestinationField,
        DeployBundleSshPortField,
        DeployBundleIdentityFileField,
    )
    help = help_text(
        """
        A device bundle: the app as a PEX for the device's platform, plus `cache/` with its
        kernels compiled ahead of time and `cache/manifest.json` (sha256 of every file,
        capabilities, PTX ISA, minimum driver, toolchain versions). `gpu_runtime` in the app
        finds `cache/` beside the running PEX, so the device needs no compiler.

            deploy_bundle(
                name="imaging_orin",
                binary=":app",
                kernels=["src/python/imaging/kernels:saxpy"],
                capabilities=["sm_87"],
                toolchain="cuda12",
                driver_version="12.6",
                complete_platforms=["3rdparty/platforms:jetson_orin_cp310"],
                archive="tar.gz",
            )

        `pants package` writes `dist/imaging_orin/` (`app.pex`, `cache/`) and
        `dist/imaging_orin.tar.gz`. `pants experimental-deploy` sends what changed to the
        device (`destination`) and switches its `current` release atomically.
        """
    )


# -----------------------------------------------------------------------------------------------
# `device_fleet`


class DeviceFleetInventoryField(SingleSourceField):
    alias = "inventory"
    required = True
    help = help_text(
        """
        The fleet's Ansible inventory, a file beside this BUILD file: INI or YAML, as
        `ansible-inventory` reads it. Its groups are what `bundles` maps; per-host variables
        say how to reach each device and where its bundle goes: `ansible_host`, `ansible_port`,
        `ansible_user`, `ansible_ssh_private_key_file` (absolute, or `~/...`),
        `ansible_python_interpreter`, and `gpu_bundle_path` (required: the absolute directory
        of the device's releases, `current` and `previous`).
        """
    )


class DeviceFleetBundlesField(DictStringToStringField):
    alias = "bundles"
    required = True
    help = help_text(
        """
        Which `deploy_bundle` each inventory group runs, `{"group": "address"}`, e.g.
        `{"orin": ":imaging_orin", "h200": ":imaging_h200"}`. A host in two groups that name
        different bundles is refused; hosts in no named group are left alone. The groups are
        rolled out in this order.
        """
    )


class DeviceFleetRolloutField(StringSequenceField):
    alias = "rollout"
    default = ("100%",)
    help = help_text(
        """
        The rollout's batches, as Ansible's `serial`: each a device count (`"1"`) or a share of
        the fleet (`"25%"`); the last one repeats until every device is done. `["1", "25%",
        "100%"]`: one canary device, then a quarter, then the rest. A batch starts only when
        the one before it has passed (see `max_fail_percentage`).
        """
    )


class DeviceFleetMaxFailPercentageField(IntField):
    value: int
    alias = "max_fail_percentage"
    default = 0
    help = help_text(
        """
        The share of a batch's devices (0-100) that may fail (unreachable, deploy refused, or
        health check failed and rolled back) before the rollout stops: Ansible's
        `max_fail_percentage`. At 0, one failed device stops it; later batches are not started.
        """
    )


class DeviceFleetForksField(IntField):
    value: int
    alias = "forks"
    default = 5
    valid_numbers = ValidNumbers.positive_only
    help = "How many devices of a batch are deployed at once (Ansible's `--forks`)."


class DeviceFleetHealthCheckField(StringField):
    alias = "health_check"
    help = help_text(
        """
        A shell command run on each device after its switch, in the new release's directory,
        e.g. `"./app --self-test"`. It runs after the runtime's `verify` of the release (every
        file, and the signature against the keys pinned in the app: `PEX_MODULE=gpu_runtime
        ./app verify .`), which always runs. Exit status 0 is healthy; otherwise that device's
        `current` goes back to `previous` and the device fails its batch.
        """
    )


class DeviceFleetHealthTimeoutField(IntField):
    value: int
    alias = "health_timeout"
    default = 60
    valid_numbers = ValidNumbers.positive_only
    help = "Seconds each health-check command may take on a device before it counts as failed."


class DeviceFleetTarget(Target):
    alias = "device_fleet"
    core_fields = (
        *COMMON_TARGET_FIELDS,
        DeviceFleetInventoryField,
        DeviceFleetBundlesField,
        DeviceFleetRolloutField,
        DeviceFleetMaxFailPercentageField,
        DeviceFleetForksField,
        DeviceFleetHealthCheckField,
        DeviceFleetHealthTimeoutField,
    )
    help = help_text(
        """
        Many devices, one deploy: `pants experimental-deploy` of a `device_fleet` builds each
        `deploy_bundle` it names and rolls it out, through Ansible (the resolve of
        `[gpu-fleet-deploy].ansible_resolve`), to every device of the inventory group mapped to
        it, in serial batches. On each device it does what a single-device deploy does (the
        device's lock; only files whose sha256 it lacks sent; staged, verified by hash and by
        its trust policy, prepared; `current` switched with one rename; `previous` kept), then
        a health check; a device that fails it goes back to `previous` on its own.

            device_fleet(
                name="fleet",
                inventory="devices.ini",
                bundles={"orin": ":imaging_orin", "h200": ":imaging_h200"},
                rollout=["1", "25%", "100%"],
                max_fail_percentage=0,
                health_check="./app --self-test",
            )

        A summary, one line per device (its release, files and bytes sent, prepare and
        health-check seconds, what happened), ends the deploy and is written to
        `dist/<name>.fleet-summary.json`. `--gpu-fleet-deploy-check` is a dry run,
        `--gpu-fleet-deploy-limit=PATTERN` picks devices.
        """
    )


# -----------------------------------------------------------------------------------------------
# `gpu_toolchain`


class GpuToolchainNameField(StringField):
    alias = "toolchain"
    help = help_text(
        """
        Which pinned toolchain of `[gpu-toolchains].toolchains` to package. Defaults to
        `[gpu-toolchains].default_toolchain`.
        """
    )


class GpuToolchainOutputPathField(OutputPathField):
    help = help_text(
        """
        The file `pants package` writes the toolchain PEX to, relative to `--distdir` (e.g.
        `dist/`). If undefined, the BUILD file's directory with dots for slashes, then the
        target name and `.pex`: `3rdparty/python:toolchain-cuda13` writes
        `dist/3rdparty.python/toolchain-cuda13.pex`. Setting it risks two targets writing the
        same file.
        """
    )


class GpuToolchainTarget(Target):
    alias = "gpu_toolchain"
    core_fields = (*COMMON_TARGET_FIELDS, GpuToolchainNameField, GpuToolchainOutputPathField)
    help = help_text(
        """
        A pinned compile toolchain as one PEX file, for JIT mode: the same PEX the plugin's
        compiles run (the toolchain's entire lockfile, the compiler the plugin uses, NVIDIA's
        wheels and never the host's CUDA), so a kernel JIT-compiled under `pants run`, `pants
        test` or a notebook is compiled by the same code and libraries as its `gpu_kernel`.
        The PEX is normalised as a bundle's app is (no bytecode an earlier run left under
        PEX_ROOT, modes by rule): the same lockfile gives the same bytes on every machine.

            gpu_toolchain(name="toolchain-cuda13", toolchain="cuda13")

        `pants package path/to:toolchain-cuda13` writes
        `dist/path.to/toolchain-cuda13.pex`; point JIT mode at it with
        `GPU_RUNTIME_TOOLCHAIN=$PWD/dist/path.to/toolchain-cuda13.pex` (see docs/jit-mode.md).
        """
    )
