"""Offline long-term memory consolidation (paper Algorithm 1, Eq. 5-6).

    P+  <- VerifiedTrajs(P)                     verify
    B+  <- QualityFilter(ExtractBuffer(P+))     extract, quality-filter
    U   <- CollectUsefulEntries(P+)             g_i(C) = 1 iff e_i was retrieved for C and C used it
    M^  <- Reinforce(M, U, eta)                 w_i <- w_i + eta * g_i(C), once per verified trajectory (Eq. 6)
    {G} <- SemanticCluster(B+)                  greedy leader clustering on the embeddings (cosine >= cluster_tau)
    per G: Deduplicate, ResolveConflicts(G, M^), Abstract (pluggable: template or LLM)
    M'  <- Merge(M^, {e_k})

Trajectories are the loop's JSONL records (``jaxdrive.agent.loop``): ``id``, ``scene_id``, ``question``, ``gold``,
``correct``, ``termination``, ``steps`` (each with ``action.tool``, ``ok``), ``retrieved`` / ``memory_used``
(entry ids), ``reasoning``, ``stm``. A trajectory id already in ``store.consolidated`` is skipped, so consolidating
the same buffer twice changes nothing (idempotent).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import re
from typing import Callable, Protocol, Sequence

import numpy as np

from jaxdrive.agent.store import MemoryEntry, MemoryStore
from jaxdrive.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class ConsolidationConfig:
    eta: float = 0.1  # utility-update rate of Eq. 6
    cluster_tau: float = 0.85  # cosine to a cluster leader to join its cluster
    dup_tau: float = 0.97  # cosine at which two experiences (or an experience and an entry) are duplicates
    min_pattern_chars: int = 20  # quality filter: success patterns shorter than this carry no reusable content
    initial_utility: float = 0.0

    def __post_init__(self):
        if not (math.isfinite(self.eta) and self.eta >= 0):
            raise UserInputError(f"eta: expected a finite utility-update rate >= 0, got {self.eta}")
        for name in ("cluster_tau", "dup_tau"):
            if not -1.0 <= getattr(self, name) <= 1.0:
                raise UserInputError(f"{name}: expected a cosine in [-1, 1], got {getattr(self, name)}")
        if self.min_pattern_chars < 0:
            raise UserInputError(f"min_pattern_chars: expected >= 0, got {self.min_pattern_chars}")
        if not math.isfinite(self.initial_utility):
            raise UserInputError(f"initial_utility: expected a finite number, got {self.initial_utility}")


@dataclasses.dataclass
class Report:
    """What a consolidation round did (counts per Algorithm 1 step)."""

    seen: int = 0
    skipped_already_consolidated: int = 0
    verified: int = 0
    extracted: int = 0
    quality_kept: int = 0
    reinforced: dict = dataclasses.field(default_factory=dict)  # entry id -> number of credits
    clusters: int = 0
    duplicates_dropped: int = 0
    conflicts_dropped: int = 0
    known_dropped: int = 0
    added: list = dataclasses.field(default_factory=list)


# the text fields an experience is extracted from, and what each holds in a loop record (``loop.run_episode``)
TEXT_FIELDS = {"scene_id": "a scene id (string)", "stm": "the serialised short-term memory (string)",
               "reasoning": "the answer's reasoning (string)"}


def check_verified_fields(traj: dict, where: str) -> None:
    """The fields consolidation reads, when present, have their loop types: ``question``, ``scene_id``, ``stm`` and
    ``reasoning`` strings, ``gold`` a string or null (an item without a gold answer), ``steps`` a list of objects
    (each ``action`` an object whose ``tool`` is a string), ``retrieved`` / ``memory_used`` lists of entry ids,
    ``correct`` a bool; a ``SourceError`` naming ``where`` and the field otherwise (not a crash half-way through a
    round, nor a value stored as its ``str()``)."""
    from jaxdrive.datasets.base import SourceError

    def fail(field: str, want: str, got) -> None:
        raise SourceError(f"{where}: field {field!r}: expected {want}, got {type(got).__name__}")

    steps = traj.get("steps", [])
    if not isinstance(steps, list):
        fail("steps", "a list of step objects", steps)
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            fail(f"steps[{i}]", "an object", step)
        if not isinstance(step.get("action", {}), dict):
            fail(f"steps[{i}].action", "an object", step["action"])
        if "tool" in step.get("action", {}) and not isinstance(step["action"]["tool"], str):
            fail(f"steps[{i}].action.tool", "a tool name (string)", step["action"]["tool"])
    for field in ("retrieved", "memory_used"):
        ids = traj.get(field, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            fail(field, "a list of entry ids (strings)", ids)
    if not isinstance(traj.get("question", ""), str):
        fail("question", "a string", traj["question"])
    for field, want in TEXT_FIELDS.items():
        if not isinstance(traj.get(field, ""), str):
            fail(field, want, traj[field])
    if not isinstance(traj.get("gold"), (str, type(None))):
        fail("gold", "the gold answer (string) or null", traj["gold"])
    if not isinstance(traj.get("correct", False), bool):
        fail("correct", "true or false", traj["correct"])


def verify(traj: dict) -> bool:
    """Vrf(C): a correct final answer, reached by finishing (not by max turns / malformed output), at least one valid
    tool call, no failed tool call, and one belief update per observation (reasoning-observation consistency)."""
    steps = traj.get("steps", [])
    calls = [s for s in steps if s.get("action", {}).get("tool")]
    return (traj.get("correct") is True and traj.get("termination") == "finish" and len(calls) > 0
            and all(s.get("ok") for s in calls) and all(str(s.get("update", "")).strip() for s in calls))


def _stem(question: str) -> str:
    """The question without its options (the part that generalises across scenes)."""
    return re.split(r"\s[A-F][).]\s", question.strip(), maxsplit=1)[0].strip()


_NODE = re.compile(r"^\S+ (?P<type>\S+): (?P<sector>\S+) (?P<band>\S+) [\d.]+m (?P<motion>\S+) [\d.]+m/s "
                   r"risk=(?P<risk>\w+)(?: \[(?P<rel>.*)\])?$")


def stm_risks(stm: str) -> list[str]:
    """The risk factors of a serialised short-term memory (``stm.SceneGraph.serialise``), without the scene's object
    ids and distances: one "<level>-risk <type> <sector> <band> <motion> (<relations>)" per high- or medium-risk
    object, highest first; for other STM text, the content of its ``risk:`` lines that are not "none..."."""
    nodes = [m for m in map(_NODE.match, stm.splitlines()) if m and m["risk"] in ("high", "medium")]
    if nodes:
        nodes.sort(key=lambda m: m["risk"] != "high")
        return [f"{m['risk']}-risk {m['type']} {m['sector']} {m['band']} {m['motion']}"
                + (f" ({m['rel']})" if m["rel"] else "") for m in nodes]
    heads = (ln.split(":", 1) for ln in stm.splitlines() if ":" in ln)
    return [v.strip() for k, v in heads if k.strip().lower() == "risk" and not v.strip().lower().startswith("none")]


def extract(traj: dict) -> MemoryEntry:
    """Ext(C): the experience schema of a verified trajectory (conditions, risks, success pattern, tool strategy);
    its fields have their loop types (``check_verified_fields``)."""
    tools = [s["action"]["tool"] for s in traj["steps"] if s.get("action", {}).get("tool")]
    risks = stm_risks(traj.get("stm", ""))
    text = f"{traj.get('scene_id', '')}|{traj['id']}"
    return MemoryEntry(
        id="exp-" + hashlib.sha1(text.encode()).hexdigest()[:12],
        conditions=f"task: {_stem(traj.get('question', ''))}",
        risks="; ".join(risks[:3]),
        success_pattern=traj.get("reasoning", "").strip(),
        tool_strategy=" -> ".join(dict.fromkeys(tools)),
        scene_id=traj.get("scene_id", ""),
        answer=traj.get("gold") or "",
        sources=[traj["id"]],
    )


def quality_filter(exps: Sequence[MemoryEntry], cfg: ConsolidationConfig) -> list[MemoryEntry]:
    """QualityFilter: keep experiences with conditions, a tool strategy and a success pattern of some substance."""
    return [e for e in exps if e.conditions.strip() and e.tool_strategy.strip()
            and len(e.success_pattern) >= cfg.min_pattern_chars]


def useful_entries(traj: dict) -> list[str]:
    """g_i(C) = 1 for the entries that were retrieved for C and that C used (cited) -- each id at most once."""
    retrieved = set(traj.get("retrieved", []))
    return [i for i in dict.fromkeys(traj.get("memory_used", [])) if i in retrieved]


def semantic_cluster(emb: np.ndarray, tau: float) -> list[list[int]]:
    """Greedy leader clustering in input order: each item joins the first leader with cosine >= tau, else leads."""
    leaders: list[int] = []
    groups: list[list[int]] = []
    for i in range(emb.shape[0]):
        if leaders:
            sims = emb[leaders] @ emb[i]
            j = int(np.argmax(sims))
            if sims[j] >= tau:
                groups[j].append(i)
                continue
        leaders.append(i)
        groups.append([i])
    return groups


class Abstractor(Protocol):
    """Abstract(G): one reusable entry from a cluster of experiences (most supported first)."""

    def __call__(self, group: Sequence[MemoryEntry]) -> MemoryEntry: ...


def template_abstract(group: Sequence[MemoryEntry]) -> MemoryEntry:
    """Template abstraction: the first (representative) experience's conditions, pattern and strategy; the distinct
    risks of the whole cluster; support, sources and scenes summed. Deterministic."""
    rep = group[0]
    risks = list(dict.fromkeys(r.strip() for e in group for r in e.risks.split(";") if r.strip()))
    sources = [s for e in group for s in e.sources]
    return dataclasses.replace(rep, id="exp-" + hashlib.sha1("|".join(sorted(sources)).encode()).hexdigest()[:12],
                               risks="; ".join(risks), support=sum(e.support for e in group), sources=sources,
                               scenes=_other_scenes(rep, group))


def _other_scenes(entry: MemoryEntry, experiences: Sequence[MemoryEntry]) -> list[str]:
    """The scenes of ``experiences`` other than ``entry.scene_id``, in order (an abstracted entry's ``scenes``)."""
    every = dict.fromkeys(s for e in experiences for s in (e.scene_id, *e.scenes) if s)
    return [s for s in every if s != entry.scene_id]


ABSTRACT_PROMPT = """Abstract these driving experiences into ONE reusable memory entry. Do not mention answers,
scene ids or option letters. Reply with strict JSON: {{"conditions": "...", "risks": "...", "success_pattern": "...",
"tool_strategy": "..."}}
Experiences:
{items}"""


class LLMAbstractor:
    """Abstraction by a language model: ``generate(prompt) -> text`` must return the JSON of ``ABSTRACT_PROMPT``.
    Unparseable replies fall back to ``template_abstract`` and are counted in ``fallbacks``."""

    def __init__(self, generate: Callable[[str], str]):
        self.generate, self.fallbacks = generate, 0

    def __call__(self, group: Sequence[MemoryEntry]) -> MemoryEntry:
        base = template_abstract(group)
        items = "\n".join(json.dumps(e.safe_view()) for e in group)
        try:
            reply = json.loads(re.search(r"\{.*\}", self.generate(ABSTRACT_PROMPT.format(items=items)), re.S).group(0))
            fields = {k: str(reply[k]).strip() for k in ("conditions", "risks", "success_pattern", "tool_strategy")}
            if not fields["conditions"]:
                raise UserInputError("empty conditions")
        except (AttributeError, KeyError, ValueError, TypeError):
            self.fallbacks += 1
            return base
        return dataclasses.replace(base, **fields)


def consolidate(store: MemoryStore, trajectories: Sequence[dict], embed, *,
                cfg: ConsolidationConfig = ConsolidationConfig(),
                abstract: Abstractor = template_abstract) -> tuple[MemoryStore, Report]:
    """One consolidation round M^(n) -> M^(n+1) (Algorithm 1); ``store`` is not modified. Each trajectory is checked
    first (``check_verified_fields``: a ``SourceError`` naming its id and the field, before anything is embedded)."""
    for t in trajectories:
        check_verified_fields(t, f"trajectory {t.get('id')!r}")
    rep = Report(seen=len(trajectories))
    done = set(store.consolidated)
    fresh = []
    for t in trajectories:
        if t["id"] in done:
            rep.skipped_already_consolidated += 1
        else:
            fresh.append(t)
            done.add(t["id"])
    verified = [t for t in fresh if verify(t)]
    rep.verified = len(verified)
    buffer = [extract(t) for t in verified]
    rep.extracted = len(buffer)
    buffer = quality_filter(buffer, cfg)
    rep.quality_kept = len(buffer)

    # Reinforce (Eq. 6): one credit eta per verified trajectory that found the entry useful
    entries = [dataclasses.replace(e, sources=list(e.sources)) for e in store.entries]
    by_id = {e.id: e for e in entries}
    for t in verified:
        for i in useful_entries(t):
            if i in by_id:
                by_id[i].utility = by_id[i].utility + cfg.eta
                rep.reinforced[i] = rep.reinforced.get(i, 0) + 1

    new_entries: list[MemoryEntry] = []
    if buffer:
        emb = np.asarray(embed([e.text() for e in buffer]), np.float32)
        groups = semantic_cluster(emb, cfg.cluster_tau)
        rep.clusters = len(groups)
        known = np.asarray(store.embeddings, np.float32)
        for g in groups:
            kept = []  # Deduplicate
            for i in g:
                if any(buffer[i].text() == buffer[j].text() or float(emb[i] @ emb[j]) >= cfg.dup_tau for j in kept):
                    rep.duplicates_dropped += 1
                else:
                    kept.append(i)
            kept, dropped_known, dropped_conflict = _resolve_conflicts(kept, buffer, emb, known, cfg)
            rep.known_dropped += dropped_known
            rep.conflicts_dropped += dropped_conflict
            if not kept:
                continue
            group = [buffer[i] for i in kept]
            entry = abstract(group)
            entry.utility = cfg.initial_utility
            # every scene of the cluster, duplicates dropped included: retrieval for any of them must exclude it
            entry.scenes = _other_scenes(entry, [buffer[i] for i in g])
            if entry.id in by_id or any(entry.id == e.id for e in new_entries):
                continue
            new_entries.append(entry)
            rep.added.append(entry.id)
    emb_all = np.asarray(store.embeddings, np.float32)
    if new_entries:
        emb_all = np.concatenate([emb_all, np.asarray(embed([e.text() for e in new_entries]), np.float32)])
    out = MemoryStore(entries + new_entries, emb_all, list(store.consolidated) + [t["id"] for t in fresh],
                      store.embedder)
    return out, rep


def _resolve_conflicts(kept: list[int], buffer: Sequence[MemoryEntry], emb: np.ndarray, known: np.ndarray,
                       cfg: ConsolidationConfig) -> tuple[list[int], int, int]:
    """ResolveConflicts(G, M^): experiences the memory already holds (cosine >= dup_tau to an entry) are dropped; when
    the rest recommend different tool strategies, the majority strategy wins (ties: the earliest)."""
    n0 = len(kept)
    if known.shape[0]:
        kept = [i for i in kept if float(np.max(known @ emb[i])) < cfg.dup_tau]
    n_known = n0 - len(kept)
    if not kept:
        return kept, n_known, 0
    counts = collections.Counter(buffer[i].tool_strategy for i in kept)
    best = max(counts.values())
    winner = next(buffer[i].tool_strategy for i in kept if counts[buffer[i].tool_strategy] == best)
    out = [i for i in kept if buffer[i].tool_strategy == winner]
    return out, n_known, len(kept) - len(out)
