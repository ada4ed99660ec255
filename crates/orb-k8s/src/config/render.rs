//! `orb config show [--origin]`: the effective configuration as a table, JSON or YAML, and with
//! `--origin` the source of every value.
//!
//! Secrets: only schema fields are rendered, so nothing else from the environment or the file can
//! leak, and no field of seed 001 holds a credential (`default_image_pull_secret` is the *name*
//! of a Secret object; kubeconfig tokens and exec credentials are never read into this config).
//! A future credential-bearing field must be masked in `field_value` before it is added.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::issues::Origin;
use super::resolve::ResolvedConfig;
use super::schema::{self, FieldKind, FieldSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Table,
    Json,
    Yaml,
}

/// One printable leaf: a field, or one key of a map field.
struct Row {
    path: String,
    value: Value,
    origin: Origin,
}

fn field_value(whole: &Value, spec: &FieldSpec) -> Value {
    spec.path
        .split('.')
        .try_fold(whole, |node, part| node.get(part))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Rows in seed order; with `expand_maps`, a set map field becomes one row per key.
fn rows(resolved: &ResolvedConfig, expand_maps: bool) -> Vec<Row> {
    let whole = serde_json::to_value(&resolved.config).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for spec in schema::FIELDS {
        let value = field_value(&whole, spec);
        match (&value, spec.kind) {
            (Value::Object(entries), FieldKind::StringMap)
                if expand_maps && !entries.is_empty() =>
            {
                for (key, entry) in entries {
                    let path = format!("{}.{key}", spec.path);
                    let origin = resolved.origin_of(&path).clone();
                    out.push(Row {
                        path,
                        value: entry.clone(),
                        origin,
                    });
                }
            }
            _ => out.push(Row {
                path: spec.path.to_string(),
                origin: resolved.origin_of(spec.path).clone(),
                value,
            }),
        }
    }
    out
}

/// A JSON/YAML document whose keys keep seed order whatever serde_json's map ordering is.
enum Node {
    Leaf(Value),
    Origin(Origin),
    Group(Vec<(String, Node)>),
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Leaf(value) => value.serialize(serializer),
            Self::Origin(origin) => origin.serialize(serializer),
            Self::Group(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, node) in entries {
                    map.serialize_entry(key, node)?;
                }
                map.end()
            }
        }
    }
}

/// Nests rows back into the config's shape (`naming.prefix` under `naming`), wrapping each
/// leaf as `{"value": …, "origin": …}` when `with_origin`.
fn nested(resolved: &ResolvedConfig, with_origin: bool) -> Node {
    let mut root: Vec<(String, Node)> = Vec::new();
    for row in rows(resolved, with_origin) {
        let leaf = if with_origin {
            Node::Group(vec![
                ("value".to_string(), Node::Leaf(row.value)),
                ("origin".to_string(), Node::Origin(row.origin)),
            ])
        } else {
            Node::Leaf(row.value)
        };
        // Schema paths nest one level at most (`naming.prefix`, `default_node_selector.<key>`).
        let Some((head, tail)) = row.path.split_once('.') else {
            root.push((row.path, leaf));
            continue;
        };
        let index = match root.iter().position(|(k, _)| k == head) {
            Some(index) => index,
            None => {
                root.push((head.to_string(), Node::Group(Vec::new())));
                root.len() - 1
            }
        };
        if let Node::Group(entries) = &mut root[index].1 {
            entries.push((tail.to_string(), leaf));
        }
    }
    Node::Group(root)
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => "(unset)".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(resolved: &ResolvedConfig, with_origin: bool) -> String {
    let rows = rows(resolved, with_origin);
    let mut header = vec!["FIELD", "VALUE"];
    if with_origin {
        header.push("ORIGIN");
    }
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut line = vec![r.path.clone(), cell(&r.value)];
            if with_origin {
                line.push(r.origin.to_string());
            }
            line
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let header_cells: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for line in std::iter::once(&header_cells).chain(lines.iter()) {
        let last = line.len() - 1;
        for (i, text) in line.iter().enumerate() {
            if i == last {
                out.push_str(text);
            } else {
                let _ = write!(out, "{text:<width$}  ", width = widths[i]);
            }
        }
        out.push('\n');
    }
    // Humans read the table, so the warnings go with it; JSON/YAML keep the file's shape and
    // callers print `ResolvedConfig::warnings` separately.
    if !resolved.warnings.is_empty() || !resolved.security_opt_outs.is_empty() {
        out.push('\n');
        for warning in &resolved.warnings {
            let _ = writeln!(out, "WARNING: {warning}");
        }
        for opt_out in &resolved.security_opt_outs {
            let _ = writeln!(out, "NOTE: {opt_out}");
        }
    }
    out
}

/// Renders the effective config. With `with_origin`, every value says where it came from
/// (default, file path, env var, template id). The table ends with the config's warnings, one
/// `WARNING: …` line each, then the operator's security opt-outs, one `NOTE: …` line each;
/// JSON and YAML contain only the config. Output ends with a newline.
pub fn render_effective(
    resolved: &ResolvedConfig,
    format: OutputFormat,
    with_origin: bool,
) -> String {
    match format {
        OutputFormat::Table => table(resolved, with_origin),
        OutputFormat::Json => {
            let value = nested(resolved, with_origin);
            let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
            text.push('\n');
            text
        }
        OutputFormat::Yaml => {
            let value = nested(resolved, with_origin);
            // JSON is valid YAML, so a serialiser failure still yields a readable document.
            serde_saphyr::to_string(&value).unwrap_or_else(|_| {
                let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
                text.push('\n');
                text
            })
        }
    }
}
