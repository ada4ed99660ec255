//! Where inbound authentication's settings come from. It is on with `--auth-token-review`
//! or the provider setting `inbound_auth_enabled` (config.json, or
//! `ORB_K8S_INBOUND_AUTH_ENABLED=true`); roles come from config.json's `serve.auth`
//! section, and the flags add to them (the same WHO: the flag wins) and replace its
//! `default_role` and `kubeconfig`. Auth on with no role configured at all makes every
//! authenticated caller a `viewer` ([`DEFAULT_ROLE`]). The same `serve` section holds the
//! web console's switch, `serve.ui.enabled` ([`console_enabled`]).
//!
//! ```json
//! "serve": {"auth": {"roles": {"batch:hf-driver": "operator", "*:dashboard": "viewer"},
//!                    "default_role": "viewer", "kubeconfig": "/etc/orb/reviewer.kubeconfig"}}
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::auth::{Role, RoleMap, parse_role_flag};
use crate::cli::ServeArgs;
use crate::failure::ConfigMistake;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeSection {
    #[serde(default)]
    auth: AuthSection,
    #[serde(default)]
    ui: UiSection,
}

/// `serve.ui`: the web console at `/ui/`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UiSection {
    /// Default: on.
    enabled: Option<bool>,
}

/// Whether `orb serve` serves the web console: on unless `--no-ui` or config.json's
/// `serve.ui.enabled: false` turns it off.
pub fn console_enabled(
    args: &ServeArgs,
    sections: &BTreeMap<String, Value>,
) -> Result<bool, ConfigMistake> {
    Ok(!args.no_ui && serve_section(sections)?.ui.enabled.unwrap_or(true))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthSection {
    #[serde(default)]
    roles: BTreeMap<String, String>,
    default_role: Option<String>,
    kubeconfig: Option<PathBuf>,
}

/// Inbound auth as it will run.
/// Which tokens are checked, and how.
#[derive(Debug, Clone)]
pub enum Scheme {
    /// Kubernetes tokens, checked by the apiserver's TokenReview.
    TokenReview,
    /// JWTs signed with config.json's `auth.bearer_token.secret_key` (`auth.type: "bearer"`).
    Jwt(std::sync::Arc<super::jwt::JwtVerifier>),
}

#[derive(Debug, Clone)]
pub struct AuthPlan {
    pub scheme: Scheme,
    pub roles: RoleMap,
    /// Kubeconfig for TokenReview; `None`: the provider's own connection.
    pub kubeconfig: Option<PathBuf>,
    /// What turned auth on, for the start-up line.
    pub switched_on_by: &'static str,
    /// Set when no role was configured at all and [`DEFAULT_ROLE`] applies to everyone.
    pub implicit_default: bool,
}

/// The role of every authenticated caller when auth is on and no role is configured: read
/// only, like the reference broker's default role `user`. Requests and returns then need an
/// explicit `operator` mapping.
pub const DEFAULT_ROLE: Role = Role::Viewer;

const FLAG: &str = "--auth-token-review";
const SETTING: &str = "inbound_auth_enabled";
const BEARER: &str = "auth.type \"bearer\"";

fn serve_section(sections: &BTreeMap<String, Value>) -> Result<ServeSection, ConfigMistake> {
    Ok(match sections.get("serve") {
        Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
            format!(
                "config.json \"serve\": {e}; it holds \"auth\" with roles \
                 ({{\"NAMESPACE:SERVICEACCOUNT\": \"operator\"}}), default_role and kubeconfig, \
                 and \"ui\": {{\"enabled\": false}} to turn the web console off"
            )
        })?,
        None => ServeSection::default(),
    })
}

/// The `serve` section's own checks, whether or not auth is on: its shape, and that every
/// role it names is a role (`POST /api/v1/config/validate` runs them without flags).
pub fn check_serve_section(sections: &BTreeMap<String, Value>) -> Result<(), ConfigMistake> {
    let section = serve_section(sections)?;
    for (who, role) in &section.auth.roles {
        role.parse::<Role>()
            .map_err(|e| format!("config.json serve.auth.roles[{who:?}]: {e}"))?;
    }
    if let Some(role) = &section.auth.default_role {
        role.parse::<Role>()
            .map_err(|e| format!("config.json serve.auth.default_role: {e}"))?;
    }
    Ok(())
}

