"""The GPU check's files under its output folder: ``gpu_check.json`` (everything), ``gpu_check.md``
(the tables), ``measurements.csv`` (the unshared wave's peaks as rows ``cpplan calibrate`` reads) and
``logs/CASE.{cold,warm}.jsonl`` (every measured wave as planner-state logs, which ``cpplan calibrate``
and ``Planner.load`` read)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from cpplan.calibration.measurements import COLUMNS, GB
from cpplan.spec.topology import AXES

JSON_NAME, MARKDOWN_NAME, CSV_NAME, LOGS_DIR = "gpu_check.json", "gpu_check.md", "measurements.csv", "logs"
FORMAT = "cpplan-gpu-check/1"


def calibration_rows(report: dict) -> list[dict]:
    """One calibration row per phase of the unshared wave (when its plan is one wave): the observed
    range over that phase's runs, in GB."""
    rows = [r for r in report.get("waves", []) if r["case"] == "no_sharing"]
    case = report.get("wave_cases", {}).get("no_sharing")
    if not rows or case is None or case["num_waves"] != 1:
        return []
    out = []
    for phase in ("cold", "warm"):
        peaks = [r["measured_peak_bytes"] for r in rows if r["phase"] == phase]
        if not peaks or min(peaks) <= 0:
            continue
        record = {"model": report["card"], "layers": case["layers"]}
        record |= {axis: 1 for axis in AXES}
        record |= {"requests": case["requests"], "total_tokens": case["total_tokens"], "phase": phase}
        record |= {"observed_min_gb": f"{min(peaks) / GB:.9f}", "observed_max_gb": f"{max(peaks) / GB:.9f}"}
        out.append(record)
    return out


