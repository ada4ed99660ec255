//! Maintenance windows as a pure function of (windows, now): whether budgets are relaxed right
//! now, since when, and when that changes next (note §6). The controller requeues at the next
//! transition, so idle workloads are relaxed and restored without any external event.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::crd::MaintenanceWindow;

/// A parsed daily window. Bounds are minutes after local midnight; `end` is exclusive.
#[derive(Clone, Debug)]
pub struct Window {
    pub start: u16,
    pub end: u16,
    pub zone_name: String,
    zone: TimeZone,
    /// Weekdays (0 = Sunday) on which the window opens; `None` = every day.
    pub days: Option<BTreeSet<u8>>,
}

/// A window that cannot be evaluated; each message names the value and the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("window time {0:?} must be in HH:MM format (24-hour clock, e.g. \"02:00\")")]
    BadTime(String),
    #[error("invalid timezone: {0:?}; use an IANA zone name such as \"UTC\" or \"Europe/Berlin\"")]
    UnknownZone(String),
    #[error("day of week {0} must be between 0 (Sunday) and 6 (Saturday)")]
    BadDay(i32),
    #[error(
        "maintenance window annotation {0:?} must look like \"HH:MM-HH:MM [IANA-zone]\", e.g. \"02:00-04:00 Europe/Berlin\""
    )]
    BadAnnotation(String),
}

