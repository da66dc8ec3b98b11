"""One local run of a sweep point, tied to the life of the `sweep launch` that started it.

Why: each run lives in a session of its own (a Ctrl-C in the terminal must not reach it half-way), so when
the launcher dies by SIGKILL, which no handler sees, nothing would stop the training and `--resume` would
find a run still going. The launcher starts this script as the session leader with the read end of a pipe
whose write end only the launcher holds; when the launcher ends, however it ends, the kernel closes that
end, this script reads end-of-file, records the run as cancelled in its status.json and stops the run's
whole process group (SIGTERM, then SIGKILL after GRACE_S). Otherwise it exits with the run's own status
(128 + N when signal N ended it), which the launcher records.

Run as a file (`python -I watchdog.py FD STATUS_JSON CMD...`): the standard library only, so it starts fast
and imports nothing of moeforge.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 20


def _mark_lost(status_path: str) -> None:
    """status.json: the run ended because its launcher died (written atomically, as the launcher writes it)."""
    try:
        with open(status_path, encoding="utf-8") as fh:
            record = json.load(fh)
        if not isinstance(record, dict) or record.get("state") != "running":
            return
        record.update(state="ended", ended=time.time(), cancelled=True, signal="SIGTERM", exit_code=128 + 15,
                      lost="the sweep launcher ended while the run was going: the run was stopped")
        tmp = f"{status_path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, status_path)
    except (OSError, ValueError):
        pass  # the record stays `running`: resume finds its pid dead and says so


def main(argv: list[str]) -> int:
    """Run the command, ending its process group when the launcher's pipe closes; exit with the run's status."""
    fd, status_path, cmd = int(argv[0]), argv[1], argv[2:]
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # the group's signal reaches the run itself; wait for it to end
    proc = subprocess.Popen(cmd)

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        if proc.poll() is not None:
            return
        _mark_lost(status_path)
        os.killpg(os.getpgrp(), signal.SIGTERM)
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)  # stragglers, and this process with them

    threading.Thread(target=watch, daemon=True).start()
    code = proc.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
