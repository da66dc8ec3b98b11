"""Progress while a sweep runs: points done, running and failed, as a tqdm bar on a terminal; nothing at
all when the output is not a terminal (CI, a pipe), where the summary at the end says it."""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, what: str, stream=None):
        self.stream = stream or sys.stderr
        self.bar = None
        if total and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm  # lazy: only a terminal shows a progress bar

            self.bar = tqdm(total=total, desc=what, unit="point", file=self.stream, leave=True,
                            bar_format="{desc}: {n}/{total} {bar} {elapsed} {postfix}")

    def update(self, done: int, running: int, failed: int) -> None:
        if self.bar is None:
            return
        self.bar.set_postfix_str(f"done {done}, running {running}, failed {failed}", refresh=False)
        self.bar.n = done + failed
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
