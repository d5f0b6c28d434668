"""`pants experimental-deploy` on a `device_fleet`: bundles rolled out to an Ansible inventory.

Runs in the fleet deploy process, in a PEX that holds ansible-core (the repo's `ansible`
resolve), this script, `deploy_tool.py` and `remote_release.py`. Ansible is the engine: its
inventory (INI or YAML, read by `ansible-inventory`), serial batches (`rollout`), `forks`,
`max_fail_percentage`, `--limit`, `--check`, and its ssh connection plugin (ControlPersist) for
the device-side checks. Per device, one play of the generated playbook does:

1. `ping` over Ansible's ssh connection: a device that cannot be reached fails there, sent
   nothing, and is recorded `unreachable`;
2. the single-device deploy (`deploy_tool.py`, run on this machine for that device, the task
   delegated to localhost): the device's deploy lock, only files whose sha256 the device lacks
   sent, the release staged, checked by hash and by the device's trust policy, prepared, then
   `current` switched with one rename, `previous` kept. With `--check`, it only says what it
   would send;
3. after a switch, the health check over Ansible's connection, in the new release's directory:
   the runtime's `verify` of the release through its own launcher (`PEX_MODULE=gpu_runtime
   ./app verify .`: every file and the signature against the keys pinned in the app, no GPU
   needed), then the fleet's own command, each within `--health-timeout` seconds. A device
   whose release is unchanged is checked too (a release that failed before stays failed);
4. if the health check fails: `current` is pointed back at `previous` on that device
   (`deploy_tool.py --rollback`, under the same lock), and the device fails its batch.

A batch with more failed devices than `max_fail_percentage` stops the rollout: later batches are
not started (their devices are `skipped`, on the release they had). At the end, one summary line
per device (the release it runs now, files and bytes sent, prepare and health-check seconds,
what happened), also written as JSON to `--summary-json`. Exit status 0 only if every device
targeted ended switched or unchanged (or, with `--check`, would switch).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY_TOOL = os.path.join(HERE, "deploy_tool.py")


class FleetError(Exception):
    pass


def ansible(module: str, args: List[str], env: Dict[str, str], **kwargs) -> Any:
    """`python -m ansible.cli.<module> ...` with this interpreter (the PEX's, which has ansible)."""
    return subprocess.run([sys.executable, "-m", f"ansible.cli.{module}", *args], env=env, **kwargs)


def inventory_listing(inventory: str, limit: Optional[str], env: Dict[str, str]) -> Dict:
    """`ansible-inventory --list` of the inventory, `--limit` applied."""
    argv = ["-i", inventory, "--list", *(["--limit", limit] if limit else [])]
    # A file Ansible cannot parse (or that is not there) is an error, not an empty fleet.
    env = dict(env, ANSIBLE_INVENTORY_UNPARSED_FAILED="true")
    proc = ansible("inventory", argv, env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FleetError(f"ansible-inventory cannot read {inventory}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def inventory_groups(inventory: str, env: Dict[str, str]) -> set:
    """Every group the inventory defines, empty ones included."""
    listing = inventory_listing(inventory, None, env)
    groups = set()
    pending = ["all"]
    while pending:
        group = pending.pop()
        groups.add(group)
        pending += [c for c in listing.get(group, {}).get("children", []) if c not in groups]
    return groups


def inventory_hosts(
    inventory: str, limit: Optional[str], env: Dict[str, str]
) -> Dict[str, List[str]]:
    """{host: [its groups, nested ones included]} of the inventory, `--limit` applied."""
    listing = inventory_listing(inventory, limit, env)
    groups: Dict[str, List[str]] = {}

    def walk(group: str, parents: List[str]) -> None:
        node = listing.get(group, {})
        for host in node.get("hosts", []):
            groups.setdefault(host, [])
            groups[host] += [g for g in [*parents, group] if g not in groups[host]]
        for child in node.get("children", []):
            walk(child, [*parents, group])

    walk("all", [])
    return groups


def assign_bundles(hosts: Dict[str, List[str]], bundles: Dict[str, str]) -> Dict[str, str]:
    """{host: bundle directory}: each host of a group named in `bundles` gets that group's
    bundle; a host in two such groups is refused (which bundle it should run is ambiguous)."""
    assigned = {}
    for host, groups in sorted(hosts.items()):
        mapped = [g for g in groups if g in bundles]
        if len({bundles[g] for g in mapped}) > 1:
            raise FleetError(
                f"host {host} is in groups {', '.join(mapped)}, which name different bundles: "
                "put it in one of them"
            )
        if mapped:
            assigned[host] = bundles[mapped[0]]
    return assigned


def playbook(args: argparse.Namespace, groups: List[str]) -> List[Dict[str, Any]]:
    """The play: one pass over the mapped groups (in the order `bundles` names them, each
    group's hosts in inventory order), in the rollout's serial batches."""
    destination = (
        "{{ ((ansible_user ~ '@') if ansible_user is defined else '')"
        " ~ (ansible_host | default(inventory_hostname)) ~ ':' ~ gpu_bundle_path }}"
    )
    tool = [
        "{{ ansible_playbook_python }}",
        DEPLOY_TOOL,
        *("--bundle", "{{ gpu_fleet_bundles[inventory_hostname] }}"),
        *("--destination", destination),
        *("--port", "{{ ansible_port | default(22) }}"),
        *("--identity", "{{ ansible_ssh_private_key_file | default(gpu_fleet_identity) }}"),
        *("--remote-python", "{{ gpu_remote_python | default(gpu_fleet_remote_python) }}"),
        *args.deploy_arg,
    ]
    report = "{{ gpu_fleet_dir }}/{{ inventory_hostname }}"
    switched = "gpu_fleet_report.outcome == 'switched'"
    # An unchanged device is checked too: its release may be one that failed before (a first
    # deploy has no `previous` to go back to).
    deployed = "gpu_fleet_report.outcome in ('switched', 'unchanged')"
    in_release = {"chdir": "{{ gpu_bundle_path }}/current"}
    # The release's launcher runs the app on the interpreter its venv was prepared with.
    app_env = {"GPU_BUNDLE_PYTHON": "{{ gpu_remote_python | default(gpu_fleet_remote_python) }}"}
    health: List[Dict[str, Any]] = [
        {
            "name": "gpu_fleet verify",
            "ansible.builtin.command": {"argv": ["./app", "verify", "."], **in_release},
            "when": deployed,
            "timeout": args.health_timeout,
            "environment": {**app_env, "PEX_MODULE": "gpu_runtime"},
        }
    ]
    if args.health_check:
        health.append(
            {
                "name": "gpu_fleet health",
                "ansible.builtin.shell": {"cmd": args.health_check, **in_release},
                "when": deployed,
                "timeout": args.health_timeout,
                "environment": app_env,
            }
        )
    rescue = [
        {
            "name": "gpu_fleet rollback",
            "ansible.builtin.command": {
                "argv": [
                    *tool,
                    "--rollback",
                    "{{ gpu_fleet_report.release }}",
                    "--report",
                    f"{report}.rollback.json",
                ]
            },
            "delegate_to": "localhost",
            "check_mode": False,
            "when": f"gpu_fleet_report is defined and {switched}",
        },
        {
            "name": "gpu_fleet failed",
            "ansible.builtin.fail": {"msg": "{{ ansible_failed_result.msg | default('failed') }}"},
        },
    ]
    deploy = {
        "name": "gpu_fleet deploy",
        "ansible.builtin.command": {
            "argv": [
                *tool,
                "--report",
                f"{report}.json",
                "{{ '--check' if ansible_check_mode else '--no-check' }}",
            ]
        },
        "delegate_to": "localhost",
        "check_mode": False,
        "changed_when": False,
    }
    read_report = {
        "name": "read the deploy report",
        "ansible.builtin.set_fact": {
            "gpu_fleet_report": "{{ lookup('file', gpu_fleet_dir ~ '/' ~ inventory_hostname"
            " ~ '.json') | from_json }}"
        },
    }
    return [
        {
            "name": "Roll out GPU bundles",
            "hosts": ":".join(groups),
            "gather_facts": False,
            "serial": args.rollout,
            "max_fail_percentage": args.max_fail_percentage,
            "tasks": [
                {"name": "gpu_fleet reach", "ansible.builtin.ping": {}},
                {"block": [deploy, read_report, *health], "rescue": rescue},
            ],
        }
    ]


def _load(path: str) -> Dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def device_summary(host: str, record: Dict[str, Dict], work: str) -> Dict[str, Any]:
    """What happened on `host`, from the callback's record and the deploy tool's reports."""
    report = _load(os.path.join(work, f"{host}.json"))
    rollback = _load(os.path.join(work, f"{host}.rollback.json"))
    tasks = record.get(host, {})
    health = [
        tasks[t]["seconds"]
        for t in ("verify", "health")
        if (tasks.get(t) or {}).get("seconds") is not None
    ]
    failed = next(
        (t for t in ("verify", "health") if tasks.get(t, {}).get("status") == "failed"), None
    )
    line = {
        "host": host,
        # A failed deploy names the release the device kept (`current`'s target, releases/<id>).
        "release": report.get("release") or os.path.basename(report.get("before") or "") or None,
        "files_sent": report.get("files_sent", 0),
        "bytes_sent": report.get("bytes_sent", 0),
        "prepare_s": report.get("prepare_s", 0.0),
        "health_s": round(sum(health), 3) if health else None,
    }
    if not tasks:
        return dict(line, outcome="skipped", release=None, detail="its batch was not started")
    if tasks.get("reach", {}).get("status") == "unreachable":
        return dict(line, outcome="unreachable", release=None, detail=tasks["reach"]["msg"])
    if rollback.get("outcome") == "rolled back":
        detail = f"{failed or 'health check'} failed: {tasks.get(failed or '', {}).get('msg', '')}"
        return dict(line, outcome="rolled back", release=rollback["release"], detail=detail)
    if failed or report.get("outcome") in (None, "failed"):
        why = report.get("error") or tasks.get(failed or "deploy", {}).get("msg") or "failed"
        if rollback.get("error"):
            why += f"; rollback failed: {rollback['error']}"
        return dict(line, outcome="failed", detail=why)
    return dict(line, outcome=report["outcome"], detail="")


def print_summary(lines: List[Dict[str, Any]]) -> None:
    print("\nFleet deploy summary:", flush=True)
    head = ("device", "outcome", "release", "files", "bytes", "prepare s", "health s")
    print("  {:<16} {:<13} {:<31} {:>5} {:>10} {:>9} {:>8}".format(*head))
    for d in lines:
        health = "-" if d["health_s"] is None else f"{d['health_s']:.2f}"
        print(
            f"  {d['host']:<16} {d['outcome']:<13} {d['release'] or '-':<31} {d['files_sent']:>5} "
            f"{d['bytes_sent']:>10} {d['prepare_s']:>9.2f} {health:>8}"
            + (f"  {d['detail']}" if d["detail"] else ""),
            flush=True,
        )


def ansible_env(args: argparse.Namespace, work: str) -> Dict[str, str]:
    ssh_args = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "-o", "BatchMode=yes"]
    ssh_args += [a for o in args.ssh_option for a in ("-o", o)]
    return dict(
        os.environ,
        LC_ALL="C.UTF-8",
        ANSIBLE_HOME=os.path.join(work, "ansible"),
        ANSIBLE_LOCAL_TEMP=os.path.join(work, "ansible", "tmp"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(work, "cp"),
        ANSIBLE_SSH_ARGS=" ".join(map(shlex.quote, ssh_args)),
        ANSIBLE_SSH_EXECUTABLE=args.ssh,
        ANSIBLE_PIPELINING="true",
        ANSIBLE_PYTHON_INTERPRETER="auto_silent",
        ANSIBLE_RETRY_FILES_ENABLED="false",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "ansible_callback"),
        ANSIBLE_CALLBACKS_ENABLED="fleet_record",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_FAILED="true",
        GPU_FLEET_RECORD=os.path.join(work, "record.json"),
    )


def deploy_fleet(args: argparse.Namespace, work: str) -> int:
    env = ansible_env(args, work)
    bundles = {g: os.path.abspath(b) for g, b in (b.split("=", 1) for b in args.bundle)}
    missing = sorted(set(bundles) - inventory_groups(args.inventory, env))
    if missing:
        raise FleetError(
            f"{args.inventory} has no group {', '.join(missing)}, which `bundles` names: add the "
            "group to the inventory or fix its name in `bundles`"
        )
    hosts = assign_bundles(inventory_hosts(args.inventory, args.limit, env), bundles)
    if not hosts:
        raise FleetError(
            f"no host of {args.inventory} is in a group of `bundles` ({', '.join(sorted(bundles))})"
            + (f" and matches --limit {args.limit}" if args.limit else "")
        )
    variables = {
        "gpu_fleet_bundles": hosts,
        "gpu_fleet_dir": work,
        "gpu_fleet_identity": args.identity or "",
        "gpu_fleet_remote_python": args.remote_python,
    }
    with open(os.path.join(work, "vars.json"), "w") as f:
        json.dump(variables, f)
    with open(os.path.join(work, "playbook.yml"), "w") as f:
        json.dump(playbook(args, list(bundles)), f, indent=1)
    argv = ["-i", args.inventory, "-e", f"@{work}/vars.json", "--forks", str(args.forks)]
    argv += [*(["--check"] if args.check else []), *(["--limit", args.limit] if args.limit else [])]
    argv += [*(["--private-key", args.identity] if args.identity else []), f"{work}/playbook.yml"]
    rc = ansible("playbook", argv, env).returncode
    record = _load(env["GPU_FLEET_RECORD"])
    lines = [device_summary(host, record, work) for host in sorted(hosts)]
    print_summary(lines)
    if args.summary_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.summary_json)), exist_ok=True)
        with open(args.summary_json + ".tmp", "w") as f:
            json.dump({"check": args.check, "devices": lines}, f, indent=1, sort_keys=True)
        os.replace(args.summary_json + ".tmp", args.summary_json)
    good = {"switched", "unchanged", "would switch"}
    return 0 if rc == 0 and all(d["outcome"] in good for d in lines) else 1


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="fleet_tool", description=__doc__.split("\n")[0])
    p.add_argument("--inventory", required=True, help="an Ansible inventory file (INI or YAML)")
    p.add_argument("--bundle", action="append", default=[], help="GROUP=BUNDLE_DIR")
    p.add_argument("--rollout", action="append", default=[], help="a batch: a count or N%%")
    p.add_argument("--max-fail-percentage", type=int, default=0)
    p.add_argument("--forks", type=int, default=5)
    p.add_argument("--health-check", default="", help="a shell command run in the release")
    p.add_argument("--health-timeout", type=int, default=60)
    p.add_argument("--check", action="store_true", help="a dry run: nothing sent or switched")
    p.add_argument("--limit", default=None, help="an Ansible host pattern")
    p.add_argument("--identity", default=None, help="the ssh key where the inventory names none")
    p.add_argument(
        "--remote-python",
        default="python3",
        help="the device's interpreter for the release steps, where the inventory's host has no "
        "`gpu_remote_python`",
    )
    p.add_argument("--ssh", default="ssh")
    p.add_argument("--ssh-option", action="append", default=[])
    p.add_argument("--deploy-arg", action="append", default=[], help="passed to deploy_tool.py")
    p.add_argument("--summary-json", default=None)
    args = p.parse_args(argv)
    args.rollout = args.rollout or ["100%"]
    # Short: Ansible's ssh ControlPath sockets live in it, and a socket path has ~100 bytes.
    work = tempfile.mkdtemp(prefix="gpu-fleet-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        return deploy_fleet(args, work)
    except FleetError as e:
        print(f"Fleet deploy of {args.inventory} failed: {e}", file=sys.stderr)
        return 1
    finally:
        close_connections(args.ssh, os.path.join(work, "cp"))
        shutil.rmtree(work, ignore_errors=True)


def close_connections(ssh: str, control_dir: str) -> None:
    """Ends Ansible's persistent ssh masters: left to time out, they would hold this process's
    stderr open (a caller reading it to its end would wait ControlPersist's 60 s)."""
    for name in sorted(os.listdir(control_dir)) if os.path.isdir(control_dir) else []:
        path = os.path.join(control_dir, name)
        subprocess.run(
            [ssh, "-o", f"ControlPath={path}", "-O", "exit", "fleet-device"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


if __name__ == "__main__":
    sys.exit(main())
