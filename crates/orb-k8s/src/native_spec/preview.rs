//! What a preview (validate, render, a listing's check) needs of a request it does not have:
//! an id of the real shape, fresh each time so no spec can recognise a preview by it, and the
//! name orb derives from it.

use orb_core::ProviderApi;
use orb_core::ids::RequestId;

use crate::config::NamingConfig;
use crate::naming::{self, ControllerKind, NamingError};

/// A fresh acquire request id (`req-<uuid v4>`), as a real acquire gets one; say wherever it
/// is shown that it is a preview.
pub fn preview_request_id() -> String {
    RequestId::new_acquire().to_string()
}

/// The name orb gives the object: the first pod of the request for a Pod, the controller name
/// otherwise.
pub fn object_name(
    api: ProviderApi,
    naming_config: &NamingConfig,
    request_id: &str,
) -> Result<String, NamingError> {
    let controller = match api {
        ProviderApi::Pod => return naming::pod_name(naming_config, request_id, 0),
        ProviderApi::Deployment => ControllerKind::Deployment,
        ProviderApi::StatefulSet => ControllerKind::StatefulSet,
        ProviderApi::Job => ControllerKind::Job,
    };
    naming::controller_name(naming_config, controller, request_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_ids_have_the_real_shape_and_are_fresh() {
        let (a, b) = (preview_request_id(), preview_request_id());
        assert_ne!(a, b);
        for id in [&a, &b] {
            let uuid = uuid::Uuid::parse_str(id.strip_prefix("req-").unwrap()).unwrap();
            assert_eq!(uuid.get_version_num(), 4, "{id}");
        }
    }
}
