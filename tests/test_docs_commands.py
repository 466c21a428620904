"""Documented command lines are real: every command in a code block of README.md, docs/**/*.md, launch/README.md and
notebooks/README.md still parses against the code it names (nothing runs).

* ``jaxdrive ...``: the real parser (``jaxdrive.cli.build_parser``); for ``jaxdrive train``, the ``--config`` file loads
  and its ``field=value`` overrides apply, as ``jaxdrive.train_cli`` does before training.
* ``python SCRIPT.py ...`` / ``python -m jaxdrive.X ...``: the script exists; where it builds an ``argparse`` parser,
  its ``add_argument`` calls are replayed from the source (no import: benchmarks import JAX and more) and the
  documented arguments parsed by that parser.
* ``bash SCRIPT``, ``SCRIPT.sh ...``, ``sbatch SCRIPT ...``: the script exists; the launchers that hand their arguments
  to ``jaxdrive`` (``launch/slurm.sbatch``, ``launch/tpu_pod.sh``, ``launch/local.py -- ...``) have those parsed too.
* Every argument naming a path in the repository (``configs/``, ``benchmarks/``, ``launch/``, ``docs/`` ...) exists.

Code blocks are fenced (bash, sh, shell, console or no language) or indented by four spaces. A logical line joins
``\\`` continuations; ``#`` comments go; ``&&`` / ``;`` / ``|`` (spaced) separate commands; leading ``NAME=value``
assignments are stripped (a line of assignments alone sets shell variables that later ``$NAME`` uses expand);
``cd DIR`` changes the directory later relative paths are read from. Doc notation: ``a|b`` (no spaces) is checked
once per alternative, ``[--flag V]`` as if given, a path ``configs/judge_{sft,grpo}[_tiny].py`` as each of the four
files it stands for, a bare ``...`` (more arguments) is dropped, and a ``jaxdrive train`` override ``field=...`` (a
value to fill in) only has to name a field of the config. A line whose first word is no known command (output
samples, file listings) is not a command.

Commands in inline code spans of the prose are checked too, as fragments: a missing required argument or an
upper-case placeholder (``--count N``) is no finding there; an unknown flag, subcommand, script or file still is.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC_FILES = sorted({REPO / "README.md", REPO / "launch" / "README.md", REPO / "notebooks" / "README.md",
                    *(REPO / "docs").rglob("*.md")})
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh"}
REPO_DIRS = ("configs/", "benchmarks/", "launch/", "notebooks/", "docs/", "jaxdrive/", "tests/")
# launchers that run `jaxdrive ARGS...` with the arguments after their own N leading ones
JAXDRIVE_PASSTHROUGH = {"launch/slurm.sbatch": 0, "launch/tpu_pod.sh": 2}
# wrapper word -> (its options that take a value, its own positional arguments before the command)
WRAPPERS = {"nice": ({"-n"}, 0), "time": (set(), 0), "timeout": ({"-s", "-k", "--signal", "--kill-after"}, 1),
            "env": ({"-u", "--unset"}, 0)}
COMMANDS = {"jaxdrive", "python", "python3", "bash", "sh", "sbatch", "kubectl", "pip", "cd", "jupytext"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SUBCOMMAND = re.compile(r"^(-|[a-z][a-z0-9_-]*$)")


@dataclass
class DocCommand:
    """One documented command: ``argv`` after the shell notation above, ``cwd`` relative to the repository root."""
    line: int
    text: str
    argv: list[str]
    cwd: str = "."


# ---------------------------------------------------------------------------------------------------------- extraction

def code_blocks(markdown: str) -> list[tuple[str, list[tuple[int, str]]]]:
    """(language, [(line number, text)]) of each fenced block and each four-space-indented block (one that follows a
    blank line; an indented line right after text continues a paragraph or list item)."""
    blocks, lines = [], markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if fence:
            marker, body = fence.group(2), []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append((i + 1, lines[i]))
                i += 1
            blocks.append((fence.group(3).lower(), body))
            i += 1
            continue
        if lines[i].startswith("    ") and lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append((i + 1, lines[i][4:]))
                i += 1
            blocks.append(("", body))
            continue
        i += 1
    return blocks


def logical_lines(body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Joins backslash continuations; each logical line keeps the number of its first physical line."""
    out, start, parts = [], None, []
    for number, text in body:
        if start is None:
            start = number
        if text.rstrip().endswith("\\"):
            parts.append(text.rstrip()[:-1])
            continue
        parts.append(text)
        out.append((start, " ".join(p.strip() for p in parts)))
        start, parts = None, []
    if parts:
        out.append((start, " ".join(p.strip() for p in parts)))
    return out


