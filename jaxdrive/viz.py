"""Bird's-eye-view PNG previews of a scene and its proposals (matplotlib, Agg backend, host side).

``render_scene`` draws, in an ego-centred frame with the ego heading up: drivable areas by kind, lanes (on-route ones
tinted, connectors dashed), connectors with a red light at t = 0 (on-route solid red, off-route hatched), the route
centreline, agents as boxes at t = 0 / 1 / 2 / 3 / 4 s fading over time with a heading arrow at t = 0, the ego box
and history, the human trajectory, and the proposals coloured by a per-proposal field with a colour bar (numeric
fields) or a legend (``family``). ``preview_main`` is the ``jaxdrive scenes preview`` command.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.metrics import SCORE_FIELDS  # per-proposal fields the kernels compute (--color-by scores first)
from jaxdrive.scene import AgentType, AreaKind, HostScene, LaneKind, StateIndex

# per-proposal fields computed from the states (units in the colour-bar label)
DERIVED_FIELDS = {
    "final_speed": ("final speed [m/s]", lambda s: s[:, -1, StateIndex.VELOCITY_X]),
    "max_speed": ("max speed [m/s]", lambda s: s[:, :, StateIndex.VELOCITY_X].max(1)),
    "min_accel": ("min longitudinal accel [m/s²]", lambda s: s[:, :, StateIndex.ACCELERATION_X].min(1)),
    "max_lat_accel": ("max |lateral accel| [m/s²]", lambda s: np.abs(s[:, :, StateIndex.ACCELERATION_Y]).max(1)),
    "max_yaw_rate": ("max |yaw rate| [rad/s]", lambda s: np.abs(s[:, :, StateIndex.ANGULAR_VELOCITY]).max(1)),
    "distance": ("path length [m]", lambda s: np.linalg.norm(np.diff(s[:, :, :2], axis=1), axis=-1).sum(1)),
}
_AREA_STYLE = {AreaKind.ROADBLOCK: "#d9d9d9", AreaKind.INTERSECTION: "#c8c8c8", AreaKind.CARPARK: "#e8dcc0",
               AreaKind.DRIVABLE_AREA: "#d9d9d9"}
_AGENT_COLOR = {AgentType.VEHICLE: "#1f5fbf", AgentType.PEDESTRIAN: "#e07b00", AgentType.BICYCLE: "#8e44ad"}


def proposal_values(scene: HostScene, field: str) -> tuple[np.ndarray, str]:
    """(K,) values of a per-proposal field and its label: a derived field (``DERIVED_FIELDS``) or a numeric key of
    the scene's ``expected`` proposals (e.g. ``epdms``, ``pdm_score``). Raises ``ValueError`` naming the options."""
    if field in DERIVED_FIELDS:
        label, fn = DERIVED_FIELDS[field]
        return fn(scene.proposal_states), label
    exp = (scene.expected or {}).get("proposals")
    if exp and field in exp[0] and isinstance(exp[0][field], (int, float)):
        return np.array([float(p[field]) for p in exp]), field
    keys = (sorted(DERIVED_FIELDS) + list(SCORE_FIELDS)
            + (sorted(k for k, v in exp[0].items() if isinstance(v, (int, float))) if exp else []))
    raise UserInputError(f"--color-by: expected 'family', 'none' or one of {', '.join(dict.fromkeys(keys))}, got {field!r}")


def _bucket(n: int) -> int:
    p = 8
    while p < n:
        p *= 2
    return p


