"""The knob table's training-I/O rows: entry point, data, tokenizer, checkpoints, LR schedule, logging, eval.

Plan sections of their own (IO_SECTIONS), under the plan's names (`names`), each with its Megatron-LM
argument and Megatron-Bridge ConfigContainer path (megatron-bridge 0.6.2).  compiler/knobs/table.py puts
them into the one table (KNOBS) in this order.
"""
from __future__ import annotations

from moeforge.compiler.knobs.row import ENV_NOTE, PATH_PATTERN, Form, Knob

_K = Knob


def _io(field, path, kind, default, domain, section, name, **kw) -> Knob:
    """A training-I/O knob: plan section `section`, key `name` there (lm= and bridge= always given)."""
    return Knob(field, path, kind, default, domain, section=section, names=((0, name),), **kw)


# The plan's training-I/O sections (schemas/plan.v1.json), in plan order.
IO_SECTIONS = ("runtime", "data", "tokenizer", "checkpoint", "schedule", "logging", "eval")
ENTRYPOINTS = ("moeforge", "megatron-lm")
DATA_KINDS = ("synthetic", "learnable", "mock", "indexed")
TOKENIZERS = (None, "byte", "huggingface", "sentencepiece")
BYTE_VOCAB, BYTE_EOD = 257, 256   # UTF-8 bytes 0..255 and one end-of-document id
DECAY_STYLES = ("constant", "linear", "cosine", "wsd", "inverse-square-root")
WSD_STYLES = ("exponential", "linear", "cosine", "minus_sqrt")  # Megatron-LM --lr-wsd-decay-style
CKPT_FORMATS = ("torch_dist", "torch", "torch_dcp", "fsdp_dtensor")
# checkpoint.scheduler -> the Megatron-LM switch it sets (match: neither, Megatron-LM's default)
RESUME_SCHEDULERS = {"match": None, "plan": "override_opt_param_scheduler",
                     "checkpoint": "use_checkpoint_opt_param_scheduler"}
SPLIT_DEFAULT = "969,30,1"
EXIT_SIGNAL = "SIGUSR1"
LOGS_DIR_DEFAULT = "logs/<recipe name>"


