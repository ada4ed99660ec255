//! Template files: `{"scheduler_type": "...", "templates": [...]}` or a bare list, looked up in
//! the config directory as `<provider name>_templates.json`, `<provider type>_templates.json`,
//! then `templates.json`.

use serde_json::{Map, Value};

use super::TemplateError;
use super::wire::{NormalizedTemplate, kind_of, template_from_value};

#[derive(Debug)]
pub struct TemplateFile {
    pub scheduler_type: Option<String>,
    /// One entry per template in file order; a bad template does not hide the good ones.
    pub entries: Vec<Result<NormalizedTemplate, TemplateError>>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateFileError {
    #[error(
        "template file {file} is not valid JSON: {message}; fix the syntax (line and column given)"
    )]
    Syntax { file: String, message: String },
    #[error(
        "template file {file} must hold {{\"templates\": [...]}} or a list of templates, found {found}"
    )]
    Shape { file: String, found: &'static str },
}

/// File names to try, most specific first.
pub fn template_file_candidates(provider_name: &str, provider_type: &str) -> Vec<String> {
    let mut names = vec![format!("{provider_name}_templates.json")];
    let by_type = format!("{provider_type}_templates.json");
    if !names.contains(&by_type) {
        names.push(by_type);
    }
    names.push("templates.json".to_string());
    names
}

pub fn parse_template_file(
    file: &str,
    text: &str,
    defaults: Option<&Map<String, Value>>,
) -> Result<TemplateFile, TemplateFileError> {
    let root: Value = serde_json::from_str(text).map_err(|e| TemplateFileError::Syntax {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let (scheduler_type, list) = match &root {
        Value::Array(list) => (None, list),
        Value::Object(object) => match object.get("templates") {
            Some(Value::Array(list)) => (
                object
                    .get("scheduler_type")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                list,
            ),
            Some(other) => {
                return Err(TemplateFileError::Shape {
                    file: file.to_string(),
                    found: kind_of(other),
                });
            }
            None => {
                return Err(TemplateFileError::Shape {
                    file: file.to_string(),
                    found: "an object without \"templates\"",
                });
            }
        },
        other => {
            return Err(TemplateFileError::Shape {
                file: file.to_string(),
                found: kind_of(other),
            });
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    let entries = list
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let parsed = template_from_value(value, defaults, &format!("#{i} in {file}"))?;
            let id = parsed.template.template_id.clone();
            if !seen.insert(id.clone()) {
                return Err(TemplateError::Malformed {
                    label: format!("{id:?} (#{i} in {file})"),
                    message:
                        "the templateId is used twice in this file; give each template a unique id"
                            .into(),
                });
            }
            Ok(parsed)
        })
        .collect();
    Ok(TemplateFile {
        scheduler_type,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn candidates_go_from_specific_to_generic_without_repeats() {
        assert_eq!(
            template_file_candidates("kubernetes", "k8s"),
            vec![
                "kubernetes_templates.json",
                "k8s_templates.json",
                "templates.json"
            ]
        );
        assert_eq!(
            template_file_candidates("k8s", "k8s"),
            vec!["k8s_templates.json", "templates.json"]
        );
    }

    #[test]
    fn a_file_with_one_bad_template_keeps_the_good_ones() {
        let text = r#"{"scheduler_type": "hostfactory", "templates": [
            {"templateId": "a", "imageId": "x"},
            {"templateId": "b", "providerApi": "Nope"},
            {"templateId": "a", "imageId": "y"}
        ]}"#;
        let file = parse_template_file("t.json", text, None).unwrap();
        assert_eq!(file.scheduler_type.as_deref(), Some("hostfactory"));
        assert!(file.entries[0].is_ok());
        assert!(
            file.entries[1]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("Nope")
        );
        assert!(
            file.entries[2]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("used twice")
        );
    }

    #[test]
    fn a_bare_list_is_accepted() {
        let file = parse_template_file("t.json", r#"[{"template_id": "a"}]"#, None).unwrap();
        assert_eq!(file.entries.len(), 1);
    }

    #[rstest]
    #[case::syntax("{", "not valid JSON")]
    #[case::number("3", "a number")]
    #[case::no_templates(r#"{"x": 1}"#, "without \"templates\"")]
    #[case::templates_not_list(r#"{"templates": {}}"#, "an object")]
    fn unusable_files_are_explained(#[case] text: &str, #[case] needle: &str) {
        let err = parse_template_file("t.json", text, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle) && err.contains("t.json"), "{err}");
    }
}
