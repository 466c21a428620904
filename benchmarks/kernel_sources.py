"""Where a profiled XLA program spends its time, by source line: the kernels of a ``jax.profiler`` trace joined with
the program's optimized HLO (``jax.jit(f).lower(...).compile().as_text()``) by instruction name.

    python benchmarks/kernel_sources.py TRACE.xplane.pb PROGRAM.hlo.txt[.gz] [--steps 3] [--top 25] [--under jaxdrive/]

A trace alone names kernels (``input_scatter_fusion_1``), not code: on a GPU the program runs as CUDA graphs, so the
trace's ``hlo_op`` is the graph (``command_buffer_1``) and xprof's per-op views put everything under ``XlaModule``.
The kernel's name is its fusion's name with ``.`` and ``-`` made ``_``; the HLO text gives that fusion's instructions
and each instruction's stack frame (``metadata={... stack_frame_id=N}`` into the module's ``StackFrames`` table), so
each kernel is reported with the source lines (under ``--under``) that its instructions come from, the most frequent
first. Kernels with no fusion of that name (cuBLAS's ``sm90_xmma_gemm_...``, memcpy) are reported by their own name.

GPU traces: every event of a ``/device:`` plane is a kernel. CPU traces: the XLA runtime's per-thunk events (those
with an ``hlo_op``) of the program's module; control-flow thunks (while, conditional, call) contain the others and
are left out of the sums. Times are summed over the trace and divided by ``--steps`` (the number of program runs
the trace holds). Reading the trace needs only jaxlib (``jax.profiler.ProfileData``), no xprof.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import re
from pathlib import Path

_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) \(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][a-z0-9\-]*)\(")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations|called_computations)="
                     r"(%[\w.\-]+|\{[^}]*\})")
_COMPUTATION_REF = re.compile(r"%([\w.\-]+)")
_FRAME = re.compile(r"stack_frame_id=(\d+)")
_OLD_SOURCE = re.compile(r'source_file="([^"]*)" source_line=(\d+)')
_FIELDS = re.compile(r"(\w+)=(\d+)")
CONTROL_FLOW = ("while", "conditional", "call")


@dataclasses.dataclass
class Instruction:
    name: str
    opcode: str
    shape: str
    computation: str
    called: list[str]
    frame: int | None  # index into the module's stack frames, or None
    source: tuple[str, int] | None  # (file, line) of older XLA's metadata


@dataclasses.dataclass
class HloModule:
    """The parts of an HLO module's text this report needs."""

    name: str
    instructions: dict[str, Instruction]
    computations: dict[str, list[str]]  # computation -> its instructions' names
    files: dict[int, str]
    locations: dict[int, tuple[int, int]]  # location id -> (file id, line)
    frames: dict[int, tuple[int, int]]  # frame id -> (location id, parent frame id; 0: none)

    def stack(self, inst: Instruction) -> list[tuple[str, int]]:
        """(file, line) of an instruction's stack, innermost first."""
        if inst.source is not None:
            return [inst.source]
        out, frame, seen = [], inst.frame, set()
        while frame and frame in self.frames and frame not in seen:
            seen.add(frame)
            location, frame = self.frames[frame]
            file_id, line = self.locations.get(location, (0, 0))
            out.append((self.files.get(file_id, "?"), line))
        return out

    def nested(self, name: str) -> list[Instruction]:
        """The instruction and every instruction of the computations it calls, recursively."""
        out, todo, seen = [], [name], set()
        while todo:
            inst = self.instructions.get(todo.pop())
            if inst is None:
                continue
            out.append(inst)
            for comp in inst.called:
                if comp not in seen:
                    seen.add(comp)
                    todo.extend(self.computations.get(comp, []))
        return out


