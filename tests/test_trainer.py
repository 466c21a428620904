"""The shared trainer: exact resume from an orbax checkpoint, sharded == single-device step, micro-batching ==
whole batch, deterministic data order, metrics files, optimizer schedule."""
import importlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdrive.train import data, jobs, optim, sft
from jaxdrive.train.checkpoint import Checkpointer
from jaxdrive.train.metrics import read_jsonl
from jaxdrive.train.tiny_recipes import memorise_examples, tiny_vlm
from jaxdrive.train.trainer import Trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(name):
    return importlib.import_module(f"jaxdrive.configs.{name}").get_config()


def sft_cfg(workdir, steps=6):
    c = load_config("sft_tiny")
    c.steps, c.batch_size, c.workdir, c.progress, c.log_every = steps, 8, workdir, False, 1
    c.log_stdout = False
    c.data.num_examples = 16  # 2 batches per epoch: the resumed run crosses an epoch boundary
    c.checkpoint.every, c.checkpoint.keep = 2, 2
    c.optim.warmup_steps = 2
    return c


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    _, full = jobs.run_sft(sft_cfg(str(tmp_path / "full")))
    killed_cfg = sft_cfg(str(tmp_path / "killed"))
    killed_cfg.stop_after = 3  # "killed" after step 3 (its checkpoint written, async)
    _, first = jobs.run_sft(killed_cfg)
    assert [r["step"] for r in first] == [1, 2, 3]
    trainer, rest = jobs.run_sft(sft_cfg(str(tmp_path / "killed")))  # a fresh process-equivalent resumes
    assert [r["step"] for r in rest] == [4, 5, 6]
    full_losses = [r["loss"] for r in full]
    assert [r["loss"] for r in first] == full_losses[:3]
    assert [r["loss"] for r in rest] == full_losses[3:]  # bitwise: same params, optimizer, data order and keys
    assert len(set(full_losses)) == 6
    ckpts = Checkpointer(str(tmp_path / "killed" / "checkpoints"))
    assert ckpts.all_steps() == [4, 6]  # keep=2 of the saves at 2, 3 (the kill), 4, 6
    _, meta = ckpts.restore({"params": trainer.params, "opt_state": trainer.opt_state})
    assert meta["step"] == 6 and meta["data_position"] == {"epoch": 3, "batch_in_epoch": 0, "examples_seen": 48}
    # metrics: JSONL written across the kill (steps 1-3 then 4-6) and TensorBoard event files
    recs = read_jsonl(str(tmp_path / "killed" / "metrics.jsonl"))
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert {"train/loss", "train/grad_norm", "train/tokens_per_s"} <= set(recs[0])
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "killed" / "tb"))


def _one_step(mesh=None, micro=1):
    """Parameter change of one plain-SGD step (lr 1: exactly minus the gradient) and the step's metrics."""
    model = tiny_vlm(seed=2)
    exs = memorise_examples(8, seed=4)
    arrays = data.stack_examples([sft.sft_example(e["prompt"], e["answer"], 10, pixel_values=e["pixel_values"],
                                                  image_grid_thw=e["image_grid_thw"]) for e in exs])
    tr = Trainer(model, loss_fn=sft.sft_loss_fn, tx=optax.sgd(1.0), mesh=mesh, progress=False)
    before = jax.device_get(tr.params)
    batch = ([sft.sft_batch(model, arrays)] if micro == 1 else
             [sft.sft_batch(model, data.take(arrays, idx)) for idx in np.array_split(np.arange(8), micro)])
    metrics = tr.update([tr.shard_batch(b) for b in batch], tr.step_key(1))
    delta = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), jax.device_get(tr.params), before)
    return delta, {k: float(v) for k, v in metrics.items()}


def test_sharded_and_micro_batched_steps_equal_the_single_device_step():
    assert len(jax.devices()) >= 8, "tests/conftest.py forces 8 host devices"
    from jaxdrive.parallel import make_mesh

    ref_delta, ref_metrics = _one_step()
    assert ref_metrics["grad_norm"] > 0.1
    for delta, metrics in (_one_step(mesh=make_mesh(data=2, fsdp=2, tensor=2)), _one_step(micro=2)):
        np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], rtol=1e-5)
        np.testing.assert_allclose(metrics["grad_norm"], ref_metrics["grad_norm"], rtol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=0), delta, ref_delta)


def test_epoch_sampler_is_deterministic_and_covers_each_epoch():
    s = data.EpochSampler(10, 3, seed=7)
    assert s.steps_per_epoch == 3
    epoch0 = np.concatenate([s.indices(k) for k in range(3)])
    assert len(set(epoch0.tolist())) == 9  # no repeats within an epoch (one example dropped)
    np.testing.assert_array_equal(s.indices(4), data.EpochSampler(10, 3, seed=7).indices(4))
    assert not np.array_equal(s.indices(0), s.indices(3))  # a new permutation per epoch
    with pytest.raises(ValueError, match="batch_size"):
        data.EpochSampler(2, 3)


