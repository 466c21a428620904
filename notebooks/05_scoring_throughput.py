# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Scoring throughput: where the time of one `jaxdrive score` batch goes
#
# A `jaxdrive score` batch goes through host stages (produce the scenes, pad and re-centre them with
# `jaxdrive.scene.batch_scenes`, cull map polygons and agents with the exact broad phase
# `jaxdrive.broadphase.pack_batch`, `device_put`) and device stages (the map predicates `batch_ego_areas`, then
# every rule and the EPDMS aggregation, `jaxdrive.rules.epdms.score`), then the results come back (`device_get`).
# The runner overlaps the host stages of the next batch (a background thread) with the device stages of the current
# one, so the slower side bounds the throughput.
#
# Each stage is timed alone (steady state, best of several calls, after compilation): the host stages as plain
# calls, the device stages as jitted sub-functions on a device-resident packed batch, each rule group jitted on its
# own as `benchmarks/score_throughput.py --rules` does. The sum of the rule groups is compared with the one jitted
# rules program the runner dispatches (XLA fuses across rules there).
#
# `JAXDRIVE_NB_SMALL=1` (the test suite) scores a small batch of the default mix with pads fitted to it; the full
# run uses the benchmark's reference mix (32 agents, ~60 map polygons) at the runner's default pads.

# %%
import os
import time

import jax
import matplotlib.pyplot as plt

from jaxdrive.broadphase import PackSpec, pack_batch
from jaxdrive.data.synthetic import generate_scene
from jaxdrive.rules.areas import batch_ego_areas
from jaxdrive.rules.comfort import comfort_v1, extended_comfort, history_comfort
from jaxdrive.rules.dac import drivable_area_compliance
from jaxdrive.rules.ddc import driving_direction_compliance
from jaxdrive.rules.epdms import score
from jaxdrive.rules.lk import lane_keeping
from jaxdrive.rules.nc import batch_no_at_fault_collisions
from jaxdrive.rules.progress import raw_progress
from jaxdrive.rules.tlc import traffic_light_compliance
from jaxdrive.rules.ttc import batch_time_to_collision
from jaxdrive.scene import PadSpec, batch_scenes
from jaxdrive.scorer import capacity_for
from jaxdrive.scoring.runner import SAMPLED_HEADROOM

SMALL = os.environ.get("JAXDRIVE_NB_SMALL") == "1"
B, K = (4, 8) if SMALL else (16, 16)
PROFILE = "default" if SMALL else "reference"
REPS = 3 if SMALL else 10
RUNNER_PAD = PadSpec(proposals=16, agents=32, areas=24, area_vertices=96, lanes=64, lane_vertices=96, centerline=512)
print(f"small={SMALL}: B = {B} scenes x K = {K} proposals ({PROFILE} profile), best of {REPS}; "
      f"device {jax.devices()[0].platform} x{jax.device_count()}")


def best_of(fn, reps=REPS):
    """(best seconds per call, last result); device results are waited for."""
    best, out = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best, out


# %% [markdown]
# ## Host stages

# %%
host = {}
host["scene source (synthetic generator)"], scenes = best_of(
    lambda: [generate_scene(seed, num_proposals=K, profile=PROFILE, validate=False) for seed in range(B)])
pad = PadSpec.fit(scenes) if SMALL else RUNNER_PAD
host["pad + re-centre (batch_scenes)"], (dense, props, _) = best_of(lambda: batch_scenes(scenes, pad, validate=False))
_, used = pack_batch(dense, props.states, PackSpec())
spec = capacity_for(used, SAMPLED_HEADROOM)  # the runner's headroom over a prescan's needs: one shape for the run
host["broad phase (pack_batch)"], (packed, _) = best_of(lambda: pack_batch(dense, props.states, spec))
host["device_put"], (scene_d, props_d) = best_of(lambda: jax.device_put((packed, props)))
for name, sec in host.items():
    print(f"{name:<40} {sec * 1e3:9.2f} ms")

# %% [markdown]
# ## Device stages
#
# `per_scene` vmaps a one-scene rule kernel over the batch (the culled agents are dropped: these rules do not read
# them). HC, EC and v1 comfort run in float64 (scoped x64, NAVSIM parity), as the scorer does by default.

# %%
areas_fn = jax.jit(lambda s, p: batch_ego_areas(s.map, p.states))
areas = jax.block_until_ready(areas_fn(scene_d, props_d))


def per_scene(fn):
    return jax.jit(jax.vmap(lambda s, p, a: fn(s.replace(agents=None), p, a)))