/// Combines flags, config.json's top-level `sections` and the provider's
/// `inbound_auth_enabled`; `None` when auth is off. Every problem says what to change.
pub fn plan(
    args: &ServeArgs,
    sections: &BTreeMap<String, Value>,
    inbound_auth_enabled: bool,
) -> Result<Option<AuthPlan>, ConfigMistake> {
    let section = serve_section(sections)?;
    let auth_section = sections.get("auth");
    let bearer = auth_section
        .and_then(|a| a.get("type"))
        .and_then(Value::as_str)
        == Some("bearer");
    let token_review = args.auth_token_review || inbound_auth_enabled;
    if bearer && token_review {
        return Err(format!(
            "config.json auth.type \"bearer\" and TokenReview checks ({}) are both on; orb \
             checks one kind of token: drop one of them",
            if args.auth_token_review {
                FLAG
            } else {
                SETTING
            }
        )
        .into());
    }
    if bearer && args.auth_kubeconfig.is_some() {
        return Err(
            "--auth-kubeconfig is the TokenReview client's kubeconfig; with auth.type \"bearer\" \
             tokens are checked against auth.bearer_token.secret_key, so drop it"
                .into(),
        );
    }
    let scheme = if bearer {
        let verifier =
            super::jwt::JwtVerifier::from_auth_section(auth_section.unwrap_or(&Value::Null))
                .map_err(|e| format!("config.json {e}"))?;
        Scheme::Jwt(std::sync::Arc::new(verifier))
    } else {
        Scheme::TokenReview
    };
    let switched_on_by = match (bearer, args.auth_token_review, inbound_auth_enabled) {
        (true, _, _) => BEARER,
        (false, true, _) => FLAG,
        (false, false, true) => SETTING,
        (false, false, false) => {
            let flags_given = !args.auth_roles.is_empty()
                || args.auth_default_role.is_some()
                || args.auth_kubeconfig.is_some();
            if flags_given {
                return Err(
                    "--auth-role, --auth-default-role and --auth-kubeconfig need inbound auth on: \
                     pass --auth-token-review, set inbound_auth_enabled=true in the provider \
                     config (or ORB_K8S_INBOUND_AUTH_ENABLED=true), or configure auth.type \"bearer\""
                        .into(),
                );
            }
            return Ok(None);
        }
    };
    let mut roles: BTreeMap<String, Role> = BTreeMap::new();
    for (who, role) in &section.auth.roles {
        if who.trim().is_empty() {
            return Err(
                "config.json serve.auth.roles has an empty key; write \"NAMESPACE:SERVICEACCOUNT\", \
                 \"*:SERVICEACCOUNT\" or a user name"
                    .into(),
            );
        }
        let role = role
            .parse()
            .map_err(|e| format!("config.json serve.auth.roles[{who:?}]: {e}"))?;
        roles.insert(who.trim().to_string(), role);
    }
    for flag in &args.auth_roles {
        let (who, role) = parse_role_flag(flag)?;
        roles.insert(who, role);
    }
    let default = match (&args.auth_default_role, &section.auth.default_role) {
        (Some(flag), _) => Some(
            flag.parse()
                .map_err(|e| format!("--auth-default-role: {e}"))?,
        ),
        (None, Some(configured)) => Some(
            configured
                .parse()
                .map_err(|e| format!("config.json serve.auth.default_role: {e}"))?,
        ),
        (None, None) => None,
    };
    // Auth on by itself (seed 001's cheat sheet sets only ORB_K8S_INBOUND_AUTH_ENABLED)
    // must work: every authenticated caller gets the read-only default role.
    let implicit_default = roles.is_empty() && default.is_none();
    let default = if implicit_default {
        Some(DEFAULT_ROLE)
    } else {
        default
    };
    let roles = RoleMap::parse(
        roles
            .iter()
            .map(|(who, role)| (who.as_str(), role.as_str())),
        default,
    )?;
    Ok(Some(AuthPlan {
        scheme,
        roles,
        kubeconfig: args.auth_kubeconfig.clone().or(section.auth.kubeconfig),
        switched_on_by,
        implicit_default,
    }))
}

