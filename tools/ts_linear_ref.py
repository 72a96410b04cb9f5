"""tools/ts_linear_ref.py - a yardstick for the ETT tables in docs/results/timeseries.md: the exact
least-squares linear forecaster on RevIN-normalised lookbacks (each series is
normalised by its lookback's mean and std, a Linear(L -> H) plus bias maps it, the
output is de-normalised), fit on the training windows with the loss in the scaled
data's units (rows weighted by the window's variance) and a ridge term, then scored
on every validation and test window. Same splits, scaler and channel independence as
gpt2rt.h's series loader (Time-Series-Library borders, StandardScaler on the
training rows). It shows what the lookback does to validation and test for a model
with no nonlinearity and no optimiser, so no seed.

usage: python3 tools/ts_linear_ref.py FILE.csv [--horizon H] [--lookbacks 96,192,336,512,720] [--ridge 1000]
(ETTh borders: the file must have at least 14400 rows; needs numpy)"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--horizon", type=int, default=96)
    ap.add_argument("--lookbacks", default="96,192,336,512,720")
    ap.add_argument("--ridge", type=float, default=1000.0)
    a = ap.parse_args()
    try:
        import numpy as np
    except ImportError:
        print("SKIP: numpy not installed (pip install numpy)")
        return 77
    raw = np.genfromtxt(a.csv, delimiter=",", skip_header=1)[:, 1:]
    if len(raw) < 14400:
        print(f"{a.csv}: {len(raw)} rows; the ETTh borders need 14400")
        return 1
    train_end, val_end, test_end = 8640, 11520, 14400  # 12, 4 and 4 months of hours
    mu, sd = raw[:train_end].mean(0), raw[:train_end].std(0)
    d = (raw - mu) / sd
    H = a.horizon

    def windows(L, lo, hi):  # every stride-1 window of rows [lo, hi), channels as rows
        s = d[lo:hi]
        n = len(s) - L - H + 1
        idx = np.arange(n)[:, None] + np.arange(L + H)[None]
        w = s[idx].transpose(0, 2, 1).reshape(-1, L + H)
        return w[:, :L], w[:, L:]

    def revin(x):
        m = x.mean(1, keepdims=True)
        s = np.sqrt(x.var(1, keepdims=True) + 1e-5)
        return (x - m) / s, m, s

    print(f"{a.csv}, horizon {H}, ridge {a.ridge:g}: exact least squares on RevIN inputs, MSE on the scaled data")
    for L in (int(v) for v in a.lookbacks.split(",")):
        xt, yt = windows(L, 0, train_end)
        xn, m, s = revin(xt)
        A = np.hstack([xn, np.ones((len(xn), 1))])
        w = s ** 2  # the loss in scaled units: (s * (pred_n - y_n))^2
        W = np.linalg.solve((A * w).T @ A + a.ridge * np.eye(L + 1), (A * w).T @ ((yt - m) / s))
        out = []
        for lo, hi in ((train_end - L, val_end), (val_end - L, test_end)):
            x, y = windows(L, lo, hi)
            xn, m, s = revin(x)
            pred = np.hstack([xn, np.ones((len(xn), 1))]) @ W * s + m
            out.append(((pred - y) ** 2).mean())
        print(f"lookback {L:4d}: validation mse {out[0]:.4f}  test mse {out[1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
