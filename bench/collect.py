#!/usr/bin/env python3
"""Collects the figures bench/run.sh produced into one table (stdout) and one JSON file."""
import argparse
import json
import os
import platform
import re
import sys
from datetime import datetime, timezone

# (figure, target, how the figure is compared)
TARGETS = {
    "acquire_ratio": ("acquire <= 1.2x the bare loop", 1.2),
    "hf_status_direct_ms": ("HostFactory status <= 30 ms direct", 30.0),
    "hf_status_daemon_ms": ("HostFactory status <= 10 ms through the daemon", 10.0),
    "daemon_p99_ms": ("daemon status p99 <= 5 ms at 10,000 pods", 5.0),
    "daemon_rss_mib": ("daemon <= 100 MB resident with 10,000 cached pods", 100.0),
    "operator_p99_ms": ("operator p99 <= 1 s over 1,000 workloads", 1000.0),
    "operator_resync_s": ("operator resync <= 10 s", 10.0),
    "operator_rss_mib": ("operator <= 64 MB resident", 64.0),
    "operator_bare_ratio": ("operator burst p99 <= 1.2x the bare PDB loop", 1.2),
    "console_render_ms": ("console overview renders < 1 s at 10,000 machines", 1000.0),
}


def criterion_results(root, since):
    rows = []
    if not os.path.isdir(root):
        return rows
    for dirpath, _, files in os.walk(root):
        if not dirpath.endswith(os.sep + "new") or "benchmark.json" not in files:
            continue
        est_path = os.path.join(dirpath, "estimates.json")
        if not os.path.exists(est_path) or os.path.getmtime(est_path) < since:
            continue  # left from an older run
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            bench = json.load(f)
        with open(est_path) as f:
            est = json.load(f)
        median = est["median"]
        elements = (bench.get("throughput") or {}).get("Elements")
        rows.append({
            "id": bench["full_id"],
            "median_ns": median["point_estimate"],
            "median_ci_ns": [median["confidence_interval"]["lower_bound"],
                             median["confidence_interval"]["upper_bound"]],
            "elements": elements,
            "ns_per_element": median["point_estimate"] / elements if elements else None,
        })
    return sorted(rows, key=lambda r: r["id"])


STARTUP = re.compile(r"^(?P<label>.+?)\s+median\s+(?P<median>[\d.]+) ms\s+p90\s+(?P<p90>[\d.]+) ms\s+min\s+(?P<min>[\d.]+) ms\s+\((?P<runs>\d+) runs\)")


def startup_results(path):
    rows = []
    with open(path) as f:
        for line in f:
            m = STARTUP.match(line.strip())
            if m:
                rows.append({"label": m["label"], "median_ms": float(m["median"]),
                             "p90_ms": float(m["p90"]), "min_ms": float(m["min"]),
                             "runs": int(m["runs"])})
    return rows


def acquire_results(path):
    """The acquire_pods bench's `BENCH_JSON {...}` lines: one per handler and count
    ("bench": "acquire") and the release figure ("bench": "release")."""
    rows = []
    if not path or not os.path.exists(path):
        return rows
    for line in open(path):
        if line.startswith("BENCH_JSON "):
            rows.append(json.loads(line[len("BENCH_JSON "):]))
    return rows


DAEMON_RATIO = re.compile(r"^ratio via orb serve / direct \((?P<count>\d+) machines\): (?P<ratio>[\d.]+)")


def hf_daemon_ratios(path):
    """{machines: daemon median / direct median} from the startup bench."""
    out = {}
    with open(path) as f:
        for line in f:
            m = DAEMON_RATIO.match(line.strip())
            if m:
                out[int(m["count"])] = float(m["ratio"])
    return out


def operator_results(path):
    """The `BENCH_JSON {...}` line of a cluster bench (operator_scale, daemon_status), or None
    when it did not run."""
    if not path or not os.path.exists(path):
        return None
    for line in open(path):
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    return None


