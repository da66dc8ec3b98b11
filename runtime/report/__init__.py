"""What a run leaves behind: report.json (``build``: one builder for both entry points; ``measure``:
peak memory, versions, the atomic write), the schedule megatron-core really ran (``schedule_probe``)
and torch.profiler traces of chosen steps (``profile``)."""
