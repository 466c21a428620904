"""``jaxdrive eval <benchmark>``: one subcommand per benchmark under one ``eval`` group.

To add a benchmark, write ``add_<name>(esub)`` (build the parser on ``esub.add_parser(...)`` and ``set_defaults(func=...)``)
in your module and add it to ``EVAL_COMMANDS`` below with one line.

    jaxdrive eval dqc --predictions P.parquet [Q.parquet ...]   -> P.dqc.json, P.dqc.png, Table-1-shaped table
    jaxdrive eval tps --predictions P.parquet [Q.parquet ...]   -> P.tps.json, Table-2-shaped table
    jaxdrive eval planning --predictions P --gt G               -> L2 / collision at 1/2/3 s (UniAD, ST-P3)
    jaxdrive eval vqa drivelmm|drivemllm|stsbench --predictions P.jsonl
"""
from __future__ import annotations

import collections
import json
import math
from pathlib import Path

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.output_paths import output_file, output_not_input
from jaxdrive.eval import dqc

EXIT_USAGE = 2


def _numeric(t) -> bool:
    from pyarrow import types

    return types.is_integer(t) or types.is_floating(t)


def _zero_one(t) -> bool:
    from pyarrow import types

    return _numeric(t) or types.is_boolean(t)


def _text(t) -> bool:
    from pyarrow import types

    return types.is_string(t) or types.is_large_string(t)  # what parquet text reads back as


def _scalar(t) -> bool:
    from pyarrow import types

    return not types.is_nested(t)


# What each column read by ``eval dqc`` / ``eval tps`` must hold (in words) and which parquet types can hold it: the
# metrics compare scores as numbers, labels with 0 / 1 (a boolean column is 0 / 1), ``preferred`` with 'a' / 'b' (as
# text: no other type holds them); the optional ``id`` is only counted, so any one value per row does.
_NUMBERS = ("numbers (an integer or float column)", _numeric)
COLUMN_TYPES = {
    "score": _NUMBERS, "score_a": _NUMBERS, "score_b": _NUMBERS,
    "label": ("0/1 (1 = reasonable, 0 = failure) in an integer, float or boolean column", _zero_one),
    "preferred": ("'a' or 'b' in a string column", _text),
    "id": ("one id per row (a string or number)", _scalar),
}


def _check_column_types(schema, names, flag: str, path: Path) -> None:
    """The columns ``names`` of a parquet ``schema`` have types that can hold what ``COLUMN_TYPES`` says (a
    dictionary-encoded column counts as its values' type); a ValueError naming the flag, the file and the column
    otherwise, before numpy converts a list or string column into objects."""
    from pyarrow import types

    for name in names:
        t = schema.field(name).type
        expected, holds = COLUMN_TYPES[name]
        if not holds(t.value_type if types.is_dictionary(t) else t):
            raise UserInputError(f"{flag} {path}: {name}: expected {expected}, got {t}")


def _read(path: Path, columns: tuple[str, ...], flag: str = "--predictions") -> dict:
    """{column: numpy array} of the named columns of a parquet file; errors name the flag and the file."""
    import pyarrow.parquet as pq

    if Path(path).is_dir():
        raise UserInputError(f"{flag} {path}: is a directory; expected a parquet file")
    if not Path(path).is_file():
        raise UserInputError(f"{flag} {path}: no such file")
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a file that is not parquet
        raise UserInputError(f"{flag} {path}: cannot read parquet ({type(e).__name__}: {e})") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise UserInputError(f"{flag} {path}: missing column(s) {missing} (has {table.column_names})")
    _check_column_types(table.schema, [*columns, *(["id"] if "id" in table.column_names else [])], flag, path)
    if "id" in table.column_names:  # a repeated id would count one sample twice
        repeated = sorted(str(i) for i, n in collections.Counter(table.column("id").to_pylist()).items() if n > 1)
        if repeated:
            raise UserInputError(f"{flag} {path}: id(s) {repeated[:5]} appear in more than one row (each sample once)")
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


