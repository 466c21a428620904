"""The non-VLM baselines of the paper (A.2): logistic regression on image embeddings.

* ``logreg``: a direct classifier of the human label (score = P(reasonable));
* ``logreg_gates``: one classifier per rule on the Eq. 10-11 gate labels, gates = [P > 0.5], aggregated by Eq. 14
  over the record's sub-scores (the "Non-VLM-Agent").

The embedding is the BEV image itself, box-downsampled to ``EMBED_SIZE`` x ``EMBED_SIZE`` RGB in [0, 1] (the paper
uses Qwen3-VL-Embedding-2B, which is not available offline). Classifiers train on the ``train`` split
(scikit-learn ``LogisticRegression``, standardised features).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from jaxdrive.judge.baselines import subscores_of
from jaxdrive.judge.dataset import item_name, read_image
from jaxdrive.judge.gates import RULE_LABELS, rule_gated_score

EMBED_SIZE = 16


def image_embeddings(root: Path, records) -> np.ndarray:
    """[N, 3 * EMBED_SIZE^2] box-downsampled BEV pixels of the records."""
    out = []
    for r in records:
        rgb = Image.fromarray(read_image(Path(root) / r.image, item_name(root, r)))
        img = rgb.resize((EMBED_SIZE, EMBED_SIZE), Image.Resampling.BOX)
        out.append(np.asarray(img, np.float32).reshape(-1) / 255.0)
    return np.stack(out)


def _fit(x, y, seed: int = 0):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(np.unique(y)) < 2:
        constant = float(y[0])
        return lambda z: np.full(len(z), constant)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000, random_state=seed)).fit(x, y)
    return lambda z: model.predict_proba(z)[:, 1]


def classifier_scores(root: Path, train, test) -> dict[str, np.ndarray]:
    """{"logreg": [N], "logreg_gates": [N]} scores of the ``test`` records from classifiers fit on ``train``."""
    x_train, x_test = image_embeddings(root, train), image_embeddings(root, test)
    direct = _fit(x_train, np.array([r.label for r in train]))(x_test)
    gates = np.stack([_fit(x_train, np.array([r.gates[g] for r in train]))(x_test) > 0.5 for g in RULE_LABELS], -1)
    agent = np.asarray(rule_gated_score(subscores_of(test), gates), np.float64)
    return {"logreg": np.clip(direct, 0.0, 1.0), "logreg_gates": agent}