def test_schedule_and_trainable_filters():
    sched = optim.make_schedule(1.0, 100, warmup_steps=10, end_lr_ratio=0.1)
    assert float(sched(0)) == 0.0 and float(sched(10)) == pytest.approx(1.0)
    assert float(sched(55)) == pytest.approx(0.1 + 0.9 * 0.5, rel=1e-4) and float(sched(100)) == pytest.approx(0.1)
    from flax import nnx

    from jaxdrive.models.lora import apply_lora

    model = tiny_vlm()
    n_all = len(jax.tree.leaves(nnx.state(model, optim.trainable_filter("full"))))
    n_frozen_vis = len(jax.tree.leaves(nnx.state(model, optim.trainable_filter("full", freeze_vision=True))))
    n_vis = len(jax.tree.leaves(nnx.state(model.visual, nnx.Param)))
    assert n_vis > 0 and n_frozen_vis == n_all - n_vis
    apply_lora(model, r"language_model\..*q_proj", rank=2, alpha=4.0, rngs=nnx.Rngs(0))
    assert len(jax.tree.leaves(nnx.state(model, optim.trainable_filter("lora")))) == 2 * 2  # A, B x 2 layers
    with pytest.raises(ValueError, match="optim.mode"):
        optim.trainable_filter("prefix")


def test_best_checkpoint_is_kept_besides_the_latest(tmp_path):
    ck = Checkpointer(str(tmp_path), keep=1, best_metric="acc")
    state = {"w": np.arange(3.0)}
    for step, acc in enumerate([0.2, 0.9, 0.1, 0.3], start=1):
        ck.save(step, {"w": state["w"] + step}, {"step": step}, {"acc": acc})
    ck.wait()
    assert ck.all_steps() == [2, 4] and ck.best_step() == 2
    restored, meta = ck.restore(state, step=2)
    np.testing.assert_array_equal(restored["w"], state["w"] + 2)
    with pytest.raises(ValueError, match="best_metric"):
        ck.save(5, state, {}, {"loss": 1.0})
    ck.close()
    assert json.dumps(meta)


def test_cli_runs_a_config_with_overrides(tmp_path, capsys):
    import argparse

    from jaxdrive.train_cli import add_train_subcommands

    parser = argparse.ArgumentParser(prog="jaxdrive")
    add_train_subcommands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "sft", "--config", os.path.join(ROOT, "configs", "sft_tiny.py"), "steps=2",
                              f"workdir='{tmp_path}'", "progress=False", "batch_size=4", "data.num_examples=8",
                              "optim.warmup_steps=1", "optim.lr=1e-3", "log_every=1"])
    assert args.func(args) == 0
    assert "done: step 2" in capsys.readouterr().out
    assert [r["step"] for r in read_jsonl(str(tmp_path / "metrics.jsonl"))] == [1, 2]
    bad = parser.parse_args(["train", "grpo", "--config", os.path.join(ROOT, "configs", "grpo_tiny.py"), "grpo.bta=1"])
    with pytest.raises(ValueError, match="no config field 'bta'"):
        bad.func(bad)


def _linear_trainer(workdir, save_every=1):
    """A Trainer of a 2x1 linear model on a least-squares loss, checkpointing asynchronously to ``workdir``."""
    from flax import nnx

    def loss_fn(model, batch, key):
        err = model(batch["x"])[:, 0] - batch["y"]
        return (err**2).sum(), jnp.float32(err.shape[0]), {"tokens": jnp.float32(err.shape[0])}

    return Trainer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), loss_fn=loss_fn, tx=optax.sgd(0.1), progress=False,
                   checkpointer=Checkpointer(str(workdir), keep=5), save_every=save_every)


def _linear_batch(tr, step, key):
    return {"x": np.ones((4, 2), np.float32) * step, "y": np.full(4, step, np.float32)}, {}


def test_a_step_that_raises_keeps_the_checkpoint_being_written(tmp_path):
    """Found by an exploratory pass: a crash or Ctrl-C in step 4 left step 3's async checkpoint unfinished (the
    interpreter shut down under orbax's writer thread), so the resumed run started from step 2."""
    tr = _linear_trainer(tmp_path)
    waits = []
    finish = tr.checkpointer.wait
    tr.checkpointer.wait = lambda: (waits.append(tr.step), finish())

    def batch_fn(trainer, step, key):
        if step == 4:
            raise KeyboardInterrupt("killed in step 4")
        return _linear_batch(trainer, step, key)

    with pytest.raises(KeyboardInterrupt):
        tr.run(6, batch_fn)
    assert waits == [3]  # the pending save of step 3 was finished before the exception left run()
    assert tr.checkpointer.all_steps() == [1, 2, 3]


def test_a_run_already_at_stop_after_trains_nothing(tmp_path):
    """Found by an exploratory pass: rerunning a job with the same stop_after trained the next step, did not save it
    (only step == stop_after was saved) and stopped, so every rerun trained and discarded step 3."""
    tr = _linear_trainer(tmp_path, save_every=0)
    assert [r["step"] for r in tr.run(6, _linear_batch, stop_after=2)] == [1, 2]
    again = _linear_trainer(tmp_path, save_every=0)
    again.restore()
    assert again.run(6, _linear_batch, stop_after=2) == [] and again.step == 2
    assert again.checkpointer.all_steps() == [2]
    assert [r["step"] for r in again.run(6, _linear_batch, stop_after=4)] == [3, 4]
    assert again.checkpointer.all_steps() == [2, 4]