def human_ns(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion-dir", required=True)
    ap.add_argument("--since", type=float, required=True)
    ap.add_argument("--startup", required=True)
    ap.add_argument("--acquire", required=True)
    ap.add_argument("--operator", default="")
    ap.add_argument("--operator-steady", default="")
    ap.add_argument("--daemon", default="")
    ap.add_argument("--console", default="")
    ap.add_argument("--list-pages", default="")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--expect", action="append", default=[],
                    choices=["acquire", "daemon", "operator", "operator-steady", "console",
                             "list-pages"],
                    help="a part that ran: fail when no figures of it could be read")
    a = ap.parse_args()

    crit = criterion_results(a.criterion_dir, a.since)
    startup = startup_results(a.startup)
    acquire = acquire_results(a.acquire)
    hf_ratios = hf_daemon_ratios(a.startup)
    operator = operator_results(a.operator)
    steady = operator_results(a.operator_steady)
    daemon = operator_results(a.daemon)
    console = operator_results(a.console)
    list_pages = operator_results(a.list_pages)
    verdicts = []
    if console:
        what, limit = TARGETS["console_render_ms"]
        value = console["rendered_max_ms"]
        verdicts.append({"target": what,
                         "figure": f"slowest of {console['loads']} loads, {console['machines']} machines",
                         "value": value, "limit": limit, "met": value < limit})
    if daemon:
        n = daemon["pods"]
        for key, figure, value in (
                ("daemon_p99_ms", f"status read p99 ms from the cache, {n} pods", daemon["cache_p99_ms"]),
                ("daemon_rss_mib", f"VmRSS MiB, {n} cached pods", daemon["rss_mib"])):
            what, limit = TARGETS[key]
            verdicts.append({"target": what, "figure": figure, "value": value,
                             "limit": limit, "met": value <= limit})
    for row in startup:
        if "requests status" in row["label"]:
            key = "hf_status_daemon_ms" if "via orb serve" in row["label"] else "hf_status_direct_ms"
            what, limit = TARGETS[key]
            verdicts.append({"target": what, "figure": row["label"] + " (median)",
                             "value": row["median_ms"], "limit": limit,
                             "met": row["median_ms"] <= limit})
    for r in acquire:
        if r["bench"] != "acquire":
            continue
        what, limit = TARGETS["acquire_ratio"]
        verdicts.append({"target": what, "figure": f"acquire {r['handler']} x{r['count']} (median ratio)",
                         "value": r["ratio"], "limit": limit, "met": r["ratio"] <= limit})
    if steady:
        n, rate = steady["deployments"], steady.get("create_rate", 0)
        rss = max(steady["rss_mib"], steady["rss_after_resync_mib"])
        for key, figure, value in (
                ("operator_p99_ms", f"Deployment -> PDB p99 ms, {n} Deployments at {rate:.0f}/s",
                 steady["latency_p99_ms"]),
                ("operator_rss_mib", f"VmRSS MiB, {n} Deployments at {rate:.0f}/s", rss)):
            what, limit = TARGETS[key]
            verdicts.append({"target": what, "figure": figure, "value": value,
                             "limit": limit, "met": value <= limit})
    if operator:
        n = operator["deployments"]
        rss = max(operator["rss_mib"], operator["rss_after_resync_mib"])
        for key, figure, value in (
                ("operator_p99_ms", f"Deployment -> PDB p99 ms, {n} Deployments in one burst",
                 operator["latency_p99_ms"]),
                ("operator_resync_s", f"full resync s, {n} Deployments", operator["resync_seconds"]),
                ("operator_rss_mib", f"VmRSS MiB, {n} Deployments", rss)):
            what, limit = TARGETS[key]
            verdicts.append({"target": what, "figure": figure, "value": value,
                             "limit": limit, "met": value <= limit})
        if operator.get("p99_over_bare") is not None:
            what, limit = TARGETS["operator_bare_ratio"]
            c = operator["bare_best_concurrency"]
            figure = (f"burst p99 / bare loop p99 ({'unlimited' if c == 0 else c} at once), "
                      f"{n} Deployments")
            verdicts.append({"target": what, "figure": figure, "value": operator["p99_over_bare"],
                             "limit": limit, "met": operator["p99_over_bare"] <= limit})

    print(f"\n## orb-rs benchmarks, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {a.commit}, "
          f"{os.cpu_count()} cores\n")
    print("| pure hot path (criterion) | median | per element |")
    print("|---|---:|---:|")
    for r in crit:
        per = human_ns(r["ns_per_element"]) if r["ns_per_element"] else ""
        print(f"| {r['id']} | {human_ns(r['median_ns'])} | {per} |")
    print("\n| fresh `orb` process | median | p90 | min |")
    print("|---|---:|---:|---:|")
    for r in startup:
        print(f"| {r['label']} | {r['median_ms']:.1f} ms | {r['p90_ms']:.1f} ms | {r['min_ms']:.1f} ms |")
    if hf_ratios:
        print("\n| HostFactory status via orb serve / direct (median) | ratio |")
        print("|---|---:|")
        for count, ratio in sorted(hf_ratios.items()):
            print(f"| {count}-machine request | {ratio:.2f} |")
    if acquire:
        rounds = len(acquire[0]["orb_rounds_s"])
        print(f"\n| until fulfilled, median of {rounds} rounds | machines | orb | bare kube-rs | "
              "**ratio** | create calls only |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in acquire:
            what = f"{r['bench']} {r['handler']}"
            create = f"{r['create_ratio']:.2f}" if r.get("create_ratio") is not None else ""
            print(f"| {what} | {r['count']} | {r['orb_median_s']:.2f} s | {r['bare_median_s']:.2f} s | "
                  f"**{r['ratio']:.2f}** | {create} |")
    else:
        print("\n(acquire not run)")
    if daemon:
        n = daemon["pods"]
        print(f"\n| orb serve, {n} pods in {daemon['requests']} in-progress requests | p50 | p99 |")
        print("|---|---:|---:|")
        print(f"| status read from the watch cache | {daemon['cache_p50_ms']:.2f} ms | {daemon['cache_p99_ms']:.2f} ms |")
        print(f"| status read with a LIST (watch_enabled=false) | {daemon['list_p50_ms']:.2f} ms | {daemon['list_p99_ms']:.2f} ms |")
        print(f"| VmRSS with the cache / a server without it | {daemon['rss_mib']:.1f} MiB | "
              f"{daemon.get('rss_without_cache_mib', float('nan')):.1f} MiB |")
    else:
        print("\n(orb serve at 10,000 pods not run)")
    if console:
        print(f"\n| web console overview, {console['machines']} machines, {console['loads']} loads | value |")
        print("|---|---:|")
        print(f"| navigation start -> rendered, median | {console['rendered_median_ms']:.0f} ms |")
        print(f"| navigation start -> rendered, slowest | {console['rendered_max_ms']:.0f} ms |")
        print(f"| machine list fetch, median | {console['machine_list_fetch_median_ms']:.0f} ms |")
    else:
        print("\n(web console overview not run)")
    if list_pages:
        print(f"\n| paginated LIST, {list_pages['pods']} pods, {list_pages['page']} a page | "
              "one page after the other | next page asked for while one arrives | ratio |")
        print("|---|---:|---:|---:|")
        for w in list_pages["ways"]:
            print(f"| {w['way']} | {w['one_after_the_other_s']:.3f} s | {w['overlapped_s']:.3f} s | "
                  f"{w['overlapped_over_one_after_the_other']:.2f} |")
    else:
        print("\n(paginated LIST, overlapped pages, not run)")
    runs = [(f"one burst, {r['create_concurrency']} creates in flight", r) for r in [operator] if r]
    runs += [(f"created at {r.get('create_rate', 0):.0f} a second", r) for r in [steady] if r]
    for arrival, r in runs:
        n = r["deployments"]
        print(f"\n| pdb-operator, {n} Deployments {arrival} | value |")
        print("|---|---:|")
        print(f"| Deployment created -> PDB seen, p50 | {r['latency_p50_ms']:.0f} ms |")
        print(f"| Deployment created -> PDB seen, p99 | {r['latency_p99_ms']:.0f} ms |")
        print(f"| Deployment created -> PDB seen, max | {r['latency_max_ms']:.0f} ms |")
        print(f"| full resync (fresh process -> {n} managed) | {r['resync_seconds']:.2f} s |")
        print(f"| VmRSS after {n} reconciled / after the resync | "
              f"{r['rss_mib']:.1f} / {r['rss_after_resync_mib']:.1f} MiB |")
        for b in r.get("bare_loop") or []:
            c = "unlimited" if b["concurrency"] == 0 else b["concurrency"]
            print(f"| bare PDB loop ({c} at once), same burst: p50 / p99 | "
                  f"{b['latency_p50_ms']:.0f} / {b['latency_p99_ms']:.0f} ms |")
        if r.get("p99_over_bare") is not None:
            print(f"| **operator p99 / best bare-loop p99** | **{r['p99_over_bare']:.2f}** |")
    if not runs:
        print("\n(pdb-operator at 1,000 Deployments not run)")
    print("\n| target | figure | value | limit | met |")
    print("|---|---|---:|---:|---|")
    for v in verdicts:
        print(f"| {v['target']} | {v['figure']} | {v['value']:.2f} | {v['limit']:.2f} | "
              f"{'yes' if v['met'] else 'NO'} |")

    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": a.commit,
        "host": {"cpus": os.cpu_count(), "system": platform.platform()},
        "criterion": crit, "startup": startup,
        "hostfactory_daemon_over_direct": {str(k): v for k, v in sorted(hf_ratios.items())},
        "acquire": [r for r in acquire if r["bench"] == "acquire"],
        "release": [r for r in acquire if r["bench"] == "release"],
        "operator": operator, "operator_steady": steady, "daemon": daemon, "console": console,
        "list_pages": list_pages,
        "targets": verdicts,
    }
    with open(a.json, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    produced = {"acquire": acquire, "daemon": daemon, "operator": operator,
                "operator-steady": steady, "console": console, "list-pages": list_pages}
    missing = [part for part in a.expect if not produced[part]]
    if not crit:
        missing.insert(0, "criterion (no estimates newer than the run's start)")
    if not startup:
        missing.insert(0, "startup")
    if missing:
        print(f"bench: no figures could be read from: {', '.join(missing)} (see their output above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
