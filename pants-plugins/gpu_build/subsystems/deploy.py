"""`[gpu-bundle-deploy]`: how `pants experimental-deploy` reaches a device (target fields win);
`[gpu-fleet-deploy]`: what a `device_fleet` deploy runs with, and its dry run and device pick."""

from __future__ import annotations

from pants.core.util_rules.search_paths import ExecutableSearchPathsOptionMixin
from pants.option.option_types import BoolOption, IntOption, StrListOption, StrOption
from pants.option.subsystem import Subsystem
from pants.util.strutil import softwrap


class GpuBundleDeploy(Subsystem):
    options_scope = "gpu-bundle-deploy"
    help = softwrap(
        """
        `pants experimental-deploy` of a `deploy_bundle`: over ssh and sftp, send the files whose
        sha256 the device's current release lacks into a new release directory, verify it there,
        then switch `<path>/current` to it atomically (the one before stays as `previous`). The
        device needs an OpenSSH server with sftp, and `python3`.
        """
    )

    destination = StrOption(
        default=None,
        help="`user@host:/absolute/path` for bundles without a `destination` field.",
    )
    port = IntOption(default=22, help="The ssh port for bundles without an `ssh_port` field.")
    identity_file = StrOption(
        default=None,
        help="The ssh private key for bundles without an `identity_file` field (`ssh -i`).",
    )
    ssh_options = StrListOption(
        default=[],
        help=softwrap(
            """
            `ssh -o` options for every deploy, e.g.
            `["UserKnownHostsFile=~/.ssh/devices_known_hosts", "ConnectTimeout=10"]`. Deploys
            run with `BatchMode=yes` (no prompts).
            """
        ),
    )
    remote_python = StrOption(
        default="python3", help="The interpreter on the device that runs the release steps."
    )
    limit_kbps = IntOption(default=0, help="Cap sftp's bandwidth in Kbit/s (`sftp -l`); 0: none.")
    env_vars = StrListOption(
        default=["SSH_AUTH_SOCK"],
        help=softwrap(
            """
            Environment variables the deploy passes to ssh and sftp, as `NAME` (from Pants'
            environment) or `NAME=value`: the ssh agent's socket by default.
            """
        ),
        advanced=True,
    )

    class EnvironmentAware(ExecutableSearchPathsOptionMixin, Subsystem.EnvironmentAware):
        executable_search_paths_help = softwrap(
            """
            The directories searched for OpenSSH's `ssh` and `sftp`, in order.
            """
        )


class GpuFleetDeploy(Subsystem):
    options_scope = "gpu-fleet-deploy"
    help = softwrap(
        """
        `pants experimental-deploy` of a `device_fleet`: Ansible rolls each group's bundle out
        in the target's batches. How ssh reaches the devices (options, key, `ssh`/`sftp`) is
        `[gpu-bundle-deploy]`'s; the inventory's host variables win.
        """
    )

    ansible_resolve = StrOption(
        default="ansible",
        help=softwrap(
            """
            The resolve (`[python.resolves]`) whose lockfile holds `ansible-core` (2.19 or
            newer): the fleet deploy runs Ansible from a PEX of its entire lockfile, on an
            interpreter of that resolve's interpreter constraints.
            """
        ),
    )
    check = BoolOption(
        default=False,
        help=softwrap(
            """
            A dry run (Ansible's `--check`): each reachable device says what it would be sent
            (files and bytes, decided by sha256 on the device) and nothing is sent or switched.
            `pants experimental-deploy --gpu-fleet-deploy-check path/to:fleet`.
            """
        ),
    )
    limit = StrOption(
        default=None,
        help=softwrap(
            """
            Deploy only to the devices matching this Ansible host pattern (`--limit`), e.g.
            `orin-1`, `orin`, `h200:!h200-3`.
            """
        ),
    )
