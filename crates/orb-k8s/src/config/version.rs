//! Kubernetes `MAJOR.MINOR` versions: parsing `min_kubernetes_version` and comparing it with
//! what the apiserver reports in `/version` (whose minor may carry a vendor `+`, e.g. "28+").

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubernetesVersion {
    pub major: u32,
    pub minor: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a Kubernetes version; write MAJOR.MINOR such as \"1.28\" (a leading 'v' and a patch number are accepted)"
)]
pub struct VersionError {
    pub value: String,
}

fn number(part: &str) -> Option<u32> {
    (!part.is_empty() && part.chars().all(|c| c.is_ascii_digit()))
        .then(|| part.parse().ok())
        .flatten()
}

/// Whether everything after `MAJOR.MINOR.` is digits then `-` or `+` and anything.
fn patch_with_suffix(body: &str, major: &str, minor: &str) -> bool {
    let rest = &body[major.len() + minor.len() + 2..];
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && matches!(rest[digits..].chars().next(), Some('-' | '+'))
}

impl KubernetesVersion {
    /// Accepts `1.28`, `v1.28`, `1.28.3` and a server's `v1.28.3-rc.1+abc`; the patch level
    /// (and any pre-release or build suffix after it) is ignored because support is decided
    /// per minor release.
    pub fn parse(value: &str) -> Result<Self, VersionError> {
        let err = || VersionError {
            value: value.to_string(),
        };
        let trimmed = value.trim();
        let body = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let parts: Vec<&str> = body.split('.').collect();
        let (major, minor) = match parts.as_slice() {
            [major, minor] => (major, minor),
            [major, minor, patch] if number(patch).is_some() => (major, minor),
            // A pre-release or build suffix only follows a patch number: "0-rc", "2+abc".
            [major, minor, _, ..] if patch_with_suffix(body, major, minor) => (major, minor),
            _ => return Err(err()),
        };
        Ok(Self {
            major: number(major).ok_or_else(err)?,
            minor: number(minor).ok_or_else(err)?,
        })
    }

    /// From the `major` / `minor` strings of the apiserver's version info. Managed clusters
    /// report minors like "28+", so trailing non-digits are dropped.
    pub fn from_server_info(major: &str, minor: &str) -> Result<Self, VersionError> {
        let digits = |s: &str| -> String { s.chars().take_while(char::is_ascii_digit).collect() };
        let err = || VersionError {
            value: format!("{major}.{minor}"),
        };
        Ok(Self {
            major: number(&digits(major)).ok_or_else(err)?,
            minor: number(&digits(minor)).ok_or_else(err)?,
        })
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::plain("1.28", Some((1, 28)))]
    #[case::v_prefix("v1.37", Some((1, 37)))]
    #[case::patch("1.28.3", Some((1, 28)))]
    #[case::spaces(" 1.30 ", Some((1, 30)))]
    #[case::major_only("1", None)]
    #[case::words("latest", None)]
    #[case::empty_minor("1.", None)]
    #[case::negative("1.-2", None)]
    #[case::four_parts("1.2.3.4", None)]
    #[case::bad_patch("1.28.x", None)]
    #[case::server_git_version("v1.37.2", Some((1, 37)))]
    #[case::pre_release_and_build("1.37.0-rc.1+abc", Some((1, 37)))]
    #[case::build_only("v1.37.2+k3s1", Some((1, 37)))]
    #[case::suffix_without_patch("1.37-rc.1", None)]
    #[case::suffix_without_digits("1.37.-rc", None)]
    fn parse(#[case] value: &str, #[case] expected: Option<(u32, u32)>) {
        let got = KubernetesVersion::parse(value)
            .ok()
            .map(|v| (v.major, v.minor));
        assert_eq!(got, expected);
    }

    #[rstest]
    #[case::older_minor("v1.27.9", "1.28", false)]
    #[case::same_minor_any_patch("v1.28.0-rc.1+abc", "1.28", true)]
    #[case::newer("1.37", "1.28", true)]
    #[case::numeric_not_lexical("1.10", "1.9", true)]
    #[case::newer_major("2.0", "1.37", true)]
    fn versions_compare_by_major_then_minor(
        #[case] server: &str,
        #[case] minimum: &str,
        #[case] new_enough: bool,
    ) {
        let server = KubernetesVersion::parse(server).unwrap();
        let minimum = KubernetesVersion::parse(minimum).unwrap();
        assert_eq!(server >= minimum, new_enough);
    }

    #[test]
    fn server_minor_with_vendor_suffix_compares_numerically() {
        let server = KubernetesVersion::from_server_info("1", "28+").unwrap();
        let min = KubernetesVersion::parse("1.28").unwrap();
        assert!(server >= min);
        assert!(
            KubernetesVersion::parse("1.9").unwrap() < KubernetesVersion::parse("1.10").unwrap()
        );
    }
}
