//! The operator's part of a native spec: the template's inline `native_spec` object, or the
//! file named by `native_spec_path`; and how each is rendered.
//!
//! - Inline: the object is already data, so each string in it (keys and values) is rendered
//!   on its own; a string that is exactly one `{{ expression }}` keeps the expression's type.
//!   Errors name the JSON path of the string.
//! - File: the whole text is rendered first (loops and conditionals are allowed anywhere),
//!   then parsed as JSON (`.json`) or YAML (anything else). Errors name the file and line.

use std::path::{Component, Path, PathBuf};

use orb_core::template::Template;
use serde_json::{Map, Value};

use super::NativeSpecError;
use super::jinja::SpecRenderer;

pub const INLINE_LABEL: &str = "inline native_spec";

/// The operator's spec, loaded but not yet rendered.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorSpec {
    Inline(Value),
    File { path: PathBuf, text: String },
}

impl OperatorSpec {
    pub fn label(&self) -> String {
        match self {
            Self::Inline(_) => INLINE_LABEL.to_string(),
            Self::File { path, .. } => path.display().to_string(),
        }
    }
}

/// Where `native_spec_path` points: absolute paths as written; relative ones under
/// `base_dir` (the config directory; the working directory when `None`). A relative path may
/// not climb out of its base with `..`.
pub fn resolve_native_spec_path(
    template_id: &str,
    raw: &str,
    base_dir: Option<&Path>,
) -> Result<PathBuf, NativeSpecError> {
    let path = Path::new(raw);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(NativeSpecError::PathEscapes {
            template_id: template_id.to_string(),
            path: raw.to_string(),
        });
    }
    Ok(base_dir.map_or_else(|| path.to_path_buf(), |base| base.join(path)))
}