def test_a_resumed_run_logs_each_step_once(tmp_path):
    """Found by an exploratory pass: after a resume from an earlier checkpoint, the steps logged past it (run after
    the last save, before the kill) appeared twice in metrics.jsonl, and a kill mid-write left a cut line."""
    from jaxdrive.train.metrics import MetricsLogger, read_jsonl

    def trainer(ckpt_every):
        tr = _linear_trainer(tmp_path / "ckpt", save_every=ckpt_every)
        tr.logger = MetricsLogger(str(tmp_path), stdout=False, tensorboard=False)
        tr.restore()
        return tr

    tr = trainer(2)
    tr.run(6, _linear_batch, stop_after=3)  # steps 1-3 logged, checkpoints 2 and 3
    tr.checkpointer.wait()
    tr.logger.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "train/lo')  # a kill mid-write
    again = _linear_trainer(tmp_path / "ckpt", save_every=2)
    again.logger = MetricsLogger(str(tmp_path), stdout=False, tensorboard=False)
    again.restore(2)  # an earlier checkpoint: step 3 runs again
    again.run(6, _linear_batch)
    again.logger.close()
    assert [r["step"] for r in read_jsonl(str(tmp_path / "metrics.jsonl"))] == [1, 2, 3, 4, 5, 6]
    fresh = _linear_trainer(tmp_path / "none", save_every=0)
    fresh.logger = MetricsLogger(str(tmp_path), stdout=False, tensorboard=False)
    fresh.run(2, _linear_batch)  # no checkpoint: a run from step 0 starts the log afresh
    fresh.logger.close()
    assert [r["step"] for r in read_jsonl(str(tmp_path / "metrics.jsonl"))] == [1, 2]


@pytest.mark.parametrize("micro", [0, 9])
def test_micro_batches_outside_one_to_batch_size_are_refused(tmp_path, micro):
    """Found by an exploratory pass: micro_batches=100 with batch_size=8 crashed with an IndexError traceback in the
    first step (empty micro-batches); micro_batches=0 reported numpy's 'number sections must be larger than 0.'"""
    cfg = sft_cfg("")
    cfg.micro_batches = micro
    with pytest.raises(ValueError, match=r"micro_batches: expected 1 <= micro_batches <= batch_size \(8\)"):
        jobs.run_sft(cfg)


def test_an_interrupted_grpo_job_does_not_export(tmp_path, monkeypatch):
    """Found by an exploratory pass: run_grpo (and the judge's gate GRPO) wrote export_dir after a stop_after,
    so a half-trained model was published as the result; run_sft already exported only when complete."""
    def stopped_run(trainer, total_steps, batch_fn, stop_after=None, **kwargs):  # as if killed after stop_after
        trainer.step = stop_after
        return []

    monkeypatch.setattr(Trainer, "run", stopped_run)
    cfg = load_config("grpo_tiny")
    cfg.steps, cfg.stop_after, cfg.progress, cfg.eval_data, cfg.optim.warmup_steps = 2, 1, False, None, 0
    cfg.export_dir = str(tmp_path / "model")
    trainer, _ = jobs.run_grpo(cfg)
    assert trainer.step == 1 and not os.path.exists(cfg.export_dir)


def test_a_bool_override_of_a_number_is_refused():
    """Found by an exploratory pass: steps=True was taken (bool is an int in Python) and the job trained 1 step."""
    from jaxdrive.train_cli import apply_overrides

    cfg = load_config("grpo_tiny")
    with pytest.raises(ValueError, match="override steps=True: expected a int"):
        apply_overrides(cfg, ["steps=True"])
    assert apply_overrides(cfg, ["progress=False", "grpo.group_size=4"]).grpo.group_size == 4
    with pytest.raises(ValueError, match="override optim.lr: expected a float, got an integer beyond"):
        apply_overrides(cfg, ["optim.lr=1" + "0" * 400])  # was an OverflowError traceback


def test_config_file_with_an_argument_calls_get_config_with_it():
    """``--config FILE:ARG`` (ml_collections' convention, as configs/agent_sft.py's docstring shows for its phase 2)
    is ``get_config(ARG)``; it was read as a file name ("no such file configs/agent_sft.py:2")."""
    from jaxdrive.configs.agent_sft import get_config
    from jaxdrive.train_cli import load_config as load_file

    path = os.path.join(ROOT, "configs", "agent_sft.py")
    assert load_file(path + ":2") == get_config("2") and load_file(path + ":2") != load_file(path)
    assert load_file(path) == load_file(path + ":1") == get_config("1")
    with pytest.raises(ValueError, match=r"--config .*agent_sft.py:3: get_config\('3'\) of .*: phase: expected 1 or 2"):
        load_file(path + ":3")
    with pytest.raises(ValueError, match=r"--config: no such file .*nope.py$"):
        load_file(os.path.join(ROOT, "configs", "nope.py:2"))
    with pytest.raises(ValueError, match=r"get_config\('x'\) of .*sft_tiny.py: .*takes 0 positional arguments"):
        load_file(os.path.join(ROOT, "configs", "sft_tiny.py:x"))


