"""The text report of `acceltrace diff`: the headline, its contributors, the top rows, findings."""

from __future__ import annotations


def fmt_ns(ns: float | None, signed: bool = False) -> str:
    if ns is None:
        return "-"
    sign = ("+" if ns > 0 else "-" if ns < 0 else "") if signed else ("-" if ns < 0 else "")
    a = abs(ns)
    if a < 1e3:
        body = f"{a:.0f} ns"
    elif a < 1e6:
        body = f"{a / 1e3:.1f} us"
    elif a < 1e9:
        body = f"{a / 1e6:.2f} ms"
    else:
        body = f"{a / 1e9:.3f} s"
    return sign + body


def _dev(device: str | None) -> str:
    return f" [{device}]" if device else ""


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def render(doc: dict, top: int = 20) -> str:
    """The comparison as the lines a terminal shows (no colour, fits 120 columns)."""
    a, b, h, st = doc["a"], doc["b"], doc["headline"], doc["steps"]
    out = [f"A {a['id']}  {a.get('name') or ''}  [{a.get('format')}]",
           f"B {b['id']}  {b.get('name') or ''}  [{b.get('format')}]"]
    if st["basis"] == "trace":
        out.append("steps: none in common, the whole traces are compared")
    else:
        out.append(f"steps: {st['basis']} ({st['name']}), {len(st['selected'])} of {st['aligned']} aligned steps:"
                   f" {','.join(map(str, st['selected']))}")
    for note in doc.get("notes", []):
        out.append(f"note: {note}")
    n = doc["noise"]
    what = "step time (sum of the selected steps)" if h["basis"] == "step" else "makespan"
    ratio = f"  x{h['ratio']:.3f}" if h.get("ratio") else ""
    out += ["", f"{what}: A {fmt_ns(h['a_ns'])} -> B {fmt_ns(h['b_ns'])}  ({fmt_ns(h['delta_ns'], True)}){ratio}",
            "  contributors (self time on the host thread):"]
    if h["basis"] == "step" and h["steps"] > 1:
        out.insert(-1, f"  per step (mean of {h['steps']}): A {fmt_ns(h['a_mean_ns'])} -> B {fmt_ns(h['b_mean_ns'])}"
                       f"  ({fmt_ns(h['b_mean_ns'] - h['a_mean_ns'], True)})")
    for c in h["contributors"]:
        out.append(f"    {fmt_ns(c['delta_ns'], True):>12}  {c['lane'] or '':<10} {_clip(c['name'], 90)}")
    out.append(f"    {fmt_ns(h['unexplained_ns'], True):>12}  rest: other names {fmt_ns(h['other_names_ns'], True)},"
               f" outside any slice {fmt_ns(h['unpartitioned_ns'], True)}")
    out += ["", f"top {min(top, len(doc['rows']))} of {len(doc['rows'])} rows by |delta| (unchanged: relative change"
                f" < {n['pct']:g}% or |delta| < {fmt_ns(n['ns'])})",
            f"  {'lane':<10} {'status':<9} {'delta':>12} {'A total':>11} {'B total':>11} {'count A':>8} {'count B':>8}"
            f" {'dev':<6} name"]
    for r in doc["rows"][:top]:
        out.append(f"  {r['lane']:<10} {r['status']:<9} {fmt_ns(r['delta_ns'], True):>12} {fmt_ns(r['total_a_ns']):>11}"
                   f" {fmt_ns(r['total_b_ns']):>11} {r['count_a']:>8} {r['count_b']:>8} {(r['device'] or ''):<6}"
                   f" {_clip(r['name'], 60)}")
    if doc.get("attribution"):
        out += ["", "device time by launching op:"]
        for o in doc["attribution"][:5]:
            ks = ", ".join(f"{_clip(k['name'], 40)}{_dev(k['device'])} {fmt_ns(k['delta_ns'], True)}"
                           for k in o["kernels"][:3])
            out.append(f"  {_clip(o['op'], 50)} {fmt_ns(o['device_delta_ns'], True)}, of which {ks}")
    out += ["", "findings by pass:"]
    if not doc["findings"]:
        out.append("  none on either side" if a["analysed"] and b["analysed"] else "  (a side is not analysed)")
    for f in doc["findings"]:
        out.append(f"  {f['pass']:<28} {f['status']:<9} A {f['count_a']:>5} ({fmt_ns(f['impact_a_ns'])})"
                   f"  B {f['count_b']:>5} ({fmt_ns(f['impact_b_ns'])})")
    return "\n".join(out)