def kernel_values(scene: HostScene, field: str) -> np.ndarray:
    """(K,) values of a ``SCORE_FIELDS`` field, scored by the EPDMS kernels.

    Pad sizes are rounded up to powers of two, so scenes of similar size share one program, and the program is
    kept on disk (``jaxdrive.exported``, plus XLA's persistent cache): a rerun neither traces nor compiles."""
    import dataclasses

    import jax

    from jaxdrive.exported import call_cached
    from jaxdrive.rules.epdms import score
    from jaxdrive.scene import PadSpec, batch_scenes

    fit = PadSpec.fit([scene])
    spec = PadSpec(**{f.name: _bucket(getattr(fit, f.name)) for f in dataclasses.fields(PadSpec)})
    sc, props, _ = batch_scenes([scene], spec)
    leaves, treedef = jax.tree_util.tree_flatten((sc, props))

    def field_of(*flat):
        sub = score(*jax.tree_util.tree_unflatten(treedef, flat))
        return (getattr(sub, field),)

    (values,) = call_cached(f"preview_{field}", field_of, leaves)
    return np.asarray(values)[0, : scene.num_proposals]


class _EgoFrame:
    def __init__(self, scene: HostScene):
        ego = scene.history_states[-1]
        self.origin = ego[:2].astype(np.float64)
        a = math.pi / 2 - float(ego[StateIndex.HEADING])
        self.rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        self.angle = a

    def __call__(self, p: np.ndarray) -> np.ndarray:
        return (np.asarray(p, np.float64)[..., :2] - self.origin) @ self.rot.T


def _box(centre: np.ndarray, heading: float, length: float, width: float) -> np.ndarray:
    u = np.array([math.cos(heading), math.sin(heading)])
    n = np.array([-u[1], u[0]])
    return np.array([centre + sx * 0.5 * length * u + sy * 0.5 * width * n for sx, sy in ((1, 1), (-1, 1), (-1, -1),
                                                                                          (1, -1))])