@pytest.mark.parametrize("field,value,expected", [
    ("lr", -1e-3, r"optim.lr: expected >= 0 \(0 is a control run that keeps the weights\), got -0.001"),
    ("lr", float("nan"), "optim.lr: expected a finite number, got nan"),
    # beyond float64 (a config's 400-digit int): an OverflowError traceback before
    pytest.param("warmup_steps", 10**400, "optim.warmup_steps: expected a finite number, got 1000",
                 id="warmup_steps-int-beyond-float64"),
    ("warmup_steps", 20, "optim.warmup_steps: expected between 0 and the 10 optimizer updates of the run, got 20"),
    ("b2", 1.0, r"optim.b2: expected in \[0, 1\), got 1.0"),
    ("weight_decay", -0.1, "optim.weight_decay: expected >= 0, got -0.1"),
    ("eps", 0.0, "optim.eps: expected > 0, got 0.0"),
])
def test_optimizer_settings_are_checked_and_named(field, value, expected):
    """Left alone by an earlier pass, fixed now: a negative lr trained (gradient ascent) without a word, and warm-up
    longer than the run was reported as 'schedule: ...' without the config field."""
    import ml_collections

    cfg = ml_collections.ConfigDict({"lr": 1e-3, "warmup_steps": 2})
    cfg[field] = value
    with pytest.raises(ValueError, match=expected):
        optim.make_optimizer(cfg, 10)
    assert optim.make_optimizer(ml_collections.ConfigDict({"lr": 1e-3, "clip_norm": None}), 10) is not None


def test_a_prompt_batch_larger_than_the_data_names_the_grpo_field():
    """Found by an exploratory pass: grpo.prompts_per_step above the number of prompts said only 'batch_size: ...'."""
    from jaxdrive.train.grpo_trainer import Rollouts

    cfg = load_config("grpo_tiny").grpo
    cfg.prompts_per_step = 99
    with pytest.raises(ValueError, match=r"grpo.prompts_per_step: expected 1 <= grpo.prompts_per_step <= 3"):
        Rollouts([{}] * 3, [], decode=None, cfg=cfg)


def test_weight_decay_spares_norms_and_biases():
    """Left alone by an earlier pass, fixed now: AdamW decayed every parameter, norm scales and biases included
    (agent_grpo sets weight_decay=0.01); the Hugging Face Trainer behind TRL / verl decays only the weight matrices."""
    import ml_collections

    tx = optim.make_optimizer(ml_collections.ConfigDict({"lr": 0.1, "weight_decay": 0.5, "clip_norm": None}), 10)
    params = {"kernel": jnp.ones((2, 3)), "scale": jnp.ones((3,)), "bias": jnp.ones((3,))}
    updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
    assert float(jnp.abs(updates["scale"]).max()) == 0.0 and float(jnp.abs(updates["bias"]).max()) == 0.0
    np.testing.assert_allclose(updates["kernel"], -0.1 * 0.5 * params["kernel"])


@pytest.mark.parametrize("job, field, value, match", [
    ("sft", "log_every", 0, "log_every: expected an integer >= 1"),
    ("sft", "log_every", -2, "log_every: expected an integer >= 1"),
    ("sft", "checkpoint.every", -1, "checkpoint.every: expected an integer >= 0"),
    ("sft", "steps", 0, "steps: expected an integer >= 1"),
    ("grpo", "steps", -1, "steps: expected an integer >= 1"),
    ("sft", "seed", -1, "seed: expected an integer >= 0"),
    ("grpo", "stop_after", -1, "stop_after: expected an integer >= 0"),
    ("sft", "finetune.mode", "prefix", "finetune.mode: expected 'full' or 'lora'"),
])
def test_run_fields_are_checked_before_the_job_starts(job, field, value, match):
    """Found by an exploratory pass (``jaxdrive train sft ... log_every=0``): log_every=0 crashed after the first step
    with a ZeroDivisionError traceback, log_every=-2 / checkpoint.every=-1 were taken (Python's step % -1 == 0: a
    checkpoint every step), steps=0 was reported as a 'schedule' / optim.warmup_steps error, seed=-1 as numpy's
    'expected non-negative integer', and finetune.mode='prefix' as an 'optim.mode' error."""
    from jaxdrive.train_cli import apply_overrides

    cfg = apply_overrides(load_config(f"{job}_tiny"), [f"{field}={value!r}", "optim.warmup_steps=0"])
    with pytest.raises(ValueError, match=match):
        (jobs.run_sft if job == "sft" else jobs.run_grpo)(cfg)


