"""Training I/O: entry point, data, tokenizer, checkpoints, LR schedule, evaluation.

What Megatron-LM's pretrain() (run by `python -m moeforge.runtime.megatron`), Megatron-LM's validate_args,
megatron-core's OptimizerParamScheduler and Megatron-Bridge's ConfigContainer enforce, or what would
fail (or silently do nothing) once the job runs: a checkpoint interval without a directory, a tokenizer
whose ids do not fit the model's embedding, data the chosen entry point cannot read. Most of Megatron's
checks here are bare asserts (no message to quote), so the rules are moeforge's words with Megatron's
file as the source. Lists and floats (blend weights, min_lr vs lr) are read through facts computed from
the recipe (moeforge.compiler.solver.inputs.derived_facts), so that every rule stays solver-friendly.
"""
from moeforge.compiler.knobs.table import BYTE_VOCAB
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, AtLeast, IsSet, Not, Or

ARGS = "Megatron-LM megatron/training/arguments.py validate_args (0.19)"
PRETRAIN = "Megatron-LM megatron/training/training.py pretrain (0.19; shipped in the megatron-core wheel from 0.17)"
LR_SCHEDULER = "megatron-core optimizer_param_scheduler.py OptimizerParamScheduler.__init__ (0.16-0.19)"
BRIDGE_CKPT = "Megatron-Bridge training/config.py CheckpointConfig.finalize / ConfigContainer.validate (0.6.2)"
TOKENIZER = "megatron-core tokenizers/utils/build_tokenizer.py build_tokenizer (0.19)"
DATASETS = "megatron-core datasets/blended_megatron_dataset_config.py, datasets/utils.py get_blend_from_list (0.19)"
RUNTIME = "moeforge runtime: moeforge.runtime.train (entrypoint moeforge) / moeforge.runtime.megatron (entrypoint megatron-lm)"

MEGATRON_LM = F("entrypoint") == "megatron-lm"
HARNESS = F("entrypoint") == "moeforge"
KIND = F("data_kind")
SAVE, INTERVAL = IsSet(F("save")), IsSet(F("save_interval"))
ASYNC = F("async_save").is_(True)
DECAY_ITERS = F("lr_decay_iters")

TRAINING_ONLY = True  # data, checkpoints, schedule and evaluation of a training run

