"""`moeforge import` derives what Megatron-LM's validate_args and model builder derive, reads the vocabulary from
the tokenizer, refuses what it cannot plan, and names what it expected when the file is none of its inputs.
Every launch here is written for these tests; tests/fidelity/test_import_matches_launch.py puts the same
launches through Megatron-LM's own parse_args and validate_args."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeforge.compiler.cli import main
from moeforge.compiler.importer import files as import_files, launch as importer
from moeforge.compiler.importer.vocab import sentencepiece_pieces
from moeforge.compiler.launch_reader.text import parse_flags
from moeforge.compiler.lint.config_lint import lint_config, parse

BASE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 8 "
        "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 --seq-length 128 "
        "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 64 --train-iters 10 --lr 1e-4 "
        "--mock-data --bf16 ")
NULL = "--tokenizer-type NullTokenizer --vocab-size 1000 "


def _import(text: str, root: Path, name: str = "cmd.sh"):
    return importer.import_text(text, name, "h100", root, "derived")


def _compiles(imp, root: Path) -> list[str]:
    recipe_path, _ = import_files.write(imp, root, "cmd.sh", force=True)
    return import_files.compile_verdict(recipe_path, root)


def _noted(imp, start: str) -> str:
    hits = [n for n in imp.notes if n.startswith(start)]
    assert hits, (start, imp.notes)
    return hits[0]


@pytest.mark.parametrize("activation", ["", "--squared-relu ", "--quick-geglu "])
def test_no_linear_bias_turns_bias_activation_fusion_off(activation, root):
    """validate_args: `if not args.add_bias_linear: args.bias_gelu_fusion = False`, the fusion every activation
    but SwiGLU reads; the import said true and its own compile refused the recipe."""
    imp = _import(BASE + NULL + activation + "--disable-bias-linear", root)
    assert imp.recipe["kernels"]["bias_activation_fusion"] is False
    assert "no linear bias" in _noted(imp, "kernels.bias_activation_fusion: false")
    assert _compiles(imp, root) == []
    swiglu = _import(BASE + NULL + "--swiglu --disable-bias-linear", root)  # bias_swiglu_fusion is untouched
    assert swiglu.recipe["kernels"]["bias_activation_fusion"] is True


def test_rope_scaling_is_the_models(root):
    imp = _import(BASE + NULL + "--position-embedding-type rope --use-rope-scaling --rope-scaling-factor 16", root)
    arch = imp.model["architecture"]
    assert (arch["rope_scaling"], arch["rope_scaling_factor"]) == (True, 16.0)
    assert not [t for t, _ in imp.unmapped if "rope" in t]
    assert _compiles(imp, root) == []


def test_wsd_decay_in_samples_and_its_style(root):
    imp = _import(BASE.replace("--train-iters 10 ", "") + NULL + "--train-samples 6400 --lr-decay-style WSD "
                  "--lr-wsd-decay-samples 1280 --lr-wsd-decay-style linear", root)
    sched = imp.recipe["schedule"]
    assert (sched["decay"], sched["wsd_decay_iters"], sched["wsd_decay_style"]) == ("wsd", 20, "linear")
    assert _noted(imp, "schedule.wsd_decay_iters: 20").endswith("(--lr-wsd-decay-samples 1280 in iterations of 64 "
                                                                "samples)")
    assert imp.unmapped == [] and _compiles(imp, root) == []


def test_moe_layer_recompute_is_moe_among_the_recompute_modules(root):
    imp = _import(BASE + NULL + "--moe-layer-recompute", root)
    assert imp.recipe["recompute"] == {"granularity": "selective", "modules": ["core_attn", "moe"]}
    assert "--moe-layer-recompute" not in dict(imp.unmapped)
    full = _import(BASE + NULL + "--moe-layer-recompute --recompute-granularity full --recompute-method uniform "
                   "--recompute-num-layers 1", root)
    assert dict(full.unmapped)["--moe-layer-recompute"].startswith("megatron-core refuses it")


def test_boolean_optional_flags_written_true_in_a_functional_test():
    """argparse.BooleanOptionalAction: --x stores True, --no-x False (the stored parser said 'takes one value')."""
    dests, bad = parse_flags(["--inference-dynamic-batching-prefix-caching", "--no-rl-partial-rollouts"])
    assert bad == []
    assert dests["inference_dynamic_batching_enable_prefix_caching"] is True and dests["rl_partial_rollouts"] is False


@pytest.mark.parametrize("extra", ["--hybrid-layer-pattern M*M*M*M*", "--hybrid-override-pattern MM*-"])
def test_a_mamba_hybrid_is_refused_saying_why(extra, root):
    text = BASE.replace("--num-layers 4 ", "") + NULL + extra
    with pytest.raises(importer.ImportError_, match="a Mamba-hybrid launch .*moeforge plans GPT models"):
        _import(text, root)
    with pytest.raises(importer.ImportError_, match="a Mamba-hybrid launch"):
        _import(BASE.replace("pretrain_gpt.py", "pretrain_mamba.py") + NULL, root)


# ----------------------------------------------------------------------------- the vocabulary

def test_null_tokenizer_vocab_is_padded_as_megatron_lm_pads(root):
    imp = _import(BASE + NULL + "--tensor-model-parallel-size 2 --sequence-parallel", root)
    assert imp.model["architecture"]["vocab_size"] == 1024  # 1000 up to a multiple of 128 x 2
    assert "NullTokenizer: --vocab-size: 1000, padded to a multiple of --make-vocab-size-divisible-by x TP = 256" \
        in _noted(imp, "architecture.vocab_size: 1024")
    unpadded = _import(BASE + NULL + "--no-pad-vocab-size", root)
    assert unpadded.model["architecture"]["vocab_size"] == 1000


def test_gpt2_bpe_vocab_from_its_files_or_gpt2s_own(tmp_path, root):
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({f"t{i}": i for i in range(300)}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    script = tmp_path / "gpt2.sh"
    script.write_text(BASE + "--tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt\n")
    imp = _import(script.read_text(), root, str(script))  # a relative path: beside the script
    assert imp.model["architecture"]["vocab_size"] == 384
    unreachable = _import(BASE + "--tokenizer-type GPT2BPETokenizer --vocab-file /nowhere/gpt2-vocab.json", root)
    assert unreachable.model["architecture"]["vocab_size"] == 50304  # 50257 padded to 128
    untyped = _import(BASE + "--vocab-file ${DATA}/vocab.json --merge-file ${DATA}/merges.txt", root)
    assert untyped.model["architecture"]["vocab_size"] == 50304
    assert "no --tokenizer-type, and --vocab-file / --merge-file are GPT-2 BPE files" in _noted(
        untyped, "architecture.vocab_size: 50304")
    assert "is not reachable here; a GPT-2 BPE vocab.json has 50257 entries" in unreachable.notes[
        [n.startswith("architecture.vocab_size") for n in unreachable.notes].index(True)]


def test_huggingface_tokenizer_json_counts_added_tokens_once(tmp_path, root):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({
        "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(200)}, "unk_token": "w0"},
        "added_tokens": [{"id": 0, "content": "w0"}, {"id": 200, "content": "<eos>"}]}))
    (tok / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"201": {"content": "<pad>"}}}))
    imp = _import(BASE + f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {tok}", root)
    assert imp.model["architecture"]["vocab_size"] == 256  # 202 distinct tokens, padded to 128
    assert imp.recipe["tokenizer"] == {"type": "huggingface", "path": str(tok)}


def _piece(text: bytes) -> bytes:
    inner = b"\x0a" + bytes([len(text)]) + text + b"\x15\x00\x00\x00\x00"  # piece, score
    return b"\x0a" + bytes([len(inner)]) + inner


def test_sentencepiece_model_piece_count(tmp_path, root):
    model = tmp_path / "sp.model"
    model.write_bytes(b"".join(_piece(f"p{i}".encode()) for i in range(130)) + b"\x12\x02\x08\x01")
    assert sentencepiece_pieces(model.read_bytes()) == 130
    imp = _import(BASE + f"--tokenizer-type SentencePieceTokenizer --tokenizer-model {model}", root)
    assert imp.model["architecture"]["vocab_size"] == 256
    with pytest.raises(ValueError):
        sentencepiece_pieces(b"not a model")


def test_an_unknown_vocabulary_names_the_key_to_set(tmp_path, root, capsys):
    text = BASE + "--tokenizer-type HuggingFaceTokenizer --tokenizer-model some-org/some-model"
    note = _noted(_import(text, root), "architecture.vocab_size: unknown here")
    assert "some-org/some-model is not a local directory" in note
    assert "set model.architecture.vocab_size in the model file" in note and "multiple of 128" in note
    # the import compiles what it wrote, and says (on screen and in the recipe) that compile refuses it
    script = tmp_path / "hub.sh"
    script.write_text(text)
    assert main(["import", str(script), "--root", str(root), "--platform", "h100", "--force"]) == 1  # written, refused
    out = capsys.readouterr().out
    assert "compile: refused (1 error(s)); first: " in out and "'vocab_size' is a required property" in out
    header = (root / "imported/hub-imported.yaml").read_text()
    assert "# note: moeforge compile refuses this recipe as imported" in header


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("name, text, said", [
    ("empty.sh", "", "the file is empty"),
    ("notes.txt", "just some words\nand more\n", "no command in it runs pretrain_gpt.py"),
    ("cfg.yaml", "a: 1\nb: [2]\n", "it is a YAML mapping without MODEL_ARGS (keys: a, b)"),
    ("list.txt", "[1, 2]", "it is JSON (a list)"),
    ("frag.sh", 'ARGS=(--num-layers 4 --num-experts 8)\n', "ARGS holds Megatron-LM flags"),
])
def test_a_file_that_is_no_input_gets_one_line_naming_what_was_expected(name, text, said, tmp_path, root, capsys):
    path = tmp_path / name
    path.write_text(text)
    assert main(["import", str(path), "--root", str(root), "--platform", "h100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "a launch script or command line running pretrain_gpt.py" in err and "args file" in err \
        and "Bridge override list" in err and "model_config.yaml" in err and "Hugging Face config.json" in err
    assert said in err


# ----------------------------------------------------------------------------- lint-config's context

def _lint(text: str, name: str = "launch.sh"):
    data, lines = parse(text, name)
    return lint_config(data, lines=lines)


def test_lint_megatron_lm_command_line_with_optimizer_is_megatron_lm():
    cfg, _ = _lint(BASE + NULL + "--optimizer adam --tensor-model-parallel-size 2 --sequence-parallel # H100\n")
    assert cfg.frontend == "megatron-lm" and "pretrain_gpt.py" in cfg.frontend_reason


def test_lint_inference_launch_skips_training_only_errors():
    tp_without_sp = BASE + NULL + "--tensor-model-parallel-size 2 "
    training = {f.rule for f in _lint(tp_without_sp)[1]}
    assert "MOE_TP_NEEDS_SP" in training
    for text in (tp_without_sp.replace("pretrain_gpt.py", "tools/run_text_generation_server.py"),
                 tp_without_sp + "--inference-max-seq-length 128"):
        cfg, findings = _lint(text)
        assert cfg.inference and "MOE_TP_NEEDS_SP" not in {f.rule for f in findings}


def test_lint_checkpoint_args_does_not_judge_absent_model_flags():
    # without --use-checkpoint-args, an absent --num-query-groups is the default (8 heads): fine either way; the
    # absent --num-experts is "no MoE", so an expert-parallel layout is refused
    text = BASE.replace("--num-experts 8 ", "") + NULL
    assert any(f.severity == "error" for f in _lint(text)[1])
    cfg, findings = _lint(text + "--use-checkpoint-args --load /ckpt")
    assert [f.rule for f in findings if f.severity == "error"] == []
