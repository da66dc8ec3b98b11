"""`moeforge import` of a Hugging Face config.json (or a model directory holding one): its MoE language model as
a moeforge model document, every value with the key it came from; a family or feature moeforge's runtime cannot
build is refused by name. families.py is the table (model_type -> how it says each fact); reader.py (attention,
RoPE) and moe.py (experts, router) the one reader they share, over keys.py (each key with its aliases, kind, source
and class default); config_file.py what a config.json is (multimodal, custom code, quantized); document.py the files
and the command. The import's file-kind dispatch calls `config_path`, `detect` and `main`.

May import: moeforge.compiler.diagnostics, moeforge.compiler.knobs, moeforge.compiler.recipe, moeforge.compiler.targets, moeforge.compiler.launch_reader, moeforge.compiler.project, moeforge.compiler.resources.
families.py imports nothing of moeforge (the fidelity judges read it under .venv312), so this __init__ imports the
rest inside each function (`# lazy:`): importing moeforge.compiler.importer.hf.families must not load the compiler.
"""


def config_path(source: str):
    """The config.json a source names (a file or a model directory), for the import's file-kind dispatch."""
    from moeforge.compiler.launch_reader.kinds import hf_config_path as find  # lazy: see the docstring

    return find(source)


def detect(source: str, text: str | None) -> bool:
    """Whether a source is a Hugging Face config, without loading the rest of the compiler."""
    from moeforge.compiler.launch_reader.kinds import is_hf_config as is_hf  # lazy: see the docstring

    return is_hf(source, text)


def main(args, text: str | None = None) -> int:
    """Import a Hugging Face config (`moeforge import`), loading the reader only when one is imported."""
    from moeforge.compiler.importer.hf.document import main as run  # lazy: see the docstring

    return run(args, text)