def test_the_best_checkpoint_is_the_best_evaluated_step(tmp_path):
    """Found by an exploratory pass: checkpoints were written only every checkpoint.every steps, so with
    eval_every=20 and every=50 (configs/judge_grpo.py) only steps 100, 200, ... could become the best checkpoint, and
    a best_metric the evaluation does not return failed at the first save, after training up to it."""
    tr = _linear_trainer(tmp_path / "a", save_every=4)
    tr.checkpointer = Checkpointer(str(tmp_path / "a"), keep=1, best_metric="acc")
    acc = {0: 0.0, 3: 0.9, 6: 0.5, 8: 0.1}  # evaluated at 0, every 3 steps and at the end; step 3 is the best
    tr.run(8, _linear_batch, eval_fns={"ev": (3, lambda t, step: {"acc": acc[step]})}, best_metric_source="ev")
    assert tr.checkpointer.best_step() == 3 and tr.checkpointer.all_steps() == [3, 8]
    wrong = _linear_trainer(tmp_path / "b", save_every=4)
    wrong.checkpointer = Checkpointer(str(tmp_path / "b"), keep=1, best_metric="reward_mean")
    with pytest.raises(ValueError, match=r"checkpoint.best_metric: 'reward_mean' is not a metric .* \['acc'\]"):
        wrong.run(8, _linear_batch, eval_fns={"ev": (3, lambda t, step: {"acc": 0.0})}, best_metric_source="ev")
    assert wrong.step == 0


def test_a_checkpoint_of_another_seed_is_not_resumed(tmp_path):
    """Found by an exploratory pass: rerunning a stopped ``jaxdrive train sft`` job with seed=1 resumed the seed-0
    checkpoint, taking its RNG keys but seed 1's data order: the losses matched neither an uninterrupted seed-0 nor
    seed-1 run."""
    _linear_trainer(tmp_path).run(2, _linear_batch, stop_after=1)
    other = _linear_trainer(tmp_path)
    other.seed = 1
    with pytest.raises(ValueError, match="seed: the checkpoint at step 1 .* seed=0, this run has seed=1"):
        other.restore()
    again = _linear_trainer(tmp_path)
    assert again.restore()["step"] == 1


def _tiny_grpo_cfg(workdir):
    """configs/grpo_tiny.py cut to one cheap step (2 prompts x 2 completions, one policy epoch, no KL, no eval)."""
    cfg = load_config("grpo_tiny")
    cfg.steps, cfg.workdir, cfg.progress, cfg.log_stdout, cfg.eval_data = 2, workdir, False, False, None
    cfg.optim.warmup_steps, cfg.checkpoint.best_metric = 0, ""
    cfg.grpo.update(group_size=2, prompts_per_step=2, policy_epochs=1, beta=0.0)
    return cfg


@pytest.mark.parametrize("job, field, value, saved", [
    ("grpo", "grpo.seed", 1, 0),
    ("grpo", "grpo.prompts_per_step", 4, 2),
    ("sft", "batch_size", 4, 8),
])
def test_a_checkpoint_of_another_data_order_is_not_resumed(tmp_path, job, field, value, saved):
    """Found by a review: only the run seed was checked on resume. Rerunning a stopped GRPO job with another grpo.seed
    (the prompt sampler's seed) or prompts_per_step, or an SFT job with another batch_size, resumed the checkpoint and
    went on with another prompt / example stream than the one it was trained on."""
    from jaxdrive.train_cli import apply_overrides

    cfg = _tiny_grpo_cfg(str(tmp_path)) if job == "grpo" else sft_cfg(str(tmp_path), steps=2)
    run = jobs.run_grpo if job == "grpo" else jobs.run_sft
    cfg.stop_after = 1
    run(cfg)
    cfg.stop_after = None
    changed = apply_overrides(cfg.copy_and_resolve_references(), [f"{field}={value}"])
    with pytest.raises(ValueError, match=rf"{field}: the checkpoint at step 1 .* was trained with {field}={saved}, "
                                         rf"this run has {field}={value}; resume with the same {field}"):
        run(changed)
    if job == "sft":  # the unchanged configuration resumes
        assert [r["step"] for r in run(cfg)[1]] == [2]


def test_a_trainer_refuses_a_checkpoint_of_other_resume_config_values(tmp_path):
    """The trainer side of the check above: ``resume_config`` is saved in the meta and compared on restore; a
    checkpoint that does not record a key (written before it was recorded) is resumed."""
    first = _linear_trainer(tmp_path)
    first.resume_config = {"grpo.seed": 0}
    first.run(2, _linear_batch, stop_after=1)
    other = _linear_trainer(tmp_path)
    other.resume_config = {"grpo.seed": 3}
    with pytest.raises(ValueError, match="grpo.seed: the checkpoint at step 1 .* grpo.seed=0, this run has "
                                         "grpo.seed=3"):
        other.restore()
    newer = _linear_trainer(tmp_path)
    newer.resume_config = {"grpo.seed": 0, "data.batch": 5}
    assert newer.restore()["resume_config"] == {"grpo.seed": 0}


@pytest.mark.parametrize("job", ["sft", "grpo"])
def test_best_metric_without_an_evaluation_is_a_config_error(tmp_path, job, monkeypatch):
    """Found by a review: with checkpoint.best_metric set and no evaluation (an SFT job, or GRPO without eval_data)
    the job trained to the end and orbax only warned at each save that the checkpoint had no metrics, so no best
    checkpoint was kept. Now an error before anything is built."""
    def no_model(*args, **kwargs):
        raise AssertionError("the model was built before the configuration was checked")

    monkeypatch.setattr(jobs, "build_model", no_model)
    if job == "grpo":
        cfg = _tiny_grpo_cfg(str(tmp_path))
        cfg.checkpoint.best_metric = "reward_mean"
        with pytest.raises(ValueError, match="checkpoint.best_metric: 'reward_mean' .* eval_data is not set"):
            jobs.run_grpo(cfg)
    else:
        cfg = sft_cfg(str(tmp_path))
        cfg.checkpoint.best_metric = "loss"
        with pytest.raises(ValueError, match="checkpoint.best_metric: 'loss' .* this job runs no evaluation"):
            jobs.run_sft(cfg)
    cfg.workdir = ""  # no checkpoints: nothing to keep, nothing refused
    with pytest.raises(AssertionError, match="the model was built"):
        (jobs.run_grpo if job == "grpo" else jobs.run_sft)(cfg)


