//! Where orb reads config and templates, keeps its database and writes logs.
//!
//! One precedence per directory, highest first: command-line flag, `ORB_*` variable,
//! HostFactory `HF_PROVIDER_*` variable, the IBM default under `HF_CONFDIR`/`HF_WORKDIR`
//! for `HF_PROVIDER_NAME`, then `<root>/{config,work,logs}` where root is `ORB_ROOT_DIR`,
//! else the parent of `ORB_CONFIG_DIR`, else `~/.orb`. Each result records where it came
//! from so `orb config show` can explain it.

use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedPath {
    pub path: PathBuf,
    /// Human-readable origin, e.g. `ORB_WORK_DIR` or `default (~/.orb/work)`.
    pub origin: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dirs {
    pub config_dir: ResolvedPath,
    pub work_dir: ResolvedPath,
    pub log_dir: ResolvedPath,
    pub config_file: ResolvedPath,
}

/// Explicit overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct DirFlags {
    pub config_file: Option<PathBuf>,
    pub config_dir: Option<PathBuf>,
    pub work_dir: Option<PathBuf>,
}

/// Resolves every directory from `env` (a variable lookup) and `home`.
pub fn resolve_dirs(flags: &DirFlags, env: &dyn Fn(&str) -> Option<String>, home: &Path) -> Dirs {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let hf_name = var("HF_PROVIDER_NAME");
    let hf_default = |base: &str| match (var(base), &hf_name) {
        (Some(dir), Some(name)) => Some((
            PathBuf::from(dir).join("providers").join(name),
            format!("{base}/providers/$HF_PROVIDER_NAME"),
        )),
        _ => None,
    };
    // `--config FILE` (as the reference broker's SDKs start it) makes FILE's directory the
    // config directory, and the root the one around it: its parent for the usual
    // `<root>/config/config.json`, else that directory itself, so a config in a scratch
    // directory keeps work and logs beside it. Explicit directory variables still win.
    let beside_file = flags.config_file.as_ref().map(|file| {
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let root = match dir.parent() {
            Some(parent) if dir.file_name().is_some_and(|n| n == "config") => parent.to_path_buf(),
            _ => dir.clone(),
        };
        (dir, root)
    });
    let root = var("ORB_ROOT_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            var("ORB_CONFIG_DIR").and_then(|d| PathBuf::from(d).parent().map(Path::to_path_buf))
        })
        .or_else(|| beside_file.as_ref().map(|(_, root)| root.clone()))
        .unwrap_or_else(|| home.join(".orb"));
    let explicit_root = var("ORB_ROOT_DIR").is_some();
    let pick = |flag: Option<&PathBuf>, chain: Vec<Option<(PathBuf, String)>>, leaf: &str| {
        if let Some(path) = flag {
            return ResolvedPath {
                path: path.clone(),
                origin: "command line".into(),
            };
        }
        let default = match (&beside_file, leaf, explicit_root) {
            (Some((dir, _)), "config", false) => dir.clone(),
            _ => root.join(leaf),
        };
        let origin = match &beside_file {
            Some(_) if !explicit_root => {
                format!("beside the --config file ({})", default.display())
            }
            _ => format!("default ({})", default.display()),
        };
        chain
            .into_iter()
            .flatten()
            .next()
            .map(|(path, origin)| ResolvedPath { path, origin })
            .unwrap_or(ResolvedPath {
                path: default,
                origin,
            })
    };
    let from = |name: &str| var(name).map(|v| (PathBuf::from(v), name.to_string()));
    let under_hf_work = |leaf: &str| {
        var("HF_PROVIDER_WORKDIR").map(|w| {
            (
                PathBuf::from(w).join(leaf),
                format!("HF_PROVIDER_WORKDIR/{leaf}"),
            )
        })
    };
    let config_dir = pick(
        flags.config_dir.as_ref(),
        vec![
            from("ORB_CONFIG_DIR"),
            from("HF_PROVIDER_CONFDIR"),
            hf_default("HF_CONFDIR"),
            under_hf_work("config"),
        ],
        "config",
    );
    let work_dir = pick(
        flags.work_dir.as_ref(),
        vec![
            from("ORB_WORK_DIR"),
            from("HF_PROVIDER_WORKDIR"),
            hf_default("HF_WORKDIR"),
        ],
        "work",
    );
    let log_dir = pick(
        None,
        vec![
            from("ORB_LOG_DIR"),
            from("HF_PROVIDER_LOGDIR"),
            from("HF_LOGDIR"),
            under_hf_work("logs"),
        ],
        "logs",
    );
    let config_file = match (&flags.config_file, var("ORB_CONFIG_FILE")) {
        (Some(path), _) => ResolvedPath {
            path: path.clone(),
            origin: "command line".into(),
        },
        (None, Some(path)) => ResolvedPath {
            path: PathBuf::from(path),
            origin: "ORB_CONFIG_FILE".into(),
        },
        (None, None) => ResolvedPath {
            path: config_dir.path.join("config.json"),
            origin: format!("config.json in the config dir ({})", config_dir.origin),
        },
    };
    Dirs {
        config_dir,
        work_dir,
        log_dir,
        config_file,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::collections::HashMap;

    fn resolve(vars: &[(&str, &str)], flags: DirFlags) -> Dirs {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve_dirs(&flags, &|k| map.get(k).cloned(), Path::new("/home/u"))
    }

    #[rstest]
    #[case::nothing_set(&[], "/home/u/.orb/config", "/home/u/.orb/work", "/home/u/.orb/logs")]
    #[case::orb_vars(&[("ORB_CONFIG_DIR", "/c"), ("ORB_WORK_DIR", "/w"), ("ORB_LOG_DIR", "/l")], "/c", "/w", "/l")]
    #[case::orb_beats_hf(&[("ORB_WORK_DIR", "/w"), ("HF_PROVIDER_WORKDIR", "/hw")], "/hw/config", "/w", "/hw/logs")]
    #[case::hf_provider_vars(&[("HF_PROVIDER_CONFDIR", "/hc"), ("HF_PROVIDER_WORKDIR", "/hw"), ("HF_PROVIDER_LOGDIR", "/hl")], "/hc", "/hw", "/hl")]
    #[case::ibm_defaults(&[("HF_CONFDIR", "/hf/conf"), ("HF_WORKDIR", "/hf/work"), ("HF_LOGDIR", "/hf/log"), ("HF_PROVIDER_NAME", "kube")],
        "/hf/conf/providers/kube", "/hf/work/providers/kube", "/hf/log")]
    #[case::root_dir(&[("ORB_ROOT_DIR", "/r")], "/r/config", "/r/work", "/r/logs")]
    #[case::root_from_config_dir(&[("ORB_CONFIG_DIR", "/r/config")], "/r/config", "/r/work", "/r/logs")]
    #[case::blank_is_unset(&[("ORB_WORK_DIR", " ")], "/home/u/.orb/config", "/home/u/.orb/work", "/home/u/.orb/logs")]
    fn precedence(
        #[case] vars: &[(&str, &str)],
        #[case] config: &str,
        #[case] work: &str,
        #[case] logs: &str,
    ) {
        let dirs = resolve(vars, DirFlags::default());
        assert_eq!(dirs.config_dir.path, PathBuf::from(config));
        assert_eq!(dirs.work_dir.path, PathBuf::from(work));
        assert_eq!(dirs.log_dir.path, PathBuf::from(logs));
        assert_eq!(
            dirs.config_file.path,
            PathBuf::from(config).join("config.json")
        );
    }

    #[test]
    fn flags_beat_everything_and_say_so() {
        let flags = DirFlags {
            config_file: Some("/f/c.json".into()),
            config_dir: Some("/f".into()),
            work_dir: Some("/fw".into()),
        };
        let dirs = resolve(
            &[("ORB_CONFIG_DIR", "/c"), ("ORB_CONFIG_FILE", "/x.json")],
            flags,
        );
        assert_eq!(dirs.config_file.path, PathBuf::from("/f/c.json"));
        assert_eq!(dirs.config_dir.origin, "command line");
        assert_eq!(dirs.work_dir.path, PathBuf::from("/fw"));
    }

    #[rstest]
    #[case::scratch_dir("/tmp/sdk/config.json", &[], "/tmp/sdk", "/tmp/sdk/work", "/tmp/sdk/logs")]
    #[case::usual_layout("/r/config/config.json", &[], "/r/config", "/r/work", "/r/logs")]
    #[case::relative_file("config.json", &[], ".", "./work", "./logs")]
    #[case::env_dirs_still_win("/tmp/sdk/config.json", &[("ORB_WORK_DIR", "/w"), ("HF_PROVIDER_CONFDIR", "/hc")], "/hc", "/w", "/tmp/sdk/logs")]
    #[case::root_dir_wins("/tmp/sdk/config.json", &[("ORB_ROOT_DIR", "/r")], "/r/config", "/r/work", "/r/logs")]
    fn the_config_flag_sets_the_directories_around_its_file(
        #[case] file: &str,
        #[case] vars: &[(&str, &str)],
        #[case] config: &str,
        #[case] work: &str,
        #[case] logs: &str,
    ) {
        let flags = DirFlags {
            config_file: Some(file.into()),
            ..DirFlags::default()
        };
        let dirs = resolve(vars, flags);
        assert_eq!(dirs.config_dir.path, PathBuf::from(config));
        assert_eq!(dirs.work_dir.path, PathBuf::from(work));
        assert_eq!(dirs.log_dir.path, PathBuf::from(logs));
        assert_eq!(dirs.config_file.path, PathBuf::from(file));
    }

    #[test]
    fn orb_config_file_names_the_file_directly() {
        let dirs = resolve(&[("ORB_CONFIG_FILE", "/x.json")], DirFlags::default());
        assert_eq!(dirs.config_file.path, PathBuf::from("/x.json"));
        assert_eq!(dirs.config_file.origin, "ORB_CONFIG_FILE");
    }
}