/// Whether the provider entry asks for inbound auth, read from its raw config and the
/// environment. Used when the Kubernetes provider could not be built, so a broken provider
/// config never leaves the API open by accident.
pub fn inbound_auth_requested(provider_config: &Value) -> bool {
    let truthy = |s: &str| matches!(s.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes");
    let configured = match provider_config.get("inbound_auth_enabled") {
        Some(Value::Bool(on)) => *on,
        Some(Value::String(text)) => truthy(text),
        _ => false,
    };
    configured
        || std::env::var("ORB_K8S_INBOUND_AUTH_ENABLED")
            .map(|v| truthy(&v))
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::super::auth::Identity;
    use super::*;
    use clap::Parser;
    use serde_json::json;

    fn args(extra: &[&str]) -> ServeArgs {
        let cli = crate::cli::Cli::try_parse_from(["orb", "serve"].iter().chain(extra)).unwrap();
        match cli.command {
            crate::cli::Command::Serve(args) => args,
            _ => unreachable!(),
        }
    }

    fn sections(value: Value) -> BTreeMap<String, Value> {
        [("serve".to_string(), value)].into_iter().collect()
    }

    fn sa(ns: &str, name: &str) -> Identity {
        Identity {
            username: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![],
            claimed_role: None,
        }
    }

    #[test]
    fn the_console_is_on_unless_the_flag_or_the_config_turns_it_off() {
        let none = BTreeMap::new();
        assert!(console_enabled(&args(&[]), &none).unwrap());
        assert!(!console_enabled(&args(&["--no-ui"]), &none).unwrap());
        let off = sections(json!({"ui": {"enabled": false}}));
        assert!(!console_enabled(&args(&[]), &off).unwrap());
        let on = sections(json!({"ui": {"enabled": true}}));
        assert!(console_enabled(&args(&[]), &on).unwrap());
        assert!(!console_enabled(&args(&["--no-ui"]), &on).unwrap());
        // A misspelt switch is an error that says what the section holds, not a silent default.
        let typo = sections(json!({"ui": {"enable": false}}));
        let err = console_enabled(&args(&[]), &typo).unwrap_err().0;
        assert!(err.contains("enable") && err.contains("\"ui\""), "{err}");
    }

    #[test]
    fn auth_is_off_unless_the_flag_or_the_setting_turns_it_on() {
        let config = sections(json!({"auth": {"roles": {"batch:driver": "operator"}}}));
        assert!(plan(&args(&[]), &config, false).unwrap().is_none());
        let on = plan(&args(&[]), &config, true).unwrap().unwrap();
        assert_eq!(on.switched_on_by, "inbound_auth_enabled");
        assert_eq!(
            on.roles.role_for(&sa("batch", "driver")),
            Some(Role::Operator)
        );
        let on = plan(&args(&["--auth-token-review"]), &config, false)
            .unwrap()
            .unwrap();
        assert_eq!(on.switched_on_by, "--auth-token-review");
    }

    #[test]
    fn flags_add_to_and_override_the_config_roles() {
        let config = sections(json!({"auth": {
            "roles": {"batch:driver": "viewer", "*:dash": "viewer"},
            "default_role": "viewer",
            "kubeconfig": "/cfg/kubeconfig"
        }}));
        let plan = plan(
            &args(&[
                "--auth-role",
                "batch:driver=operator",
                "--auth-role",
                "alice=admin",
                "--auth-default-role",
                "operator",
            ]),
            &config,
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            plan.roles.role_for(&sa("batch", "driver")),
            Some(Role::Operator)
        );
        assert_eq!(plan.roles.role_for(&sa("x", "dash")), Some(Role::Viewer));
        let alice = Identity {
            username: "alice".into(),
            groups: vec![],
            claimed_role: None,
        };
        assert_eq!(plan.roles.role_for(&alice), Some(Role::Admin));
        assert_eq!(plan.roles.default, Some(Role::Operator));
        assert_eq!(plan.kubeconfig, Some(PathBuf::from("/cfg/kubeconfig")));
    }

    #[rstest::rstest]
    #[case::setting(&[], true)]
    #[case::flag(&["--auth-token-review"], false)]
    fn auth_on_by_itself_makes_every_authenticated_caller_a_viewer(
        #[case] flags: &[&str],
        #[case] enabled: bool,
    ) {
        let plan = plan(&args(flags), &sections(json!({})), enabled)
            .unwrap()
            .unwrap();
        assert!(plan.implicit_default);
        assert_eq!(
            plan.roles.role_for(&sa("any", "caller")),
            Some(Role::Viewer)
        );
        let configured = super::plan(
            &args(flags),
            &sections(json!({"auth": {"roles": {"a:b": "operator"}}})),
            enabled,
        )
        .unwrap()
        .unwrap();
        assert!(!configured.implicit_default);
        assert_eq!(configured.roles.role_for(&sa("any", "caller")), None);
    }

    #[rstest::rstest]
    #[case(&["--auth-role", "a:b=operator"], json!({}), false, "need inbound auth on")]
    #[case(&[], json!({"auth": {"roles": {"a:b": "root"}}}), true, "serve.auth.roles[\"a:b\"]: role \"root\" is not known")]
    #[case(&[], json!({"auth": {"default_role": "boss"}}), true, "serve.auth.default_role")]
    #[case(&[], json!({"auth": {"role": {}}}), true, "unknown field `role`")]
    #[case(&[], json!({"auth": {"roles": {" ": "viewer"}}}), true, "empty key")]
    fn bad_settings_say_what_to_fix(
        #[case] flags: &[&str],
        #[case] section: Value,
        #[case] enabled: bool,
        #[case] expected: &str,
    ) {
        let err = plan(&args(flags), &sections(section), enabled).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }

    #[test]
    fn the_raw_provider_config_can_ask_for_auth() {
        assert!(inbound_auth_requested(
            &json!({"inbound_auth_enabled": true})
        ));
        assert!(inbound_auth_requested(
            &json!({"inbound_auth_enabled": "True"})
        ));
    }
}
