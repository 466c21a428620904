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
# # Model parity explorer: Flax Qwen-VL vs transformers, layer by layer, float32 and bfloat16
#
# The parity tests (`tests/test_models_vlm.py`) assert that jaxdrive's Flax NNX Qwen2.5-VL / Qwen3-VL reproduce
# transformers' logits within 1e-4 in float32 on tiny random checkpoints. This notebook looks inside: the largest
# difference of the hidden states after every decoder layer (`jaxdrive.models.testing.layer_parity`, the helper the
# tests use to localise a mismatch), and what bfloat16 does to them. Three comparisons, all against transformers in
# float32 on the same weights and inputs (one image + text):
#
# * **ours f32**: the port itself (should sit at float32 round-off);
# * **ours bf16**: jaxdrive loaded with `dtype=bfloat16` (parameters and activations bf16);
# * **transformers bf16**: transformers' own model cast to bfloat16, the noise floor any bf16 run has.
#
# If "ours bf16" tracks "transformers bf16", our bf16 path loses no more than the reference does.

# %%
import copy
import os
import tempfile

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import torch

from jaxdrive.models import from_pretrained
from jaxdrive.models import testing as T

SMALL = os.environ.get("JAXDRIVE_NB_SMALL") == "1"
FAMILIES = ("qwen2_5_vl", "qwen3_vl")
TEXT = dict(num_hidden_layers=2) if SMALL else dict(num_hidden_layers=6)  # decoder depth of the tiny config
IMAGE_UNITS = (2, 3) if SMALL else (4, 6)  # image size in units of patch x merge
print(f"small={SMALL}: {TEXT['num_hidden_layers']} decoder layers, image {IMAGE_UNITS} units")


# %%
def hf_hidden_and_logits(hf, ids, pv, grid):
    """transformers' hidden states (embeddings, each layer; last after the final norm) and logits, as float32."""
    kw = dict(input_ids=torch.as_tensor(ids), pixel_values=torch.as_tensor(pv), image_grid_thw=torch.as_tensor(grid),
              mm_token_type_ids=torch.as_tensor(T.mm_token_type_ids(hf.config, ids)), output_hidden_states=True)
    with torch.no_grad():
        out = hf(**kw)
    return [h.float().numpy() for h in out.hidden_states], out.logits.float().numpy()


results = {}
for family in FAMILIES:
    path = tempfile.mkdtemp(prefix=f"nb4_{family}_")
    hf = T.save_tiny_model(family, path, seed=5, text=TEXT)
    cfg = hf.config
    unit = cfg.vision_config.patch_size * cfg.vision_config.spatial_merge_size
    pv, grid = T.image_inputs(cfg, [(IMAGE_UNITS[0] * unit, IMAGE_UNITS[1] * unit)], seed=1)
    ids = np.asarray([T.prompt_with_images(cfg, grid, [5, 6, 7], [], list(range(10, 40)))])
    ref_hidden, ref_logits = hf_hidden_and_logits(hf, ids, pv, grid)
    scale = [float(np.abs(h).max()) for h in ref_hidden]

    ours32, ours16 = from_pretrained(path), from_pretrained(path, dtype=jnp.bfloat16)
    hf16 = copy.deepcopy(hf).to(torch.bfloat16)
    hid16, logits16 = hf_hidden_and_logits(hf16, ids, pv.astype(np.float32), grid)
    r = dict(
        scale=scale,
        layers={"ours f32": T.layer_parity(ours32, hf, ids, None, pv, grid),
                "ours bf16": T.layer_parity(ours16, hf, ids, None, pv, grid),
                "transformers bf16": [float(np.abs(a - b).max()) for a, b in zip(hid16, ref_hidden)]},
        logits={"ours f32": np.asarray(ours32(ids, None, pv, grid), np.float32),
                "ours bf16": np.asarray(ours16(ids, None, pv, grid).astype(jnp.float32)),
                "transformers bf16": logits16},
    )
    r["logit_err"] = {k: float(np.abs(v - ref_logits).max()) for k, v in r["logits"].items()}
    r["argmax_agree"] = {k: float(np.mean(v.argmax(-1) == ref_logits.argmax(-1))) for k, v in r["logits"].items()}
    results[family] = r
    print(f"{family}: " + ", ".join(f"{k}: max|dlogit| {r['logit_err'][k]:.2e}, argmax agreement "
                                    f"{r['argmax_agree'][k]:.1%}" for k in r["logits"]))

# %%
fig, axes = plt.subplots(1, len(FAMILIES), figsize=(6 * len(FAMILIES), 4), squeeze=False)
for ax, family in zip(axes[0], FAMILIES):
    r = results[family]
    x = np.arange(len(r["scale"]))
    for (name, errs), style in zip(r["layers"].items(), ("o-", "s-", "^--")):
        ax.plot(x, np.asarray(errs) / np.asarray(r["scale"]), style, label=name)
    ax.set(yscale="log", xlabel="hidden state (0 = embeddings, last = after final norm)",
           ylabel="max |Δ| / max |h_ref|", title=f"{family}: per-layer difference to transformers f32")
    ax.set_xticks(x)
    ax.legend()
plt.tight_layout(); plt.show()
for family in FAMILIES:
    r = results[family]
    print(family)
    print(f"{'layer':>6} {'max|h|':>9} " + " ".join(f"{k:>18}" for k in r["layers"]))
    for i, s in enumerate(r["scale"]):
        print(f"{i:>6} {s:9.3f} " + " ".join(f"{r['layers'][k][i]:18.2e}" for k in r["layers"]))

# %% [markdown]
# ## Conclusion (computed from the measurements above)

# %%
lines = []
for family in FAMILIES:
    r = results[family]
    rel = {k: max(np.asarray(v) / np.asarray(r["scale"])) for k, v in r["layers"].items()}
    lines.append(
        f"{family}: float32 port worst per-layer relative difference {rel['ours f32']:.1e}, logits within "
        f"{r['logit_err']['ours f32']:.1e} (parity tolerance 1e-4); bfloat16: ours {rel['ours bf16']:.1e} relative "
        f"(logits {r['logit_err']['ours bf16']:.1e}, greedy tokens agree on {r['argmax_agree']['ours bf16']:.0%} of "
        f"positions) vs transformers' own bf16 {rel['transformers bf16']:.1e} (logits "
        f"{r['logit_err']['transformers bf16']:.1e}, {r['argmax_agree']['transformers bf16']:.0%}): ours/transformers "
        f"bf16 logit error ratio {r['logit_err']['ours bf16'] / r['logit_err']['transformers bf16']:.2f}.")
print("Conclusion: " + "\n".join(lines))