def write_csv(report: dict, path: Path) -> Path | None:
    """The calibration CSV (None and no file when there is no row)."""
    rows = calibration_rows(report)
    if not rows:
        return None
    source = "fake memory (a dry run: 0.9 x the card, not a measurement)" if report["dry_run"] else "CUDA"
    lines = [
        f"# cpplan gpu-check {report['started']}: {report['environment']['device']['name']}, {source}.",
        "# Peak bytes above the pre-wave baseline (torch.cuda.max_memory_allocated after a reset),",
        "# GB = 1e9 B;",
        "# one wave of unique requests at CP1, random weights, LoRA; cold = first run, warm = the next.",
        ",".join(COLUMNS),
    ]
    lines += [",".join(str(row[c]) for c in COLUMNS) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _gb(value: float | None) -> str:
    return "" if value is None else f"{value / GB:.3f}"


def _num(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def markdown(report: dict) -> str:
    """The report's tables in markdown."""
    env = report["environment"]
    lines = [f"# cpplan gpu-check, {report['started']}", ""]
    lines += [f"- device: {env['device']['name']}; CUDA {env['cuda'] or 'none'}; python {env['python']}"]
    lines += ["- " + ", ".join(f"{k} {v or 'not installed'}" for k, v in env["packages"].items())]
    lines += [
        f"- dry run: {report['dry_run']}; wall {report['wall_s']:.1f} s; passed: {report['passed']}",
        "",
    ]
    lines += [
        "## Exactness (log-probs: max abs; gradients: relative L2 / worst parameter's max relative)",
        "",
    ]
    header = ["family", "dtype", "CP", "packed", "auto vs torch", "auto vs alone", "torch vs alone", "pass"]
    rows = []
    for r in report.get("exactness", []):
        cells = [
            f"{c['logprobs_abs']:.1e} / {c['grads_rel_l2']:.1e} / {c['grads_max_rel']:.1e}"
            for c in r["comparisons"]
        ]
        rows.append(
            [r["family"], r["dtype"], str(r["cp"]), str(r["packed_tokens"]), *cells, str(r["passed"])]
        )
    lines += [*_table(header, rows), ""]
    lines += ["Tolerances (log-probs abs, gradients rel L2, worst max rel; blank: not checked):", ""]
    tol_rows = [
        [key, str(t["logprobs_abs"]), str(t["grads_rel_l2"]), str(t["grads_max_rel"] or ""), t["why"]]
        for key, t in report.get("tolerances", {}).items()
    ]
    lines += [*_table(["device/dtype", "log-probs", "grads L2", "grads max", "why"], tol_rows), ""]
    lines += ["## Waves at CP1 (peak above the pre-wave baseline, GB; seconds)", ""]
    header = ["case", "wave", "phase", "packed", "logical", "measured GB", "card GB", "ratio"]
    header += ["measured s", "card s", "ratio", "memory"]
    rows = [
        [
            r["case"],
            str(r["wave"]),
            r["phase"],
            f"{r['packed_tokens']:,}",
            f"{r['logical_tokens']:,}",
            _gb(r["measured_peak_bytes"]),
            _gb(r["card_peak_bytes"]),
            f"{r['peak_ratio']:.3f}",
            f"{r['measured_s']:.3f}",
            f"{r['card_s']:.3f}",
            f"{r['seconds_ratio']:.3f}",
            r["memory_source"],
        ]
        for r in report.get("waves", [])
    ]
    lines += [*_table(header, rows), ""]
    lines += ["## Kernels alone (forward + backward; seconds per token or per attended pair)", ""]
    header = ["kernel", "path", "tokens", "dtype", "first s", "s", "work", "s per work", "card s per work"]
    rows = [
        [
            r["kernel"],
            r["path"],
            f"{r['tokens']:,}",
            r["dtype"],
            f"{r['first_s']:.4f}",
            f"{r['seconds']:.4f}",
            f"{r['work']:.3g}",
            _num(r["s_per_work"], ".3e"),
            _num(r["card_s_per_work"], ".3e"),
        ]
        for r in report.get("kernels", [])
    ]
    lines += [*_table(header, rows), ""]
    lines += _cp_terms_markdown(report.get("cp_terms", {}))
    for key, title in (("skipped", "Skipped (time limit)"), ("errors", "Errors")):
        if report.get(key):
            lines += [f"## {title}", "", *(f"- {item}" for item in report[key]), ""]
    return "\n".join(lines)


def _cp_terms_markdown(parts: dict) -> list[str]:
    """The CP terms' section: each part's table, or the reason it was skipped."""
    if not parts:
        return []
    lines = ["## CP terms (ring-step block efficiency, all-to-all bandwidth)", ""]
    for name, part in parts.items():
        if part["status"] != "measured":
            lines += [f"- {name}: skipped ({part['reason']})"]
            continue
        if name == "ring_block":
            header = ["block tokens", "s", "s per pair", "efficiency vs largest"]
            rows = [
                [
                    f"{r['block_tokens']:,}",
                    f"{r['seconds']:.4f}",
                    f"{r['s_per_pair']:.3e}",
                    f"{r['efficiency']:.3f}",
                ]
                for r in part["rows"]
            ]
        else:
            header = ["bytes per rank", "all-to-all bus GB/s", "all-gather bus GB/s"]
            rows = [
                [
                    f"{r['bytes_per_rank']:,}",
                    f"{r['all_to_all_bus_bytes_per_s'] / 1e9:.1f}",
                    f"{r['all_gather_bus_bytes_per_s'] / 1e9:.1f}",
                ]
                for r in part["rows"]
            ]
        lines += ["", f"{name}:", "", *_table(header, rows)]
    return [*lines, ""]


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (an infinite ratio, a NaN) as None: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_report(report: dict, output: Path) -> list[Path]:
    """``gpu_check.json`` and ``gpu_check.md`` (and the CSV when it has rows) under ``output``."""
    output.mkdir(parents=True, exist_ok=True)
    json_path = output / JSON_NAME
    text = json.dumps(finite(report), indent=1, allow_nan=False)
    json_path.write_text(text + "\n", encoding="utf-8")
    md_path = output / MARKDOWN_NAME
    md_path.write_text(markdown(report), encoding="utf-8")
    written = [json_path, md_path]
    csv_path = write_csv(report, output / CSV_NAME)
    return written + ([csv_path] if csv_path else [])


__all__ = [
    "CSV_NAME",
    "FORMAT",
    "JSON_NAME",
    "LOGS_DIR",
    "MARKDOWN_NAME",
    "calibration_rows",
    "finite",
    "markdown",
    "write_csv",
    "write_report",
]