@pytest.mark.parametrize("name", sorted(p[:-3] for p in os.listdir(os.path.join(ROOT, "configs"))
                                         if p.endswith(".py") and p not in ("__init__.py", "models.py")))
def test_every_shipped_config_passes_the_best_metric_check(name, tmp_path):
    """Each config of configs/ started as documented (with a workdir): a best metric only where an evaluation scores
    checkpoints (grpo_chat_qa and openread_grpo kept the best by reward_mean without eval_data)."""
    cfg = load_config(name)
    cfg.workdir = str(tmp_path)  # checkpoints written: the check applies
    jobs.check_best_metric(cfg, "eval_data" if "grpo" in cfg else None)


def test_a_trainer_keeping_the_best_checkpoint_needs_its_evaluation(tmp_path):
    """The trainer side: a checkpointer with a best metric and no evaluation scoring checkpoints is refused before
    step 1 (it was an orbax warning at every save)."""
    tr = _linear_trainer(tmp_path)
    tr.checkpointer = Checkpointer(str(tmp_path), keep=1, best_metric="acc")
    with pytest.raises(ValueError, match=r"checkpoint.best_metric: 'acc' .*\(best_metric_source=None, "
                                         r"evaluations: \['ev'\]\)"):
        tr.run(2, _linear_batch, eval_fns={"ev": (1, lambda t, step: {"acc": 0.0})})
    assert tr.step == 0 and tr.checkpointer.all_steps() == []


def test_a_non_finite_loss_stops_the_run_before_saving_it(tmp_path):
    """Found by a new user (``jaxdrive train sft ... data.pad_id=100``, a pad id past the tiny model's vocabulary,
    embedded as NaN): the run trained on with loss NaN, saved NaN checkpoints and exited 0. Now the step raises
    (trainer.NonFiniteLoss, a FloatingPointError) before it is logged or saved."""
    tr = _linear_trainer(tmp_path)

    def batch_fn(trainer, step, key):
        batch, host = _linear_batch(trainer, step, key)
        return (dict(batch, y=np.full(4, np.nan, np.float32)) if step == 3 else batch), host

    with pytest.raises(FloatingPointError, match=r"^step 3: loss nan, grad_norm nan \(not finite\); training stopped "
                                            r"before saving this step \(the last checkpoint, step 2, is kept\)"):
        tr.run(5, batch_fn)
    assert tr.step == 2 and tr.checkpointer.all_steps() == [1, 2]


def test_a_pad_id_outside_the_vocabulary_is_a_config_error(tmp_path, monkeypatch):
    """The cause of the NaN run above, caught before training: data.pad_id (SFT) / grpo.pad_id (GRPO) past the
    model's vocabulary (48 ids for the tiny model) is an error naming the field."""
    def no_training(*args, **kwargs):
        raise AssertionError("the job trained with a pad id outside the vocabulary")

    monkeypatch.setattr(Trainer, "run", no_training)
    sft = sft_cfg(str(tmp_path / "sft"))
    sft.data.pad_id = 48
    with pytest.raises(ValueError, match=r"^data.pad_id: 48 is not a token id of the model \(its vocabulary has ids "
                                         r"0..47\); set an id below 48 \(the tokenizer.s pad token id\)"):
        jobs.run_sft(sft)
    grpo = _tiny_grpo_cfg(str(tmp_path / "grpo"))
    grpo.grpo.pad_id = 100
    with pytest.raises(ValueError, match=r"^grpo.pad_id: 100 is not a token id"):
        jobs.run_grpo(grpo)


def test_eval_every_zero_turns_evaluation_off(tmp_path, monkeypatch):
    """Found by a new user: eval_every=0 is documented as turning evaluation off (jobs.check_run_config), but the
    step-0 and the last step's evaluations still ran. Keeping the best checkpoint by an evaluation metric with
    evaluation off is a config error naming eval_every."""
    evaluated = []
    tr = _linear_trainer(tmp_path)
    tr.run(3, _linear_batch, eval_fns={"ev": (0, lambda t, step: evaluated.append(step) or {"acc": 0.0})})
    assert evaluated == [] and tr.step == 3
    monkeypatch.setattr(jobs, "build_model", lambda *a, **k: pytest.fail("built before the config was checked"))
    cfg = _tiny_grpo_cfg(str(tmp_path / "grpo"))
    cfg.eval_data, cfg.eval_every, cfg.checkpoint.best_metric = load_config("grpo_tiny").eval_data, 0, "reward_mean"
    with pytest.raises(ValueError, match=r"checkpoint.best_metric: 'reward_mean' .* but eval_every=0 turns "
                                         r"evaluation off; set eval_every >= 1 or checkpoint.best_metric=''"):
        jobs.run_grpo(cfg)