def render_scene(scene: HostScene, path: str | Path, color_by: str | None = None,
                 values: Sequence[float] | None = None, title: str | None = None, extent: float = 60.0) -> Path:
    """Write a BEV PNG of ``scene`` to ``path`` and return the path.

    color_by: ``None`` (one colour), ``"family"`` (categorical legend), a field name (``DERIVED_FIELDS`` or an
    ``expected`` key), or any label when ``values`` (K,) are given. extent: half-width of the view in metres.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Polygon as MplPolygon

    k = scene.num_proposals
    if values is not None:
        vals = np.asarray(values, np.float64)
        if vals.shape != (k,):
            raise UserInputError(f"values: expected shape ({k},) (one per proposal), got {vals.shape}")
        label = color_by or "value"
    elif color_by not in (None, "family"):
        vals, label = proposal_values(scene, color_by)
    else:
        vals, label = None, None

    tf = _EgoFrame(scene)
    fig, ax = plt.subplots(figsize=(8, 9), dpi=110)
    ax.set_facecolor("#f4f4f0")
    for area in scene.areas:
        ax.add_patch(MplPolygon(tf(area.polygon), closed=True, facecolor=_AREA_STYLE[area.kind], edgecolor="#9a9a9a",
                                lw=0.6, zorder=1))
    red_now = {lid for lid, s in scene.traffic_lights.items() if s[0] == "R"}
    for lane in scene.lanes:
        poly = tf(lane.polygon)
        connector = lane.kind == LaneKind.LANE_CONNECTOR
        if lane.id in red_now:
            ax.add_patch(MplPolygon(poly, closed=True, facecolor="#e03030" if lane.on_route else "none",
                                    alpha=0.45 if lane.on_route else 0.8, hatch=None if lane.on_route else "///",
                                    edgecolor="#e03030", lw=0.8, zorder=3))
        elif lane.on_route:
            ax.add_patch(MplPolygon(poly, closed=True, facecolor="#a9c8f0", alpha=0.35 if connector else 0.5,
                                    edgecolor="none", zorder=2))
        ax.add_patch(MplPolygon(poly, closed=True, facecolor="none", edgecolor="#b0b0b0" if connector else "#ffffff",
                                lw=0.7, ls="--" if connector else "-", zorder=2))
    cl = tf(scene.centerline)
    ax.plot(cl[:, 0], cl[:, 1], color="#2e8b57", lw=1.0, ls=(0, (4, 3)), zorder=4)

    for agent in scene.agents:
        color = _AGENT_COLOR.get(agent.type, "#555555")
        for t in (40, 30, 20, 10, 0):
            row = agent.track[t]
            if np.isnan(row[0]):
                continue
            corners = tf(_box(row[:2], row[2], agent.length, agent.width))
            alpha = 0.85 if t == 0 else 0.12 + 0.1 * (40 - t) / 10
            ax.add_patch(MplPolygon(corners, closed=True, facecolor=color, edgecolor=color, alpha=alpha, lw=0.5,
                                    zorder=5))
        first = np.flatnonzero(~np.isnan(agent.track[:, 0]))
        if first.size:
            row = agent.track[first[0]]
            c = tf(row[:2])
            d = 0.6 * max(agent.length, 1.0) * np.array([math.cos(row[2] + tf.angle), math.sin(row[2] + tf.angle)])
            ax.annotate("", xy=c + d, xytext=c, arrowprops=dict(arrowstyle="->", color="black", lw=0.8), zorder=6)

    states = scene.proposal_states
    cmap = plt.get_cmap("viridis")
    if color_by == "family" and values is None:
        fams = sorted(set(scene.proposal_families))
        palette = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(fams), 2)))
        colors = [palette[fams.index(f)] for f in scene.proposal_families]
        handles = [Line2D([], [], color=palette[i], lw=2, label=f) for i, f in enumerate(fams)]
    elif vals is not None:
        finite = vals[np.isfinite(vals)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        norm = matplotlib.colors.Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1e-6)
        colors = [cmap(norm(v)) if np.isfinite(v) else (0.6, 0.6, 0.6, 1.0) for v in vals]
        handles = []
        sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=ax, fraction=0.04, pad=0.02, label=label)
    else:
        colors = ["#d62728"] * k
        handles = [Line2D([], [], color="#d62728", lw=1.5, label="proposals")]
    order = np.argsort(vals) if vals is not None else np.arange(k)
    for i in order:
        xy = tf(states[i])
        ax.plot(xy[:, 0], xy[:, 1], color=colors[i], lw=1.4, alpha=0.9, zorder=7)
        ax.plot(xy[-1, 0], xy[-1, 1], "o", color=colors[i], ms=2.5, zorder=7)
    if scene.human_states is not None:
        hx = tf(scene.human_states)
        ax.plot(hx[:, 0], hx[:, 1], color="black", lw=1.6, ls="--", zorder=8)
        handles.append(Line2D([], [], color="black", lw=1.6, ls="--", label="human"))
    hist = tf(scene.history_states)
    ax.plot(hist[:, 0], hist[:, 1], "o-", color="#444444", ms=3, lw=0.8, zorder=8)
    ego = scene.history_states[-1]
    centre = ego[:2] + 1.461 * np.array([math.cos(ego[2]), math.sin(ego[2])])
    ax.add_patch(MplPolygon(tf(_box(centre, ego[2], 5.176, 2.297)), closed=True, facecolor="#2ca02c",
                            edgecolor="black", lw=1.0, zorder=9))
    handles += [Patch(facecolor="#2ca02c", edgecolor="black", label="ego (t=0)"),
                Patch(facecolor=_AGENT_COLOR[AgentType.VEHICLE], label="vehicle"),
                Patch(facecolor=_AGENT_COLOR[AgentType.PEDESTRIAN], label="pedestrian"),
                Patch(facecolor=_AGENT_COLOR[AgentType.BICYCLE], label="bicycle"),
                Patch(facecolor="#555555", label="static object"),
                Patch(facecolor="#a9c8f0", label="on-route lanes"),
                Patch(facecolor="#e03030", alpha=0.5, label="red light (t=0)"),
                Line2D([], [], color="#2e8b57", ls="--", label="route centreline")]
    ax.legend(handles=handles, loc="upper left", fontsize=7, framealpha=0.85, ncol=2)
    reach = np.concatenate([tf(states[:, :, :2]).reshape(-1, 2), hist])
    y_hi = max(float(np.max(reach[:, 1])) + 15.0, 30.0)
    ax.set_xlim(-extent, extent)
    ax.set_ylim(-25.0, max(y_hi, 2 * extent - 25.0))
    ax.set_aspect("equal")
    ax.set_xlabel("m (ego frame, heading up)")
    gen = scene.generator or {}
    ax.set_title(title or f"{scene.id}  {gen.get('layout', '')}  {' '.join(gen.get('tags', [])[:6])}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=None if path.suffix else "png")  # no suffix: a PNG at ``path`` itself, not path.png
    plt.close(fig)
    return path


def preview_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``jaxdrive scenes preview`` (adds them to ``parser`` if given, e.g. a sub-command parser)."""
    p = parser or argparse.ArgumentParser(prog="jaxdrive scenes preview", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0, help="synthetic scene seed (ignored with --scene)")
    p.add_argument("--scene", type=str, default=None, help="an epdms-scene/1 JSON file instead of a synthetic scene")
    p.add_argument("--out", type=str, required=True, help="output PNG path")
    p.add_argument("--color-by", type=str, default="family",
                   help=f"'family', 'none', a kernel score ({', '.join(SCORE_FIELDS)}: the scene is scored first), "
                        f"a state field ({', '.join(sorted(DERIVED_FIELDS))}) or an expected key of a scored scene file")
    p.add_argument("--profile", type=str, default="default", help="synthetic profile (default | hard | reference)")
    p.add_argument("--num-proposals", type=int, default=16,
                   help="proposals of the synthetic scene (ignored with --scene)")
    p.add_argument("--extent", type=float, default=60.0, help="half-width of the view, m")
    return p


