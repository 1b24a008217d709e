#!/usr/bin/python3
"""Draws docs/conv_im2col.png: one convolution as im2col and one GEMM, with real numbers.

    /usr/bin/python3 scripts/plot_im2col.py -o docs/conv_im2col.png

A batch of one image with 2 channels of 3x3 (values 1..18), a 2x2 kernel, stride 1, no padding:
4 output positions. im2col makes the matrix [C kh kw = 8, N OH OW = 4] whose row (c, i, j)
holds what kernel tap (i, j) of channel c reads at each output position; the weight [O = 2,
C kh kw = 8] times it is the output [O, N OH OW], the output's 2 channels of 2x2. The numbers
are computed here with NumPy (independently of tinyddp) and drawn into the cells.
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

C, H, W, K, O = 2, 3, 3, 2, 2
OH, OW = H - K + 1, W - K + 1
CHANNEL_COLOURS = ["#cfe3f7", "#f9dcc4"]


def im2col(x):
    rows = []
    for c in range(C):
        for i in range(K):
            for j in range(K):
                rows.append([x[c, oh + i, ow + j] for oh in range(OH) for ow in range(OW)])
    return np.array(rows)


def grid(ax, values, x0, y0, colours, title, row_labels=None, col_labels=None, fmt="{:g}"):
    """Draws `values` as a table of cells with (x0, y0) its top-left corner; returns its right edge."""
    rows, cols = values.shape
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(plt.Rectangle((x0 + c, y0 - r - 1), 1, 1, facecolor=colours[r][c], edgecolor="black", lw=0.8))
            ax.text(x0 + c + 0.5, y0 - r - 0.5, fmt.format(values[r, c]), ha="center", va="center", fontsize=8)
    ax.text(x0 + cols / 2, y0 + 0.5, title, ha="center", va="bottom", fontsize=9, weight="bold")
    for r, label in enumerate(row_labels or []):
        ax.text(x0 - 0.15, y0 - r - 0.5, label, ha="right", va="center", fontsize=7)
    for c, label in enumerate(col_labels or []):
        ax.text(x0 + c + 0.5, y0 - rows - 0.3, label, ha="center", va="top", fontsize=7)
    return x0 + cols


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    x = np.arange(1, C * H * W + 1, dtype=float).reshape(C, H, W)
    weight = np.array([[1, 0, 0, -1, 0, 1, 1, 0], [0, 1, 1, 0, 1, 0, 0, 1]], dtype=float)
    col = im2col(x)
    out = weight @ col

    fig, ax = plt.subplots(figsize=(13, 5.2))
    ax.set_xlim(-1, 33)
    ax.set_ylim(-10.5, 2)
    ax.axis("off")
    # The input: two 3x3 channels, one above the other.
    for c in range(C):
        grid(ax, x[c], 0, -c * 4.2, [[CHANNEL_COLOURS[c]] * W] * H, f"input channel {c}")
    ax.text(1.5, -8.6, "x [N=1, C=2, 3, 3]\nkernel 2x2, stride 1", ha="center", va="top", fontsize=9)
    ax.annotate("", xy=(5.3, -3), xytext=(3.6, -3), arrowprops=dict(arrowstyle="->", lw=1.5))
    ax.text(4.45, -2.6, "im2col", ha="center", fontsize=9)
    # The im2col matrix: row (c, i, j), one column per output position.
    labels = [f"c{c} ({i},{j})" for c in range(C) for i in range(K) for j in range(K)]
    colours = [[CHANNEL_COLOURS[r // (K * K)]] * (OH * OW) for r in range(C * K * K)]
    right = grid(ax, col, 7.5, 0, colours, "col [C kh kw = 8, N OH OW = 4]", labels,
                 [f"({oh},{ow})" for oh in range(OH) for ow in range(OW)])
    ax.text(right - 2, -9.1, "each column: one output position's window,\nboth channels' taps stacked", ha="center",
            va="top", fontsize=8)
    # weight @ col = out.
    ax.text(right + 1, -4, "weight [O = 2, 8]  @  col  =", ha="left", va="center", fontsize=9)
    weight_right = grid(ax, weight, right + 1, -0.5, [["#e6e6e6"] * 8] * 2, "weight [O, C kh kw]")
    out_left = weight_right + 2.2
    ax.annotate("", xy=(out_left - 0.2, -4.5), xytext=(weight_right - 4, -4.5),
                arrowprops=dict(arrowstyle="->", lw=1.5))
    grid(ax, out, out_left, -5, [["#d9f0d3"] * 4] * 2, "out [O, N OH OW]", ["o0", "o1"],
         [f"({oh},{ow})" for oh in range(OH) for ow in range(OW)])
    ax.text(out_left + 2, -8.2, "one GEMM per group; then viewed as\n[N, O, OH, OW] (a permuting copy)",
            ha="center", va="top", fontsize=8)
    fig.suptitle("conv2d as im2col + GEMM (tensor/native/conv.cc); the backward: grad_weight = grad_out @ col^T, "
                 "col2im(weight^T @ grad_out)", fontsize=10)
    fig.savefig(args.output, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
