//! Budget arithmetic for pod-level PDBs: the value a class or customPDBConfig asks for, and the
//! drain-safety clamp that keeps at least one voluntary eviction possible (note §3.3).
//!
//! Every function returns the arithmetic it did as [`Step`]s so `plan` and `explain` can print
//! the same numbers the controller wrote.

use std::fmt;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// An absolute pod count or a percentage of the pods (0..=100).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetValue {
    Count(u32),
    Percent(u32),
}

/// Which PDB field the value goes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetRule {
    MinAvailable(BudgetValue),
    MaxUnavailable(BudgetValue),
}

/// One line of arithmetic, printed as a two-column table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub label: String,
    pub value: String,
}

pub(crate) fn step(label: impl Into<String>, value: impl fmt::Display) -> Step {
    Step {
        label: label.into(),
        value: value.to_string(),
    }
}

/// A customPDBConfig value that cannot become a valid PDB field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetValueError {
    #[error("budget value {0} is negative; use an integer >= 0 or a percentage such as \"50%\"")]
    Negative(i32),
    #[error(
        "budget value {0:?} is not a percentage; write a plain integer (3) or \"N%\" with 0 <= N <= 100 (\"50%\")"
    )]
    NotAPercentage(String),
    #[error("budget percentage {0:?} is above 100%; use a value between \"0%\" and \"100%\"")]
    PercentAbove100(String),
}

impl BudgetValue {
    /// Reads a customPDBConfig value: integers must be >= 0, strings must be `N%` with N in 0..=100
    /// (a bare `"3"` would produce a PDB the API server rejects).
    pub fn from_int_or_string(v: &IntOrString) -> Result<Self, BudgetValueError> {
        match v {
            IntOrString::Int(i) if *i < 0 => Err(BudgetValueError::Negative(*i)),
            IntOrString::Int(i) => Ok(Self::Count(*i as u32)),
            IntOrString::String(s) => {
                let digits = s
                    .strip_suffix('%')
                    .filter(|d| {
                        !d.is_empty() && d.len() <= 3 && d.bytes().all(|b| b.is_ascii_digit())
                    })
                    .ok_or_else(|| BudgetValueError::NotAPercentage(s.clone()))?;
                let p: u32 = digits
                    .parse()
                    .map_err(|_| BudgetValueError::NotAPercentage(s.clone()))?;
                if p > 100 {
                    return Err(BudgetValueError::PercentAbove100(s.clone()));
                }
                Ok(Self::Percent(p))
            }
        }
    }

    pub fn to_int_or_string(self) -> IntOrString {
        match self {
            Self::Count(n) => IntOrString::Int(n as i32),
            Self::Percent(p) => IntOrString::String(format!("{p}%")),
        }
    }

    /// Pods this value stands for out of `n`, rounding percentages up as the disruption
    /// controller does for both minAvailable and maxUnavailable.
    pub fn pods_of(self, n: u32) -> u32 {
        match self {
            Self::Count(c) => c,
            Self::Percent(p) => ceil_percent(p, n),
        }
    }
}

impl fmt::Display for BudgetValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "\"{p}%\""),
        }
    }
}

impl fmt::Display for BudgetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MinAvailable(v) => write!(f, "minAvailable {v}"),
            Self::MaxUnavailable(v) => write!(f, "maxUnavailable {v}"),
        }
    }
}

/// `ceil(p * n / 100)` in integer arithmetic.
pub fn ceil_percent(p: u32, n: u32) -> u32 {
    (u64::from(p) * u64::from(n)).div_ceil(100) as u32
}

/// A pod-level budget after the drain-safety clamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBudget {
    /// What goes into the PDB.
    pub rule: BudgetRule,
    /// Set when the clamp changed the value; the text becomes a `BudgetClamped` event.
    pub clamped: Option<String>,
    pub steps: Vec<Step>,
}

/// Applies the drain-safety clamp to a pod-level budget over `n >= 2` pods.
///
/// minAvailable: if it would keep every pod (`ceil(p*n) >= n`, or a count >= n) the integer
/// `n - 1` is written instead; otherwise the value is written unchanged (percentages stay
/// percentages so the PDB follows later scaling). maxUnavailable: a value that allows no eviction
/// (`0`, `"0%"`) becomes `1`.
pub fn clamp_pod_budget(rule: BudgetRule, n: u32) -> PodBudget {
    let mut steps = vec![step("pods", n), step("requested", rule)];
    let (written, clamped) = match rule {
        BudgetRule::MinAvailable(v) => {
            let keep = v.pods_of(n);
            if let BudgetValue::Percent(p) = v {
                steps.push(step(format!("ceil({p}% × {n})"), keep));
            }
            if keep >= n {
                let safe = n.saturating_sub(1);
                steps.push(step("clamped to pods - 1", safe));
                let why = format!(
                    "{rule} over {n} pods would block every voluntary eviction; wrote minAvailable {safe} so one pod can be drained"
                );
                (
                    BudgetRule::MinAvailable(BudgetValue::Count(safe)),
                    Some(why),
                )
            } else {
                (rule, None)
            }
        }
        BudgetRule::MaxUnavailable(v) => {
            let allowed = v.pods_of(n);
            if allowed == 0 {
                steps.push(step("raised to", 1));
                let why =
                    format!("{rule} would block every voluntary eviction; wrote maxUnavailable 1");
                (BudgetRule::MaxUnavailable(BudgetValue::Count(1)), Some(why))
            } else {
                (rule, None)
            }
        }
    };
    steps.push(step("written", written));
    PodBudget {
        rule: written,
        clamped,
        steps,
    }
}

