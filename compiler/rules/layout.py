"""Parallel layout (parallel folding): attention TP x CP x DP x PP, MoE ETP x EP x EDP x PP.

The world must factor both ways; experts, layers and heads must divide evenly.
Sources: megatron-core parallel_state.initialize_model_parallel, TransformerConfig /
ModelParallelConfig.__post_init__, transformer_block.get_num_layers_to_build, the
microbatch calculator, Megatron-LM arguments.validate_args, Megatron-Bridge
models/transformer_config.py and scripts/common/benchmark_parallelism.py.

With an uneven pipeline (pipeline_model_parallel_layout, num_layers_in_first/last_pipeline_stage,
account_for_embedding/loss_in_pipeline_split) the even-split checks step aside. An explicit layout
is checked instead by the LAYOUT_PIPELINE_LAYOUT_* rules, on the facts compiler/knobs/pipeline_layout.py
reads from it as megatron-core's PipelineParallelLayerLayout does; stage sizes by the
LAYOUT_*_STAGE_LAYERS_* and LAYOUT_UNEVEN_* rules, accounting by the LAYOUT_ACCOUNT_FOR_* rules.
"""
from moeforge.compiler.knobs import layout as L
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, IsSet, Not, Or

PS = "megatron-core parallel_state.initialize_model_parallel"
TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
MPC = "megatron-core model_parallel_config.py ModelParallelConfig.__post_init__"
TB = "megatron-core transformer/transformer_block.py get_num_layers_to_build"
MBC = "megatron-core num_microbatches_calculator.py"
PIPELINE_SCHEDULE = "megatron-core pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving"
ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
BRIDGE_TC = "Megatron-Bridge models/transformer_config.py _set_moe_expert_tensor_parallel_default"
PPL = ("megatron-core transformer/pipeline_parallel_layer_layout.py PipelineParallelLayerLayout (parse_str_to_list, "
       "validate_layer_layout), from TransformerConfig.__post_init__")

TP, PP, CP = F("tensor_model_parallel_size"), F("pipeline_model_parallel_size"), F("context_parallel_size")
EP, ETP, VPP = F("expert_model_parallel_size"), F("expert_tensor_parallel_size"), F("virtual_pipeline_model_parallel_size")
WORLD = F("world_size")
GDN = F("experimental_attention_variant") == "gated_delta_net"
GDN_K, GDN_V = F("linear_num_key_heads"), F("linear_num_value_heads")
V18, BEFORE_V18 = (("megatron_core", ">=0.18.0"),), (("megatron_core", "<0.18.0"),)
LAYOUT, STAGES = F("pipeline_model_parallel_layout"), F("pipeline_layout_stages")
UNEVEN_PP = Or(IsSet(F("pipeline_model_parallel_layout")), IsSet(F("num_layers_in_first_pipeline_stage")),
               IsSet(F("num_layers_in_last_pipeline_stage")),
               F("account_for_embedding_in_pipeline_split").is_(True),
               F("account_for_loss_in_pipeline_split").is_(True))
EVEN_PP = Not(UNEVEN_PP)

# Uneven split by stage sizes or by accounting for the embedding and loss (TransformerConfig.__post_init__):
# the stage sizes take the first and last rank, the middle ranks share what is left evenly; accounting
# counts the embedding and the loss as one layer each and splits the sum evenly.
FIRST, LAST = F("num_layers_in_first_pipeline_stage"), F("num_layers_in_last_pipeline_stage")
EMB, LOSS = F("account_for_embedding_in_pipeline_split"), F("account_for_loss_in_pipeline_split")
STAGE_SIZES = Or(IsSet(FIRST), IsSet(LAST))
ACCOUNT_FOR = Or(EMB.is_(True), LOSS.is_(True))
BY_STAGE_SIZES = Not(IsSet(LAYOUT)) & STAGE_SIZES
BY_ACCOUNTING = Not(IsSet(LAYOUT)) & Not(STAGE_SIZES) & ACCOUNT_FOR
MIDDLE_LAYERS = F("num_layers") - FIRST - LAST          # an unset stage size counts 0 ...
MIDDLE_STAGES = PP - IsSet(FIRST) - IsSet(LAST)          # ... and takes no rank
SPLIT_LAYERS = F("num_layers") + EMB + LOSS              # each accounted for counts one layer
# Micro-batches per step (M); the interleaved schedule runs them in groups of microbatch_group_size_per_vp_stage,
# which moeforge leaves at megatron-core's default, PP (ModelParallelConfig.__post_init__)
GBS, MBS, DP = F("global_batch_size"), F("micro_batch_size"), F("data_parallel_size")
BATCH_SPLITS = IsSet(DP) & IsSet(GBS) & (L.batch_remainder(GBS, MBS, DP) == 0)
MICROBATCHES = L.num_microbatches(GBS, MBS, DP)
INTERLEAVED = IsSet(VPP) & (PP > 1) & BATCH_SPLITS
# megatron-core's local values in its messages, by placeholder (compiler/rules/display.py fills them)
SHOWN = {"pipeline_middle_layers": MIDDLE_LAYERS, "pipeline_middle_stages": MIDDLE_STAGES,
         "pipeline_middle_rank_layers": MIDDLE_LAYERS // MIDDLE_STAGES,
         "pipeline_split_layers": SPLIT_LAYERS, "pipeline_split_rank_layers": SPLIT_LAYERS // PP,
         "num_microbatches": MICROBATCHES, "pipeline_parallel_size": PP,
         "final_microbatch_group_size": MICROBATCHES % PP}
