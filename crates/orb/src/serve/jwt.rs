//! `auth.type: "bearer"`: the reference broker's Bearer tokens, JWTs signed with a shared
//! secret (`auth.bearer_token.secret_key`, HS256 unless `algorithm` says HS384 or HS512).
//! A token is accepted when its signature holds, it carries `sub` and `exp`, and `exp` (and
//! `nbf`, when present) hold now; `sub` is the caller's name and the `roles` claim (or a
//! single `role`) the role the token grants, which the role mapping by name may override.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

use super::auth::{Identity, Role, TokenVerifier, VerifyError, VerifyFuture};

/// The shortest secret accepted: an HMAC key shorter than its hash is easy to guess.
pub const MIN_SECRET_BYTES: usize = 32;

/// What `auth.bearer_token` configures.
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("algorithms", &self.validation.algorithms)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BearerSection {
    secret_key: Option<String>,
    algorithm: Option<String>,
    /// How long the tokens the reference broker issues live; orb issues none, so it only
    /// checks each token's own `exp`.
    #[allow(dead_code)]
    token_expiry: Option<u64>,
}

impl JwtVerifier {
    /// The verifier `auth` (config.json's `auth` section, `type: "bearer"`) asks for, or every
    /// problem with it in one message.
    pub fn from_auth_section(auth: &Value) -> Result<Self, String> {
        let Some(section) = auth.get("bearer_token") else {
            return Err(
                "auth.type \"bearer\" needs auth.bearer_token.secret_key: the shared secret the \
                 tokens are signed with (at least 32 bytes)"
                    .into(),
            );
        };
        let section: BearerSection = serde_json::from_value(section.clone()).map_err(|e| {
            format!(
                "auth.bearer_token: {e}; it takes secret_key, algorithm (HS256, HS384 or \
                 HS512) and token_expiry"
            )
        })?;
        let mut problems = Vec::new();
        let secret = section.secret_key.unwrap_or_default();
        if secret.is_empty() {
            problems.push("auth.bearer_token.secret_key is missing or empty".to_string());
        } else if secret.len() < MIN_SECRET_BYTES {
            problems.push(format!(
                "auth.bearer_token.secret_key is {} bytes; use at least {MIN_SECRET_BYTES} \
                 (e.g. openssl rand -hex 32)",
                secret.len()
            ));
        }
        let algorithm = match section.algorithm.as_deref().unwrap_or("HS256") {
            "HS256" => Some(Algorithm::HS256),
            "HS384" => Some(Algorithm::HS384),
            "HS512" => Some(Algorithm::HS512),
            other => {
                problems.push(format!(
                    "auth.bearer_token.algorithm {other:?} is not one orb verifies with a shared \
                     secret; use HS256, HS384 or HS512"
                ));
                None
            }
        };
        let key = match DecodingKey::from_secret(secret.as_bytes()) {
            Ok(key) => Some(key),
            Err(e) => {
                problems.push(format!("auth.bearer_token.secret_key cannot be used: {e}"));
                None
            }
        };
        match (problems.is_empty(), algorithm, key) {
            (true, Some(algorithm), Some(key)) => {
                let mut validation = Validation::new(algorithm);
                validation.set_required_spec_claims(&["exp", "sub"]);
                validation.validate_nbf = true;
                validation.leeway = 30;
                Ok(Self { key, validation })
            }
            _ => Err(problems.join("; ")),
        }
    }

    /// Who `token` names, or why it is refused.
    pub fn identify(&self, token: &str) -> Result<Identity, VerifyError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|e| VerifyError::Rejected(refusal(&e)))?;
        let claims = data.claims;
        let sub = claims.sub.unwrap_or_default();
        if sub.trim().is_empty() {
            return Err(VerifyError::Rejected(
                "the token's sub claim is empty".into(),
            ));
        }
        let mut named: Vec<String> = claims.roles.unwrap_or_default();
        named.extend(claims.role);
        Ok(Identity {
            username: sub,
            claimed_role: named.iter().filter_map(|r| role_named(r)).max(),
            groups: named,
        })
    }
}

/// The reference broker's role names; `user` is its name for what orb calls operator.
fn role_named(name: &str) -> Option<Role> {
    match name.trim().to_ascii_lowercase().as_str() {
        "viewer" | "readonly" | "read-only" => Some(Role::Viewer),
        "user" | "operator" => Some(Role::Operator),
        "admin" => Some(Role::Admin),
        _ => None,
    }
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: Option<String>,
    #[serde(default)]
    roles: Option<Vec<String>>,
    #[serde(default)]
    role: Option<String>,
}

