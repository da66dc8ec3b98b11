"""Training I/O: entry point, data, tokenizer, checkpoints, LR schedule, evaluation.

What Megatron-LM's pretrain() (run by `python -m runtime.megatron`), Megatron-LM's validate_args,
megatron-core's OptimizerParamScheduler and Megatron-Bridge's ConfigContainer enforce, or what would
fail (or silently do nothing) once the job runs: a checkpoint interval without a directory, a tokenizer
whose ids do not fit the model's embedding, data the chosen entry point cannot read. Most of Megatron's
checks here are bare asserts (no message to quote), so the rules are moeforge's words with Megatron's
file as the source. Lists and floats (blend weights, min_lr vs lr) are read through facts computed from
the recipe (compiler.solver.inputs.derived_facts), so that every rule stays solver-friendly.
"""
from compiler.knobs.table import BYTE_VOCAB
from compiler.rules import Rule
from compiler.rules.expr import F, AtLeast, IsSet, Not, Or

ARGS = "Megatron-LM megatron/training/arguments.py validate_args (0.19)"
PRETRAIN = "Megatron-LM megatron/training/training.py pretrain (0.19; shipped in the megatron-core wheel from 0.17)"
LR_SCHEDULER = "megatron-core optimizer_param_scheduler.py OptimizerParamScheduler.__init__ (0.16-0.19)"
BRIDGE_CKPT = "Megatron-Bridge training/config.py CheckpointConfig.finalize / ConfigContainer.validate (0.6.2)"
TOKENIZER = "megatron-core tokenizers/utils/build_tokenizer.py build_tokenizer (0.19)"
DATASETS = "megatron-core datasets/blended_megatron_dataset_config.py, datasets/utils.py get_blend_from_list (0.19)"
RUNTIME = "moeforge runtime: runtime.train (entrypoint moeforge) / runtime.megatron (entrypoint megatron-lm)"

MEGATRON_LM = F("entrypoint") == "megatron-lm"
HARNESS = F("entrypoint") == "moeforge"
KIND = F("data_kind")
SAVE, INTERVAL = IsSet(F("save")), IsSet(F("save_interval"))
ASYNC = F("async_save") == True  # noqa: E712
DECAY_ITERS = F("lr_decay_iters")

TRAINING_ONLY = True  # data, checkpoints, schedule and evaluation of a training run