STAGE_FIX = ("choose parallelism.first_stage_layers and parallelism.last_stage_layers so that the remaining layers "
             "split evenly over the middle ranks (in multiples of parallelism.vpp), or unset them for an even split")
ACCOUNT_FIX = ("choose parallelism.pp (and parallelism.vpp) dividing num_layers + 1 for each of "
               "parallelism.account_for_embedding and parallelism.account_for_loss that is set, or unset them")

RULES = (
    # the foldings' products are compiler/knobs/layout.py's (model_size, expert_model_size), over rule expressions
    Rule(id="LAYOUT_WORLD_DIVISIBLE", severity="error", when=IsSet(WORLD),
         require=WORLD % L.model_size(TP, CP, PP) == 0,
         message="the world size must be divisible by TP x CP x PP (world = TP x CP x DP x PP)", source=PS,
         fix="change resources.nodes or parallelism.tp/cp/pp so that TP x CP x PP divides the GPU count",
         megatron_message="world_size ({world_size}) is not divisible by {model_size}",
         also=(("Megatron-LM arguments.py",
                "world size ({world_size}) is not divisible by total_model_size (total_model_size={model_size})"),
               ("Megatron-Bridge scripts/common/benchmark_parallelism.py",
                "Requested {world_size} GPUs is not divisible by TP * PP * CP ({tensor_model_parallel_size} * "
                "{pipeline_model_parallel_size} * {context_parallel_size} = {model_size}). Override the parallel "
                "sizes for this GPU count."))),
    Rule(id="LAYOUT_EXPERT_WORLD_DIVISIBLE", severity="error", when=IsSet(WORLD),
         require=Or(IsSet(ETP) & (WORLD % L.expert_model_size(ETP, EP, PP) == 0),  # an unset ETP is TP
                    Not(IsSet(ETP)) & (WORLD % L.expert_model_size(TP, EP, PP) == 0)),
         message="the world size must be divisible by ETP x EP x PP (world = ETP x EP x EDP x PP)", source=PS,
         fix="change parallelism.ep/etp or resources.nodes so that ETP x EP x PP divides the GPU count",
         megatron_message="world_size ({world_size}) is not divisible by expert_tensor_model_pipeline_parallel size "
                          "({expert_tensor_model_pipeline_parallel_size})",
         also=(("Megatron-Bridge scripts/common/benchmark_parallelism.py",
                "The expert-parallel grid is incompatible with requested {world_size} GPUs: the world size must be "
                "divisible by ETP * EP * PP ({etp} * {expert_model_parallel_size} * {pipeline_model_parallel_size} = "
                "{expert_tensor_model_pipeline_parallel_size}). Override the expert or pipeline parallel sizes for "
                "this GPU count."),)),
    Rule(id="LAYOUT_EP_NEEDS_EXPERTS", severity="error", when=EP > 1, require=IsSet(F("num_moe_experts")),
         message="expert parallelism needs an MoE model (num_moe_experts)", source=TC,
         fix="set parallelism.ep: 1 for a dense model",
         megatron_message="num_moe_experts must be non None to use expert-parallel."),
    Rule(id="LAYOUT_EXPERTS_DIVISIBLE_BY_EP", severity="error", when=IsSet(F("num_moe_experts")),
         require=F("num_moe_experts") % EP == 0, message="the number of experts must be divisible by EP",
         source=f"megatron-core transformer/moe/moe_layer.py (bare assert); {ARGS}",
         fix="choose parallelism.ep among the divisors of the expert count",
         # megatron-core's MoELayer asserts it (bare) at model construction under every front-end;
         # Megatron-LM's validate_args says it first, with these words
         megatron_message="Number of experts should be a multiple of expert model parallel_size."),
    Rule(id="LAYOUT_VPP_NEEDS_PP", severity="error", when=IsSet(VPP), require=PP > 1,
         message="a virtual pipeline size needs pipeline parallelism (PP > 1)", source=PS,
         fix="unset parallelism.vpp, or set parallelism.pp > 1",
         megatron_message="pipeline-model-parallel size should be greater than 1 with interleaved schedule"),
    # megatron-core would build one virtual stage per rank; Megatron-LM's validate_args drops it (VPP None), and
    # with EP overlap its TransformerConfig then refuses PP > 1 without VPP: one value, one meaning, refused
    Rule(id="LAYOUT_VPP_ONE_IS_NO_VPP", severity="error", when=IsSet(VPP) & (PP > 1), require=VPP != 1,
         message="parallelism.vpp: 1 is no virtual pipeline (Megatron-LM drops it, megatron-core would keep it)",
         source=f"{ARGS}: virtual_pipeline_model_parallel_size == 1 becomes None",
         fix="unset parallelism.vpp (or set it >= 2)", megatron_message=None, origin="moeforge"),
    Rule(id="LAYOUT_LAYERS_DIVISIBLE_BY_PP", severity="error", when=(PP > 1) & EVEN_PP,
         require=F("num_layers") % PP == 0,
         message="the number of layers must be divisible by PP (no uneven pipeline layout is set)", source=TB,
         fix="choose parallelism.pp among the divisors of the layer count, or give an uneven pipeline layout",
         megatron_message="num_layers should be divisible by pipeline_model_parallel_size",
         variants=(((("megatron_core", ">=0.17.0"),),
                    "num_layers={num_layers} should be divisible by "
                    "config.pipeline_model_parallel_size={pipeline_model_parallel_size}"),)),
    Rule(id="LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP", severity="error", when=IsSet(VPP) & (PP > 1) & EVEN_PP,
         require=(F("num_layers") // PP) % VPP == 0, message="layers per pipeline stage must be divisible by VPP",
         source=TB, fix="choose parallelism.vpp among the divisors of layers per stage",
         megatron_message="num_layers_per_pipeline_rank {num_layers_per_pipeline_rank}             should be "
                          "divisible by vp_size {virtual_pipeline_model_parallel_size}",
         also=(("Megatron-Bridge models/gpt_provider.py",
                "Make sure the number of model chunks is the same across all pipeline stages."),)),
    # An explicit layout (parallelism.pipeline_layout), as megatron-core's PipelineParallelLayerLayout
    # parses and validates it (the facts: compiler/knobs/pipeline_layout.py); each check in megatron-core's order.
    Rule(id="LAYOUT_PIPELINE_LAYOUT_WELL_FORMED", severity="error", when=IsSet(LAYOUT),
         require=Not(IsSet(F("pipeline_layout_problem"))),
         message="the pipeline layout must parse and hold the embedding first, the loss last (each once) and MTP "
                 "layers after every decoder layer, all in one virtual stage", source=PPL,
         fix="fix parallelism.pipeline_layout: '|'-separated virtual stages of E (embedding), t (decoder layer), m "
             "(MTP layer), L (loss), e.g. Et*4|(t*7|)*5t*8|tmL", megatron_message="{pipeline_layout_problem}"),
    Rule(id="LAYOUT_PIPELINE_LAYOUT_DIVISIBLE_BY_PP", severity="error", when=IsSet(STAGES), require=STAGES % PP == 0,
         message="the pipeline layout's virtual stages must be divisible by PP (stages = PP x VPP)",
         source=f"{PPL}; {ARGS}",
         fix="give parallelism.pipeline_layout PP x VPP '|'-separated stages, or change parallelism.pp",
         megatron_message="pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size "
                          "(len(layout)={pipeline_layout_stages}, "
                          "pipeline_model_parallel_size={pipeline_model_parallel_size})",
         also=(("Megatron-LM arguments.py",
                "The length of pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size "
                "(num_stages={pipeline_layout_stages}, args.pipeline_model_parallel_size="
                "{pipeline_model_parallel_size})"),)),
    Rule(id="LAYOUT_PIPELINE_LAYOUT_VPP", severity="error", when=IsSet(STAGES) & IsSet(VPP) & (STAGES % PP == 0),
         require=VPP * PP == STAGES, message="VPP must be the pipeline layout's virtual stages per pipeline rank",
         source=TC, fix="set parallelism.vpp to the layout's stage count / parallelism.pp",
         megatron_message="virtual_pipeline_model_parallel_size conflicts with pipeline_model_parallel_layout, "
                          "(self.virtual_pipeline_model_parallel_size={virtual_pipeline_model_parallel_size},  "
                          "detected_vpp_size={pipeline_layout_vpp})"),
    Rule(id="LAYOUT_PIPELINE_LAYOUT_LAYERS", severity="error", when=IsSet(F("pipeline_layout_decoder_layers")),
         require=F("pipeline_layout_decoder_layers") == F("num_layers"),
         message="the pipeline layout must place every decoder layer: its t count must equal num_layers", source=PPL,
         fix="give parallelism.pipeline_layout exactly num_layers t's (check the model after a model swap)",
         megatron_message="Number of decoder layers {pipeline_layout_decoder_layers}must match num_layers {num_layers}"),
    Rule(id="LAYOUT_PIPELINE_LAYOUT_MTP_LAYERS", severity="error", when=IsSet(F("pipeline_layout_mtp_layers")),
         require=Or(F("pipeline_layout_mtp_layers") == F("mtp_num_layers"),
            Not(IsSet(F("mtp_num_layers"))) & (F("pipeline_layout_mtp_layers") == 0)),
         message="the pipeline layout's m count must equal the model's MTP layers (mtp_num_layers)", source=PPL,
         fix="give parallelism.pipeline_layout one m per MTP layer of the model, or none without MTP",
         megatron_message="Number of mtp layers in layout must match mtp_num_layers"),
    Rule(id="LAYOUT_PIPELINE_LAYOUT_MTP_LAST_CHUNK", severity="error",
         when=IsSet(F("pipeline_layout_mtp_layers")) & (F("pipeline_layout_mtp_layers") > 0) & (STAGES % PP == 0),
         require=F("pipeline_layout_stages_after_mtp") < PP,
         message="the MTP layers must sit in the last virtual stage of their pipeline rank (one of the last PP stages)",
         source=PPL,
         fix="move the m's into one of the layout's last parallelism.pp stages (usually the last, before L)",
         megatron_message="Currently we restrict that the MTP should be always in the last "),
    # Stage sizes or accounting (num_layers_in_first/last_pipeline_stage, account_for_*_in_pipeline_split),
    # each check in TransformerConfig.__post_init__'s order; an explicit layout excludes them all.
    Rule(id="LAYOUT_STAGE_SIZES_WITHOUT_ACCOUNT_FOR", severity="error", when=STAGE_SIZES, require=Not(ACCOUNT_FOR),
         message="first/last stage sizes and accounting for the embedding or loss are two ways to split the pipeline: "
                 "give one", source=TC,
         fix="unset parallelism.first_stage_layers and parallelism.last_stage_layers, or "
             "parallelism.account_for_embedding and parallelism.account_for_loss",
         megatron_message="num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage cannot beset at "
                          "the same time with account_for_embedding_in_pipeline_splitand "
                          "account_for_loss_in_pipeline_split"),
    Rule(id="LAYOUT_PIPELINE_LAYOUT_ALONE", severity="error", when=IsSet(LAYOUT),
         require=Not(STAGE_SIZES) & Not(ACCOUNT_FOR),
         message="an explicit pipeline layout places every layer itself: it cannot be combined with stage sizes or "
                 "accounting for the embedding or loss", source=TC,
         fix="drop parallelism.first_stage_layers, parallelism.last_stage_layers, parallelism.account_for_embedding "
             "and parallelism.account_for_loss (E and L in parallelism.pipeline_layout place the embedding and the "
             "loss), or drop parallelism.pipeline_layout",
         megatron_message="pipeline_model_parallel_layout cannot be set with other pipeline layout arguments. "
                          "self.num_layers_in_first_pipeline_stage={num_layers_in_first_pipeline_stage}, "
                          "self.num_layers_in_last_pipeline_stage={num_layers_in_last_pipeline_stage}, "
                          "self.account_for_embedding_in_pipeline_split={account_for_embedding_in_pipeline_split}, "
                          "self.account_for_loss_in_pipeline_split={account_for_loss_in_pipeline_split}."),
    Rule(id="LAYOUT_FIRST_STAGE_LAYERS_POSITIVE", severity="error", when=Not(IsSet(LAYOUT)) & IsSet(FIRST),
         require=FIRST > 0, message="the first pipeline stage must hold at least one layer", source=TC,
         fix="set parallelism.first_stage_layers >= 1, or unset it",
         megatron_message="num_layers_in_first_pipeline_stage must be larger than 0"),
    Rule(id="LAYOUT_FIRST_STAGE_LAYERS_DIVISIBLE_BY_VPP", severity="error",
         when=Not(IsSet(LAYOUT)) & IsSet(FIRST) & IsSet(VPP), require=FIRST % VPP == 0,
         message="the first pipeline stage's layers must be divisible by VPP", source=TC,
         fix="set parallelism.first_stage_layers to a multiple of parallelism.vpp",
         megatron_message="number of layers at first stage: {num_layers_in_first_pipeline_stage}must be divisible by "
                          "virtual pipelineparallel degree {virtual_pipeline_model_parallel_size}"),
    Rule(id="LAYOUT_LAST_STAGE_LAYERS_POSITIVE", severity="error", when=Not(IsSet(LAYOUT)) & IsSet(LAST),
         require=LAST > 0, message="the last pipeline stage must hold at least one layer", source=TC,
         fix="set parallelism.last_stage_layers >= 1, or unset it",
         megatron_message="num_layers_in_last_pipeline_stage must be larger than 0"),
    Rule(id="LAYOUT_LAST_STAGE_LAYERS_DIVISIBLE_BY_VPP", severity="error",
         when=Not(IsSet(LAYOUT)) & IsSet(LAST) & IsSet(VPP), require=LAST % VPP == 0,
         message="the last pipeline stage's layers must be divisible by VPP", source=TC,
         fix="set parallelism.last_stage_layers to a multiple of parallelism.vpp",
         megatron_message="number of layers at last stage: {num_layers_in_last_pipeline_stage}must be divisible by "
                          "virtual pipelineparallel degree {virtual_pipeline_model_parallel_size}"),
    # megatron-core lets the stage sizes exceed the model (36 layers, PP 4, first 10, last 30 passes its
    # checks: the middle ranks get -2 layers each, none built, so 40 layers are built); moeforge refuses it.
    Rule(id="LAYOUT_UNEVEN_STAGES_FIT", severity="error", when=BY_STAGE_SIZES, require=MIDDLE_LAYERS >= 0,
         message="the first and last stage sizes together exceed the model's layers", source=TC, fix=STAGE_FIX,
         megatron_message=None, origin="moeforge"),
    Rule(id="LAYOUT_UNEVEN_MIDDLE_STAGES_MATCH", severity="error", when=BY_STAGE_SIZES,
         require=Or((MIDDLE_LAYERS == 0) & (MIDDLE_STAGES == 0), (MIDDLE_LAYERS != 0) & (MIDDLE_STAGES != 0)),
         message="with first/last stage sizes, layers must remain for the middle pipeline ranks exactly when there "
                 "are middle ranks", source=TC, fix=STAGE_FIX,
         megatron_message="Mismatch: {pipeline_middle_layers} middle layers remaining but {pipeline_middle_stages} "
                          "middle PP stages available."),
    Rule(id="LAYOUT_UNEVEN_MIDDLE_LAYERS_DIVISIBLE", severity="error", when=BY_STAGE_SIZES & (MIDDLE_STAGES != 0),
         require=MIDDLE_LAYERS % MIDDLE_STAGES == 0,
         message="the layers left after the first/last stages must split evenly over the middle pipeline ranks",
         source=TC, fix=STAGE_FIX,
         megatron_message="number of layers at middle stage: {pipeline_middle_layers} must be divisible bythe middle "
                          "pipeline model parallel size {pipeline_middle_stages}"),
    Rule(id="LAYOUT_UNEVEN_MIDDLE_RANK_LAYERS_DIVISIBLE_BY_VPP", severity="error",
         when=BY_STAGE_SIZES & (MIDDLE_STAGES != 0) & IsSet(VPP), require=(MIDDLE_LAYERS // MIDDLE_STAGES) % VPP == 0,
         message="each middle pipeline rank's layers must be divisible by VPP", source=TC, fix=STAGE_FIX,
         megatron_message="number of layers on each middle pipeline rank:{pipeline_middle_rank_layers} must be "
                          "divisible by virtualpipeline parallel degree {virtual_pipeline_model_parallel_size}"),
    Rule(id="LAYOUT_ACCOUNT_FOR_LAYERS_DIVISIBLE_BY_PP", severity="error", when=BY_ACCOUNTING & Not(IsSet(VPP)),
         require=SPLIT_LAYERS % PP == 0,
         message="num_layers, plus one for the embedding and one for the loss when accounted for, must be divisible "
                 "by PP", source=f"{TC}; {ARGS}", fix=ACCOUNT_FIX,
         megatron_message="number of middle layers: {pipeline_split_layers} must be divisible by middle "
                          "pipeline_model_parallel_size {pipeline_model_parallel_size}",
         also=(("Megatron-LM arguments.py", "Number of layers should be divisible by the pipeline-model-parallel "
                "size"),)),
    Rule(id="LAYOUT_ACCOUNT_FOR_LAYERS_DIVISIBLE_BY_PP_WITH_VPP", severity="error", when=BY_ACCOUNTING & IsSet(VPP),
         require=SPLIT_LAYERS % PP == 0,
         message="num_layers, plus one for the embedding and one for the loss when accounted for, must be divisible "
                 "by PP", source=TC, fix=ACCOUNT_FIX,
         megatron_message="num_layers: {pipeline_split_layers} after enableaccount_for_embedding_in_pipeline_split or "
                          "account_for_loss_in_pipeline_split must be divisibleby pipeline_model_parallel_size "
                          "{pipeline_model_parallel_size}"),
    Rule(id="LAYOUT_ACCOUNT_FOR_RANK_LAYERS_DIVISIBLE_BY_VPP", severity="error",
         when=BY_ACCOUNTING & IsSet(VPP) & (SPLIT_LAYERS % PP == 0), require=(SPLIT_LAYERS // PP) % VPP == 0,
         message="each pipeline rank's layers (the embedding and loss accounted for) must be divisible by VPP",
         source=TC, fix=ACCOUNT_FIX,
         megatron_message="number of layers on each pipeline rank: {pipeline_split_rank_layers}(after enable "
                          "account_for_embedding_in_pipeline_split or account_for_loss_in_pipeline_split) must be "
                          "divisible byvirtual_pipeline_model_parallel_size{virtual_pipeline_model_parallel_size}"),
    Rule(id="LAYOUT_HEADS_DIVISIBLE_BY_TP", severity="error", when=TP > 1, require=F("num_attention_heads") % TP == 0,
         message="attention heads must be divisible by TP", source=TC,
         fix="choose parallelism.tp among the divisors of the head count",
         megatron_message="num_attention_heads ({num_attention_heads}) must be a multiple of "
                          "tensor_model_parallel_size ({tensor_model_parallel_size})."),
    Rule(id="LAYOUT_QUERY_GROUPS_VS_TP", severity="error", when=(TP > 1) & IsSet(F("num_query_groups")),
         require=Or(F("num_query_groups") % TP == 0, TP % F("num_query_groups") == 0),
         message="query groups must be a multiple or a divisor of TP", source=TC,
         fix="choose parallelism.tp dividing (or divided by) the number of query groups",
         megatron_message="num_query_groups ({num_query_groups}) must be a multiple or divisor of "
                          "tensor_model_parallel_size ({tensor_model_parallel_size})."),
    Rule(id="LAYOUT_GBS_DIVISIBLE", severity="error",
         when=IsSet(F("data_parallel_size")) & IsSet(F("global_batch_size")),
         require=L.batch_remainder(GBS, MBS, DP) == 0,
         message="global batch size must be divisible by micro batch size x DP", source=MBC,
         fix="change training.global_batch_size to a multiple of micro_batch_size x DP",
         megatron_message="global batch size ({global_batch_size}) is not divisible by micro batch size "
                          "({micro_batch_size}) times data parallel size ({data_parallel_size})"),
    # The interleaved schedule checks its micro-batch count when a step starts (no front-end checks it before):
    # a recipe that trips it is accepted everywhere and fails on the GPUs, so it is refused here.
    Rule(id="LAYOUT_INTERLEAVED_MICROBATCHES_AT_LEAST_PP", severity="error", when=INTERLEAVED,
         require=MICROBATCHES >= PP,
         message="the interleaved schedule (VPP) needs at least PP micro-batches per step: GBS / (micro batch size x "
                 "DP) >= PP", source=PIPELINE_SCHEDULE,
         fix="raise training.global_batch_size to a multiple of micro_batch_size x DP x PP, or unset parallelism.vpp",
         megatron_message="The number of contiguous micro-batches in a virtual pipeline stageshould range in "
                          "[PP={pipeline_parallel_size} , M={num_microbatches}]"),
    Rule(id="LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP", severity="error",
         when=INTERLEAVED & (MICROBATCHES >= PP), require=MICROBATCHES % PP == 0,
         message="with the interleaved schedule (VPP) the micro-batches per step, GBS / (micro batch size x DP), must "
                 "be a multiple of PP", source=PIPELINE_SCHEDULE,
         fix="change training.global_batch_size to a multiple of micro_batch_size x DP x PP, or unset parallelism.vpp",
         megatron_message="The remainder of M (the total micro-batches) divided by N (number of contiguous "
                          "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to the "
                          "pipeline-parallel size, but it is {final_microbatch_group_size}. Otherwise, it introduces "
                          "dependency bubbles in the pipeline and reduces throughput."),
    # Context parallelism splits each sequence into 2 x CP chunks (load balance under causal masking):
    # Megatron-LM refuses a length that does not divide, and megatron-core's get_batch_on_this_cp_rank
    # reshapes the batch into 2 x CP chunks, so no front-end can run it.
    Rule(id="LAYOUT_SEQ_DIVISIBLE_BY_2CP", severity="error", when=CP > 1, require=F("seq_length") % (CP * 2) == 0,
         message="with context parallelism the sequence length must be a multiple of 2 x CP",
         source=f"{ARGS}; megatron-core "
         "utils.py get_batch_on_this_cp_rank",
         fix="set training.seq_length to a multiple of 2 x parallelism.cp, or a smaller parallelism.cp",
         megatron_message="seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1."),
    # Sequence parallelism splits each rank's tokens (seq / CP) over TP: the embedding's output is scattered along
    # the sequence at the first forward, after every front-end accepted the launch.
    Rule(id="LAYOUT_SP_SEQ_DIVISIBLE_BY_TP", severity="error",
         when=F("sequence_parallel").is_(True) & (TP > 1) & IsSet(F("seq_length"))
         & Or(CP == 1, F("seq_length") % (CP * 2) == 0),  # else LAYOUT_SEQ_DIVISIBLE_BY_2CP says it
         require=(F("seq_length") // CP) % TP == 0,
         message="with sequence parallelism each rank's sequence (seq_length / CP) must be divisible by TP",
         source="megatron-core tensor_parallel/mappings.py _split_along_first_dim "
                "(scatter_to_sequence_parallel_region, the embedding's output)",
         fix="set training.seq_length to a multiple of parallelism.tp x parallelism.cp (x 2 with CP), or "
             "parallelism.sp: false",
         megatron_message="First dimension of the tensor should be divisible by tensor parallel size"),
    Rule(id="LAYOUT_MOE_BIAS_NEEDS_ETP1", severity="error",
         when=IsSet(F("num_moe_experts")) & F("add_bias_linear").is_(True),
         require=Or(ETP == 1, Not(IsSet(ETP)) & (TP == 1)),
         message="MoE layers with bias need ETP = 1 (an unset ETP means ETP = TP)", source=TC,
         fix="set parallelism.etp: 1, or use a model without linear bias",
         megatron_message="Bias in Moe is only supported when ETP==1"),
    Rule(id="LAYOUT_SP_NEEDS_TP", severity="error", when=F("sequence_parallel").is_(True), require=TP > 1,
         message="sequence parallelism needs tensor parallelism (TP > 1)",
         source=f"{MPC}; Megatron-Bridge TransformerConfig.finalize quietly sets sequence_parallel=False instead",
         fix="set parallelism.sp: false, or parallelism.tp > 1",
         megatron_message="Cannot use sequence parallelism without tensor parallelism"),
    # megatron-core's MoE layer refuses to train with TP and without SP (whatever EP), at the first forward; its
    # config only warns, and only with EP (LAYOUT_EP_TP_WANTS_SP below)
    Rule(id="MOE_TP_NEEDS_SP", severity="error", when=IsSet(F("num_moe_experts")) & (TP > 1),
         require=F("sequence_parallel").is_(True),
         message="an MoE model with tensor parallelism trains only with sequence parallelism",
         source="megatron-core transformer/moe/moe_layer.py MoELayer.forward (when training)",
         fix="set parallelism.sp: true, or parallelism.tp: 1",
         megatron_message="During training, performance may degrade if MoE and tensor parallelismare enabled without "
                          "also enabling sequence parallelism.", training_only=True),
    Rule(id="LAYOUT_EP_TP_WANTS_SP", severity="warning", when=(EP > 1) & (TP > 1),
         require=F("sequence_parallel").is_(True),
         message="expert parallelism with tensor parallelism should use sequence parallelism", source=MPC,
         fix="set parallelism.sp: true",
         megatron_message="When using expert parallelism and tensor parallelism for training, sequence parallelism "
                          "must be used", training_only=True),
    # Megatron-LM and Megatron-Bridge turn sequence parallelism off at TP = 1 before megatron-core
    # would refuse it (LAYOUT_SP_NEEDS_TP); lint-config only (a recipe keeps the hard rule).
    Rule(id="LAYOUT_SP_WITHOUT_TP_DROPPED_BY_MEGATRON_LM", severity="warning", when=F("sequence_parallel").is_(True),
         require=TP > 1, message="sequence parallelism without tensor parallelism: Megatron-LM turns it off",
         source=ARGS, fix="set sequence_parallel: false, or tensor_model_parallel_size > 1",
         megatron_message="Disabling sequence parallelism because tensor model parallelism is disabled",
         origin="megatron-lm", silent={"sequence_parallel": False}, lint_only=True),
    Rule(id="LAYOUT_SP_WITHOUT_TP_DROPPED_BY_BRIDGE", severity="warning", when=F("sequence_parallel").is_(True),
         require=TP > 1, message="sequence parallelism without tensor parallelism: Megatron-Bridge turns it off",
         source="Megatron-Bridge models/transformer_config.py TransformerConfig.finalize",
         fix="set sequence_parallel: false, or tensor_model_parallel_size > 1", megatron_message=None,
         origin="megatron-bridge", silent={"sequence_parallel": False}, lint_only=True),
    Rule(id="LAYOUT_ETP_DEFAULT_DIFFERS", severity="warning", when=(EP > 1) & (TP > 1) & Not(IsSet(ETP)),
         require=IsSet(ETP), message="an unset ETP means ETP = TP to megatron-core but ETP = 1 to Megatron-Bridge",
         source=BRIDGE_TC, fix="set parallelism.etp explicitly (1 is the usual choice with EP > 1)",
         megatron_message=None, origin="megatron-bridge", silent={"expert_tensor_parallel_size": 1}),
    # Gated DeltaNet layers (experimental_attention_variant gated_delta_net) split their key and value heads over
    # TP, and from megatron-core 0.18 over TP x CP.  megatron-core checks the value heads after the key heads: a
    # multiple of them, they pass then, so their checks need no rule of their own
    Rule(id="LAYOUT_GDN_VALUE_HEADS_MULTIPLE_OF_KEY_HEADS", severity="error", when=GDN & IsSet(GDN_K) & IsSet(GDN_V),
         require=GDN_V % GDN_K == 0,
         message="the model's linear-attention value heads must be a multiple of its key heads", source=TC,
         fix="fix model.architecture.linear_num_value_heads / linear_num_key_heads",
         megatron_message="linear_num_value_heads ({linear_num_value_heads}) must be a multiple of "
                          "linear_num_key_heads ({linear_num_key_heads})."),
    Rule(id="LAYOUT_GDN_KEY_HEADS_DIVISIBLE_BY_TP", severity="error", when=GDN & IsSet(GDN_K), require=GDN_K % TP == 0,
         message="TP must divide the model's linear-attention key (and so value) heads", source=TC,
         fix="choose parallelism.tp dividing model.architecture.linear_num_key_heads",
         megatron_message="linear_num_key_heads must be a multiple of tensor_model_parallel_size.", versions=BEFORE_V18),
    Rule(id="LAYOUT_GDN_NO_CP", severity="error", when=GDN, require=CP == 1,
         message="Gated DeltaNet layers take no context parallelism before megatron-core 0.18", source=TC,
         fix="set parallelism.cp: 1, or use a platform with megatron-core >= 0.18",
         megatron_message="Gated delta net does not support context parallel for now, but got "
                          "self.context_parallel_size={context_parallel_size}.", versions=BEFORE_V18),
    Rule(id="LAYOUT_GDN_KEY_HEADS_DIVISIBLE_BY_TP_CP", severity="error", when=GDN & IsSet(GDN_K),
         require=GDN_K % (TP * CP) == 0,
         message="TP x CP must divide the model's linear-attention key (and so value) heads", source=TC,
         fix="choose parallelism.tp and parallelism.cp whose product divides model.architecture.linear_num_key_heads",
         megatron_message="self.linear_num_key_heads={linear_num_key_heads} must be a multiple of "
                          "(self.tensor_model_parallel_size={tensor_model_parallel_size} * "
                          "self.context_parallel_size={context_parallel_size}).", versions=V18),
    # hierarchical CP (a2a inside, p2p across) needs the level sizes, which a recipe cannot give yet; megatron-core
    # itself does not check, and without them CP communication is silently disabled (Megatron-Bridge's words)
    Rule(id="LAYOUT_CP_A2A_P2P_NEEDS_HIERARCHICAL_SIZES", severity="error", when=F("cp_comm_type") == "a2a+p2p",
         require=F("cp_comm_type") != "a2a+p2p",
         message="cp_comm_type a2a+p2p needs hierarchical context-parallel sizes, which moeforge does not set",
         source=ARGS, fix="set parallelism.cp_comm_type: p2p, a2a or allgather",
         megatron_message="--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm",
         origin="megatron-lm", also=(("Megatron-Bridge training/config.py ConfigContainer.validate",
                                      "hierarchical_context_parallel_sizes must be set when cp_comm_type contains 'a2a+p2p'. Without it, "
                                      "CP communication is silently disabled and each rank attends only to its local chunk, producing "
                                      "artificially high throughput but broken training. Example: for cp=16 across 4 nodes of 8 GPUs, set "
                                      "hierarchical_context_parallel_sizes=[8, 2]."),)),
)