/// Why a token was refused, without echoing it.
fn refusal(error: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidSignature => "its signature does not match this server's secret".into(),
        ErrorKind::InvalidAlgorithm => {
            "it is signed with another algorithm than auth.bearer_token.algorithm".into()
        }
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no {claim} claim"),
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => "it is not a JWT".into(),
        other => format!("{other:?}"),
    }
}

impl TokenVerifier for JwtVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        let result = self.identify(token);
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn token(claims: Value, secret: &str, algorithm: Algorithm) -> String {
        encode(
            &Header::new(algorithm),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    fn now() -> i64 {
        jiff::Timestamp::now().as_second()
    }

    fn verifier() -> JwtVerifier {
        JwtVerifier::from_auth_section(
            &json!({"type": "bearer", "bearer_token": {"secret_key": SECRET}}),
        )
        .unwrap()
    }

    #[test]
    fn a_signed_token_names_its_subject_and_the_highest_role_it_claims() {
        let t = token(
            json!({"sub": "alice", "exp": now() + 600, "roles": ["viewer", "user", "pilot"]}),
            SECRET,
            Algorithm::HS256,
        );
        let who = verifier().identify(&t).unwrap();
        assert_eq!(who.username, "alice");
        assert_eq!(who.claimed_role, Some(Role::Operator));
        let single = token(
            json!({"sub": "bob", "exp": now() + 600, "role": "admin"}),
            SECRET,
            Algorithm::HS256,
        );
        assert_eq!(
            verifier().identify(&single).unwrap().claimed_role,
            Some(Role::Admin)
        );
        let none = token(
            json!({"sub": "carol", "exp": now() + 600}),
            SECRET,
            Algorithm::HS256,
        );
        assert_eq!(verifier().identify(&none).unwrap().claimed_role, None);
    }

    #[test]
    fn forged_expired_unsigned_and_incomplete_tokens_are_refused_with_why() {
        let v = verifier();
        let refused = |t: &str| match v.identify(t) {
            Err(VerifyError::Rejected(why)) => why,
            other => panic!("accepted: {other:?}"),
        };
        let forged = token(
            json!({"sub": "mallory", "exp": now() + 600, "roles": ["admin"]}),
            "another-secret-another-secret-xx",
            Algorithm::HS256,
        );
        assert!(
            refused(&forged).contains("signature"),
            "{}",
            refused(&forged)
        );
        let expired = token(
            json!({"sub": "alice", "exp": now() - 3600}),
            SECRET,
            Algorithm::HS256,
        );
        assert_eq!(refused(&expired), "the token has expired");
        let early = token(
            json!({"sub": "alice", "exp": now() + 7200, "nbf": now() + 3600}),
            SECRET,
            Algorithm::HS256,
        );
        assert!(refused(&early).contains("nbf"));
        let no_exp = token(json!({"sub": "alice"}), SECRET, Algorithm::HS256);
        assert_eq!(refused(&no_exp), "it has no exp claim");
        let no_sub = token(json!({"exp": now() + 600}), SECRET, Algorithm::HS256);
        assert_eq!(refused(&no_sub), "it has no sub claim");
        let other_alg = token(
            json!({"sub": "a", "exp": now() + 600}),
            SECRET,
            Algorithm::HS512,
        );
        assert!(
            refused(&other_alg).contains("algorithm"),
            "{}",
            refused(&other_alg)
        );
        // alg "none" (an unsigned token) is never accepted.
        let unsigned = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIiwiZXhwIjo0MTAyNDQ0ODAwfQ.";
        refused(unsigned);
        assert_eq!(refused("not a token"), "it is not a JWT");
    }

    #[test]
    fn the_bearer_section_is_checked_with_every_problem_at_once() {
        let err = JwtVerifier::from_auth_section(&json!({"type": "bearer"})).unwrap_err();
        assert!(err.contains("auth.bearer_token.secret_key"), "{err}");
        let err = JwtVerifier::from_auth_section(
            &json!({"bearer_token": {"secret_key": "short", "algorithm": "RS256"}}),
        )
        .unwrap_err();
        assert!(err.contains("5 bytes; use at least 32"), "{err}");
        assert!(err.contains("\"RS256\""), "{err}");
        let err = JwtVerifier::from_auth_section(
            &json!({"bearer_token": {"secret_key": SECRET, "secret": "x"}}),
        )
        .unwrap_err();
        assert!(err.contains("unknown field `secret`"), "{err}");
        let hs512 = JwtVerifier::from_auth_section(
            &json!({"bearer_token": {"secret_key": SECRET, "algorithm": "HS512", "token_expiry": 60}}),
        )
        .unwrap();
        let t = token(
            json!({"sub": "a", "exp": now() + 600}),
            SECRET,
            Algorithm::HS512,
        );
        assert_eq!(hs512.identify(&t).unwrap().username, "a");
    }
}
