"""Runtime overhead: ``moeforge.runtime.train`` vs a plain megatron-core script, same model, same steps.

Why: the runtime adds a plan check, a backend gate, a realised-configuration check, a schedule
probe (counting wrappers) and a report on top of megatron-core.  This benchmark runs both on the
same plan in one invocation and prints the ratios of end-to-end wall time and of the steady-state
step time, plus whether the per-micro-batch losses agree (the plain script is only a fair
baseline if it trains the same thing).

    python bench/runtime_overhead.py [PLAN.json] [--steps 12] [--repeats 1]

The plain worker (``--plain-worker``) uses megatron-core directly: TransformerConfig (or
MLATransformerConfig), initialize_model_parallel, GPTModel with the layer spec the plan names
(local or Transformer Engine, MTP block when planned), DDP, get_megatron_optimizer,
get_forward_backward_func.  It builds the same model as the runtime for every catalogue model
shape: the plan's strings are interpreted with the runtime's string -> object tables
(moeforge.runtime.model.DTYPES and activation_from_name: "silu" -> F.silu, "bfloat16" -> torch.bfloat16;
shared so both sides read the plan identically, not re-implemented), norms and RoPE are plan
values passed through to TransformerConfig/GPTModel as they are.  On a machine without a GPU it
needs the same CUDA stand-ins as the runtime (moeforge.runtime.model.cpu_support) and it draws the same
synthetic batches (moeforge.runtime.data.synthetic) so that the losses can be compared; nothing else of the runtime
is used (no plan check, gate, realised-configuration check, schedule probe or report).

    python bench/runtime_overhead.py PLAN --steps 3 --repeats 1 --summary out.json

writes the figures (and the plain worker's rank-0 parameter count and config) as JSON too.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLAN = ROOT / "tests" / "data" / "tiny-plan.example.json"


def plain_worker(plan_path: str, out: str) -> None:
    """A minimal hand-written megatron-core training loop for the plan's model."""
    sys.path.insert(0, str(ROOT))
    import torch
    from moeforge.runtime.model import cpu_support
    from moeforge.runtime.data import synthetic as synthetic_batches  # CUDA stand-ins and identical batches only
    from moeforge.runtime.model.build import DTYPES, activation_from_name  # the plan's string tables only

    cpu_support.install()
    plan = json.loads(Path(plan_path).read_text())
    tc, lay, tr = dict(plan["transformer_config"]), plan["layout"], plan["training"]
    use_te = plan["runtime"].get("transformer_impl", "local") == "transformer_engine"
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("nccl" if on_gpu else "gloo")
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs as specs
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=lay["tp"], pipeline_model_parallel_size=lay["pp"],
        virtual_pipeline_model_parallel_size=lay["vpp"], context_parallel_size=lay["cp"],
        expert_model_parallel_size=lay["ep"], expert_tensor_parallel_size=lay["etp"])
    seed = tr["seed"] + 100 * parallel_state.get_pipeline_model_parallel_rank()
    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)
    config_cls = TransformerConfig
    if tc.get("multi_latent_attention"):
        from megatron.core.transformer.transformer_config import MLATransformerConfig

        config_cls = MLATransformerConfig
    for key in ("params_dtype", "pipeline_dtype", "autocast_dtype"):
        if isinstance(tc.get(key), str):
            tc[key] = DTYPES[tc[key]]
    if isinstance(tc.get("activation_func"), str):
        tc["activation_func"] = activation_from_name(tc["activation_func"])
    # Plan fields this megatron-core release does not have are left out (the runtime refuses
    # the meaningful ones before it builds anything, so both sides build the same config).
    known = {f.name for f in dataclasses.fields(config_cls)}
    tc = {k: v for k, v in tc.items() if k in known}
    tc.setdefault("transformer_impl", "transformer_engine" if use_te else "local")
    cfg = config_cls(**{k: v for k, v in tc.items() if k in known},
                     **({} if on_gpu else {"use_cpu_initialization": True}))
    for key, value in (plan.get("config_attributes") or {}).items():
        setattr(cfg, key, value)  # e.g. yarn_*: read by GPTModel, not dataclass fields
    model_kwargs = {k: v for k, v in plan["model"].items()
                    if k in inspect.signature(GPTModel.__init__).parameters}
    vpp = lay["vpp"]
    chunks = []
    for vp in range(vpp) if vpp else [None]:
        if getattr(cfg, "experimental_attention_variant", None):
            from megatron.core.models.gpt import (
                experimental_attention_variant_module_specs as xspecs)

            spec = xspecs.get_transformer_block_with_experimental_attention_variant_spec(
                cfg, vp_stage=vp)
            last = xspecs.get_transformer_layer_with_experimental_attention_variant_spec(cfg)[-1]
        else:
            spec = specs.get_gpt_decoder_block_spec(cfg, use_transformer_engine=use_te,
                                                    normalization=cfg.normalization, vp_stage=vp)
            last = None
        mtp = None
        if getattr(cfg, "mtp_num_layers", None):
            last = last or specs.get_gpt_decoder_layer_specs(
                cfg, use_transformer_engine=use_te, normalization=cfg.normalization)[-1]
            mtp = specs.get_gpt_mtp_block_spec(cfg, last, use_transformer_engine=use_te,
                                               vp_stage=vp)
        with cpu_support.device_scope():
            m = GPTModel(config=cfg, transformer_layer_spec=spec, vp_stage=vp, mtp_block_spec=mtp,
                         pre_process=parallel_state.is_pipeline_first_stage(False, vp),
                         post_process=parallel_state.is_pipeline_last_stage(False, vp),
                         **model_kwargs)
        chunks.append(m.bfloat16() if cfg.bf16 else m.half() if cfg.fp16 else m)
    if on_gpu:
        chunks = [c.cuda() for c in chunks]
    params = {id(p): p.numel() for c in chunks for p in c.parameters()}
    built = {"parameters_rank0": sum(params.values()),
             "config": {k: _describe(getattr(cfg, k)) for k in sorted(known)
                        if k in plan["transformer_config"]},
             "model": {k: _describe(v) for k, v in model_kwargs.items()},
             "modules": sorted({type(m).__name__ for c in chunks for m in c.modules()})}
    ddp_cfg = DistributedDataParallelConfig(**plan["ddp_config"])
    model = [DistributedDataParallel(cfg, ddp_cfg, c, disable_bucketing=i > 0)
             for i, c in enumerate(chunks)]
    opt_cfg = OptimizerConfig(**plan["optimizer"], bf16=cfg.bf16, fp16=cfg.fp16,
                              params_dtype=cfg.params_dtype)
    with cpu_support.device_scope():
        optimizer = get_megatron_optimizer(opt_cfg, model)
    cfg.finalize_model_grads_func = finalize_model_grads
    cfg.grad_scale_func = optimizer.scale_loss

    def loss_func(mask, out):
        total = torch.sum(out.float().view(-1) * mask.view(-1))
        logged = torch.stack([total.detach(), mask.sum()])
        return total, mask.sum().to(torch.int), {"lm loss": logged}

    def forward_step(it, gpt, return_schedule_plan=False):
        b = next(it)
        if return_schedule_plan:
            return (gpt.build_schedule_plan(b["tokens"], b["position_ids"], None,
                                            labels=b["labels"], loss_mask=b["loss_mask"]),
                    lambda out: loss_func(b["loss_mask"], out))
        return (gpt(b["tokens"], b["position_ids"], None, labels=b["labels"]),
                lambda out: loss_func(b["loss_mask"], out))

    fwd_bwd = get_forward_backward_func()
    device = torch.device("cuda") if on_gpu else torch.device("cpu")
    times, losses = [], []
    for step in range(1, tr["train_iters"] + 1):
        batches = synthetic_batches.step_batches(tr, plan["model"]["vocab_size"], step,
                                                 parallel_state.get_data_parallel_rank(), device)
        its = [iter(batches) for _ in model] if len(model) > 1 else iter(batches)
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        t0 = time.perf_counter()
        with cpu_support.device_scope():
            reduced = fwd_bwd(forward_step_func=forward_step, data_iterator=its,
                          model=model if len(model) > 1 else model[0],
                          num_microbatches=tr["num_microbatches"], seq_length=tr["seq_length"],
                          micro_batch_size=tr["micro_batch_size"], forward_only=False)
            optimizer.step()
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        buf = torch.zeros(tr["num_microbatches"], 2, dtype=torch.float64, device=device)
        if parallel_state.is_pipeline_last_stage(ignore_virtual=True) and reduced:
            for i, item in enumerate(reduced):
                buf[i] = item["lm loss"].to(torch.float64)
        torch.distributed.all_reduce(buf)
        losses.append((buf[:, 0] / buf[:, 1]).tolist())
    if torch.distributed.get_rank() == 0:
        Path(out).write_text(json.dumps({"step_times": times, "losses": losses, **built}))
    torch.distributed.destroy_process_group()


