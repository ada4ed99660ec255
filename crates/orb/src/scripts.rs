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
         exec \"${{ORB_COMMAND:-{}}}\" --scheduler hostfactory {args} \"$@\"\n",
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

    #[test]
    fn odd_paths_are_quoted_for_the_shell() {
        let text = script_text(
            "x.sh",
            "templates list",
            "p",
            Path::new("/opt/it's here/orb"),
        );
        assert!(
            text.contains(r#"${ORB_COMMAND:-'/opt/it'\''s here/orb'}"#),
            "{text}"
        );
    }
}
