"""An Ansible callback plugin: what happened on each device of a fleet deploy, as JSON.

Enabled by `fleet_tool.py` (ANSIBLE_CALLBACKS_ENABLED=fleet_record) beside Ansible's own output.
For every host it records the outcome of each task of the fleet playbook whose name starts with
`gpu_fleet ` (ok, failed, unreachable, skipped, with the message and the command's duration),
and at the end of the run writes them to $GPU_FLEET_RECORD, which fleet_tool.py reads for its
summary. Why a callback: it is the one place Ansible reports unreachable hosts and the time each
command took; a task of the playbook never runs on a host it cannot reach.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from ansible.plugins.callback import CallbackBase  # pants: no-infer-dep (the fleet PEX has it)

PREFIX = "gpu_fleet "


def seconds(delta: object) -> float | None:
    """The command module's `delta` ("0:00:01.234567") in seconds."""
    if not isinstance(delta, str):
        return None
    try:
        t = datetime.strptime(delta, "%H:%M:%S.%f")
    except ValueError:
        return None
    return round(t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6, 3)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fleet_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.hosts: dict[str, dict[str, dict]] = {}

    def _record(self, result, status: str) -> None:
        name = result._task.get_name()
        if not name.startswith(PREFIX):
            return
        res = result._result
        msg = res.get("msg") or res.get("stderr") or ""
        entry = {"status": status, "msg": str(msg).strip()[-500:], "rc": res.get("rc")}
        entry["seconds"] = seconds(res.get("delta"))
        self.hosts.setdefault(result._host.get_name(), {})[name[len(PREFIX) :]] = entry

    def v2_runner_on_ok(self, result, **kwargs) -> None:
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._record(result, "failed")

    def v2_runner_on_unreachable(self, result) -> None:
        self._record(result, "unreachable")

    def v2_runner_on_skipped(self, result) -> None:
        self._record(result, "skipped")

    def v2_playbook_on_stats(self, stats) -> None:
        path = os.environ.get("GPU_FLEET_RECORD")
        if path:
            with open(path, "w") as f:
                json.dump(self.hosts, f, sort_keys=True)
