"""NAVSIM's own evaluation loop, timed: for every agent trajectory of ``fixtures/navsim_official`` (148), load its
metric cache (lzma + pickle, fresh per agent: ``MetricCacheLoader.get_from_token``) and run
``navsim.evaluate.pdm_score.pdm_score`` with the one-stage script's defaults (as the fixture's README gives them).
Prints one JSON line: import / load / score seconds, the agents, and the max |score - fixture| as a check.

Run by ``benchmarks/predictions_speed.py`` with ``PYTHONPATH=OVERLAY`` (NAVSIM's vendored sources plus the six
nuPlan-devkit files of the same commit that ``navsim.evaluate.pdm_score`` imports and the vendor copy lacks) and a
Python with pyquaternion, retry and geopandas. Modules the scoring never calls (cv2, rasterio, aioboto3: images,
raster maps, S3; nuplan.planning.training: the learnt agents) are empty stand-ins, which only makes NAVSIM's import
shorter than in a full install.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import lzma
import pickle
import sys
import time
import types

import numpy as np
from pathlib import Path

STUBBED = ("cv2", "rasterio", "aioboto3", "nuplan.planning.training")


class _Stand(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand(name, (Warning,), {})


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if not any(name == s or name.startswith(s + ".") for s in STUBBED):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = lambda name: _Stand(name, (Warning,), {}) if not name.startswith("__") else \
            (_ for _ in ()).throw(AttributeError(name))
        return m

    def exec_module(self, module):
        pass


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", type=Path, help="the shared/fixtures folder (navsim_official and navsim_cache)")
    fixtures = ap.parse_args().fixtures
    t_start = time.perf_counter()
    sys.meta_path.insert(0, _StandIns())
    from nuplan.planning.simulation.trajectory.trajectory_sampling import TrajectorySampling

    from navsim.common.dataclasses import Trajectory
    from navsim.evaluate.pdm_score import pdm_score
    from navsim.planning.simulation.planner.pdm_planner.scoring.pdm_scorer import PDMScorer, PDMScorerConfig
    from navsim.planning.simulation.planner.pdm_planner.simulation.pdm_simulator import PDMSimulator
    from navsim.traffic_agents_policies.log_replay_traffic_agents import LogReplayTrafficAgents
    t_import = time.perf_counter() - t_start

    sampling = TrajectorySampling(num_poses=40, interval_length=0.1)
    simulator = PDMSimulator(sampling)
    scorer = PDMScorer(sampling, PDMScorerConfig(
        progress_weight=5, ttc_weight=5, lane_keeping_weight=2, history_comfort_weight=2,
        two_frame_extended_comfort_weight=2, driving_direction_horizon=1.0, driving_direction_compliance_threshold=2.0,
        driving_direction_violation_threshold=6.0, stopped_speed_threshold=5e-3, future_collision_horizon_window=1.0,
        progress_distance_threshold=5.0, lane_keeping_deviation_limit=0.5, lane_keeping_horizon_window=2.0,
        human_penalty_filter=True))
    policy = LogReplayTrafficAgents(sampling)
    load = score = 0.0
    n, worst = 0, 0.0
    for f in sorted((fixtures / "navsim_official").glob("*.json")):
        o = json.loads(f.read_text())
        for agent in o["agents"]:
            t0 = time.perf_counter()
            with lzma.open(fixtures / "navsim_cache" / o["inputs"]["cache_file"], "rb") as fh:
                cache = pickle.load(fh)
            t1 = time.perf_counter()
            row, _ = pdm_score(cache, Trajectory(np.asarray(agent["poses"]),
                                                 TrajectorySampling(time_horizon=4, interval_length=0.5)),
                               sampling, simulator, scorer, policy)
            score += time.perf_counter() - t1
            load += t1 - t0
            n += 1
            worst = max(worst, abs(float(row["pdm_score"].iloc[0]) - agent["navsim_result"]["pdm_score"]))
    print(json.dumps({"agents": n, "import_s": t_import, "load_s": load, "score_s": score,
                      "total_s": time.perf_counter() - t_start, "max_abs_pdm_score_diff": worst}))


if __name__ == "__main__":
    main()
