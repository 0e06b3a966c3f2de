"""Where a script's learning comes from: stored records' loss split by what each token predicts.

Script-scoped output rows (model/layers/output_rows.py) can raise only the logits of the script's
own rows. Over the tokens of each set in a records file (route_eval/stored.py: loss_p, the base's
loss of each token; loss_a, the trained model's; the labels), the loss is split by target: a token
of the script's rows, or any other (spaces, digits, Latin letters, punctuation, the end of
document: their logits stay z_p's). Over the same tokens, the share of the loss gone is the share
of bits per byte gone, the frontier's learning. Calibration sets ("cal/...") are skipped. Pure
tensors: no model.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from megatron_scale.route_eval.stored import LABELS


def loss_by_target(records: Mapping[str, Mapping[str, torch.Tensor]], rows: torch.Tensor,
                   rows_name: str = "Hangul rows") -> list[dict[str, object]]:
    """Per set and target (`rows_name`: labels in `rows`, a [V] bool; "other"; "all"): the tokens,
    the target's share of the base's loss, the share of its own loss gone and of all the loss gone."""
    out: list[dict[str, object]] = []
    for name, r in records.items():
        if name.startswith("cal/"):
            continue
        p, a, labels = r["loss_p"].double(), r["loss_a"].double(), r[LABELS]
        inside = rows[labels]
        total_p = float(p.sum())
        for label, m in ((rows_name, inside), ("other", ~inside)):
            sp, sa = float(p[m].sum()), float(a[m].sum())
            out.append({"set": name, "target": label, "tokens": int(m.sum()), "share_of_base_loss": sp / total_p,
                        "gone": (sp - sa) / sp if sp else float("nan"), "share_of_all_gone": (sp - sa) / total_p})
        out.append({"set": name, "target": "all", "tokens": labels.numel(), "share_of_base_loss": 1.0,
                    "gone": (total_p - float(a.sum())) / total_p, "share_of_all_gone": None})
    return out


def table(rows: list[dict[str, object]]) -> str:
    """Markdown of `loss_by_target`'s rows."""
    lines = ["| set | target | tokens | share of the base's loss | its loss gone | share of all the loss gone |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r["share_of_all_gone"] is None:
            lines.append(f"| {r['set']} | {r['target']} | {r['tokens']} | 1.000 | {r['gone']:+.4f} | |")
        else:
            lines.append(f"| {r['set']} | {r['target']} | {r['tokens']} | {r['share_of_base_loss']:.3f} | "
                         f"{r['gone']:+.3f} | {r['share_of_all_gone']:+.4f} |")
    return "\n".join(lines) + "\n"
