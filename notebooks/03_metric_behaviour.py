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
# # Metric behaviour: EPDMS vs the DriveJudge-gated score on the synthetic labelled set
#
# The synthetic DriveJudge set (`jaxdrive.judge.synthetic`) plants context rules a human would apply: leaving the
# lane to pass a parked car that blocks it is reasonable, drifting out of lane on an empty road is not; braking hard
# for a crossing pedestrian is reasonable, for nothing is not; creeping into a junction on red is not. Every record
# carries the human label, the EPDMS sub-scores and the Eq. 10-11 gate labels (which rules *should* apply).
#
# 1. Score distributions: EPDMS (every rule on) vs the gated score of Eq. 14 under those gates (the ceiling of any
#    gate policy), split by the human label.
# 2. Driving Quality Classification: ROC and PR curves and the DQC metrics (`jaxdrive.eval.dqc`) of both scores.
# 3. Which rules the gates switch off, in which planted context.
#
# `JAXDRIVE_NB_SMALL=1` (set by the test suite) shrinks the set; the conclusions are computed from what is measured.

# %%
import collections
import os
import tempfile

import matplotlib.pyplot as plt
import numpy as np

from jaxdrive.eval.dqc import dqc_metrics, pr_curve_points, roc_curve_points
from jaxdrive.judge.baselines import dqc_scores, oracle_gates
from jaxdrive.judge.dataset import read_records
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.synthetic import build_dataset

SMALL = os.environ.get("JAXDRIVE_NB_SMALL") == "1"
NUM_SCENES = 24 if SMALL else 240

root = tempfile.mkdtemp(prefix="jaxdrive-nb03-")
build_dataset(root, num_train=0, num_test=NUM_SCENES, seed=3, image_size=32, progress=False)
records = read_records(root)
labels = np.array([r.label for r in records])
epdms = dqc_scores(records, "epdms")
gated = dqc_scores(records, "oracle")
gates = oracle_gates(records)  # [N, 7] bool, RULE_LABELS order
print(f"{len(records)} records from {NUM_SCENES} scenes: {labels.sum()} reasonable, {(1 - labels).sum()} unreasonable")

# %% [markdown]
# ## 1. Score distributions by human label

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
bins = np.linspace(0, 1, 21)
for ax, (name, s) in zip(axes, (("EPDMS (all rules on)", epdms), ("gated score, Eq. 14 (oracle gates)", gated))):
    ax.hist(s[labels == 1], bins, alpha=0.6, label="reasonable", color="#3b8f5a")
    ax.hist(s[labels == 0], bins, alpha=0.6, label="unreasonable", color="#c0504d")
    ax.set_title(name)
    ax.set_xlabel("score")
axes[0].set_ylabel("records")
axes[0].legend()
plt.tight_layout()
plt.show()
reasonable_low = float(np.mean(epdms[labels == 1] < 0.5))
reasonable_low_gated = float(np.mean(gated[labels == 1] < 0.5))
print(f"reasonable records scoring below 0.5: EPDMS {reasonable_low:.0%}, gated {reasonable_low_gated:.0%}")

# %% [markdown]
# ## 2. Driving Quality Classification: ROC and PR

# %%
m_epdms, m_gated = dqc_metrics(epdms, labels), dqc_metrics(gated, labels)
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for name, s in (("EPDMS", epdms), ("gated (oracle gates)", gated)):
    fpr, tpr = roc_curve_points(labels, s)
    axes[0].plot(fpr, tpr, label=f"{name}: AUC {dqc_metrics(s, labels)['auc']:.1f}")
    recall, precision = pr_curve_points(labels, s)
    axes[1].plot(recall, precision, label=f"{name}: AP+ {dqc_metrics(s, labels)['ap_pos']:.1f}")
axes[0].plot([0, 1], [0, 1], "k:", lw=0.8)
axes[0].set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (reasonable = positive)")
axes[1].set(xlabel="recall", ylabel="precision", title="precision-recall (reasonable)")
for ax in axes:
    ax.legend(loc="lower right")
plt.tight_layout()
plt.show()
for key in ("acc_0.7", "acc_0.8", "acc_0.9", "auc", "ap_pos", "ap_neg"):
    print(f"{key:>8}: EPDMS {m_epdms[key]:6.2f}   gated {m_gated[key]:6.2f}")

# %% [markdown]
# ## 3. Which rules the gates switch off, by planted context

# %%
by_rule = collections.defaultdict(list)
for r, g in zip(records, gates):
    by_rule[r.context.get("rule", "?")].append(~g)
contexts = sorted(by_rule)
off = np.array([np.mean(by_rule[c], axis=0) for c in contexts])  # [contexts, 7] share of records with rule off
fig, ax = plt.subplots(figsize=(8, 0.45 * len(contexts) + 1.5))
im = ax.imshow(off, vmin=0, vmax=1, cmap="Reds", aspect="auto")
ax.set_xticks(range(len(RULE_LABELS)), RULE_LABELS)
ax.set_yticks(range(len(contexts)), [f"{c} (n={len(by_rule[c])})" for c in contexts])
ax.set_title("share of records whose gate switches the rule off")
plt.colorbar(im, ax=ax)
plt.tight_layout()
plt.show()
top = {c: RULE_LABELS[int(np.argmax(row))] for c, row in zip(contexts, off) if row.max() > 0}
print("most often switched off, per context:", top)

# %%
any_off = float(np.mean((~gates).any(axis=1)))
gain = m_gated["auc"] - m_epdms["auc"]
busiest = max(top.items(), key=lambda kv: off[contexts.index(kv[0])].max()) if top else ("none", "none")
print(f"Conclusion: on {len(records)} synthetic records the gates switch at least one rule off for {any_off:.0%} of "
      f"them; gating {'raises' if gain > 0 else 'does not raise'} DQC AUC from {m_epdms['auc']:.1f} (EPDMS) to "
      f"{m_gated['auc']:.1f} (oracle gates, the ceiling of a gate policy), and reasonable records scoring below 0.5 go "
      f"from {reasonable_low:.0%} to {reasonable_low_gated:.0%}; the context whose rule is switched off most "
      f"consistently is '{busiest[0]}' ({busiest[1]}).")