def _check_out(path: Path) -> None:
    """``--out`` of ``scenes preview``, checked before the scene is read or scored: not a directory, not below a
    file, and a suffix matplotlib writes (none: PNG)."""
    from matplotlib.backend_bases import FigureCanvasBase

    from jaxdrive.output_paths import output_file

    output_file("--out", path, make_parents=True)
    kinds = FigureCanvasBase.get_supported_filetypes()
    if path.suffix and path.suffix[1:].lower() not in kinds:
        raise UserInputError(f"--out {path}: cannot write a {path.suffix!r} image; expected .png (or one of "
                         f"{', '.join('.' + k for k in sorted(kinds))})")


def preview_main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Entry point of ``jaxdrive scenes preview``; accepts parsed args or an argv list. Returns the exit code."""
    if not isinstance(args, argparse.Namespace):
        args = preview_parser().parse_args(args)
    if not args.extent > 0:
        raise UserInputError(f"--extent: expected a positive half-width in metres, got {args.extent}")
    _check_out(Path(args.out))
    if args.scene:
        from jaxdrive.data.scene_json import read_scene

        scene = read_scene(args.scene)
    else:
        from jaxdrive.data.synthetic import PROFILES, generate_scene

        if args.profile not in PROFILES:  # generate_scene's errors name its arguments, not the flags
            raise UserInputError(f"--profile: expected one of {sorted(PROFILES)}, got {args.profile!r}")
        if args.num_proposals < 1:
            raise UserInputError(f"--num-proposals: expected >= 1, got {args.num_proposals}")
        if args.seed < 0:
            raise UserInputError(f"--seed: expected a non-negative integer, got {args.seed}")
        scene = generate_scene(args.seed, num_proposals=args.num_proposals, profile=args.profile)
    color_by = None if args.color_by == "none" else args.color_by
    if color_by in SCORE_FIELDS:
        out = render_scene(scene, args.out, color_by=color_by, values=kernel_values(scene, color_by),
                           title=f"{scene.id}: {color_by}", extent=args.extent)
    else:
        out = render_scene(scene, args.out, color_by=color_by, extent=args.extent)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(preview_main())
