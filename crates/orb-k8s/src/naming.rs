//! Generated resource names: `<prefix>-<uuid_segment>` for Deployments, StatefulSets and Jobs,
//! `<prefix>-<uuid_segment>-<seq:04d>` for bare Pods, with per-kind length budgets.
//!
//! Names are cosmetic (orb finds its objects by the request-id label) but must be valid and
//! short enough that controller-generated pod names stay within 63 characters.

use orb_core::ProviderApi;

use crate::config::NamingConfig;

/// Longest allowed `naming.prefix`.
pub const MAX_PREFIX_LEN: usize = 20;
/// `-` plus the four-digit sequence of a bare pod name.
const POD_SEQUENCE_SUFFIX_LEN: usize = 5;

/// What naming knows about each of the four kinds orb manages (orb-core's `ProviderApi`):
/// which `naming.*` setting holds its length budget and what that budget is by default.
pub trait KindNaming {
    /// The `naming.*` field holding this kind's length budget.
    fn budget_field(self) -> &'static str;
    /// Seed default budget: 63 minus what the kind's controller appends to pod names
    /// (ReplicaSet hash 16, StatefulSet ordinal 6, Job suffix 13).
    fn default_budget(self) -> u32;
}

impl KindNaming for ProviderApi {
    fn budget_field(self) -> &'static str {
        match self {
            Self::Pod => "max_pod_name_len",
            Self::Deployment => "max_deployment_name_len",
            Self::StatefulSet => "max_statefulset_name_len",
            Self::Job => "max_job_name_len",
        }
    }

    fn default_budget(self) -> u32 {
        match self {
            Self::Pod => 63,
            Self::Deployment => 47,
            Self::StatefulSet => 57,
            Self::Job => 50,
        }
    }
}

/// Kinds that own pods through a controller and get a single `<prefix>-<uuid_segment>` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerKind {
    Deployment,
    StatefulSet,
    Job,
}

impl From<ControllerKind> for ProviderApi {
    fn from(kind: ControllerKind) -> Self {
        match kind {
            ControllerKind::Deployment => Self::Deployment,
            ControllerKind::StatefulSet => Self::StatefulSet,
            ControllerKind::Job => Self::Job,
        }
    }
}

impl NamingConfig {
    pub fn budget(&self, kind: ProviderApi) -> u32 {
        match kind {
            ProviderApi::Pod => self.max_pod_name_len,
            ProviderApi::Deployment => self.max_deployment_name_len,
            ProviderApi::StatefulSet => self.max_statefulset_name_len,
            ProviderApi::Job => self.max_job_name_len,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    #[error(
        "request id {request_id:?} has {found} hex digits but names need {needed} \
         (naming.uuid_chars); use an id orb minted (req-<uuid>) or lower naming.uuid_chars"
    )]
    NotEnoughHexDigits {
        request_id: String,
        found: usize,
        needed: usize,
    },
    #[error(
        "{kind} name {name:?} is {len} characters, over the budget of {budget} \
         (naming.{field}); shorten naming.prefix, lower naming.uuid_chars or split the request",
        len = name.len(),
        field = kind.budget_field()
    )]
    TooLong {
        kind: ProviderApi,
        name: String,
        budget: u32,
    },
}

/// The first `uuid_chars` hex digits of the request id, lowercased, with the `req-`/`ret-`
/// prefix and hyphens removed (`req-fe4cda5c-0194-…` → `fe4cda5c0194…`).
pub fn uuid_segment(request_id: &str, uuid_chars: u32) -> Result<String, NamingError> {
    let body = ["req-", "ret-"]
        .iter()
        .find_map(|p| request_id.strip_prefix(p))
        .unwrap_or(request_id);
    let hex: String = body
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let needed = uuid_chars as usize;
    if hex.len() < needed {
        return Err(NamingError::NotEnoughHexDigits {
            request_id: request_id.to_string(),
            found: hex.len(),
            needed,
        });
    }
    Ok(hex[..needed].to_string())
}

fn within_budget(
    naming: &NamingConfig,
    kind: ProviderApi,
    name: String,
) -> Result<String, NamingError> {
    let budget = naming.budget(kind);
    if name.len() > budget as usize {
        return Err(NamingError::TooLong { kind, name, budget });
    }
    Ok(name)
}

/// `<prefix>-<uuid_segment>` for a Deployment, StatefulSet or Job.
pub fn controller_name(
    naming: &NamingConfig,
    kind: ControllerKind,
    request_id: &str,
) -> Result<String, NamingError> {
    let segment = uuid_segment(request_id, naming.uuid_chars)?;
    within_budget(naming, kind.into(), format!("{}-{segment}", naming.prefix))
}

/// `<prefix>-<uuid_segment>-<seq:04d>` for the `seq`-th bare pod of a request.
pub fn pod_name(naming: &NamingConfig, request_id: &str, seq: u32) -> Result<String, NamingError> {
    let segment = uuid_segment(request_id, naming.uuid_chars)?;
    within_budget(
        naming,
        ProviderApi::Pod,
        format!("{}-{segment}-{seq:04}", naming.prefix),
    )
}

/// Names for pods `0..count` of a request.
pub fn pod_names(
    naming: &NamingConfig,
    request_id: &str,
    count: u32,
) -> Result<Vec<String>, NamingError> {
    (0..count)
        .map(|seq| pod_name(naming, request_id, seq))
        .collect()
}

/// A kind whose longest generated name would not fit its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetOverflow {
    pub kind: ProviderApi,
    pub name_len: usize,
    pub budget: u32,
    /// How the length adds up, e.g. "prefix 20 + '-' + 32 uuid chars".
    pub shape: String,
    fixed_len: usize,
    prefix_len: usize,
    uuid_chars: usize,
}

