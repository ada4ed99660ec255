#!/usr/bin/env python3
"""Tables and JSON for bench/scale.sh: one table per part, a row per factor (1x, 2x, 5x), the
figure per unit of work beside each total so a reader sees whether the cost grows linearly,
and issue #22's targets judged at the largest factor. Results of earlier runs on the same day
(other parts or factors) are kept in the JSON file and only replaced where this run measured."""
import argparse
import json
import os
import re
import sys
from datetime import datetime, timezone

STARTUP = re.compile(r"^(?P<label>.+?)\s+median\s+(?P<median>[\d.]+) ms\s+p90\s+(?P<p90>[\d.]+) ms")
# "ratio status / --version (finished 50-machine return, no daemon up): 2.04"
VERSION_RATIO = re.compile(r"^ratio status / --version \((?P<what>.+), (?P<how>[^,]+)\): (?P<r>[\d.]+)")


def bench_json(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("BENCH_JSON "):
                rows.append(json.loads(line[len("BENCH_JSON "):]))
    return rows


def memory(raw, part, f):
    path = os.path.join(raw, f"{part}-{f}.mem.json")
    return json.load(open(path)) if os.path.exists(path) else {}


def startup(path):
    if not os.path.exists(path):
        return None
    out = {"rows": []}
    for line in open(path):
        line = line.strip()
        m = STARTUP.match(line)
        if m:
            out["rows"].append({"label": m["label"], "median_ms": float(m["median"]),
                                "p90_ms": float(m["p90"])})
        m = VERSION_RATIO.match(line)
        if m:
            out.setdefault("over_version", []).append(
                {"request": m["what"], "how": m["how"], "ratio": float(m["r"])})
    return out if out["rows"] else None


def collect(raw, factors):
    parts = {}
    for f in factors:
        key = str(f)
        found = {
            "startup": startup(os.path.join(raw, f"startup-{f}.txt")),
            "daemon": (bench_json(os.path.join(raw, f"daemon-{f}.txt")) or [None])[0],
            "acquire": bench_json(os.path.join(raw, f"acquire-{f}.txt")) or None,
            "operator": (bench_json(os.path.join(raw, f"operator-{f}.txt")) or [None])[0],
            "operator-steady": (bench_json(os.path.join(raw, f"operator-steady-{f}.txt")) or [None])[0],
        }
        for part, value in found.items():
            if value is None:
                continue
            if isinstance(value, dict):
                value = dict(value, control_plane=memory(raw, part, f))
            else:
                value = {"rows": value, "control_plane": memory(raw, part, f)}
            parts.setdefault(part, {})[key] = value
    return parts


def cp_text(entry):
    mem = entry.get("control_plane") or {}
    if not mem:
        return ""
    return f"{mem.get('apiserver_rss_mib', 0)} / {mem.get('etcd_rss_mib', 0)} MiB"


def print_tables(parts):
    verdicts = []
    if "startup" in parts:
        print("\n| HostFactory status of a completed acquire of running pods (fresh process) | machines | direct | via orb serve |")
        print("|---|---:|---:|---:|")
        for f, entry in sorted(parts["startup"].items(), key=lambda kv: int(kv[0])):
            # Completed acquires of running pods: each status call follows them on the cluster
            # (direct, a LIST per call; through orb serve, its watch cache).
            medians = {}
            for r in entry["rows"]:
                m = re.search(r"\(HostFactory, completed acquire of (\d+) running pods, (no daemon up|via orb serve)\)",
                              r["label"])
                if m:
                    medians.setdefault(int(m[1]), {})["daemon" if m[2] == "via orb serve" else "direct"] = r["median_ms"]
            for n, d in sorted(medians.items()):
                print(f"| {f}x | {n} | {d.get('direct', float('nan')):.1f} ms | {d.get('daemon', float('nan')):.1f} ms |")
                if n == 5000:
                    verdicts.append(("HostFactory status of 5,000 running machines direct <= 50 ms", d.get("direct"), 50.0))
                    verdicts.append(("HostFactory status of 5,000 running machines via orb serve <= 20 ms", d.get("daemon"), 20.0))
            for r in entry.get("over_version", []):
                print(f"\nHostFactory status of the {r['request']} ({r['how']}) / `orb --version`: {r['ratio']:.2f}")
                if r["request"].startswith(("completed acquire of 50 ", "finished 50-machine")):
                    verdicts.append((f"HostFactory status of the {r['request']} ({r['how']}) <= 2x --version",
                                     r["ratio"], 2.0))
    if "daemon" in parts:
        print("\n| orb serve | pods | status p50 | p99 | VmRSS | restart -> serving | bare LIST | ratio | "
              "start-up reconciliation | rows written / read | apiserver / etcd |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        rows = sorted(parts["daemon"].items(), key=lambda kv: int(kv[0]))
        for f, d in rows:
            print(f"| {f}x | {d['pods']} | {d['cache_p50_ms']:.2f} ms | {d['cache_p99_ms']:.2f} ms | "
                  f"{max(d['rss_mib'], d.get('rss_after_restart_mib', 0)):.1f} MiB | "
                  f"{d.get('restart_serving_seconds', float('nan')):.2f} s | {d.get('bare_list_seconds', float('nan')):.2f} s | "
                  f"{d.get('serving_over_bare_list', float('nan')):.2f} | {d.get('reconcile_pass_seconds', float('nan')):.2f} s | "
                  f"{d.get('rows_written_per_read', float('nan')):.3f} | {cp_text(d)} |")
        f, d = rows[-1]
        verdicts.append((f"orb serve status p99 <= 5 ms at {d['pods']} pods", d["cache_p99_ms"], 5.0))
        verdicts.append((f"orb serve VmRSS <= 300 MB at {d['pods']} pods",
                         max(d["rss_mib"], d.get("rss_after_restart_mib", 0)), 300.0))
        if "serving_over_bare_list" in d:
            verdicts.append((f"serving after a restart <= 1.5x a bare LIST at {d['pods']} pods",
                             d["serving_over_bare_list"], 1.5))
    if "acquire" in parts:
        print("\n| one request | handler | machines | orb | bare | ratio | per machine (orb) | apiserver / etcd |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        largest = max(parts["acquire"], key=int)
        for f, entry in sorted(parts["acquire"].items(), key=lambda kv: int(kv[0])):
            for r in entry["rows"]:
                per = r["orb_median_s"] / r["count"] * 1000
                print(f"| {r['bench']} {f}x | {r['handler']} | {r['count']} | {r['orb_median_s']:.2f} s | "
                      f"{r['bare_median_s']:.2f} s | {r['ratio']:.2f} | {per:.2f} ms | {cp_text(entry)} |")
                if f == largest:
                    verdicts.append((f"{r['bench']} {r['handler']} x{r['count']} <= 1.2x the bare loop", r["ratio"], 1.2))
    for part, label in (("operator", "one burst"), ("operator-steady", "20 a second")):
        if part not in parts:
            continue
        print(f"\n| pdb-operator, Deployments created {label} | Deployments | p50 | p99 | bare p99 | ratio | "
              "resync | VmRSS | apiserver / etcd |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        rows = sorted(parts[part].items(), key=lambda kv: int(kv[0]))
        for f, o in rows:
            bare = o.get("bare_best_p99_ms")
            ratio = o.get("p99_over_bare")
            print(f"| {f}x | {o['deployments']} | {o['latency_p50_ms']:.0f} ms | {o['latency_p99_ms']:.0f} ms | "
                  f"{'' if bare is None else f'{bare:.0f} ms'} | {'' if ratio is None else f'{ratio:.2f}'} | "
                  f"{o['resync_seconds']:.2f} s | {max(o['rss_mib'], o['rss_after_resync_mib']):.1f} MiB | {cp_text(o)} |")
        f, o = rows[-1]
        n = o["deployments"]
        verdicts.append((f"operator ({label}) VmRSS <= 128 MB at {n} Deployments",
                         max(o["rss_mib"], o["rss_after_resync_mib"]), 128.0))
        verdicts.append((f"operator ({label}) p99 <= 1 s at {n} Deployments", o["latency_p99_ms"] / 1000, 1.0))
        verdicts.append((f"operator ({label}) resync <= 10 s at {n} Deployments", o["resync_seconds"], 10.0))
    if verdicts:
        print("\n| target (at the largest factor run) | figure | met |")
        print("|---|---:|---|")
        for what, value, limit in verdicts:
            met = "?" if value is None else ("yes" if value <= limit else "**no**")
            print(f"| {what} | {'' if value is None else f'{value:.2f}'} | {met} |")
    return verdicts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--factors", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--expect", action="append", default=[],
                    choices=["startup", "daemon", "acquire", "operator", "operator-steady"],
                    help="a part that ran: fail when a factor of it left no figures")
    a = ap.parse_args()
    factors = [int(f) for f in a.factors.split(",") if f]
    measured = collect(a.raw, factors)
    if not measured:
        print("collect_scale: no figures were produced", file=sys.stderr)
        return 1
    missing = [f"{part} at {f}x" for part in a.expect for f in factors
               if str(f) not in measured.get(part, {})]
    if missing:
        print(f"collect_scale: no figures could be read for {', '.join(missing)} "
              "(see their output above)", file=sys.stderr)
        return 1
    stamp = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    for entries in measured.values():
        for entry in entries.values():
            entry["commit"], entry["measured"] = a.commit, stamp
    doc = json.load(open(a.json)) if os.path.exists(a.json) else {"parts": {}}
    for part, entries in measured.items():
        doc["parts"].setdefault(part, {}).update(entries)
    print(f"\n## orb-rs at scale, {stamp}, commit {a.commit}, {os.cpu_count()} cores")
    doc["verdicts"] = [{"target": w, "value": v, "limit": l, "met": None if v is None else v <= l}
                       for w, v, l in print_tables(doc["parts"])]
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
