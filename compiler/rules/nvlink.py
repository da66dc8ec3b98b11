"""NVLink domains: an expert-parallel group should stay inside one.

The EP all-to-all runs on every MoE layer, forward and backward; inside an NVLink domain it runs at
NVLink speed, across domains over InfiniBand/Ethernet (an NVL72 rack: 1.8 TB/s per GPU inside,
about 50 GB/s out).

Which ranks form an EP group: megatron-core's expert RankGenerator orders the ranks tp-cp-ep-dp-pp
with cp = 1 (parallel_state.initialize_model_parallel, the default `order`), so an EP group is EP
ranks at stride ETP inside a block of ETP x EP consecutive ranks (the "span"; ETP is TP when unset).
Where ranks sit: one task per rank, filling nodes in order (srun's block distribution); on a
platform whose NVLink domain spans nodes (NVL72), launch.sbatch asks Slurm's block topology for
segments of nodes that each lie in one domain (--segment, compiler/targets/emit.py nvlink_segment), so a
block of ranks stays in one domain when a segment can hold whole blocks.

The group stays inside one domain when
- the whole job fits one domain (world <= nvlink_domain), or
- domains within a node (nvlink_domain <= GPUs per node): the span divides the domain, or
- domains spanning nodes: the span divides the GPUs per node, or is a whole number of nodes and at
  most the domain (then a segment of whole EP groups exists). Other spans (neither divides the
  other) are reported even where a segment might still hold them: rare, and the warning says why.

An EP group larger than a node on an 8-GPU-per-node platform (H100, B200: the NVLink domain is the
node) is the usual inter-node expert parallelism, chosen on purpose; the dispatcher advice
(ADVICE_EP_OVERLAP_PAYS_INTER_NODE, ADVICE_FLEX_FOR_CROSS_NODE_EP) covers it, so it is not warned
about here. On such platforms only a span that would fit a node but straddles two is.
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, IsSet, Not, Or

TP, EP, ETP = F("tensor_model_parallel_size"), F("expert_model_parallel_size"), F("expert_tensor_parallel_size")
NVL, PER_NODE, WORLD = F("nvlink_domain"), F("gpus_per_node"), F("world_size")
ON_GPU = F("device") == "cuda"

SOURCE = ("megatron-core parallel_state.initialize_model_parallel (expert RankGenerator, order tp-cp-ep-dp-pp: "
          "an EP group is EP ranks at stride ETP within ETP x EP consecutive ranks); Slurm sbatch(1) --segment "
          "and topology/block (https://slurm.schedmd.com/topology.html#block), as launch.sbatch uses them")


def _applies(span):
    """The layout is one where the question arises (see the module docstring)."""
    return Or(NVL > PER_NODE, span <= NVL)


def _fits(span):
    return Or(WORLD <= NVL,
              (NVL <= PER_NODE) & (NVL % span == 0),
              (NVL > PER_NODE) & Or(PER_NODE % span == 0, (span % PER_NODE == 0) & (span <= NVL)))


def _either(make):
    """make(span) with span = ETP x EP, ETP being TP when unset (megatron-core's default)."""
    return Or(IsSet(ETP) & make(ETP * EP), Not(IsSet(ETP)) & make(TP * EP))


RULES = (
    Rule(id="NVLINK_EP_GROUP_SPANS_DOMAINS", severity="warning", when=ON_GPU & (NVL > 1) & (EP > 1) & _either(_applies),
         require=_either(_fits),
         message="an expert-parallel group (ETP x EP consecutive ranks in megatron-core's order) does not fit in one "
                 "NVLink domain: its all-to-all, on every MoE layer, crosses the slower network between domains",
         source=SOURCE,
         fix="choose parallelism.ep (and etp) so that ETP x EP divides the NVLink domain: on NVL72 a multiple of the "
             "GPUs per node and at most 72 (e.g. 8, 16, 32, 64 with 4 GPUs per node), on 8-GPU nodes a divisor of 8",
         megatron_message=None, origin="moeforge"),
)
