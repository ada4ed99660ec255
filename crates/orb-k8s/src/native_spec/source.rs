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

/// Where `native_spec_path` points, confined to `base_dir` (the config directory; the working
/// directory when `None`): a relative path resolves under it, an absolute one must lie in it,
/// and neither may climb out with `..` or through a symlink. Returns the path as written
/// (resolved under the base) and the canonical path to read. A path outside the base is
/// refused before it is touched, so the reply says nothing about the file.
pub fn resolve_native_spec_path(
    template_id: &str,
    raw: &str,
    base_dir: Option<&Path>,
) -> Result<(PathBuf, PathBuf), NativeSpecError> {
    let base = std::path::absolute(base_dir.unwrap_or(Path::new(".")))
        .unwrap_or_else(|_| base_dir.unwrap_or(Path::new(".")).to_path_buf());
    let escapes = || NativeSpecError::PathEscapes {
        template_id: template_id.to_string(),
        path: raw.to_string(),
        base: base.display().to_string(),
    };
    let path = Path::new(raw);
    let joined = base.join(path);
    if path.components().any(|c| matches!(c, Component::ParentDir)) || !joined.starts_with(&base) {
        return Err(escapes());
    }
    let unreadable = |e: std::io::Error| NativeSpecError::ReadSpecFile {
        template_id: template_id.to_string(),
        path: joined.display().to_string(),
        message: e.to_string(),
    };
    let canonical_base = base.canonicalize().map_err(unreadable)?;
    let canonical = joined.canonicalize().map_err(unreadable)?;
    if !canonical.starts_with(&canonical_base) {
        return Err(escapes());
    }
    Ok((joined, canonical))
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
    let (path, canonical) = resolve_native_spec_path(&template.template_id, raw, base_dir)?;
    let text = std::fs::read_to_string(&canonical).map_err(|e| NativeSpecError::ReadSpecFile {
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
            parse_error(line, yaml_problem(&e))
        })
    }
}

/// What is wrong with a YAML text, without its content: the parser's snippet of the file is
/// dropped, and so is anything it quotes, so a reply never shows what a file holds.
fn yaml_problem(error: &serde_saphyr::Error) -> String {
    let message = error.without_snippet().to_string();
    let first = message.lines().next().unwrap_or_default();
    let mut out = String::with_capacity(first.len());
    let mut quoted = None;
    for c in first.chars() {
        match quoted {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                quoted = None;
            }
            Some(_) => {}
            None if matches!(c, '`' | '\'' | '"') => {
                out.push(c);
                quoted = Some(c);
            }
            None => out.push(c),
        }
    }
    if quoted.is_some() {
        out.push('…');
    }
    out
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

    /// A config directory with `specs/ml.yaml`, a symlink `specs/out.yaml` to a file beside
    /// the directory, and that file (`secret.yaml`).
    fn config_dir() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("config");
        std::fs::create_dir_all(base.join("specs")).unwrap();
        std::fs::write(base.join("specs/ml.yaml"), "spec: {}\n").unwrap();
        std::fs::write(root.path().join("secret.yaml"), "password: hunter2\n").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret.yaml"), base.join("specs/out.yaml"))
            .unwrap();
        (root, base)
    }

    #[rstest]
    #[case::relative_under_base("specs/ml.yaml", true)]
    #[case::absolute_inside(":base:/specs/ml.yaml", true)]
    #[case::absolute_outside("/etc/passwd", false)]
    #[case::absolute_beside(":root:/secret.yaml", false)]
    #[case::climbing_out("../secret.yaml", false)]
    #[case::climbing_inside("specs/../../secret.yaml", false)]
    #[case::absolute_climbing(":base:/../secret.yaml", false)]
    #[case::symlink_out("specs/out.yaml", false)]
    fn native_spec_path_stays_in_the_config_directory(#[case] raw: &str, #[case] inside: bool) {
        let (root, base) = config_dir();
        let raw = raw
            .replace(":base:", &base.display().to_string())
            .replace(":root:", &root.path().display().to_string());
        match resolve_native_spec_path("t", &raw, Some(&base)) {
            Ok((_, canonical)) if inside => assert!(canonical.ends_with("config/specs/ml.yaml")),
            Err(NativeSpecError::PathEscapes { path, .. }) if !inside => assert_eq!(path, raw),
            other => panic!("{raw}: {other:?}"),
        }
    }

    #[test]
    fn a_refused_spec_file_is_not_read_and_its_content_never_shows() {
        let (_root, base) = config_dir();
        for raw in [
            "/etc/passwd",
            "/proc/self/environ",
            "specs/out.yaml",
            "/nonexistent",
        ] {
            let template = Template {
                template_id: "t".into(),
                native_spec_path: Some(raw.into()),
                ..Default::default()
            };
            let err = load_operator_spec(&template, Some(&base)).unwrap_err();
            assert!(
                matches!(err, NativeSpecError::PathEscapes { .. }),
                "{raw}: {err}"
            );
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn yaml_errors_carry_the_line_but_none_of_the_text() {
        for text in [
            "root:x:0:0:root:/root:/bin/bash\n  daemon: [x:1:1\n",
            "spec:\n  a: 1\n  b: [unclosed hunter2\n",
            "a: &x hunter2\nb: *y\n",
            "!!binary hunter2\n",
            "{{hunter2: [",
        ] {
            let err = parse_rendered("t", "f.yaml", text, false).unwrap_err();
            let shown = err.to_string();
            assert!(matches!(err, NativeSpecError::Parse { .. }), "{shown}");
            for secret in ["hunter2", "root:x", "daemon", "/bin/bash"] {
                assert!(!shown.contains(secret), "{text:?} shows {secret}: {shown}");
            }
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
