"""KoBEST before and after, paired per item: base.json against full1e-4.json (standard library only).

    python3 results/2026-12-02-kobest-cpu/paired.py results/2026-12-02-kobest-cpu

For each task both files scored, and each metric (acc, acc_norm where the task has it): the two
accuracies, the mean per-item difference with its standard error (the paired test's: sd / sqrt(n)),
and how many items both, only the base, or only the trained model got right.
"""

import json, math, sys
here = sys.argv[1]
a = json.load(open(f"{here}/base.json"))["results"]
b = json.load(open(f"{here}/full1e-4.json"))["results"]
print("| task | n | metric | base (%) | after (%) | paired diff (pp) | both right | base only | after only |")
print("|---|---|---|---|---|---|---|---|---|")
for t in b:
    pa = {r["doc_id"]: r for r in a[t]["per_item"]}
    pb = {r["doc_id"]: r for r in b[t]["per_item"]}
    ids = sorted(pa.keys() & pb.keys())
    for m in ("acc", "acc_norm"):
        if m not in a[t]:
            continue
        d = [pb[i][m] - pa[i][m] for i in ids]
        n = len(d); mu = sum(d) / n
        se = math.sqrt(sum((x - mu) ** 2 for x in d) / (n - 1) / n)
        both = int(sum(pa[i][m] and pb[i][m] for i in ids))
        ao = int(sum(pa[i][m] and not pb[i][m] for i in ids))
        bo = int(sum(pb[i][m] and not pa[i][m] for i in ids))
        print(f"| {t} | {n} | {m} | {100*a[t][m]:.1f} | {100*b[t][m]:.1f} | {100*mu:+.1f} ± {100*se:.1f} | {both} | {ao} | {bo} |")
