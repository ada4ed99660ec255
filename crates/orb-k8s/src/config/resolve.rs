//! Applying defaults < file < env < template overrides, leaf by leaf, recording where every
//! effective value came from, then running the semantic rules. Pure: the environment is a map
//! handed in by the caller, so tests never touch the process environment.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::coerce::coerce;
use super::issues::{ConfigErrors, ConfigIssue, ConfigWarning, Origin};
use super::layers::{self, Assignment, FileLayer, Flattened, Target, TemplateOverrides};
use super::model::K8sProviderConfig;
use super::rules::{self, Origins};
use super::schema::{self, FieldKind};

/// The provider-wide sources: the file block and a snapshot of the environment. Built once at
/// startup; per-template configs are derived from it with [`ConfigLayers::resolve`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConfigLayers {
    pub file: Option<FileLayer>,
    /// Only `ORB_K8S_*` entries matter; others are ignored.
    pub env: BTreeMap<String, String>,
}

impl ConfigLayers {
    /// Keeps only the `ORB_K8S_*` variables (case-insensitive prefix) from `env`.
    pub fn new(file: Option<FileLayer>, env: impl IntoIterator<Item = (String, String)>) -> Self {
        let env = env
            .into_iter()
            .filter(|(k, _)| {
                k.to_ascii_uppercase()
                    .starts_with(super::schema::ENV_PREFIX)
            })
            .collect();
        Self { file, env }
    }

    /// [`Self::new`] with the process environment. Unlike `std::env::vars`, this never panics
    /// on a non-UTF-8 variable: such a value is converted lossily and then fails validation
    /// with a visible message instead of being skipped.
    pub fn from_process_env(file: Option<FileLayer>) -> Self {
        Self::new(
            file,
            std::env::vars_os().map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            }),
        )
    }

    /// The effective config for the provider (`template = None`) or for one template.
    pub fn resolve(
        &self,
        template: Option<&TemplateOverrides>,
    ) -> Result<ResolvedConfig, ConfigErrors> {
        resolve_config(self, template)
    }
}

/// An effective, validated configuration with the origin of every leaf.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedConfig {
    pub config: K8sProviderConfig,
    /// Keyed by dotted leaf path (`naming.prefix`, `default_node_selector.workload`). Map and
    /// list fields also carry an entry for the field itself (the last source that touched it).
    pub origins: BTreeMap<String, Origin>,
    /// Legal but risky settings; log them at WARN and show them in `orb config show`.
    pub warnings: Vec<ConfigWarning>,
    /// The operator's departures from the secure defaults (reject mode or the audit off, the
    /// native spec hatch on), each with its origin: printed at every `orb serve` start and by
    /// `orb doctor` and `orb config show`.
    pub security_opt_outs: Vec<ConfigWarning>,
    layers: ConfigLayers,
}

impl ResolvedConfig {
    pub fn origin_of(&self, path: &str) -> &Origin {
        self.origins.get(path).unwrap_or(&Origin::Default)
    }

    /// The layers this config was resolved from.
    pub fn layers(&self) -> &ConfigLayers {
        &self.layers
    }

    /// Re-resolves with one template's overrides on top of the same file and env.
    pub fn for_template(
        &self,
        overrides: &TemplateOverrides,
    ) -> Result<ResolvedConfig, ConfigErrors> {
        resolve_config(&self.layers, Some(overrides))
    }
}

struct Effective {
    tree: Map<String, Value>,
    origins: BTreeMap<String, Origin>,
    issues: Vec<ConfigIssue>,
    warnings: Vec<ConfigWarning>,
}