def _describe(value):
    """A config value as JSON (callables by name, dtypes and enums as strings)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    return getattr(value, "__name__", None) or getattr(value, "name", None) or str(value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc: int, args: list[str]) -> float:
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"failed: {' '.join(args)}\n{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan", nargs="?", default=str(DEFAULT_PLAN))
    ap.add_argument("--steps", type=int, default=30, help="train_iters for both runs")
    ap.add_argument("--repeats", type=int, default=2, help="alternate runs; report the minimum")
    ap.add_argument("--plain-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--summary", help="also write the figures as JSON to this file")
    args = ap.parse_args()
    if args.plain_worker:
        plain_worker(args.plan, args.out)
        return
    plan = json.loads(Path(args.plan).read_text())
    plan["training"].update(train_iters=args.steps, report_window=[min(3, args.steps), args.steps])
    nproc = plan["layout"]["world_size"]
    first, last = plan["training"]["report_window"]
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps(plan))
        walls = {"runtime": [], "plain": []}
        steady = {"runtime": [], "plain": []}
        for _ in range(args.repeats):
            walls["runtime"].append(_torchrun(nproc, ["-m", "moeforge.runtime.train", str(plan_path),
                                                      "--out", tmp]))
            rep = json.loads((Path(tmp) / "report.json").read_text())
            steady["runtime"].append(rep["steady_state"]["median_s"])
            walls["plain"].append(_torchrun(nproc, [__file__, str(plan_path), "--plain-worker",
                                                    "--out", str(Path(tmp) / "plain.json")]))
            plain = json.loads((Path(tmp) / "plain.json").read_text())
            steady["plain"].append(statistics.median(plain["step_times"][first - 1:last]))
        same = [s["micro_batch_losses"] for s in rep["steps"]] == plain["losses"]
    w_rt, w_pl = min(walls["runtime"]), min(walls["plain"])
    s_rt, s_pl = min(steady["runtime"]), min(steady["plain"])
    print(f"plan: {args.plan} ({nproc} ranks, {args.steps} steps, steady window {first}-{last}, "
          f"schedule {rep['schedule_taken']}, device {rep['device']})")
    print(f"end-to-end wall:    runtime {w_rt:7.2f} s   plain {w_pl:7.2f} s   "
          f"ratio {w_rt / w_pl:.3f}")
    print(f"steady step median: runtime {s_rt * 1e3:7.1f} ms  plain {s_pl * 1e3:7.1f} ms  "
          f"ratio {s_rt / s_pl:.3f}")
    print(f"per-micro-batch losses identical: {'yes' if same else 'NO'}")
    if args.summary:
        Path(args.summary).write_text(json.dumps({
            "plan": args.plan, "ranks": nproc, "steps": args.steps,
            "wall_s": {"runtime": w_rt, "plain": w_pl},
            "steady_median_s": {"runtime": s_rt, "plain": s_pl},
            "losses_identical": same,
            "losses": {"runtime": [s["micro_batch_losses"] for s in rep["steps"]],
                       "plain": plain["losses"]},
            "plain_model": {k: plain[k] for k in ("parameters_rank0", "config", "model",
                                                  "modules")},
        }, indent=1))


if __name__ == "__main__":
    main()