RULES = (
    # --- entry point and data
    Rule("RUNTIME_MEGATRON_LM_NEEDS_MCORE_0_17", "error", MEGATRON_LM, AtLeast("megatron_core", "0.17.0"),
         "runtime.entrypoint megatron-lm runs Megatron-LM's pretrain(), which the megatron-core wheel ships "
         "(megatron/training) from 0.17 on", PRETRAIN,
         "set platform.software.megatron_core: 0.19.2 (a platform whose wheel ships megatron/training), "
         "or runtime.entrypoint: moeforge", None, origin="moeforge"),
    Rule("DATA_KIND_NEEDS_MEGATRON_LM", "error", KIND.isin("mock", "indexed"), MEGATRON_LM,
         "data.kind mock and indexed are read by Megatron-LM's data pipeline: they need runtime.entrypoint "
         "megatron-lm (runtime.train only generates synthetic or learnable tokens)", RUNTIME,
         "set runtime.entrypoint: megatron-lm, or data.kind: synthetic", None, origin="moeforge"),
    Rule("DATA_KIND_NEEDS_MOEFORGE_RUNTIME", "error", KIND.isin("synthetic", "learnable"), HARNESS,
         "data.kind synthetic and learnable are runtime.train's generators: they need runtime.entrypoint "
         "moeforge (Megatron-LM reads mock or indexed data)", RUNTIME,
         "set data.kind: mock (or indexed with data.paths), or runtime.entrypoint: moeforge", None,
         origin="moeforge"),
    Rule("DATA_INDEXED_NEEDS_PATHS", "error", KIND == "indexed", Or(IsSet(F("data_paths")), IsSet(F("data_blend"))),
         "data.kind indexed needs data.paths or data.blend (the dataset prefixes)", f"{ARGS}; {DATASETS}",
         "set data.paths: [PREFIX, ...] (PREFIX.bin / PREFIX.idx), or data.blend", None, origin="moeforge"),
    Rule("DATA_PATHS_OR_BLEND", "error", IsSet(F("data_paths")), Not(IsSet(F("data_blend"))),
         "data.paths and data.blend are two spellings of Megatron-LM's --data-path: give one", ARGS,
         "keep data.blend (weighted) or data.paths (equal weights), not both", None, origin="moeforge"),
    Rule("DATA_PATHS_NEED_INDEXED", "error", Or(IsSet(F("data_paths")), IsSet(F("data_blend"))), KIND == "indexed",
         "data.paths / data.blend are only read for data.kind indexed; with another kind they would be ignored",
         RUNTIME, "set data.kind: indexed, or remove data.paths / data.blend", None, origin="moeforge"),
    Rule("DATA_BLEND_WEIGHTS_POSITIVE", "error", IsSet(F("data_blend")), F("data_blend_weights_positive") == True,  # noqa: E712
         "every data.blend weight must be positive (Megatron normalises the weights into sampling "
         "probabilities)", DATASETS, "make each data.blend weight > 0 (drop an entry instead of weighting it 0)",
         None, origin="moeforge"),
    Rule("PATH_ENV_VARS_RESOLVED_AT_LAUNCH", "warning", IsSet(F("path_env_vars")), Not(IsSet(F("path_env_vars"))),
         "paths use environment variables {path_env_vars}: kept literally in plan.json and megatron-lm.args "
         "and resolved at launch by the runtime (an unset variable stops the job before it starts)",
         "moeforge runtime.megatron (expands ${VAR} in megatron-lm.args at launch)",
         "export the variables in the job's environment (or write the paths out)", None, origin="moeforge"),
    # --- tokenizer
    Rule("TOKENIZER_NEEDS_PATH", "error", F("tokenizer_kind").isin("huggingface", "sentencepiece"),
         IsSet(F("tokenizer_path")),
         "a huggingface or sentencepiece tokenizer needs tokenizer.path", f"{TOKENIZER} (--tokenizer-model)",
         "set tokenizer.path (a Hugging Face tokenizer directory or id, a SentencePiece model file)", None,
         origin="moeforge"),
    Rule("TOKENIZER_VOCAB_FITS_MODEL", "error", F("tokenizer_kind") == "byte", F("vocab_size") >= BYTE_VOCAB,
         f"the byte tokenizer's ids run to {BYTE_VOCAB - 1} (vocab {BYTE_VOCAB}): the model's vocab_size must be "
         f"at least {BYTE_VOCAB}",
         f"{TOKENIZER}; GPTModel's embedding has vocab_size rows (an id >= vocab_size fails the lookup)",
         f"set model.architecture.vocab_size >= {BYTE_VOCAB} (e.g. 384: a multiple of 128), or tokenizer.type: null",
         None, origin="moeforge"),
    # --- checkpoints
    Rule("CHECKPOINT_INTERVAL_NEEDS_SAVE", "error", INTERVAL, SAVE,
         "checkpoint.interval without checkpoint.save: Megatron-LM would never save", ARGS,
         "set checkpoint.save (a directory), or remove checkpoint.interval", None, origin="moeforge"),
    Rule("CHECKPOINT_SAVE_NEEDS_INTERVAL", "error", SAVE, INTERVAL,
         "checkpoint.save needs checkpoint.interval (Megatron-LM asserts save_interval is set when --save is)",
         f"{ARGS} (assert args.save_interval is not None)",
         "set checkpoint.interval (iterations between saves)", None, origin="moeforge"),
    Rule("CHECKPOINT_LOAD_AUTO_NEEDS_SAVE", "error", F("ckpt_load") == "auto", SAVE,
         "checkpoint.load: auto resumes from checkpoint.save, which is not set", RUNTIME,
         "set checkpoint.save, or checkpoint.load: none (or a checkpoint directory)", None, origin="moeforge"),
    Rule("CHECKPOINT_ASYNC_NEEDS_SAVE", "error", ASYNC, SAVE,
         "checkpoint.async saves in the background, but checkpoint.save is not set", BRIDGE_CKPT,
         "set checkpoint.save, or checkpoint.async: false", None, origin="moeforge",
         also=(("Megatron-Bridge training/config.py CheckpointConfig.finalize",
                "async_save is enabled, but save is not set. Set save to a valid path."),)),
    Rule("CHECKPOINT_ASYNC_NEEDS_GPU", "error", ASYNC, F("device") == "cuda",
         "asynchronous checkpointing needs a GPU platform (its writer runs beside CUDA training)",
         "megatron-core dist_checkpointing/strategies/async_utils.py (CUDA streams and pinned memory)",
         "set checkpoint.async: false on this platform", None, origin="moeforge"),
    Rule("CHECKPOINT_ASYNC_NEEDS_TORCH_DIST", "error", ASYNC, F("ckpt_format") == "torch_dist",
         "asynchronous checkpointing needs checkpoint.format torch_dist", f"{ARGS}; {BRIDGE_CKPT}",
         "set checkpoint.format: torch_dist, or checkpoint.async: false", None, origin="moeforge",
         also=(("Megatron-Bridge training/config.py ConfigContainer.validate",
                "async_save is only supported with ckpt_format='torch_dist','fsdp_dtensor'"),)),
    # --- what the harness would silently ignore
    Rule("HARNESS_IGNORES_TRAINING_IO", "warning", HARNESS,
         Not(Or(SAVE, IsSet(F("eval_interval")), IsSet(F("tensorboard_dir")), IsSet(F("wandb_project")))),
         "runtime.entrypoint moeforge (runtime.train) writes no checkpoints, evaluates nothing and logs to "
         "report.json only: checkpoint, eval and logging settings are for runtime.entrypoint megatron-lm",
         RUNTIME, "set runtime.entrypoint: megatron-lm (with data.kind mock or indexed), or remove them", None,
         origin="moeforge"),
    # --- LR schedule and evaluation
    Rule("SCHEDULE_WARMUP_BEFORE_DECAY_END", "error", F("lr_warmup_iters") >= 1,
         Or(IsSet(DECAY_ITERS) & (F("lr_warmup_iters") < DECAY_ITERS),
            Not(IsSet(DECAY_ITERS)) & (F("lr_warmup_iters") < F("train_iters"))),
         "the LR warmup must end before the decay does: schedule.warmup < schedule.decay_iters "
         "(training.train_iters when decay_iters is not set)", f"{LR_SCHEDULER} (assert lr_warmup_steps < lr_decay_steps)",
         "shorten schedule.warmup (or give it as a fraction, e.g. 0.01), or raise schedule.decay_iters", None,
         origin="moeforge"),
    Rule("SCHEDULE_WSD_NEEDS_DECAY_ITERS", "error", F("lr_decay_style") == "wsd", IsSet(F("lr_wsd_decay_iters")),
         "schedule.decay wsd needs schedule.wsd_decay_iters (the final annealing phase)",
         f"{LR_SCHEDULER} (assert wsd_decay_steps is not None)", "set schedule.wsd_decay_iters", None, origin="moeforge"),
    Rule("SCHEDULE_MIN_LR_AT_MOST_LR", "error", F("min_lr_at_most_lr") == False, F("min_lr_at_most_lr") == True,  # noqa: E712
         "schedule.min_lr must not exceed schedule.lr", f"{ARGS} (assert args.min_lr <= args.lr); {LR_SCHEDULER}",
         "lower schedule.min_lr (default 0)", None, origin="moeforge"),
    Rule("EVAL_INTERVAL_NEEDS_ITERS", "error", IsSet(F("eval_interval")), F("eval_iters") >= 1,
         "eval.interval without eval.iters: every evaluation would run zero iterations", PRETRAIN,
         "set eval.iters (iterations per evaluation), or remove eval.interval", None, origin="moeforge"),
)
