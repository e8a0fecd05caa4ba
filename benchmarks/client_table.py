"""The tables bench_clients.py prints: each tool's TTFT and ITL medians beside batchgate's, and
with --wire the split of each TTFT into what the wire saw and the client's own lag.

Owns the layout and the legend of both; the numbers come from bench_clients.compare_tool's rows
(also written to benchmarks/results/clients.json).
"""

from __future__ import annotations

import argparse

__all__ = ["print_table"]


def _fmt(value: float | None, width: int = 8) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}}"


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    print(
        f"{args.rate:g} req/s each (tool + batchgate load), prompt ~{args.prompt_tokens} tokens, "
        f"{args.output_tokens} output tokens (ignore_eos); targets |TTFT diff| <= "
        f"{args.ttft_target_ms} ms, |ITL diff| <= {args.itl_target_ms} ms; seed {args.seed}"
    )
    print(
        f"{'tool':<15} {'version':<9} {'arr':<3} {'reqs':>5} {'errs':>4} | {'TTFT p50':>8} "
        f"{'batchg':>8} {'diff':>7} {'±95%':>5} | {'ITL p50':>8} {'batchg':>8} {'diff':>7} "
        f"{'±95%':>5} {'basis':>5} | within"
    )
    notes = []
    for r in rows:
        if "error" in r:
            print(f"{r['tool']:<15} {r['version']:<9} {r['error']}")
            continue
        print(
            f"{r['tool']:<15} {r['version']:<9} {r['arrival'][:3]:<3} {r['requests']:>5} "
            f"{r['errors']:>4} | "
            f"{_fmt(r['ttft_p50_ms'])} {_fmt(r['batchgate']['ttft_p50_ms'])} "
            f"{_fmt(r['ttft_diff_ms'], 7)} {_fmt(r['ttft_diff_noise95_ms'], 5)} | "
            f"{_fmt(r['itl_p50_ms'])} {_fmt(r['batchgate_itl_compared_ms'])} "
            f"{_fmt(r['itl_diff_ms'], 7)} {_fmt(r['itl_diff_noise95_ms'], 5)} "
            f"{r['itl_basis']:>5} | {'yes' if r['within_target'] else 'no'}"
        )
        build = r["tool_extra"].get("sdk_build_p50_ms")
        if build is not None:
            notes.append(
                f"{r['tool']}: create() -> request handed to httpx p50 {build:.2f} ms; TTFT "
                f"from that hand-off p50 {r['tool_extra']['ttft_from_handoff_p50_ms']:.2f} ms"
            )
    print("arr: the tool's arrivals (batchgate load beside it: poisson). ±95%: the noise band of")
    print("the difference (a 1 s-block bootstrap of batchgate's records in the window); a diff")
    print("inside it is not told apart from 0 by this run. ITL basis: batchgate's value is")
    print("computed the tool's way from its records; tpot = per request (last-first)/(n-1), our")
    print("TPOT; chunk = gaps between content chunks; itl0 = per-token gaps with a chunk's tokens")
    print("stamped at its arrival (gap, then zeros); itl = our per-token ITL.")
    for note in notes:
        print(note)
    wired = [r for r in rows if r.get("wire")]
    if wired:
        print_wire_table(wired)


def print_wire_table(rows: list[dict]) -> None:
    print()
    print("Wire (tcpdump on lo): TTFT p50 from a request's last byte on the wire (the server has")
    print("it all) to the first server segment with generated text, each client's requests in the")
    print("tool's window. write = p50 of first to last request byte (a client that writes headers")
    print("and body apart); lag = the client's own TTFT p50 - its wire TTFT p50 (everything the")
    print("client adds: clock to socket, the write, its reading); wire diff = tool's wire TTFT -")
    print("batchgate's: how differently the server treated the two.")
    print(
        f"{'tool':<15} {'n':>5} {'TTFT':>8} {'wire':>8} {'write':>6} {'lag':>6} | {'n':>5} "
        f"{'batchg':>8} {'wire':>8} {'lag':>6} | {'wire diff':>9}"
    )
    for r in rows:
        w = r["wire"]
        if "note" in w:
            print(f"{r['tool']:<15} {w['note']}")
            continue
        t, b = w["tool"], w["batchgate"]
        print(
            f"{r['tool']:<15} {t['requests']:>5} {_fmt(r['ttft_p50_ms'])} {_fmt(t['ttft_p50_ms'])} "
            f"{_fmt(t['write_p50_ms'], 6)} {_fmt(w['tool_lag_ms'], 6)} | {b['requests']:>5} "
            f"{_fmt(r['batchgate']['ttft_p50_ms'])} {_fmt(b['ttft_p50_ms'])} "
            f"{_fmt(w['batchgate_lag_ms'], 6)} | {_fmt(w['wire_diff_ms'], 9)}"
        )