def sanitized(name: str) -> str:
    """An HLO instruction name as a GPU kernel is named after it."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def parse_hlo(text: str) -> HloModule:
    """An ``HloModule``'s text (``Compiled.as_text()``, or an XLA dump's ``*after_optimizations.txt``)."""
    lines = text.splitlines()
    header = re.match(r"HloModule (\S+?),?\s", lines[0] + " ") if lines else None
    module = HloModule(header.group(1) if header else "", {}, {}, {}, {}, {})
    table, computation = None, None
    for line in lines[1:]:
        stripped = line.strip()
        if stripped in _TABLES:
            table = stripped
            continue
        if not stripped:
            table = None
            continue
        if table is not None:
            key, _, rest = stripped.partition(" ")
            if table == "FileNames":
                module.files[int(key)] = rest.strip('"')
            elif table == "FileLocations":
                fields = dict((k, int(v)) for k, v in _FIELDS.findall(rest))
                module.locations[int(key)] = (fields.get("file_name_id", 0), fields.get("line", 0))
            elif table == "StackFrames":
                fields = dict((k, int(v)) for k, v in _FIELDS.findall(rest))
                # printed parents are one more than the stored ones (0: the root), hence the - 1
                module.frames[int(key)] = (fields.get("file_location_id", 0), fields.get("parent_frame_id", 1) - 1)
            continue
        head = _COMPUTATION.match(line)
        if head:
            computation = head.group(1)
            module.computations[computation] = []
            continue
        match = _INSTRUCTION.match(line)
        if match is None or computation is None:
            continue
        name, shape, opcode = match.groups()
        called = [ref for group in _CALLED.findall(line) for ref in _COMPUTATION_REF.findall(group)]
        frame = _FRAME.search(line)
        old = _OLD_SOURCE.search(line)
        module.instructions[name] = Instruction(name, opcode, shape, computation, called,
                                                int(frame.group(1)) if frame else None,
                                                (old.group(1), int(old.group(2))) if old else None)
        module.computations[computation].append(name)
    return module


@dataclasses.dataclass
class KernelTime:
    key: str  # the HLO instruction's name, or the kernel's own name when no instruction has it
    seconds: float = 0.0
    launches: int = 0


def kernel_times(trace: str, module: HloModule) -> dict[str, KernelTime]:
    """Kernel time per HLO instruction (or unmatched kernel name) of ``module`` in a ``jax.profiler`` trace."""
    from jax.profiler import ProfileData

    by_sanitized = {sanitized(n): n for n in module.instructions}
    times: dict[str, KernelTime] = {}
    for plane in ProfileData.from_file(trace).planes:
        on_device = plane.name.startswith("/device:")
        if not (on_device or plane.name.startswith("/host:CPU")):
            continue
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if stats.get("hlo_module") not in (None, module.name):
                    continue
                op = stats.get("hlo_op")
                if not on_device and op is None:
                    continue  # host activity that is not one of the program's thunks
                if op in module.instructions:
                    key = op
                else:
                    key = by_sanitized.get(sanitized(event.name), event.name) if on_device else op
                inst = module.instructions.get(key)
                if not on_device and inst is not None and inst.opcode in CONTROL_FLOW:
                    continue  # contains the thunks of its body, which are counted themselves
                row = times.setdefault(key, KernelTime(key))
                row.seconds += event.duration_ns * 1e-9
                row.launches += 1
    return times


def line_counts(module: HloModule, key: str, under: str) -> tuple[collections.Counter, dict[str, str]]:
    """How many of a kernel's instructions come from each source line (``file:line`` under ``under``), and the
    first caller (another line) seen for each."""
    counts, callers = collections.Counter(), {}
    for inst in module.nested(key):
        stack = [(f, ln) for f, ln in module.stack(inst) if under in f]
        if stack:
            where = f"{short(stack[0][0], under)}:{stack[0][1]}"
            counts[where] += 1
            caller = next((c for c in stack[1:] if c != stack[0]), None)  # vmapped code repeats its own line
            if caller is not None:
                callers.setdefault(where, f"{short(caller[0], under)}:{caller[1]}")
    return counts, callers


def sources(module: HloModule, key: str, under: str, top: int = 3) -> str:
    """The source lines (under ``under``) of a kernel's instructions, the most frequent first: ``file:line (n)``
    where ``n`` counts instructions, with the caller of the first one."""
    if key not in module.instructions:
        return "(no HLO instruction of this name: a library kernel or a copy)"
    counts, callers = line_counts(module, key, under)
    if not counts:
        return "(no source line under " + under + ")"
    parts = [f"{w} ({n})" + (f" < {callers[w]}" if i == 0 and w in callers else "")
             for i, (w, n) in enumerate(counts.most_common(top))]
    return "; ".join(parts)


def short(path: str, under: str) -> str:
    """``path`` from ``under`` on (``/work/x/jaxdrive/rules/areas.py`` -> ``jaxdrive/rules/areas.py``)."""
    i = path.rfind(under)
    return path[i:] if i >= 0 else path


def report(trace: str, hlo_text: str, steps: int = 1, top: int = 25, under: str = "jaxdrive/") -> str:
    """The report's text: one row per kernel, the costliest first."""
    module = parse_hlo(hlo_text)
    times = kernel_times(trace, module)
    total = sum(t.seconds for t in times.values())
    if not times:
        return f"no kernel of module {module.name!r} in {trace}"
    rows = [f"module {module.name}: {total / steps * 1e3:.2f} ms of kernels per run over {steps} run(s), "
            f"{sum(t.launches for t in times.values()) / steps:.0f} launches per run",
            f"{'ms/run':>8} {'share':>6} {'per run':>7}  {'kernel':<36} {'op':<9} sources"]
    for t in sorted(times.values(), key=lambda t: -t.seconds)[:top]:
        inst = module.instructions.get(t.key)
        rows.append(f"{t.seconds / steps * 1e3:>8.3f} {t.seconds / total:>6.1%} {t.launches / steps:>7.1f}  "
                    f"{t.key[:36]:<36} {(inst.opcode if inst else '-')[:9]:<9} {sources(module, t.key, under)}")
    by_file = collections.Counter()
    for t in times.values():
        counts = line_counts(module, t.key, under)[0] if t.key in module.instructions else None
        by_file[counts.most_common(1)[0][0].rpartition(":")[0] if counts else "(other)"] += t.seconds
    rows.append("by source file (each kernel counted under its most frequent line's file):")
    rows += [f"{sec / steps * 1e3:>8.3f} {sec / total:>6.1%}  {f}" for f, sec in by_file.most_common(top)]
    return "\n".join(rows)


def read_text(path: str) -> str:
    data = Path(path).read_bytes()
    return (gzip.decompress(data) if path.endswith(".gz") else data).decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="a jax.profiler trace file (*.xplane.pb)")
    ap.add_argument("hlo", help="the program's optimized HLO text (Compiled.as_text(); .gz read as gzip)")
    ap.add_argument("--steps", type=int, default=1, help="runs of the program in the trace (times are divided)")
    ap.add_argument("--top", type=int, default=25, help="rows to print")
    ap.add_argument("--under", default="jaxdrive/", help="source files to name: paths containing this")
    args = ap.parse_args()
    for path in (args.trace, args.hlo):
        if not Path(path).is_file():
            ap.error(f"{path}: no such file")
    if args.steps < 1 or args.top < 1:
        ap.error("--steps and --top: expected positive numbers")
    print(report(args.trace, read_text(args.hlo), args.steps, args.top, args.under))


if __name__ == "__main__":
    main()