def _json_ready(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else round(float(v), 6)) for k, v in metrics.items()}


def _fmt(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def dqc_table(rows: list[tuple[str, dict]]) -> str:
    """Table 1's layout: Method | ACC_DQC at tau = 0.7 / 0.8 / 0.9 | AUC | AP- | AP+ (percent)."""
    head = ["Method", "Acc t=0.7", "Acc t=0.8", "Acc t=0.9", "AUC", "AP-", "AP+"]
    keys = ["acc_0.7", "acc_0.8", "acc_0.9", "auc", "ap_neg", "ap_pos"]
    body = [[name] + [_fmt(m.get(k)) for k in keys] for name, m in rows]
    return _grid(head, body)


def tps_table(rows: list[tuple[str, float]]) -> str:
    """Table 2's layout: Method | ACC_TPS (percent)."""
    return _grid(["Method", "ACC_TPS"], [[name, _fmt(acc)] for name, acc in rows])


def _grid(head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep] + [line(r) for r in body])


def plot_dqc(rows: list[tuple[str, object, object]], out: Path) -> Path:
    """ROC and precision-recall (reasonable = positive) curves of each (name, labels, scores) into one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (roc, pr) = plt.subplots(1, 2, figsize=(10, 4.5))
    for name, y, s in rows:
        if 0 < int(y.sum()) < len(y):
            fpr, tpr = dqc.roc_curve_points(y, s)
            roc.plot(fpr, tpr, label=f"{name} (AUC {100 * dqc.roc_auc(y, s):.1f})")
        rec, prec = dqc.pr_curve_points(y, s)
        pr.step(rec, prec, where="post", label=f"{name} (AP+ {100 * dqc.average_precision(y, s):.1f})")
    roc.plot([0, 1], [0, 1], "k:", lw=0.8)
    roc.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (reasonable = positive)")
    pr.set(xlabel="recall", ylabel="precision", title="precision-recall (reasonable)", ylim=(0, 1.02))
    for ax in (roc, pr):
        ax.legend(fontsize=8, loc="lower right" if ax is roc else "lower left")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic.replacing(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return out


def metric_files(predictions: Path) -> tuple[Path, Path, Path]:
    """What ``eval dqc`` / ``eval tps`` write beside a predictions file P.parquet: P.dqc.json, P.dqc.png (the
    default plot of the first file), P.tps.json. A writer replacing P removes them with it (``judge run``,
    ``judge baselines``): they are metrics of the previous predictions."""
    return tuple(Path(predictions).with_suffix(s) for s in (".dqc.json", ".dqc.png", ".tps.json"))


def _name(path: Path, names: list[str] | None, i: int) -> str:
    return names[i] if names else Path(path).stem


def _check_names(args) -> None:
    if args.names and len(args.names) != len(args.predictions):
        raise UserInputError(f"--names: expected {len(args.predictions)} names (one per --predictions file), "
                         f"got {len(args.names)}")


def run_dqc(args) -> int:
    _check_names(args)
    if not args.no_plot:
        output_file("--plot", args.plot)
        output_not_input("--plot", args.plot, {"--predictions": args.predictions})
    frames = [_read(p, ("score", "label")) for p in args.predictions]
    rows, curves = [], []
    for i, (path, frame) in enumerate(zip(args.predictions, frames)):
        y, s = frame["label"], frame["score"]
        try:
            metrics = dqc.dqc_metrics(s, y)  # checks the columns' types and values first
        except ValueError as e:
            raise UserInputError(f"--predictions {path}: {e}") from None
        if ((s < 0) | (s > 1)).any():
            raise UserInputError(f"--predictions {path}: column 'score' must lie in [0, 1], got min {s.min()}, "
                             f"max {s.max()}")
        rows.append((_name(path, args.names, i), metrics))
        curves.append((_name(path, args.names, i), y.astype(int), s.astype(float)))
    for path, (_, metrics) in zip(args.predictions, rows):  # only once every file is valid
        atomic.write_text(metric_files(path)[0], json.dumps(_json_ready(metrics), indent=2) + "\n")
    print(dqc_table(rows))
    plot = None if args.no_plot else Path(args.plot) if args.plot else metric_files(args.predictions[0])[1]
    _remove_earlier_plots(args.predictions, plot)
    if plot is not None:
        print(f"plot: {plot_dqc(curves, plot)}")
    return 0


def _remove_earlier_plots(predictions: list[Path], plot: Path | None) -> None:
    """Removes the default plot P.dqc.png an earlier ``eval dqc`` left beside a predictions file P when this run does
    not write it (``--no-plot``, ``--plot`` elsewhere, P not the first file): beside this run's P.dqc.json it would
    show other metrics (of P before it changed, or of other files)."""
    keep = plot.resolve() if plot is not None else None
    for path in predictions:
        old = metric_files(path)[1]
        if old.exists() and old.resolve() != keep:
            old.unlink()
            print(f"removed {old}: an earlier run's plot (this run's metrics of {path} are in "
                  f"{metric_files(path)[0]})")


def run_tps(args) -> int:
    _check_names(args)
    frames = [_read(p, ("score_a", "score_b", "preferred")) for p in args.predictions]
    rows = []
    for i, (path, frame) in enumerate(zip(args.predictions, frames)):
        try:
            acc = dqc.tps_accuracy(frame["score_a"], frame["score_b"], frame["preferred"])
        except ValueError as e:
            raise UserInputError(f"--predictions {path}: {e}") from None
        rows.append((_name(path, args.names, i), acc))
    for path, (_, acc) in zip(args.predictions, rows):  # only once every file is valid
        atomic.write_text(metric_files(path)[2], json.dumps({"accuracy": round(acc, 6)}, indent=2) + "\n")
    print(tps_table(rows))
    return 0


def add_dqc(esub) -> None:
    p = esub.add_parser("dqc", help="Driving Quality Classification: accuracy at tau 0.7/0.8/0.9, balanced "
                        "accuracy, ROC AUC, AP+ and AP- (percent); writes P.dqc.json and ROC/PR plots")
    p.add_argument("--predictions", type=Path, nargs="+", required=True,
                   help="parquet file(s) with columns score (in [0, 1]) and label (1 = reasonable, 0 = failure); "
                        "one table row each")
    p.add_argument("--names", nargs="+", help="method names for the table rows (default: file stems)")
    p.add_argument("--plot", type=Path, help="ROC/PR PNG path (default: <first predictions>.dqc.png); a default "
                   "plot an earlier run left beside a predictions file is removed when this run does not write it")
    p.add_argument("--no-plot", action="store_true", help="skip the ROC/PR plot")
    p.set_defaults(func=run_dqc)


def add_tps(esub) -> None:
    p = esub.add_parser("tps", help="Trajectory Preference Selection accuracy (percent; a tie counts as wrong); "
                        "writes P.tps.json")
    p.add_argument("--predictions", type=Path, nargs="+", required=True,
                   help="parquet file(s) with columns score_a, score_b and preferred ('a' or 'b')")
    p.add_argument("--names", nargs="+", help="method names for the table rows (default: file stems)")
    p.set_defaults(func=run_tps)


def add_planning(esub) -> None:
    from jaxdrive.eval.planning_cli import add_planning_parser

    add_planning_parser(esub)


def add_vqa(esub) -> None:
    from jaxdrive.eval.vqa_cli import add_eval_vqa_subcommand

    add_eval_vqa_subcommand(esub)


EVAL_COMMANDS = (
    add_dqc,
    add_tps,
    add_planning,
    add_vqa,
)


def add_eval_subcommands(sub) -> None:
    """Registers ``jaxdrive eval`` and every benchmark of ``EVAL_COMMANDS`` under it."""
    p = sub.add_parser("eval", help="benchmarks over prediction files: " + ", ".join(
        f.__name__.removeprefix("add_") for f in EVAL_COMMANDS))
    esub = p.add_subparsers(dest="eval_cmd", required=True)
    for add in EVAL_COMMANDS:
        add(esub)