def test_a_rerun_of_a_finished_run_says_it_is_complete(tmp_path, capsys):
    """Found by a new user: rerunning a finished job into its workdir (progress=False) printed nothing, trained
    nothing and exited 0."""
    _linear_trainer(tmp_path).run(2, _linear_batch)
    capsys.readouterr()
    again = _linear_trainer(tmp_path)
    again.restore()
    assert again.run(2, _linear_batch) == []
    err = capsys.readouterr().err.strip()
    assert err == (f"nothing to train: the run in {tmp_path} is already complete at step 2 of 2; to train further "
                   "from it set steps above 2, or start a new run in another workdir")


def _tensorboard_view(tb_dir):
    """{tag: [steps]} as TensorBoard shows ``tb_dir``: its event files in name order, a restart marker
    (SessionLog.START at step s) dropping the events read so far at steps >= s."""
    import struct

    from tensorboardX.proto.event_pb2 import Event, SessionLog

    events = []
    for name in sorted(os.listdir(tb_dir)):
        with open(os.path.join(tb_dir, name), "rb") as f:
            raw = f.read()
        at = 0
        while at < len(raw):  # TFRecord: u64 length, u32 crc, data, u32 crc
            (n,) = struct.unpack("<Q", raw[at:at + 8])
            event = Event.FromString(raw[at + 12:at + 12 + n])
            at += 16 + n
            if event.session_log.status == SessionLog.START:
                events = [(tag, step) for tag, step in events if step < event.step]
            events += [(v.tag, event.step) for v in event.summary.value]
    view = {}
    for tag, step in events:
        view.setdefault(tag, []).append(step)
    return view


def test_tensorboard_shows_the_run_metrics_jsonl_holds(tmp_path):
    """Found by a new user: a rerun into the same workdir that started again at step 0 (no checkpoint) rewrote
    metrics.jsonl but left the earlier run's event file in tb/ beside the new one, so TensorBoard mixed the runs.
    Now tb/ shows what metrics.jsonl holds: from step 0 the old event files go; a resume from a checkpoint at step s
    marks a restart at s + 1, so TensorBoard drops the earlier run's later steps."""
    from jaxdrive.train.metrics import MetricsLogger

    def run(ckpt_dir, steps, stop_after=None, restore_step=None):
        tr = _linear_trainer(tmp_path / ckpt_dir, save_every=2)
        tr.logger = MetricsLogger(str(tmp_path / "work"), stdout=False)
        if restore_step is not None:
            tr.restore(restore_step)
        tr.run(steps, _linear_batch, stop_after=stop_after)
        tr.logger.close()

    def jsonl_steps():
        return [r["step"] for r in read_jsonl(str(tmp_path / "work" / "metrics.jsonl"))]

    run("a", 6, stop_after=3)  # logs 1-3, checkpoints 2 and 3
    run("a", 6, restore_step=2)  # resumes at 2: step 3 again, then 4-6
    assert jsonl_steps() == [1, 2, 3, 4, 5, 6]
    assert _tensorboard_view(tmp_path / "work" / "tb")["train/loss"] == [1, 2, 3, 4, 5, 6]
    run("b", 2)  # another run in the same workdir from step 0 (no checkpoint of its own)
    assert jsonl_steps() == [1, 2]
    assert _tensorboard_view(tmp_path / "work" / "tb")["train/loss"] == [1, 2]


def test_an_interrupted_run_leaves_its_records_in_tensorboard(tmp_path):
    """The jaxdrive program ends an interrupted command without the interpreter's shutdown (jaxdrive.interrupts),
    which is where the TensorBoard writer's queue (flushed every 2 minutes) was written out: the run flushes it when
    it stops, however it stops."""
    from jaxdrive.train.metrics import MetricsLogger

    tr = _linear_trainer(tmp_path / "ckpt")
    tr.logger = MetricsLogger(str(tmp_path / "work"), stdout=False)

    def batch_fn(trainer, step, key):
        if step == 3:
            raise KeyboardInterrupt
        return _linear_batch(trainer, step, key)

    with pytest.raises(KeyboardInterrupt):
        tr.run(5, batch_fn)
    assert _tensorboard_view(tmp_path / "work" / "tb")["train/loss"] == [1, 2]  # the logger is not closed


