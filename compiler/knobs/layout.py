"""The parallel layout, in one place: sizes, the folding identity, derived group sizes.

megatron-core folds one world two ways (parallel_state.initialize_model_parallel):

    attention and dense layers   world = TP  x CP x DP  x PP
    MoE experts                  world = ETP x EP x EDP x PP

so DP = world / (TP*CP*PP) and EDP = world / (ETP*EP*PP), with ETP defaulting to TP when it is
not given (megatron-core ModelParallelConfig: expert_tensor_parallel_size None -> TP).  Every
part of the compiler that needs these numbers takes them from here: the solver's folding of pins
(derive_sizes), its z3 definitions (encoding, through the size functions below, which work on
ints and on z3 terms alike), lint-config, the plan's layout section, and the layout planner.
The runtime never imports the compiler; runtime/plan/document.py keeps one small mirror with the same
messages.

In the style of torchtitan's ParallelDims: a Layout validates itself once, in __post_init__, and
every message carries the formula it checked (``world_size 66 is not divisible by tp*cp*pp =
2*1*4 = 8 (world = tp*cp*dp*pp)``).
"""
from __future__ import annotations

from dataclasses import dataclass

# Knob fields (compiler/knobs/table.py) of the two foldings' non-DP factors, in formula order.
ATTENTION_FACTORS = ("tensor_model_parallel_size", "context_parallel_size", "pipeline_model_parallel_size")
EXPERT_FACTORS = ("expert_tensor_parallel_size", "expert_model_parallel_size", "pipeline_model_parallel_size")
DP_FORMULA = "dp = world_size/(tp*cp*pp)"
EDP_FORMULA = "edp = world_size/(etp*ep*pp)"
FOLDING = "tp*cp*dp*pp = etp*ep*edp*pp = world_size"
MICROBATCHES_FORMULA = "num_microbatches = global_batch_size / (micro_batch_size * dp)"


# The batch arithmetic of megatron-core's num_microbatches_calculator.py, spelled here only (a test finds any
# other spelling of it in compiler/ and runtime/); on ints, or on rule expressions over knob fields.
def num_microbatches(gbs, mbs, dp):
    """Micro-batches per step (floor; batch_remainder says whether the batch splits exactly)."""
    return gbs // (mbs * dp)


def batch_remainder(gbs, mbs, dp):
    """What is left of the global batch after whole micro-batches on every DP rank: 0 when it splits."""
    return gbs % (mbs * dp)


def dp_of_microbatches(gbs, mbs, microbatches):
    """The inverse: the DP size a batch split into `microbatches` per rank implies (import reads launches that
    state num_microbatches rather than the world size)."""
    return gbs // (mbs * microbatches)


def model_size(tp, cp, pp):
    """TP*CP*PP: the ranks that hold one copy of the attention/dense weights (ints or z3 terms)."""
    return tp * cp * pp


def expert_model_size(etp, ep, pp):
    """ETP*EP*PP: the ranks that hold one copy of the experts (ints or z3 terms)."""
    return etp * ep * pp


def effective_etp(etp, tp):
    """Expert TP as megatron-core uses it: TP when expert_tensor_parallel_size is unset."""
    return tp if etp is None else etp


