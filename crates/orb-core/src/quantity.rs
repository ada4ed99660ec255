//! Just enough of the Kubernetes quantity grammar to size HostFactory templates:
//! CPU in cores (`"500m"`, `"2"`, `1.5`) and memory in bytes (`"2Gi"`, `"512M"`, `"1e9"`).
//! The provider hands full quantities to the apiserver untouched; this is only for `ncpus`/`nram`.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} quantity {value:?} is not a Kubernetes quantity; write it like \"500m\", \"2\", \"512Mi\" or \"4Gi\""
)]
pub struct QuantityError {
    pub what: &'static str,
    pub value: String,
}

const SUFFIXES: &[(&str, f64)] = &[
    ("Ki", 1024.0),
    ("Mi", 1024.0 * 1024.0),
    ("Gi", 1024.0 * 1024.0 * 1024.0),
    ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
];

/// Parses a quantity into its plain numeric value (cores for CPU, bytes for memory).
pub fn parse_quantity(what: &'static str, raw: &str) -> Result<f64, QuantityError> {
    let err = || QuantityError {
        what,
        value: raw.to_string(),
    };
    let text = raw.trim();
    if text.is_empty() {
        return Err(err());
    }
    let (number, multiplier) = SUFFIXES
        .iter()
        .find_map(|(suffix, factor)| text.strip_suffix(suffix).map(|n| (n, *factor)))
        .unwrap_or((text, 1.0));
    let starts_like_number = number
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '.' || c == '+' || c == '-');
    if !starts_like_number {
        return Err(err());
    }
    let value: f64 = number.parse().map_err(|_| err())?;
    if !value.is_finite() || value < 0.0 {
        return Err(err());
    }
    Ok(value * multiplier)
}

/// Whole CPUs for HostFactory `ncpus`: cores rounded up, at least 1.
pub fn cpus_for_hostfactory(raw: &str) -> Result<u64, QuantityError> {
    let cores = parse_quantity("cpu", raw)?;
    Ok((cores - 1e-9).ceil().max(1.0) as u64)
}

/// Memory in MiB for HostFactory `nram`, rounded up.
pub fn mebibytes_for_hostfactory(raw: &str) -> Result<u64, QuantityError> {
    let bytes = parse_quantity("memory", raw)?;
    Ok((bytes / (1024.0 * 1024.0) - 1e-9).ceil().max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::millicores("500m", 1)]
    #[case::whole("2", 2)]
    #[case::fraction("1.5", 2)]
    #[case::exact_millis("2000m", 2)]
    #[case::tiny("1m", 1)]
    fn cpus_round_up_to_at_least_one(#[case] raw: &str, #[case] cpus: u64) {
        assert_eq!(cpus_for_hostfactory(raw), Ok(cpus));
    }

    #[rstest]
    #[case::gibibytes("2Gi", 2048)]
    #[case::mebibytes("512Mi", 512)]
    #[case::decimal_megabytes("1G", 954)]
    #[case::plain_bytes("1048577", 2)]
    #[case::exponent("1e9", 954)]
    #[case::kibibytes("1024Ki", 1)]
    fn memory_becomes_mebibytes_rounded_up(#[case] raw: &str, #[case] mib: u64) {
        assert_eq!(mebibytes_for_hostfactory(raw), Ok(mib));
    }

    #[rstest]
    #[case::empty("")]
    #[case::words("lots")]
    #[case::unit_only("Gi")]
    #[case::negative("-1")]
    fn garbage_is_rejected_with_the_value(#[case] raw: &str) {
        let err = parse_quantity("memory", raw).unwrap_err();
        assert_eq!(err.value, raw);
        assert!(err.to_string().contains("512Mi"));
    }
}
