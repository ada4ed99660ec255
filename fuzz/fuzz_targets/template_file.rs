//! Template files (`<provider>_templates.json`): the bytes are the file's text. Every entry is
//! parsed, validated, converted back to the HostFactory spelling and parsed again. Invariant:
//! no panic anywhere in that chain; problems are values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orb_core::template::file::parse_template_file;
use orb_core::template::wire::{parse_tag_string, template_from_value, template_to_hostfactory};
use serde_json::{Map, Value, json};

fn defaults() -> Map<String, Value> {
    match json!({
        "imageId": "busybox:1.36",
        "maxNumber": 10,
        "resource_requests": {"cpu": "100m", "memory": "128Mi"},
        "labels": {"team": "hpc"}
    }) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let defaults = defaults();
    for defaults in [None, Some(&defaults)] {
        let Ok(file) = parse_template_file("fuzz_templates.json", text, defaults) else {
            continue;
        };
        for entry in file.entries {
            let Ok(normalized) = entry else { continue };
            let template = normalized.template;
            for problem in template.problems() {
                assert!(!problem.to_string().is_empty());
            }
            let _ = template.api();
            let _ = template.display_name();
            let _ = template.max_machines_or(10);
            let wire = template_to_hostfactory(&template);
            if let Some(Value::String(tags)) = wire.get("instanceTags") {
                let _ = parse_tag_string(tags);
            }
            let _ = template_from_value(&Value::Object(wire), None, "round trip");
        }
    }
});