impl Effective {
    fn from_defaults() -> Self {
        // Missing keys fall back to the model's serde defaults, so an empty map is safe too.
        let tree = match serde_json::to_value(K8sProviderConfig::default()) {
            Ok(Value::Object(tree)) => tree,
            _ => Map::new(),
        };
        let origins = schema::FIELDS
            .iter()
            .map(|f| (f.path.to_string(), Origin::Default))
            .collect();
        Self {
            tree,
            origins,
            issues: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The slot for a schema path: a top-level key or `container.leaf` (one nesting level).
    fn slot(&mut self, path: &str) -> &mut Value {
        match path.split_once('.') {
            None => self.tree.entry(path.to_string()).or_insert(Value::Null),
            Some((container, leaf)) => {
                let child = self
                    .tree
                    .entry(container.to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !child.is_object() {
                    *child = Value::Object(Map::new());
                }
                match child {
                    Value::Object(map) => map.entry(leaf.to_string()).or_insert(Value::Null),
                    other => other,
                }
            }
        }
    }

    fn apply_all(&mut self, flattened: Flattened) {
        self.issues.extend(flattened.issues);
        self.warnings.extend(flattened.warnings);
        for assignment in flattened.assignments {
            self.apply(assignment);
        }
    }

    fn apply(
        &mut self,
        Assignment {
            target,
            raw,
            origin,
        }: Assignment,
    ) {
        let path = target.path();
        let kind = match &target {
            Target::Field(spec) => spec.kind,
            Target::MapEntry(..) => FieldKind::String,
        };
        let value = match coerce(kind, &raw) {
            Ok(v) => v,
            Err(refusal) => {
                self.issues
                    .push(ConfigIssue::new(path, origin, refusal.problem, refusal.fix));
                return;
            }
        };
        match target {
            Target::Field(spec) => {
                *self.slot(spec.path) = value;
                if spec.kind == FieldKind::StringMap {
                    let entry_prefix = format!("{}.", spec.path);
                    self.origins.retain(|k, _| !k.starts_with(&entry_prefix));
                    // Entries of a whole-map value share its origin.
                    if let Some(Value::Object(entries)) = self.tree.get(spec.path) {
                        for key in entries.keys() {
                            self.origins
                                .insert(format!("{entry_prefix}{key}"), origin.clone());
                        }
                    }
                }
                self.origins.insert(spec.path.to_string(), origin);
            }
            Target::MapEntry(spec, key) => {
                let map = self.slot(spec.path);
                if !map.is_object() {
                    *map = Value::Object(Map::new());
                }
                if let Value::Object(entries) = map {
                    entries.insert(key, value);
                }
                self.origins.insert(path, origin.clone());
                self.origins.insert(spec.path.to_string(), origin);
            }
        }
    }
}

/// Resolves the effective provider config from its layers and optional template overrides.
/// Returns every problem found (unknown keys, bad types, failed rules), not just the first.
pub fn resolve_config(
    layers: &ConfigLayers,
    template: Option<&TemplateOverrides>,
) -> Result<ResolvedConfig, ConfigErrors> {
    let mut effective = Effective::from_defaults();
    if let Some(file) = &layers.file {
        effective.apply_all(layers::flatten_file(file));
    }
    effective.apply_all(layers::flatten_env(&layers.env));
    if let Some(template) = template {
        effective.apply_all(layers::flatten_template(template));
    }

    let config: K8sProviderConfig = match serde_json::from_value(Value::Object(effective.tree)) {
        Ok(config) => config,
        Err(err) => {
            // Coercion guarantees the shape; reaching this is a bug, reported rather than hidden.
            effective.issues.push(ConfigIssue::new(
                "(config)",
                Origin::Default,
                format!("the merged configuration does not fit the model: {err}"),
                "report this as an orb bug, with the config file and ORB_K8S_* variables used",
            ));
            return Err(ConfigErrors {
                issues: effective.issues,
            });
        }
    };

    let findings = rules::check(&config, &Origins(&effective.origins));
    let mut issues = effective.issues;
    issues.extend(findings.issues);
    if !issues.is_empty() {
        return Err(ConfigErrors { issues });
    }
    let mut warnings = effective.warnings;
    warnings.extend(findings.warnings);
    let security_opt_outs = rules::security_opt_outs(&config, &Origins(&effective.origins));
    Ok(ResolvedConfig {
        security_opt_outs,
        config,
        origins: effective.origins,
        warnings,
        layers: layers.clone(),
    })
}
