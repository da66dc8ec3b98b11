"""Runtime overhead: ``runtime.train`` vs a plain megatron-core script, same model, same steps.

Why: the runtime adds a plan check, a backend gate, a realised-configuration check, a schedule
probe (counting wrappers) and a report on top of megatron-core.  This benchmark runs both on the
same plan in one invocation and prints the ratios of end-to-end wall time and of the steady-state
step time, plus whether the per-micro-batch losses agree (the plain script is only a fair
baseline if it trains the same thing).

    python bench/runtime_overhead.py [PLAN.json] [--steps 12] [--repeats 1]

The plain worker (``--plain-worker``) uses megatron-core directly: TransformerConfig,
initialize_model_parallel, GPTModel with the local spec, DDP, get_megatron_optimizer,
get_forward_backward_func.  On a machine without a GPU it needs the same CUDA stand-ins as the
runtime (runtime.cpu_support) and it draws the same synthetic batches (runtime.data) so that
the losses can be compared; nothing else of the runtime is used.
"""

from __future__ import annotations

import argparse
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
    from runtime import cpu_support, data  # CUDA stand-ins and identical batches only

    cpu_support.install()
    plan = json.loads(Path(plan_path).read_text())
    tc, lay, tr = dict(plan["transformer_config"]), plan["layout"], plan["training"]
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("nccl" if on_gpu else "gloo")
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
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
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    for key in ("params_dtype", "pipeline_dtype"):
        tc[key] = dtypes[tc[key]] if tc.get(key) else tc.get(key)
    cfg = TransformerConfig(**tc, use_cpu_initialization=not on_gpu, transformer_impl="local")
    vpp = lay["vpp"]
    chunks = []
    for vp in range(vpp) if vpp else [None]:
        spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False,
                                          normalization=cfg.normalization, vp_stage=vp)
        m = GPTModel(config=cfg, transformer_layer_spec=spec, vp_stage=vp,
                     pre_process=parallel_state.is_pipeline_first_stage(False, vp),
                     post_process=parallel_state.is_pipeline_last_stage(False, vp),
                     **plan["model"])
        chunks.append(m.bfloat16() if cfg.bf16 else m)
    if on_gpu:
        chunks = [c.cuda() for c in chunks]
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
        batches = data.step_batches(tr, plan["model"]["vocab_size"], step,
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
        Path(out).write_text(json.dumps({"step_times": times, "losses": losses}))
    torch.distributed.destroy_process_group()


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
            walls["runtime"].append(_torchrun(nproc, ["-m", "runtime.train", str(plan_path),
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


if __name__ == "__main__":
    main()