def _expand_variables(text: str, variables: dict[str, str]) -> str:
    def value(m):
        name = m.group(1) or m.group(2)
        return variables.get(name, m.group(0))
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", value, text)


def _segments(tokens: list[str]) -> list[list[str]]:
    out, current = [], []
    for t in tokens:
        if t in ("&&", "||", ";", "|"):
            out.append(current)
            current = []
        else:
            current.append(t)
    return [s for s in [*out, current] if s]


def _strip_wrappers(argv: list[str]) -> list[str]:
    """Drops leading NAME=value assignments and wrappers such as ``nice -n 5`` / ``timeout 60``."""
    while argv:
        if ASSIGNMENT.match(argv[0]):
            argv = argv[1:]
        elif argv[0] in WRAPPERS:
            (takes_value, positional), argv = WRAPPERS[argv[0]], argv[1:]
            while argv and argv[0].startswith("-"):
                argv = argv[2:] if argv[0] in takes_value else argv[1:]
            argv = argv[positional:]
        else:
            return argv
    return argv


def _is_command(argv: list[str]) -> bool:
    word = argv[0]
    if word == "jaxdrive":  # "jaxdrive (process 0 of 2): ..." is an output sample
        return len(argv) == 1 or bool(SUBCOMMAND.match(argv[1]))
    return word in COMMANDS or bool(re.match(r"^(\./)?(launch|benchmarks)/\S+$", word))


def extract_commands(markdown: str) -> list[DocCommand]:
    """The command lines of ``markdown``'s shell code blocks (see the module docstring for the notation)."""
    commands = []
    for language, body in code_blocks(markdown):
        if language not in SHELL_LANGUAGES:
            continue
        variables, cwd = {}, "."
        for number, text in logical_lines(body):
            text = re.sub(r"(?<=\s)\.\.\.(?=\s|$)", "", _expand_variables(text, variables))  # bare "...": more args
            try:
                tokens = shlex.split(text, comments=True)
            except ValueError as e:  # unbalanced quotes: a command only if it starts like one
                words = _strip_wrappers(text.split())
                if words and _is_command(words):
                    commands.append(DocCommand(number, text, ["<unparsable>", str(e)], cwd))
                continue
            for segment in _segments(tokens):
                if all(ASSIGNMENT.match(t) for t in segment):  # GRPO="..." sets a variable for later lines
                    variables.update(t.split("=", 1) for t in segment)
                    continue
                argv = _strip_wrappers(segment)
                if not argv or not _is_command(argv):
                    continue
                if argv[0] == "cd" and len(argv) == 2:
                    cwd = os.path.normpath(os.path.join(cwd, argv[1]))
                    continue
                commands.append(DocCommand(number, text, argv, cwd))
    return commands


def inline_commands(markdown: str) -> list[DocCommand]:
    """Commands in inline code spans of the prose (`` `jaxdrive score --workers N` ``), code blocks left out; a span may
    run over a line break."""
    lines = markdown.splitlines()
    for _, body in code_blocks(markdown):
        for number, _ in body:
            lines[number - 1] = ""
    prose, commands = "\n".join(lines), []
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose):
        span = " ".join(m.group(1).split())
        if not re.match(r"^([A-Za-z_]\w*=\S+ )*(jaxdrive|python3?|bash|sbatch) ", span + " "):
            continue
        for c in extract_commands(f"```\n{span}\n```\n"):
            commands.append(DocCommand(prose.count("\n", 0, m.start()) + 1, span, c.argv, c.cwd))
    return commands


