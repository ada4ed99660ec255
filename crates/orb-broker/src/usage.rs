//! What each template holds against its `maxNumber`: the names of its machines whose pods may
//! still exist, and what its unfinished requests will still create. One place for the CLI,
//! HostFactory and REST listings, so `availableNumber` means the same in all three, and the
//! same as the check an acquire makes (orb-store's `insert_acquire`).

use orb_core::template::Template;
use orb_core::template::TemplateUsage;
use orb_store::{MachineFilter, Store, StoreError};

/// The usage of each template, in the order given.
pub async fn template_usages(
    store: &Store,
    templates: &[&Template],
) -> Result<Vec<TemplateUsage>, StoreError> {
    let live = store
        .list_machines(&MachineFilter {
            live_only: true,
            ..Default::default()
        })
        .await?;
    let mut usages = Vec::with_capacity(templates.len());
    for t in templates {
        let reserved = store.template_usage(&t.template_id).await?.reserved;
        usages.push(TemplateUsage {
            live_machine_names: live
                .iter()
                .filter(|m| m.template_id == t.template_id)
                .map(|m| m.name.clone())
                .collect(),
            reserved,
        });
    }
    Ok(usages)
}
