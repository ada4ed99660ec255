//! Masking secrets in configuration documents before anyone sees them. A value is masked
//! when its key names a secret (`token`, `password`, `api_key`, `credentials`, …), when it is
//! a bearer credential, and a URL keeps its user but loses its password (`user:pass@` and
//! `?password=`, both masked by `orb_store::redact`). Keys that only say
//! where a secret lives (`token_file`, `kubeconfig_path`, `default_image_pull_secret`, the
//! *name* of a Secret object) are not secrets and stay readable.

use serde_json::Value;

/// What a masked value reads as (the same mark `orb_store::redact` puts in a URL).
pub const REDACTED: &str = "***";

/// Words that make a key a secret, matched against the key's `_`/`-`-separated words.
const SECRET_WORDS: &[&str] = &[
    "token",
    "tokens",
    "password",
    "passwd",
    "pwd",
    "secret",
    "credential",
    "credentials",
    "bearer",
    "apikey",
    "authorization",
];

/// Two-word secrets written with a separator (`api_key`, `private_key`).
const SECRET_PAIRS: &[(&str, &str)] = &[("api", "key"), ("private", "key"), ("access", "key")];

/// Last words of keys that point at a secret rather than hold it.
const REFERENCE_WORDS: &[&str] = &["file", "path", "dir", "name", "ref"];

/// Provider fields that name a Kubernetes Secret object; the name is not its content.
const SECRET_OBJECT_NAMES: &[&str] = &["default_image_pull_secret"];

/// `apiKey`, `api_key` and `api-key` all become `["api", "key"]`.
fn words_of(key: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    let mut previous_lower = false;
    for c in key.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            words.push(String::new());
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower {
            words.push(String::new());
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        if let Some(last) = words.last_mut() {
            last.push(c.to_ascii_lowercase());
        }
    }
    words.retain(|w| !w.is_empty());
    words
}

fn is_secret_key(key: &str) -> bool {
    if SECRET_OBJECT_NAMES.contains(&key.to_ascii_lowercase().as_str()) {
        return false;
    }
    let words = words_of(key);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    if words.last().is_some_and(|w| REFERENCE_WORDS.contains(w)) {
        return false;
    }
    words.iter().any(|w| SECRET_WORDS.contains(w))
        || words
            .windows(2)
            .any(|pair| SECRET_PAIRS.contains(&(pair[0], pair[1])))
}

/// A string that carries a credential by its form, whatever its key.
fn redact_text(text: &str) -> Option<String> {
    let lower = text.trim_start().to_ascii_lowercase();
    if lower.starts_with("bearer ") || lower.starts_with("basic ") {
        return Some(REDACTED.to_string());
    }
    let masked = orb_store::redact(text);
    (masked != text).then_some(masked)
}

/// Masks every secret in `value`, in place. Nulls stay null (nothing is set, nothing to hide).
pub fn redact_secrets(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if is_secret_key(key) && !child.is_null() {
                    *child = Value::String(REDACTED.to_string());
                } else {
                    redact_secrets(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secrets),
        Value::String(text) => {
            if let Some(masked) = redact_text(text) {
                *text = masked;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case("token", true)]
    #[case("auth_token", true)]
    #[case("bearerToken", true)]
    #[case("apiKey", true)]
    #[case("tokenFile", false)]
    #[case("password", true)]
    #[case("db-password", true)]
    #[case("api_key", true)]
    #[case("client_secret", true)]
    #[case("credentials", true)]
    #[case("token_file", false)]
    #[case("kubeconfig_path", false)]
    #[case("default_image_pull_secret", false)]
    #[case("namespace", false)]
    #[case("inbound_auth_enabled", false)]
    fn keys_that_hold_secrets(#[case] key: &str, #[case] secret: bool) {
        assert_eq!(is_secret_key(key), secret, "{key}");
    }

    #[test]
    fn secrets_are_masked_wherever_they_sit() {
        let mut doc = json!({
            "storage": {"url": "postgres://orb:s3cret@db:5432/orb"},
            "daemon": {"token_file": "/run/orb/token"},
            "auth": {"type": "bearer", "token": "abc", "password": null},
            "providers": [{"config": {"namespace": "batch", "api_key": "k",
                                      "headers": ["Bearer xyz"]}}],
        });
        redact_secrets(&mut doc);
        assert_eq!(doc["storage"]["url"], "postgres://orb:***@db:5432/orb");
        assert_eq!(doc["daemon"]["token_file"], "/run/orb/token");
        assert_eq!(doc["auth"]["token"], REDACTED);
        assert_eq!(doc["auth"]["type"], "bearer");
        assert_eq!(doc["auth"]["password"], Value::Null);
        assert_eq!(doc["providers"][0]["config"]["api_key"], REDACTED);
        assert_eq!(doc["providers"][0]["config"]["headers"][0], REDACTED);
        assert_eq!(doc["providers"][0]["config"]["namespace"], "batch");
        assert!(!doc.to_string().contains("s3cret"));
    }
}