PATH_PATTERN = re.compile(r"^[\w.-]*/[\w./{},\[\]-]*$")  # configs/judge_{sft,grpo}[_tiny].py


def _path_choices(word: str) -> list[str]:
    """The paths a word in path notation stands for: ``{a,b}`` either, ``[x]`` with or without."""
    m = re.search(r"\{([^{}]*)\}|\[([^\[\]]*)\]", word)
    if not m:
        return [word]
    options = m.group(1).split(",") if m.group(1) is not None else ["", m.group(2)]
    return [p for o in options for p in _path_choices(word[:m.start()] + o + word[m.end():])]


def expand_notation(argv: list[str]) -> list[list[str]]:
    """``[--opt V]`` -> ``--opt V``; ``a|b|c`` -> one argv per alternative (the other such words at their first)."""
    plain, in_group = [], False
    for t in argv:
        if t.startswith("[") and not in_group and len(t) > 1:
            t, in_group = t[1:], True
        if in_group and t.endswith("]"):
            t, in_group = t[:-1], False
        if t:
            plain.append(t)
    choices = [_path_choices(t) if PATH_PATTERN.match(t) else t.split("|") for t in plain]
    variants = [[c[0] for c in choices]]
    for i, options in enumerate(choices):
        for alternative in options[1:]:
            variants.append([*variants[0][:i], alternative, *variants[0][i + 1:]])
    return variants


# ------------------------------------------------------------------------------------------------------------ checking

@functools.lru_cache(maxsize=1)
def _jaxdrive_parser() -> argparse.ArgumentParser:
    from jaxdrive.cli import build_parser

    return build_parser()


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, str | None]:
    """(namespace, None), or (None, argparse's error message) where it would exit with an error."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(argv), None
    except SystemExit as e:
        if e.code in (0, None):  # --help
            return None, None
        lines = err.getvalue().strip().splitlines()
        return None, lines[-1] if lines else f"exit status {e.code}"


def check_jaxdrive(args: list[str], cwd: str) -> list[str]:
    """Problems with ``jaxdrive ARGS``: argparse's error, or for ``train`` the config file's / an override's."""
    ns, error = _parse(_jaxdrive_parser(), args)
    if error:
        return [error]
    if ns is None or getattr(ns, "command", None) != "train":
        return []
    from jaxdrive.train_cli import apply_overrides, load_config

    placeholders = [o.split("=", 1)[0] for o in ns.overrides if o.endswith("=...")]
    try:
        cfg = apply_overrides(load_config(str(REPO / cwd / ns.config)),
                              [o for o in ns.overrides if not o.endswith("=...")])
    except Exception as e:  # noqa: BLE001 - any failure to resolve the config is the finding
        return [f"{type(e).__name__}: {e}".replace(str(REPO) + os.sep, "")]
    problems = []
    for key in placeholders:  # field=... : a value for the reader to fill in; the field must exist
        node = cfg
        for part in key.split("."):
            if not hasattr(node, "keys") or part not in node:
                problems.append(f"override {key}=...: no config field {part!r}")
                break
            node = node[part]
    return problems


_ARGPARSE_NAMES = {"REMAINDER": argparse.REMAINDER, "SUPPRESS": argparse.SUPPRESS, "ONE_OR_MORE": argparse.ONE_OR_MORE,
                   "ZERO_OR_MORE": argparse.ZERO_OR_MORE, "OPTIONAL": argparse.OPTIONAL,
                   "BooleanOptionalAction": argparse.BooleanOptionalAction}
_KEPT_KEYWORDS = {"action", "nargs", "choices", "required", "dest", "const", "metavar"}