/// Reads the operator's spec of `template`: `native_spec` when set (then `native_spec_path`
/// is ignored, see [`super::NativeSpecDecision`]), else the file. `None` when neither is set.
pub fn load_operator_spec(
    template: &Template,
    base_dir: Option<&Path>,
) -> Result<Option<OperatorSpec>, NativeSpecError> {
    if let Some(inline) = &template.native_spec {
        return Ok(Some(OperatorSpec::Inline(inline.clone())));
    }
    let Some(raw) = template.native_spec_path.as_deref() else {
        return Ok(None);
    };
    let path = resolve_native_spec_path(&template.template_id, raw, base_dir)?;
    let text = std::fs::read_to_string(&path).map_err(|e| NativeSpecError::ReadSpecFile {
        template_id: template.template_id.clone(),
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(Some(OperatorSpec::File { path, text }))
}

/// Renders the operator's spec into an object.
pub fn render_operator_spec(
    renderer: &SpecRenderer,
    template_id: &str,
    spec: &OperatorSpec,
    context: &Value,
) -> Result<Value, NativeSpecError> {
    let rendered = match spec {
        OperatorSpec::Inline(value) => render_value(renderer, template_id, value, "", context)?,
        OperatorSpec::File { path, text } => {
            let label = path.display().to_string();
            let out = renderer
                .render_text(&label, text, context)
                .map_err(|f| NativeSpecError::jinja(template_id, &label, None, f))?;
            let is_json = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"));
            parse_rendered(template_id, &label, &out, is_json)?
        }
    };
    if !rendered.is_object() {
        return Err(NativeSpecError::NotAnObject {
            template_id: template_id.to_string(),
            origin: spec.label(),
            found: kind_name(&rendered),
        });
    }
    Ok(rendered)
}

/// Parses rendered text as JSON or YAML; errors carry the line of the rendered text.
pub fn parse_rendered(
    template_id: &str,
    label: &str,
    text: &str,
    json: bool,
) -> Result<Value, NativeSpecError> {
    let parse_error = |line: Option<usize>, message: String| NativeSpecError::Parse {
        template_id: template_id.to_string(),
        origin: label.to_string(),
        line,
        message,
    };
    if json {
        serde_json::from_str(text).map_err(|e| parse_error(Some(e.line()), e.to_string()))
    } else {
        serde_saphyr::from_str::<Value>(text).map_err(|e| {
            let line = e.location().and_then(|l| usize::try_from(l.line()).ok());
            parse_error(line, e.to_string())
        })
    }
}

pub(crate) fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn render_value(
    renderer: &SpecRenderer,
    template_id: &str,
    value: &Value,
    path: &str,
    context: &Value,
) -> Result<Value, NativeSpecError> {
    let fail = |at: &str, f| NativeSpecError::jinja(template_id, INLINE_LABEL, Some(at), f);
    Ok(match value {
        Value::String(s) => renderer
            .render_leaf(s, context)
            .map_err(|f| fail(path, f))?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    render_value(
                        renderer,
                        template_id,
                        item,
                        &format!("{path}[{i}]"),
                        context,
                    )
                })
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                let at = child_path(path, key);
                let key = match renderer
                    .render_leaf(key, context)
                    .map_err(|f| fail(&at, f))?
                {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(
                    key,
                    render_value(renderer, template_id, item, &at, context)?,
                );
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::relative_under_base("specs/ml.yaml", Some("/etc/orb"), Ok("/etc/orb/specs/ml.yaml"))]
    #[case::relative_without_base("ml.yaml", None, Ok("ml.yaml"))]
    #[case::absolute_as_written("/srv/ml.yaml", Some("/etc/orb"), Ok("/srv/ml.yaml"))]
    #[case::climbing_out_refused("../secrets/x.yaml", Some("/etc/orb"), Err(()))]
    #[case::climbing_inside_refused("a/../../x.yaml", Some("/etc/orb"), Err(()))]
    fn native_spec_path_resolution(
        #[case] raw: &str,
        #[case] base: Option<&str>,
        #[case] expected: Result<&str, ()>,
    ) {
        let got = resolve_native_spec_path("t", raw, base.map(Path::new));
        match expected {
            Ok(p) => assert_eq!(got.unwrap(), PathBuf::from(p)),
            Err(()) => assert!(
                matches!(got, Err(NativeSpecError::PathEscapes { .. })),
                "{got:?}"
            ),
        }
    }

    #[test]
    fn inline_strings_render_with_types_and_keys_render_too() {
        let spec = OperatorSpec::Inline(json!({
            "metadata": {"annotations": {"{{ label_prefix }}/owner": "team-{{ replicas }}"}},
            "spec": {"replicas": "{{ replicas }}", "paused": false}
        }));
        let ctx = json!({"label_prefix": "orb.io", "replicas": 4});
        let out = render_operator_spec(&SpecRenderer::new(), "t", &spec, &ctx).unwrap();
        assert_eq!(
            out,
            json!({
                "metadata": {"annotations": {"orb.io/owner": "team-4"}},
                "spec": {"replicas": 4, "paused": false}
            })
        );
    }

    #[test]
    fn inline_errors_name_the_template_the_origin_and_the_json_path() {
        let spec =
            OperatorSpec::Inline(json!({"spec": {"containers": [{"image": "{{ imagee }}"}]}}));
        let err = render_operator_spec(&SpecRenderer::new(), "ml-worker", &spec, &json!({}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"ml-worker\""), "{err}");
        assert!(err.contains("inline native_spec"), "{err}");
        assert!(err.contains("spec.containers[0].image"), "{err}");
        assert!(err.contains("line 1"), "{err}");
        assert!(err.contains("imagee"), "{err}");
    }

    #[test]
    fn file_errors_name_the_file_and_the_line() {
        let spec = OperatorSpec::File {
            path: PathBuf::from("/etc/orb/ml.yaml"),
            text: "spec:\n  replicas: {{ replicas }}\n  paused: {{ pausd }}\n".into(),
        };
        let err = render_operator_spec(&SpecRenderer::new(), "ml", &spec, &json!({"replicas": 1}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/etc/orb/ml.yaml"), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[rstest]
    #[case::yaml(
        "ml.yaml",
        "spec:\n{% for k in ['a', 'b'] %}  {{ k }}: {{ replicas }}\n{% endfor %}"
    )]
    #[case::json(
        "ml.json",
        "{\"spec\": {\"a\": {{ replicas }}, \"b\": {{ replicas }}}}"
    )]
    fn files_render_as_text_then_parse(#[case] name: &str, #[case] text: &str) {
        let spec = OperatorSpec::File {
            path: PathBuf::from(name),
            text: text.into(),
        };
        let out = render_operator_spec(&SpecRenderer::new(), "t", &spec, &json!({"replicas": 2}))
            .unwrap();
        assert_eq!(out, json!({"spec": {"a": 2, "b": 2}}));
    }

    #[test]
    fn yaml_that_does_not_parse_after_rendering_names_the_line() {
        let spec = OperatorSpec::File {
            path: PathBuf::from("/etc/orb/ml.yaml"),
            text: "spec:\n  a: 1\n  b: [unclosed\n".into(),
        };
        let err = render_operator_spec(&SpecRenderer::new(), "ml", &spec, &json!({})).unwrap_err();
        assert!(
            matches!(err, NativeSpecError::Parse { line: Some(_), .. }),
            "{err}"
        );
        assert!(err.to_string().contains("/etc/orb/ml.yaml"), "{err}");
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_refused() {
        let spec = OperatorSpec::File {
            path: PathBuf::from("x.yaml"),
            text: "- a\n- b\n".into(),
        };
        let err = render_operator_spec(&SpecRenderer::new(), "t", &spec, &json!({})).unwrap_err();
        assert!(
            matches!(
                err,
                NativeSpecError::NotAnObject {
                    found: "a list",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn unreadable_file_is_an_error_naming_the_path() {
        let template = Template {
            template_id: "t".into(),
            native_spec_path: Some("does-not-exist.yaml".into()),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let err = load_operator_spec(&template, Some(dir.path())).unwrap_err();
        assert!(err.to_string().contains("does-not-exist.yaml"), "{err}");
    }
}
