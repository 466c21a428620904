"""A small demo vocabulary: k-means (k-means++ init, Lloyd iterations) over synthetic human trajectories.

Each synthetic scene's human future (41 rear-axle states, ``jaxdrive.data.synthetic``) becomes 40 (x, y, heading)
poses at 0.1 .. 4.0 s in the ego rear-axle frame at t = 0, the layout of GTRS / Hydra-MDP ``traj_final/{K}.npy``
vocabularies. Clustering runs on the (x, y) of all 40 poses; a cluster's heading is the circular mean of its members'.
"""

from __future__ import annotations

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.scene import NUM_STEPS


def to_ego_frame(ego: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Global rear-axle states [..., T, >=3] -> (x, y, heading) [..., T, 3] in the frame of ``ego`` (x, y, heading)."""
    c, s = np.cos(ego[2]), np.sin(ego[2])
    dx, dy = states[..., 0] - ego[0], states[..., 1] - ego[1]
    dh = states[..., 2] - ego[2]
    return np.stack([c * dx + s * dy, -s * dx + c * dy, np.arctan2(np.sin(dh), np.cos(dh))], axis=-1)


def human_trajectories(count: int, seed: int = 0) -> np.ndarray:
    """(count, 40, 3) human futures of synthetic scenes ``seed .. seed + count - 1`` in their ego frames."""
    from jaxdrive.data.synthetic import generate_scene

    out = np.empty((count, NUM_STEPS - 1, 3))
    for i in range(count):
        scene = generate_scene(seed + i, num_proposals=1, validate=False)
        out[i] = to_ego_frame(scene.history_states[-1], scene.human_states[1:])
    return out


def kmeans(points: np.ndarray, k: int, *, seed: int = 0, iterations: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Centres (k, d) and labels (n,) of ``points`` (n, d) by k-means++ seeding and Lloyd iterations (float64)."""
    n = points.shape[0]
    if not 1 <= k <= n:
        raise UserInputError(f"--size: expected 1..{n} clusters (at most one per trajectory), got {k}")
    rng = np.random.default_rng(seed)
    centres = [points[rng.integers(n)]]
    d2 = np.sum((points - centres[0]) ** 2, axis=1)
    for _ in range(1, k):
        probs = d2 / d2.sum() if d2.sum() > 0 else np.full(n, 1.0 / n)
        centres.append(points[rng.choice(n, p=probs)])
        d2 = np.minimum(d2, np.sum((points - centres[-1]) ** 2, axis=1))
    centres = np.stack(centres)
    labels = np.zeros(n, np.int64)
    for _ in range(iterations):
        dist = (points ** 2).sum(1)[:, None] - 2 * points @ centres.T + (centres ** 2).sum(1)[None]
        new = dist.argmin(1)
        for j in range(k):
            members = points[new == j]
            if len(members):
                centres[j] = members.mean(0)
        if np.array_equal(new, labels):
            break
        labels = new
    return centres, labels


def build_vocabulary(size: int, count: int, seed: int = 0) -> np.ndarray:
    """A (size, 40, 3) float32 vocabulary clustered from ``count`` synthetic human trajectories."""
    if not 1 <= size <= count:  # before the trajectories are generated (the slow part); as ``kmeans`` checks it
        raise UserInputError(f"--size: expected 1..{count} clusters (at most one per trajectory), got {size}")
    trajs = human_trajectories(count, seed)
    centres, labels = kmeans(trajs[..., :2].reshape(count, -1), size, seed=seed)
    vocab = np.empty((size, NUM_STEPS - 1, 3))
    vocab[..., :2] = centres.reshape(size, NUM_STEPS - 1, 2)
    for j in range(size):
        members = trajs[labels == j, :, 2]
        vocab[j, :, 2] = np.arctan2(np.sin(members).mean(0), np.cos(members).mean(0)) if len(members) else 0.0
    return vocab.astype(np.float32)