def _static_value(node: ast.expr):
    """A literal, argparse.X, or int / float / str as a ``type``; ``LookupError`` for anything computed."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "argparse" \
            and node.attr in _ARGPARSE_NAMES:
        return _ARGPARSE_NAMES[node.attr]
    if isinstance(node, ast.Name) and node.id in ("int", "float", "str"):
        return {"int": int, "float": float, "str": str}[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise LookupError(ast.dump(node)) from None


@functools.lru_cache(maxsize=None)
def script_parser(path: Path) -> argparse.ArgumentParser | None:
    """An ArgumentParser with the ``add_argument`` calls of the script at ``path`` replayed from its source (computed
    keyword values such as ``choices=sorted(X)`` or a custom ``type`` are left out), or None where the script builds
    no single flat parser (no argparse, sub-commands, or several parsers)."""
    tree = ast.parse(path.read_text(), str(path))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    parsers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        getattr(n.func, "attr", None) == "ArgumentParser" or getattr(n.func, "id", None) == "ArgumentParser")]
    if len(parsers) != 1 or any(c.func.attr in ("add_subparsers", "parse_known_args") for c in calls):
        return None
    parser = argparse.ArgumentParser(prog=str(path.relative_to(REPO)), add_help=True)
    for call in sorted((c for c in calls if c.func.attr == "add_argument"), key=lambda c: (c.lineno, c.col_offset)):
        names = [_static_value(a) for a in call.args]
        kwargs = {}
        for kw in call.keywords:
            if kw.arg == "type" or kw.arg in _KEPT_KEYWORDS:
                try:
                    kwargs[kw.arg] = _static_value(kw.value)
                except LookupError:
                    continue
        parser.add_argument(*names, **kwargs)
    return parser


def _script_path(word: str, cwd: str) -> Path:
    return (REPO / cwd / word).resolve()


def _module_path(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def check_script(path: Path, args: list[str], cwd: str, shown: str) -> list[str]:
    """Problems with running the repository script ``path`` with ``args``."""
    if not path.is_file():  # worded as check_command's path check: one finding, not two
        return [f"{os.path.relpath(path, REPO)}: no such file or directory in the repository"]
    rel = path.relative_to(REPO).as_posix()
    if rel in JAXDRIVE_PASSTHROUGH:
        own = JAXDRIVE_PASSTHROUGH[rel]
        if len(args) < own:
            return [f"{shown}: expected {own} arguments before the jaxdrive ones, got {args}"]
        return check_jaxdrive(args[own:], cwd) if args[own:] else []
    if path.suffix != ".py":
        return []
    problems = []
    if "--" in args:  # a launcher: its own flags, then the command it runs
        inner = args[args.index("--") + 1:]
        problems += check_argv(inner, cwd)
    parser = script_parser(path)
    if parser is not None:
        _, error = _parse(parser, args)
        if error:
            problems.append(error)
    return problems


def check_argv(argv: list[str], cwd: str) -> list[str]:
    """Problems with one command (``argv`` in doc notation already expanded)."""
    word, args = argv[0], argv[1:]
    if word == "jaxdrive":
        return check_jaxdrive(args, cwd)
    if word in ("python", "python3"):
        if args[:1] == ["-m"] and len(args) > 1:
            if not args[1].startswith("jaxdrive."):
                return []  # python -m pytest ...: not ours
            path = _module_path(args[1])
            return [f"python -m {args[1]}: no such module in the repository"] if path is None else \
                check_script(path, args[2:], cwd, args[1])
        script = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if script is None:
            return []
        return check_script(_script_path(args[script], cwd), args[script + 1:], cwd, args[script])
    if word in ("bash", "sh", "sbatch"):
        script = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if script is None:
            return []
        return check_script(_script_path(args[script], cwd), args[script + 1:], cwd, args[script])
    if re.match(r"^(\./)?(launch|benchmarks)/", word):
        return check_script(_script_path(word, cwd), args, cwd, word)
    return []


def repo_paths(argv: list[str], cwd: str) -> list[str]:
    """The arguments (or ``--flag=`` / ``field=`` values) naming a path in the repository, relative to its root: words
    with a ``/`` or a file extension that resolve (from ``cwd``) under one of ``REPO_DIRS``; a config file's ``:ARG``
    (``configs/agent_sft.py:2``, its ``get_config`` argument) is not part of the path."""
    out = []
    for token in argv[1:]:
        for value in (token, token.split("=", 1)[-1]):
            value = re.sub(r"(\.py):[^/]*$", r"\1", value)
            if value.startswith(("/", "~", "$", "-")) or not ("/" in value or re.search(r"\.\w+$", value)):
                continue
            rel = os.path.normpath(os.path.join(cwd, value))
            if rel.startswith(REPO_DIRS) or (rel + "/").startswith(REPO_DIRS):
                out.append(rel)
                break
    return out


def check_command(command: DocCommand) -> list[str]:
    """Every problem with one documented command (each variant of its notation), deduplicated."""
    if command.argv[:1] == ["<unparsable>"]:
        return [f"cannot split into words: {command.argv[1]}"]
    problems = []
    for argv in expand_notation(command.argv):
        for rel in repo_paths(argv, command.cwd):
            if not list(REPO.glob(rel)) and not (REPO / rel).exists():
                problems.append(f"{rel}: no such file or directory in the repository")
        if argv[0] != "pip":
            problems += check_argv(argv, command.cwd)
    return list(dict.fromkeys(problems))


# In prose a command is often a fragment (`jaxdrive judge run`, `--count N`): missing arguments and upper-case
# placeholders are not findings there; an unknown flag, subcommand, choice, script, file or config field still is.
FRAGMENT = re.compile(r"arguments are required|expected (one|at least one) argument|"
                      r"(invalid \w+ value: |invalid choice: |got )'([A-Z][A-Z0-9_]*|\.\.\.)'")


def doc_problems(path: Path, inline: bool = False) -> list[str]:
    """``file:line: command\\n    problem`` for each problem of each command documented in ``path``: in its code
    blocks, or (``inline``) in the inline code spans of its prose."""
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    text, out = path.read_text(), []
    for command in (inline_commands(text) if inline else extract_commands(text)):
        for problem in check_command(command):
            if not (inline and FRAGMENT.search(problem)):
                out.append(f"{shown}:{command.line}: {command.text.strip()}\n    {problem}")
    return out


# --------------------------------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_documented_commands_are_real(doc):
    problems = doc_problems(doc)
    assert not problems, f"{len(problems)} documented command(s) do not match the code:\n" + "\n".join(problems)


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_commands_named_in_the_prose_are_real(doc):
    problems = doc_problems(doc, inline=True)
    assert not problems, f"{len(problems)} command(s) in inline code do not match the code:\n" + "\n".join(problems)


def test_the_extractor_finds_the_documented_commands():
    commands = {doc.relative_to(REPO).as_posix(): extract_commands(doc.read_text()) for doc in DOC_FILES}
    total = sum(len(c) for c in commands.values())
    words = {c.argv[0] if c.argv[0] != "python" else " ".join(c.argv[:2]) for cs in commands.values() for c in cs}
    assert total >= 80, f"only {total} commands found: {commands}"
    assert len(commands["README.md"]) >= 15 and len(commands["launch/README.md"]) >= 5, commands
    assert {"jaxdrive", "python benchmarks/score_end_to_end.py", "python launch/local.py", "sbatch"} <= words, words
    assert any(c.argv[:2] == ["jaxdrive", "train"] for cs in commands.values() for c in cs)
    inline = sum(len(inline_commands(doc.read_text())) for doc in DOC_FILES)
    assert inline >= 100, f"only {inline} commands found in inline code"


BROKEN_DOC = """\
# A page with stale commands

