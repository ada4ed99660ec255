//! The Jinja engine behind native specs: one strict minijinja environment with Python-style
//! methods (`.items()`, `.get()`, `.upper()`, …), no auto-escaping (JSON templates write their
//! own quotes or use `tojson`, as in Jinja2), and errors turned into [`JinjaFailure`] with the
//! line they point at.

use minijinja::value::{Kwargs, Serde};
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde_json::Value;

/// A rendering failure, before the caller adds which template and file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JinjaFailure {
    /// 1-based line in the rendered source, when minijinja knows it.
    pub line: Option<usize>,
    /// What went wrong, e.g. `undefined value: 'imagee' is undefined`.
    pub message: String,
    /// How to fix it.
    pub fix: &'static str,
}

const UNDEFINED_FIX: &str = "use one of the context variables listed in docs/native-spec.md \
     (name, namespace, image, replicas, labels, request_id, template_id, …), or guard optional \
     ones with `is defined` / `| default(...)`";
const SYNTAX_FIX: &str = "fix the Jinja syntax: expressions are {{ … }}, statements {% … %}, \
     and every {% if %}/{% for %} needs its {% endif %}/{% endfor %}";
const OTHER_FIX: &str = "check the expression against the context variables listed in \
     docs/native-spec.md";

fn failure(err: &minijinja::Error) -> JinjaFailure {
    let fix = match err.kind() {
        ErrorKind::UndefinedError => UNDEFINED_FIX,
        ErrorKind::SyntaxError | ErrorKind::BadEscape => SYNTAX_FIX,
        _ => OTHER_FIX,
    };
    let mut message = err.kind().to_string();
    if let Some(detail) = err.detail() {
        message = format!("{message}: {detail}");
    }
    JinjaFailure {
        line: err.line(),
        message,
        fix,
    }
}

fn strict_tojson(
    value: &minijinja::Value,
    indent: Option<minijinja::Value>,
    args: Kwargs,
) -> Result<minijinja::Value, minijinja::Error> {
    if value.is_undefined() {
        return Err(minijinja::Error::new(
            ErrorKind::UndefinedError,
            "an undefined variable was passed to tojson",
        ));
    }
    minijinja::filters::tojson(value, indent, args)
}

/// Renders native-spec sources against a context.
pub struct SpecRenderer {
    env: Environment<'static>,
}

impl Default for SpecRenderer {
    fn default() -> Self {
        Self::new()
    }
}

impl SpecRenderer {
    pub fn new() -> Self {
        let mut env = Environment::new();
        // Strict: a misspelt variable is an error, never an empty string in the cluster.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        // The built-in `tojson` writes an undefined value as `null`, which would let a typo
        // through despite strict mode; Jinja2's StrictUndefined refuses it, and so do we.
        env.add_filter("tojson", strict_tojson);
        Self { env }
    }

    /// Renders a whole source text (a default template or an operator's file).
    pub fn render_text(
        &self,
        name: &str,
        source: &str,
        context: &Value,
    ) -> Result<String, JinjaFailure> {
        self.env
            .render_named_str(name, source, Serde(context))
            .map_err(|e| failure(&e))
    }

    /// Renders one string of an inline spec. A string that is exactly one `{{ expression }}`
    /// keeps the expression's type (`"{{ replicas }}"` is the number 3); anything else is
    /// rendered as text.
    pub fn render_leaf(&self, source: &str, context: &Value) -> Result<Value, JinjaFailure> {
        if !source.contains("{{") && !source.contains("{%") && !source.contains("{#") {
            return Ok(Value::String(source.to_string()));
        }
        if let Some(expr) = single_expression(source) {
            let compiled = self.env.compile_expression(expr).map_err(|e| failure(&e))?;
            let value = compiled.eval(Serde(context)).map_err(|e| failure(&e))?;
            if value.is_undefined() {
                return Err(JinjaFailure {
                    line: Some(1),
                    message: format!("undefined value: `{}` is undefined", expr.trim()),
                    fix: UNDEFINED_FIX,
                });
            }
            return serde_json::to_value(&value).map_err(|e| JinjaFailure {
                line: Some(1),
                message: format!("`{}` cannot be written as JSON: {e}", expr.trim()),
                fix: OTHER_FIX,
            });
        }
        self.render_text("leaf", source, context).map(Value::String)
    }
}

/// `Some(expr)` when `source` is exactly `{{ expr }}` (surrounding whitespace allowed).
fn single_expression(source: &str) -> Option<&str> {
    let inner = source.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner);
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    Some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn ctx() -> Value {
        json!({"replicas": 3, "image": "busybox:1.36", "labels": {"a": "1"}, "none": null})
    }

    #[rstest]
    #[case::plain_text("hello", json!("hello"))]
    #[case::number_keeps_its_type("{{ replicas }}", json!(3))]
    #[case::object_keeps_its_type("{{ labels }}", json!({"a": "1"}))]
    #[case::string_expression("{{ image }}", json!("busybox:1.36"))]
    #[case::forced_string("{{ replicas | string }}", json!("3"))]
    #[case::mixed_text_is_text("x-{{ replicas }}", json!("x-3"))]
    #[case::python_methods("{{ image.upper() }}", json!("BUSYBOX:1.36"))]
    #[case::none_is_null("{{ none }}", Value::Null)]
    fn leaves_render_with_types(#[case] source: &str, #[case] expected: Value) {
        assert_eq!(
            SpecRenderer::new().render_leaf(source, &ctx()),
            Ok(expected)
        );
    }

    #[rstest]
    #[case::undefined_in_expression("{{ imagee }}")]
    #[case::undefined_in_text("x-{{ imagee }}")]
    fn undefined_variables_are_errors(#[case] source: &str) {
        let err = SpecRenderer::new().render_leaf(source, &ctx()).unwrap_err();
        assert!(err.message.contains("undefined"), "{err:?}");
        assert_eq!(err.fix, UNDEFINED_FIX);
    }

    #[test]
    fn text_errors_carry_the_line() {
        let err = SpecRenderer::new()
            .render_text("f.json", "{\n\"a\": 1,\n\"b\": {{ nope }}\n}", &ctx())
            .unwrap_err();
        assert_eq!(err.line, Some(3), "{err:?}");
        let err = SpecRenderer::new()
            .render_text("f.json", "{\n{% if x %}\n}", &json!({"x": true}))
            .unwrap_err();
        assert_eq!(err.fix, SYNTAX_FIX, "{err:?}");
    }

    #[test]
    fn tojson_of_an_undefined_variable_is_an_error() {
        let err = SpecRenderer::new()
            .render_text("f.json", "{\n\"a\": {{ nope | tojson }}\n}", &ctx())
            .unwrap_err();
        assert_eq!((err.line, err.fix), (Some(2), UNDEFINED_FIX), "{err:?}");
        let out = SpecRenderer::new()
            .render_text("f.json", "{{ nope | default(none) | tojson }}", &ctx())
            .unwrap();
        assert_eq!(out, "null");
    }

    #[test]
    fn no_auto_escaping_in_json_sources() {
        let out = SpecRenderer::new()
            .render_text("default.json", "\"{{ image }}\"", &ctx())
            .unwrap();
        assert_eq!(out, "\"busybox:1.36\"");
    }
}
