//! Rounds of the bench: the bare loop at each concurrency and the operator on the same burst,
//! printed side by side, with the operator's p99 over each round's best bare p99.

use serde_json::json;

use super::burst::Burst;

/// The operator's burst p99 against the bare loop's best.
pub const BARE_RATIO_TARGET: f64 = 1.2;

/// `BENCH_BARE_CONCURRENCY`: the bare loop's concurrencies to try (0 = no limit); empty = none.
pub fn bare_concurrencies() -> Vec<usize> {
    std::env::var("BENCH_BARE_CONCURRENCY")
        .unwrap_or_else(|_| "32,128,0".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

pub fn concurrency_text(c: usize) -> String {
    if c == 0 {
        "unlimited".into()
    } else {
        c.to_string()
    }
}

/// One figure of a burst (p50, p99, max).
type Figure = fn(&Burst) -> f64;

/// One round of bursts: the bare loop at each concurrency and the operator, in either order.
pub struct Round {
    pub bare: Vec<(usize, Burst)>,
    pub operator: Burst,
    /// Whether the operator's burst ran before the bare loop's in this round.
    pub operator_first: bool,
}

impl Round {
    /// The bare loop's best run of the round (lowest p99): the limit.
    pub fn best_bare(&self) -> Option<&(usize, Burst)> {
        self.bare
            .iter()
            .min_by(|a, b| a.1.p99().total_cmp(&b.1.p99()))
    }

    pub fn ratio(&self) -> Option<f64> {
        self.best_bare().map(|(_, b)| self.operator.p99() / b.p99())
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

/// Prints the rounds side by side (nothing without bare runs); returns the median ratio.
pub fn print_side_by_side(
    rounds: &[Round],
    bare_runs: &[usize],
    deployments: usize,
    in_flight: usize,
) -> Option<f64> {
    let ratio = median(rounds.iter().filter_map(Round::ratio).collect());
    if !bare_runs.is_empty() {
        println!();
        println!(
            "Side by side, the same burst ({deployments} Deployments, {in_flight} creates in flight), each on a fresh namespace, {} round(s):",
            rounds.len()
        );
        print!("| round, created -> PDB seen |");
        for c in bare_runs {
            print!(" bare loop, {} at once |", concurrency_text(*c));
        }
        println!(" pdb-operator | operator / best bare |");
        println!("|---|{}---:|---:|", "---:|".repeat(bare_runs.len()));
        for (i, r) in rounds.iter().enumerate() {
            let best = r.best_bare().map(|(_, b)| b);
            let rows: [(&str, Figure); 3] = [
                ("p50", Burst::p50),
                ("p99", Burst::p99),
                ("max", Burst::max),
            ];
            for (label, f) in rows {
                print!("| {i}: {label} |");
                for (_, b) in &r.bare {
                    print!(" {:.0} ms |", f(b));
                }
                let op = f(&r.operator);
                let vs = best.map_or(String::new(), |b| format!("{:.2}", op / f(b)));
                println!(" {op:.0} ms | {vs} |");
            }
            let order = if r.operator_first {
                "operator ran first"
            } else {
                "operator ran last"
            };
            print!("| {i}: creates took / last PDB after ({order}) |");
            for (_, b) in &r.bare {
                print!(" {:.1} / {:.1} s |", b.create_seconds, b.all_pdbs_seconds);
            }
            println!(
                " {:.1} / {:.1} s | |",
                r.operator.create_seconds, r.operator.all_pdbs_seconds
            );
        }
        if let Some(ratio) = ratio {
            println!(
                "operator burst p99 / bare-loop limit p99 = {ratio:.2} (median of {} round(s); target <= {BARE_RATIO_TARGET:.1}): {}",
                rounds.len(),
                met(ratio <= BARE_RATIO_TARGET)
            );
        }
    }
    ratio
}

/// The rounds for `BENCH_JSON`.
pub fn rounds_json(rounds: &[Round]) -> Vec<serde_json::Value> {
    rounds
        .iter()
        .map(|r| {
            let bare: Vec<serde_json::Value> = r
                .bare
                .iter()
                .map(|(c, b)| {
                    json!({"concurrency": c, "latency_p50_ms": b.p50(), "latency_p99_ms": b.p99(),
                           "latency_max_ms": b.max(), "create_seconds": b.create_seconds,
                           "all_pdbs_seconds": b.all_pdbs_seconds})
                })
                .collect();
            json!({"bare_loop": bare,
                   "bare_best_concurrency": r.best_bare().map(|(c, _)| *c),
                   "operator_p50_ms": r.operator.p50(), "operator_p99_ms": r.operator.p99(),
                   "operator_max_ms": r.operator.max(),
                   "operator_create_seconds": r.operator.create_seconds,
                   "operator_all_pdbs_seconds": r.operator.all_pdbs_seconds,
                   "operator_first": r.operator_first,
                   "p99_over_bare": r.ratio()})
        })
        .collect()
}
