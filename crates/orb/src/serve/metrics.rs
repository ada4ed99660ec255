//! Prometheus metrics in the OpenMetrics text format (prometheus-client). Names are listed
//! in docs/rest-api.md; every label takes a closed set of values.

use std::sync::Mutex;
use std::time::Duration;

use orb_core::request::RequestStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How an acquire or release call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stored, and the provider took it.
    Accepted,
    /// Stored, but the provider failed it at once (the request id carries the error).
    Failed,
    /// Refused before anything was stored (bad input, limits, unknown names).
    Rejected,
    /// Could not be served (provider or storage unavailable).
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
            Self::Error => "error",
        }
    }
}

/// The Kubernetes handler label: a provider API, else `unknown`.
pub fn handler_label(provider_api: Option<&str>) -> &'static str {
    match provider_api.map(str::to_ascii_lowercase).as_deref() {
        Some("pod") => "pod",
        Some("deployment") => "deployment",
        Some("statefulset") => "statefulset",
        Some("job") => "job",
        _ => "unknown",
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    handler: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: String,
    route: String,
    code: u16,
}

fn call_histogram() -> Histogram {
    // 10 ms .. ~82 s
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

fn http_histogram() -> Histogram {
    // 1 ms .. ~8 s
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

type Durations = Family<CallLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Mutex<Registry>,
    acquire_total: Family<CallLabels, Counter>,
    acquire_seconds: Durations,
    release_total: Family<CallLabels, Counter>,
    release_seconds: Durations,
    requests_by_status: Family<StatusLabels, Gauge>,
    http_total: Family<HttpLabels, Counter>,
    http_seconds: Family<HttpLabels, Histogram, fn() -> Histogram>,
    /// Why nothing is exported (`metrics_enabled=false`); `None` when metrics are on.
    disabled: Option<&'static str>,
}

/// The comment `/metrics` carries instead of series when the provider's metrics are off.
pub const METRICS_DISABLED: &str = "metrics are disabled: the Kubernetes provider's \
     metrics_enabled is false (ORB_K8S_METRICS_ENABLED); set it to true to export them";

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// No metrics at all (seed 001: `metrics_enabled=false` disables metric emission
    /// entirely): nothing is registered and the exposition is one comment saying why.
    pub fn disabled() -> Self {
        Self {
            registry: Mutex::new(Registry::default()),
            disabled: Some(METRICS_DISABLED),
            ..Self::new()
        }
    }

    /// Whether anything is exported.
    pub fn enabled(&self) -> bool {
        self.disabled.is_none()
    }

    /// The HTTP layer's metrics plus the Kubernetes provider's (`orb_k8s_*`).
    pub fn with_kubernetes(k8s: &orb_k8s::metrics::K8sMetrics) -> Self {
        let metrics = Self::new();
        {
            let mut registry = metrics
                .registry
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            k8s.register(registry.sub_registry_with_prefix("k8s"));
        }
        metrics
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("orb");
        let acquire_total = Family::<CallLabels, Counter>::default();
        let acquire_seconds: Durations = Family::new_with_constructor(call_histogram);
        let release_total = Family::<CallLabels, Counter>::default();
        let release_seconds: Durations = Family::new_with_constructor(call_histogram);
        let requests_by_status = Family::<StatusLabels, Gauge>::default();
        let http_total = Family::<HttpLabels, Counter>::default();
        let http_seconds: Family<HttpLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(http_histogram);
        registry.register(
            "acquire",
            "Machine requests (acquire calls) by handler and outcome",
            acquire_total.clone(),
        );
        registry.register(
            "acquire_duration_seconds",
            "Time to answer an acquire call, by handler and outcome",
            acquire_seconds.clone(),
        );
        registry.register(
            "release",
            "Machine returns (release calls) by handler and outcome",
            release_total.clone(),
        );
        registry.register(
            "release_duration_seconds",
            "Time to answer a release call, by handler and outcome",
            release_seconds.clone(),
        );
        registry.register(
            "requests",
            "Stored requests by status, counted when scraped",
            requests_by_status.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests served, by method, route template and status code",
            http_total.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time to answer HTTP requests, by method, route template and status code",
            http_seconds.clone(),
        );
        // Every status is present from the start, so a dashboard sees zeros rather than gaps.
        for status in RequestStatus::ALL {
            requests_by_status
                .get_or_create(&StatusLabels {
                    status: status_label(status),
                })
                .set(0);
        }
        Self {
            registry: Mutex::new(registry),
            acquire_total,
            acquire_seconds,
            release_total,
            release_seconds,
            requests_by_status,
            http_total,
            http_seconds,
            disabled: None,
        }
    }

    pub fn record_acquire(&self, handler: &'static str, outcome: Outcome, took: Duration) {
        let labels = CallLabels {
            handler,
            outcome: outcome.as_str(),
        };
        self.acquire_total.get_or_create(&labels).inc();
        self.acquire_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn record_release(&self, handler: &'static str, outcome: Outcome, took: Duration) {
        let labels = CallLabels {
            handler,
            outcome: outcome.as_str(),
        };
        self.release_total.get_or_create(&labels).inc();
        self.release_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn record_http(&self, method: &str, route: &str, code: u16, took: Duration) {
        let labels = HttpLabels {
            method: method.to_string(),
            route: route.to_string(),
            code,
        };
        self.http_total.get_or_create(&labels).inc();
        self.http_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Replaces the per-status request counts with a fresh count.
    pub fn set_request_counts(&self, counts: impl IntoIterator<Item = (RequestStatus, i64)>) {
        for status in RequestStatus::ALL {
            self.requests_by_status
                .get_or_create(&StatusLabels {
                    status: status_label(status),
                })
                .set(0);
        }
        for (status, count) in counts {
            self.requests_by_status
                .get_or_create(&StatusLabels {
                    status: status_label(status),
                })
                .inc_by(count);
        }
    }

    /// The OpenMetrics exposition (ends with `# EOF`).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        if let Some(why) = self.disabled {
            return Ok(format!("# {why}\n# EOF\n"));
        }
        let mut out = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

fn status_label(status: RequestStatus) -> &'static str {
    status.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(Some("Pod"), "pod")]
    #[case(Some("StatefulSet"), "statefulset")]
    #[case(Some("job"), "job")]
    #[case(Some("Deployment"), "deployment")]
    #[case(Some("VirtualMachine"), "unknown")]
    #[case(None, "unknown")]
    fn handler_labels_are_a_closed_set(#[case] api: Option<&str>, #[case] label: &str) {
        assert_eq!(handler_label(api), label);
    }

    #[test]
    fn request_counts_replace_the_previous_scrape() {
        let metrics = Metrics::new();
        metrics.set_request_counts([(RequestStatus::Complete, 3)]);
        metrics.set_request_counts([(RequestStatus::Complete, 1), (RequestStatus::Failed, 2)]);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains("orb_requests{status=\"complete\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("orb_requests{status=\"failed\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("orb_requests{status=\"timeout\"} 0\n"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    #[test]
    fn disabled_metrics_export_nothing_and_say_why() {
        let metrics = Metrics::disabled();
        metrics.record_acquire("pod", Outcome::Accepted, Duration::from_millis(5));
        metrics.set_request_counts([(RequestStatus::Complete, 3)]);
        let text = metrics.encode().unwrap();
        assert_eq!(text, format!("# {METRICS_DISABLED}\n# EOF\n"));
        assert!(!metrics.enabled() && Metrics::new().enabled());
    }
}
