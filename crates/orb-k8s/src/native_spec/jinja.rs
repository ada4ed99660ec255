//! The Jinja engine behind native specs: one strict minijinja environment with Python-style
//! methods (`.items()`, `.get()`, `.upper()`, …), no auto-escaping (JSON templates write their
//! own quotes or use `tojson`, as in Jinja2), and errors turned into [`JinjaFailure`] with the
//! line they point at. Every rendering is bounded ([`RenderLimits`]): template authors are not
//! trusted to write cheap Jinja.

use std::cell::Cell;
use std::time::Duration;

use minijinja::value::{Kwargs, Serde};
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde_json::Value;

use crate::config::K8sProviderConfig;

/// The bounds of rendering one object (the provider's `native_spec_render_*` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderLimits {
    /// minijinja fuel of one rendering: about one per instruction and per 64 bytes of data
    /// the template creates, so it bounds both time and memory.
    pub fuel: u64,
    /// Text all renderings of one object may produce together, in bytes.
    pub max_bytes: usize,
    /// Wall-clock time of rendering one object.
    pub timeout: Duration,
}

impl RenderLimits {
    pub fn from_config(config: &K8sProviderConfig) -> Self {
        Self {
            fuel: config.native_spec_render_fuel,
            max_bytes: usize::try_from(config.native_spec_render_max_bytes).unwrap_or(usize::MAX),
            timeout: Duration::from_millis(config.native_spec_render_timeout_ms),
        }
    }
}

impl Default for RenderLimits {
    fn default() -> Self {
        Self::from_config(&K8sProviderConfig::default())
    }
}

/// A rendering stopped by one of its [`RenderLimits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHit {
    /// What happened, e.g. `it used up its fuel of 1000000`.
    pub what: String,
    /// The provider setting that raises the limit, e.g. `native_spec_render_fuel`.
    pub setting: &'static str,
}

/// A rendering failure, before the caller adds which template and file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JinjaFailure {
    /// 1-based line in the rendered source, when minijinja knows it.
    pub line: Option<usize>,
    /// What went wrong, e.g. `undefined value: 'imagee' is undefined`.
    pub message: String,
    /// How to fix it.
    pub fix: &'static str,
    /// Set when a [`RenderLimits`] bound stopped the rendering (then `message` and `fix` are
    /// minijinja's and not shown).
    pub limit: Option<LimitHit>,
}

const UNDEFINED_FIX: &str = "use one of the context variables listed in docs/native-spec.md \
     (name, namespace, image, replicas, labels, request_id, template_id, …), or guard optional \
     ones with `is defined` / `| default(...)`";
const SYNTAX_FIX: &str = "fix the Jinja syntax: expressions are {{ … }}, statements {% … %}, \
     and every {% if %}/{% for %} needs its {% endif %}/{% endfor %}";
const OTHER_FIX: &str = "check the expression against the context variables listed in \
     docs/native-spec.md";

fn failure(err: &minijinja::Error, limits: &RenderLimits) -> JinjaFailure {
    let limit = (err.kind() == ErrorKind::OutOfFuel).then(|| LimitHit {
        what: format!("it used up its fuel of {}", limits.fuel),
        setting: "native_spec_render_fuel",
    });
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
        limit,
    }
}

/// Python's methods (`.items()`, `.upper()`, …), except a `str.format` field wider than
/// [`MAX_FORMAT_WIDTH`] or with a width taken from its arguments: it would build the padded
/// string before fuel is charged for it (a 1 GB `'{:>999999999}'.format(x)` in one step).
fn bounded_python_method(
    state: &mut minijinja::State<'_, '_>,
    value: &minijinja::Value,
    method: &str,
    args: &[minijinja::Value],
) -> Result<minijinja::Value, minijinja::Error> {
    if method == "format" && value.as_str().is_some_and(has_wide_format_field) {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "a str.format field may be at most {MAX_FORMAT_WIDTH} wide, and not take its \
                 width from an argument"
            ),
        ));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

const MAX_FORMAT_WIDTH: usize = 4096;

