#!/usr/bin/python3
"""Plot training loss curves from `pipeline train --log FILE.csv` logs as one SVG.

    plot_train.py OUT.svg LABEL=run1.csv LABEL=run2.csv ... [--title TEXT] [--smooth K] [--log-y]

Each CSV has the columns step,epoch,loss,accuracy,samples_per_s (the header line of
`pipeline train --log`). The plot shows the loss per step of every run (a moving mean
over K steps with --smooth; on a logarithmic axis with --log-y), with the axes
labelled, and a legend; runs drawn later are
dashed so that identical curves stay visible on top of each other. Standard library
only; the output is deterministic.
"""
import argparse
import csv
import math
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
DASHES = ["", "8,5", "3,4", "10,3,2,3"]


def read_log(path):
    steps, loss = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            steps.append(int(row["step"]))
            loss.append(float(row["loss"]))
    if not steps:
        sys.exit("plot_train.py: %s: no rows" % path)
    return steps, loss


def smooth(v, k):
    if k <= 1:
        return v
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= k:
            acc -= v[i - k]
        out.append(acc / min(i + 1, k))
    return out


def nice_ticks(lo, hi, n=5):
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    t = math.ceil(lo / step) * step
    ticks = []
    while t <= hi + 1e-12:
        ticks.append(round(t, 12))
        t += step
    return ticks


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def plot(out, runs, title, k, log_y):
    W, H, L, R, T, B = 760, 440, 70, 20, 40, 55
    xs = [s for _, (steps, _) in runs for s in steps]
    ys = [y for _, (_, loss) in runs for y in smooth(loss, k)]
    x0, x1 = min(xs), max(xs)
    if log_y:
        pos = [y for y in ys if y > 0] or [1.0]
        y0, y1 = 10 ** math.floor(math.log10(min(pos))), 10 ** math.ceil(math.log10(max(pos)))
        ticks = [10.0 ** e for e in range(int(round(math.log10(y0))), int(round(math.log10(y1))) + 1)]
        f = lambda y: math.log10(max(y, y0))  # noqa: E731
    else:
        y0, y1 = 0.0, max(ys) * 1.05
        ticks = nice_ticks(y0, y1)
        f = lambda y: y  # noqa: E731
    sx = lambda x: L + (x - x0) / ((x1 - x0) or 1) * (W - L - R)  # noqa: E731
    sy = lambda y: H - B - (f(y) - f(y0)) / ((f(y1) - f(y0)) or 1) * (H - T - B)  # noqa: E731
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
         'font-family="sans-serif" font-size="12">' % (W, H, W, H),
         '<rect width="%d" height="%d" fill="white"/>' % (W, H),
         '<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>' % (W // 2, esc(title))]
    for t in ticks:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, sy(t), sy(t)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (L - 6, sy(t) + 4, t))
    for t in nice_ticks(x0, x1, 8):
        o.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>' % (sx(t), sx(t), T, H - B))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (sx(t), H - B + 16, t))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (L, T, W - L - R, H - T - B))
    o.append('<text x="%d" y="%d" text-anchor="middle">optimizer step</text>' % ((L + W - R) // 2, H - 14))
    o.append('<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">loss%s%s</text>'
             % ((T + H - B) // 2, (T + H - B) // 2, " (mean of %d steps)" % k if k > 1 else "",
                ", log scale" if log_y else ""))
    for i, (label, (steps, loss)) in enumerate(runs):
        pts = " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in zip(steps, smooth(loss, k)))
        dash = DASHES[i % len(DASHES)]
        o.append('<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"/>'
                 % (COLORS[i % len(COLORS)], "2.2" if i == 0 else "1.4",
                    ' stroke-dasharray="%s"' % dash if dash else "", pts))
        ly = T + 18 + 18 * i
        o.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                 % (W - R - 230, W - R - 200, ly, ly, COLORS[i % len(COLORS)],
                    ' stroke-dasharray="%s"' % dash if dash else ""))
        o.append('<text x="%d" y="%d">%s</text>' % (W - R - 194, ly + 4, esc(label)))
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="LABEL=FILE.csv")
    ap.add_argument("--title", default="training loss")
    ap.add_argument("--smooth", type=int, default=1)
    ap.add_argument("--log-y", action="store_true")
    a = ap.parse_args()
    runs = []
    for r in a.runs:
        label, _, path = r.partition("=")
        if not path:
            sys.exit("plot_train.py: expected LABEL=FILE.csv, given %s" % r)
        runs.append((label, read_log(path)))
    plot(a.out, runs, a.title, a.smooth, a.log_y)


if __name__ == "__main__":
    main()
