"""``benchmarks/kernel_sources.py``: a profiled program's kernels named by source line. Its HLO parsing on a
hand-written module (stack frames, nested computations, GPU kernel names), and the whole report on a real CPU trace
of a program whose costly kernel sits on a known line."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import kernel_sources as ks  # noqa: E402

HLO = """HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

FileNames
1 "/repo/jaxdrive/rules/areas.py"
2 "/repo/jaxdrive/broadphase/tiles.py"
3 "/usr/lib/python3/site-packages/jax/_src/numpy/lax_numpy.py"

FunctionNames
1 "outer"
2 "inner"

FileLocations
1 {file_name_id=1 function_name_id=1 line=110 end_line=110 column=4 end_column=9}
2 {file_name_id=2 function_name_id=2 line=83 end_line=83 column=4 end_column=9}
3 {file_name_id=3 function_name_id=2 line=7 end_line=7 column=4 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}


%region_0 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add.3 = f32[] add(%a, %b), metadata={op_name="add" stack_frame_id=3}
}

%fused_computation.2 (param_0: f32[8]) -> f32[8] {
  %param_0 = f32[8]{0} parameter(0)
  %sine.1 = f32[8]{0} sine(%param_0), metadata={op_name="jit(step)/sin" stack_frame_id=2}
  ROOT %cosine.1 = f32[8]{0} cosine(%sine.1), metadata={op_name="jit(step)/cos" stack_frame_id=2}
}

%body (t: (s32[], f32[8])) -> (s32[], f32[8]) {
  %t = (s32[], f32[8]{0}) parameter(0)
  %x = f32[8]{0} get-tuple-element(%t), index=1
  %input_scatter_fusion.1 = f32[8]{0} fusion(%x), kind=kLoop, calls=%fused_computation.2, metadata={op_name="jit(step)/x" stack_frame_id=2}
  %i = s32[] get-tuple-element(%t), index=0
  ROOT %tuple.2 = (s32[], f32[8]{0}) tuple(%i, %input_scatter_fusion.1)
}

%cond (t.1: (s32[], f32[8])) -> pred[] {
  %t.1 = (s32[], f32[8]{0}) parameter(0)
  ROOT %p = pred[] constant(true)
}

ENTRY %main.1 (x.1: f32[8]) -> f32[8] {
  %x.1 = f32[8]{0} parameter(0), metadata={op_name="x"}
  %z = s32[] constant(0)
  %tuple.1 = (s32[], f32[8]{0}) tuple(%z, %x.1)
  %while.3 = (s32[], f32[8]{0}) while(%tuple.1), condition=%cond, body=%body, metadata={op_name="jit(step)/while" stack_frame_id=1}
  ROOT %gte = f32[8]{0} get-tuple-element(%while.3), index=1
  %old-style = f32[8]{0} add(%x.1, %x.1), metadata={op_name="add" source_file="/repo/jaxdrive/geometry.py" source_line=46}
}
"""


def test_hlo_text_parsed_into_instructions_calls_and_source_stacks():
    m = ks.parse_hlo(HLO)
    assert m.name == "jit_step"
    fusion = m.instructions["input_scatter_fusion.1"]
    assert (fusion.opcode, fusion.computation, fusion.called) == ("fusion", "body", ["fused_computation.2"])
    assert m.instructions["while.3"].called == ["cond", "body"]
    # tiles.py:83 was called from areas.py:110 (printed parent ids are stored + 1; 0 is the root)
    assert m.stack(fusion) == [("/repo/jaxdrive/broadphase/tiles.py", 83), ("/repo/jaxdrive/rules/areas.py", 110)]
    assert m.stack(m.instructions["old-style"]) == [("/repo/jaxdrive/geometry.py", 46)]
    assert {i.name for i in m.nested("while.3")} >= {"while.3", "input_scatter_fusion.1", "sine.1", "cosine.1", "p"}
    assert ks.sanitized("input_scatter_fusion.1") == "input_scatter_fusion_1"
    assert ks.sanitized("select_dynamic-update-slice_fusion.1") == "select_dynamic_update_slice_fusion_1"
    assert ks.sources(m, "input_scatter_fusion.1", "jaxdrive/") == \
        "jaxdrive/broadphase/tiles.py:83 (3) < jaxdrive/rules/areas.py:110"
    assert ks.sources(m, "sm90_xmma_gemm_f64", "jaxdrive/").startswith("(no HLO instruction")


def costly(x, y):
    small = jnp.sin(y) + 1.0
    ranked = jnp.sort(jnp.cos(x) * 3.0)  # the costly line: a sort of 2M values
    return ranked[:8] + small


def test_report_names_the_costly_line_of_a_traced_program(tmp_path):
    x, y = jnp.asarray(np.random.default_rng(0).normal(size=2_000_000), jnp.float32), jnp.ones(8, jnp.float32)
    compiled = jax.jit(costly).lower(x, y).compile()
    jax.block_until_ready(compiled(x, y))
    with jax.profiler.trace(str(tmp_path / "trace")):
        for _ in range(2):
            jax.block_until_ready(compiled(x, y))
    (trace,) = (tmp_path / "trace").rglob("*.xplane.pb")
    (tmp_path / "step.hlo.txt.gz").write_bytes(__import__("gzip").compress(compiled.as_text().encode()))
    text = ks.report(str(trace), ks.read_text(str(tmp_path / "step.hlo.txt.gz")), steps=2, under="tests/")
    lines = text.splitlines()
    assert lines[0].startswith("module jit_costly:"), text
    line = costly.__code__.co_firstlineno + 2
    assert f"tests/test_kernel_sources.py:{line}" in lines[2], text  # the costliest row
    share = float(lines[2].split()[1].rstrip("%"))
    assert share > 50, text
