"""benchmarks/: every script answers ``--help`` (exit 0, nothing run) with a description and a line of help for each
of its arguments, and a bad argument is a one-line usage error (exit 2), not a traceback."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)


def undocumented(help_text: str) -> list[str]:
    """The arguments of an argparse ``--help`` text with no help of their own: an entry line (two spaces, then the
    flag or name) with nothing after it and no deeper-indented line below it."""
    lines = help_text.splitlines()
    sections = [i for i, line in enumerate(lines) if re.match(r"^(options|optional arguments|positional arguments):$",
                                                               line)]
    bare = []
    for start in sections:
        for i in range(start + 1, len(lines)):
            line = lines[i]
            if not line.startswith("  "):
                break
            if not re.match(r"^  \S", line) or line.strip() in ("-h, --help",):
                continue
            described = re.search(r"\S {2,}\S", line.strip()) is not None
            continues = i + 1 < len(lines) and re.match(r"^ {4,}\S", lines[i + 1]) is not None
            if not (described or continues):
                bare.append(line.strip())
    return bare


def test_undocumented_finds_bare_arguments():
    text = "usage: x\n\nd\n\npositional arguments:\n  run\n\noptions:\n  -h, --help  show\n  --a A       the a\n" \
           "  --b B\n  --long-name LONG_NAME\n                        wrapped help\n"
    assert undocumented(text) == ["run", "--b B"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_describes_itself_and_its_flags(script):
    r = _run(f"benchmarks/{script}", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage:"), (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    assert re.search(r"\n\n\S", r.stdout.split("options:")[0]), f"{script}: --help has no description"
    assert undocumented(r.stdout) == [], f"{script}: arguments without help: {undocumented(r.stdout)}"


@pytest.mark.parametrize("argv", [["judge_table.py", "/nonexistent-out"], ["judge_grpo_table.py", "/nonexistent-out"],
                                  ["score_resume.py", "--bogus"]])
def test_benchmark_bad_argument_is_a_usage_error(argv):
    r = _run(f"benchmarks/{argv[0]}", *argv[1:])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"{argv[0]}: error: "), r.stderr
