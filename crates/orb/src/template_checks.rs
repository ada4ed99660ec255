//! The one check of a template that `orb templates validate`, `POST /api/v1/templates/validate`
//! and the template listings share: exactly what loading the template and acquiring from it
//! check before the first call to the cluster (the load-time override refusal, the template's
//! own problems, then the Kubernetes provider's acquire planning: effective config, namespace,
//! the bodies of the typed builders or the native spec, and the security audit).
//!
//! The broker runs the same provider planning ([`orb_core::provider::Provider::check_acquire`])
//! before it stores a request, so a template this calls usable is never refused by an acquire
//! for a reason visible up front.

use orb_core::ProviderApi;
use orb_core::template::Template;
use orb_k8s::K8sProvider;
use orb_k8s::native_spec::preview_request_id;
use orb_k8s::provider::PlannedAcquire;
use orb_k8s::spec::BodyPath;
use serde_json::Value;

use crate::context::override_refusal;

/// Most bare pods a check renders (one body each), as `GET …/render` previews at most.
pub const MAX_CHECKED_PODS: u32 = 100;

/// What validate's output says about the request it checked.
pub const PREVIEW_NOTE: &str = "each template is checked as an acquire of its max_number \
     machines (1 when it sets none; at most 100 for a Pod template) with a fresh preview \
     request id: a real acquire gets its own id, and the names and request-id labels built \
     from it";

/// The count a check renders: the most machines one acquire of `template` may ask for, so a
/// spec that decides on the count is checked as it will be sent.
pub fn check_count(template: &Template) -> u32 {
    let most = match template.api() {
        ProviderApi::Pod => MAX_CHECKED_PODS,
        _ => i32::MAX as u32,
    };
    template
        .max_machines
        .filter(|max| *max > 0)
        .map_or(1, |max| u32::try_from(max).unwrap_or(u32::MAX).min(most))
}

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
    let request_id = preview_request_id();
    match provider.final_workload_for(template, &request_id, check_count(template)) {
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

/// The bodies one acquire would send, in order.
pub struct RenderedBodies {
    pub path: BodyPath,
    pub bodies: Vec<Value>,
    /// Ignored fields, "native_spec is ignored because …", audit findings in warn mode.
    pub warnings: Vec<String>,
}

pub enum Rendering {
    Ok(Box<RenderedBodies>),
    Fails {
        problems: Vec<String>,
        warnings: Vec<String>,
    },
}

/// Renders what an acquire of `count` machines of `template` would send for `request_id` (a
/// [`preview_request_id`]). The provider's own acquire planning builds them, so the output is
/// exactly what an acquire with that id creates.
pub fn render_bodies(
    provider: &K8sProvider,
    template: &Template,
    count: u32,
    request_id: &str,
) -> Rendering {
    match provider.final_workload_for(template, request_id, count) {
        Ok(planned) => Rendering::Ok(Box::new(RenderedBodies {
            path: planned.workload.path,
            bodies: planned.workload.bodies(),
            warnings: planned.workload.warnings,
        })),
        Err(failure) => Rendering::Fails {
            problems: vec![failure.source.to_string()],
            warnings: failure.warnings,
        },
    }
}