/// Whether a `str.format` text has a `{…}` field with a nested `{` (a width from an
/// argument) or a number over [`MAX_FORMAT_WIDTH`].
fn has_wide_format_field(text: &str) -> bool {
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let field = &rest[start + 1..];
        if let Some(escaped) = field.strip_prefix('{') {
            rest = escaped;
            continue;
        }
        let end = field.find('}').unwrap_or(field.len());
        let spec = &field[..end];
        if spec.contains('{')
            || spec
                .split(|c: char| !c.is_ascii_digit())
                .any(|n| n.len() > 4 && n.parse::<usize>().map_or(true, |n| n > MAX_FORMAT_WIDTH))
        {
            return true;
        }
        rest = &field[end.min(field.len())..];
        if rest.is_empty() {
            break;
        }
        rest = &rest[1..];
    }
    false
}

/// Widest `tojson` indent: minijinja writes the whole pretty text before it charges fuel for
/// it, so a wide indent of a long list would allocate gigabytes first.
const MAX_TOJSON_INDENT: usize = 8;

fn strict_tojson(
    state: &minijinja::State<'_, '_>,
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
    let width = match &indent {
        Some(width) => Some(width.clone()),
        None => args.peek::<Option<minijinja::Value>>("indent")?,
    };
    if let Some(width) = width.and_then(|w| w.as_usize())
        && width > MAX_TOJSON_INDENT
    {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson indent {width} is too wide; use at most {MAX_TOJSON_INDENT}"),
        ));
    }
    let json = minijinja::filters::tojson(value, indent, args)?;
    state.consume_fuel(json.len().unwrap_or(0) as u64 / 64)?;
    Ok(json)
}

/// Renders the native-spec sources of one object against a context, within its
/// [`RenderLimits`] (fuel per rendering, output size over all renderings of the object; the
/// time limit is the caller's, see [`run_with_timeout`]).
pub struct SpecRenderer {
    env: Environment<'static>,
    limits: RenderLimits,
    produced: Cell<usize>,
}

impl Default for SpecRenderer {
    fn default() -> Self {
        Self::new()
    }
}

impl SpecRenderer {
    pub fn new() -> Self {
        Self::with_limits(RenderLimits::default())
    }

    pub fn with_limits(limits: RenderLimits) -> Self {
        let mut env = Environment::new();
        env.set_fuel(Some(limits.fuel));
        // Strict: a misspelt variable is an error, never an empty string in the cluster.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(bounded_python_method);
        minijinja_contrib::add_to_environment(&mut env);
        // The built-in `tojson` writes an undefined value as `null`, which would let a typo
        // through despite strict mode; Jinja2's StrictUndefined refuses it, and so do we.
        env.add_filter("tojson", strict_tojson);
        Self {
            env,
            limits,
            produced: Cell::new(0),
        }
    }

    /// A source longer than `max_bytes` is refused unread: its length bounds how deep it can
    /// nest values (see [`RENDER_STACK`]).
    fn check_source(&self, source: &str) -> Result<(), JinjaFailure> {
        if source.len() <= self.limits.max_bytes {
            return Ok(());
        }
        Err(self.over_max_bytes(format!(
            "its source has more than {} bytes",
            self.limits.max_bytes
        )))
    }

    /// Counts `bytes` more output against `max_bytes`.
    fn produce(&self, bytes: usize) -> Result<(), JinjaFailure> {
        let total = self.produced.get().saturating_add(bytes);
        self.produced.set(total);
        if total <= self.limits.max_bytes {
            return Ok(());
        }
        Err(self.over_max_bytes(format!(
            "it produced more than {} bytes of text",
            self.limits.max_bytes
        )))
    }

    /// The failure of a source or an output longer than `max_bytes`; `what` says which.
    fn over_max_bytes(&self, what: String) -> JinjaFailure {
        JinjaFailure {
            line: None,
            message: String::new(),
            fix: OTHER_FIX,
            limit: Some(LimitHit {
                what,
                setting: "native_spec_render_max_bytes",
            }),
        }
    }

    /// Renders a whole source text (a default template or an operator's file).
    pub fn render_text(
        &self,
        name: &str,
        source: &str,
        context: &Value,
    ) -> Result<String, JinjaFailure> {
        self.check_source(source)?;
        let text = self
            .env
            .render_named_str(name, source, Serde(context))
            .map_err(|e| failure(&e, &self.limits))?;
        self.produce(text.len())?;
        Ok(text)
    }

