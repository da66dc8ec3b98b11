"""Record which forward-backward schedule megatron-core really ran.

Why: EP overlap only exists inside megatron-core's combined-1F1B schedule, which
``get_forward_backward_func()`` enters only when ``config.overlap_moe_expert_parallel_comm``
holds at call time (and, with PP > 1, only on the interleaved path).  A plan that asks for
overlap but runs the plain 1F1B loop yields correct losses and wrong performance numbers, so
the runtime counts calls to the combined-1F1B entry points and to GPTModel.build_schedule_plan
instead of trusting the configuration.
"""

from __future__ import annotations

import functools

FUNCTION_SCHEDULES = {
    "forward_backward_no_pipelining": "no_pipelining",
    "forward_backward_pipelining_without_interleaving": "1f1b",
    "forward_backward_pipelining_with_interleaving": "interleaved_1f1b",
}
COMBINED_ENTRY_POINTS = (
    "combined_1f1b_schedule_for_no_pipelining",
    "combined_1f1b_schedule_for_interleaved_pipelining",
)


class ScheduleProbe:
    """Counting wrappers around the combined-1F1B entry points and build_schedule_plan."""

    def __init__(self):
        self.combined_calls: dict[str, int] = {name: 0 for name in COMBINED_ENTRY_POINTS}
        self.build_schedule_plan_calls = 0
        self.function_name: str | None = None
        self.wrapped: list[str] = []
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        from megatron.core.models.gpt import gpt_model
        from megatron.core.pipeline_parallel import schedules

        for name in COMBINED_ENTRY_POINTS:
            original = getattr(schedules, name, None)
            if original is not None:  # schedules imported the name: wrap it where it is looked up
                setattr(schedules, name, self._counting(name, original))
                self.wrapped.append(name)
        original_build = gpt_model.GPTModel.build_schedule_plan
        probe = self

        @functools.wraps(original_build)
        def build_schedule_plan(model_self, *args, **kwargs):
            probe.build_schedule_plan_calls += 1
            return original_build(model_self, *args, **kwargs)

        gpt_model.GPTModel.build_schedule_plan = build_schedule_plan
        self._installed = True

    def _counting(self, name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            self.combined_calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    def note_function(self, fn) -> None:
        self.function_name = getattr(fn, "__name__", repr(fn))

    @property
    def overlap_schedule_ran(self) -> bool:
        """Only the combined-1F1B path asks forward_step for a schedule plan; where a future
        megatron-core renames its entry points (nothing wrapped) that call alone is the proof."""
        entered = sum(self.combined_calls.values()) > 0 or not self.wrapped
        return entered and self.build_schedule_plan_calls > 0

    def schedule_taken(self) -> str:
        if self.overlap_schedule_ran:
            return "combined_1f1b"
        return FUNCTION_SCHEDULES.get(self.function_name, self.function_name or "unknown")

    def summary(self) -> dict:
        return {
            "schedule_taken": self.schedule_taken(),
            "overlap_schedule_ran": self.overlap_schedule_ran,
            "forward_backward_function": self.function_name,
            "combined_1f1b_calls": {k: v for k, v in self.combined_calls.items()
                                    if k in self.wrapped},
            "build_schedule_plan_calls": self.build_schedule_plan_calls,
        }
