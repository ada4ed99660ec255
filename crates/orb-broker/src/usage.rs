//! What each template holds against its `maxNumber`: the names of its machines whose pods may
//! still exist, and what its unfinished requests will still create. One place for the CLI,
//! HostFactory and REST listings, so `availableNumber` means the same in all three, and the
//! same as the check an acquire makes (orb-store's `insert_acquire`).

use std::collections::HashMap;

use orb_core::template::Template;
use orb_core::template::TemplateUsage;
use orb_store::{Store, StoreError};

/// The usage of each template, in the order given.
pub async fn template_usages(
    store: &Store,
    templates: &[&Template],
) -> Result<Vec<TemplateUsage>, StoreError> {
    let mut names: HashMap<String, Vec<String>> = HashMap::new();
    for (template_id, name) in store.live_machine_names().await? {
        names.entry(template_id).or_default().push(name);
    }
    let mut usages = Vec::with_capacity(templates.len());
    for t in templates {
        let reserved = store.template_usage(&t.template_id).await?.reserved;
        usages.push(TemplateUsage {
            live_machine_names: names.get(&t.template_id).cloned().unwrap_or_default(),
            reserved,
        });
    }
    Ok(usages)
}