    /// Renders one string of an inline spec. A string that is exactly one `{{ expression }}`
    /// keeps the expression's type (`"{{ replicas }}"` is the number 3); anything else is
    /// rendered as text.
    pub fn render_leaf(&self, source: &str, context: &Value) -> Result<Value, JinjaFailure> {
        if !source.contains("{{") && !source.contains("{%") && !source.contains("{#") {
            return Ok(Value::String(source.to_string()));
        }
        self.check_source(source)?;
        if let Some(expr) = single_expression(source) {
            let fail = |e: minijinja::Error| failure(&e, &self.limits);
            let value = self
                .env
                .compile_expression(expr)
                .map_err(fail)?
                .eval(Serde(context))
                .map_err(fail)?;
            if value.is_undefined() {
                return Err(JinjaFailure {
                    line: Some(1),
                    message: format!("undefined value: `{}` is undefined", expr.trim()),
                    fix: UNDEFINED_FIX,
                    limit: None,
                });
            }
            let json = serde_json::to_value(&value).map_err(|e| JinjaFailure {
                line: Some(1),
                message: format!("`{}` cannot be written as JSON: {e}", expr.trim()),
                fix: OTHER_FIX,
                limit: None,
            })?;
            self.produce(json_size(&json))?;
            return Ok(json);
        }
        self.render_text("leaf", source, context).map(Value::String)
    }
}

/// Roughly the bytes `value` takes as JSON, without writing it out.
fn json_size(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(json_size).sum::<usize>() + items.len() + 2,
        Value::Object(fields) => {
            fields
                .iter()
                .map(|(k, v)| k.len() + 4 + json_size(v))
                .sum::<usize>()
                + 2
        }
        _ => 8,
    }
}

/// Stack of a rendering thread: address space only, touched as deep as a template nests
/// values (a source of `max_bytes` nests about `max_bytes / 17` levels).
const RENDER_STACK: usize = 1 << 30;