groups = {
    "map predicates (batch_ego_areas)": jax.jit(lambda s, p, a: batch_ego_areas(s.map, p.states)),
    "NC": jax.jit(lambda s, p, a: batch_no_at_fault_collisions(s, p.states, a)),
    "TTC": jax.jit(lambda s, p, a: batch_time_to_collision(s, p.states, a)),
    "DAC + DDC + TLC": per_scene(lambda s, p, a: (drivable_area_compliance(s, p.states, a),
                                                  driving_direction_compliance(s, p.states, a),
                                                  traffic_light_compliance(s, p.states, a))),
    "LK": per_scene(lambda s, p, a: lane_keeping(s, p.states, a)),
    "progress": per_scene(lambda s, p, a: raw_progress(s, p.states, a)),
    "HC + EC + v1 comfort (float64)": per_scene(lambda s, p, a: (
        history_comfort(s.history_padded, p.states), extended_comfort(p.states, p.previous, p.has_previous),
        comfort_v1(p.states))),
}
device, compile_s = {}, {}
for name, fn in groups.items():
    t0 = time.perf_counter()
    jax.block_until_ready(fn(scene_d, props_d, areas))
    compile_s[name] = time.perf_counter() - t0
    device[name], _ = best_of(lambda: fn(scene_d, props_d, areas))
rules_fn = jax.jit(lambda s, p, a: score(s, p, areas=a))  # the runner's second program
t0 = time.perf_counter()
jax.block_until_ready(rules_fn(scene_d, props_d, areas))
compile_s["rules program"] = time.perf_counter() - t0
rules_program, result = best_of(lambda: rules_fn(scene_d, props_d, areas))
step, _ = best_of(lambda: rules_fn(scene_d, props_d, areas_fn(scene_d, props_d)))
host["device_get (results)"], _ = best_of(lambda: jax.device_get(result))
for name, sec in device.items():
    print(f"{name:<40} {sec * 1e3:9.2f} ms  (compile + first call {compile_s[name]:.1f} s)")
rules_parts = sum(v for k, v in device.items() if k != "map predicates (batch_ego_areas)")
print(f"{'rules program (one jit, as the runner)':<40} {rules_program * 1e3:9.2f} ms  vs its parts alone "
      f"{rules_parts * 1e3:.2f} ms")
print(f"{'whole device step (areas + rules)':<40} {step * 1e3:9.2f} ms")

# %%
host_total = sum(host.values())
fig, ax = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw=dict(width_ratios=[3, 1]))
names = list(host) + list(device)
values = [host[n] * 1e3 for n in host] + [device[n] * 1e3 for n in device]
colors = ["tab:orange"] * len(host) + ["tab:blue"] * len(device)
ax[0].barh(names[::-1], values[::-1], color=colors[::-1])
ax[0].set(xlabel="ms per batch (best of calls)", title=f"one batch of {B} x {K} proposals: host (orange) vs device (blue)")
ax[1].bar(["host", "device"], [host_total * 1e3, step * 1e3], color=["tab:orange", "tab:blue"])
ax[1].set(ylabel="ms per batch", title="sides of the pipeline")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## Conclusion (computed from the measurements above)

# %%
n_prop = B * K
source = host["scene source (synthetic generator)"]
host_io = host_total - source  # what the runner's host thread does besides producing the scenes
bound = "host" if host_total > step else "device"
bound_io = "host" if host_io > step else "device"
top_host = max(host, key=host.get)
top_dev = max(device, key=device.get)
fusion = rules_program / rules_parts
print(
    f"Conclusion: one batch of {B} x {K} proposals ({PROFILE} mix) spends {host_total * 1e3:.1f} ms on the host "
    f"(largest: {top_host}, {host[top_host] / host_total:.0%}; broad phase "
    f"{host['broad phase (pack_batch)'] * 1e3:.1f} ms) and {step * 1e3:.1f} ms on the device as the runner dispatches "
    f"its two programs (each alone: map predicates {device['map predicates (batch_ego_areas)'] * 1e3:.1f} ms + rules "
    f"{rules_program * 1e3:.1f} ms; largest rule group: {top_dev}, {device[top_dev] / sum(device.values()):.0%} of the "
    f"groups' sum; NC + TTC {(device['NC'] + device['TTC']) * 1e3:.1f} ms, float64 comfort "
    f"{device['HC + EC + v1 comfort (float64)'] * 1e3:.1f} ms). With host and device overlapped the {bound} side "
    f"bounds the run at ~{n_prop / max(host_total, step):,.0f} proposals/s ({n_prop / (host_total + step):,.0f} if "
    f"they ran in series). Without the synthetic generator (scenes read from a store instead) the host needs "
    f"{host_io * 1e3:.1f} ms, and the {bound_io} side bounds the run at ~{n_prop / max(host_io, step):,.0f} "
    f"proposals/s. The fused rules program takes {fusion:.2f}x the sum of its rule groups jitted alone.")