/// Pod-level minAvailable equivalent of any rule over `n` pods (integer).
pub fn min_available_pods(rule: BudgetRule, n: u32) -> u32 {
    match rule {
        BudgetRule::MinAvailable(v) => v.pods_of(n).min(n),
        BudgetRule::MaxUnavailable(v) => n.saturating_sub(v.pods_of(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BudgetValue::{Count, Percent};
    use rstest::rstest;

    fn min(v: BudgetValue) -> BudgetRule {
        BudgetRule::MinAvailable(v)
    }
    fn max(v: BudgetValue) -> BudgetRule {
        BudgetRule::MaxUnavailable(v)
    }

    // Note §3.3 table and scenarios 2, 3, 29, 30.
    #[rstest]
    #[case::non_critical_any(min(Percent(20)), 2, min(Percent(20)), false)]
    #[case::standard_n2(min(Percent(50)), 2, min(Percent(50)), false)]
    #[case::ha_n2(min(Percent(75)), 2, min(Count(1)), true)]
    #[case::ha_n3(min(Percent(75)), 3, min(Count(2)), true)]
    #[case::ha_n4(min(Percent(75)), 4, min(Percent(75)), false)]
    #[case::mc_n2(min(Percent(90)), 2, min(Count(1)), true)]
    #[case::mc_n3(min(Percent(90)), 3, min(Count(2)), true)]
    #[case::mc_n9(min(Percent(90)), 9, min(Count(8)), true)]
    #[case::mc_n10(min(Percent(90)), 10, min(Percent(90)), false)]
    #[case::mc_n10_exact(min(Percent(90)), 10, min(Percent(90)), false)]
    #[case::custom_3_of_5(min(Count(3)), 5, min(Count(3)), false)]
    #[case::custom_5_of_5(min(Count(5)), 5, min(Count(4)), true)]
    #[case::custom_9_of_5(min(Count(9)), 5, min(Count(4)), true)]
    #[case::custom_100_percent(min(Percent(100)), 4, min(Count(3)), true)]
    #[case::max_unavailable_1(max(Count(1)), 5, max(Count(1)), false)]
    #[case::max_unavailable_0(max(Count(0)), 5, max(Count(1)), true)]
    #[case::max_unavailable_0_percent(max(Percent(0)), 5, max(Count(1)), true)]
    #[case::max_unavailable_10_percent_rounds_up(max(Percent(10)), 3, max(Percent(10)), false)]
    fn drain_safety_clamp(
        #[case] requested: BudgetRule,
        #[case] n: u32,
        #[case] want: BudgetRule,
        #[case] clamped: bool,
    ) {
        let got = clamp_pod_budget(requested, n);
        assert_eq!(got.rule, want);
        assert_eq!(got.clamped.is_some(), clamped, "{:?}", got.clamped);
        // Invariant: with all pods healthy at least one eviction stays possible.
        assert!(min_available_pods(got.rule, n) < n);
    }

    #[rstest]
    #[case::int(IntOrString::Int(3), Ok(Count(3)))]
    #[case::zero(IntOrString::Int(0), Ok(Count(0)))]
    #[case::percent(IntOrString::String("50%".into()), Ok(Percent(50)))]
    #[case::hundred(IntOrString::String("100%".into()), Ok(Percent(100)))]
    #[case::negative(IntOrString::Int(-1), Err(BudgetValueError::Negative(-1)))]
    #[case::bare_number(IntOrString::String("3".into()), Err(BudgetValueError::NotAPercentage("3".into())))]
    #[case::over(IntOrString::String("120%".into()), Err(BudgetValueError::PercentAbove100("120%".into())))]
    #[case::junk(IntOrString::String("garbage".into()), Err(BudgetValueError::NotAPercentage("garbage".into())))]
    #[case::empty_percent(IntOrString::String("%".into()), Err(BudgetValueError::NotAPercentage("%".into())))]
    fn parsing_custom_values(
        #[case] input: IntOrString,
        #[case] want: Result<BudgetValue, BudgetValueError>,
    ) {
        assert_eq!(BudgetValue::from_int_or_string(&input), want);
    }

    #[test]
    fn parse_error_names_value_and_fix() {
        let msg = BudgetValue::from_int_or_string(&IntOrString::String("3".into()))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("\"3\"") && msg.contains("\"50%\""), "{msg}");
    }

    #[rstest]
    #[case(90, 4, 4)]
    #[case(90, 10, 9)]
    #[case(75, 4, 3)]
    #[case(20, 3, 1)]
    #[case(0, 7, 0)]
    fn ceil_percent_rounds_up(#[case] p: u32, #[case] n: u32, #[case] want: u32) {
        assert_eq!(ceil_percent(p, n), want);
    }
}
