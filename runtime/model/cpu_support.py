"""CPU stand-ins for the CUDA-only calls megatron-core makes on its training path.

Why: the runtime is checked end to end on CPU-only machines (gloo, 2 cores), but megatron-core
calls CUDA APIs unconditionally (streams in the alltoall dispatcher and the combined-1F1B
schedule, nvtx ranges, the CUDA RNG tracker, ``device="cuda"`` allocations in the schedules and
the optimizer, ``param.type() == "torch.cuda.FloatTensor"`` checks in the optimizers).  Each
stand-in below was found by running (see shared/reference/megatron-core-on-cpu.md).  Everything
here is inert unless :func:`install` is called on a machine where ``torch.cuda.is_available()``
is False; on a GPU the real CUDA paths run untouched.

On CPU every kernel runs eagerly in program order, so stream/event synchronisation is a no-op:
the stand-ins keep the control flow of the overlap schedules but cannot show real overlap.
"""

from __future__ import annotations

import contextlib
import types

import torch

_INSTALLED = False


def active() -> bool:
    """True when the stand-ins are installed (CPU-only process)."""
    return _INSTALLED


class _Event:
    """torch.cuda.Event stand-in: work is already complete when recorded on CPU."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        return None

    def wait(self, stream=None):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


class _Stream:
    """torch.cuda.Stream stand-in: one implicit in-order CPU stream."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return event if event is not None else _Event()

    def synchronize(self):
        return None

    def query(self):
        return True


_DEFAULT_STREAM = _Stream()


class _CpuRNGStatesTracker:
    """Named RNG states on the CPU generator, replacing megatron's CUDA RNG tracker.

    Same interface as megatron.core.tensor_parallel.random.CudaRNGStatesTracker
    (reset/get_states/set_states/add/fork/is_initialized); ``fork`` swaps the CPU
    generator state in and out, so dropout under a tracker fork stays reproducible.
    """

    def __init__(self, *args, **kwargs):
        self.reset()

    def is_initialized(self):
        return self._is_initialized

    def reset(self):
        self._is_initialized = False
        self.states_ = {}
        self.seeds_ = set()

    def get_states(self):
        return dict(self.states_)

    def set_states(self, states):
        self._is_initialized = True
        self.states_ = states

    def add(self, name, seed):
        self._is_initialized = True
        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        if name in self.states_:
            raise Exception(f"rng state {name} already exists")
        self.seeds_.add(seed)
        gen = torch.Generator()
        gen.manual_seed(seed)
        self.states_[name] = gen.get_state()

    @contextlib.contextmanager
    def fork(self, name="model-parallel-rng"):
        if name not in self.states_:
            raise Exception(f"rng state {name} is not added")
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)


_CUDA_DEVICES = ("cuda",)


def _is_cuda_device(dev) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, str):
        return dev.split(":")[0] in _CUDA_DEVICES
    return isinstance(dev, int) and not isinstance(dev, bool)


