"""A self-contained static HTML audit page of judged samples (``jaxdrive judge run --report out.html``).

One table row per record: the BEV image (embedded as a base64 PNG), the human label, the DriveJudge score and
EPDMS and their difference, the sub-scores, the gates with their probabilities (rules the judge turned off
highlighted), the rationale and the human justification. Rows start sorted by the largest |DriveJudge - EPDMS|;
clicking a column header sorts by it (again: reverse). No external resources: the page opens offline.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path

from jaxdrive import atomic
from jaxdrive.judge.gates import RULE_LABELS

_SUBS = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "ec")

_STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:4px 6px;vertical-align:top}
th{background:#eee;cursor:pointer;position:sticky;top:0}
th.sorted-desc::after{content:" \\25BC"} th.sorted-asc::after{content:" \\25B2"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
img.bev{width:160px;height:160px;image-rendering:pixelated}
span.gate{display:inline-block;margin:1px 2px;padding:0 3px;border-radius:3px;background:#dfe}
span.gate.off{background:#fdd;font-weight:bold}
.bad{color:#b00}.good{color:#070}
"""

_SCRIPT = """
function sortTable(col, numeric){
  const table=document.getElementById('judged'); const body=table.tBodies[0];
  const th=table.tHead.rows[0].cells[col];
  const desc=!(th.classList.contains('sorted-desc'));
  for(const h of table.tHead.rows[0].cells){h.classList.remove('sorted-desc','sorted-asc');}
  th.classList.add(desc?'sorted-desc':'sorted-asc');
  const rows=Array.from(body.rows);
  rows.sort((a,b)=>{
    let x=a.cells[col].dataset.v, y=b.cells[col].dataset.v;
    if(numeric){x=parseFloat(x); y=parseFloat(y); return desc?y-x:x-y;}
    return desc?y.localeCompare(x):x.localeCompare(y);
  });
  for(const r of rows){body.appendChild(r);}
}
"""


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img class="bev" alt="BEV" src="data:image/png;base64,{data}">'


def _num(v, fmt="{:.3f}") -> str:
    return "" if v is None else fmt.format(v)


def write_report(path: str | Path, root: str | Path, records, cols: dict, title: str = "DriveJudge report") -> Path:
    """Writes the page for ``records`` (``judge.dataset.Record``) with the judged columns ``cols`` (as
    ``judge.run.judge_records`` returns: id, score, epdms, p_<RULE>, rationale) to ``path``."""
    root = Path(root)
    by_id = {i: k for k, i in enumerate(cols["id"])}
    rows = []
    for r in records:
        k = by_id[r.id]
        score, epd = float(cols["score"][k]), float(cols["epdms"][k])
        diff = score - epd
        probs = [float(cols[f"p_{g}"][k]) for g in RULE_LABELS]
        gates = " ".join(f'<span class="gate{"" if p > 0.5 else " off"}" title="P(apply)={p:.3f}">'
                         f'{g} {p:.2f}</span>' for g, p in zip(RULE_LABELS, probs))
        subs = " ".join(f"{m}={_num(r.subscores.get(m), '{:.2f}')}" for m in _SUBS if r.subscores.get(m) is not None)
        label = "reasonable" if r.label == 1 else "failure"
        image = _img(root / r.image) if r.image and (root / r.image).exists() else ""
        rows.append(
            f'<tr data-id="{html.escape(r.id)}">'
            f'<td data-v="{html.escape(r.id)}">{html.escape(r.id)}<br><small>{html.escape(r.proposal_name)}</small></td>'
            f'<td data-v="0">{image}</td>'
            f'<td data-v="{r.label}" class="{"good" if r.label else "bad"}">{label}</td>'
            f'<td class="num" data-v="{score:.6f}">{score:.3f}</td>'
            f'<td class="num" data-v="{epd:.6f}">{epd:.3f}</td>'
            f'<td class="num" data-v="{abs(diff):.6f}">{diff:+.3f}</td>'
            f'<td data-v="{sum(p <= 0.5 for p in probs)}">{gates}</td>'
            f'<td data-v="{html.escape(subs)}"><small>{html.escape(subs)}</small></td>'
            f'<td data-v="{html.escape(str(cols["rationale"][k]))}">{html.escape(str(cols["rationale"][k]))}</td>'
            f'<td data-v="{html.escape(r.justification)}">{html.escape(r.justification)}</td></tr>')
    order = sorted(range(len(rows)), key=lambda i: -abs(float(cols["score"][by_id[records[i].id]])
                                                        - float(cols["epdms"][by_id[records[i].id]])))
    heads = [("sample", False), ("BEV", True), ("human", True), ("DriveJudge", True), ("EPDMS", True),
             ("|DJ - EPDMS|", True), ("gates (P apply)", True), ("sub-scores", False), ("rationale", False),
             ("justification", False)]
    sorted_attr = ' class="sorted-desc"'
    head = "".join(f'<th onclick="sortTable({i}, {"true" if num else "false"})"'
                   f'{sorted_attr if name.startswith("|") else ""}>{html.escape(name)}</th>'
                   for i, (name, num) in enumerate(heads))
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{len(rows)} samples, largest DriveJudge vs EPDMS disagreement first; click a header to sort. "
            f"Gates in red are rules the judge does not apply (P(apply) &le; 0.5).</p>"
            f"<table id='judged'><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows[i] for i in order) + "</tbody></table></body></html>")
    path = Path(path)
    atomic.write_text(path, page)
    return path
