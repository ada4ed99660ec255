//! The reference broker's REST contract (ORB 1.8's routes, from the table in
//! ../shared/notes/orb-rest-api.md, and the body fields its SDKs send) against orb's
//! generated OpenAPI document: every reference route is served with the same method and
//! accepts the same body fields, or is listed in the one table of differences in
//! docs/rest-api.md — and that table lists nothing that is served.

use std::collections::BTreeSet;

use serde_json::Value;

/// Every route of the reference's table: method and path as published.
const REFERENCE_ROUTES: &[(&str, &str)] = &[
    ("get", "/health"),
    ("get", "/livez"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/info"),
    ("get", "/api/v1/templates/"),
    ("get", "/api/v1/templates/{template_id}"),
    ("post", "/api/v1/templates/"),
    ("put", "/api/v1/templates/{template_id}"),
    ("delete", "/api/v1/templates/{template_id}"),
    ("post", "/api/v1/templates/validate"),
    ("post", "/api/v1/templates/refresh"),
    ("post", "/api/v1/templates/generate"),
    ("post", "/api/v1/machines/request"),
    ("post", "/api/v1/machines/return"),
    ("get", "/api/v1/machines/"),
    ("get", "/api/v1/machines/{machine_id}"),
    ("get", "/api/v1/machines/{machine_id}/status"),
    ("delete", "/api/v1/machines/{machine_id}"),
    ("get", "/api/v1/requests/"),
    ("get", "/api/v1/requests/return"),
    ("get", "/api/v1/requests/{request_id}"),
    ("get", "/api/v1/requests/{request_id}/status"),
    ("post", "/api/v1/requests/status"),
    ("delete", "/api/v1/requests/{request_id}"),
    ("get", "/api/v1/requests/{request_id}/stream"),
    ("post", "/api/v1/requests/{request_id}/purge"),
    ("get", "/api/v1/requests/{request_id}/timeline"),
    ("get", "/api/v1/events/"),
    ("get", "/api/v1/me/"),
    ("get", "/api/v1/system/dashboard"),
    ("get", "/api/v1/providers/"),
    ("get", "/api/v1/providers/health"),
    ("get", "/api/v1/providers/schemas"),
    ("get", "/api/v1/providers/{name}/schema"),
    ("get", "/api/v1/config/"),
    ("get", "/api/v1/config/sources"),
    ("post", "/api/v1/config/validate"),
    ("get", "/api/v1/config/{key}"),
    ("put", "/api/v1/config/{key}"),
    ("post", "/api/v1/admin/init"),
    ("post", "/api/v1/admin/reload-config"),
    ("post", "/api/v1/admin/database/cleanup"),
    ("post", "/api/v1/admin/database/wipe"),
];

/// The body fields the reference's clients send (camelCase), per route.
const REFERENCE_BODIES: &[(&str, &[&str])] = &[
    (
        "/api/v1/machines/request",
        &["templateId", "count", "additionalData"],
    ),
    (
        "/api/v1/machines/return",
        &[
            "machineIds",
            "requestId",
            "allMachines",
            "force",
            "providerName",
            "providerType",
        ],
    ),
    ("/api/v1/requests/status", &["requestIds", "verbose"]),
    // The reference declares this body in snake_case (a plain pydantic model); its SDKs'
    // camelCase properties serialise to these names.
    (
        "/api/v1/admin/database/cleanup",
        &[
            "confirm",
            "older_than_days",
            "request_statuses",
            "include_machines",
        ],
    ),
];

fn document() -> Value {
    serde_json::from_str(&orb_cli::serve::openapi_json()).unwrap()
}

/// `GET /api/v1/x` → ("get", "/api/v1/x") for every row of the differences table.
fn listed_differences() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/rest-api.md"
    ))
    .expect("docs/rest-api.md");
    let section = text
        .split("### Differences from the reference broker")
        .nth(1)
        .expect("docs/rest-api.md has a section \"### Differences from the reference broker\"");
    let section = section.split("\n#").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| {
            let cell = line.strip_prefix("| `")?;
            let route = cell.split('`').next()?;
            let (method, path) = route.split_once(' ')?;
            Some((method.to_ascii_lowercase(), path.to_string()))
        })
        .collect()
}

#[test]
fn every_reference_route_is_served_or_listed_as_a_difference() {
    let doc = document();
    let differences = listed_differences();
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for (method, path) in REFERENCE_ROUTES {
        let served = doc["paths"][*path].get(*method).is_some();
        let listed = differences.contains(&(method.to_string(), path.to_string()));
        match (served, listed) {
            (false, false) => missing.push(format!("{} {path}", method.to_uppercase())),
            (true, true) => stale.push(format!("{} {path}", method.to_uppercase())),
            _ => {}
        }
    }
    assert!(
        missing.is_empty(),
        "reference routes neither served nor in docs/rest-api.md's differences table: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "served routes still listed as differences in docs/rest-api.md: {stale:?}"
    );
    let known: BTreeSet<(String, String)> = REFERENCE_ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let unknown: Vec<_> = differences.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "the differences table lists routes the reference does not have: {unknown:?}"
    );
}

#[test]
fn the_slash_less_spelling_of_each_served_collection_is_served_too() {
    let doc = document();
    for (method, path) in REFERENCE_ROUTES {
        let Some(bare) = path.strip_suffix('/') else {
            continue;
        };
        if doc["paths"][*path].get(*method).is_some() && *method == "get" {
            assert!(
                doc["paths"][bare].get(*method).is_some(),
                "{path} is served but {bare} is not"
            );
        }
    }
}

#[test]
fn reference_request_bodies_are_accepted_field_for_field() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    for (path, fields) in REFERENCE_BODIES {
        let body =
            &doc["paths"][*path]["post"]["requestBody"]["content"]["application/json"]["schema"];
        let name = body["$ref"]
            .as_str()
            .and_then(|r| r.rsplit('/').next())
            .unwrap_or_else(|| panic!("{path}: the body is not a named schema: {body}"));
        let properties = schemas[name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{path}: schema {name} has no properties"));
        for field in *fields {
            // The reference's own spelling, not only an alias the server accepts: a client
            // generated from orb's document must send the body a client generated from the
            // reference's sends (the snake_case aliases are tested in serve_reference.rs).
            assert!(
                properties.contains_key(*field),
                "{path}: {name} does not name the reference field {field} (it has {:?})",
                properties.keys().collect::<Vec<_>>()
            );
        }
    }
}
