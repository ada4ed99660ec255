//! One circuit breaker per handler kind. After `threshold` consecutive failed calls (retries
//! already spent) the breaker opens and calls fail fast for `reset` time; then one probe call
//! goes through: its success closes the breaker, its failure opens it again. The state
//! machine takes the time as an argument, so it is tested without sleeping.

use std::time::{Duration, Instant};

/// What the `circuit_state{handler}` gauge reports: 0, 1 or 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn gauge_value(self) -> i64 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half-open",
        }
    }
}

/// How a guarded call went, as far as the apiserver's health goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The apiserver answered (a 4xx such as 404/409/422 included).
    Answered,
    /// No usable answer: transport error, 429 or 5xx after the retries.
    Failed,
}

/// A call let through: an ordinary one, or the single probe of a half-open breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Normal,
    Probe,
}

/// Why a call was refused without reaching the apiserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// Consecutive failures that opened the breaker.
    pub failures: u32,
    /// Time until the next probe may go (zero while a probe is in flight).
    pub retry_in: Duration,
}

#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    threshold: u32,
    reset: Duration,
    failures: u32,
    opened_at: Option<Instant>,
    probe_in_flight: bool,
}

impl CircuitBreaker {
    /// `threshold` below 1 counts as 1.
    pub fn new(threshold: u32, reset: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            reset,
            failures: 0,
            opened_at: None,
            probe_in_flight: false,
        }
    }

    pub fn state(&self, now: Instant) -> BreakerState {
        match self.opened_at {
            None => BreakerState::Closed,
            Some(at) if now.saturating_duration_since(at) < self.reset => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// Lets a call through, or refuses it while open (and while a half-open probe runs).
    pub fn admit(&mut self, now: Instant) -> Result<Admission, Refusal> {
        let Some(opened_at) = self.opened_at else {
            return Ok(Admission::Normal);
        };
        let open_for = now.saturating_duration_since(opened_at);
        if open_for < self.reset {
            return Err(Refusal {
                failures: self.failures,
                retry_in: self.reset - open_for,
            });
        }
        if self.probe_in_flight {
            return Err(Refusal {
                failures: self.failures,
                retry_in: Duration::ZERO,
            });
        }
        self.probe_in_flight = true;
        Ok(Admission::Probe)
    }

    /// Records how an admitted call ended.
    pub fn record(&mut self, admission: Admission, outcome: CallOutcome, now: Instant) {
        match (admission, outcome) {
            (Admission::Probe, CallOutcome::Answered) => {
                self.failures = 0;
                self.opened_at = None;
                self.probe_in_flight = false;
            }
            (Admission::Probe, CallOutcome::Failed) => {
                self.failures = self.failures.saturating_add(1);
                self.opened_at = Some(now);
                self.probe_in_flight = false;
            }
            // A call admitted before the breaker opened says nothing new once it is open.
            (Admission::Normal, _) if self.opened_at.is_some() => {}
            (Admission::Normal, CallOutcome::Answered) => self.failures = 0,
            (Admission::Normal, CallOutcome::Failed) => {
                self.failures = self.failures.saturating_add(1);
                if self.failures >= self.threshold {
                    self.opened_at = Some(now);
                }
            }
        }
    }

    /// A probe that ended without an outcome (cancelled): the next call may probe instead.
    pub fn abandon(&mut self, admission: Admission) {
        if admission == Admission::Probe {
            self.probe_in_flight = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESET: Duration = Duration::from_secs(60);

    fn fail(b: &mut CircuitBreaker, now: Instant) {
        let admission = b.admit(now).expect("admitted");
        b.record(admission, CallOutcome::Failed, now);
    }

    #[test]
    fn opens_after_the_threshold_of_consecutive_failures() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(3, RESET);
        fail(&mut b, t0);
        fail(&mut b, t0);
        assert_eq!(b.state(t0), BreakerState::Closed);
        fail(&mut b, t0);
        assert_eq!(b.state(t0), BreakerState::Open);
        let refusal = b.admit(t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(refusal.failures, 3);
        assert_eq!(refusal.retry_in, Duration::from_secs(50));
    }

    #[test]
    fn an_answer_resets_the_count_of_consecutive_failures() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(3, RESET);
        fail(&mut b, t0);
        fail(&mut b, t0);
        let a = b.admit(t0).unwrap();
        b.record(a, CallOutcome::Answered, t0);
        fail(&mut b, t0);
        fail(&mut b, t0);
        assert_eq!(b.state(t0), BreakerState::Closed);
    }

    #[test]
    fn after_the_reset_timeout_one_probe_goes_and_its_success_closes() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(1, RESET);
        fail(&mut b, t0);
        let later = t0 + RESET;
        assert_eq!(b.state(later), BreakerState::HalfOpen);
        let probe = b.admit(later).unwrap();
        assert_eq!(probe, Admission::Probe);
        // Others wait for the probe.
        assert_eq!(b.admit(later).unwrap_err().retry_in, Duration::ZERO);
        b.record(probe, CallOutcome::Answered, later);
        assert_eq!(b.state(later), BreakerState::Closed);
        assert_eq!(b.admit(later), Ok(Admission::Normal));
    }

    #[test]
    fn a_failed_probe_opens_the_breaker_for_another_reset_timeout() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(2, RESET);
        fail(&mut b, t0);
        fail(&mut b, t0);
        let t1 = t0 + RESET + Duration::from_secs(5);
        let probe = b.admit(t1).unwrap();
        b.record(probe, CallOutcome::Failed, t1);
        assert_eq!(b.state(t1 + Duration::from_secs(59)), BreakerState::Open);
        assert_eq!(
            b.admit(t1 + Duration::from_secs(1)).unwrap_err(),
            Refusal {
                failures: 3,
                retry_in: Duration::from_secs(59)
            }
        );
        assert_eq!(b.state(t1 + RESET), BreakerState::HalfOpen);
    }

    #[test]
    fn a_cancelled_probe_lets_the_next_call_probe() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(1, RESET);
        fail(&mut b, t0);
        let probe = b.admit(t0 + RESET).unwrap();
        b.abandon(probe);
        assert_eq!(b.admit(t0 + RESET), Ok(Admission::Probe));
    }

    #[test]
    fn late_results_of_calls_admitted_before_opening_change_nothing() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(1, RESET);
        let early = b.admit(t0).unwrap();
        fail(&mut b, t0);
        b.record(early, CallOutcome::Answered, t0);
        assert_eq!(b.state(t0), BreakerState::Open);
    }

    #[test]
    fn gauge_values_follow_the_documented_encoding() {
        assert_eq!(BreakerState::Closed.gauge_value(), 0);
        assert_eq!(BreakerState::Open.gauge_value(), 1);
        assert_eq!(BreakerState::HalfOpen.gauge_value(), 2);
    }
}