def _backward(mode, tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward with ``mode`` on.  torch 2.13 hands the call to the active mode, which
    is off while it handles it; the pass would then run without the CPU mapping, and activation
    checkpointing recomputes layers in it (a causal mask on ``device="cuda"``).  This is
    torch.autograd.backward past that hand-off (torch/autograd/__init__.py), which megatron-core's
    schedules call."""
    from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
    from torch.autograd.graph import _engine_run_backward

    tensors = (tensors,) if torch.is_tensor(tensors) else tuple(tensors)
    grads = _make_grads(tensors, _tensor_or_tensors_to_tuple(grad_tensors, len(tensors)), is_grads_batched=False)
    with mode:
        _engine_run_backward(tensors, grads, create_graph if retain_graph is None else retain_graph, create_graph,
                             (inputs,) if torch.is_tensor(inputs) else tuple(inputs or ()), allow_unreachable=True,
                             accumulate_grad=True)


class _CudaToCpuMode(torch.overrides.TorchFunctionMode):
    """Maps ``device="cuda"`` allocations to CPU and reports CPU tensors under CUDA type names.

    megatron-core allocates ``torch.zeros(..., device="cuda")`` inside the schedules and
    grad-norm code and checks ``param.type() == "torch.cuda.FloatTensor"`` when building
    (distributed) optimizers; both are process-global assumptions that a CPU run has to answer.
    Pinned host memory needs the CUDA driver too (rope_utils.get_pos_emb_on_this_cp_rank pins the
    CP indices, and YaRN builds its table with them: every CP > 1 YaRN model while building it).
    """

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.autograd.backward:
            return _backward(self, *args, **kwargs)
        if "device" in kwargs and _is_cuda_device(kwargs["device"]):
            kwargs = dict(kwargs, device="cpu")
        if kwargs.get("pin_memory"):
            kwargs = dict(kwargs, pin_memory=False)
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            if isinstance(name, str) and name.startswith("torch.") and ".cuda." not in name:
                return "torch.cuda." + name[len("torch."):]
            return name
        return func(*args, **kwargs)


def device_scope(force: bool = False):
    """Context in which ``device="cuda"`` means CPU (no-op on a GPU machine unless ``force``:
    the meta-device dry run uses it everywhere so that ``.cuda()`` keeps meta tensors meta)."""
    return _CudaToCpuMode() if (_INSTALLED or force) else contextlib.nullcontext()


def _cpu_maybe_move_tensor_to_cpu(tensor, as_numpy=False, record_stream=False):
    """megatron's helper only converts CUDA tensors; the a2a split sizes must become numpy."""
    if torch.is_tensor(tensor) and as_numpy:
        return tensor.detach().to("cpu").clone().numpy()
    return tensor


def _patch_torch_cuda() -> None:
    cuda = torch.cuda
    cuda.Stream = _Stream
    cuda.Event = _Event
    cuda.current_stream = lambda device=None: _DEFAULT_STREAM
    cuda.default_stream = lambda device=None: _DEFAULT_STREAM
    cuda.stream = lambda stream=None: contextlib.nullcontext()
    cuda.synchronize = lambda device=None: None
    cuda.current_device = lambda: "cpu"
    cuda.manual_seed = lambda seed: None
    cuda.manual_seed_all = lambda seed: None
    # There is no CUDA generator: the CPU generator (saved by Megatron-LM as torch_rng_state) and
    # the CPU RNG tracker below hold every random state, so the CUDA state is empty.
    cuda.get_rng_state = lambda device="cuda": torch.empty(0, dtype=torch.uint8)
    cuda.set_rng_state = lambda new_state, device="cuda": None
    cuda.get_rng_state_all = lambda: []
    cuda.set_rng_state_all = lambda new_states: None
    nvtx = types.SimpleNamespace(
        range_push=lambda *a, **k: None,
        range_pop=lambda *a, **k: None,
        range=lambda *a, **k: contextlib.nullcontext(),
        mark=lambda *a, **k: None,
    )
    cuda.nvtx = nvtx
    torch.Tensor.record_stream = lambda self, stream: None


def _patch_megatron() -> None:
    from megatron.core.tensor_parallel import random as mrandom
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    mrandom._CUDA_RNG_STATE_TRACKER = _CpuRNGStatesTracker()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    mrandom.CudaRNGStatesTracker = _CpuRNGStatesTracker
    # activation checkpointing (full recompute, CheckpointFunction) saves and restores the CUDA state
    # through these, which reach torch.cuda.random and torch.cuda's lazy-call queue: empty, as above
    mrandom._get_cuda_rng_state = lambda device="cuda", clone=False, graph_safe=False: torch.empty(0, dtype=torch.uint8)
    mrandom._set_cuda_rng_state = lambda new_state, device=-1, graph_safe=False: None
    moe_utils.maybe_move_tensor_to_cpu = _cpu_maybe_move_tensor_to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = _cpu_maybe_move_tensor_to_cpu
    # megatron-core 0.16.1 references te_general_gemm even when Transformer Engine is absent.
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    # ... and MLA does isinstance(linear_proj, TELinear) where TELinear is a MagicMock
    # placeholder without TE (TypeError: arg 2 must be a type).
    from megatron.core.transformer import multi_latent_attention as mla

    if hasattr(mla, "TELinear") and not isinstance(mla.TELinear, type):
        mla.TELinear = type("_NoTELinear", (), {})


def install_megatron_training() -> None:
    """Stand-ins for Megatron-LM's training package (moeforge.runtime.megatron), CPU only.

    - pretrain() calls initialize_megatron() without ``allow_no_cuda``, which asserts that CUDA is
      available; Megatron-LM's own switch for CPU-only processes is that argument, so it is set.
    - _initialize_distributed() creates the model-parallel groups, and _set_random_seed() seeds the
      model-parallel RNG tracker, only when ``torch.cuda.device_count() > 0`` (then calling
      ``torch.cuda.set_device``): while they run the device count is 1 and set_device does
      nothing, so both happen as on a GPU (the tracker is the CPU one installed above).
    - Building the data iterators draws a base seed for the DataLoader workers from torch's CPU
      generator. On a GPU that generator is not the one dropout draws from (the CUDA one is, and
      checkpoints save both), so data setup does not move the model's random stream; on CPU both
      are the one CPU generator, and a resumed run (which builds its iterators after restoring
      the checkpoint's RNG state) would drift from an uninterrupted one. The CPU generator's
      state is therefore kept unchanged across building the iterators, as it is on a GPU.
    """
    if not _INSTALLED:
        return
    import functools

    from megatron.training import initialize, training

    training.initialize_megatron = functools.partial(initialize.initialize_megatron,
                                                     allow_no_cuda=True)
    for name in ("_initialize_distributed", "_set_random_seed"):
        setattr(initialize, name, _as_if_one_device(getattr(initialize, name)))
    training.build_train_valid_test_data_iterators = _keeping_cpu_rng(
        training.build_train_valid_test_data_iterators)


def _keeping_cpu_rng(function):
    """``function`` run without moving torch's CPU generator."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        state = torch.get_rng_state()
        try:
            return function(*args, **kwargs)
        finally:
            torch.set_rng_state(state)

    return wrapper


def _as_if_one_device(function):
    """``function`` run with torch.cuda reporting one device that set_device need not select."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        count, set_device = torch.cuda.device_count, torch.cuda.set_device
        torch.cuda.device_count, torch.cuda.set_device = (lambda: 1), (lambda device: None)
        try:
            return function(*args, **kwargs)
        finally:
            torch.cuda.device_count, torch.cuda.set_device = count, set_device

    return wrapper


def install() -> bool:
    """Install the stand-ins when no GPU is present; idempotent. Returns whether they are active."""
    global _INSTALLED
    if _INSTALLED:
        return True
    if torch.cuda.is_available():
        return False
    _patch_torch_cuda()
    _patch_megatron()
    _INSTALLED = True
    return True
