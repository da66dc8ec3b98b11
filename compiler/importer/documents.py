"""The recipe and model documents `moeforge import` builds (compiler/importer/launch.py for Megatron-LM launches,
compiler/importer/bridge.py for Megatron-Bridge override lists): dotted-path writes, and the node count a launch
implies when it does not say."""
from __future__ import annotations

import math

from moeforge.compiler.knobs import layout as L


def put(doc: dict, dotted: str, value) -> None:
    """Set a dotted path in a document, making the mappings on the way: how each importer files a value."""
    node = doc
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def put_path(recipe: dict, model: dict, path: str, value) -> None:
    """A knob's path: `model.` ones into the model document, the rest into the recipe."""
    if path.startswith("model."):
        put(model, path[len("model."):], value)
    else:
        put(recipe, path, value)


def has_path(recipe: dict, model: dict, path: str) -> bool:
    """Whether an imported document states a path (`model.` paths in the model document), set even to None."""
    node = model if path.startswith("model.") else recipe
    for part in path.split(".")[1 if path.startswith("model.") else 0:]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def nodes(recipe: dict, platform: dict, notes: dict, launcher: dict, decided: list) -> int | None:
    """The launch's node count: the launcher's, its WORLD_SIZE's, its micro-batch count's, else the fewest
    nodes its layout fits (a decision, noted)."""
    per = int(platform.get("gpus_per_node") or 8)
    par = recipe.get("parallelism", {})
    tp, pp, cp, ep = (int(par.get(k) or 1) for k in ("tp", "pp", "cp", "ep"))
    etp = L.effective_etp(par.get("etp") or None, tp)
    training = recipe.get("training", {})
    mbs, gbs = training.get("micro_batch_size", 1), training.get("global_batch_size")
    env = launcher.get("env", {})
    nnodes = launcher.get("nnodes") or env.get("NNODES") or env.get("NUM_NODES") or env.get("SLURM_NNODES")
    if nnodes and str(nnodes).isdigit():
        return int(nnodes)
    world = env.get("WORLD_SIZE")
    if world and str(world).isdigit():
        return max(1, int(world) // per)
    if isinstance(notes.get("num_microbatches"), int) and gbs:
        world = L.dp_of_microbatches(gbs, mbs, notes["num_microbatches"]) * L.model_size(tp, cp, pp)
        return max(1, -(-world // per))
    model, experts = L.model_size(tp, cp, pp), L.expert_model_size(etp, ep, pp)
    count = max(1, -(-math.lcm(model, experts) // per))
    decided.append(f"resources.nodes: {count} (the launch does not say; the fewest nodes that fit "
                   f"TP*CP*PP = {model} and ETP*EP*PP = {experts})")
    return count