RULES = (
    # --- entry point and data
    Rule(id="RUNTIME_MEGATRON_LM_NEEDS_MCORE_0_17", severity="error", when=MEGATRON_LM,
         require=AtLeast("megatron_core", "0.17.0"),
         message="runtime.entrypoint megatron-lm runs Megatron-LM's pretrain(), which the megatron-core wheel ships "
                 "(megatron/training) from 0.17 on", source=PRETRAIN,
         fix="set platform.software.megatron_core: 0.19.2 (a platform whose wheel ships megatron/training), or "
             "runtime.entrypoint: moeforge", megatron_message=None, origin="moeforge"),
    Rule(id="DATA_KIND_NEEDS_MEGATRON_LM", severity="error", when=KIND.isin("mock", "indexed"), require=MEGATRON_LM,
         message="data.kind mock and indexed are read by Megatron-LM's data pipeline: they need runtime.entrypoint "
                 "megatron-lm (moeforge.runtime.train only generates synthetic or learnable tokens)", source=RUNTIME,
         fix="set runtime.entrypoint: megatron-lm, or data.kind: synthetic", megatron_message=None, origin="moeforge"),
    Rule(id="DATA_KIND_NEEDS_MOEFORGE_RUNTIME", severity="error", when=KIND.isin("synthetic", "learnable"),
         require=HARNESS,
         message="data.kind synthetic and learnable are moeforge.runtime.train's generators: they need runtime.entrypoint "
                 "moeforge (Megatron-LM reads mock or indexed data)", source=RUNTIME,
         fix="set data.kind: mock (or indexed with data.paths), or runtime.entrypoint: moeforge", megatron_message=None,
         origin="moeforge"),
    Rule(id="DATA_INDEXED_NEEDS_PATHS", severity="error", when=KIND == "indexed",
         require=Or(IsSet(F("data_paths")), IsSet(F("data_blend"))),
         message="data.kind indexed needs data.paths or data.blend (the dataset prefixes)",
         source=f"{ARGS}; {DATASETS}", fix="set data.paths: [PREFIX, ...] (PREFIX.bin / PREFIX.idx), or data.blend",
         megatron_message=None, origin="moeforge"),
    Rule(id="DATA_PATHS_OR_BLEND", severity="error", when=IsSet(F("data_paths")), require=Not(IsSet(F("data_blend"))),
         message="data.paths and data.blend are two spellings of Megatron-LM's --data-path: give one", source=ARGS,
         fix="keep data.blend (weighted) or data.paths (equal weights), not both", megatron_message=None,
         origin="moeforge"),
    Rule(id="DATA_PATHS_NEED_INDEXED", severity="error", when=Or(IsSet(F("data_paths")), IsSet(F("data_blend"))),
         require=KIND == "indexed",
         message="data.paths / data.blend are only read for data.kind indexed; with another kind they would be ignored",
         source=RUNTIME, fix="set data.kind: indexed, or remove data.paths / data.blend", megatron_message=None,
         origin="moeforge"),
    Rule(id="DATA_BLEND_WEIGHTS_POSITIVE", severity="error", when=IsSet(F("data_blend")),
         require=F("data_blend_weights_positive").is_(True),
         message="every data.blend weight must be positive (Megatron normalises the weights into sampling "
                 "probabilities)", source=DATASETS,
         fix="make each data.blend weight > 0 (drop an entry instead of weighting it 0)", megatron_message=None,
         origin="moeforge"),
    Rule(id="PATH_ENV_VARS_RESOLVED_AT_LAUNCH", severity="warning", when=IsSet(F("path_env_vars")),
         require=Not(IsSet(F("path_env_vars"))),
         message="paths use environment variables {path_env_vars}: kept literally in plan.json and megatron-lm.args "
                 "and resolved at launch by the runtime (an unset variable stops the job before it starts)",
         source="moeforge moeforge.runtime.megatron (expands ${VAR} in megatron-lm.args at launch)",
         fix="export the variables in the job's environment (or write the paths out)", megatron_message=None,
         origin="moeforge"),
    # --- tokenizer
    Rule(id="TOKENIZER_NEEDS_PATH", severity="error", when=F("tokenizer_kind").isin("huggingface", "sentencepiece"),
         require=IsSet(F("tokenizer_path")), message="a huggingface or sentencepiece tokenizer needs tokenizer.path",
         source=f"{TOKENIZER} (--tokenizer-model)",
         fix="set tokenizer.path (a Hugging Face tokenizer directory or id, a SentencePiece model file)",
         megatron_message=None, origin="moeforge"),
    Rule(id="TOKENIZER_VOCAB_FITS_MODEL", severity="error", when=F("tokenizer_kind") == "byte",
         require=F("vocab_size") >= BYTE_VOCAB,
         message=f"the byte tokenizer's ids run to {BYTE_VOCAB - 1} (vocab {BYTE_VOCAB}): the model's vocab_size must be "
         f"at least {BYTE_VOCAB}",
         source=f"{TOKENIZER}; GPTModel's embedding has vocab_size rows (an id >= vocab_size fails the lookup)",
         fix=f"set model.architecture.vocab_size >= {BYTE_VOCAB} (e.g. 384: a multiple of 128), or tokenizer.type: null",
         megatron_message=None, origin="moeforge"),
    # --- checkpoints
    Rule(id="CHECKPOINT_INTERVAL_NEEDS_SAVE", severity="error", when=INTERVAL, require=SAVE,
         message="checkpoint.interval without checkpoint.save: Megatron-LM would never save", source=ARGS,
         fix="set checkpoint.save (a directory), or remove checkpoint.interval", megatron_message=None,
         origin="moeforge"),
    Rule(id="CHECKPOINT_SAVE_NEEDS_INTERVAL", severity="error", when=SAVE, require=INTERVAL,
         message="checkpoint.save needs checkpoint.interval (Megatron-LM asserts save_interval is set when --save is)",
         source=f"{ARGS} (assert args.save_interval is not None)",
         fix="set checkpoint.interval (iterations between saves)", megatron_message=None, origin="moeforge"),
    Rule(id="CHECKPOINT_LOAD_AUTO_NEEDS_SAVE", severity="error", when=F("ckpt_load") == "auto", require=SAVE,
         message="checkpoint.load: auto resumes from checkpoint.save, which is not set", source=RUNTIME,
         fix="set checkpoint.save, or checkpoint.load: none (or a checkpoint directory)", megatron_message=None,
         origin="moeforge"),
    Rule(id="CHECKPOINT_ASYNC_NEEDS_SAVE", severity="error", when=ASYNC, require=SAVE,
         message="checkpoint.async saves in the background, but checkpoint.save is not set", source=BRIDGE_CKPT,
         fix="set checkpoint.save, or checkpoint.async: false", megatron_message=None, origin="moeforge",
         also=(("Megatron-Bridge training/config.py CheckpointConfig.finalize",
                "async_save is enabled, but save is not set. Set save to a valid path."),)),
    Rule(id="CHECKPOINT_ASYNC_NEEDS_GPU", severity="error", when=ASYNC, require=F("device") == "cuda",
         message="asynchronous checkpointing needs a GPU platform (its writer runs beside CUDA training)",
         source="megatron-core dist_checkpointing/strategies/async_utils.py (CUDA streams and pinned memory)",
         fix="set checkpoint.async: false on this platform", megatron_message=None, origin="moeforge"),
    Rule(id="CHECKPOINT_ASYNC_NEEDS_TORCH_DIST", severity="error", when=ASYNC, require=F("ckpt_format") == "torch_dist",
         message="asynchronous checkpointing needs checkpoint.format torch_dist", source=f"{ARGS}; {BRIDGE_CKPT}",
         fix="set checkpoint.format: torch_dist, or checkpoint.async: false", megatron_message=None, origin="moeforge",
         also=(("Megatron-Bridge training/config.py ConfigContainer.validate",
                "async_save is only supported with ckpt_format='torch_dist','fsdp_dtensor'"),)),
    # --- what the harness would silently ignore
    Rule(id="HARNESS_IGNORES_TRAINING_IO", severity="warning", when=HARNESS,
         require=Not(Or(SAVE, IsSet(F("eval_interval")), IsSet(F("tensorboard_dir")), IsSet(F("wandb_project")))),
         message="runtime.entrypoint moeforge (moeforge.runtime.train) writes no checkpoints, evaluates nothing and logs to "
                 "report.json only: checkpoint, eval and logging settings are for runtime.entrypoint megatron-lm",
         source=RUNTIME, fix="set runtime.entrypoint: megatron-lm (with data.kind mock or indexed), or remove them",
         megatron_message=None, origin="moeforge"),
    # --- LR schedule and evaluation
    Rule(id="SCHEDULE_WARMUP_BEFORE_DECAY_END", severity="error", when=F("lr_warmup_iters") >= 1,
         require=Or(IsSet(DECAY_ITERS) & (F("lr_warmup_iters") < DECAY_ITERS),
            Not(IsSet(DECAY_ITERS)) & (F("lr_warmup_iters") < F("train_iters"))),
         message="the LR warmup must end before the decay does: schedule.warmup < schedule.decay_iters "
                 "(training.train_iters when decay_iters is not set)",
         source=f"{LR_SCHEDULER} (assert lr_warmup_steps < lr_decay_steps)",
         fix="shorten schedule.warmup (or give it as a fraction, e.g. 0.01), or raise schedule.decay_iters",
         megatron_message=None, origin="moeforge"),
    Rule(id="SCHEDULE_WSD_NEEDS_DECAY_ITERS", severity="error", when=F("lr_decay_style") == "wsd",
         require=IsSet(F("lr_wsd_decay_iters")),
         message="schedule.decay wsd needs schedule.wsd_decay_iters (the final annealing phase)",
         source=f"{LR_SCHEDULER} (assert wsd_decay_steps is not None)", fix="set schedule.wsd_decay_iters",
         megatron_message=None, origin="moeforge"),
    Rule(id="SCHEDULE_MIN_LR_AT_MOST_LR", severity="error", when=F("min_lr_at_most_lr").is_(False),
         require=F("min_lr_at_most_lr").is_(True), message="schedule.min_lr must not exceed schedule.lr",
         source=f"{ARGS} (assert args.min_lr <= args.lr); {LR_SCHEDULER}", fix="lower schedule.min_lr (default 0)",
         megatron_message=None, origin="moeforge"),
    Rule(id="EVAL_INTERVAL_NEEDS_ITERS", severity="error", when=IsSet(F("eval_interval")), require=F("eval_iters") >= 1,
         message="eval.interval without eval.iters: every evaluation would run zero iterations", source=PRETRAIN,
         fix="set eval.iters (iterations per evaluation), or remove eval.interval", megatron_message=None,
         origin="moeforge"),
)