/// Parses `H:MM` or `HH:MM` (hours 0-23, minutes 0-59) into minutes after midnight.
pub fn parse_clock(s: &str) -> Result<u16, WindowError> {
    let bad = || WindowError::BadTime(s.to_string());
    let (h, m) = s.split_once(':').ok_or_else(bad)?;
    let digits = |x: &str, max_len| {
        !x.is_empty() && x.len() <= max_len && x.bytes().all(|b| b.is_ascii_digit())
    };
    if !digits(h, 2) || !digits(m, 2) || m.len() != 2 {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 23 || m > 59 {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

fn load_zone(name: &str) -> Result<TimeZone, WindowError> {
    TimeZone::get(name).map_err(|_| WindowError::UnknownZone(name.to_string()))
}

impl Window {
    /// A window from a PDBPolicy's `maintenanceWindows[]`.
    pub fn from_policy(w: &MaintenanceWindow) -> Result<Self, WindowError> {
        let zone_name = if w.timezone.is_empty() {
            "UTC"
        } else {
            &w.timezone
        };
        let days = if w.days_of_week.is_empty() {
            None
        } else {
            let mut set = BTreeSet::new();
            for d in &w.days_of_week {
                if !(0..=6).contains(d) {
                    return Err(WindowError::BadDay(*d));
                }
                set.insert(*d as u8);
            }
            Some(set)
        };
        Ok(Self {
            start: parse_clock(&w.start)?,
            end: parse_clock(&w.end)?,
            zone: load_zone(zone_name)?,
            zone_name: zone_name.to_string(),
            days,
        })
    }

    /// A window from annotation `pdboperator.io/maintenance-window: "HH:MM-HH:MM [zone]"`
    /// (every day; zone defaults to UTC; extra whitespace-separated fields are ignored).
    pub fn from_annotation(value: &str) -> Result<Self, WindowError> {
        let mut fields = value.split_whitespace();
        let range = fields
            .next()
            .ok_or_else(|| WindowError::BadAnnotation(value.to_string()))?;
        let (start, end) = range
            .split_once('-')
            .ok_or_else(|| WindowError::BadAnnotation(value.to_string()))?;
        let zone_name = fields.next().unwrap_or("UTC");
        Ok(Self {
            start: parse_clock(start)?,
            end: parse_clock(end)?,
            zone: load_zone(zone_name)?,
            zone_name: zone_name.to_string(),
            days: None,
        })
    }

    fn opens_on(&self, weekday: u8) -> bool {
        self.days.as_ref().is_none_or(|d| d.contains(&weekday))
    }

    /// Whether the window is open at `t`, evaluated at minute resolution in its zone.
    /// Overnight windows (start > end): the part after `start` belongs to today's weekday, the
    /// part before `end` to the previous weekday. start == end never opens.
    pub fn is_open_at(&self, t: Timestamp) -> bool {
        let local = t.to_zoned(self.zone.clone());
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        let today = local.weekday().to_sunday_zero_offset() as u8;
        let yesterday = (today + 6) % 7;
        match self.start.cmp(&self.end) {
            std::cmp::Ordering::Equal => false,
            std::cmp::Ordering::Less => {
                self.start <= minute && minute < self.end && self.opens_on(today)
            }
            std::cmp::Ordering::Greater => {
                (minute >= self.start && self.opens_on(today))
                    || (minute < self.end && self.opens_on(yesterday))
            }
        }
    }

    /// Start and end instants on the local days from two days before `t` to eight days after.
    fn bounds_near(&self, t: Timestamp) -> Vec<Timestamp> {
        let today: Date = t.to_zoned(self.zone.clone()).date();
        let mut out = Vec::new();
        for offset in -2i32..=8 {
            let Ok(day) = today.checked_add(offset.days()) else {
                continue;
            };
            for minute in [self.start, self.end] {
                let dt = day.at((minute / 60) as i8, (minute % 60) as i8, 0, 0);
                if let Ok(z) = dt.to_zoned(self.zone.clone()) {
                    out.push(z.timestamp());
                }
            }
        }
        out
    }
}

/// Combined state of all windows that apply to one workload (a union: open if any is open).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowState {
    pub open: bool,
    /// When the current opening began (written as `pdboperator.io/maintenance-start`).
    pub open_since: Option<Timestamp>,
    /// Next instant at which `open` flips, searched up to eight days ahead.
    pub next_transition: Option<Timestamp>,
}

impl WindowState {
    /// How long the controller should wait before re-evaluating: until the next transition,
    /// at most one hour.
    pub fn requeue_after(&self, now: Timestamp) -> Duration {
        const HOUR: Duration = Duration::from_secs(3600);
        self.next_transition
            .and_then(|next| Duration::try_from(next.duration_since(now)).ok())
            .map_or(HOUR, |d| d.min(HOUR))
    }
}

fn any_open(windows: &[Window], t: Timestamp) -> bool {
    windows.iter().any(|w| w.is_open_at(t))
}

/// Evaluates the union of `windows` at `now`.
pub fn window_state(windows: &[Window], now: Timestamp) -> WindowState {
    let open = any_open(windows, now);
    let mut bounds: Vec<Timestamp> = windows.iter().flat_map(|w| w.bounds_near(now)).collect();
    bounds.sort();
    bounds.dedup();
    let next_transition = bounds
        .iter()
        .copied()
        .filter(|b| *b > now)
        .find(|b| any_open(windows, *b) != open);
    let open_since = if open {
        bounds
            .iter()
            .rev()
            .copied()
            .filter(|b| *b <= now)
            .find(|b| {
                any_open(windows, *b)
                    && !any_open(windows, *b - jiff::SignedDuration::from_secs(60))
            })
    } else {
        None
    };
    WindowState {
        open,
        open_since,
        next_transition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    // Wednesday 2026-06-24 03:00 UTC, the clock of note scenarios 39-41.
    fn wed_0300() -> Timestamp {
        "2026-06-24T03:00:00Z".parse().unwrap()
    }

    fn policy_window(start: &str, end: &str, days: &[i32]) -> Window {
        Window::from_policy(&MaintenanceWindow {
            start: start.into(),
            end: end.into(),
            timezone: "UTC".into(),
            days_of_week: days.to_vec(),
        })
        .unwrap()
    }

    #[rstest]
    #[case::inside("02:00", "04:00", &[], true)]
    #[case::monday_only("02:00", "04:00", &[1], false)]
    #[case::wednesday_listed("02:00", "04:00", &[3], true)]
    #[case::overnight_tail_of_tuesday("22:00", "04:00", &[2], true)]
    #[case::overnight_wednesday_only("22:00", "04:00", &[3], false)]
    #[case::later_today("05:00", "06:00", &[], false)]
    #[case::start_equals_end("03:00", "03:00", &[], false)]
    #[case::end_is_exclusive("01:00", "03:00", &[], false)]
    #[case::start_is_inclusive("03:00", "03:30", &[], true)]
    #[case::one_digit_hour("2:00", "4:00", &[], true)]
    fn open_at_wednesday_three(
        #[case] start: &str,
        #[case] end: &str,
        #[case] days: &[i32],
        #[case] open: bool,
    ) {
        assert_eq!(policy_window(start, end, days).is_open_at(wed_0300()), open);
    }

    #[rstest]
    #[case::next_start_in_two_hours("05:00", "06:00", 2 * 3600)]
    #[case::tomorrow("02:00", "02:30", 23 * 3600)]
    #[case::closes_at_four("02:00", "04:00", 3600)]
    fn next_transition(#[case] start: &str, #[case] end: &str, #[case] secs: i64) {
        let state = window_state(&[policy_window(start, end, &[])], wed_0300());
        let next = state.next_transition.expect("a transition within 8 days");
        assert_eq!(next.duration_since(wed_0300()).as_secs(), secs);
        assert!(state.requeue_after(wed_0300()) <= Duration::from_secs(3600));
    }

    #[test]
    fn open_since_is_the_window_start() {
        let state = window_state(&[policy_window("02:00", "04:00", &[])], wed_0300());
        assert!(state.open);
        assert_eq!(
            state.open_since,
            Some("2026-06-24T02:00:00Z".parse().unwrap())
        );
    }

    #[test]
    fn idle_workload_is_relaxed_at_two_and_restored_at_four() {
        // Scenario 40: from 01:30 the next transition is 02:00, and from there 04:00.
        let w = [policy_window("02:00", "04:00", &[])];
        let s1 = window_state(&w, "2026-06-24T01:30:00Z".parse().unwrap());
        assert!(!s1.open);
        let t2 = s1.next_transition.unwrap();
        assert_eq!(t2, "2026-06-24T02:00:00Z".parse().unwrap());
        let s2 = window_state(&w, t2);
        assert!(s2.open);
        assert_eq!(
            s2.next_transition,
            Some("2026-06-24T04:00:00Z".parse().unwrap())
        );
        assert!(!window_state(&w, s2.next_transition.unwrap()).open);
    }

    #[test]
    fn annotation_window_is_read_in_its_zone() {
        let w = Window::from_annotation("02:00-04:00 Europe/Berlin").unwrap();
        // 03:00 UTC is 05:00 in Berlin (CEST): closed. 01:00 UTC is 03:00 in Berlin: open.
        assert!(!w.is_open_at(wed_0300()));
        assert!(w.is_open_at("2026-06-24T01:00:00Z".parse().unwrap()));
    }

    #[test]
    fn annotation_and_policy_windows_form_a_union() {
        let annotation = Window::from_annotation("05:00-06:00").unwrap();
        let policy = policy_window("02:00", "04:00", &[]);
        assert!(window_state(&[annotation.clone(), policy], wed_0300()).open);
        assert!(!window_state(&[annotation], wed_0300()).open);
    }

    #[rstest]
    #[case::hour_25("25:00-04:00", WindowError::BadTime("25:00".into()))]
    #[case::no_dash("02:00", WindowError::BadAnnotation("02:00".into()))]
    #[case::zone("02:00-04:00 Mars/Olympus", WindowError::UnknownZone("Mars/Olympus".into()))]
    #[case::one_digit_minute("02:0-04:00", WindowError::BadTime("02:0".into()))]
    fn bad_annotations(#[case] value: &str, #[case] want: WindowError) {
        assert_eq!(Window::from_annotation(value).unwrap_err(), want);
    }

    #[test]
    fn bad_policy_day_is_rejected() {
        let err = Window::from_policy(&MaintenanceWindow {
            start: "02:00".into(),
            end: "04:00".into(),
            timezone: "UTC".into(),
            days_of_week: vec![7],
        })
        .unwrap_err();
        assert_eq!(err, WindowError::BadDay(7));
    }
}