/// Runs `work` on a thread of its own and waits at most `timeout` for it, so a slow
/// rendering never holds the caller (an async worker of `orb serve`, a HostFactory listing)
/// longer. `None` when the time is up; the thread then finishes on its own, bounded by its
/// fuel, and its result is dropped.
pub fn run_with_timeout<T: Send + 'static>(
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (done, result) = std::sync::mpsc::sync_channel(1);
    // minijinja recurses over nested values (dropping, printing, serialising them), and a
    // template can nest a list as deep as its source is long: reserve room for that.
    std::thread::Builder::new()
        .name("orb-render".into())
        .stack_size(RENDER_STACK)
        .spawn(move || {
            let _ = done.send(work());
        })
        .ok()?;
    result.recv_timeout(timeout).ok()
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

    const NESTED_LOOP: &str =
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    const DOUBLING: &str = "{% set s = namespace(v='x') %}{% for i in range(64) %}\
        {% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v | length }}";

    #[rstest]
    #[case::nested_loop(NESTED_LOOP)]
    #[case::string_doubling(DOUBLING)]
    #[case::string_repeat("{{ 'x' * 100000000 }}")]
    #[case::repeat_in_a_leaf("{{ ('x' * 70000000) | length }}")]
    fn runaway_templates_run_out_of_fuel(#[case] source: &str) {
        let started = std::time::Instant::now();
        let renderer = SpecRenderer::new();
        let err = renderer.render_text("t", source, &ctx()).unwrap_err();
        let err2 = renderer.render_leaf(source, &ctx()).unwrap_err();
        for err in [err, err2] {
            assert_eq!(
                err.limit,
                Some(LimitHit {
                    what: "it used up its fuel of 1000000".into(),
                    setting: "native_spec_render_fuel",
                }),
                "{err:?}"
            );
        }
        // Well under a second each on an idle machine; the bound leaves room for a busy one.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn output_over_the_cap_is_refused_over_all_renderings_of_one_object() {
        let big = "{% for i in range(12000) %}{{ 'y' * 100 }}{% endfor %}";
        let err = SpecRenderer::new()
            .render_text("t", big, &ctx())
            .unwrap_err();
        assert_eq!(
            err.limit.map(|l| l.setting),
            Some("native_spec_render_max_bytes")
        );
        // Each leaf is small, together they are not.
        let renderer = SpecRenderer::with_limits(RenderLimits {
            max_bytes: 10_000,
            ..RenderLimits::default()
        });
        let leaf = "{{ 'z' * 3000 }}";
        for _ in 0..3 {
            renderer.render_leaf(leaf, &ctx()).unwrap();
        }
        let err = renderer.render_leaf(leaf, &ctx()).unwrap_err();
        assert_eq!(
            err.limit.map(|l| l.what),
            Some("it produced more than 10000 bytes of text".into())
        );
    }

    #[test]
    fn a_wide_tojson_indent_is_refused_before_it_is_written() {
        let started = std::time::Instant::now();
        for source in [
            "{{ range(100000) | list | tojson(indent=100000) }}",
            "{{ range(100000) | list | tojson(100000) }}",
        ] {
            let err = SpecRenderer::new()
                .render_text("t", source, &ctx())
                .unwrap_err();
            assert!(
                err.message.contains("tojson indent 100000 is too wide"),
                "{err:?}"
            );
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        let ok = SpecRenderer::new().render_text("t", "{{ [1] | tojson(indent=2) }}", &ctx());
        assert_eq!(ok.unwrap(), "[\n  1\n]");
    }

    /// Values nested as deep as a source can make them are dropped and printed on the render
    /// thread without overflowing its stack (an overflow would abort the whole daemon); a
    /// longer source is refused unread.
    #[test]
    fn deep_nesting_stays_within_the_render_thread() {
        let nest = |levels: usize| {
            format!(
                "{{% set x = [] %}}{}{{{{ x | length }}}}{{{{ x }}}}",
                "{% set x = [x] %}".repeat(levels)
            )
        };
        let limits = RenderLimits::default();
        let deepest = nest(limits.max_bytes / 17 - 2);
        assert!(deepest.len() <= limits.max_bytes);
        let out = run_with_timeout(Duration::from_secs(60), move || {
            SpecRenderer::new().render_text("t", &deepest, &json!({}))
        });
        assert!(
            matches!(
                out,
                Some(Ok(_)) | Some(Err(JinjaFailure { limit: Some(_), .. }))
            ),
            "{out:?}"
        );
        let err = SpecRenderer::new()
            .render_text("t", &nest(limits.max_bytes / 17 + 1), &json!({}))
            .unwrap_err();
        assert_eq!(
            err.limit.map(|l| l.what),
            Some("its source has more than 1048576 bytes".into())
        );
    }

    /// Found by the jinja_render fuzz target: pycompat's `str.format` pads before fuel is
    /// charged.
    #[rstest]
    #[case::wide("{{ '{:>975384134}'.format('x') }}")]
    #[case::width_from_an_argument("{{ '{:>{}}'.format('x', 999999999) }}")]
    #[case::wide_precision("{{ '{:.99999999}'.format(1.5) }}")]
    fn a_wide_str_format_field_is_refused_before_it_is_padded(#[case] source: &str) {
        let started = std::time::Instant::now();
        let err = SpecRenderer::new()
            .render_text("t", source, &ctx())
            .unwrap_err();
        assert!(err.message.contains("str.format field"), "{err:?}");
        assert!(started.elapsed() < Duration::from_millis(200));
        let ok =
            SpecRenderer::new().render_text("t", "{{ '{:>6}|{}|{{}}'.format('x', 12) }}", &ctx());
        assert_eq!(ok.unwrap(), "     x|12|{}");
    }

    #[test]
    fn a_late_result_is_dropped_and_the_caller_goes_on() {
        let started = std::time::Instant::now();
        let late = run_with_timeout(Duration::from_millis(20), || {
            std::thread::sleep(Duration::from_millis(500));
            1
        });
        assert_eq!(late, None);
        assert!(started.elapsed() < Duration::from_millis(400));
        assert_eq!(run_with_timeout(Duration::from_secs(5), || 2), Some(2));
    }

    #[test]
    fn no_auto_escaping_in_json_sources() {
        let out = SpecRenderer::new()
            .render_text("default.json", "\"{{ image }}\"", &ctx())
            .unwrap();
        assert_eq!(out, "\"busybox:1.36\"");
    }
}
