"""Balance 10,000 packed samples of real document lengths over 8 ranks x 5 micro-batches; time it.

The documents: the whitespace word counts of /usr/share/common-licenses/* and of every .py file of the
installed Python standard library (site-packages left out), in sorted path order. They are packed into
seq_len 8192 samples (first-fit decreasing, long files split into 8192-token chunks); the packed samples are
then repeated in order, the last copy trimmed, to exactly 10,000 samples. The default 8 ranks x 5
micro-batches divides 10,000 (250 samples a micro-batch); for other --dp/--micro-batches the count is trimmed
down to a multiple of dp x micro-batches.

    python benchmarks/balance.py [--samples 10000] [--dp 8] [--micro-batches 5] [--seq-len 8192]
"""

from __future__ import annotations

import argparse
import time

from asap.balance import attention_cost_coefficients, balance, offline_document_lengths, pack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=8192)
    args = ap.parse_args()

    t = time.perf_counter()
    docs = offline_document_lengths()
    t_read = time.perf_counter() - t
    t = time.perf_counter()
    packed = pack(docs, args.seq_len)
    t_pack = time.perf_counter() - t
    slots = args.dp * args.micro_batches
    n = args.samples - args.samples % slots
    samples = [packed[i % len(packed)] for i in range(n)]
    print(f"corpus: {len(docs)} real documents ({sum(docs):,} words) read in {t_read:.2f} s; packed into "
          f"{len(packed)} samples of {args.seq_len} in {t_pack:.3f} s; repeated in order to {n} samples "
          f"({n // len(packed)} full copies + {n % len(packed)})")

    coef = attention_cost_coefficients(seq_len=args.seq_len)
    t = time.perf_counter()
    r = balance(samples, args.dp, args.micro_batches, coef)
    took = time.perf_counter() - t
    b, a = r["before"], r["after"]
    print(f"cost = {coef.a:.3g} s x sum(len^2) + {coef.b:.3g} s x tokens ({coef.model} on {coef.cluster}, "
          f"default model)")
    print(f"{args.dp} ranks x {args.micro_batches} micro-batches x {r['micro_batch_size']} samples")
    print(f"rank max/mean:        before (round-robin) {b['max_over_mean']:.4f}   after {a['max_over_mean']:.6f}")
    print(f"micro-batch max/mean: before (round-robin) {b['micro_batch_max_over_mean']:.4f}   after "
          f"{a['micro_batch_max_over_mean']:.6f}")
    print(f"slowest rank: before {b['max_s']:.3f} s  after {a['max_s']:.3f} s  (mean {a['mean_s']:.3f} s)")
    print(f"predicted gain: {100 * r['predicted_gain']:.2f}%   swaps: {r['swaps']}")
    print(f"balance time for {n} samples: {took:.3f} s (must be < 2 s): {'OK' if took < 2.0 else 'TOO SLOW'}")
    if took >= 2.0:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
