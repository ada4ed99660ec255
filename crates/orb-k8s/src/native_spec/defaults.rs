//! The per-API default templates (`specs/<api>/default.json`): compiled into the binary and
//! overridable by a file of the same relative path under the config directory.

use std::path::{Path, PathBuf};

use orb_core::ProviderApi;

use super::NativeSpecError;

const POD: &str = include_str!("../../specs/pod/default.json");
const DEPLOYMENT: &str = include_str!("../../specs/deployment/default.json");
const STATEFULSET: &str = include_str!("../../specs/statefulset/default.json");
const JOB: &str = include_str!("../../specs/job/default.json");

/// The `<api>` directory name: `pod`, `deployment`, `statefulset`, `job`.
pub fn spec_dir_name(api: ProviderApi) -> &'static str {
    match api {
        ProviderApi::Pod => "pod",
        ProviderApi::Deployment => "deployment",
        ProviderApi::StatefulSet => "statefulset",
        ProviderApi::Job => "job",
    }
}

/// The built-in default template of `api`, exactly as shipped.
pub fn builtin_default_spec(api: ProviderApi) -> &'static str {
    match api {
        ProviderApi::Pod => POD,
        ProviderApi::Deployment => DEPLOYMENT,
        ProviderApi::StatefulSet => STATEFULSET,
        ProviderApi::Job => JOB,
    }
}

/// `specs/<api>/default.json`, relative to a config directory.
pub fn default_spec_relative_path(api: ProviderApi) -> PathBuf {
    Path::new("specs")
        .join(spec_dir_name(api))
        .join("default.json")
}

/// A Jinja source and where it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecSource {
    /// e.g. `built-in specs/pod/default.json` or `/etc/orb/config/specs/pod/default.json`.
    pub label: String,
    pub text: String,
}

/// The default template for `api`: `<config_dir>/specs/<api>/default.json` when that file
/// exists, else the built-in one. A file that exists but cannot be read is an error rather
/// than a silent fallback, so an operator's override is never quietly ignored.
pub fn load_default_spec(
    api: ProviderApi,
    config_dir: Option<&Path>,
) -> Result<SpecSource, NativeSpecError> {
    if let Some(dir) = config_dir {
        let path = dir.join(default_spec_relative_path(api));
        if path.exists() {
            let text =
                std::fs::read_to_string(&path).map_err(|e| NativeSpecError::ReadDefault {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
            return Ok(SpecSource {
                label: path.display().to_string(),
                text,
            });
        }
    }
    Ok(SpecSource {
        label: format!("built-in {}", default_spec_relative_path(api).display()),
        text: builtin_default_spec(api).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_dir_file_overrides_the_builtin_and_others_stay_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let pod_dir = dir.path().join("specs/pod");
        std::fs::create_dir_all(&pod_dir).unwrap();
        std::fs::write(pod_dir.join("default.json"), "{\"kind\": \"Pod\"}").unwrap();
        let pod = load_default_spec(ProviderApi::Pod, Some(dir.path())).unwrap();
        assert_eq!(pod.text, "{\"kind\": \"Pod\"}");
        assert!(
            pod.label.ends_with("specs/pod/default.json"),
            "{}",
            pod.label
        );
        let job = load_default_spec(ProviderApi::Job, Some(dir.path())).unwrap();
        assert_eq!(job.text, JOB);
        assert_eq!(job.label, "built-in specs/job/default.json");
    }

    #[test]
    fn builtins_are_compiled_in_for_every_kind() {
        for api in ProviderApi::ALL {
            assert!(builtin_default_spec(api).contains(&format!("\"kind\": \"{api}\"")));
        }
    }
}