def vpp_from_layers_per_virtual_stage(layers: int, pp: int, per: int, embedding: bool = False,
                                      loss: bool = False) -> int | None:
    """The virtual pipeline size Megatron-LM's validate_args makes of --num-layers-per-virtual-pipeline-stage
    (the embedding and the loss count as layers when the split accounts for them); None for a size of 1.
    LayoutError, in validate_args' words, where it refuses the numbers."""
    layers += int(embedding) + int(loss)
    if per <= 0 or pp <= 0 or layers % pp:
        raise LayoutError("number of layers of the model must be divisible pipeline model parallel size")
    if (layers // pp) % per:
        raise LayoutError("number of layers per pipeline stage must be divisible number of layers per virtual "
                          "pipeline stage")
    vpp = layers // pp // per
    return vpp if vpp != 1 else None


def quotient(world, denominator):
    """world / denominator when it divides, else None."""
    if not denominator or world % denominator:
        return None
    return world // denominator


def derived(values: dict) -> dict:
    """world_size, data_parallel_size and expert_data_parallel_size from knob values.

    Only what every input is known for (world: num_nodes and gpus_per_node, or world_size itself);
    a size whose folding does not divide is None.  EDP is derived only where
    expert_tensor_parallel_size is a key of ``values`` (None there means "TP").
    """
    out: dict = {}
    world = values.get("world_size")
    nodes, per_node = values.get("num_nodes"), values.get("gpus_per_node")
    if nodes is not None and per_node is not None:
        world = out["world_size"] = nodes * per_node
    if world is None:
        return out
    tp, cp, pp = (values.get(f) for f in ATTENTION_FACTORS)
    if None not in (tp, cp, pp):
        out["data_parallel_size"] = quotient(world, model_size(tp, cp, pp))
    ep = values.get("expert_model_parallel_size")
    if "expert_tensor_parallel_size" in values and None not in (tp, ep, pp):
        etp = effective_etp(values["expert_tensor_parallel_size"], tp)
        out["expert_data_parallel_size"] = quotient(world, expert_model_size(etp, ep, pp))
    return out


def derive_sizes(values: dict) -> dict:
    """World, DP and EDP where every input is known (None: does not divide), world from num_nodes x
    gpus_per_node only (a stated world_size is what is being derived): the solver's folding of pins."""
    if values.get("num_nodes") is None or values.get("gpus_per_node") is None:
        return {}
    return derived({k: v for k, v in values.items() if k != "world_size"})


class LayoutError(ValueError):
    """A layout that does not fold; the message names the formula and the numbers."""


def _positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayoutError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Layout:
    """One parallel layout: the given sizes, checked once; derived sizes as properties."""

    world_size: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None          # None: TP (megatron-core's default)
    vpp: int | None = None          # virtual pipeline chunks per stage; None: not interleaved
    gpus_per_node: int | None = None
    num_layers: int | None = None   # given: layers must split evenly over PP (and VPP)

    def __post_init__(self):
        for name in ("world_size", "tp", "cp", "pp", "ep"):
            _positive(name, getattr(self, name))
        for name in ("etp", "vpp", "gpus_per_node", "num_layers"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        world, tp, cp, pp = self.world_size, self.tp, self.cp, self.pp
        if world % self.model_size:
            raise LayoutError(f"world_size {world} is not divisible by tp*cp*pp = {tp}*{cp}*{pp} = "
                              f"{self.model_size} (world = tp*cp*dp*pp)")
        if world % self.expert_model_size:
            raise LayoutError(f"world_size {world} is not divisible by etp*ep*pp = {self.expert_tp}*{self.ep}*{pp}"
                              f" = {self.expert_model_size} (world = etp*ep*edp*pp)")
        if self.vpp is not None and pp == 1:
            raise LayoutError("vpp is set but pp is 1 (interleaving needs pipeline parallelism)")
        if self.gpus_per_node is not None and world > self.gpus_per_node and world % self.gpus_per_node:
            raise LayoutError(f"world_size {world} is not a whole number of nodes of {self.gpus_per_node} GPUs "
                              f"(nodes = world_size/gpus_per_node)")
        if self.num_layers is not None:
            if self.num_layers % pp:
                raise LayoutError(f"num_layers {self.num_layers} is not divisible by pp = {pp} "
                                  "(layers per stage = num_layers/pp)")
            if self.vpp is not None and (self.num_layers // pp) % self.vpp:
                raise LayoutError(f"layers per stage {self.num_layers // pp} (num_layers/pp = {self.num_layers}/{pp}) "
                                  f"is not divisible by vpp = {self.vpp}")

    # ---------------------------------------------------------------- derived sizes
    @property
    def expert_tp(self) -> int:
        """Megatron's expert TP: the explicit ETP, or TP when unset (effective_etp)."""
        return effective_etp(self.etp, self.tp)

    @property
    def model_size(self) -> int:
        """Ranks one dense model replica spans (TP x CP x PP); dp is world_size over it."""
        return model_size(self.tp, self.cp, self.pp)

    @property
    def expert_model_size(self) -> int:
        """Ranks one expert replica spans (ETP x EP x PP); edp is world_size over it."""
        return expert_model_size(self.expert_tp, self.ep, self.pp)

    @property
    def dp(self) -> int:
        """world_size/(tp*cp*pp)."""
        return self.world_size // self.model_size

    @property
    def edp(self) -> int:
        """world_size/(etp*ep*pp)."""
        return self.world_size // self.expert_model_size

    @property
    def nodes(self) -> int | None:
        """Whole nodes the job takes (at least 1); None when the platform does not give its GPUs per node."""
        if self.gpus_per_node is None:
            return None
        return max(1, self.world_size // self.gpus_per_node)

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline rank (VPP, or 1)."""
        return self.vpp or 1

    @property
    def layers_per_stage(self) -> int | None:
        """Decoder layers per pipeline stage as an even split gives them (floor); None when num_layers is unknown."""
        return None if self.num_layers is None else self.num_layers // self.pp

    @property
    def layers_per_virtual_stage(self) -> int | None:
        """Decoder layers per virtual-pipeline chunk (floor over pp x chunks); None when num_layers is unknown."""
        return None if self.num_layers is None else self.num_layers // (self.pp * self.chunks)

    def folding(self) -> str:
        """The identity with numbers: tp*cp*dp*pp = etp*ep*edp*pp = world_size."""
        return (f"{self.tp}*{self.cp}*{self.dp}*{self.pp} = {self.expert_tp}*{self.ep}*{self.edp}*{self.pp}"
                f" = {self.world_size}")

    def stage_layers(self, pp_rank: int) -> list[int]:
        """1-based decoder layer numbers on a pipeline rank under megatron-core's even split
        (interleaved: chunk v holds the v-th block of pp*per layers, stage pp_rank its share)."""
        per = self.layers_per_virtual_stage
        if per is None:
            raise LayoutError("stage_layers needs num_layers")
        return [v * self.pp * per + pp_rank * per + i + 1 for v in range(self.chunks) for i in range(per)]

    # ---------------------------------------------------------------- conversions
    @classmethod
    def from_values(cls, values: dict, num_layers: int | None = None) -> "Layout":
        """From resolved knob values (compiler/knobs/table.py field names)."""
        world = values.get("world_size")
        if world is None:
            world = values["num_nodes"] * values["gpus_per_node"]
        return cls(world_size=world, tp=values["tensor_model_parallel_size"], cp=values["context_parallel_size"],
                   pp=values["pipeline_model_parallel_size"], ep=values["expert_model_parallel_size"],
                   etp=values.get("expert_tensor_parallel_size"),
                   vpp=values.get("virtual_pipeline_model_parallel_size"),
                   gpus_per_node=values.get("gpus_per_node"), num_layers=num_layers)

    @classmethod
    def from_plan(cls, layout: dict, num_layers: int | None = None) -> "Layout":
        """From a plan's layout section (schemas/plan.v1.json)."""
        return cls(world_size=layout["world_size"], tp=layout["tp"], cp=layout["cp"], pp=layout["pp"],
                   ep=layout["ep"], etp=layout.get("etp"), vpp=layout.get("vpp"),
                   gpus_per_node=layout.get("nproc_per_node"), num_layers=num_layers)

    def plan_section(self) -> dict:
        """The plan's layout section (every size stated; etp resolved)."""
        return {"world_size": self.world_size, "nnodes": self.nodes, "nproc_per_node": self.gpus_per_node,
                "tp": self.tp, "pp": self.pp, "vpp": self.vpp, "cp": self.cp, "ep": self.ep,
                "etp": self.expert_tp, "dp": self.dp, "edp": self.edp}