IO_KNOBS: tuple[Knob, ...] = (
    _io("entrypoint", "runtime.entrypoint", "enum", "moeforge", ENTRYPOINTS, "runtime", "entrypoint", lm=None,
        bridge=None, doc="moeforge: python -m moeforge.runtime.train (moeforge's harness: synthetic tokens, no data, "
        "checkpoints or LR schedule); megatron-lm: python -m moeforge.runtime.megatron (Megatron-LM's pretrain() loop)",
        form=Form(description=("moeforge: python -m moeforge.runtime.train, moeforge's harness (synthetic tokens, no "
                               "checkpoints); megatron-lm: python -m moeforge.runtime.megatron, Megatron-LM's pretrain() loop "
                               "(data, tokenizer, checkpoints and resume, LR schedule, logging; "
                               "megatron-core >= 0.17)."))),
    _io("data_kind", "data.kind", "enum", None, DATA_KINDS, "data", "kind", lm="mock_data",
        lm_values=(("synthetic", True), ("learnable", True), ("mock", True), ("indexed", False)), bridge=None,
        doc="default: synthetic for runtime.entrypoint moeforge, mock for megatron-lm (DEPENDENT_DEFAULTS); "
        "synthetic/learnable are moeforge.runtime.train's generators, mock is Megatron-LM's --mock-data, indexed reads "
        "Megatron indexed datasets (PREFIX.bin/.idx)",
        form=Form(description=("synthetic / learnable: moeforge.runtime.train's generators (entrypoint moeforge, the default "
                               "there); mock: Megatron-LM's mock dataset (the default for entrypoint megatron-lm); "
                               "indexed: Megatron indexed datasets (paths or blend)."))),
    _io("data_paths", "data.paths", "str", None, (), "data", "paths", lm="data_path", bridge="dataset.data_path",
        doc="indexed dataset prefixes, equally weighted (Megatron-LM --data-path P1 P2 ...); ${VAR} is kept "
        "literally and resolved at launch",
        form=Form(description="Indexed dataset prefixes, equally weighted (Megatron-LM --data-path P1 P2 ...).",
                  min_length=1, max_length=4096, pattern=PATH_PATTERN, shape="path list",
                  item_description="an indexed dataset prefix (PREFIX.bin / PREFIX.idx). " + ENV_NOTE)),
    _io("data_blend", "data.blend", "str", None, (), "data", "blend", lm="data_path", bridge="dataset.data_path",
        doc="weighted prefixes [{weight, path}] (Megatron-LM --data-path W1 P1 W2 P2 ...)",
        form=Form(description="Weighted prefixes (Megatron-LM --data-path W1 P1 W2 P2 ...); weights must be positive.",
                  min_length=1, max_length=4096, pattern=PATH_PATTERN, shape="blend",
                  item_description="an indexed dataset prefix. " + ENV_NOTE)),
    _io("split", "data.split", "str", SPLIT_DEFAULT, (), "data", "split", lm="split", bridge="dataset.split",
        doc="train,valid,test weights of an indexed dataset; the default is Megatron-LM's legacy default "
        "(validate_args: '969, 30, 1' when --data-path has no --split)",
        form=Form(description=("train,valid,test weights of an indexed dataset (default: Megatron-LM's legacy default "
                               "969,30,1)."), pattern=" *[0-9]+(\\.[0-9]+)? *(, *[0-9]+(\\.[0-9]+)? *){0,2}")),
    _io("data_cache_path", "data.cache_dir", "str", None, (), "data", "cache_dir", lm="data_cache_path",
        bridge="dataset.path_to_cache", doc="where Megatron's dataset builder caches its sample indices",
        form=Form(description="Where Megatron's dataset builder caches sample indices. " + ENV_NOTE, min_length=1,
                  max_length=4096, pattern=PATH_PATTERN)),
    _io("tokenizer_kind", "tokenizer.type", "enum", None, TOKENIZERS, "tokenizer", "type", lm="tokenizer_type",
        bridge="tokenizer.tokenizer_type",
        lm_values=((None, "NullTokenizer"), ("byte", "NullTokenizer"), ("huggingface", "HuggingFaceTokenizer"),
                   ("sentencepiece", "SentencePieceTokenizer")),
        doc="null: token ids only (NullTokenizer, the model's vocab); byte: UTF-8 bytes 0..255 and an "
        "end-of-document id 256 (NullTokenizer, eod 256); huggingface / sentencepiece: tokenizer.path",
        form=Form(description=("null: token ids only (Megatron-LM NullTokenizer over the model's vocab); byte: UTF-8 "
                               "bytes 0..255 plus end-of-document id 256 (vocab 257, must fit the model's vocab); "
                               "huggingface / sentencepiece: the tokenizer at tokenizer.path."))),
    _io("tokenizer_path", "tokenizer.path", "str", None, (), "tokenizer", "path", lm="tokenizer_model",
        bridge="tokenizer.tokenizer_model", doc="a Hugging Face tokenizer (directory or id) or a SentencePiece model",
        form=Form(description=("A Hugging Face tokenizer (directory or id) or a SentencePiece model file; "
                               "required for huggingface / sentencepiece. ") + ENV_NOTE, min_length=1, max_length=4096,
                  pattern=PATH_PATTERN)),
    _io("tokenizer_vocab_size", None, "opt_int", None, (), "tokenizer", "vocab_size", lm=None,
        bridge="tokenizer.vocab_size", doc="the tokenizer's known vocab: byte 257, null the model's vocab, "
        "else what the tokenizer says at launch (Megatron-LM takes the model's vocab as --vocab-size)"),
    _io("null_tokenizer_eod_id", None, "opt_int", None, (), "tokenizer", "eod_id", lm="null_tokenizer_eod_id",
        bridge="tokenizer.null_tokenizer_eod_id", doc="byte: 256; null: NullTokenizer's own (vocab - 1)"),
    _io("save", "checkpoint.save", "str", None, (), "checkpoint", "save", lm="save", bridge="checkpoint.save",
        doc="checkpoint directory (torch_dist); ${VAR} is kept literally and resolved at launch",
        form=Form(description=("Checkpoint directory. When set, Megatron-LM saves and exits on SIGUSR1 "
                               "(--exit-signal-handler). ") + ENV_NOTE, min_length=1, max_length=4096,
                  pattern=PATH_PATTERN)),
    _io("save_interval", "checkpoint.interval", "opt_int", None, (), "checkpoint", "interval", lm="save_interval",
        bridge="checkpoint.save_interval", unit="iterations",
        form=Form(description="Save every this many iterations (required with save).")),
    _io("ckpt_load", "checkpoint.load", "enum", None, ("auto", "none"), "checkpoint", "load", lm="load",
        bridge="checkpoint.load", doc="auto: the latest checkpoint under checkpoint.save (the default when save is "
        "set; a first run starts fresh); none (the default otherwise); or a checkpoint directory",
        form=Form(description=("auto: the latest checkpoint under save (the default when save is set; a first run "
                               "starts fresh); none (the default otherwise); or a checkpoint directory."),
                  min_length=1, max_length=4096, pattern=PATH_PATTERN, nullable=True, shape="keyword or path",
                  item_description="a checkpoint directory. " + ENV_NOTE)),
    _io("keep_last", "checkpoint.keep_last", "opt_int", None, (), "checkpoint", "keep_last", lm=None,
        bridge="checkpoint.most_recent_k", lm_values=((None, -1),),  # Bridge: -1 keeps every checkpoint
        doc="Megatron-LM has no flag for it: moeforge.runtime.megatron prunes all but the newest keep_last iterations itself",
        form=Form(description=("Keep only the newest N checkpoints (moeforge.runtime.megatron prunes; Bridge "
                               "checkpoint.most_recent_k)."))),
    _io("async_save", "checkpoint.async", "bool", False, (), "checkpoint", "async", lm="async_save",
        bridge="checkpoint.async_save", doc="save in the background (torch_dist, GPU); Megatron-LM also gets "
        "--use-persistent-ckpt-worker, without which validate_args turns --async-save off",
        form=Form(description="Save in the background (torch_dist on a GPU platform).")),
    _io("ckpt_format", "checkpoint.format", "enum", "torch_dist", CKPT_FORMATS, "checkpoint", "format",
        lm="ckpt_format", bridge="checkpoint.ckpt_format",
        doc="torch_dist (the only value a recipe may give for now): sharded, reshards on load",
        form=Form(description="Checkpoint format (torch_dist: sharded, reshards on load).", values=("torch_dist",))),
    _io("resume_scheduler", "checkpoint.scheduler", "enum", "match", tuple(RESUME_SCHEDULERS), "checkpoint",
        "scheduler", lm=None, bridge=None,
        doc="the LR and weight-decay schedule of a resumed run: match (Megatron-LM's default: a checkpoint saved "
        "with another schedule, e.g. fewer train_iters, is refused), plan (this plan's schedule from the "
        "checkpoint's iteration on: train longer), checkpoint (the schedule the checkpoint was saved with); "
        "Megatron-LM --override-opt_param-scheduler / --use-checkpoint-opt_param-scheduler",
        form=Form(description=("The LR and weight-decay schedule when resuming: match (Megatron-LM's default: a "
                               "checkpoint saved with another schedule, e.g. fewer train_iters, is refused), plan "
                               "(this recipe's schedule from the checkpoint's iteration on: raise train_iters to "
                               "train longer), checkpoint (keep the schedule the checkpoint was saved with). "
                               "Megatron-LM --override-opt_param-scheduler / --use-checkpoint-opt_param-scheduler."))),
    _K("override_opt_param_scheduler", None, "bool", False, lm="override_opt_param_scheduler",
       bridge="scheduler.override_opt_param_scheduler", doc="checkpoint.scheduler: plan (computed)"),
    _K("use_checkpoint_opt_param_scheduler", None, "bool", False, lm="use_checkpoint_opt_param_scheduler",
       bridge="scheduler.use_checkpoint_opt_param_scheduler", doc="checkpoint.scheduler: checkpoint (computed)"),
    _K("use_persistent_ckpt_worker", None, "bool", False, lm="use_persistent_ckpt_worker",
       bridge="checkpoint.use_persistent_ckpt_worker", doc="written with checkpoint.async (computed)"),
    _K("exit_signal_handler", None, "bool", False, lm="exit_signal_handler", bridge="train.exit_signal_handler",
       doc="on when checkpoint.save is set: Megatron-LM saves and exits on exit_signal (computed)"),
    _K("exit_signal", None, "str", "SIGTERM", lm="exit_signal", bridge="train.exit_signal",
       doc=f"{EXIT_SIGNAL} when checkpoint.save is set: the launchers forward it (Slurm sends it "
       "launch.signal_margin_s before the time limit) (computed)"),
    _K("check_for_nan_in_loss_and_grad", None, "bool", True, lm="check_for_nan_in_loss_and_grad",
       bridge=("rerun_state_machine.check_for_nan_in_loss", "ddp.check_for_nan_in_grad"),
       doc="the per-step NaN check of loss and gradients (the plan's ddp_config.check_for_nan_in_grad); off with "
       "cuda_graph.impl full_iteration, which Megatron-LM and Megatron-Bridge refuse to run with it, and under "
       "FP16's dynamic loss scaling, as Megatron-LM turns it off (computed: compiler/targets/plan.py nan_check)"),
    _io("lr_decay_style", "schedule.decay", "enum", "constant", DECAY_STYLES, "schedule", "decay",
        lm="lr_decay_style", bridge="scheduler.lr_decay_style", lm_values=(("wsd", "WSD"),),
        doc="LR decay after warmup (Megatron-LM's default is linear; moeforge's is constant, what "
        "moeforge.runtime.train's harness does)",
        form=Form(description=("LR decay after warmup (default constant, what moeforge.runtime.train's harness does; "
                               "Megatron-LM's own default is linear)."),
                  values=("constant", "linear", "cosine", "wsd"))),
    _io("lr_warmup_iters", "schedule.warmup", "opt_int", 0, (), "schedule", "warmup_iters", lm="lr_warmup_iters",
        bridge="scheduler.lr_warmup_iters", unit="iterations", lm_values=((None, 0),),  # Megatron: 0 = unset
        doc="schedule.warmup: an integer is iterations, a number in (0, 1) a fraction of the decay "
        "(lr_warmup_fraction; warmup_iters is then null)",
        form=Form(description=("Warmup: an integer is iterations, a number in (0, 1) a fraction of the decay "
                               "iterations (default 0)."), minimum=0, shape="iterations or fraction")),
    _io("lr_warmup_fraction", None, "float", None, (), "schedule", "warmup_fraction", lm="lr_warmup_fraction",
        bridge="scheduler.lr_warmup_fraction", doc="from schedule.warmup when it is a fraction (computed)"),
    _io("lr_decay_iters", "schedule.decay_iters", "opt_int", None, (), "schedule", "decay_iters",
        lm="lr_decay_iters", bridge="scheduler.lr_decay_iters", unit="iterations", doc="null: train_iters",
        form=Form(description="Iterations over which the LR decays (default: train_iters).")),
    _io("lr_wsd_decay_iters", "schedule.wsd_decay_iters", "opt_int", None, (), "schedule", "wsd_decay_iters",
        lm="lr_wsd_decay_iters", bridge="scheduler.lr_wsd_decay_iters", unit="iterations",
        doc="decay: wsd: the iterations of the final annealing (Megatron's WSD schedule needs them)",
        form=Form(description="decay: wsd: iterations of the final annealing (required with wsd).")),
    _io("lr_wsd_decay_style", "schedule.wsd_decay_style", "enum", "exponential", WSD_STYLES, "schedule",
        "wsd_decay_style", lm="lr_wsd_decay_style", bridge="scheduler.lr_wsd_decay_style",
        doc="decay: wsd: the shape of the final annealing (Megatron-LM's default exponential; Megatron-Bridge's "
        "own default minus_sqrt is never used: the plan states it)",
        form=Form(description=("decay: wsd: the shape of the final annealing (Megatron-LM --lr-wsd-decay-style; "
                               "default exponential, Megatron-LM's)."))),
    _io("log_interval", "logging.interval", "int", 100, (), "logging", "interval", lm="log_interval",
        bridge="logger.log_interval", unit="iterations",
        form=Form(description="Log every this many iterations (default 100).")),
    _io("tensorboard_dir", "logging.tensorboard", "str", None, (), "logging", "tensorboard", lm="tensorboard_dir",
        bridge="logger.tensorboard_dir",
        form=Form(description="TensorBoard directory. " + ENV_NOTE, min_length=1, max_length=4096,
                  pattern=PATH_PATTERN)),
    _io("wandb_project", "logging.wandb", "str", None, (), "logging", "wandb_project", lm="wandb_project",
        bridge="logger.wandb_project", doc="a Weights & Biases project (optional; wandb is never a moeforge "
        "dependency)",
        form=Form(description="A Weights & Biases project name (optional: wandb is never a moeforge dependency).",
                  min_length=1, max_length=256)),
    _io("eval_interval", "eval.interval", "opt_int", None, (), "eval", "interval", lm="eval_interval",
        bridge="validation.eval_interval", unit="iterations",
        doc="null: no evaluation (Megatron-LM 0.19 divides by --eval-interval even then, so train_iters is "
        "written, with --eval-iters 0)",
        form=Form(description="Evaluate every this many iterations (default null: never; needs iters).")),
    _io("eval_iters", "eval.iters", "int", 0, (), "eval", "iters", lm="eval_iters", bridge="validation.eval_iters",
        unit="iterations", doc="iterations per evaluation; 0 (moeforge's default): none (Megatron-LM's is 100)",
        form=Form(description="Iterations per evaluation (default 0).", minimum=0)),
)
