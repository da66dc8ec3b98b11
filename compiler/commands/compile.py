"""`moeforge compile RECIPE`: check, solve and write build/<recipe>/ (launch compiles a recipe the same way)."""
from __future__ import annotations

from pathlib import Path

from moeforge.compiler import driver, project
from moeforge.compiler.commands.options import output_arguments, recipe_arguments
from moeforge.compiler.diagnostics import CompileError, error, printable, render_all, shown
from moeforge.compiler.targets import emit


def arguments(c) -> None:
    """compile's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    recipe_arguments(c)
    c.add_argument("--out", default=None, help="build root (default: build/ under the project root)")
    output_arguments(c)


def run(args) -> int:
    """Compile and write build/<recipe>/ (a CompileError is reported by cli.py with exit 1)."""
    compiled, build_dir, kept = write_build(args)
    report_build(compiled, build_dir, kept, args)
    return 0


def write_build(args):
    """Compile args.recipe and write its build directory (under args.out): (the compiled recipe, the build
    directory as the scripts name it, the build directory's warnings)."""
    compiled = driver.compile(args.recipe, args.overrides, strict=args.strict)
    # through a symlinked build directory to where it points: the scripts name that place (build_dir)
    out = (Path(args.out or project.build()) / compiled.composed.recipe_id).resolve()
    build_dir = _relative(out)
    try:
        kept = emit.write_atomically(out, emit.render(compiled.plan, compiled.composed.data, build_dir))
    except OSError as exc:
        raise CompileError([error("E_IO", f"cannot write the build to {out}: {exc.strerror or exc}",
                                  help="choose a writable --out directory")]) from None
    return compiled, build_dir, kept


def report_build(compiled, build_dir: str, kept: list, args) -> None:
    """What compile prints: the warnings (and advice) shown, with those of the build directory (kept: a run's
    results both kept), then a one-line summary of the build."""
    printed = shown(compiled.diagnostics + kept, args.quiet, args.advice)
    if printed:
        print(render_all(printed, args.format))
    if args.format == "text":
        lay = compiled.plan["layout"]
        tc = compiled.plan["transformer_config"]
        print(printable(f"compiled {compiled.composed.recipe_id} -> {build_dir}/  "
                        f"({lay['world_size']} ranks: TP{lay['tp']} PP{lay['pp']} EP{lay['ep']} DP{lay['dp']}; "
                        f"dispatcher {tc.get('moe_token_dispatcher_type')}; EP overlap "
                        f"{'on' if tc.get('overlap_moe_expert_parallel_comm') else 'off'}; delayed wgrad "
                        f"{'on' if tc.get('delay_wgrad_compute') else 'off'})"))


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(project.root().resolve()))
    except ValueError:
        return str(path.resolve())