```bash
jaxdrive score --count 8 --out runs/ok        # fine
jaxdrive score --made-up-flag 3
jaxdrive scenes regenerate --count 3 --out s/
jaxdrive train sft --config configs/sft_tiny.py no_such_field=1 \\
    steps=3
jaxdrive train grpo --config configs/no_such_config.py
XLA_FLAGS=--xla_force_host_platform_device_count=8 jaxdrive score --ep-mode scene|sideways
pip install -e . && jaxdrive vocab build --size 4 --out v.npy --bogus
python benchmarks/score_end_to_end.py --ks 16 --no-such-option
python benchmarks/no_such_benchmark.py
bash launch/no_such_launcher.sh
python launch/local.py -n 2 -- jaxdrive score --count x
jaxdrive score --gates docs/no_such_gates.json
```

Text, then an indented block:

    sbatch --nodes=2 launch/slurm.sbatch score --shard-size 8 --nope
    jaxdrive (process 0 of 2): an output sample, not a command
    timeout -s INT 60 jaxdrive score --out "runs/unclosed
"""


def test_the_checker_reports_each_stale_command_with_its_line(tmp_path):
    doc = tmp_path / "stale.md"
    doc.write_text(BROKEN_DOC)
    problems = doc_problems(doc)
    by_line = {}
    for p in problems:
        line = int(p.split(":", 2)[1])
        by_line.setdefault(line, []).append(p)
    expected = {5: "unrecognized arguments: --made-up-flag", 6: "invalid choice: 'regenerate'",
                7: "no config field 'no_such_field'", 9: "no such file configs/no_such_config.py",
                10: "invalid choice: 'sideways'", 11: "unrecognized arguments: --bogus",
                12: "unrecognized arguments: --no-such-option", 13: "benchmarks/no_such_benchmark.py: no such file",
                14: "launch/no_such_launcher.sh: no such file", 15: "--count: invalid int value: 'x'",
                16: "docs/no_such_gates.json: no such file", 21: "unrecognized arguments: --nope",
                23: "cannot split into words: No closing quotation"}
    for line, text in expected.items():
        assert any(text in p for p in by_line.get(line, [])), (line, text, problems)
    assert set(by_line) == set(expected), problems  # the good lines (4, the output sample) are not reported
    assert "stale.md:7: jaxdrive train sft --config configs/sft_tiny.py no_such_field=1 steps=3" in by_line[7][0]


def test_prose_fragments_pass_but_stale_flags_in_prose_do_not(tmp_path):
    doc = tmp_path / "prose.md"
    doc.write_text("Run `jaxdrive judge run` with `jaxdrive score --workers N`, or `jaxdrive data build KIND SRC\n"
                   "--out DIR`; `jaxdrive score --old-flag`\nand `python benchmarks/gone.py` are stale.\n\n"
                   "```bash\njaxdrive score --not-prose\n```\n")
    problems = doc_problems(doc, inline=True)
    assert len(problems) == 2, problems
    assert "prose.md:2: jaxdrive score --old-flag" in problems[0] and "unrecognized arguments" in problems[0]
    assert "prose.md:3: python benchmarks/gone.py" in problems[1] and "no such file" in problems[1]


def test_the_shell_notation_is_read_as_documented():
    text = ('```sh\nGRPO="steps=2 grpo.beta=0.0"\n'
            'nice -n 5 timeout -k 5 60 jaxdrive train grpo --config c.py $GRPO  # run\n'
            'cd notebooks && python 02.py\njaxdrive eval planning [--frame lidar|text] ...\n```\n'
            '```python\njaxdrive = 1\n```\n')
    commands = extract_commands(text)
    assert [(c.line, c.argv, c.cwd) for c in commands] == [
        (3, ["jaxdrive", "train", "grpo", "--config", "c.py", "steps=2", "grpo.beta=0.0"], "."),
        (4, ["python", "02.py"], "notebooks"),
        (5, ["jaxdrive", "eval", "planning", "[--frame", "lidar|text]"], "notebooks")]
    assert expand_notation(commands[2].argv) == [["jaxdrive", "eval", "planning", "--frame", "lidar"],
                                                 ["jaxdrive", "eval", "planning", "--frame", "text"]]
