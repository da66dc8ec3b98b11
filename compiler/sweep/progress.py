"""Progress while a sweep runs: points done, running and failed, as a tqdm bar on a terminal; one line per
finished run when the output is not a terminal (a CI log, a pipe), so a long sweep is never silent there."""
from __future__ import annotations

import sys

from moeforge.compiler.diagnostics import printable


class Progress:
    def __init__(self, total: int, what: str, stream=None):
        self.stream = stream or sys.stderr
        self.total = total
        self.bar = None
        if total and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm  # lazy: only a terminal shows a progress bar

            self.bar = tqdm(total=total, desc=what, unit="point", file=self.stream, leave=True,
                            bar_format="{desc}: {n}/{total} {bar} {elapsed} {postfix}")

    def update(self, done: int, running: int, failed: int) -> None:
        """Redraw the bar with the counts; a no-op off a terminal, where `finished` prints a line per run instead."""
        if self.bar is None:
            return
        self.bar.set_postfix_str(f"done {done}, running {running}, failed {failed}", refresh=False)
        self.bar.n = done + failed
        self.bar.refresh()

    def finished(self, what: str, done: int, failed: int) -> None:
        """One run ended: a line, where there is no bar to show it."""
        if self.bar is None and self.total:
            print(printable(f"sweep: {what} ({done + failed}/{self.total} ended, {failed} not ok)"), file=self.stream,
                  flush=True)

    def close(self) -> None:
        """Close the bar, if one was drawn, so the terminal's next line starts clean."""
        if self.bar is not None:
            self.bar.close()
