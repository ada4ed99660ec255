//! Templates with their usage: what each of the CLI, HostFactory and REST listings shows, so
//! `maxNumber` and `availableNumber` mean the same at every door (and the same as the check an
//! acquire makes).

use orb_core::provider::Provider;
use orb_core::template::Template;
use orb_core::template::TemplateUsage;

use crate::{Broker, BrokerError};

/// Machines the template checks plan for. Count-dependent limits (maxNumber, the per-request
/// cap, names past 9,999 pods) are the request's, not the template's.
pub const CHECK_COUNT: u32 = 1;

/// One template and what it holds against its maximum.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateListing {
    pub template: Template,
    /// `maxNumber`: the template's own, else the config's default; negative = unlimited.
    pub max_machines: i64,
    pub usage: TemplateUsage,
    /// `availableNumber`; `None` when unlimited.
    pub available: Option<i64>,
}

/// The templates a listing shows, and the ones every request would refuse (not shown).
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateList {
    pub listed: Vec<TemplateListing>,
    /// Template id and why every request for it would be refused.
    pub unservable: Vec<(String, String)>,
}

impl Broker {
    /// The templates an acquire can be served from, with their usage, in file order; the
    /// others set apart with the reason. Without a provider only the templates' own problems
    /// are known.
    pub async fn servable_templates(&self) -> Result<TemplateList, BrokerError> {
        let provider = self.provider.get().ok();
        let catalog = self.catalog.current();
        // Planning renders each template's Jinja (bounded, but up to its render timeout):
        // on the blocking pool, so a slow template holds no async worker of orb serve.
        let reasons = tokio::task::spawn_blocking({
            let catalog = catalog.clone();
            move || {
                catalog
                    .templates
                    .iter()
                    .map(|t| unservable_reason(provider.as_deref(), t))
                    .collect::<Vec<_>>()
            }
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let mut usable = Vec::new();
        let mut unservable = Vec::new();
        for (template, reason) in catalog.templates.iter().zip(reasons) {
            match reason {
                None => usable.push(template),
                Some(reason) => unservable.push((template.template_id.clone(), reason)),
            }
        }
        Ok(TemplateList {
            listed: self.templates_with_usage(&usable).await?,
            unservable,
        })
    }

    /// `templates` with their usage, in the order given.
    pub async fn templates_with_usage(
        &self,
        templates: &[&Template],
    ) -> Result<Vec<TemplateListing>, BrokerError> {
        let usages = crate::usage::template_usages(&self.store, templates).await?;
        Ok(templates
            .iter()
            .zip(usages)
            .map(|(template, usage)| {
                let max_machines = template.max_machines_or(self.settings.default_max_machines);
                TemplateListing {
                    template: (*template).clone(),
                    max_machines,
                    available: usage.available(max_machines),
                    usage,
                }
            })
            .collect())
    }
}

/// Why a template cannot be served (its problems, joined), or `None` when it can. The
/// listings skip such templates: HostFactory would otherwise keep asking for them. Without a
/// provider only the template's own problems are known.
pub fn unservable_reason(provider: Option<&dyn Provider>, template: &Template) -> Option<String> {
    let problems = template.problems();
    if !problems.is_empty() {
        return Some(
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
    provider?
        .check_acquire(template, CHECK_COUNT)
        .err()
        .map(|e| e.to_string())
}