impl BudgetOverflow {
    /// Longest prefix that fits with the current `uuid_chars`; `None` if even "" does not.
    pub fn max_prefix_len(&self) -> Option<usize> {
        let room = (self.budget as usize).checked_sub(self.fixed_len + self.uuid_chars)?;
        (room >= 1).then_some(room.min(MAX_PREFIX_LEN))
    }

    /// Largest `uuid_chars` that fits with the current prefix (may be below the minimum of 8).
    pub fn max_uuid_chars(&self) -> usize {
        (self.budget as usize).saturating_sub(self.fixed_len + self.prefix_len)
    }
}

/// Checks, for every kind, that the longest name the naming config can produce fits its
/// budget (a pod's four-digit sequence included). Startup validation reports each overflow.
pub fn budget_overflows(naming: &NamingConfig) -> Vec<BudgetOverflow> {
    let prefix_len = naming.prefix.len();
    let uuid_chars = naming.uuid_chars as usize;
    ProviderApi::ALL
        .into_iter()
        .filter_map(|kind| {
            let (fixed_len, shape) = match kind {
                ProviderApi::Pod => (
                    1 + POD_SEQUENCE_SUFFIX_LEN,
                    format!("prefix {prefix_len} + '-' + {uuid_chars} uuid chars + '-0000'"),
                ),
                _ => (
                    1,
                    format!("prefix {prefix_len} + '-' + {uuid_chars} uuid chars"),
                ),
            };
            let name_len = prefix_len + fixed_len + uuid_chars;
            let budget = naming.budget(kind);
            (name_len > budget as usize).then_some(BudgetOverflow {
                kind,
                name_len,
                budget,
                shape,
                fixed_len,
                prefix_len,
                uuid_chars,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const REQ: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

    fn naming(prefix: &str, uuid_chars: u32) -> NamingConfig {
        NamingConfig {
            prefix: prefix.into(),
            uuid_chars,
            ..NamingConfig::default()
        }
    }

    #[test]
    fn default_pod_name_matches_the_historical_pattern() {
        assert_eq!(
            pod_name(&NamingConfig::default(), REQ, 0).unwrap(),
            "orb-fe4cda5c019444bc981b-0000"
        );
    }

    #[rstest]
    #[case::deployment(ControllerKind::Deployment)]
    #[case::statefulset(ControllerKind::StatefulSet)]
    #[case::job(ControllerKind::Job)]
    fn controllers_are_named_prefix_dash_segment(#[case] kind: ControllerKind) {
        assert_eq!(
            controller_name(&naming("my-orb", 8), kind, REQ).unwrap(),
            "my-orb-fe4cda5c"
        );
    }

    #[test]
    fn pod_names_count_up_with_four_digits() {
        let names = pod_names(&naming("orb", 8), REQ, 3).unwrap();
        assert_eq!(
            names,
            vec![
                "orb-fe4cda5c-0000",
                "orb-fe4cda5c-0001",
                "orb-fe4cda5c-0002"
            ]
        );
    }

    #[test]
    fn return_ids_and_uppercase_hex_give_the_same_segment() {
        let upper = "ret-FE4CDA5C-0194-44BC-981B-0A2B3C4D5E6F";
        assert_eq!(uuid_segment(upper, 12).unwrap(), "fe4cda5c0194");
    }

    #[test]
    fn too_few_hex_digits_is_an_error_naming_the_id() {
        let err = uuid_segment("r-010d8f03b", 20).unwrap_err();
        assert_eq!(
            err,
            NamingError::NotEnoughHexDigits {
                request_id: "r-010d8f03b".into(),
                found: 9,
                needed: 20
            }
        );
    }

    #[test]
    fn a_five_digit_sequence_that_overflows_the_pod_budget_is_refused() {
        let tight = NamingConfig {
            max_pod_name_len: 17,
            ..naming("orb", 8)
        };
        assert_eq!(pod_name(&tight, REQ, 9999).unwrap(), "orb-fe4cda5c-9999");
        let err = pod_name(&tight, REQ, 10000).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Pod name \"orb-fe4cda5c-10000\" is 18 characters, over the budget of 17 (naming.max_pod_name_len)"),
            "{err}"
        );
    }

    #[test]
    fn defaults_fit_every_budget() {
        assert!(budget_overflows(&NamingConfig::default()).is_empty());
    }

    #[test]
    fn longest_prefix_and_uuid_overflow_deployment_and_job_only() {
        let overflows = budget_overflows(&naming(&"a".repeat(20), 32));
        let kinds: Vec<ProviderApi> = overflows.iter().map(|o| o.kind).collect();
        assert_eq!(kinds, vec![ProviderApi::Deployment, ProviderApi::Job]);
        let deployment = &overflows[0];
        assert_eq!((deployment.name_len, deployment.budget), (53, 47));
        assert_eq!(deployment.max_prefix_len(), Some(14));
        assert_eq!(deployment.max_uuid_chars(), 26);
    }

    #[test]
    fn pod_budget_counts_the_sequence_suffix() {
        let tight = NamingConfig {
            max_pod_name_len: 28,
            ..NamingConfig::default()
        };
        let overflows = budget_overflows(&tight);
        assert_eq!(overflows.len(), 1);
        assert_eq!(overflows[0].kind, ProviderApi::Pod);
        assert_eq!(overflows[0].name_len, 29);
        assert_eq!(overflows[0].max_prefix_len(), Some(2));
    }
}
