//! The five HostFactory provider scripts. Each is a two-line `exec` of this binary, so
//! HostFactory gets exactly one JSON document on stdout and orb's diagnostics stay on stderr.

use std::path::Path;

/// (file name, orb arguments, what HostFactory uses it for)
pub const SCRIPTS: [(&str, &str, &str); 5] = [
    (
        "getAvailableTemplates.sh",
        "templates list",
        "list the templates HostFactory may request from",
    ),
    (
        "requestMachines.sh",
        "machines request",
        "start an acquire of N machines of one template",
    ),
    (
        "requestReturnMachines.sh",
        "machines return",
        "start returning named machines",
    ),
    (
        "getRequestStatus.sh",
        "requests status",
        "poll acquire and return requests",
    ),
    (
        "getReturnRequests.sh",
        "requests list-returns",
        "list hosts the cluster is taking back",
    ),
];

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

pub fn script_text(name: &str, args: &str, purpose: &str, orb_path: &Path) -> String {
    format!(
        "#!/bin/sh\n\
         # HostFactory provider script {name}: {purpose}.\n\
         # Written by `orb hostfactory install`. HostFactory runs it as `{name} -f <input.json>`;\n\
         # the reply is one JSON document on stdout, diagnostics go to stderr.\n\
         # ORB_COMMAND overrides the orb binary below.\n\
         orb_binary={}\n\
         exec \"${{ORB_COMMAND:-$orb_binary}}\" --scheduler hostfactory {args} \"$@\"\n",
        shell_quote(&orb_path.display().to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_exec_orb_in_hostfactory_mode_with_their_arguments() {
        let all: String = SCRIPTS
            .iter()
            .map(|(name, args, purpose)| {
                format!(
                    "== {name}\n{}",
                    script_text(name, args, purpose, Path::new("/opt/orb/bin/orb"))
                )
            })
            .collect();
        insta::assert_snapshot!(all);
    }

    #[cfg(unix)]
    #[test]
    fn the_script_runs_orb_even_from_a_path_with_spaces_and_quotes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = dir.path().join("it's here");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let fake_orb = bin_dir.join("orb");
        std::fs::write(&fake_orb, "#!/bin/sh\necho \"args: $*\"\n").unwrap();
        std::fs::set_permissions(&fake_orb, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = dir.path().join("getRequestStatus.sh");
        std::fs::write(
            &script,
            script_text("getRequestStatus.sh", "requests status", "p", &fake_orb),
        )
        .unwrap();
        let out = std::process::Command::new("sh")
            .arg(&script)
            .args(["-f", "in.json"])
            .env_remove("ORB_COMMAND")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "args: --scheduler hostfactory requests status -f in.json\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