def test_a_non_finite_loss_ends_jaxdrive_train_with_one_line(monkeypatch, capsys):
    """A NaN run is a failure of the run (status 1) whose message says what to do: no traceback."""
    from jaxdrive.cli import EXIT_FAILURE, main
    from jaxdrive.train.trainer import NonFiniteLoss

    def nan_run(cfg):
        raise NonFiniteLoss("step 3: loss nan (not finite); training stopped before saving this step")

    monkeypatch.setattr(jobs, "run_sft", nan_run)
    assert main(["train", "sft", "--config", "configs/sft_tiny.py", "steps=3"]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert err == "jaxdrive train sft: step 3: loss nan (not finite); training stopped before saving this step\n"


@pytest.mark.parametrize("job", ["sft", "grpo", "judge_grpo"])
def test_the_data_is_checked_before_the_weights_load(tmp_path, monkeypatch, job):
    """A data error (here an unknown data kind / a missing judge set) came after the model's weights had loaded:
    minutes for a real VLM before a one-line usage error."""
    monkeypatch.setattr(jobs, "build_model", lambda *a, **k: pytest.fail("the weights loaded before the data"))
    if job == "sft":
        cfg = sft_cfg(str(tmp_path / "w"))
        cfg.data.kind = "no_such_kind"
        run, match = jobs.run_sft, "no_such_kind"
    elif job == "grpo":
        cfg = _tiny_grpo_cfg(str(tmp_path / "w"))
        cfg.data.kind = "no_such_kind"
        run, match = jobs.run_grpo, "no_such_kind"
    else:
        cfg = load_config("judge_grpo_margin_tiny")
        cfg.workdir, cfg.model.kind = str(tmp_path / "w"), "tiny"
        cfg.data.path = cfg.eval_data.path = str(tmp_path / "no_set")
        run, match = jobs.run_grpo, "no_set"
    with pytest.raises(ValueError, match=match):
        run(cfg)


@pytest.mark.parametrize("job, field, value, match", [
    ("sft", "pad_id", 48, r"^data.pad_id: 48 is not a token id of the model \(its vocabulary has ids 0..47\); set an "
                          r"id below 48 \(the tokenizer's pad token id\)$"),
    ("grpo", "eos_id", 100, r"^grpo.eos_id: 100 is not a token id of the model \(its vocabulary has ids 0..47\); "
                            r"set an id below 48 \(the tokenizer's eos token id\)$"),
    ("grpo", "stop_ids", [2, 100], r"^grpo.stop_ids: 100 is not a token id of the model"),
    ("sft", "tokens", 60, r"^data: example 1's answer holds token 60, not a token id of the model \(its vocabulary "
                          r"has ids 0..47\): the data was tokenized for another model$"),
    ("grpo", "tokens", -1, r"^data: example 1's answer holds token -1"),
])
def test_token_ids_outside_the_vocabulary_are_refused_before_the_weights_load(tmp_path, monkeypatch, job, field,
                                                                              value, match):
    """Found by a review: only the pad id was checked against the vocabulary, and only after the weights had loaded.
    An eos / stop id past it is never sampled (every GRPO completion ran to its maximum length, silently); a data
    token past it (a tokenizer of another model) embeds as NaN. All are refused before the weights load."""
    monkeypatch.setattr(jobs, "build_model", lambda *a, **k: pytest.fail("the weights loaded before the check"))
    cfg = sft_cfg(str(tmp_path)) if job == "sft" else _tiny_grpo_cfg(str(tmp_path))
    if field == "tokens":
        examples = [{"prompt": np.array([3, 4], np.int32), "answer": np.array([5], np.int32)},
                    {"prompt": np.array([3, 4], np.int32), "answer": np.array([5, value], np.int32)}]
        monkeypatch.setattr(jobs, "build_examples", lambda block, tokenizer=None: examples)
    else:
        (cfg.data if job == "sft" else cfg.grpo)[field] = value
    with pytest.raises(ValueError, match=match):
        (jobs.run_sft if job == "sft" else jobs.run_grpo)(cfg)


def test_ctrl_c_saves_the_last_completed_step(tmp_path, capsys):
    """Found by a walk-through: Ctrl-C saved nothing, so a run checkpointing every 50 steps lost all 11 steps it had
    trained. The last completed step is saved now (the rerun continues from it), once: not again when saved."""
    tr = _linear_trainer(tmp_path, save_every=50)

    def batch_fn(trainer, step, key):
        if step == 4:
            raise KeyboardInterrupt
        return _linear_batch(trainer, step, key)

    with pytest.raises(KeyboardInterrupt):
        tr.run(100, batch_fn, position_fn=lambda step: {"next": step})
    assert tr.checkpointer.all_steps() == [3]
    assert "interrupted: saving step 3; rerun the same command to continue from it" in capsys.readouterr().err
    resumed = _linear_trainer(tmp_path, save_every=50)
    assert resumed.restore()["data_position"] == {"next": 3} and resumed.step == 3
    for a, b in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(tr.params)):
        np.testing.assert_array_equal(a, b)


def test_ctrl_c_during_an_update_finishes_the_step_first(tmp_path, capsys):
    """An interrupt landing in a step's update (most of an SFT step's time) is held until the update ends: the
    parameters are then step 2's, saved as step 2, never a half-applied GRPO epoch set under step 1's number."""
    import signal

    tr = _linear_trainer(tmp_path, save_every=50)
    update, calls = tr.update, []

    def interrupted_update(micro, key):
        calls.append(tr.step)
        if calls == [0, 0, 1]:  # step 2's first of 2 updates (a second Ctrl-C would stop at once)
            signal.raise_signal(signal.SIGINT)
        return update(micro, key)

    tr.update = interrupted_update
    with pytest.raises(KeyboardInterrupt):
        tr.run(100, _linear_batch, updates_per_batch=2)
    assert tr.step == 2 and tr.checkpointer.all_steps() == [2] and calls == [0, 0, 1, 1]
    err = capsys.readouterr().err
    assert "interrupted: finishing step 2's update to keep it" in err and "saving step 2" in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
