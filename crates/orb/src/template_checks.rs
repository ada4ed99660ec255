//! The one check of a template that `orb templates validate`, `POST /api/v1/templates/validate`
//! and the template listings share: exactly what loading the template and acquiring from it
//! check before the first call to the cluster (the load-time override refusal, the template's
//! own problems, then the Kubernetes provider's acquire planning: effective config, namespace,
//! the bodies of the typed builders or the native spec, and the security audit).
//!
//! The broker runs the same provider planning ([`orb_core::provider::Provider::check_acquire`])
//! before it stores a request, so a template this calls usable is never refused by an acquire
//! for a reason visible up front.

use orb_core::template::Template;
use orb_k8s::K8sProvider;
use orb_k8s::native_spec::PREVIEW_REQUEST_ID;
use orb_k8s::provider::PlannedAcquire;

use crate::context::override_refusal;

use orb_broker::templates::CHECK_COUNT;

/// A provider's checks of one template, as the HTTP layer holds them (it does not name the
/// provider): `|t| check_template(Some(&provider), t)`.
pub type TemplateChecker = std::sync::Arc<dyn Fn(&Template) -> TemplateVerdict + Send + Sync>;

/// What the checks of one template found.
#[derive(Debug, Default)]
pub struct TemplateVerdict {
    /// Why an acquire would be refused; empty = usable.
    pub problems: Vec<String>,
    /// What an acquire would log (ignored fields, audit findings in warn mode, …).
    pub warnings: Vec<String>,
    /// The acquire's plan (for `--server` dry runs and `orb templates render`).
    pub planned: Option<PlannedAcquire>,
}

impl TemplateVerdict {
    pub fn usable(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks `template` as loading and acquiring it would. `provider` is the Kubernetes provider
/// when the selected provider is one (`None` for other providers, whose templates get the
/// provider-independent checks only).
pub fn check_template(provider: Option<&K8sProvider>, template: &Template) -> TemplateVerdict {
    let mut verdict = TemplateVerdict::default();
    if provider.is_some()
        && let Some(reason) = override_refusal(template)
    {
        verdict.problems.push(reason);
        return verdict;
    }
    verdict.problems = template
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    let Some(provider) = provider else {
        return verdict;
    };
    if !verdict.problems.is_empty() {
        return verdict;
    }
    match provider.final_workload_for(template, PREVIEW_REQUEST_ID, CHECK_COUNT) {
        Ok(planned) => {
            verdict.warnings = planned.workload.warnings.clone();
            verdict.planned = Some(planned);
        }
        Err(failure) => {
            verdict.problems.push(failure.source.to_string());
            verdict.warnings = failure.warnings;
        }
    }
    verdict
}
